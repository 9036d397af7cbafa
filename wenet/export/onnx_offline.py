"""The whole-utterance graphs of an ONNX model directory: ``encoder.onnx`` (full
context, batched), ``ctc.onnx`` (the CTC head) and ``decoder.onnx`` (the attention
rescoring decoder). Names and shapes: docs/onnx_format.md.

``encoder.onnx`` is the encoder's own ``forward`` with full context
(``decoding_chunk_size`` -1), the global CMVN included, so a runtime feeds raw fbank.
Every length (the padding masks, the subsampled lengths, the positional table's
slice) is computed from tensors in the graph, so a batch of any size and length runs
in it; tests/export/test_onnx_models.py checks this on batches unlike the tracing
example, padded rows included.
"""
from __future__ import annotations

from typing import Any, Mapping, Tuple

import torch

from wenet.export.onnx_common import common_metadata, encoder_metadata, export_graph


class FullContextEncoderONNX(torch.nn.Module):
    """feats (N, T, F), feats_lens (N,) -> encoder_out (N, T', D), encoder_out_lens (N,)."""

    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, feats: torch.Tensor, feats_lens: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        encoder_out, mask = self.encoder(feats, feats_lens, -1, -1)
        return encoder_out, mask.squeeze(1).sum(1).to(torch.int64)


class CTCHeadONNX(torch.nn.Module):
    """hidden (N, T, D) -> CTC log-probabilities (N, T, V)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.ctc_activation(hidden)


class RescoringDecoderONNX(torch.nn.Module):
    """forward_attention_decoder with the model's reverse_weight fixed at export."""

    def __init__(self, model: torch.nn.Module, reverse_weight: float):
        super().__init__()
        self.model = model
        self.reverse_weight = reverse_weight

    def forward(self, hyps: torch.Tensor, hyps_lens: torch.Tensor,
                encoder_out: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.model.forward_attention_decoder(hyps, hyps_lens, encoder_out,
                                                    self.reverse_weight)


def tracing_batch(encoder: torch.nn.Module, feat_dim: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The example the full-context encoder is traced on: two utterances, the second
    padded. Its lengths are not multiples of the subsampling or of the Zipformer's
    downsampling factors, so no shape-dependent branch is taken only for round sizes."""
    frames = 8 * encoder.min_input_frames() + 13
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(2, frames, feat_dim, generator=g)
    return feats, torch.tensor([frames, frames - 11], dtype=torch.int64)


def export_encoder(model: torch.nn.Module, configs: Mapping[str, Any], path: str) -> None:
    """Write ``encoder.onnx``: the full-context batched encoder, with the encoder keys."""
    feats, feats_lens = tracing_batch(model.encoder, int(configs["input_dim"]))
    export_graph(FullContextEncoderONNX(model.encoder), (feats, feats_lens), path,
                 ["feats", "feats_lens"], ["encoder_out", "encoder_out_lens"],
                 {"feats": {0: "N", 1: "T"}, "feats_lens": {0: "N"},
                  "encoder_out": {0: "N", 1: "T_OUT"}, "encoder_out_lens": {0: "N"}},
                 encoder_metadata(model, configs))


def export_ctc(model: torch.nn.Module, configs: Mapping[str, Any], path: str) -> None:
    """Write ``ctc.onnx``: hidden -> probs (log-probabilities)."""
    hidden = torch.randn(2, 7, model.encoder.output_size())
    export_graph(CTCHeadONNX(model), (hidden,), path, ["hidden"], ["probs"],
                 {"hidden": {0: "N", 1: "T"}, "probs": {0: "N", 1: "T"}},
                 common_metadata(model, configs))


def export_decoder(model: torch.nn.Module, configs: Mapping[str, Any], path: str) -> None:
    """Write ``decoder.onnx``: the rescoring decoder(s), reverse_weight of the training
    (the right-to-left decoder runs only when it is > 0; r_score is otherwise the
    placeholder scalar ``forward_attention_decoder`` returns)."""
    sos = int(model.sos_symbol())
    hyps = torch.tensor([[sos, 1, 2, 3], [sos, 4, 5, 0], [sos, 6, 0, 0]], dtype=torch.int64)
    hyps_lens = torch.tensor([4, 3, 2], dtype=torch.int64)
    encoder_out = torch.randn(1, 9, model.encoder.output_size())
    reverse_weight = float(model.reverse_weight) if model.is_bidirectional_decoder() else 0.0
    axes = {"hyps": {0: "NUM_HYPS", 1: "L"}, "hyps_lens": {0: "NUM_HYPS"},
            "encoder_out": {1: "T"}, "score": {0: "NUM_HYPS", 1: "L"}}
    if reverse_weight > 0.0:
        axes["r_score"] = {0: "NUM_HYPS", 1: "L"}
    export_graph(RescoringDecoderONNX(model, reverse_weight), (hyps, hyps_lens, encoder_out),
                 path, ["hyps", "hyps_lens", "encoder_out"], ["score", "r_score"], axes,
                 common_metadata(model, configs))


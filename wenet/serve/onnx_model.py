"""The streaming server's model from an exported ONNX directory (``serve.py --onnx_dir``).

:class:`OnnxStreamingModel` gives the sessions of ``wenet.runtime.session.OnnxModel``
(``encoder_chunk.onnx``, ``ctc.onnx``, ``decoder.onnx``; for transducers
:class:`OnnxStreamingTransducer` adds ``encoder_proj``, ``predictor`` and ``joiner``) the
interface :class:`~wenet.inference.streaming.StreamingRecognizer` calls on an eager or
TorchScript model (``forward_encoder_chunk``, ``ctc_activation``, a ``decoder`` for
rescoring, the transducer steps), with torch tensors in and out, so the server's
sessions, searches, endpointing and word times are the same code whichever model runs.

``encoder_chunk.onnx`` has fixed-size caches (docs/onnx_format.md): its chunk size and
left chunks were chosen at export, so a stream uses exactly those
(``fixed_chunking``; the recognizer refuses others). Its output equals the eager
model's chunk-by-chunk output with the same ``chunk_size`` and ``num_left_chunks``
(``recognize.py --simulate_streaming --decoding_chunk_size C --num_decoding_left_chunks
L``), so the final results do too, up to float rounding.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import numpy as np
import torch

if TYPE_CHECKING:  # onnxruntime is imported by whoever loads the model
    from wenet.runtime.session import OnnxModel


def _np(x: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(x.detach().cpu().numpy())


class _OnnxDecoder:
    """``decoder.onnx`` called as ``wenet.decode.attention.score_hyps`` calls a decoder:
    ``(memory, memory_mask, ys_in, ys_lens, r_ys_in, reverse_weight) -> (l_x, r_x, _)``.
    The graph returns log-probabilities (log_softmax leaves them as they are) and builds
    the right-to-left inputs from ``ys_in`` itself, as ``r_ys_in`` is built; all
    hypotheses belong to one utterance (a stream's sentence)."""

    def __init__(self, model: OnnxModel) -> None:
        self.model = model

    def __call__(self, memory: torch.Tensor, memory_mask: torch.Tensor, ys_in: torch.Tensor,
                 ys_lens: torch.Tensor, r_ys_in: torch.Tensor, reverse_weight: float = 0.0
                 ) -> Tuple[torch.Tensor, torch.Tensor, None]:
        del memory_mask, r_ys_in, reverse_weight  # one utterance, all frames valid
        score, r_score = self.model.decoder_scores(
            _np(ys_in).astype(np.int64), _np(ys_lens).astype(np.int64), _np(memory[:1]))
        return torch.from_numpy(score), torch.from_numpy(np.asarray(r_score)), None


class OnnxStreamingModel:
    """A CTC + attention model's ONNX sessions behind the streaming model interface."""

    def __init__(self, model: OnnxModel) -> None:
        if model.encoder_chunk is None:
            raise ValueError(f"{model.dir}: loaded without encoder_chunk.onnx "
                             "(OnnxModel(..., streaming=True))")
        self.onnx = model
        self.info = model.info
        window = model.chunks.window
        self.chunk_size, self.left_chunks = window.chunk_size, window.num_left_chunks
        self.required_cache_size = window.required_cache_size
        self.decoder = _OnnxDecoder(model) if model.decoder is not None else None

    # what the export fixed, and the model's constants

    def fixed_chunking(self) -> Tuple[int, int]:
        """(chunk_size, num_left_chunks) every stream must use: the export's."""
        return self.chunk_size, self.left_chunks

    def is_streaming(self) -> bool:
        return True

    def subsampling_rate(self) -> int:
        return self.info.subsampling_rate

    def right_context(self) -> int:
        return self.info.right_context

    def sos_symbol(self) -> int:
        return self.info.sos

    def eos_symbol(self) -> int:
        return self.info.eos

    def is_bidirectional_decoder(self) -> bool:
        return self.info.bidirectional_decoder

    # the streaming step

    def forward_encoder_chunk(self, xs: torch.Tensor, offset: int, required_cache_size: int,
                              att_cache: torch.Tensor, cnn_cache: torch.Tensor
                              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk (1, T, F) of raw fbank -> (1, T', D) and the new caches. Empty caches
        (a new sentence) start as the graph's zeros; ``required_cache_size`` must be the
        export's (a ValueError otherwise)."""
        if required_cache_size != self.required_cache_size:
            raise ValueError(f"{self.onnx.dir}: encoder_chunk.onnx keeps "
                             f"{self.required_cache_size} cache frames (chunk_size "
                             f"{self.chunk_size}, left_chunks {self.left_chunks} at export); "
                             f"asked for {required_cache_size}")
        if att_cache.numel() == 0:
            att, cnn = self.onnx.init_caches()
        else:
            att, cnn = _np(att_cache), _np(cnn_cache)
        ys, r_att, r_cnn = self.onnx.encode_chunk(_np(xs), offset, att, cnn)
        return torch.from_numpy(ys), torch.from_numpy(r_att), torch.from_numpy(r_cnn)

    def ctc_activation(self, xs: torch.Tensor) -> torch.Tensor:
        """CTC log-probabilities (1, T, V) of an encoder output chunk."""
        return torch.from_numpy(self.onnx.ctc_logprobs(_np(xs)))


class OnnxStreamingTransducer(OnnxStreamingModel):
    """A transducer's ONNX sessions: the streaming step plus the transducer interface
    (``wenet.decode.transducer``'s searches and the lattice alignment call these)."""

    def __init__(self, model: OnnxModel) -> None:
        super().__init__(model)
        self._net = model.transducer()

    def blank_symbol(self) -> int:
        return self.info.blank_id

    def big_blank_ids(self) -> List[int]:
        return list(self.info.big_blank_ids)

    def big_blank_durations(self) -> List[int]:
        return list(self.info.big_blank_durations)

    def project_encoder(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., J), as the joint's Linear: (T, D) frames go through the
        graph's (N, T, D) input as one batch."""
        x = _np(encoder_out)
        flat = x.reshape(1, -1, x.shape[-1])
        out = self._net.project_encoder(flat)
        return torch.from_numpy(out.reshape(*x.shape[:-1], out.shape[-1]))

    def predictor_init_state(self, batch: int) -> List[torch.Tensor]:
        return [torch.from_numpy(s) for s in self._net.predictor_init_state(batch)]

    def forward_predictor_step(self, tokens: torch.Tensor, state: Sequence[torch.Tensor]
                               ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        pred, new_state = self._net.predictor_step(_np(tokens), [_np(s) for s in state])
        return torch.from_numpy(pred), [torch.from_numpy(s) for s in new_state]

    def forward_joint_step(self, enc_proj: torch.Tensor, pred_proj: torch.Tensor
                           ) -> torch.Tensor:
        return torch.from_numpy(self._net.joint(_np(enc_proj), _np(pred_proj)))


def streaming_model(model: OnnxModel) -> OnnxStreamingModel:
    """The adapter for ``model``'s kind (transducer or CTC + attention)."""
    if model.info.model_type == "transducer":
        return OnnxStreamingTransducer(model)
    return OnnxStreamingModel(model)


def chunking(model: OnnxStreamingModel, chunk_size: Optional[int],
             num_left_chunks: Optional[int]) -> Tuple[int, int]:
    """The export's (chunk_size, left chunks); a ValueError when a given value differs."""
    fixed = model.fixed_chunking()
    for name, asked, have in (("chunk_size", chunk_size, fixed[0]),
                              ("num_left_chunks", num_left_chunks, fixed[1])):
        if asked is not None and asked != have:
            raise ValueError(
                f"{model.onnx.dir}: encoder_chunk.onnx was exported with chunk_size "
                f"{fixed[0]} and left_chunks {fixed[1]} (fixed-size caches); {name} {asked} "
                "needs another export (wenet/bin/export_onnx.py --chunk_size N "
                "--num_decoding_left_chunks L)")
    return fixed

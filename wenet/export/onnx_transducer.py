"""The transducer's decoding graphs: ``encoder_proj.onnx`` (the joint's encoder
projection, once per frame), ``predictor.onnx`` (one step of the prediction network,
through the joint's predictor projection) and ``joiner.onnx`` (the joint's output
layer on two projected inputs). They are the TorchScript decoding interface of
``TransducerModel`` (``project_encoder``, ``forward_predictor_step``,
``forward_joint_step``), so an ONNX search computes what the eager searches do.

The predictor's state is a list of batch-first tensors whose number, dtypes and shapes
depend on the predictor (stateless: the ``context_size - 1`` previous tokens, int64;
LSTM: h and c, float32). The graph takes them as ``state_0 .. state_{S-1}`` and
returns ``r_state_0 ..``; the encoder files' metadata describe them
(``predictor_state_*``). Names and shapes: docs/onnx_format.md.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Tuple

import torch

from wenet.export.onnx_common import common_metadata, export_graph, predictor_state_layout


class EncoderProjONNX(torch.nn.Module):
    """encoder_out (N, T, D) -> enc_proj (N, T, J)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, encoder_out: torch.Tensor) -> torch.Tensor:
        return self.model.project_encoder(encoder_out)


class PredictorStepONNX(torch.nn.Module):
    """tokens (N, 1), *states -> pred_proj (N, J), *new states."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, *states: torch.Tensor
                ) -> Tuple[torch.Tensor, ...]:
        pred_proj, new_states = self.model.forward_predictor_step(tokens.reshape(-1),
                                                                  list(states))
        return (pred_proj, *new_states)


class JoinerONNX(torch.nn.Module):
    """enc_proj (N, J), pred_proj (N, J) -> logits (N, V')."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, enc_proj: torch.Tensor, pred_proj: torch.Tensor) -> torch.Tensor:
        return self.model.forward_joint_step(enc_proj, pred_proj)


def state_names(num_states: int) -> Tuple[List[str], List[str]]:
    """(input names, output names) of the predictor's states."""
    return ([f"state_{i}" for i in range(num_states)],
            [f"r_state_{i}" for i in range(num_states)])


def export_transducer(model: torch.nn.Module, configs: Mapping[str, Any],
                      encoder_proj_path: str, predictor_path: str, joiner_path: str) -> None:
    """Write ``encoder_proj.onnx``, ``predictor.onnx`` and ``joiner.onnx``."""
    meta = common_metadata(model, configs)
    join_dim = int(model.joint.enc_proj.out_features)
    encoder_out = torch.randn(2, 7, model.encoder.output_size())
    export_graph(EncoderProjONNX(model), (encoder_out,), encoder_proj_path, ["encoder_out"],
                 ["enc_proj"], {"encoder_out": {0: "N", 1: "T"}, "enc_proj": {0: "N", 1: "T"}},
                 meta)

    batch = 3
    tokens = torch.tensor([[1], [2], [3]], dtype=torch.int64)
    # a state that is not the initial one, so no constant of it can be folded in
    states = [(s.expand(batch, *s.shape[1:]) + 1) if s.is_floating_point()
              else s.expand(batch, *s.shape[1:]).clone().fill_(2)
              for s in predictor_state_layout(model)]
    inputs, outputs = state_names(len(states))
    axes = {name: {0: "N"} for name in ["tokens", "pred_proj", *inputs, *outputs]}
    export_graph(PredictorStepONNX(model), (tokens, *states), predictor_path,
                 ["tokens", *inputs], ["pred_proj", *outputs], axes, meta)

    enc_proj, pred_proj = torch.randn(batch, join_dim), torch.randn(batch, join_dim)
    export_graph(JoinerONNX(model), (enc_proj, pred_proj), joiner_path,
                 ["enc_proj", "pred_proj"], ["logits"],
                 {"enc_proj": {0: "N"}, "pred_proj": {0: "N"}, "logits": {0: "N"}}, meta)

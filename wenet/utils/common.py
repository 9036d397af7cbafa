"""Tensor helpers the models share: the padding label id, decoder targets with
sos/eos and reversed, token accuracy, activations by config name."""
from __future__ import annotations

from typing import List, Tuple

import torch

# Label id used to pad target sequences; losses skip it.
IGNORE_ID = -1


def pad_list(xs: List[torch.Tensor], pad_value: float) -> torch.Tensor:
    """Stack tensors of different first-dim lengths into (B, Tmax, ...), padded with pad_value."""
    if len(xs) == 0:
        raise ValueError("pad_list: empty list")
    max_len = max([x.size(0) for x in xs])
    size = [len(xs), max_len] + list(xs[0].shape[1:])
    out = torch.full(size, pad_value, dtype=xs[0].dtype, device=xs[0].device)
    for i in range(len(xs)):
        out[i, :xs[i].size(0)] = xs[i]
    return out


def add_sos_eos(ys_pad: torch.Tensor, sos: int, eos: int,
                ignore_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Decoder input (``sos`` + y, padded with ``eos``) and output (y + ``eos``, padded with ignore_id).

    ``ys_pad`` is (B, L) padded with ``ignore_id``; both results are (B, L + 1).
    """
    sos_t = torch.tensor([sos], dtype=torch.long, device=ys_pad.device)
    eos_t = torch.tensor([eos], dtype=torch.long, device=ys_pad.device)
    ys_in: List[torch.Tensor] = []
    ys_out: List[torch.Tensor] = []
    for i in range(ys_pad.size(0)):
        y = ys_pad[i][ys_pad[i] != ignore_id]
        ys_in.append(torch.cat([sos_t, y], dim=0))
        ys_out.append(torch.cat([y, eos_t], dim=0))
    return pad_list(ys_in, float(eos)), pad_list(ys_out, float(ignore_id))


def reverse_pad_list(ys_pad: torch.Tensor, ys_lens: torch.Tensor,
                     pad_value: float = -1.0) -> torch.Tensor:
    """Reverse each row's first ``ys_lens[i]`` tokens, keeping the padding at the end."""
    rows: List[torch.Tensor] = []
    for i in range(ys_pad.size(0)):
        rows.append(torch.flip(ys_pad[i, :int(ys_lens[i])], [0]))
    return pad_list(rows, pad_value)


def th_accuracy(pad_outputs: torch.Tensor, pad_targets: torch.Tensor,
                ignore_label: int) -> float:
    """Token accuracy of argmax predictions (B*L, V) against targets (B, L), skipping ignore_label."""
    pred = pad_outputs.view(pad_targets.size(0), pad_targets.size(1),
                            pad_outputs.size(1)).argmax(2)
    mask = pad_targets != ignore_label
    total = int(mask.sum())
    if total == 0:
        return 0.0
    correct = torch.sum(pred.masked_select(mask) == pad_targets.masked_select(mask))
    return float(correct) / total


def get_activation(name: str) -> torch.nn.Module:
    """Activation module by its WeNet config name (relu, swish, gelu, tanh, selu, hardtanh)."""
    table = {
        "relu": torch.nn.ReLU,
        "swish": torch.nn.SiLU,
        "gelu": torch.nn.GELU,
        "tanh": torch.nn.Tanh,
        "selu": torch.nn.SELU,
        "hardtanh": torch.nn.Hardtanh,
    }
    if name not in table:
        raise ValueError(f"unknown activation_type '{name}' (one of {sorted(table)})")
    return table[name]()


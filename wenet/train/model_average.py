"""Running average of the model weights during training (icefall's ``model_avg``).

Every ``period`` optimizer updates the average is moved towards the current
weights with weight ``period / step``, which makes it the plain mean of the
snapshots taken at updates ``period, 2·period, …``. It is kept in float64 so
that thousands of small updates do not lose precision, and it is saved beside
each epoch checkpoint as ``{N}.avg.pt`` (same keys and dtypes as ``{N}.pt``).
"""
from __future__ import annotations

from typing import Dict, Mapping

import torch


class ModelAverager:
    """Holds the float64 running mean of a model's ``state_dict`` entries.

    Floating-point entries are averaged; other entries (integer counters such
    as BatchNorm's ``num_batches_tracked``) take the current value.
    """

    def __init__(self, state_dict: Mapping[str, torch.Tensor], period: int) -> None:
        if period <= 0:
            raise ValueError(f"average_period must be positive, got {period}")
        self.period = int(period)
        self.dtypes = {k: v.dtype for k, v in state_dict.items()}
        self.avg: Dict[str, torch.Tensor] = {
            k: v.detach().to("cpu", torch.float64 if v.is_floating_point() else v.dtype, copy=True)
            for k, v in state_dict.items()}

    def maybe_update(self, state_dict: Mapping[str, torch.Tensor], step: int) -> bool:
        """Fold in the current weights when ``step`` is a multiple of the period; True if it did."""
        if step <= 0 or step % self.period != 0:
            return False
        weight_cur = self.period / step
        with torch.no_grad():
            for key, avg in self.avg.items():
                cur = state_dict[key].detach().to("cpu")
                if avg.is_floating_point():
                    avg.mul_(1.0 - weight_cur).add_(cur.to(torch.float64), alpha=weight_cur)
                else:
                    avg.copy_(cur)
        return True

    def export(self) -> Dict[str, torch.Tensor]:
        """The average in the model's own dtypes, ready for ``model.load_state_dict``."""
        return {k: v.to(self.dtypes[k]) for k, v in self.avg.items()}

    def state_dict(self) -> Dict[str, object]:
        """Exact (float64) state for resuming."""
        return {"period": self.period, "avg": self.avg}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore what :meth:`state_dict` returned; the keys must match the model's."""
        avg = state["avg"]
        if set(avg) != set(self.avg):  # type: ignore[arg-type]
            raise ValueError("model average in the checkpoint does not match the model's parameters")
        self.period = int(state["period"])  # type: ignore[arg-type]
        self.avg = {k: v.clone() for k, v in avg.items()}  # type: ignore[union-attr]

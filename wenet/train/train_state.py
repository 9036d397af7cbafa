"""Where training is: the loop's counters (:class:`TrainState`) and the RNG streams.

Together with the model, optimizer, scheduler, scaler, model average and data
position they define the point a run continues from; the checkpoint manager
(wenet/train/checkpoint_manager.py) saves and restores them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Dict, Mapping

import numpy as np
import torch


@dataclass
class TrainState:
    """Counters that, with the model/optimizer/RNG state, define where training is."""

    epoch: int = 0
    epoch_done: bool = False          # the epoch's CV and checkpoint are done
    step: int = 0                     # optimizer updates made
    batches_done: int = 0             # batches of this epoch consumed (same on every rank)
    batches_per_epoch: int = 0        # length of the last finished epoch (for the ETA); 0: unknown
    skipped_nonfinite: int = 0
    skipped_oom: int = 0
    scaler_skips: int = 0             # AMP fp16 updates skipped by the grad scaler (overflow)
    consecutive_bad: int = 0
    train_seconds: float = 0.0
    epoch_loss_sum: float = 0.0       # this rank's sum of batch loss * utterances, this epoch
    epoch_loss_utts: int = 0          # utterances of this rank's good batches, this epoch

    def start_next_epoch(self) -> None:
        """Move from a finished epoch to the first batch of the next one."""
        self.epoch += 1
        self.epoch_done = False
        self.restart_epoch()

    def restart_epoch(self) -> None:
        """Forget this epoch's progress (its batches and training loss)."""
        self.batches_done = 0
        self.epoch_loss_sum, self.epoch_loss_utts = 0.0, 0


def capture_rng_state() -> Dict[str, Any]:
    """This process's python, numpy, torch (and CUDA) generator states, weights_only-loadable."""
    np_state = np.random.get_state(legacy=False)
    state: Dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
                  "pos": int(np_state["state"]["pos"]),
                  "has_gauss": int(np_state["has_gauss"]), "gauss": float(np_state["gauss"])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    nps = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": nps["key"].numpy().astype(np.uint32), "pos": nps["pos"]},
                         "has_gauss": nps["has_gauss"], "gauss": nps["gauss"]})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

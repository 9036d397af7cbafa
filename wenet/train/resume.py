"""Exact resume: the loop's counters, the RNG streams, and saving/restoring them with a checkpoint.

A checkpoint (files and names: wenet/train/checkpoint.py) holds, besides the
weights, everything needed to continue bit-for-bit: the :class:`TrainState`
counters, the optimizer, scheduler, grad scaler and model-average states, and
per rank its RNG states and data position. Every rank calls :func:`save` (each
contributes its RNG and data state through one ``all_gather_object``), rank 0
writes. :func:`restore` puts it all back, or only the weights when the
checkpoint has no resume state (an older or foreign ``NAME.pt``).
"""
from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional, Protocol

import numpy as np
import torch
import torch.distributed as dist

from wenet.train.checkpoint import (MODEL_SUFFIX, RESUME_SUFFIX, find_latest_checkpoint,
                                    load_infos, load_resume_state, save_checkpoint,
                                    strip_ddp_prefix)
from wenet.train.distributed import DistInfo
from wenet.train.model_average import ModelAverager

RESUME_FORMAT = 1


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


class Resumable(Protocol):
    """What :func:`save` and :func:`restore` read and set (the Executor's attributes)."""

    module: torch.nn.Module            # the model without its DDP wrapper
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Optional[torch.amp.GradScaler]
    averager: Optional[ModelAverager]
    train_set: Any                     # state_dict / load_state_dict: the data position
    dist: DistInfo
    model_dir: str
    state: TrainState

    @property
    def lr(self) -> float: ...


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


def _gather_per_rank(run: Resumable) -> list:
    """Every rank's RNG and data state, in rank order (a collective: all ranks call it)."""
    mine = {"rng": capture_rng_state(),
            "data": run.train_set.state_dict() if run.train_set is not None else None}
    if not run.dist.distributed:
        return [mine]
    per_rank = [None] * run.dist.world_size
    dist.all_gather_object(per_rank, mine)
    return per_rank


def save(run: Resumable, base: str, cv_loss: Optional[float] = None,
         train_loss: Optional[float] = None) -> None:
    """Checkpoint ``base`` (a path without suffix); every rank calls it, rank 0 writes."""
    per_rank = _gather_per_rank(run)
    if run.dist.rank != 0:
        return
    st = run.state
    infos = {"epoch": st.epoch, "step": st.step, "lr": run.lr, "cv_loss": cv_loss,
             "train_loss": train_loss,
             "batches": st.batches_done, "world_size": run.dist.world_size,
             "skipped_nonfinite": st.skipped_nonfinite, "skipped_oom": st.skipped_oom}
    resume = {"format": RESUME_FORMAT, **asdict(st),
              "optimizer": run.optimizer.state_dict(),
              "scheduler": run.scheduler.state_dict(),
              "scaler": run.scaler.state_dict() if run.scaler is not None else None,
              "averager": run.averager.state_dict() if run.averager is not None else None,
              "per_rank": per_rank, "world_size": run.dist.world_size}
    model_state = {k: v.detach().cpu() for k, v in strip_ddp_prefix(run.module.state_dict()).items()}
    avg = run.averager.export() if (run.averager is not None and st.epoch_done) else None
    save_checkpoint(base, model_state, infos, avg, resume, write_yaml=st.epoch_done)


def _restore_weights_only(run: Resumable, base: str) -> None:
    """A checkpoint without resume state: continue after its epoch with fresh optimizer etc."""
    infos = load_infos(base)
    if "epoch" in infos:
        run.state.epoch, run.state.epoch_done = int(infos["epoch"]), True
        run.state.step = int(infos.get("step", 0))
    logging.warning("%s has no resume state: loaded the weights only; optimizer, scheduler "
                    "and data position start fresh (continuing after epoch %s)", base,
                    infos.get("epoch", "none"))


def _restore_rank_streams(run: Resumable, base: str, resume: Mapping[str, Any]) -> None:
    """This rank's RNG and data position, when the rank layout is the one that saved them."""
    if resume["world_size"] == run.dist.world_size:
        mine = resume["per_rank"][run.dist.rank]
        restore_rng_state(mine["rng"])
        if run.train_set is not None and mine["data"] is not None:
            run.train_set.load_state_dict(mine["data"])
        return
    logging.warning("%s was saved by %d ranks, this run has %d: RNG streams start afresh "
                    "and an unfinished epoch restarts from its first batch", base,
                    resume["world_size"], run.dist.world_size)
    run.state.restart_epoch()


def restore(run: Resumable, base: str) -> None:
    """Continue from checkpoint ``base``: exactly when its resume state exists, else weights only."""
    weights = torch.load(f"{base}{MODEL_SUFFIX}", map_location="cpu", weights_only=True)
    run.module.load_state_dict(strip_ddp_prefix(weights))
    try:
        resume = load_resume_state(base)
    except FileNotFoundError:
        _restore_weights_only(run, base)
        return
    if resume.get("format") != RESUME_FORMAT:
        raise ValueError(f"{base}{RESUME_SUFFIX}: unknown format {resume.get('format')}")
    run.state = TrainState(**{k: resume[k] for k in asdict(TrainState()) if k in resume})
    run.optimizer.load_state_dict(resume["optimizer"])
    run.scheduler.load_state_dict(resume["scheduler"])
    if run.scaler is not None and resume.get("scaler"):
        run.scaler.load_state_dict(resume["scaler"])
    if run.averager is not None and resume.get("averager"):
        run.averager.load_state_dict(resume["averager"])
    _restore_rank_streams(run, base, resume)
    logging.info("resumed from %s: epoch %d (%s), step %d, batch %d", base, run.state.epoch,
                 "done" if run.state.epoch_done else "in progress", run.state.step,
                 run.state.batches_done)


def restore_latest(run: Resumable) -> Optional[str]:
    """Resume from the newest complete checkpoint of ``run.model_dir``; its base, or None."""
    base = find_latest_checkpoint(run.model_dir)
    if base is not None:
        restore(run, base)
    return base

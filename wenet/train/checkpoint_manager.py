"""The one owner of an experiment dir's checkpoints: saving, resuming, retention, clean-up.

wenet/bin/train.py and the Executor call a :class:`CheckpointManager`; it calls the
file layer (wenet/train/checkpoint.py: names, atomic writes, loads) and nothing
calls back. What it does:

* **save**: every rank calls :meth:`CheckpointManager.save_epoch` /
  :meth:`~CheckpointManager.save_step` (each contributes its RNG and data position
  through one ``all_gather_object``), rank 0 writes ``NAME.pt`` (the model, DDP
  prefix stripped), ``NAME.avg.pt`` and ``NAME.yaml`` (epoch checkpoints), and
  ``NAME.resume.pt`` last (optimizer, scheduler, scaler, model average, counters,
  per-rank RNG and data position): a checkpoint is complete once that exists;
* **retention**, right after a complete save, on rank 0: after epoch ``N`` the
  resume states and running averages of epochs ``M <= N - keep_last_k`` go, and so
  do the step checkpoints taken before the oldest kept epoch ended (it supersedes
  them); after a step checkpoint, all but the newest ``keep_step_checkpoints`` step
  checkpoints go. ``{M}.pt`` and ``{M}.yaml``, which averaging reads, always stay.
  A checkpoint's resume state is deleted before its other files, so a kill at any
  moment leaves at least one complete checkpoint;
* **resume**: :meth:`~CheckpointManager.resume` continues from a given checkpoint
  or from the intact complete one with the most updates (exactly when its resume state
  exists, the weights only otherwise: an older or foreign ``NAME.pt``); an unreadable
  newest resume state never means starting from scratch (wenet/train/resume_point.py);
* **disk**: the temporary files of writers killed in an earlier run
  (``<path>.tmp.<pid>``, wenet.utils.file_utils.atomic_open) are removed when
  training starts; :meth:`~CheckpointManager.usage` sizes the dir by kind of file.
"""
from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

import torch
import torch.distributed as dist

from wenet.train.checkpoint import (AVERAGE_SUFFIX, INFOS_SUFFIX, MODEL_SUFFIX, RESUME_SUFFIX,
                                    checkpoint_base, checkpoint_files, dump_bad_batch,
                                    epoch_base, load_infos,
                                    parse_checkpoint_name, save_checkpoint, step_base,
                                    strip_ddp_prefix)
from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.model_average import ModelAverager
from wenet.train.resume_point import resume_point
from wenet.train.train_state import TrainState, capture_rng_state, restore_rng_state
from wenet.utils.file_utils import TMP_MARK, dead_writers_temp_files

RESUME_FORMAT = 1
_TEMP_DIRS = ("", "bad_batch")  # the model dir and the bad-batch dump dir under it
# a checkpoint's files in the order they are deleted: its resume state first (incomplete at once)
_REMOVAL_ORDER = (RESUME_SUFFIX, INFOS_SUFFIX, AVERAGE_SUFFIX, MODEL_SUFFIX)


class Resumable(Protocol):
    """What the manager reads from and restores into a run (the Executor's attributes)."""

    module: torch.nn.Module            # the model without its DDP wrapper
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Optional[torch.amp.GradScaler]
    averager: Optional[ModelAverager]
    train_set: Any                     # state_dict / load_state_dict: the data position
    state: TrainState

    @property
    def lr(self) -> float: ...


@dataclass
class CheckpointManager:
    """Checkpoints of ``model_dir`` for the process at ``dist`` (rank 0 writes and deletes)."""

    model_dir: str
    dist: DistInfo
    keep_last_k: int = 1            # epochs whose resume state and running average stay
    keep_step_checkpoints: int = 2  # newest step_{S} checkpoints kept

    @classmethod
    def for_run(cls, model_dir: str, conf: TrainConf, dist_info: DistInfo) -> "CheckpointManager":
        """The manager of a run with the retention keys of its config."""
        return cls(model_dir, dist_info, conf.keep_last_k, conf.keep_step_checkpoints)

    # ----------------------------------------------------------------------- save
    def save_epoch(self, run: Resumable, cv_loss: float, train_loss: float) -> None:
        """Checkpoint ``{epoch}`` of a finished epoch, then prune (``keep_last_k``)."""
        epoch = run.state.epoch
        self.save(run, epoch_base(self.model_dir, epoch), cv_loss=cv_loss, train_loss=train_loss)
        if self.dist.rank == 0:  # the new checkpoint is complete: older ones may go
            self.prune_after_epoch(epoch)

    def save_step(self, run: Resumable) -> None:
        """Checkpoint ``step_{S}`` after update S, then keep the newest step checkpoints only."""
        self.save(run, step_base(self.model_dir, run.state.step))
        if self.dist.rank == 0:
            self.prune_step_checkpoints()

    def save(self, run: Resumable, base: str, cv_loss: Optional[float] = None,
             train_loss: Optional[float] = None) -> None:
        """Checkpoint ``base`` (a path without suffix); every rank calls it, rank 0 writes.

        ``NAME.yaml`` and ``NAME.avg.pt`` are written once the epoch is done only.
        """
        per_rank = self._gather_per_rank(run)
        if self.dist.rank != 0:
            return
        st = run.state
        infos = {"epoch": st.epoch, "step": st.step, "lr": run.lr, "cv_loss": cv_loss,
                 "train_loss": train_loss,
                 "batches": st.batches_done, "world_size": self.dist.world_size,
                 "skipped_nonfinite": st.skipped_nonfinite, "skipped_oom": st.skipped_oom}
        resume = {"format": RESUME_FORMAT, **asdict(st),
                  "optimizer": run.optimizer.state_dict(),
                  "scheduler": run.scheduler.state_dict(),
                  "scaler": run.scaler.state_dict() if run.scaler is not None else None,
                  "averager": run.averager.state_dict() if run.averager is not None else None,
                  "per_rank": per_rank, "world_size": self.dist.world_size}
        model_state = {k: v.detach().cpu()
                       for k, v in strip_ddp_prefix(run.module.state_dict()).items()}
        avg = run.averager.export() if (run.averager is not None and st.epoch_done) else None
        save_checkpoint(base, model_state, infos, avg, resume, write_yaml=st.epoch_done)

    def _gather_per_rank(self, run: Resumable) -> list:
        """Every rank's RNG and data state, in rank order (a collective: all ranks call it)."""
        mine = {"rng": capture_rng_state(),
                "data": run.train_set.state_dict() if run.train_set is not None else None}
        if not self.dist.distributed:
            return [mine]
        per_rank = [None] * self.dist.world_size
        dist.all_gather_object(per_rank, mine)
        return per_rank

    def dump_bad_batch(self, batch: Mapping[str, Any], model: torch.nn.Module,
                       infos: Dict[str, Any]) -> str:
        """Every rank's batch and rank 0's ``model`` under ``model_dir/bad_batch/``, when
        training stops after too many non-finite steps; the dir."""
        model_state = strip_ddp_prefix(model.state_dict()) if self.dist.rank == 0 else None
        return dump_bad_batch(self.model_dir, self.dist.rank, batch, model_state, infos)

    # --------------------------------------------------------------------- resume
    def resume(self, run: Resumable, checkpoint: Optional[str] = None) -> Optional[str]:
        """Continue from ``checkpoint`` (any of its files, e.g. ``exp/3.pt``), else from the
        newest complete checkpoint of the model dir; the base restored, or None."""
        base = checkpoint_base(checkpoint) if checkpoint else self.latest()
        if base is not None:
            self.restore(run, base)
        return base

    def latest(self) -> Optional[str]:
        """Base path of the intact complete checkpoint with the most updates, or None;
        ValueError instead of starting over trained checkpoints
        (wenet/train/resume_point.py)."""
        return resume_point(self.model_dir)

    def restore(self, run: Resumable, base: str) -> None:
        """Continue from checkpoint ``base``: exactly when its resume state exists, else weights only."""
        weights = _load_or_explain(f"{base}{MODEL_SUFFIX}",
                                   "name another checkpoint with --checkpoint")
        run.module.load_state_dict(strip_ddp_prefix(weights))
        if not os.path.exists(f"{base}{RESUME_SUFFIX}"):
            self._restore_weights_only(run, base)
            return
        resume = _load_or_explain(f"{base}{RESUME_SUFFIX}", (
            f"move it aside (mv {base}{RESUME_SUFFIX} {base}{RESUME_SUFFIX}.bad) to continue "
            f"from the weights of {base}{MODEL_SUFFIX} only"))
        if resume.get("format") != RESUME_FORMAT:
            raise ValueError(f"{base}{RESUME_SUFFIX}: unknown format {resume.get('format')}")
        run.state = TrainState(**{k: resume[k] for k in asdict(TrainState()) if k in resume})
        run.optimizer.load_state_dict(resume["optimizer"])
        run.scheduler.load_state_dict(resume["scheduler"])
        if run.scaler is not None and resume.get("scaler"):
            run.scaler.load_state_dict(resume["scaler"])
        if run.averager is not None and resume.get("averager"):
            run.averager.load_state_dict(resume["averager"])
        self._restore_rank_streams(run, base, resume)
        logging.info("resumed from %s: epoch %d (%s), step %d, batch %d", base, run.state.epoch,
                     "done" if run.state.epoch_done else "in progress", run.state.step,
                     run.state.batches_done)

    @staticmethod
    def _restore_weights_only(run: Resumable, base: str) -> None:
        """A checkpoint without resume state: continue after its epoch with fresh optimizer etc."""
        infos = load_infos(base)
        if "epoch" in infos:
            run.state.epoch, run.state.epoch_done = int(infos["epoch"]), True
            run.state.step = int(infos.get("step", 0))
        logging.warning("%s has no resume state: loaded the weights only; optimizer, scheduler "
                        "and data position start fresh (continuing after epoch %s)", base,
                        infos.get("epoch", "none"))

    def _restore_rank_streams(self, run: Resumable, base: str, resume: Mapping[str, Any]) -> None:
        """This rank's RNG and data position, when the rank layout is the one that saved them."""
        if resume["world_size"] == self.dist.world_size:
            mine = resume["per_rank"][self.dist.rank]
            restore_rng_state(mine["rng"])
            if run.train_set is not None and mine["data"] is not None:
                run.train_set.load_state_dict(mine["data"])
            return
        logging.warning("%s was saved by %d ranks, this run has %d: RNG streams start afresh "
                        "and an unfinished epoch restarts from its first batch", base,
                        resume["world_size"], self.dist.world_size)
        run.state.restart_epoch()

    # ------------------------------------------------------------------ retention
    def prune_after_epoch(self, epoch: int) -> List[str]:
        """Apply ``keep_last_k`` once epoch ``epoch``'s checkpoint is complete; the paths deleted.

        Epochs after ``epoch`` (left by another run) are not touched.
        """
        if self.keep_last_k < 1:
            raise ValueError(f"keep_last_k must be >= 1, got {self.keep_last_k}")
        oldest_kept = epoch - self.keep_last_k + 1
        removed: List[str] = []
        for suffix in (RESUME_SUFFIX, AVERAGE_SUFFIX):  # resume states first: incomplete at once
            for number, path in checkpoint_files(self.model_dir, "epoch", suffix):
                if number < oldest_kept and _remove(path) is not None:
                    removed.append(path)
        if oldest_kept >= 0:
            kept_step = load_infos(epoch_base(self.model_dir, oldest_kept)).get("step")
            if kept_step is not None:
                removed += self._remove_steps(lambda step: step <= int(kept_step))
        _log_removed(f"keep_last_k {self.keep_last_k}", removed)
        return removed

    def prune_step_checkpoints(self) -> List[str]:
        """Delete all but the newest ``keep_step_checkpoints`` step checkpoints; the paths deleted."""
        steps = sorted({number for suffix in _REMOVAL_ORDER
                        for number, _ in checkpoint_files(self.model_dir, "step", suffix)})
        old = set(steps[: max(0, len(steps) - self.keep_step_checkpoints)])
        removed = self._remove_steps(lambda step: step in old)
        _log_removed(f"keep_step_checkpoints {self.keep_step_checkpoints}", removed)
        return removed

    def _remove_steps(self, chosen: Callable[[int], bool]) -> List[str]:
        """Delete the files of the step checkpoints whose step ``chosen(step)`` accepts,
        each one's resume state before its other files."""
        removed = []
        for suffix in _REMOVAL_ORDER:
            for number, path in checkpoint_files(self.model_dir, "step", suffix):
                if chosen(number) and _remove(path) is not None:
                    removed.append(path)
        return removed

    # ----------------------------------------------------------------------- disk
    def remove_stale_temp_files(self) -> Tuple[int, int]:
        """Delete the temporaries that killed writers left in the model dir (and its
        bad_batch/); (files, bytes) freed.

        Only files whose writer's pid is not alive here: a shared model dir must not be
        written by a live process on another machine while training starts.
        """
        paths: List[str] = []
        for sub in _TEMP_DIRS:
            paths += dead_writers_temp_files(os.path.join(self.model_dir, sub))
        freed = sum(_remove(p) or 0 for p in paths)
        if paths:
            logging.info("removed %d temporary file(s) left by killed writers in %s, %d bytes "
                         "freed: %s", len(paths), self.model_dir, freed,
                         ", ".join(os.path.basename(p) for p in paths))
        return len(paths), freed

    def usage(self) -> Dict[str, int]:
        """Bytes under the model dir by kind of file, and ``total`` (every regular file below
        it, tensorboard logs and decoding results included; links are not followed)."""
        usage: Dict[str, int] = {"total": 0}
        for root, _, files in os.walk(self.model_dir):
            top = os.path.normpath(root) == os.path.normpath(self.model_dir)
            for name in files:
                path = os.path.join(root, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                size = os.path.getsize(path)
                kind = _category(name) if top else "subdirectories"
                usage[kind] = usage.get(kind, 0) + size
                usage["total"] += size
        return usage


def format_usage(usage: Dict[str, int]) -> str:
    """``123.4 MB (epoch models 80.1, resume states 30.2, ...)`` of :meth:`CheckpointManager.usage`."""
    parts = ", ".join(f"{kind} {size / 2 ** 20:.1f}" for kind, size in sorted(usage.items())
                      if kind != "total")
    return f"{usage['total'] / 2 ** 20:.1f} MB ({parts})"


def _load_or_explain(path: str, way_on: str) -> Any:
    """``torch.load`` (weights only); a file that will not load is a ValueError naming it."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:
        raise ValueError(f"{path} is unreadable ({type(e).__name__}: {e}): {way_on}") from e


def _remove(path: str) -> Optional[int]:
    """Delete ``path``; the bytes freed, None when it did not exist."""
    try:
        size = os.path.getsize(path)
        os.remove(path)
    except FileNotFoundError:
        return None
    return size


def _log_removed(rule: str, removed: List[str]) -> None:
    if removed:
        logging.info("%s: removed %s", rule, ", ".join(os.path.basename(p) for p in removed))


def _category(name: str) -> str:
    parsed = parse_checkpoint_name(name)
    if parsed is None:
        return "temporary" if TMP_MARK in name else "other"
    if parsed.kind != "epoch":
        return {"step": "step checkpoints", "average": "averaged models"}[parsed.kind]
    return {MODEL_SUFFIX: "epoch models", INFOS_SUFFIX: "epoch models",
            RESUME_SUFFIX: "resume states", AVERAGE_SUFFIX: "running averages"}[parsed.suffix]

"""The training loop: epochs of accumulated, clipped updates, CV, checkpoints, exact resume.

What it does per batch, in order (every rank in lock-step):

1. fetch a batch; all ranks agree (one all_reduce) whether *every* rank got one,
   and the epoch ends for all as soon as one rank runs out: uneven shards never hang;
2. forward (under ``no_sync`` unless this batch completes an update); a CUDA
   out-of-memory error or a non-finite loss on any rank is shared (second
   all_reduce) and the batch is skipped by all ranks, logged and counted;
3. backward of ``loss / accum_grad``; after ``accum_grad`` good batches: unscale
   (AMP), clip to ``grad_clip`` (unless the optimizer clips by itself, as
   ScaledAdam does), and step unless the gradient norm is
   non-finite (skipped and counted). ``max_bad_steps`` non-finite steps in a row
   stop training after dumping the batch and model under ``$dir/bad_batch/``;
4. scheduler step, model-average update, a ``step_{S}`` checkpoint every
   ``save_interval`` updates, a log line / tensorboard point every ``log_interval`` batches.

Each epoch ends with CV (loss averaged over utterances of all ranks) and the
``{epoch}`` checkpoint. An epoch that got no batch at all (every utterance filtered,
or a rank without data) is an error, not a silent ``nan``. What the loop reports is
wenet/train/progress.py; checkpoints (what they hold to continue bit-for-bit, which
ones are kept, resuming from one) are the :class:`CheckpointManager`'s
(wenet/train/checkpoint_manager.py), which the loop only calls.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from typing import Any, Callable, Dict, Iterable, List, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from wenet.train.checkpoint_manager import CheckpointManager
from wenet.train.config import TrainConf, TrainingError
from wenet.train.device import autocast_for, to_device
from wenet.train.distributed import DistInfo
from wenet.train.guards import GradScaleGuard
from wenet.train.model_average import ModelAverager
from wenet.train.progress import EpochProgress, StepTimes, log_epoch_losses
from wenet.train.train_state import TrainState


def _call_if_any(obj: Any, method: str, *args: Any) -> None:
    """``obj.method(*args)`` when obj has that method."""
    fn = getattr(obj, method, None)
    if fn is not None:
        fn(*args)


class Executor:
    """Runs training for one rank; see the module docstring for the per-batch protocol."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                 conf: TrainConf, device: torch.device, dist_info: DistInfo, model_dir: str,
                 scaler: Optional[torch.amp.GradScaler] = None,
                 amp_dtype: Optional[torch.dtype] = None, writer=None,
                 averager: Optional[ModelAverager] = None, train_set=None,
                 checkpoints: Optional[CheckpointManager] = None) -> None:
        self.model = model
        self.train_set = train_set  # a wenet.dataset.dataset.Dataset: positioned on resume
        self.module = model.module if isinstance(model, DistributedDataParallel) else model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.conf = conf
        self.device = device
        self.dist = dist_info
        self.scaler = scaler
        self.amp_dtype = amp_dtype
        self.writer = writer
        self.averager = averager
        # the owner of model_dir's checkpoints (train.py passes its own; default: conf's keys)
        self.checkpoints = (checkpoints if checkpoints is not None
                            else CheckpointManager.for_run(model_dir, conf, dist_info))
        self.state = TrainState()
        self.times = StepTimes()
        self._had_batch = False  # this epoch, on this rank (see _no_batch_error)
        self.guards = None  # wenet.train.guards.TrainingGuards (train.py's guard options)
        self.scale_guard = GradScaleGuard(conf.grad_scale_warn, conf.grad_scale_min)

    # ----------------------------------------------------------------- collectives
    def _reduce(self, values, op=None) -> torch.Tensor:
        """all_reduce of a small float vector (identity in a single process)."""
        t = torch.tensor(values, dtype=torch.float64 if self.device.type == "cpu" else torch.float32,
                         device=self.device)
        if self.dist.distributed:
            start = time.perf_counter()
            dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
            self.times.sync += time.perf_counter() - start
        return t

    # ------------------------------------------------------------------- training
    def fit(self, make_train_loader: Callable[[int], Iterable],
            make_cv_loader: Callable[[], Iterable]) -> None:
        """Train from ``self.state`` to ``max_epoch``.

        ``make_train_loader(epoch)`` gives the epoch's DataLoader over
        ``self.train_set``; the dataset's ``consume`` skips what a resumed
        checkpoint had already trained on.
        """
        st = self.state
        if self.guards is not None and (st.epoch, st.batches_done, st.step) == (0, 0, 0):
            self.guards.before_training(self, make_train_loader)
        while self.state.epoch < self.conf.max_epoch:
            if self.state.epoch_done:
                self.state.start_next_epoch()
                continue
            epoch = self.state.epoch
            if hasattr(self.scheduler, "set_epoch"):  # epoch-aware schedules (eden)
                self.scheduler.set_epoch(epoch)
            logging.info("epoch %d: starting at batch %d (step %d), lr %.3e", epoch,
                         self.state.batches_done, self.state.step, self.lr)
            self.train_set.set_epoch(epoch)
            self.train_epoch(self.train_set.consume(make_train_loader(epoch)))
            train_loss = self.epoch_train_loss()
            cv_loss = self.cv(make_cv_loader())
            log_epoch_losses(self.writer, self.state, train_loss, cv_loss, self.lr)
            self.state.epoch_done = True
            self.check_replicas()
            self.checkpoints.save_epoch(self, cv_loss=cv_loss, train_loss=train_loss)

    def epoch_train_loss(self) -> float:
        """Mean training loss per utterance over this epoch's good batches of all ranks.

        Measured as the model was being updated (dropout on), so it is not directly
        comparable with ``cv_loss``; NaN when no batch counted.
        """
        total, utts = (float(x) for x in self._reduce([self.state.epoch_loss_sum,
                                                       float(self.state.epoch_loss_utts)]))
        return total / utts if utts > 0 else float("nan")

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def train_epoch(self, loader: Iterable) -> None:
        """One epoch (or its rest after a resume) of training."""
        conf, st = self.conf, self.state
        self.model.train()
        it = iter(loader)
        self._had_batch = False  # whether this rank's data gave at least one batch
        pending = 0  # good batches whose gradients wait for the update
        progress = EpochProgress(st, self.times, conf, self.dist, self.writer)
        while (batch := self._next_batch(it)) is not None:
            st.batches_done += 1
            self.times.batches += 1
            completes = pending + 1 == conf.accum_grad
            sync_ctx = (self.model.no_sync() if self.dist.distributed and not completes
                        else contextlib.nullcontext())
            with sync_ctx:
                # schedules on the update count (the Zipformer's dropout and skip rates)
                _call_if_any(getattr(self.module, "encoder", None), "set_batch_count", st.step)
                out = self._forward(batch)
                if out is None:
                    continue
                if not self._backward(out["loss"], batch):
                    pending = 0
                    continue
            pending += 1
            if self.guards is not None:
                self.guards.after_batch(self)
            self._count_epoch_loss(out, batch)
            progress.add(out, batch)
            if pending == conf.accum_grad:
                pending = 0
                progress.grad_norm = self._update(batch)
            if st.batches_done % conf.log_interval == 0:
                progress.log_batch(st, self.lr)
        if pending:
            logging.info("epoch %d: dropping the gradients of %d batch(es) that did not fill an "
                         "update (accum_grad %d)", st.epoch, pending, conf.accum_grad)
            self.optimizer.zero_grad(set_to_none=True)
        st.train_seconds += time.time() - progress.start
        st.batches_per_epoch = st.batches_done
        progress.log_epoch_end(st, self.times)
        if st.batches_done == 0:
            self._no_batch_error()

    def _no_batch_error(self) -> None:
        """An epoch without a single batch (on every rank, by the end-of-data protocol) is
        an error: naming the ranks that had no data, which end an epoch for all."""
        world = self.dist.world_size
        mine = [0.0] * world
        mine[self.dist.rank] = 1.0 if self._had_batch else 0.0
        had = self._reduce(mine)
        empty = [r for r in range(world) if float(had[r]) == 0.0]
        if world == 1:
            where = "the data gave no batch"
        elif len(empty) == world:
            where = f"none of the {world} ranks got a batch"
        else:
            where = (f"rank(s) {', '.join(map(str, empty))} of {world} got no batch, which ends "
                     "the epoch for every rank")
        raise TrainingError(f"epoch {self.state.epoch} trained on nothing: {where}; see the "
                            "data pipeline's summary (every utterance skipped or filtered, or "
                            "a rank without data.list lines)")

    def _next_batch(self, it: Iterable) -> Optional[Dict[str, Any]]:
        """The next batch, or None for every rank as soon as one rank has run out."""
        start = time.perf_counter()
        batch = next(it, None)
        self.times.data += time.perf_counter() - start
        self._had_batch = self._had_batch or batch is not None
        if self._reduce([0.0 if batch is None else 1.0], dist.ReduceOp.MIN).item() < 1:
            if batch is not None:
                logging.info("another rank ran out of data: ending epoch %d with a batch "
                             "unused on this rank", self.state.epoch)
            return None
        return batch

    def _count_epoch_loss(self, out: Dict[str, Any], batch: Dict[str, Any]) -> None:
        """Add a good batch to this rank's epoch training loss (per utterance)."""
        utts = int(batch["feats"].shape[0])
        self.state.epoch_loss_sum += float(out["loss"].detach()) * utts
        self.state.epoch_loss_utts += utts

    def _forward(self, batch: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Forward pass; None (after all ranks agreed) when the batch must be skipped."""
        start = time.perf_counter()
        oom, nonfinite, out = 0.0, 0.0, None
        if hasattr(self.module, "set_training_step"):  # e.g. the pruned loss's warm-up
            self.module.set_training_step(self.state.step)
        try:
            with self._autocast():
                out = self.model(*self._inputs(batch))
            if not torch.isfinite(out["loss"].detach()).all():
                nonfinite = 1.0
        except torch.cuda.OutOfMemoryError:
            oom = 1.0
            logging.warning("CUDA out of memory in forward of a batch with feats %s, target %s "
                            "(first key %s): skipping it", tuple(batch["feats"].shape),
                            tuple(batch["target"].shape), (batch.get("keys") or ["?"])[0])
            out = None
            self._free_cuda()
        self.times.forward += time.perf_counter() - start
        flags = self._reduce([oom, nonfinite]) if self.dist.distributed else (oom, nonfinite)
        if float(flags[0]) > 0:
            self.state.skipped_oom += 1
            if not oom:
                logging.warning("skipping batch %d: CUDA out of memory on another rank",
                                self.state.batches_done)
            return None
        if float(flags[1]) > 0:
            self.state.skipped_nonfinite += 1
            logging.warning("non-finite loss %s on batch %d (keys %s...): skipping it (%d so far)",
                            "here" if nonfinite else "on another rank", self.state.batches_done,
                            (batch.get("keys") or ["?"])[:3], self.state.skipped_nonfinite)
            self._count_bad(batch)
            return None
        return out

    def _backward(self, loss: torch.Tensor, batch: Dict[str, Any]) -> bool:
        """Backward of the scaled loss; False if it ran out of memory (single process only)."""
        start = time.perf_counter()
        loss = loss / self.conf.accum_grad
        try:
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        except torch.cuda.OutOfMemoryError:
            shape = tuple(batch["feats"].shape)
            if self.dist.distributed:  # peers are inside the gradient all_reduce: cannot recover
                raise RuntimeError(f"CUDA out of memory in backward (feats {shape}) under DDP") from None
            logging.warning("CUDA out of memory in backward of a batch with feats %s: skipping it "
                            "and the gradients accumulated with it", shape)
            self.optimizer.zero_grad(set_to_none=True)
            self._free_cuda()
            self.state.skipped_oom += 1
            return False
        finally:
            self.times.backward += time.perf_counter() - start
        return True

    def _update(self, batch: Dict[str, Any]) -> float:
        """Clip and step; returns the gradient norm (identical on all ranks after DDP's all_reduce)."""
        start = time.perf_counter()
        st = self.state
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        # an optimizer that clips by itself (ScaledAdam: from the recent median norm) gets
        # the gradients unclipped; the norm is still measured for the log and the finite check
        clips_itself = getattr(self.optimizer, "clips_gradients", False)
        max_norm = self.conf.grad_clip if self.conf.grad_clip > 0 and not clips_itself \
            else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.module.parameters(), max_norm))
        stepped = False
        if self.scaler is not None:
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            stepped = self.scaler.get_scale() >= scale
            if not stepped:
                st.scaler_skips += 1
            self.scale_guard.check(self.scaler.get_scale(), st.step, st.scaler_skips)
        elif math.isfinite(grad_norm):
            self.optimizer.step()
            stepped = True
        self.optimizer.zero_grad(set_to_none=True)
        self.times.optim += time.perf_counter() - start
        if not stepped and self.scaler is None:
            st.skipped_nonfinite += 1
            logging.warning("non-finite gradient norm at batch %d: update skipped (%d so far)",
                            st.batches_done, st.skipped_nonfinite)
            self._count_bad(batch)
            return grad_norm
        if stepped:
            self._after_step()
        return grad_norm

    def _after_step(self) -> None:
        """Bookkeeping of a made update: schedule, model average, periodic step checkpoint."""
        st = self.state
        st.consecutive_bad = 0
        self.scheduler.step()
        st.step += 1
        if self.averager is not None:
            self.averager.maybe_update(self.module.state_dict(), st.step)
        if self.conf.save_interval > 0 and st.step % self.conf.save_interval == 0:
            self.checkpoints.save_step(self)

    def _count_bad(self, batch: Dict[str, Any]) -> None:
        st = self.state
        st.consecutive_bad += 1
        if st.consecutive_bad < self.conf.max_bad_steps:
            return
        infos = {"epoch": st.epoch, "step": st.step, "batch": st.batches_done,
                 "consecutive_bad": st.consecutive_bad, "keys": list(batch.get("keys") or [])}
        where = self.checkpoints.dump_bad_batch(batch, self.module, infos)
        raise RuntimeError(f"{st.consecutive_bad} consecutive non-finite losses/gradients at "
                           f"epoch {st.epoch} batch {st.batches_done}: stopping; the batch and the "
                           f"model are in {where}")

    def _inputs(self, batch: Dict[str, Any]) -> List[torch.Tensor]:
        """The model's four inputs of ``batch`` on the training device (asynchronous
        copies when the loader pinned them: train.py --pin_memory)."""
        return [to_device(batch[key], self.device)
                for key in ("feats", "feats_lengths", "target", "target_lengths")]

    def _autocast(self):
        return autocast_for(self.device, self.amp_dtype)

    def _free_cuda(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def check_replicas(self) -> str:
        """SHA-256 of the parameters, logged; under DDP every rank must hold the same bytes.

        Buffers are left out: BatchNorm statistics legitimately differ between
        ranks after the last batch (DDP copies rank 0's at the next forward, and
        rank 0's are the ones saved).
        """
        digest = hashlib.sha256()
        for name, value in sorted(self.module.named_parameters()):
            digest.update(name.encode())
            digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        mine = digest.hexdigest()
        logging.info("epoch %d: parameters sha256 %s", self.state.epoch, mine)
        if self.dist.distributed:
            every = [None] * self.dist.world_size
            dist.all_gather_object(every, mine)
            if len(set(every)) != 1:
                raise RuntimeError(f"DDP replicas diverged at epoch {self.state.epoch}: {every}")
        return mine

    # ------------------------------------------------------------------------- CV
    @torch.no_grad()
    def cv(self, loader: Iterable) -> float:
        """Loss per utterance over the CV set of all ranks (no collectives until the end)."""
        self.module.eval()
        total, count, skipped = 0.0, 0.0, 0
        for batch in loader:
            with self._autocast():
                out = self.module(*self._inputs(batch))
            loss = float(out["loss"])
            if not math.isfinite(loss):
                skipped += 1
                continue
            n = batch["feats"].shape[0]
            total += loss * n
            count += n
        if skipped:
            logging.warning("cv: skipped %d batch(es) with a non-finite loss", skipped)
        total, count = (float(x) for x in self._reduce([total, count]))
        self.model.train()
        if count == 0:
            logging.warning("cv: no utterances; cv_loss is inf")
            return float("inf")
        return total / count

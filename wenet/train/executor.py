"""The training loop: epochs of accumulated, clipped updates, CV, checkpoints, exact resume.

What it does per batch, in order (every rank in lock-step):

1. fetch a batch; all ranks agree (one all_reduce) whether *every* rank got one,
   and the epoch ends for all as soon as one rank runs out: uneven shards never hang;
2. forward (under ``no_sync`` unless this batch completes an update); a CUDA
   out-of-memory error or a non-finite loss on any rank is shared (second
   all_reduce) and the batch is skipped by all ranks, logged and counted;
3. backward of ``loss / accum_grad``; after ``accum_grad`` good batches: unscale
   (AMP), clip to ``grad_clip``, and step unless the gradient norm is
   non-finite (skipped and counted). ``max_bad_steps`` non-finite steps in a row
   stop training after dumping the batch and model under ``$dir/bad_batch/``;
4. scheduler step, model-average update, a ``step_{S}`` checkpoint every
   ``save_interval`` updates, a log line / tensorboard point every ``log_interval`` batches.

Each epoch ends with CV (loss averaged over utterances of all ranks) and the
``{epoch}`` checkpoint. Resume restores everything needed to continue bit-for-bit.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterable, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from wenet.train.checkpoint import (capture_rng_state, find_latest_checkpoint, load_infos,
                                    load_resume_state, prune_step_checkpoints, restore_rng_state,
                                    save_checkpoint, strip_ddp_prefix)
from wenet.train.model_average import ModelAverager
from wenet.train.setup import DistInfo, TrainConf, dump_bad_batch

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


@dataclass
class StepTimes:
    """Seconds spent per phase of the loop (for bench/train_step.py and the log)."""

    data: float = 0.0
    forward: float = 0.0
    backward: float = 0.0
    optim: float = 0.0
    sync: float = 0.0
    batches: int = 0
    extra: Dict[str, float] = field(default_factory=dict)


def _fmt_eta(seconds: Optional[float]) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Executor:
    """Runs training for one rank; see the module docstring for the per-batch protocol."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                 conf: TrainConf, device: torch.device, dist_info: DistInfo, model_dir: str,
                 scaler: Optional[torch.amp.GradScaler] = None,
                 amp_dtype: Optional[torch.dtype] = None, writer=None,
                 averager: Optional[ModelAverager] = None, train_set=None) -> None:
        self.model = model
        self.train_set = train_set  # a wenet.dataset.dataset.Dataset: positioned on resume
        self.module = model.module if isinstance(model, DistributedDataParallel) else model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.conf = conf
        self.device = device
        self.dist = dist_info
        self.model_dir = model_dir
        self.scaler = scaler
        self.amp_dtype = amp_dtype
        self.writer = writer
        self.averager = averager
        self.state = TrainState()
        self.times = StepTimes()

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
        while self.state.epoch < self.conf.max_epoch:
            if self.state.epoch_done:
                self.state.epoch += 1
                self.state.epoch_done = False
                self.state.batches_done = 0
                self.state.epoch_loss_sum, self.state.epoch_loss_utts = 0.0, 0
                continue
            epoch = self.state.epoch
            logging.info("epoch %d: starting at batch %d (step %d), lr %.3e", epoch,
                         self.state.batches_done, self.state.step, self.lr)
            self.train_set.set_epoch(epoch)
            self.train_epoch(self.train_set.consume(make_train_loader(epoch)))
            train_loss = self.epoch_train_loss()
            cv_loss = self.cv(make_cv_loader())
            logging.info("epoch %d: train_loss %.4f, cv_loss %.4f, step %d, lr %.3e", epoch,
                         train_loss, cv_loss, self.state.step, self.lr)
            if self.writer is not None:
                self.writer.add_scalar("epoch/train_loss", train_loss, epoch)
                self.writer.add_scalar("epoch/cv_loss", cv_loss, epoch)
                self.writer.add_scalar("epoch/lr", self.lr, epoch)
                self.writer.flush()
            self.state.epoch_done = True
            self.check_replicas()
            self.save(str(epoch), cv_loss=cv_loss, train_loss=train_loss)

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
        pending = 0  # good batches whose gradients wait for the update
        first_batch = st.batches_done
        epoch_start = time.time()
        t0 = dict(vars(self.times))
        log = {"loss": 0.0, "loss_ctc": 0.0, "loss_att": 0.0, "n": 0, "audio": 0.0,
               "t": time.time(), "grad_norm": float("nan")}
        while True:
            start = time.perf_counter()
            batch = next(it, None)
            self.times.data += time.perf_counter() - start
            if self._reduce([0.0 if batch is None else 1.0], dist.ReduceOp.MIN).item() < 1:
                if batch is not None:
                    logging.info("another rank ran out of data: ending epoch %d with a batch "
                                 "unused on this rank", st.epoch)
                break
            st.batches_done += 1
            self.times.batches += 1
            completes = pending + 1 == conf.accum_grad
            sync_ctx = (self.model.no_sync() if self.dist.distributed and not completes
                        else contextlib.nullcontext())
            with sync_ctx:
                out = self._forward(batch)
                if out is None:
                    continue
                if not self._backward(out["loss"], batch):
                    pending = 0
                    continue
            pending += 1
            self._accumulate_log(log, out, batch)
            if pending == conf.accum_grad:
                pending = 0
                log["grad_norm"] = self._update(batch)
            if st.batches_done % conf.log_interval == 0:
                self._log(log, first_batch, epoch_start)
        if pending:
            logging.info("epoch %d: dropping the gradients of %d batch(es) that did not fill an "
                         "update (accum_grad %d)", st.epoch, pending, conf.accum_grad)
            self.optimizer.zero_grad(set_to_none=True)
        st.train_seconds += time.time() - epoch_start
        st.batches_per_epoch = st.batches_done
        logging.info("epoch %d: %d batches, step %d, skipped so far: %d non-finite, %d OOM, "
                     "%d fp16 overflow", st.epoch, st.batches_done, st.step, st.skipped_nonfinite,
                     st.skipped_oom, st.scaler_skips)
        spent = {k: getattr(self.times, k) - t0[k] for k in ("data", "forward", "backward", "optim")}
        logging.info("epoch %d: %.1f s: data wait %.1f, forward %.1f, backward %.1f, "
                     "optimizer %.1f, other %.1f", st.epoch, time.time() - epoch_start,
                     spent["data"], spent["forward"], spent["backward"], spent["optim"],
                     time.time() - epoch_start - sum(spent.values()))

    def _forward(self, batch: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Forward pass; None (after all ranks agreed) when the batch must be skipped."""
        start = time.perf_counter()
        oom, nonfinite, out = 0.0, 0.0, None
        try:
            with self._autocast():
                out = self.model(batch["feats"].to(self.device, non_blocking=True),
                                 batch["feats_lengths"].to(self.device, non_blocking=True),
                                 batch["target"].to(self.device, non_blocking=True),
                                 batch["target_lengths"].to(self.device, non_blocking=True))
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
        max_norm = self.conf.grad_clip if self.conf.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.module.parameters(), max_norm))
        stepped = False
        if self.scaler is not None:
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            stepped = self.scaler.get_scale() >= scale
            if not stepped:
                st.scaler_skips += 1
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
            st.consecutive_bad = 0
            self.scheduler.step()
            st.step += 1
            if self.averager is not None:
                self.averager.maybe_update(self.module.state_dict(), st.step)
            if self.conf.save_interval > 0 and st.step % self.conf.save_interval == 0:
                self.save(f"step_{st.step}")
                if self.dist.rank == 0:
                    prune_step_checkpoints(self.model_dir, self.conf.keep_step_checkpoints)
        return grad_norm

    def _count_bad(self, batch: Dict[str, Any]) -> None:
        st = self.state
        st.consecutive_bad += 1
        if st.consecutive_bad < self.conf.max_bad_steps:
            return
        infos = {"epoch": st.epoch, "step": st.step, "batch": st.batches_done,
                 "consecutive_bad": st.consecutive_bad, "keys": list(batch.get("keys") or [])}
        where = dump_bad_batch(self.model_dir, self.dist.rank, batch,
                               strip_ddp_prefix(self.module.state_dict()) if self.dist.rank == 0
                               else None, infos)
        raise RuntimeError(f"{st.consecutive_bad} consecutive non-finite losses/gradients at "
                           f"epoch {st.epoch} batch {st.batches_done}: stopping; the batch and the "
                           f"model are in {where}")

    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _free_cuda(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -------------------------------------------------------------------- logging
    def _accumulate_log(self, log: Dict[str, Any], out: Dict[str, Any], batch: Dict[str, Any]) -> None:
        log["n"] += 1
        utts = int(batch["feats"].shape[0])
        self.state.epoch_loss_sum += float(out["loss"].detach()) * utts
        self.state.epoch_loss_utts += utts
        for key in ("loss", "loss_ctc", "loss_att"):
            value = out.get(key)
            if value is not None:
                log[key] += float(value.detach())
        log["audio"] += float(batch["feats_lengths"].sum()) * self.conf.frame_shift_ms / 1000.0

    def _log(self, log: Dict[str, Any], first_batch: int, epoch_start: float) -> None:
        st, now = self.state, time.time()
        n = max(1, log["n"])
        throughput = log["audio"] / max(1e-9, now - log["t"])
        done_here = st.batches_done - first_batch
        per_batch = (now - epoch_start) / max(1, done_here)
        epoch_eta = ((st.batches_per_epoch - st.batches_done) * per_batch
                     if st.batches_per_epoch >= st.batches_done else None)
        train_eta = (None if epoch_eta is None else
                     epoch_eta + (self.conf.max_epoch - st.epoch - 1) * st.batches_per_epoch * per_batch)
        if self.dist.rank == 0:
            logging.info("epoch %d batch %d step %d: loss %.4f loss_ctc %.4f loss_att %.4f lr %.3e "
                         "grad_norm %.3f | %.1f audio s/s per rank | ETA epoch %s, training %s",
                         st.epoch, st.batches_done, st.step, log["loss"] / n, log["loss_ctc"] / n,
                         log["loss_att"] / n, self.lr, log["grad_norm"], throughput,
                         _fmt_eta(epoch_eta), _fmt_eta(train_eta))
            if self.writer is not None:
                for key in ("loss", "loss_ctc", "loss_att"):
                    self.writer.add_scalar(f"train/{key}", log[key] / n, st.step)
                self.writer.add_scalar("train/lr", self.lr, st.step)
                self.writer.add_scalar("train/grad_norm", log["grad_norm"], st.step)
                self.writer.add_scalar("train/throughput", throughput * self.dist.world_size, st.step)
                self.writer.add_scalar("train/skipped", st.skipped_nonfinite + st.skipped_oom, st.step)
        log.update(loss=0.0, loss_ctc=0.0, loss_att=0.0, n=0, audio=0.0, t=now)

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
                out = self.module(batch["feats"].to(self.device), batch["feats_lengths"].to(self.device),
                                  batch["target"].to(self.device), batch["target_lengths"].to(self.device))
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

    # ---------------------------------------------------------------- checkpoints
    def save(self, name: str, cv_loss: Optional[float] = None,
             train_loss: Optional[float] = None) -> None:
        """Checkpoint ``name`` (all ranks call it: each contributes its RNG state)."""
        mine = {"rng": capture_rng_state(),
                "data": self.train_set.state_dict() if self.train_set is not None else None}
        per_rank = [None] * self.dist.world_size
        if self.dist.distributed:
            dist.all_gather_object(per_rank, mine)
        else:
            per_rank = [mine]
        if self.dist.rank != 0:
            return
        st = self.state
        infos = {"epoch": st.epoch, "step": st.step, "lr": self.lr, "cv_loss": cv_loss,
                 "train_loss": train_loss,
                 "batches": st.batches_done, "world_size": self.dist.world_size,
                 "skipped_nonfinite": st.skipped_nonfinite, "skipped_oom": st.skipped_oom}
        resume = {"format": RESUME_FORMAT, **asdict(st),
                  "optimizer": self.optimizer.state_dict(),
                  "scheduler": self.scheduler.state_dict(),
                  "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                  "averager": self.averager.state_dict() if self.averager is not None else None,
                  "per_rank": per_rank, "world_size": self.dist.world_size}
        model_state = {k: v.detach().cpu() for k, v in strip_ddp_prefix(self.module.state_dict()).items()}
        avg = self.averager.export() if (self.averager is not None and st.epoch_done) else None
        save_checkpoint(f"{self.model_dir}/{name}", model_state, infos, avg, resume,
                        write_yaml=st.epoch_done)

    def restore(self, base: str) -> None:
        """Continue from checkpoint ``base``: exactly when its resume state exists, else weights only."""
        weights = torch.load(f"{base}.pt", map_location="cpu", weights_only=True)
        self.module.load_state_dict(strip_ddp_prefix(weights))
        try:
            resume = load_resume_state(base)
        except FileNotFoundError:
            infos = load_infos(base)
            if "epoch" in infos:
                self.state.epoch, self.state.epoch_done = int(infos["epoch"]), True
                self.state.step = int(infos.get("step", 0))
            logging.warning("%s has no resume state: loaded the weights only; optimizer, scheduler "
                            "and data position start fresh (continuing after epoch %s)", base,
                            infos.get("epoch", "none"))
            return
        if resume.get("format") != RESUME_FORMAT:
            raise ValueError(f"{base}.resume.pt: unknown format {resume.get('format')}")
        self.state = TrainState(**{k: resume[k] for k in asdict(TrainState()) if k in resume})
        self.optimizer.load_state_dict(resume["optimizer"])
        self.scheduler.load_state_dict(resume["scheduler"])
        if self.scaler is not None and resume.get("scaler"):
            self.scaler.load_state_dict(resume["scaler"])
        if self.averager is not None and resume.get("averager"):
            self.averager.load_state_dict(resume["averager"])
        if resume["world_size"] == self.dist.world_size:
            mine = resume["per_rank"][self.dist.rank]
            restore_rng_state(mine["rng"])
            if self.train_set is not None and mine["data"] is not None:
                self.train_set.load_state_dict(mine["data"])
        else:
            logging.warning("%s was saved by %d ranks, this run has %d: RNG streams start afresh "
                            "and an unfinished epoch restarts from its first batch", base,
                            resume["world_size"], self.dist.world_size)
            self.state.batches_done = 0
            self.state.epoch_loss_sum, self.state.epoch_loss_utts = 0.0, 0
        logging.info("resumed from %s: epoch %d (%s), step %d, batch %d", base, self.state.epoch,
                     "done" if self.state.epoch_done else "in progress", self.state.step,
                     self.state.batches_done)

    def restore_latest(self) -> Optional[str]:
        """Resume from the newest complete checkpoint of ``model_dir``; its base, or None."""
        base = find_latest_checkpoint(self.model_dir)
        if base is not None:
            self.restore(base)
        return base

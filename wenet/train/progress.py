"""What the training loop reports: log lines, tensorboard points, ETA and where the time goes.

Every ``log_interval`` batches rank 0 logs the mean losses of the batches since
the previous line, the learning rate, the last gradient norm, the throughput in
seconds of audio per second and the ETA of the epoch and of the training, and
writes the same figures to tensorboard (``train/*``, per update). At each epoch
end every rank logs its counters, the time split of :class:`StepTimes` and its
throughput line (audio seconds, audio s/s, s/batch, and the peak CUDA memory of
the epoch on a GPU; :func:`parse_throughput` reads it back, e.g. for
tools/gpu_check.sh); the epoch's train and CV losses go to ``epoch/*``. Nothing
here changes training.
"""
from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.train_state import TrainState

LOSS_KEYS = ("loss", "loss_ctc", "loss_att")
_PHASES = ("data", "forward", "backward", "optim")


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


def fmt_eta(seconds: Optional[float]) -> str:
    """``H:MM:SS``, or ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def eta(st: TrainState, per_batch: float, max_epoch: int) -> Tuple[Optional[float], Optional[float]]:
    """Seconds left in this epoch and in the whole training, at ``per_batch`` seconds a batch.

    Unknown (None) until one epoch has finished and given the number of batches per epoch.
    """
    if st.batches_per_epoch < st.batches_done:
        return None, None
    epoch_eta = (st.batches_per_epoch - st.batches_done) * per_batch
    return epoch_eta, epoch_eta + (max_epoch - st.epoch - 1) * st.batches_per_epoch * per_batch


@dataclass
class _Window:
    """Sums over the good batches since the previous log line."""

    t: float                                   # when the window opened
    n: int = 0
    audio: float = 0.0                         # seconds of audio
    losses: Dict[str, float] = field(default_factory=lambda: dict.fromkeys(LOSS_KEYS, 0.0))

    def reset(self, now: float) -> None:
        self.t, self.n, self.audio = now, 0, 0.0
        self.losses = dict.fromkeys(LOSS_KEYS, 0.0)


class EpochProgress:
    """Reports one epoch (or its rest after a resume) as the loop goes through it."""

    def __init__(self, st: TrainState, times: StepTimes, conf: TrainConf, dist: DistInfo,
                 writer: Any = None) -> None:
        self.conf, self.dist, self.writer = conf, dist, writer
        self.first_batch = st.batches_done
        self.start = time.time()
        self.times_at_start = dict(vars(times))
        self.window = _Window(t=time.time())
        self.grad_norm = float("nan")  # of the last update, logged with every line until the next
        self.epoch_audio = 0.0  # seconds of audio in this epoch's good batches (this rank)
        if _cuda_in_use():
            torch.cuda.reset_peak_memory_stats()

    def add(self, out: Dict[str, Any], batch: Dict[str, Any]) -> None:
        """Count a good batch (its losses and audio) into the next log line."""
        self.window.n += 1
        for key, value in out.items():  # LOSS_KEYS, and what a model adds (loss_cr, loss_pruned...)
            if (key in LOSS_KEYS or key.startswith("loss_")) and value is not None:
                self.window.losses[key] = self.window.losses.get(key, 0.0) + float(value.detach())
        frames = batch["feats_lengths"].sum()
        if "added_frames" in batch:  # edge_pad's silence is not audio
            frames = frames - batch["added_frames"].sum()
        audio = float(frames) * self.conf.frame_shift_ms / 1000.0
        self.window.audio += audio
        self.epoch_audio += audio

    def log_batch(self, st: TrainState, lr: float) -> None:
        """The periodic log line and tensorboard points (rank 0); opens a new window."""
        now, w = time.time(), self.window
        n = max(1, w.n)
        means = {key: total / n for key, total in w.losses.items()}
        extra = "".join(f" {key} {means[key]:.4f}" for key in means if key not in LOSS_KEYS)
        throughput = w.audio / max(1e-9, now - w.t)
        per_batch = (now - self.start) / max(1, st.batches_done - self.first_batch)
        epoch_eta, train_eta = eta(st, per_batch, self.conf.max_epoch)
        if self.dist.rank == 0:
            logging.info("epoch %d batch %d step %d: loss %.4f loss_ctc %.4f loss_att %.4f%s "
                         "lr %.3e grad_norm %.3f | %.1f audio s/s per rank | ETA epoch %s, "
                         "training %s", st.epoch, st.batches_done, st.step, means["loss"],
                         means["loss_ctc"], means["loss_att"], extra, lr, self.grad_norm, throughput,
                         fmt_eta(epoch_eta), fmt_eta(train_eta))
            self._write_batch_scalars(st, means, lr, throughput)
        w.reset(now)

    def _write_batch_scalars(self, st: TrainState, means: Dict[str, float], lr: float,
                             throughput: float) -> None:
        if self.writer is None:
            return
        for key, value in means.items():
            self.writer.add_scalar(f"train/{key}", value, st.step)
        self.writer.add_scalar("train/lr", lr, st.step)
        self.writer.add_scalar("train/grad_norm", self.grad_norm, st.step)
        self.writer.add_scalar("train/throughput", throughput * self.dist.world_size, st.step)
        self.writer.add_scalar("train/skipped", st.skipped_nonfinite + st.skipped_oom, st.step)

    def log_epoch_end(self, st: TrainState, times: StepTimes) -> None:
        """The epoch's counters and how its time split between the phases of the loop."""
        logging.info("epoch %d: %d batches, step %d, skipped so far: %d non-finite, %d OOM, "
                     "%d fp16 overflow", st.epoch, st.batches_done, st.step, st.skipped_nonfinite,
                     st.skipped_oom, st.scaler_skips)
        spent = {k: getattr(times, k) - self.times_at_start[k] for k in _PHASES}
        logging.info("epoch %d: %.1f s: data wait %.1f, forward %.1f, backward %.1f, "
                     "optimizer %.1f, other %.1f", st.epoch, time.time() - self.start,
                     spent["data"], spent["forward"], spent["backward"], spent["optim"],
                     time.time() - self.start - sum(spent.values()))
        peak_mib = torch.cuda.max_memory_allocated() / 2 ** 20 if _cuda_in_use() else None
        logging.info("%s", throughput_line(st.epoch, self.epoch_audio, time.time() - self.start,
                                           st.batches_done - self.first_batch, peak_mib))


def _cuda_in_use() -> bool:
    """True when this process has started CUDA (then its current device is the training one)."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()


_THROUGHPUT = re.compile(
    r"epoch (?P<epoch>\d+) throughput: (?P<audio_s>[\d.]+) s of audio in (?P<wall_s>[\d.]+) s, "
    r"(?P<audio_s_per_s>[\d.]+) audio s/s per rank, (?P<s_per_batch>[\d.]+) s/batch over "
    r"(?P<batches>\d+) batches(?:, peak CUDA memory (?P<peak_mib>\d+) MiB)?")


def throughput_line(epoch: int, audio_s: float, wall_s: float, batches: int,
                    peak_mib: Optional[float]) -> str:
    """The epoch-end throughput line of one rank (``peak_mib`` None: not on CUDA)."""
    line = (f"epoch {epoch} throughput: {audio_s:.1f} s of audio in {wall_s:.1f} s, "
            f"{audio_s / max(wall_s, 1e-9):.1f} audio s/s per rank, "
            f"{wall_s / max(batches, 1):.4f} s/batch over {batches} batches")
    if peak_mib is not None:
        line += f", peak CUDA memory {peak_mib:.0f} MiB"
    return line


def parse_throughput(text: str) -> List[Dict[str, Optional[float]]]:
    """The figures of every throughput line in ``text`` (a train log), in order: epoch,
    audio_s, wall_s, audio_s_per_s, s_per_batch, batches and peak_mib (None off CUDA)."""
    return [{k: (None if v is None else float(v)) for k, v in m.groupdict().items()}
            for m in _THROUGHPUT.finditer(text)]


def log_epoch_losses(writer: Any, st: TrainState, train_loss: float, cv_loss: float,
                     lr: float) -> None:
    """The epoch's result line, and its ``epoch/*`` tensorboard points when there is a writer."""
    logging.info("epoch %d: train_loss %.4f, cv_loss %.4f, step %d, lr %.3e", st.epoch,
                 train_loss, cv_loss, st.step, lr)
    if writer is not None:
        writer.add_scalar("epoch/train_loss", train_loss, st.epoch)
        writer.add_scalar("epoch/cv_loss", cv_loss, st.epoch)
        writer.add_scalar("epoch/lr", lr, st.epoch)
        writer.flush()

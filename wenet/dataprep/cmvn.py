"""Global CMVN statistics: accumulate, save, load. The one owner of the ``global_cmvn`` format.

The file is one line of JSON, ``{"mean_stat": [D sums], "var_stat": [D sums of
squares], "frame_num": N}``, as WeNet 2.x writes it. Sums are accumulated in
float64 so the result does not depend on how utterances are split between
worker processes.
"""
from __future__ import annotations

import json
import logging
import multiprocessing
from dataclasses import dataclass, field
from typing import List, Tuple

import numpy as np
import torch
from tqdm import tqdm

from wenet.dataset.audio import AudioError, cut_audio, decode_audio, read_audio_bytes, resample, to_mono
from wenet.dataprep.data_list import Utterance, group_by_recording
from wenet.dataset.fbank import FeatureConf, compute_fbank
from wenet.utils.file_utils import atomic_write_text

# Floor for the variance before taking 1/sqrt, so a constant feature dimension
# gives a large but finite inverse std instead of inf (WeNet uses the same floor).
VARIANCE_FLOOR = 1.0e-20


@dataclass
class CmvnStats:
    """Running sums of features and of their squares over frames."""

    dim: int
    mean_stat: np.ndarray = field(default=None)  # type: ignore[assignment]
    var_stat: np.ndarray = field(default=None)  # type: ignore[assignment]
    frame_num: int = 0

    def __post_init__(self) -> None:
        if self.mean_stat is None:
            self.mean_stat = np.zeros(self.dim, dtype=np.float64)
        if self.var_stat is None:
            self.var_stat = np.zeros(self.dim, dtype=np.float64)

    def accumulate(self, feats: torch.Tensor) -> None:
        """Add the frames of a (T, D) feature matrix."""
        if feats.dim() != 2 or feats.shape[1] != self.dim:
            raise ValueError(f"expected features of shape (T, {self.dim}), got {tuple(feats.shape)}")
        x = feats.detach().to(torch.float64).cpu().numpy()
        self.mean_stat += x.sum(axis=0)
        self.var_stat += np.square(x).sum(axis=0)
        self.frame_num += x.shape[0]

    def merge(self, other: "CmvnStats") -> None:
        """Add another accumulator's sums into this one."""
        if other.dim != self.dim:
            raise ValueError(f"cannot merge CMVN stats of dim {other.dim} into dim {self.dim}")
        self.mean_stat += other.mean_stat
        self.var_stat += other.var_stat
        self.frame_num += other.frame_num

    def to_json(self) -> str:
        """The one-line JSON text of the ``global_cmvn`` file (with a final newline)."""
        return json.dumps({"mean_stat": [float(v) for v in self.mean_stat],
                           "var_stat": [float(v) for v in self.var_stat],
                           "frame_num": int(self.frame_num)}) + "\n"


def _non_finite_dims(stats: CmvnStats) -> List[int]:
    """Feature dimensions whose sum or sum of squares is NaN or infinite."""
    bad = ~(np.isfinite(stats.mean_stat) & np.isfinite(stats.var_stat))
    return [int(i) for i in np.flatnonzero(bad)]


def save_cmvn(stats: CmvnStats, path: str) -> None:
    """Write ``stats`` to ``path`` atomically (a reader never sees half a file).

    Statistics that cover no frames or are not finite are refused (ValueError naming
    ``path``): a NaN in global_cmvn would turn every feature of training into NaN.
    """
    if stats.frame_num <= 0:
        raise ValueError(f"refusing to write {path}: CMVN statistics cover no frames")
    bad = _non_finite_dims(stats)
    if bad:
        raise ValueError(f"refusing to write {path}: CMVN statistics are NaN or infinite in "
                         f"{len(bad)} of {stats.dim} dimensions (first: {bad[0]})")
    atomic_write_text(path, stats.to_json())
    logging.info("wrote %s: %d frames, dim %d", path, stats.frame_num, stats.dim)


def _number_list(obj: dict, name: str, path: str) -> np.ndarray:
    """``obj[name]`` as a float64 array: it must be a non-empty JSON list of finite numbers."""
    values = obj.get(name)
    if (not isinstance(values, list) or not values
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
        raise ValueError(f"{path}: global_cmvn's {name} must be a non-empty list of numbers")
    array = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{path}: global_cmvn's {name} is NaN or infinite in {bad.size} of "
                         f"{array.size} dimensions (first: {int(bad[0])})")
    return array


def read_cmvn_stats(path: str) -> CmvnStats:
    """Parse a ``global_cmvn`` file back into sums; a malformed or non-finite value is a
    ValueError naming the file."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:  # ValueError: bad JSON or bad UTF-8
        raise ValueError(f"{path}: not a readable global_cmvn JSON file: {e}") from e
    if not isinstance(obj, dict) or not {"mean_stat", "var_stat", "frame_num"} <= set(obj):
        raise ValueError(f"{path}: global_cmvn needs a JSON object with mean_stat, var_stat "
                         "and frame_num")
    mean_stat = _number_list(obj, "mean_stat", path)
    var_stat = _number_list(obj, "var_stat", path)
    if mean_stat.shape != var_stat.shape:
        raise ValueError(f"{path}: mean_stat has {mean_stat.size} values, var_stat {var_stat.size}")
    if (var_stat < 0).any():
        raise ValueError(f"{path}: var_stat holds negative sums of squares")
    frame_num = obj["frame_num"]
    if isinstance(frame_num, float) and frame_num.is_integer():
        frame_num = int(frame_num)
    if not isinstance(frame_num, int) or isinstance(frame_num, bool) or frame_num <= 0:
        raise ValueError(f"{path}: frame_num must be a positive integer, got {frame_num!r}")
    return CmvnStats(dim=mean_stat.size, mean_stat=mean_stat, var_stat=var_stat,
                     frame_num=frame_num)


def stats_to_mean_istd(stats: CmvnStats) -> Tuple[np.ndarray, np.ndarray]:
    """Sums → (mean, inverse std), float32 arrays of shape (D,)."""
    mean = stats.mean_stat / stats.frame_num
    variance = stats.var_stat / stats.frame_num - np.square(mean)
    variance = np.maximum(variance, VARIANCE_FLOOR)
    istd = 1.0 / np.sqrt(variance)
    return mean.astype(np.float32), istd.astype(np.float32)


def load_cmvn(path: str) -> Tuple[np.ndarray, np.ndarray]:
    """``global_cmvn`` file → (mean, istd) float32 arrays for a GlobalCMVN layer.

    Normalised features are ``(x - mean) * istd``.
    """
    return stats_to_mean_istd(read_cmvn_stats(path))


def utterance_features(wav: torch.Tensor, rate: int, conf: FeatureConf) -> torch.Tensor:
    """(channels, samples) audio → (T, D) fbank: mono, resampled when asked, no dither."""
    wav = to_mono(wav)
    if conf.resample_rate and conf.resample_rate != rate:
        wav = resample(wav, rate, conf.resample_rate)
        rate = conf.resample_rate
    return compute_fbank(wav, rate, **conf.fbank_kwargs(dither=0.0))


_Task = Tuple[str, List[Utterance], FeatureConf]
_Result = Tuple[CmvnStats, List[Tuple[str, str]]]


def _recording_stats(task: _Task) -> _Result:
    """Stats of every utterance cut from one audio source (decoded once), plus failures."""
    spec, utts, conf = task
    stats = CmvnStats(conf.num_mel_bins)
    failed: List[Tuple[str, str]] = []
    try:
        wav, rate = decode_audio(read_audio_bytes(spec), spec)
    except AudioError as e:
        return stats, [(u.key, str(e)) for u in utts]
    for utt in utts:
        piece = cut_audio(wav, rate, utt.start, utt.end) if utt.is_segment else wav
        feats = _features_or_reason(piece, rate, conf, spec, utt)
        if isinstance(feats, str):
            failed.append((utt.key, feats))
        else:
            stats.accumulate(feats)
    return stats, failed


def _features_or_reason(piece: torch.Tensor, rate: int, conf: FeatureConf, spec: str,
                        utt: Utterance) -> torch.Tensor | str:
    """The utterance's features, or why it cannot count: NaN/infinite samples (a float
    WAV can hold them) or features, no frames."""
    bad = int((~torch.isfinite(piece)).sum())
    if bad:
        return f"{bad} NaN or infinite samples in {spec}"
    try:
        feats = utterance_features(piece, rate, conf)
    except (RuntimeError, ValueError) as e:  # e.g. a segment shorter than one frame
        return f"no features from {spec}: {e}"
    if feats.shape[0] == 0:
        return f"no frames in {spec} [{utt.start}, {utt.end})"
    if not bool(torch.isfinite(feats).all()):
        return f"NaN or infinite features from {spec} (samples too large?)"
    return feats


def _init_worker() -> None:
    torch.set_num_threads(1)


def compute_cmvn_stats(utts: List[Utterance], conf: FeatureConf,
                       num_workers: int = 1) -> Tuple[CmvnStats, int]:
    """Sum fbank features of ``utts`` over ``num_workers`` processes → (stats, failures).

    Work is split by recording and merged in input order, so the sums are the
    same (to float64 rounding of the per-recording partial sums, which are
    computed identically everywhere) for any number of workers. Unreadable audio
    is logged by utterance and counted, not fatal.
    """
    tasks: List[_Task] = [(spec, run, conf) for spec, run in group_by_recording(utts)]
    total = CmvnStats(conf.num_mel_bins)
    num_failed = 0
    bar = tqdm(total=len(utts), desc="cmvn", unit="utt")
    if num_workers <= 1:
        results = map(_recording_stats, tasks)
        pool = None
    else:
        pool = multiprocessing.get_context("fork").Pool(num_workers, initializer=_init_worker)
        results = pool.imap(_recording_stats, tasks, chunksize=max(1, min(16, len(tasks) // (8 * num_workers))))
    try:
        for (stats, failed), (_, run, _) in zip(results, tasks):
            total.merge(stats)
            for key, why in failed:
                logging.warning("skipping utterance %s: %s", key, why)
            num_failed += len(failed)
            bar.update(len(run))
    finally:
        bar.close()
        if pool is not None:  # every result is in (or we are failing): stop the workers
            pool.terminate()
            pool.join()
    if num_failed:
        logging.warning("%d of %d utterances skipped (unreadable or non-finite audio, or no frames)",
                        num_failed, len(utts))
    return total, num_failed

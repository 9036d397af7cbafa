"""Audio inputs of the runtime without torch: the inputs transcribe.py takes (audio files,
directories, wav.scp or file lists, ``-``), read with soundfile, checked and turned into
the model's fbank; an input that gives no features is an :class:`InputError` naming why.

Audio at another sample rate than the model's is refused, not resampled: training
resamples with torchaudio, which this runtime does not have, and a different resampler
would give slightly different features (resample first, e.g. ``sox in.wav -r 16000
out.wav``). Several channels are averaged to mono, as training does.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import IO, AbstractSet, Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import soundfile as sf

from wenet.dataset.audio_bytes import AudioError, decode_samples, is_pipe, read_audio_bytes
from wenet.inference.segments import SegmentConf, file_blocks, split_stream
from wenet.runtime.fbank import FbankOptions, fbank

logger = logging.getLogger(__name__)

AUDIO_SUFFIXES = frozenset({"wav", "flac", "ogg", "opus", "mp3", "sph"})


class InputError(ValueError):
    """An input that gives no features; the message says which and why."""


def path_key(path: str) -> str:
    """The key of audio given by path: the file name without extension, each run of
    whitespace in it replaced by ``_`` (logged), so that ``key text`` and CTM lines,
    whose fields are separated by spaces, stay readable."""
    name = os.path.splitext(os.path.basename(path))[0]
    key = "_".join(name.split())
    if key != name:
        logger.info("%s: key %s (whitespace of the file name replaced by _)", path, key)
    return key


def unique_keys(items: Sequence[Tuple[str, Any]], hint: str) -> None:
    """ValueError naming the first key two inputs share, their sources and ``hint``: each
    result is known by its key (output lines, subtitle files, the API's results)."""
    first: Dict[str, Any] = {}
    for key, source in items:
        if key in first:
            raise ValueError(f"two inputs have the key '{key}': {first[key]} and {source} "
                             f"({hint})")
        first[key] = source


def scp_entry(line: str) -> Tuple[str, str]:
    """(key, audio) of a wav.scp line (``key path`` or ``key cmd |``) or of a bare path
    (key: :func:`path_key`)."""
    line = line.strip()
    if os.path.isfile(line) or len(line.split(None, 1)) == 1:
        return path_key(line), line
    key, spec = line.split(None, 1)
    return key, spec.strip()


def _is_audio(path: str, suffixes: AbstractSet[str]) -> bool:
    return os.path.splitext(path)[1].lower().lstrip(".") in suffixes


def audio_inputs(args: Sequence[str], stdin: Optional[IO[str]] = None,
                 suffixes: AbstractSet[str] = AUDIO_SUFFIXES) -> List[Tuple[str, str]]:
    """(key, audio) of every input: audio files, directories (their audio files, sorted),
    wav.scp / list files and ``-`` (such a list on stdin). A duplicate key is an error."""
    items: List[Tuple[str, str]] = []
    for arg in args:
        if arg == "-":
            lines = (stdin or sys.stdin).read().splitlines()
        elif os.path.isdir(arg):
            lines = sorted(os.path.join(root, f) for root, _, files in os.walk(arg)
                           for f in files if _is_audio(f, suffixes))
        elif _is_audio(arg, suffixes):
            lines = [arg]
        elif os.path.isfile(arg):
            with open(arg, encoding="utf-8") as f:
                lines = f.read().splitlines()
        else:
            raise FileNotFoundError(f"no such file or directory: {arg}")
        items.extend(scp_entry(line) for line in lines if line.strip())
    unique_keys(items, "use a wav.scp with unique keys")
    return items


def read_audio(spec: str) -> Tuple[np.ndarray, int]:
    """Mono float32 samples in [-1, 1] and the rate of a wav.scp value (read and decoded
    as training reads it, ``wenet.dataset.audio_bytes``, which needs no torch)."""
    try:
        samples, rate = decode_samples(read_audio_bytes(spec), spec.strip())
    except AudioError as e:
        raise InputError(str(e)) from None
    if samples.shape[0] > 1:
        logger.warning("%s: %d channels averaged to mono", spec, samples.shape[0])
        samples = samples.mean(axis=0, keepdims=True, dtype=np.float32)
    return np.ascontiguousarray(samples[0]), rate


def features(spec: str, options: FbankOptions, min_frames: int) -> np.ndarray:
    """The model's fbank (T, F) of a wav.scp value; InputError for audio the model cannot
    take: unreadable, empty, non-finite, at another sample rate, or shorter than the
    ``min_frames`` feature frames one encoder output frame needs."""
    samples, rate = read_audio(spec)
    _check_rate(rate, options)
    return samples_features(samples, options, min_frames)


def _check_rate(rate: int, options: FbankOptions) -> None:
    if rate != options.sample_rate:
        raise InputError(f"sampled at {rate} Hz, the model takes {options.sample_rate} Hz: "
                         f"resample it first (e.g. sox IN -r {options.sample_rate} OUT.wav); "
                         "this runtime does not resample")


def segment_features(spec: str, options: FbankOptions, min_frames: int,
                     conf: SegmentConf) -> Iterator[np.ndarray]:
    """The fbank of a wav.scp value, as :func:`features`, when it is at most
    ``conf.max_segment_s`` long; else the fbank of each of its segments, cut at pauses
    as transcribe.py cuts (``wenet.inference.segments``), a file read in blocks so that
    memory does not grow with its length."""
    path = spec.strip()
    info = None
    if not is_pipe(path):
        try:
            info = sf.info(path)
        except (sf.LibsndfileError, RuntimeError, OSError):
            pass  # not a file soundfile opens: read whole below, which says why
    if info is not None and info.frames > conf.max_segment_s * info.samplerate:
        _check_rate(int(info.samplerate), options)
        try:
            rate, _, blocks = file_blocks(path, conf.block_s)
        except AudioError as e:
            raise InputError(str(e)) from None
        segments = split_stream(blocks, rate, conf)
    else:
        samples, rate = read_audio(spec)
        _check_rate(rate, options)
        if samples.size <= conf.max_segment_s * rate:
            yield samples_features(samples, options, min_frames)
            return
        segments = split_stream([samples], rate, conf)
    for seg in segments:
        yield samples_features(seg.samples, options, min_frames)


def samples_features(samples: np.ndarray, options: FbankOptions, min_frames: int) -> np.ndarray:
    """The fbank of mono samples at the model's rate; InputError for empty, non-finite or
    too short audio (:func:`features`)."""
    if samples.size == 0:
        raise InputError("zero-length audio")
    bad = int((~np.isfinite(samples)).sum())
    if bad:
        raise InputError(f"{bad} NaN or infinite samples")
    rate = options.sample_rate
    frames = options.num_frames(samples.size)
    if frames < max(min_frames, 1):
        need = options.frame_length + (max(min_frames, 1) - 1) * options.frame_shift
        raise InputError(f"{samples.size / rate:.3g} s ({frames} feature frames) is shorter "
                         f"than the model's minimum {need / 1000:.3g} s ({min_frames} frames)")
    return fbank(samples, options)

"""Long recordings cut into segments of bounded length at pauses (torch-free: both
transcribe.py's Recognizer and the ONNX runtime cut with it).

results joined back into one result per recording.

A model trained on sentences of a few seconds decodes a five-minute recording in one
piece badly (it drops most of the words: attention over minutes it never saw) and
with memory that grows with the file. It also decodes a stretch of several sentences
worse than each sentence alone. So audio longer than ``max_segment_s`` is cut where a
voice-activity detector would end an utterance, and the silence between utterances is
not decoded. One step of the cut, on the buffer that starts where the last one ended
(:func:`plan_segment`; pauses from :func:`wenet.inference.vad.pauses`, at least
``vad.min_pause_s``, measured on the buffer's first ``max_segment_s`` only):

* a leading silence is dropped but its last ``pad_s``: the segment begins there;
* the segment ends in the first pause of at least ``cut_pause_s`` (0.3 s: between
  sentences, longer than most pauses inside one) that lies, clipped, in
  ``[begin + min_segment_s, max_segment_s]``; with none, in the longest shorter pause
  there (the earliest of equally long ones); with no pause at all, at the middle of the
  quietest 10 ms window of that range (logged: such a cut may split a word);
* a cut in a pause keeps ``pad_s`` of it on each side (all of it, cut at its middle,
  when it is shorter than ``2 * pad_s``) and drops the rest: a model saw utterances
  with a little silence around the speech, not seconds of it;
* a step runs once ``max_segment_s + min_segment_s`` of audio are buffered; at the end
  of the recording the rest is cut the same way (each cut leaving ``min_segment_s``
  after it) and what remains without a pause is the last segment, its trailing silence
  beyond ``pad_s`` dropped, never shorter than ``min_segment_s``.

Segments do not overlap: a cut in a pause separates two words, so each word is
decoded whole in exactly one segment and the texts simply join; overlap (and merging
words by time) would only pay for cuts inside speech, which happen only when a stretch
of ``max_segment_s - min_segment_s`` holds no pause at all.

``bench/long_audio.py`` measures the rule: the WER of a test set's files joined into
one recording against the files decoded one by one (RESULTS.md, "Long audio"); the
defaults were chosen on the dev set.

Audio files are read in blocks of ``block_s`` with soundfile and mixed down to mono
(:func:`file_blocks`), so memory is bounded by the segment length, not the file. Audio
that soundfile cannot open by path (a ``cmd |`` wav.scp value) is read whole and cut the
same way.

Each segment carries its offset in the recording, so that its result can be placed in
the recording's (``wenet.inference.long_audio`` joins ``Recognizer`` results, the runtime
joins texts).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple, Optional, Tuple

import numpy as np
import soundfile as sf

from wenet.alignment.pauses import energy_db
from wenet.dataset.audio_bytes import AudioError, refuse_truncated_file
from wenet.inference.vad import VadConf, pauses

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SegmentConf:
    """How long audio is cut (see the module docstring)."""

    max_segment_s: float = 20.0
    min_segment_s: float = 1.0
    pad_s: float = 0.3
    cut_pause_s: float = 0.3
    block_s: float = 10.0
    vad: VadConf = VadConf()

    def __post_init__(self) -> None:
        if not 0 < self.min_segment_s < self.max_segment_s:
            raise ValueError(f"segments need 0 < min_segment_s < max_segment_s, got "
                             f"{self.min_segment_s} and {self.max_segment_s}")
        if not 0 <= self.pad_s < self.min_segment_s:
            raise ValueError(f"pad_s must be in [0, min_segment_s), got {self.pad_s}")
        if self.block_s <= 0:
            raise ValueError(f"block_s must be > 0, got {self.block_s}")

    @classmethod
    def for_max_segment(cls, max_segment_s: float) -> "SegmentConf":
        """The defaults with ``max_segment_s``, the shortest segment and the kept silence
        scaled down for a small one (``--max_segment_s`` of transcribe.py and the runtime)."""
        min_s = min(cls.min_segment_s, max_segment_s / 4)
        return cls(max_segment_s=max_segment_s, min_segment_s=min_s,
                   pad_s=min(cls.pad_s, min_s / 2))


@dataclass
class Segment:
    """Samples ``[start, start + len(samples))`` of a recording (mono float32)."""

    index: int
    start: int
    samples: np.ndarray
    rate: int
    last: bool
    cut_in_pause: bool = True      # whether the cut that ends it lies in a pause
    total_s: Optional[float] = None  # the last segment: the recording's duration

    @property
    def start_s(self) -> float:
        return self.start / self.rate

    @property
    def end_s(self) -> float:
        return (self.start + len(self.samples)) / self.rate


class Plan(NamedTuple):
    """One step of cutting a buffer (sample indices into it): the segment is
    ``[begin, end)``, the next search starts at ``resume`` (``end..resume`` is the part
    of the cut pause beyond ``pad_s``, dropped); ``end`` None: no segment yet, drop
    ``[0, begin)`` (the leading silence) and look again."""

    begin: int
    end: Optional[int]
    resume: int
    in_pause: bool


def plan_segment(samples: np.ndarray, rate: int, hi_s: float, conf: SegmentConf) -> Plan:
    """The next segment of ``samples`` (a buffer of at least ``hi_s``), measured on
    ``samples[:hi_s * rate]`` only (module docstring)."""
    window = samples[:int(round(hi_s * rate))]
    runs = pauses(window, rate, conf.vad)
    begin_s = 0.0
    if runs and runs[0][0] <= 0.0:  # leading silence: keep its last pad_s
        begin_s = max(0.0, runs[0][1] - conf.pad_s)
        runs = runs[1:]
    lo_s = begin_s + conf.min_segment_s
    begin = int(round(begin_s * rate))
    if lo_s >= hi_s:
        if begin > 0:  # speech starts too late in the window for a segment after it
            return Plan(begin, None, begin, True)
        lo_s = hi_s  # a recording's end: the cut leaves min_segment_s after it
    clipped = [(max(start, lo_s), min(end, hi_s)) for start, end in runs]
    clipped = [(start, end) for start, end in clipped if end - start >= conf.vad.min_pause_s - 1e-9]
    sentence = [(start, end) for start, end in clipped if end - start >= conf.cut_pause_s - 1e-9]
    if sentence or clipped:
        start, end = sentence[0] if sentence else max(clipped, key=lambda p: p[1] - p[0] - 1e-6 * p[0])
        mid = (start + end) / 2
        return Plan(begin, int(round(min(start + conf.pad_s, mid) * rate)),
                    int(round(max(end - conf.pad_s, mid) * rate)), True)
    hop = conf.vad.hop_s
    energy = energy_db(window, rate, hop)
    first = min(int(math.ceil(lo_s / hop - 1e-9)), max(0, len(energy) - 1))
    last = max(first + 1, min(len(energy), int(math.floor(hi_s / hop + 1e-9))))
    quietest = first + int(np.argmin(energy[first:last])) if len(energy) else first
    at = int(round((quietest + 0.5) * hop * rate))
    return Plan(begin, at, at, False)


def trim_last(samples: np.ndarray, rate: int, conf: SegmentConf) -> Tuple[int, int]:
    """``[begin, end)`` of a recording's last stretch that is decoded: its leading and
    trailing silence beyond ``pad_s`` dropped, but at least ``min_segment_s`` (or all of
    it) kept, so the last segment is never too short to decode."""
    n = len(samples)
    runs = pauses(samples, rate, conf.vad)
    total_s = n / rate
    begin_s, end_s = 0.0, total_s
    if runs and runs[0][0] <= 0.0 and runs[0][1] < total_s - 1e-9:
        begin_s = max(0.0, runs[0][1] - conf.pad_s)
    if runs and runs[-1][1] >= total_s - conf.vad.hop_s and runs[-1][0] > 0.0:
        end_s = min(total_s, runs[-1][0] + conf.pad_s)
    begin, end = int(round(begin_s * rate)), int(round(end_s * rate))
    keep = min(n, int(round(conf.min_segment_s * rate)))
    if end - begin < keep:
        begin = max(0, min(begin, end - keep))
        end = min(n, begin + keep)
    return begin, end


def split_stream(blocks: Iterable[np.ndarray], rate: int, conf: SegmentConf = SegmentConf()
                 ) -> Iterator[Segment]:
    """The segments of a recording given as consecutive blocks of mono samples; at most
    ``max_segment_s + min_segment_s`` plus one block are held at a time."""
    max_n, min_n = int(round(conf.max_segment_s * rate)), int(round(conf.min_segment_s * rate))
    buf = np.zeros(0, dtype=np.float32)
    start = index = total = 0

    def step(hi_s: float, plan: Optional[Plan] = None) -> Optional[Segment]:
        nonlocal buf, start, index
        plan = plan or plan_segment(buf, rate, hi_s, conf)
        seg = None
        if plan.end is not None:
            if not plan.in_pause:
                logger.info("no pause of %.2f s between %.1f s and %.1f s: cut at the quietest "
                            "window, %.2f s", conf.vad.min_pause_s,
                            (start + plan.begin) / rate + conf.min_segment_s,
                            start / rate + hi_s, (start + plan.end) / rate)
            seg = Segment(index, start + plan.begin, buf[plan.begin:plan.end].copy(), rate,
                          False, plan.in_pause)
            index += 1
        buf, start = buf[plan.resume:], start + plan.resume
        return seg

    for block in blocks:
        block = np.asarray(block, dtype=np.float32).reshape(-1)
        total += len(block)
        buf = np.concatenate([buf, block])
        while len(buf) >= max_n + min_n:
            seg = step(conf.max_segment_s)
            if seg is not None:
                yield seg
    # the recording has ended: the rest is cut at its pauses as before (each cut leaving
    # min_segment_s after it); what is left without a pause is the last segment
    while len(buf) >= 2 * min_n:
        hi_s = min(conf.max_segment_s, len(buf) / rate - conf.min_segment_s)
        plan = plan_segment(buf, rate, hi_s, conf)
        if plan.end is not None and not plan.in_pause and len(buf) <= max_n:
            break
        seg = step(hi_s, plan)
        if seg is not None:
            yield seg
    begin, end = trim_last(buf, rate, conf)
    yield Segment(index, start + begin, buf[begin:end], rate, True, total_s=total / rate)


def file_blocks(path: str, block_s: float) -> Tuple[int, int, Iterator[np.ndarray]]:
    """(sample rate, frames, iterator of mono float32 blocks of ``block_s``) of an audio
    file soundfile opens; AudioError naming the file when it cannot."""
    refuse_truncated_file(path)
    try:
        f = sf.SoundFile(path)
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        raise AudioError(f"cannot open audio file {path}: {e}") from e

    def blocks() -> Iterator[np.ndarray]:
        with f:
            for block in f.blocks(blocksize=max(1, int(block_s * f.samplerate)),
                                  dtype="float32", always_2d=True):
                yield block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0]
    return f.samplerate, f.frames, blocks()

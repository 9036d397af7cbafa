"""Long recordings cut into segments of bounded length at pauses, and the segments'
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

Audio files are read in blocks of ``block_s`` with soundfile and mixed down to mono,
so memory is bounded by the segment length, not the file. Audio that soundfile cannot
open by path (a ``cmd |`` wav.scp value, formats decoded by ``wenet.dataset.audio``
only) is read whole and cut the same way.

Each segment carries its offset in the recording; :func:`join_results` adds it to the
segment's token and word times, joins the texts and concatenates the 1-best's units;
the joined result's duration is the recording's.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import soundfile as sf
import torch

from wenet.alignment.pauses import energy_db
from wenet.dataset.audio import AudioError, load_audio, to_mono
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


class Placed(NamedTuple):
    """Where a segment lies in its recording (what joining its result needs)."""

    key: str
    start_s: float
    end_s: float
    last: bool
    total_s: Optional[float] = None


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


def _mono(wav: torch.Tensor) -> np.ndarray:
    return to_mono(wav)[0].numpy().astype(np.float32, copy=False)


class SegmentedItems:
    """Wraps the ``(key, audio)`` pairs of ``Recognizer.iter_results``: audio longer than
    ``conf.max_segment_s`` comes out as its segments, keyed ``<key>@<start>-<end>s``
    (mono ``(tensor, rate)``), shorter audio as it came (or, read already, as its
    ``(tensor, rate)``). ``origin`` maps a segment's key to its :class:`Placed` until
    :func:`joined` takes it. Audio that cannot be read goes on unchanged: the pipeline's
    reader reports it as it reports any unreadable input."""

    def __init__(self, items: Iterable[Tuple[str, Any]], conf: SegmentConf) -> None:
        self.items = items
        self.conf = conf
        self.origin: Dict[str, Placed] = {}

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        for key, audio in self.items:
            for seg_or_audio in self._expand(audio):
                if not isinstance(seg_or_audio, Segment):
                    yield key, seg_or_audio
                    continue
                seg = seg_or_audio
                seg_key = f"{key}@{seg.start_s:.2f}-{seg.end_s:.2f}s"
                self.origin[seg_key] = Placed(key, seg.start_s, seg.end_s, seg.last, seg.total_s)
                yield seg_key, (torch.from_numpy(seg.samples).unsqueeze(0), seg.rate)

    def _expand(self, audio: Any) -> Iterable[Any]:
        """The segments of long ``audio``; short or unreadable audio as one item."""
        limit = self.conf.max_segment_s
        if isinstance(audio, tuple):
            wav, rate = audio
            return [audio] if wav.size(-1) <= limit * rate else \
                split_stream([_mono(wav)], rate, self.conf)
        spec = str(audio).strip()
        if not spec.endswith("|"):
            try:
                info = sf.info(spec)
                if info.frames <= limit * info.samplerate:
                    return [audio]
                rate, _, blocks = file_blocks(spec, self.conf.block_s)
            except (sf.LibsndfileError, RuntimeError, OSError, AudioError):
                return [audio]
            return split_stream(blocks, rate, self.conf)
        try:
            wav, rate = load_audio(spec)
        except AudioError:
            return [audio]
        return [(wav, rate)] if wav.size(-1) <= limit * rate else \
            split_stream([_mono(wav)], rate, self.conf)


def shift_times(result: Any, offset_s: float) -> Any:
    """``result`` (a ``Recognizer`` Result) with ``offset_s`` added to its token and word times."""
    tokens = None if result.tokens is None else [
        replace(t, start=t.start + offset_s, end=t.end + offset_s) for t in result.tokens]
    words = None if result.words is None else [
        replace(w, start_s=w.start_s + offset_s, end_s=w.end_s + offset_s) for w in result.words]
    return replace(result, tokens=tokens, words=words)


def join_results(key: str, parts: Sequence[Tuple[Placed, Any]]) -> Any:
    """One Result of a recording from its segments' (in order): texts joined by a space,
    the 1-best's units concatenated (score: the sum, None if any is None; longer n-best
    lists are not combined), times shifted by the segments' offsets, duration to the
    end of the last segment; alignment errors joined."""
    shifted = [shift_times(r, seg.start_s) for seg, r in parts]
    best = [r.nbest[0] for r in shifted]
    scores = [h.score for h in best]
    hyp = replace(best[0], text=" ".join(h.text for h in best if h.text),
                  tokens=[t for h in best for t in h.tokens],
                  token_ids=[i for h in best for i in h.token_ids],
                  score=None if any(s is None for s in scores) else float(sum(scores)))
    timed = any(r.tokens is not None for r in shifted)
    errors = [f"{seg.start_s:.2f}-{seg.end_s:.2f}s: {r.alignment_error}"
              for seg, r in parts if r.alignment_error]
    return replace(shifted[0], key=key, text=hyp.text, nbest=[hyp],
                   duration=parts[-1][0].total_s or parts[-1][0].end_s,
                   tokens=[t for r in shifted for t in (r.tokens or [])] if timed else None,
                   words=[w for r in shifted for w in (r.words or [])] if timed else None,
                   alignment_error="; ".join(errors) if errors else None)


def joined(results: Iterable[Any], items: SegmentedItems) -> Iterator[Any]:
    """The results of ``items``' keys in order, each recording's segments joined into one
    (:func:`join_results`); a recording is complete when its last segment's result
    arrives or a result of another key does (a segment the pipeline skipped is missing
    from the text, and logged by the pipeline)."""
    key: Optional[str] = None
    parts: List[Tuple[Placed, Any]] = []
    for result in results:
        origin = items.origin.pop(result.key, None)
        if key is not None and (origin is None or origin.key != key):
            yield join_results(key, parts)
            key, parts = None, []
        if origin is None:
            yield result
            continue
        key = origin.key
        parts.append((origin, result))
        if origin.last:
            logger.info("recording %s: %d segments of at most %.1f s", key, len(parts),
                        items.conf.max_segment_s)
            yield join_results(key, parts)
            key, parts = None, []
    if key is not None:
        yield join_results(key, parts)

"""Long recordings through the ``Recognizer``: audio longer than ``max_segment_s`` is
cut into segments at pauses (the rule: ``wenet/inference/segments.py``), each decoded as
an utterance of its own, and the segments' results joined back into one result per
recording.

Each segment carries its offset in the recording; :func:`join_results` adds it to the
segment's token and word times, joins the texts and concatenates the 1-best's units;
the joined result's duration is the recording's.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import soundfile as sf
import torch

from wenet.dataset.audio import AudioError, load_audio, to_mono
from wenet.inference.segments import Segment, SegmentConf, file_blocks, split_stream

logger = logging.getLogger(__name__)


class Placed(NamedTuple):
    """Where a segment lies in its recording (what joining its result needs)."""

    key: str
    start_s: float
    end_s: float
    last: bool
    total_s: Optional[float] = None


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

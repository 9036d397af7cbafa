"""``(key, audio)`` inputs → ``(key, text)`` in input order with an :class:`OnnxRecognizer`,
``batch_size`` inputs to a padded encoder batch, losing no input to another's failure.

* Audio longer than ``max_segment_s`` is cut at pauses into segments of at most that
  length, as transcribe.py cuts it (``wenet.inference.segments``; a file read in blocks),
  the segments decoded in batches of their own and their texts joined: memory stays
  bounded by the segment length, not the file's (a full-context encoder's attention
  grows with the square of its input).
* An input that gives no features (unreadable, truncated, another sample rate, too
  short) is logged by key, file and reason, added to ``failures`` and left out. So is
  one whose decoding fails (MemoryError, an onnxruntime error): a failed batch is decoded
  again input by input, so only the input at fault is left out, and every input after
  it is still decoded.
* A Kaldi pipe (``cmd |``, a shell command) is refused before anything is decoded unless
  ``allow_pipes``: inputs may come from another program, and a pipe runs what it says.
"""
from __future__ import annotations

import logging
from itertools import chain
from typing import Callable, Iterator, List, Sequence, Tuple

import numpy as np

from wenet.dataset.audio_bytes import refuse_pipes
from wenet.inference.segments import SegmentConf
from wenet.runtime.audio import InputError, features, segment_features
from wenet.runtime.recognizer import OnnxRecognizer

logger = logging.getLogger(__name__)

MAX_SEGMENT_S = 20.0  # transcribe.py's --max_segment_s default


def transcribe(recognizer: OnnxRecognizer, items: Sequence[Tuple[str, str]], mode: str,
               batch_size: int, failures: List[Tuple[str, str, str]],
               max_segment_s: float = MAX_SEGMENT_S, allow_pipes: bool = False
               ) -> Iterator[Tuple[str, str]]:
    """``(key, text)`` of ``(key, audio)`` inputs in input order (module docstring);
    ``max_segment_s`` 0: every input decoded whole. Failed inputs go to ``failures`` as
    (key, audio, reason)."""
    recognizer.check_mode(mode)
    if not allow_pipes:
        refuse_pipes(items, "--allow_pipes (allow_pipes=True)")
    model = recognizer.model
    conf = SegmentConf.for_max_segment(max_segment_s) if max_segment_s > 0 else None
    pending: List[Tuple[str, str, np.ndarray]] = []

    def fail(key: str, spec: str, why: str) -> None:
        logger.warning("utterance %s (%s): %s; not decoded", key, spec, why)
        failures.append((key, spec, why))

    for key, spec in items:
        try:
            pieces = (iter([features(spec, model.info.features, model.info.min_input_frames)])
                      if conf is None else
                      segment_features(spec, model.info.features, model.info.min_input_frames,
                                       conf))
            first = next(pieces)
            second = next(pieces, None)
        except Exception as e:  # noqa: BLE001 - one input's failure must not end the run
            fail(key, spec, _reason(e))
            continue
        if second is None:
            pending.append((key, spec, first))
            if len(pending) == batch_size:
                yield from _decode_batch(recognizer, pending, mode, fail)
                pending = []
            continue
        yield from _decode_batch(recognizer, pending, mode, fail)
        pending = []
        try:
            texts = _segment_texts(recognizer, chain([first, second], pieces), mode, batch_size)
        except Exception as e:  # noqa: BLE001
            fail(key, spec, _reason(e))
            continue
        logger.info("recording %s: %d segments of at most %.1f s", key, len(texts),
                    max_segment_s)
        yield key, " ".join(t for t in texts if t)
    yield from _decode_batch(recognizer, pending, mode, fail)


def _reason(e: BaseException) -> str:
    return str(e) if isinstance(e, InputError) else f"{type(e).__name__}: {e}".rstrip(": ")


def _decode_batch(recognizer: OnnxRecognizer, batch: List[Tuple[str, str, np.ndarray]],
                  mode: str, fail: Callable[[str, str, str], None]
                  ) -> Iterator[Tuple[str, str]]:
    """The texts of one batch; when it fails, each input alone (the failing ones to ``fail``)."""
    if not batch:
        return
    try:
        ids = recognizer.decode([f for _, _, f in batch], mode)
    except Exception as e:  # noqa: BLE001
        if len(batch) == 1:
            fail(batch[0][0], batch[0][1], _reason(e))
            return
        logger.warning("a batch of %d failed (%s): decoding its inputs one by one",
                       len(batch), _reason(e))
        for item in batch:
            yield from _decode_batch(recognizer, [item], mode, fail)
        return
    for (key, _, _), hyp in zip(batch, ids):
        yield key, recognizer.text(hyp)


def _segment_texts(recognizer: OnnxRecognizer, pieces: Iterator[np.ndarray], mode: str,
                   batch_size: int) -> List[str]:
    """The texts of a long input's segments (fbank each), decoded ``batch_size`` at a time."""
    texts: List[str] = []
    batch: List[np.ndarray] = []
    for feats in chain(pieces, [None]):
        if feats is not None:
            batch.append(feats)
        if batch and (feats is None or len(batch) == batch_size):
            texts.extend(recognizer.text(h) for h in recognizer.decode(batch, mode))
            batch = []
    return texts

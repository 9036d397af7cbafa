"""Per-pass bookkeeping for the data pipeline: what was skipped or repaired, and why.

Every stage that drops or repairs an utterance records a reason here instead of
failing silently. Each DataLoader worker owns one ``PipelineStats`` per pass over
its part of the data; the summary is logged when the pass ends, so a bad corpus
shows up as numbers in the training log, not as a crash or as quiet data loss.

Recognition keeps more: :class:`RecordingStats` also lists each skipped input as an
:class:`InputFailure` (key, source, reason), and :func:`exit_status` is the one rule by
which transcribe.py, recognize.py and alignment.py turn processed and failed counts into
their exit status.
"""
from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import List

logger = logging.getLogger(__name__)

# Reasons that are repairs (the utterance is still used) rather than skips.
REPAIRS = frozenset({"stereo_downmixed", "resampled"})


class PipelineStats:
    """Counts of skip/repair reasons for one pass of one worker.

    ``warn`` logs the first ``max_warnings`` messages of each reason in full
    (they name the utterance and shard) and only counts the rest, so a corpus
    where every file has the same defect does not flood the log.
    """

    def __init__(self, where: str, max_warnings: int = 10) -> None:
        self.where = where
        self.max_warnings = max_warnings
        self.counts: Counter = Counter()
        self.oov_pieces: Counter = Counter()
        self.utterances = 0
        self.batches = 0

    def count(self, reason: str, n: int = 1) -> None:
        """Record ``n`` events of ``reason`` without logging (expected filtering)."""
        self.counts[reason] += n

    def warn(self, reason: str, message: str) -> None:
        """Record one event of ``reason`` and log ``message`` (rate-limited per reason)."""
        self.counts[reason] += 1
        seen = self.counts[reason]
        if seen <= self.max_warnings:
            logger.warning("%s: %s [%s]", self.where, message, reason)
        if seen == self.max_warnings:
            logger.warning("%s: further '%s' warnings are only counted", self.where, reason)

    def log_summary(self) -> None:
        """Log the pass summary: delivered totals, then every skip/repair reason."""
        skipped = sum(v for k, v in self.counts.items() if k not in REPAIRS)
        parts = ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items())) or "none"
        logger.info("%s: delivered %d utterances in %d batches; skipped %d; reasons: %s",
                    self.where, self.utterances, self.batches, skipped, parts)
        if self.oov_pieces:
            top = ", ".join(f"{p!r}x{n}" for p, n in self.oov_pieces.most_common(20))
            logger.warning("%s: pieces missing from the symbol table: %s", self.where, top)


@dataclass
class InputFailure:
    """One input that gave no result: its key, where it came from (a path, a wav.scp
    value, ``array``) and why, in words."""

    key: str
    source: str
    reason: str

    def __str__(self) -> str:
        return f"{self.key} ({self.source}): {self.reason}"


# the data pipeline's skip messages: "utterance KEY (SOURCE): reason"
_SKIP_MESSAGE = re.compile(r"utterance (\S+) \((.*?)\): (.*)", re.S)


class RecordingStats(PipelineStats):
    """PipelineStats that also keeps every skipped utterance as an :class:`InputFailure`
    (``failures``), read from the stages' messages; repairs are not failures."""

    def __init__(self, where: str, max_warnings: int = 10) -> None:
        super().__init__(where, max_warnings)
        self.failures: List[InputFailure] = []

    def warn(self, reason: str, message: str) -> None:
        super().warn(reason, message)
        if reason in REPAIRS:
            return
        found = _SKIP_MESSAGE.match(message)
        if found:
            self.failures.append(InputFailure(*found.groups()))
        else:
            self.failures.append(InputFailure("?", self.where, message))


def exit_status(done: int, failed: int, keep_going: bool = False) -> int:
    """The exit status of a command that processes a list of inputs (transcribe.py,
    recognize.py, alignment.py): 0 when every input was processed and there was at least
    one; 1 when any failed or none was processed. ``keep_going`` (``--keep_going``)
    accepts failures as long as something was processed: 0 when ``done`` > 0."""
    if done > 0 and (failed == 0 or keep_going):
        return 0
    return 1


EXIT_STATUS_HELP = ("exit status 0 when every input was processed, 1 when any input failed "
                    "or nothing was processed; with --keep_going 0 as long as one input was "
                    "processed (the failures are still logged and counted)")

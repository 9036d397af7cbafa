"""What every reader of a user's corpus produces: entries, and a report of what was skipped.

An :class:`Entry` is one utterance as the corpus describes it (audio source, optional
segment, transcript, speaker) plus where it was read (``file:line``), so that every
problem found later can name its origin. Problems that concern one utterance are never
fatal: the utterance is skipped and the :class:`Report` counts and lists it. Problems
that make a whole file unreadable (a missing column) raise :class:`CorpusError`.
"""
from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

# audio, text, speaker and id column names readers accept, in order of preference
AUDIO_COLUMNS = ("path", "audio", "file_name", "audio_filepath", "wav")
TEXT_COLUMNS = ("text", "sentence", "transcription", "transcript")
SPEAKER_COLUMNS = ("speaker", "client_id", "speaker_id", "spk")
ID_COLUMNS = ("id", "utt_id", "key", "utterance_id")


class CorpusError(ValueError):
    """A corpus file that cannot be read at all; the message names the file and line."""


@dataclass(slots=True)
class Entry:
    """One utterance of a user's corpus.

    ``audio`` is a path or a Kaldi pipe command (``cmd |``); ``recording`` the id of that
    audio (the key of ``wav.scp``); ``start``/``end`` in seconds when the utterance is a
    segment of it (``end`` -1: to the end), else None.
    """

    key: str
    audio: str
    text: str
    speaker: Optional[str]
    origin: str
    recording: str = ""
    start: Optional[float] = None
    end: Optional[float] = None

    def __post_init__(self) -> None:
        if not self.recording:
            self.recording = self.key

    @property
    def is_segment(self) -> bool:
        return self.start is not None


@dataclass
class Report:
    """Skipped utterances by reason (with where each was read), and notes for the summary."""

    name: str
    skipped: Dict[str, List[str]] = field(default_factory=lambda: collections.defaultdict(list))
    notes: List[str] = field(default_factory=list)
    counts: Dict[str, int] = field(default_factory=lambda: collections.Counter())

    def skip(self, reason: str, where: str) -> None:
        """Count one skipped utterance (or line) under ``reason``; ``where`` names it."""
        self.skipped[reason].append(where)

    def count(self, what: str, n: int = 1) -> None:
        """Count something kept but worth reporting (e.g. a sample rate to resample)."""
        self.counts[what] += n

    @property
    def num_skipped(self) -> int:
        return sum(len(v) for v in self.skipped.values())

    def lines(self, max_listed: Optional[int] = None) -> Iterator[str]:
        """The report as text lines: counts, then every skip (up to ``max_listed`` a reason)."""
        yield f"skipped: {self.num_skipped}"
        for reason, where in sorted(self.skipped.items()):
            yield f"  {reason}: {len(where)}"
        for what, n in sorted(self.counts.items()):
            yield f"{what}: {n}"
        for note in self.notes:
            yield f"note: {note}"
        for reason, where in sorted(self.skipped.items()):
            shown = where if max_listed is None else where[:max_listed]
            for w in shown:
                yield f"skip\t{reason}\t{w}"
            if len(shown) < len(where):
                yield f"skip\t{reason}\t... and {len(where) - len(shown)} more"


def decoded_lines(path: str, report: Report) -> Iterator[Tuple[int, str]]:
    """(line number, text) of a text file's lines without their line end; a line that is
    not valid UTF-8 is skipped and counted in ``report``, the others still come."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                report.skip("line not valid UTF-8", f"{path}:{lineno} (byte {e.start + 1})")
                continue
            if lineno == 1:
                line = line.lstrip("\ufeff")  # a byte-order mark some editors write
            yield lineno, line.rstrip("\r\n")


def resolve_audio(value: str, bases: Tuple[str, ...]) -> str:
    """A pipe command as it is; an absolute path as it is; a relative path joined to the
    first of ``bases`` where it exists (the first base when it exists nowhere, so the
    audio check names the place it was expected)."""
    value = value.strip()
    if value.endswith("|") or os.path.isabs(value):
        return value
    for base in bases:
        candidate = os.path.join(base, value)
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    return os.path.abspath(os.path.join(bases[0], value))


def key_of_path(path: str) -> str:
    """An utterance key derived from an audio path: its file name without extension,
    spaces replaced by underscores (Kaldi keys hold no whitespace)."""
    stem = os.path.splitext(os.path.basename(path.rstrip("/")))[0]
    return "_".join(stem.split())


def segment_key(recording: str, start: float, end: float) -> str:
    """Kaldi's way of naming a segment: recording id, start and end in milliseconds."""
    return f"{recording}-{round(start * 1000):08d}-{round(end * 1000):08d}"


def pick_column(columns: List[str], names: Tuple[str, ...]) -> Optional[str]:
    """The first of ``names`` that is a column (compared case-insensitively), else None."""
    lowered = {c.strip().lower(): c for c in columns}
    for name in names:
        if name in lowered:
            return lowered[name]
    return None

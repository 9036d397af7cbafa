"""Manifests of one utterance per row: TSV, CSV and JSON lines, as their tools write them.

Read as they come, without editing:

- ``DIR/<set>.tsv`` / ``.csv`` / ``.jsonl``: any table with an audio column (``path``,
  ``audio``, ``file_name``, ``audio_filepath``, ``wav``) and a text column (``text``,
  ``sentence``, ``transcription``, ``transcript``); optional ``id``, a speaker
  (``speaker``, ``client_id``, ...), and a segment as ``start``/``end`` or
  ``offset``/``duration`` in seconds;
- Common Voice's ``train.tsv``/``dev.tsv``/``test.tsv`` (``client_id``, ``path``,
  ``sentence``; the mp3 files under ``clips/``);
- Hugging Face audiofolder: ``DIR/<set>/metadata.csv`` (or ``.jsonl``) with ``file_name``;
- NeMo: JSON lines with ``audio_filepath``, ``text``, ``duration`` (the file's length,
  not a segment) and, for a segment, ``offset``.

Relative audio paths are resolved against the manifest's own directory (then its
``clips/``, Common Voice's layout). Without an ``id`` column an utterance is named after
its audio file (plus start and end in milliseconds for a segment).
"""
from __future__ import annotations

import csv
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

from wenet.dataprep.custom.records import (AUDIO_COLUMNS, ID_COLUMNS, SPEAKER_COLUMNS,
                                           TEXT_COLUMNS, CorpusError, Entry, Report,
                                           decoded_lines, key_of_path, pick_column,
                                           resolve_audio, segment_key)

MANIFEST_SUFFIXES = (".tsv", ".csv", ".jsonl", ".json")
AUDIOFOLDER_NAMES = ("metadata.csv", "metadata.jsonl")


def _csv_rows(path: str, report: Report) -> Iterator[Tuple[int, List[str]]]:
    """(line number, fields) of a CSV or TSV file (TSV: tab-separated, no quoting, as
    Common Voice writes it); lines that are not UTF-8 are skipped and counted."""
    where = [0]

    def lines() -> Iterator[str]:
        for lineno, line in decoded_lines(path, report):
            where[0] = lineno
            yield line + "\n"

    if path.endswith(".tsv"):
        reader = csv.reader(lines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(lines())
    for row in reader:
        yield where[0], row


def _table_records(path: str, report: Report) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """(``path:line``, {column: value}) of a CSV/TSV manifest; a missing audio or text
    column is a :class:`CorpusError` naming the header line."""
    rows = _csv_rows(path, report)
    header: Optional[List[str]] = None
    header_line = 0
    for lineno, row in rows:
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header, header_line = [c.strip() for c in row], lineno
            for what, names in (("audio", AUDIO_COLUMNS), ("text", TEXT_COLUMNS)):
                if pick_column(header, names) is None:
                    raise CorpusError(
                        f"{path}:{lineno}: no {what} column (one of {', '.join(names)}); "
                        f"the header has: {', '.join(header)}")
            continue
        if len(row) != len(header):
            report.skip(f"row with {len(row)} fields, header has {len(header)}",
                        f"{path}:{lineno}")
            continue
        yield f"{path}:{lineno}", dict(zip(header, row))
    if header is None:
        raise CorpusError(f"{path}:{header_line + 1}: empty manifest (no header line)")


def _json_records(path: str, report: Report) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """(``path:line``, object) of a JSON-lines manifest; a line that is not a JSON object
    is skipped and counted."""
    for lineno, line in decoded_lines(path, report):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            report.skip("line not valid JSON", f"{path}:{lineno} ({e.msg})")
            continue
        if not isinstance(obj, dict):
            report.skip("line not a JSON object", f"{path}:{lineno}")
            continue
        yield f"{path}:{lineno}", obj


def _number(obj: Dict[str, Any], column: Optional[str]) -> Optional[float]:
    if column is None:
        return None
    value = obj.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return float(value)


def _segment(obj: Dict[str, Any], columns: List[str]) -> Tuple[Optional[float], Optional[float]]:
    """(start, end) in seconds from start/end or offset/duration columns; (None, None)
    when the row is a whole file. NeMo's ``duration`` alone is the file's length."""
    start = _number(obj, pick_column(columns, ("start",)))
    end = _number(obj, pick_column(columns, ("end",)))
    if start is not None or end is not None:
        return (start or 0.0), (-1.0 if end is None else end)
    offset = _number(obj, pick_column(columns, ("offset",)))
    if offset is None:
        return None, None
    duration = _number(obj, pick_column(columns, ("duration",)))
    return offset, (-1.0 if duration is None else offset + duration)


def _audio_value(value: Any) -> str:
    """The path of an audio cell; Hugging Face JSON may hold ``{"path": ...}``."""
    if isinstance(value, dict):
        value = value.get("path") or ""
    return "" if value is None else str(value)


def read_manifest(path: str, report: Report) -> List[Entry]:
    """Entries of one manifest (see the module docstring for what it may hold)."""
    records = _json_records(path, report) if path.endswith((".jsonl", ".json")) \
        else _table_records(path, report)
    base = os.path.dirname(os.path.abspath(path))
    bases = (base, os.path.join(base, "clips"))
    entries: List[Entry] = []
    for where, obj in records:
        columns = list(obj)
        audio_col = pick_column(columns, AUDIO_COLUMNS)
        text_col = pick_column(columns, TEXT_COLUMNS)
        if audio_col is None or not _audio_value(obj[audio_col]).strip():
            report.skip("no audio path", where)
            continue
        if text_col is None:
            report.skip("no text field", where)
            continue
        try:
            start, end = _segment(obj, columns)
        except (TypeError, ValueError):
            report.skip("segment times are not numbers", where)
            continue
        audio = _audio_value(obj[audio_col]).strip()
        recording = key_of_path(audio.rstrip("|").split()[-1] if audio.endswith("|") else audio)
        id_col = pick_column(columns, ID_COLUMNS)
        key = "_".join(str(obj[id_col]).split()) if id_col and str(obj[id_col]).strip() else (
            segment_key(recording, start, end) if start is not None else recording)
        spk_col = pick_column(columns, SPEAKER_COLUMNS)
        speaker = "_".join(str(obj[spk_col]).split()) if spk_col and obj[spk_col] else None
        text = obj[text_col]
        entries.append(Entry(key=key, audio=resolve_audio(audio, bases),
                             text="" if text is None else str(text), speaker=speaker or None,
                             origin=where, recording=recording if start is not None else key,
                             start=start, end=end))
    return entries


def find_manifest(root: str, name: str) -> Optional[str]:
    """``root/<name>/metadata.{csv,jsonl}`` (audiofolder) or ``root/<name>.{tsv,csv,jsonl,
    json}``, the first that exists; None if none does."""
    for fname in AUDIOFOLDER_NAMES:
        candidate = os.path.join(root, name, fname)
        if os.path.isfile(candidate):
            return candidate
    for suffix in MANIFEST_SUFFIXES:
        candidate = os.path.join(root, name + suffix)
        if os.path.isfile(candidate):
            return candidate
    return None

"""LibriSpeech-style trees: ``DIR/<set>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt``
beside the audio (``<utterance>.flac``, or ``.wav``), one set per subfolder of DIR.

The speaker is the first folder below the set; a transcript line whose audio file is
missing is kept here and skipped (counted) by the audio check like any other.
"""
from __future__ import annotations

import os
from typing import List

from wenet.dataprep.custom.records import Entry, Report, decoded_lines

AUDIO_SUFFIXES = (".flac", ".wav", ".opus", ".ogg", ".mp3")


def has_transcripts(set_dir: str) -> bool:
    """True when some ``*.trans.txt`` lies below ``set_dir``."""
    for _, _, names in os.walk(set_dir):
        if any(n.endswith(".trans.txt") for n in names):
            return True
    return False


def read_librispeech(set_dir: str, report: Report) -> List[Entry]:
    """Entries of one LibriSpeech-style set folder, in sorted path order."""
    entries: List[Entry] = []
    for folder, dirs, names in os.walk(set_dir):
        dirs.sort()
        speaker = os.path.relpath(folder, set_dir).split(os.sep)[0]
        for name in sorted(n for n in names if n.endswith(".trans.txt")):
            path = os.path.join(folder, name)
            for lineno, line in decoded_lines(path, report):
                parts = line.strip().split(maxsplit=1)
                if not parts:
                    continue
                key = parts[0]
                audio = next((os.path.join(folder, key + s) for s in AUDIO_SUFFIXES
                              if os.path.isfile(os.path.join(folder, key + s))),
                             os.path.join(folder, key + AUDIO_SUFFIXES[0]))
                entries.append(Entry(key, os.path.abspath(audio),
                                     parts[1] if len(parts) > 1 else "", speaker,
                                     f"{path}:{lineno}"))
    return entries

"""Kaldi data dirs a user already has: ``DIR/<set>/{wav.scp,text[,segments,utt2spk]}``.

``wav.scp`` values are paths or pipe commands (``cmd |``), as WeNet's and Kaldi's recipes
write them; a relative path is looked for below the set's dir, then below DIR. Every
line is checked on its own: a duplicate key, a line that is not UTF-8 or that has too
few fields, an utterance that is missing from one of the files, or a segment whose
recording is not in ``wav.scp`` is skipped and counted; the rest go through.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

from wenet.dataprep.custom.records import Entry, Report, decoded_lines, resolve_audio

_Line = Tuple[str, str]  # (value, "file:line")


def _read_map(path: str, report: Report, what: str, allow_empty: bool = False) -> Dict[str, _Line]:
    """``key value`` lines → {key: (value, where)}; the second line of a key is skipped."""
    out: Dict[str, _Line] = {}
    for lineno, line in decoded_lines(path, report):
        parts = line.strip().split(maxsplit=1)
        if not parts:
            continue
        where = f"{path}:{lineno}"
        if parts[0] in out:
            report.skip(f"duplicate key in {what}", f"{where} ({parts[0]}, first at "
                        f"{out[parts[0]][1]})")
            continue
        value = parts[1].strip() if len(parts) > 1 else ""
        if not value and not allow_empty:
            report.skip(f"{what} line without a value", f"{where} ({parts[0]})")
            continue
        out[parts[0]] = (value, where)
    return out


def _segments(path: str, report: Report, recordings: Dict[str, _Line]
              ) -> Dict[str, Tuple[str, float, float, str]]:
    """{segment: (recording, start, end, where)} of a ``segments`` file."""
    out: Dict[str, Tuple[str, float, float, str]] = {}
    for key, (value, where) in _read_map(path, report, "segments").items():
        fields = value.split()
        try:
            if len(fields) != 3:
                raise ValueError
            start, end = float(fields[1]), float(fields[2])
        except ValueError:
            report.skip("segments line not 'segment recording start end'", f"{where} ({key})")
            continue
        if fields[0] not in recordings:
            report.skip("segment's recording not in wav.scp", f"{where} ({key}: {fields[0]})")
            continue
        out[key] = (fields[0], start, end, where)
    return out


def read_kaldi_dir(set_dir: str, root: str, report: Report) -> List[Entry]:
    """Entries of one Kaldi data dir (see the module docstring)."""
    wavs = _read_map(os.path.join(set_dir, "wav.scp"), report, "wav.scp")
    texts = _read_map(os.path.join(set_dir, "text"), report, "text", allow_empty=True)
    utt2spk_path = os.path.join(set_dir, "utt2spk")
    speakers: Optional[Dict[str, _Line]] = (
        _read_map(utt2spk_path, report, "utt2spk") if os.path.isfile(utt2spk_path) else None)
    seg_path = os.path.join(set_dir, "segments")
    segments = _segments(seg_path, report, wavs) if os.path.isfile(seg_path) else None
    utt_where = ({k: v[3] for k, v in segments.items()} if segments is not None
                 else {k: v[1] for k, v in wavs.items()})
    files = {("segments" if segments is not None else "wav.scp"): utt_where,
             "text": {k: v[1] for k, v in texts.items()}}
    if speakers is not None:
        files["utt2spk"] = {k: v[1] for k, v in speakers.items()}
    bases = (set_dir, root)
    entries: List[Entry] = []
    for key in sorted(set().union(*files.values())):
        present = [name for name, keys in files.items() if key in keys]
        if len(present) < len(files):
            missing = [name for name in files if name not in present]
            shown = ", ".join(files[name][key] for name in present)
            report.skip("key missing from a file", f"{shown} ({key} not in {', '.join(missing)})")
            continue
        speaker = speakers[key][0].split()[0] if speakers is not None else None
        if segments is not None:
            rec, start, end, where = segments[key]
            entries.append(Entry(key, resolve_audio(wavs[rec][0], bases), texts[key][0], speaker,
                                 where, recording=rec, start=start, end=end))
        else:
            entries.append(Entry(key, resolve_audio(wavs[key][0], bases), texts[key][0], speaker,
                                 wavs[key][1]))
    return entries

"""lhotse manifests (icefall's data preparation writes them): recordings + supervisions,
or cuts, as ``.jsonl`` or ``.jsonl.gz``, read through lhotse itself.

lhotse is an optional extra (``pip install -r requirements-lhotse.txt``): it is imported
only when a set is found in this form. Files are matched by name: the set's name and
``recordings``/``supervisions`` or ``cuts`` as ``_``-separated parts, in any order
(``librispeech_cuts_dev-clean.jsonl.gz``, ``train_recordings.jsonl``). Each supervision
is one utterance (its id the key); one that covers its whole recording is a whole file,
any other a segment. Recordings read from a URL, from memory or with more than one
channel are skipped and counted.
"""
from __future__ import annotations

import glob
import os
from typing import Dict, List, Optional

from wenet.dataprep.custom.records import CorpusError, Entry, Report

_SUFFIXES = (".jsonl.gz", ".jsonl")
KINDS = ("recordings", "supervisions", "cuts")


def _parts(path: str) -> Optional[List[str]]:
    name = os.path.basename(path)
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)].split("_")
    return None


def find_lhotse(root: str, name: str) -> Dict[str, str]:
    """{kind: file} of the lhotse manifests of set ``name`` in ``root`` (maybe empty)."""
    found: Dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(root, "*.jsonl*"))):
        parts = _parts(path)
        if not parts:
            continue
        kinds = [k for k in KINDS if k in parts]
        rest = "_".join(p for p in parts if p not in KINDS)
        if len(kinds) == 1 and (rest == name or rest.endswith("_" + name)):
            found.setdefault(kinds[0], path)
    return found


def _lhotse():
    try:
        import lhotse
    except ImportError as e:
        raise CorpusError(
            f"reading lhotse manifests needs lhotse, which is not installed ({e}): "
            "pip install -r requirements-lhotse.txt") from None
    return lhotse


def _entry(sup, recording, offset: float, report: Report, where: str) -> Optional[Entry]:
    sources = recording.sources
    if len(sources) != 1 or sources[0].type not in ("file", "command") \
            or recording.num_channels != 1:
        report.skip("lhotse recording not one mono file or command", f"{where} ({sup.id})")
        return None
    source = sources[0].source
    audio = source if sources[0].type == "file" else f"{source} |"
    start = offset + sup.start
    whole = start <= 1e-6 and abs(sup.duration - recording.duration) <= 1e-3
    return Entry(sup.id, os.path.abspath(audio) if sources[0].type == "file" else audio,
                 sup.text or "", sup.speaker or None, where, recording=recording.id,
                 start=None if whole else start, end=None if whole else start + sup.duration)


def read_lhotse(files: Dict[str, str], report: Report) -> List[Entry]:
    """Entries of one set's lhotse manifests (``find_lhotse``'s result)."""
    lhotse = _lhotse()
    entries: List[Entry] = []
    if "cuts" in files:
        for cut in lhotse.load_manifest_lazy(files["cuts"]):
            if cut.recording is None:
                report.skip("lhotse cut without a recording", f"{files['cuts']} ({cut.id})")
                continue
            for sup in cut.supervisions:
                e = _entry(sup, cut.recording, cut.start, report, files["cuts"])
                if e is not None:
                    entries.append(e)
        return entries
    if "recordings" not in files or "supervisions" not in files:
        have = ", ".join(sorted(files.values()))
        raise CorpusError(f"lhotse manifests need recordings and supervisions (or cuts); "
                          f"found only {have}")
    recordings = {r.id: r for r in lhotse.load_manifest_lazy(files["recordings"])}
    for sup in lhotse.load_manifest_lazy(files["supervisions"]):
        rec = recordings.get(sup.recording_id)
        if rec is None:
            report.skip("lhotse supervision's recording not in the recordings",
                        f"{files['supervisions']} ({sup.id}: {sup.recording_id})")
            continue
        e = _entry(sup, rec, 0.0, report, files["supervisions"])
        if e is not None:
            entries.append(e)
    return entries

"""Which reader reads set ``<name>`` of a corpus dir: the small dispatcher of stage 0.

Looked for in this order, the first form found wins:

1. ``DIR/<name>/wav.scp``: a Kaldi data dir;
2. ``DIR/<name>/metadata.{csv,jsonl}`` (audiofolder) or ``DIR/<name>.{tsv,csv,jsonl,json}``:
   a manifest (Common Voice and NeMo included);
3. lhotse manifests of ``<name>`` in DIR (recordings + supervisions, or cuts);
4. ``DIR/<name>/`` holding ``*.trans.txt`` files: a LibriSpeech-style tree.
"""
from __future__ import annotations

import os
from typing import Callable, List, Optional, Tuple

from wenet.dataprep.custom.kaldi_dirs import read_kaldi_dir
from wenet.dataprep.custom.librispeech import has_transcripts, read_librispeech
from wenet.dataprep.custom.lhotse_manifests import find_lhotse, read_lhotse
from wenet.dataprep.custom.manifests import find_manifest, read_manifest
from wenet.dataprep.custom.records import CorpusError, Entry, Report

Reader = Callable[[Report], List[Entry]]

LOOKED_FOR = ("{root}/{name}/wav.scp", "{root}/{name}/metadata.csv",
              "{root}/{name}.{{tsv,csv,jsonl,json}}",
              "{root}/*{name}*{{recordings,supervisions,cuts}}*.jsonl[.gz]",
              "{root}/{name}/**/*.trans.txt")


def find_set(root: str, name: str) -> Optional[Tuple[str, Reader]]:
    """(form, reader) of set ``name`` in ``root``, or None when ``root`` has no such set."""
    set_dir = os.path.join(root, name)
    if os.path.isfile(os.path.join(set_dir, "wav.scp")):
        if not os.path.isfile(os.path.join(set_dir, "text")):
            raise CorpusError(f"{set_dir}: a Kaldi data dir with wav.scp but no text file")
        return "Kaldi data dir", lambda report: read_kaldi_dir(set_dir, root, report)
    manifest = find_manifest(root, name)
    if manifest is not None:
        return f"manifest {manifest}", lambda report: read_manifest(manifest, report)
    lhotse_files = find_lhotse(root, name)
    if lhotse_files:
        form = "lhotse manifests " + ", ".join(sorted(lhotse_files.values()))
        return form, lambda report: read_lhotse(lhotse_files, report)
    if os.path.isdir(set_dir) and has_transcripts(set_dir):
        return "LibriSpeech-style tree", lambda report: read_librispeech(set_dir, report)
    return None


def require_set(root: str, name: str, option: str) -> Tuple[str, Reader]:
    """``find_set``, or a :class:`CorpusError` saying where it looked and which option
    names the set."""
    found = find_set(root, name)
    if found is None:
        looked = ", ".join(p.format(root=root, name=name) for p in LOOKED_FOR)
        raise CorpusError(f"{root} holds no set '{name}' (looked for {looked}); "
                          f"name the set with {option}")
    return found

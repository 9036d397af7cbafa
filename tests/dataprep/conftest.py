"""Fixtures of the dataprep tests: one tiny corpus in every form stage 0 of
``--corpus custom`` reads (tests/dataprep/own_corpus.py), built once a session."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.dataprep import own_corpus as oc


@pytest.fixture(scope="session")
def corpora(tmp_path_factory) -> Path:
    """Every form of the corpus under one dir: <root>/<form>/..."""
    d = tmp_path_factory.mktemp("own_corpus")
    recs = oc.write_recordings(d / "rec")
    wavs = oc.whole_files(d / "wav", recs, "wav")
    mp3s = oc.whole_files(d / "mp3", recs, "mp3")
    flacs = oc.whole_files(d / "flac", recs, "flac")
    oc.kaldi(d / "kaldi", recs)
    oc.kaldi(d / "kaldi_pipes", recs, pipes=True)
    oc.kaldi_whole(d / "kaldi_whole", wavs)
    oc.kaldi_whole(d / "kaldi_mp3", mp3s)
    oc.table(d / "tsv", recs, ".tsv")
    oc.table(d / "csv", recs, ".csv")
    oc.nemo(d / "nemo", recs)
    if importlib.util.find_spec("lhotse") is not None:  # optional (requirements-lhotse.txt)
        oc.lhotse_manifests(d / "lhotse", recs)
    oc.common_voice(d / "cv", mp3s)
    oc.audiofolder(d / "audiofolder", wavs)
    oc.librispeech(d / "librispeech", flacs)
    return d

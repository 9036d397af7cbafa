"""docs/own_data.md: its stage-0 examples run as written (``--data_root`` pointing at the
tiny corpus of that form) and write the corpus's sets; the training commands run in
test_own_corpus_recipe.py; together the tests run every command of the page."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.common import recipe_copy
from tests.dataprep import own_corpus as oc
from tests.dataprep.own_data_doc import DOC_COMMANDS, doc_command, doc_commands

# the doc's stage-0 examples: data root -> the tiny corpus of that form
STAGE0 = {"/data/my_kaldi_dirs": "kaldi", "/data/call_centre": "tsv", "/data/cv-corpus/en": "cv",
          "/data/my_audiofolder": "audiofolder", "/data/nemo_manifests": "nemo",
          "/data/LibriSpeech": "librispeech", "/data/icefall_manifests": "lhotse"}
LIBRISPEECH_SETS = {"train": "train-clean-100", "dev": "dev-clean", "test": "test-clean"}


def test_the_tests_run_every_command_of_the_doc():
    assert set(doc_commands()) == DOC_COMMANDS
    assert set(STAGE0) <= DOC_COMMANDS
    for name in STAGE0:
        assert doc_command(name)[-2:] == ["--stop_stage", "0"]


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    return recipe_copy(tmp_path_factory.mktemp("doc_recipe"))


@pytest.mark.parametrize("name", list(STAGE0))
def test_stage0_example_prepares_the_corpus(name, corpora, recipe, tmp_path):
    form = STAGE0[name]
    if form == "lhotse" and importlib.util.find_spec("lhotse") is None:
        pytest.skip("lhotse is not installed (requirements-lhotse.txt)")
    root = corpora / form
    sets = dict((s, s) for s in oc.SETS)
    if form == "librispeech":  # the doc names LibriSpeech's own sets
        root = tmp_path / "LibriSpeech"
        for ours, theirs in LIBRISPEECH_SETS.items():
            shutil.copytree(corpora / form / ours, root / theirs, copy_function=os.link)
        sets = LIBRISPEECH_SETS
    shutil.rmtree(recipe / "data", ignore_errors=True)
    r = subprocess.run(["./run.sh", *doc_command(name, {name: str(root)})], cwd=recipe,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for ours, theirs in sets.items():
        text = (recipe / "data" / theirs / "text").read_text().splitlines()
        assert [x.split(" ", 1)[0] for x in text] == sorted(u[0] for u in oc.utterances(ours))
        assert "skipped: 0" in (recipe / "data" / theirs / "stage0_report.txt").read_text()


def test_run_sh_help_lists_the_custom_corpus_and_its_options(recipe):
    r = subprocess.run(["./run.sh", "--help"], cwd=recipe, capture_output=True, text=True,
                       timeout=60)
    usage = r.stdout + r.stderr
    for text in ("synth_broad | speechocean762 | swbd | custom", "--corpus custom --data_root DIR",
                 "docs/own_data.md", "--dev_set B --test_sets", "--dev_share 0.1",
                 "--text_norm MODE", "--token_type bpe|char"):
        assert text in usage, text

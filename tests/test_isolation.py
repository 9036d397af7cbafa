"""The isolation of conftest.py holds: a test that writes or reads the checkout's run outputs
(data/, raw_wav/, exp/, corpus/), in place, through a tool, or from a fixture, or that reads
a recipe path relative to its working directory, fails by name; a clean one passes.

Checked on a throw-away checkout in tmp (this suite's conftest.py and common.py copied, its
own run outputs), run by a pytest in a subprocess: the real checkout is never touched."""
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.common import OUTPUT_DIRS, REPO

THROWAWAY_TESTS = '''
import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.common import REPO


@pytest.fixture(scope="module")
def writes_corpus():
    Path(REPO, "corpus", "made_by_a_fixture.txt").write_text("x")


def test_clean(tmp_path):
    (tmp_path / "out.txt").write_text("a test's own files live in tmp_path")
    with open(os.path.join(REPO, "pytest.ini")) as f:  # a tracked file, named by REPO
        assert "[pytest]" in f.read()


def test_creates_a_file_in_exp():
    Path(REPO, "exp", "new.txt").write_text("x")


def test_rewrites_the_cmvn_in_place():
    with open(os.path.join(REPO, "raw_wav", "train", "global_cmvn"), "r+") as f:
        f.write("{")


def test_a_tool_makes_data():
    subprocess.run(["mkdir", "-p", "data/train"], cwd=REPO, check=True)


def test_reads_a_model_by_repo_path():
    with open(os.path.join(REPO, "exp", "model", "train.yaml")) as f:
        f.read()


def test_reads_a_relative_recipe_path():
    with open("raw_wav/train/global_cmvn") as f:
        stats = json.load(f)
    assert len(stats["mean_stat"]) == 80 and stats["mean_stat"][0] == 1e9  # the decoy's


def test_uses_a_fixture_that_writes(writes_corpus):
    pass


def test_clean_after_the_others(tmp_path):
    test_clean(tmp_path)
'''

# the tests the guard must fail, and a line its message must hold: a path and what was done
EXPECTED = {
    "test_creates_a_file_in_exp": "exp/new.txt: created, opened, written",
    "test_rewrites_the_cmvn_in_place": "raw_wav/train/global_cmvn: opened, written",
    "test_a_tool_makes_data": "data: created",
    "test_reads_a_model_by_repo_path": "exp/model/train.yaml: opened",
    "test_reads_a_relative_recipe_path":
        "raw_wav/train/global_cmvn (in the working directory): opened",
    "test_uses_a_fixture_that_writes": "corpus/made_by_a_fixture.txt: created, opened, written",
}


def _throwaway_checkout(root: Path) -> None:
    """A checkout with run outputs (but no data/), this suite's conftest and the test file."""
    (root / "tests").mkdir(parents=True)
    for name in ("conftest.py", "common.py"):
        shutil.copy(os.path.join(REPO, "tests", name), root / "tests" / name)
    shutil.copy(os.path.join(REPO, "pytest.ini"), root / "pytest.ini")
    (root / "tests" / "test_throwaway.py").write_text(THROWAWAY_TESTS)
    (root / "raw_wav" / "train").mkdir(parents=True)
    (root / "raw_wav" / "train" / "global_cmvn").write_text(
        '{"mean_stat": [0.0], "var_stat": [1.0], "frame_num": 1}')
    (root / "exp" / "model").mkdir(parents=True)
    (root / "exp" / "model" / "train.yaml").write_text("input_dim: 1\n")
    (root / "corpus").mkdir()


def test_guard_names_each_test_that_uses_the_checkouts_outputs(tmp_path):
    root = tmp_path / "checkout"
    _throwaway_checkout(root)
    report = tmp_path / "report.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={report}", f"--basetemp={tmp_path / 'tmp'}",
                        "tests/test_throwaway.py"],
                       cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    errors, passed = {}, set()
    for case in ET.parse(report).getroot().iter("testcase"):
        assert not case.findall("failure"), r.stdout  # the relative read got the decoy's CMVN
        found = case.findall("error")
        if found:
            errors[case.get("name")] = " ".join(e.get("message", "") + (e.text or "") for e in found)
        else:
            passed.add(case.get("name"))
    assert passed == {"test_clean", "test_clean_after_the_others"}, r.stdout
    assert set(errors) == set(EXPECTED), r.stdout
    for name, path in EXPECTED.items():
        assert name in errors[name] and path in errors[name], errors[name]


def test_a_test_runs_in_the_decoy_not_the_checkout():
    cwd = os.getcwd()
    assert not os.path.samefile(cwd, REPO)
    for name in OUTPUT_DIRS:
        assert os.path.isdir(os.path.join(cwd, name))  # stat only: no file opened
    assert os.path.getsize(os.path.join(cwd, "raw_wav", "train", "global_cmvn")) > 80 * 4

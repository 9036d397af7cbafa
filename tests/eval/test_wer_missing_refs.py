"""compute-wer.py names and counts the keys it cannot score: hypotheses without a
reference (recognised unlabelled audio) are never silently dropped."""
import os
import subprocess
import sys

from tests.common import REPO
from wenet.eval.results import read_overall_wer
from wenet.eval.wer import Counts, compute_wer, unscored_line


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def _cli(tmp_path, ref_lines, hyp_lines, *opts):
    ref = _write(tmp_path / "ref", ref_lines)
    hyp = _write(tmp_path / "hyp", hyp_lines)
    return subprocess.run([sys.executable, os.path.join(REPO, "tools", "compute-wer.py"), *opts,
                           ref, hyp], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": REPO}, check=True)


def test_hypotheses_without_reference_are_counted_and_named(tmp_path):
    # u1: 1 substitution of 2; u2 has no hypothesis (2 deletions); n1, n2 have no reference
    proc = _cli(tmp_path, ["u1 a b", "u2 c d"], ["n1 x y", "u1 a z", "n2 w"], "--v=0")
    lines = proc.stdout.splitlines()
    assert lines[0] == "Overall -> 75.00 % N=4 C=1 S=1 D=2 I=0"
    assert lines[1] == ("Unscored -> 2 hypotheses without reference (n1 n2); 1 references "
                        "without hypothesis, counted as deletions (u2)")
    assert "'n1' has no reference" in proc.stderr and "'n2' has no reference" in proc.stderr
    # the results summary still reads the Overall line
    (tmp_path / "wer").write_text(proc.stdout)
    assert read_overall_wer(str(tmp_path / "wer")).n == 4


def test_library_returns_the_unscored_keys(tmp_path, capsys):
    ref = _write(tmp_path / "ref", ["a x", "b y"])
    hyp = _write(tmp_path / "hyp", ["a x", "b y", "c z"])
    total = compute_wer(ref, hyp, sys.stdout, verbose=0)
    assert (total.n, total.c, total.no_reference, total.no_hypothesis) == (2, 2, ["c"], [])
    assert "Unscored -> 1 hypotheses without reference (c)" in capsys.readouterr().out


def test_all_keys_matched_prints_no_unscored_line(tmp_path):
    proc = _cli(tmp_path, ["u1 a b"], ["u1 a b"], "--v=0")
    assert proc.stdout == "Overall -> 0.00 % N=2 C=2 S=0 D=0 I=0\n\n"


def test_long_key_lists_are_cut():
    line = unscored_line(Counts(no_reference=[f"k{i}" for i in range(13)]), show=10)
    assert line.startswith("Unscored -> 13 hypotheses without reference (k0 k1 ")
    assert "k9 +3 more)" in line and "k10" not in line

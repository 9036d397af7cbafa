"""compute-wer.py names and counts the keys it cannot score: hypotheses without a
reference (recognised unlabelled audio) are never silently dropped."""
import sys

from tests.eval.test_compute_wer import compute_wer_cli, write_lines
from wenet.eval.results import read_overall_wer
from wenet.eval.wer import Counts, compute_wer, unscored_line


def test_hypotheses_without_reference_are_counted_and_named(tmp_path):
    # u1: 1 substitution of 2; u2 has no hypothesis (2 deletions); n1, n2 have no reference
    out, err = compute_wer_cli(tmp_path, ["u1 a b", "u2 c d"], ["n1 x y", "u1 a z", "n2 w"],
                               "--v=0")
    lines = out.splitlines()
    assert lines[0] == "Overall -> 75.00 % N=4 C=1 S=1 D=2 I=0"
    assert lines[1] == ("Unscored -> 2 hypotheses without reference (n1 n2); 1 references "
                        "without hypothesis, counted as deletions (u2)")
    assert "'n1' has no reference" in err and "'n2' has no reference" in err
    # the results summary still reads the Overall line
    (tmp_path / "wer").write_text(out)
    assert read_overall_wer(str(tmp_path / "wer")).n == 4


def test_library_returns_the_unscored_keys(tmp_path, capsys):
    ref = write_lines(tmp_path / "ref", ["a x", "b y"])
    hyp = write_lines(tmp_path / "hyp", ["a x", "b y", "c z"])
    total = compute_wer(ref, hyp, sys.stdout, verbose=0)
    assert (total.n, total.c, total.no_reference, total.no_hypothesis) == (2, 2, ["c"], [])
    assert "Unscored -> 1 hypotheses without reference (c)" in capsys.readouterr().out


def test_all_keys_matched_prints_no_unscored_line(tmp_path):
    out, _ = compute_wer_cli(tmp_path, ["u1 a b"], ["u1 a b"], "--v=0")
    assert out == "Overall -> 0.00 % N=2 C=2 S=0 D=0 I=0\n\n"


def test_long_key_lists_are_cut():
    line = unscored_line(Counts(no_reference=[f"k{i}" for i in range(13)]), show=10)
    assert line.startswith("Unscored -> 13 hypotheses without reference (k0 k1 ")
    assert "k9 +3 more)" in line and "k10" not in line

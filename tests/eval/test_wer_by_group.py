"""WER per speaker group (tools/wer_by_group.py, wenet.eval.wer.group_counts), against
hand-counted errors."""
import os
import subprocess
import sys

import pytest

from tests.common import REPO
from wenet.eval.wer import group_counts


def test_group_counts_hand_counted():
    refs = {"a1": "THE CAT SAT".split(), "a2": "ON THE MAT".split(), "k1": "A DOG".split()}
    hyps = {"a1": "THE CAT SAT".split(),          # 0 errors of 3
            "a2": "ON A MAT TODAY".split(),       # 1 substitution + 1 insertion of 3
            }                                      # k1 missing: 2 deletions
    counts = group_counts(refs, hyps, {"a1": "adults", "a2": "adults", "k1": "children"})
    assert (counts["adults"].n, counts["adults"].s, counts["adults"].i, counts["adults"].d) == (6, 1, 1, 0)
    assert counts["adults"].wer == pytest.approx(100 * 2 / 6)
    assert (counts["children"].n, counts["children"].d) == (2, 2)
    assert counts["all"].wer == pytest.approx(100 * 4 / 8)
    with pytest.raises(ValueError, match="'k1' has no group"):
        group_counts(refs, hyps, {"a1": "adults", "a2": "adults"})


def test_cli_bins_by_age(tmp_path):
    (tmp_path / "ref").write_text("u1 HELLO WORLD\nu2 GOOD MORNING\nu3 YES\n")
    (tmp_path / "hyp").write_text("u1 HELLO WORD\nu2 GOOD MORNING\nu3 YES\n")
    (tmp_path / "utt2spk").write_text("u1 s1\nu2 s2\nu3 s2\n")
    (tmp_path / "spk2age").write_text("s1 9\ns2 30\n")
    cmd = [sys.executable, os.path.join(REPO, "tools", "wer_by_group.py"), "--utt2spk", str(tmp_path / "utt2spk"),
           "--spk2value", str(tmp_path / "spk2age"), "--bins", "children=0-13,adults=14-120",
           str(tmp_path / "ref"), str(tmp_path / "hyp")]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.strip().split("\n")
    assert header.split("\t") == ["hyp", "adults WER (N)", "children WER (N)", "all WER (N)"]
    assert row.split("\t")[1:] == ["0.00 (3)", "50.00 (2)", "20.00 (5)"]
    (tmp_path / "spk2age").write_text("s1 9\n")
    bad = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 1 and "speakers without a value" in bad.stderr and "s2" in bad.stderr

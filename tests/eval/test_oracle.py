"""N-best oracle WER against a hand count and a brute force over every choice of picks."""
import itertools
import json

import pytest

from tests.common import load_tool
from wenet.eval.oracle import nbest_oracle, oracle_counts, read_nbest_texts
from wenet.eval.wer import align

REFS = {"u1": "THE CAT SAT".split(), "u2": "A DOG".split(), "u3": "ON THE MAT".split()}
NBESTS = {"u1": [s.split() for s in ["THE CAT", "THE CAT SAT", "A CAT SAT ON"]],
          "u2": [s.split() for s in ["A FROG", "DOG", "A DOG"]],
          "u3": []}  # an empty list: all deletions


def test_oracle_equals_hand_count():
    table = oracle_counts(REFS, NBESTS, [1, 2, 3])
    # depth 1: u1 "THE CAT" 1 D, u2 "A FROG" 1 S, u3 3 D -> 5 errors over 8 words
    c1, r1 = table[1]
    assert (c1.n, c1.s, c1.d, c1.i) == (8, 1, 4, 0) and r1 == 1.0
    # depth 2: u1 exact at rank 2, u2 "A FROG" (1 S) kept over "DOG" (1 D): the earliest
    c2, r2 = table[2]
    assert (c2.s, c2.d, c2.i) == (1, 3, 0) and r2 == pytest.approx((2 + 1 + 1) / 3)
    # depth 3: u2 exact at rank 3
    c3, r3 = table[3]
    assert (c3.s, c3.d, c3.i) == (0, 3, 0) and r3 == pytest.approx((2 + 3 + 1) / 3)


def test_oracle_is_the_minimum_over_every_choice_of_picks():
    for depth in (1, 2, 3):
        lists = [NBESTS[k][:depth] or [[]] for k in REFS]
        brute = min(sum(sum(getattr(align(REFS[k], h)[0], f) for f in "sdi")
                        for k, h in zip(REFS, pick)) for pick in itertools.product(*lists))
        counts, _ = oracle_counts(REFS, NBESTS, [depth])[depth]
        assert counts.s + counts.d + counts.i == brute


def _write_nbest(path, nbests):
    path.write_text("".join(json.dumps({"key": k, "nbest": [
        {"text": " ".join(h), "tokens": [], "token_ids": [], "score": -1.0} for h in hyps]}) + "\n"
        for k, hyps in nbests.items()))
    return str(path)


def test_files_and_cli(tmp_path, capsys):
    ref = tmp_path / "text"
    ref.write_text("".join(f"{k} {' '.join(v).lower()}\n" for k, v in REFS.items()))
    nbest = _write_nbest(tmp_path / "nbest", NBESTS)
    table = nbest_oracle(str(ref), nbest, [1, 3])  # case-insensitive, as compute-wer
    assert table[3][0].s + table[3][0].d + table[3][0].i == 3
    assert load_tool("nbest_oracle").main([str(ref), nbest, "--depths", "1", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("oracle@1 -> 62.50 % N=8") and out[1].startswith("oracle@3 -> 37.50 %")


@pytest.mark.parametrize("line,message", [("not json", ":2: not an n-best line"),
                                          ('{"key": "u1", "nbest": [{"x": 1}]}', ":2: not an n-best"),
                                          ('{"key": "u1", "nbest": []}', ":2: duplicate key 'u1'")])
def test_malformed_nbest_lines_are_named(tmp_path, line, message):
    path = tmp_path / "nbest"
    path.write_text('{"key": "u1", "nbest": [{"text": "A"}]}\n' + line + "\n")
    with pytest.raises(ValueError) as e:
        read_nbest_texts(str(path))
    assert message in str(e.value)

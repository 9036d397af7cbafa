"""compute-wer.py against hand-computed counts and WeNet's report layout."""
import functools
import io
import os
import random
import subprocess
import sys

from wenet.eval.wer import Counts, align, compute_wer, split_chars
from tests.common import REPO

ROOT = REPO


def write_lines(path, lines):
    """Write ``lines`` (one per line) to ``path``; returns the path as a string."""
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def compute_wer_cli(tmp_path, ref_lines, hyp_lines, *opts):
    """(stdout, stderr) of tools/compute-wer.py on ref/hyp files of these lines."""
    ref = write_lines(tmp_path / "ref", ref_lines)
    hyp = write_lines(tmp_path / "hyp", hyp_lines)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "compute-wer.py"), *opts,
                           ref, hyp], capture_output=True, text=True, encoding="utf-8",
                          env={**os.environ, "PYTHONPATH": ROOT}, check=True)
    return proc.stdout, proc.stderr


def test_full_report_insertions_at_both_ends_empty_and_missing_hyp(tmp_path):
    out, err = compute_wer_cli(tmp_path, ["u1 a b c", "u2 x y", "u3 p q r"],
                    ["u1 z a b c q", "u2", "u9 stray"], "--v=1")
    expected = (
        "\nutt: u1\nWER: 66.67 % N=3 C=3 S=0 D=0 I=2\n"
        "lab:   A B C   \nrec: Z A B C Q \n\n"
        "\nutt: u2\nWER: 100.00 % N=2 C=0 S=0 D=2 I=0\n"
        "lab: X Y \nrec:     \n\n"
        "\nutt: u3\nWER: 100.00 % N=3 C=0 S=0 D=3 I=0\n"
        "lab: P Q R \nrec:       \n\n"
        + "=" * 75 + "\n\n"
        "Overall -> 87.50 % N=8 C=3 S=0 D=5 I=2\n"
        "Unscored -> 1 hypotheses without reference (u9); 1 references without hypothesis, "
        "counted as deletions (u3)\n")
    assert out == expected
    assert "no hypothesis for utterance 'u3'" in err
    assert "'u9' has no reference" in err
    assert "'u2'" not in err  # an empty hypothesis is a hypothesis


def test_quiet_output_and_substitutions(tmp_path):
    out, _ = compute_wer_cli(tmp_path, ["k1 the cat sat on the mat"], ["k1 the bat sat the mat mat"],
                  "--v=0")
    # the/the C, cat/bat S, sat/sat C, on D, the/the C, mat/mat C, +mat I
    assert out == "Overall -> 50.00 % N=6 C=4 S=1 D=1 I=1\n\n"


def test_char_mode_mixed_text(tmp_path):
    assert split_chars("我们 ok好,Hello <unk>世界。") == ["我", "们", "ok", "好", "Hello", "<unk>",
                                                      "世", "界"]
    out, _ = compute_wer_cli(tmp_path, ["c1 我们 ok 好的"], ["c1 我 OK 好地 x"], "--char=1", "--v=0")
    # 我 C, 们 D, OK C, 好 C, 的/地 S, x I -> N=5
    assert out == "Overall -> 60.00 % N=5 C=3 S=1 D=1 I=1\n\n"


def test_case_sensitivity_ignore_words_and_tags(tmp_path):
    ref, hyp = ["s1 Hello uh World <noise>"], ["s1 hello um world"]
    out, _ = compute_wer_cli(tmp_path, ref, hyp, "--v=0")
    assert out == "Overall -> 33.33 % N=3 C=2 S=1 D=0 I=0\n\n"  # uh/um substituted
    out, _ = compute_wer_cli(tmp_path, ref, hyp, "--v=0", "--cs=1")
    assert out == "Overall -> 100.00 % N=3 C=0 S=3 D=0 I=0\n\n"
    ig = tmp_path / "ig"
    ig.write_text("UH\nUM\n")
    out, _ = compute_wer_cli(tmp_path, ref, hyp, "--v=0", f"--ig={ig}")
    assert out == "Overall -> 0.00 % N=2 C=2 S=0 D=0 I=0\n\n"
    out, _ = compute_wer_cli(tmp_path, ref, hyp, "--v=0", "--rt=0", f"--ig={ig}")
    assert out == "Overall -> 33.33 % N=3 C=2 S=0 D=1 I=0\n\n"  # <NOISE> kept and deleted


def test_padding_symbol_underline(tmp_path):
    out, _ = compute_wer_cli(tmp_path, ["w1 abc d"], ["w1 x d"], "--padding-symbol=underline")
    assert "lab: ABC D \nrec: X__ D \n" in out


@functools.lru_cache(maxsize=None)
def _lev(ref, hyp):
    if not ref or not hyp:
        return len(ref) + len(hyp)
    return min(_lev(ref[1:], hyp) + 1, _lev(ref, hyp[1:]) + 1,
               _lev(ref[1:], hyp[1:]) + (ref[0] != hyp[0]))


def test_alignment_cost_equals_recursive_edit_distance():
    rng = random.Random(0)
    for _ in range(200):
        ref = tuple(rng.choice("abc") for _ in range(rng.randint(0, 7)))
        hyp = tuple(rng.choice("abcd") for _ in range(rng.randint(0, 7)))
        counts, pairs = align(ref, hyp)
        assert counts.s + counts.d + counts.i == _lev(ref, hyp)
        assert counts.n == len(ref)
        assert tuple(r for r, _ in pairs if r) == ref and tuple(h for _, h in pairs if h) == hyp


def test_ties_resolved_like_wenet():
    # Two cost-2 alignments; WeNet's traceback prefers the insertion at the end.
    assert align(("A", "UH", "W"), ("A", "W", "UM"))[0] == Counts(n=3, c=2, s=0, d=1, i=1)
    # Cost-1 alignments: deletion before the diagonal.
    counts, pairs = align(("A", "A"), ("A",))
    assert counts == Counts(n=2, c=1, s=0, d=1, i=0) and pairs == [("A", "A"), ("A", "")]


def test_duplicate_key_is_reported(tmp_path):
    ref = write_lines(tmp_path / "r", ["a x", "a y"])
    hyp = write_lines(tmp_path / "h", ["a x"])
    try:
        compute_wer(ref, hyp, io.StringIO())
    except ValueError as e:
        assert f"{ref}:2" in str(e) and "'a'" in str(e)
    else:
        raise AssertionError("duplicate key accepted")


def _cli_error(*args):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "compute-wer.py"), *args],
                          capture_output=True, text=True, encoding="utf-8",
                          env={**os.environ, "PYTHONPATH": ROOT})
    return proc.returncode, proc.stdout, proc.stderr


def test_cli_duplicate_key_is_one_line_naming_file_and_line(tmp_path):
    ref = write_lines(tmp_path / "ref", ["a x", "b y", "a z"])
    hyp = write_lines(tmp_path / "hyp", ["a x", "b y"])
    rc, out, err = _cli_error(ref, hyp)
    assert (rc, out, err) == (1, "", f"compute-wer: ERROR: {ref}:3: duplicate key 'a'\n")
    rc, out, err = _cli_error(hyp, ref)  # the same in the hypothesis file
    assert (rc, out, err) == (1, "", f"compute-wer: ERROR: {ref}:3: duplicate key 'a'\n")


def test_cli_invalid_utf8_is_one_line_naming_file_and_line(tmp_path):
    ref = write_lines(tmp_path / "ref", ["a x", "b y"])
    hyp = tmp_path / "hyp"
    hyp.write_bytes(b"a x\nb \xe4\xb8\n")  # a UTF-8 sequence cut short on line 2
    rc, out, err = _cli_error(ref, str(hyp))
    assert (rc, out) == (1, "")
    assert err == (f"compute-wer: ERROR: {hyp}:2: not valid UTF-8 (byte 0xe4 at column 3: "
                   "invalid continuation byte)\n")

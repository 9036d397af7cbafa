"""Stage 2: tools/spm_* wrappers and units.txt, run as run.sh runs them."""
from __future__ import annotations

import os
import subprocess
import sys
from tests.common import REPO

ROOT = REPO
TOOLS = os.path.join(ROOT, "tools")

TEXT = "the cat sat\nthe cat ran\na cat sat on the mat\nthe rat ran\n[NOISE] the cat\n"

# Worked out by hand: 16 = 3 meta pieces (<unk> <s> </s>) + the user symbol [NOISE]
# + the 11 characters (a c e h m n o r s t ▁) + one more piece, which can only be
# the most frequent word, "▁cat". Encoding the text never leaves "c" alone, so it is
# not a unit; the rest sort in byte order (C locale), "▁" (E2 96 81) last.
EXPECTED_UNITS = """<blank> 0
<unk> 1
[NOISE] 2
a 3
e 4
h 5
m 6
n 7
o 8
r 9
s 10
t 11
\u2581 12
\u2581cat 13
<sos/eos> 14
"""


def _env():
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)  # the scripts' `env python3` must find this venv
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["LC_ALL"] = "C"
    return env


def _run(args, stdin=None, cwd=None):
    proc = subprocess.run(args, input=stdin, capture_output=True, env=_env(), cwd=cwd)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    return proc.stdout.decode("utf-8")


def _train(tmp_path, prefix):
    """run.sh stage 2's spm_train command (swbd form, with a user-defined symbol)."""
    _run([os.path.join(TOOLS, "spm_train"), f"--input={tmp_path / 'input.txt'}", "--vocab_size=16",
          "--model_type=unigram", f"--model_prefix={prefix}", "--input_sentence_size=100000000",
          "--character_coverage=1.0", "--user_defined_symbols=[NOISE]"])


def test_units_txt_matches_hand_written(tmp_path):
    (tmp_path / "input.txt").write_text(TEXT, encoding="utf-8")
    _train(tmp_path, tmp_path / "bpe")
    units = tmp_path / "units.txt"
    _run([os.path.join(TOOLS, "make_units.sh"), str(tmp_path / "bpe.model"),
          str(tmp_path / "input.txt"), str(units)])
    assert units.read_text(encoding="utf-8") == EXPECTED_UNITS
    assert sorted(os.listdir(tmp_path)) == ["bpe.model", "bpe.vocab", "input.txt", "units.txt"]

    # a rerun (the "--opt value" spelling this time) writes byte-identical files
    first = {name: (tmp_path / name).read_bytes() for name in ("bpe.model", "bpe.vocab")}
    _run([os.path.join(TOOLS, "spm_train"), "--input", str(tmp_path / "input.txt"),
          "--vocab_size", "16", "--model_type", "unigram", "--model_prefix", str(tmp_path / "bpe"),
          "--input_sentence_size", "100000000", "--character_coverage", "1.0",
          "--user_defined_symbols", "[NOISE]"])
    assert {name: (tmp_path / name).read_bytes() for name in first} == first


def test_sampled_training_is_reproducible(tmp_path):
    """--input_sentence_size below the line count samples, and must sample the same lines."""
    words = ["the", "cat", "sat", "ran", "on", "a", "mat", "rat", "dog", "log", "fog", "hat"]
    lines = [" ".join(words[(i * 7 + j * j) % len(words)] + words[(i + j) % len(words)]
                      for j in range(6)) for i in range(400)]
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    models = []
    for seed in (777, 777, 5):
        _run([os.path.join(TOOLS, "spm_train"), f"--input={tmp_path / 'input.txt'}",
              "--vocab_size=40", "--model_type=unigram", f"--model_prefix={tmp_path / 'm'}",
              "--input_sentence_size=100", "--character_coverage=1.0", f"--random_seed={seed}"])
        models.append((tmp_path / "m.model").read_bytes())
    assert models[0] == models[1]
    assert models[0] != models[2]  # the sample matters, so the equality above is not vacuous


def test_encode_decode_round_trip_and_formats_agree(tmp_path):
    (tmp_path / "input.txt").write_text(TEXT, encoding="utf-8")
    _train(tmp_path, tmp_path / "bpe")
    model = f"--model={tmp_path / 'bpe.model'}"
    lines = TEXT.splitlines()
    pieces = _run([os.path.join(TOOLS, "spm_encode"), model, "--output_format=piece"],
                  TEXT.encode("utf-8"))
    ids = _run([os.path.join(TOOLS, "spm_encode"), model, "--output_format", "id"],
               TEXT.encode("utf-8"))
    assert pieces.splitlines()[1] == "\u2581 t h e \u2581cat \u2581 r a n"
    assert len(pieces.splitlines()) == len(ids.splitlines()) == len(lines)
    # ids are the model's own numbering of the same pieces (from its .vocab file)
    vocab = [line.split("\t")[0] for line in
             (tmp_path / "bpe.vocab").read_text(encoding="utf-8").splitlines()]
    for p_line, i_line in zip(pieces.splitlines(), ids.splitlines()):
        assert p_line.split() == [vocab[int(i)] for i in i_line.split()]
    # both formats decode back to the original text
    for fmt, enc in (("piece", pieces), ("id", ids)):
        dec = _run([os.path.join(TOOLS, "spm_decode"), model, f"--input_format={fmt}"],
                   enc.encode("utf-8"))
        assert dec.splitlines() == lines


def test_bad_input_is_reported(tmp_path):
    (tmp_path / "input.txt").write_text(TEXT, encoding="utf-8")
    _train(tmp_path, tmp_path / "bpe")
    proc = subprocess.run([os.path.join(TOOLS, "spm_decode"), f"--model={tmp_path / 'bpe.model'}",
                           "--input_format=id"], input=b"3 4\n7 99\n", capture_output=True, env=_env())
    assert proc.returncode != 0 and b"-:2" in proc.stderr
    proc = subprocess.run([os.path.join(TOOLS, "make_units.sh"), str(tmp_path / "missing.model"),
                           str(tmp_path / "input.txt"), str(tmp_path / "units.txt")],
                          capture_output=True, env=_env())
    assert proc.returncode != 0
    assert not [f for f in os.listdir(tmp_path) if f.startswith("units.txt")]

"""Stage 2: tools/spm_* wrappers and units.txt, run as run.sh runs them."""
from __future__ import annotations

import os
import subprocess
import sys
from tests.common import REPO

ROOT = REPO
TOOLS = os.path.join(ROOT, "tools")

TEXT = "the cat sat\nthe cat ran\na cat sat on the mat\nthe rat ran\n[NOISE] the cat\n"

# vocab_size 15 leaves room for the required pieces only: 3 meta pieces (<unk> <s> </s>),
# the user symbol [NOISE] and the 11 characters of TEXT (a c e h m n o r s t, and the
# word-start mark "\u2581"); spm_train refuses 14 ("Vocabulary size is smaller than
# required_chars"). So no piece spans two characters, and the segmentation is fixed:
CHAR_VOCAB = 15


def hand_segmentation(line: str) -> str:
    """Each word as "\u2581" then its characters; [NOISE] is one piece and, being a user
    symbol, never merges with the "\u2581" before it: "[NOISE] the" -> "\u2581 [NOISE] \u2581 t h e"."""
    return " ".join("\u2581 " + (w if w == "[NOISE]" else " ".join(w)) for w in line.split())


# Hence units.txt: [NOISE] and the 11 characters, all used by the text, in byte order
# (C locale: "[" 0x5B before the letters, "\u2581" E2 96 81 last), after <blank> and <unk>.
EXPECTED_CHAR_UNITS = """<blank> 0
<unk> 1
[NOISE] 2
a 3
c 4
e 5
h 6
m 7
n 8
o 9
r 10
s 11
t 12
\u2581 13
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


def _train(tmp_path, prefix, vocab_size=16):
    """run.sh stage 2's spm_train command (swbd form, with a user-defined symbol)."""
    _run([os.path.join(TOOLS, "spm_train"), f"--input={tmp_path / 'input.txt'}", f"--vocab_size={vocab_size}",
          "--model_type=unigram", f"--model_prefix={prefix}", "--input_sentence_size=100000000",
          "--character_coverage=1.0", "--user_defined_symbols=[NOISE]"])


def _make_units(tmp_path, model):
    units = tmp_path / "units.txt"
    _run([os.path.join(TOOLS, "make_units.sh"), str(model), str(tmp_path / "input.txt"), str(units)])
    return units.read_text(encoding="utf-8")


def test_units_txt_of_a_character_model_matches_hand_written(tmp_path):
    (tmp_path / "input.txt").write_text(TEXT, encoding="utf-8")
    _train(tmp_path, tmp_path / "bpe", CHAR_VOCAB)
    assert _make_units(tmp_path, tmp_path / "bpe.model") == EXPECTED_CHAR_UNITS
    assert sorted(os.listdir(tmp_path)) == ["bpe.model", "bpe.vocab", "input.txt", "units.txt"]


def test_units_txt_lists_the_pieces_the_encoder_uses(tmp_path):
    """With room for one merged piece, which one is sentencepiece's choice; units.txt must
    hold exactly the pieces its encoder uses on the text, numbered in byte order."""
    (tmp_path / "input.txt").write_text(TEXT, encoding="utf-8")
    _train(tmp_path, tmp_path / "bpe")
    pieces = _run([os.path.join(TOOLS, "spm_encode"), f"--model={tmp_path / 'bpe.model'}",
                   "--output_format=piece"], TEXT.encode("utf-8"))
    used = sorted({p for p in pieces.split() if p != "<unk>"}, key=lambda p: p.encode("utf-8"))
    assert "[NOISE]" in used and any(len(p) > 1 and p != "[NOISE]" for p in used)  # a merged piece
    expected = ["<blank> 0", "<unk> 1"] + [f"{p} {i}" for i, p in enumerate(used, 2)]
    expected.append(f"<sos/eos> {len(expected)}")
    assert _make_units(tmp_path, tmp_path / "bpe.model") == "".join(line + "\n" for line in expected)

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
    _train(tmp_path, tmp_path / "bpe", CHAR_VOCAB)
    model = f"--model={tmp_path / 'bpe.model'}"
    lines = TEXT.splitlines()
    pieces = _run([os.path.join(TOOLS, "spm_encode"), model, "--output_format=piece"],
                  TEXT.encode("utf-8"))
    ids = _run([os.path.join(TOOLS, "spm_encode"), model, "--output_format", "id"],
               TEXT.encode("utf-8"))
    assert pieces.splitlines()[1] == "\u2581 t h e \u2581 c a t \u2581 r a n"
    assert pieces.splitlines() == [hand_segmentation(line) for line in lines]
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

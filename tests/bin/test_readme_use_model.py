"""docs/using_a_model.md's commands run as written on a model dir laid out like
the main job's (exp/synth_train_zipformer with train.yaml, avg_2.pt and final.zip but, as a
run whose stage 6 predates the copy, no units.txt; data/lang_char BPE model and units;
raw_wav/test wav.scp, text and a shard data.list; corpus/synth/wav/test audio). The tiny
model is randomly initialised (its CTC head sharpened so hypotheses are not empty): the
test checks that every command runs and writes what the page says, for every input."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from tests.common import REPO
from tests.tiny_experiment import tiny_config, write_experiment
from tests.zipformer.test_encoder import TINY

SENTENCES = ["BOOK A TABLE FOR THE TWENTY THIRD OF SEPTEMBER", "THE DATE IS THE TWELFTH OF MARCH",
             "MY NUMBER IS NINE EIGHT THREE", "SET AN ALARM FOR SEVEN"]
KEYS = [f"synth-test{i:05d}" for i in range(len(SENTENCES))]
EXP = "exp/synth_train_zipformer"


def readme_blocks():
    """The ```bash and ```python blocks of docs/using_a_model.md."""
    text = open(os.path.join(REPO, "docs", "using_a_model.md"), encoding="utf-8").read()
    return re.findall(r"```(bash|python)\n(.*?)```", text, flags=re.S)


def _config(vocab):
    """The main job's Zipformer (80 bins, JSON CMVN, one attention-decoder block), tiny."""
    config = tiny_config({
        "encoder": "zipformer",
        "decoder": "transformer", "decoder_conf": {"r_num_blocks": None},
        "model_conf": {"ctc_weight": 0.5, "reverse_weight": None},
        "dataset_conf": {"fbank_conf": {"num_mel_bins": 80, "dither": 0.1},
                         "batch_conf": {"batch_size": None, "batch_type": "dynamic",
                                        "max_frames_in_batch": 8000}},
        "input_dim": 80, "output_dim": vocab, "cmvn_file": "raw_wav/train/global_cmvn",
        "is_json_cmvn": True,
    })
    config["encoder_conf"] = dict(TINY)
    return config


def _run(cmd, cwd, **kw):
    env = {**os.environ, "PYTHONPATH": REPO, "PATH": os.path.dirname(sys.executable)
           + os.pathsep + os.environ.get("PATH", "")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    root = tmp_path_factory.mktemp("mainjob")
    for name in ("wenet", "tools"):
        os.symlink(os.path.join(REPO, name), root / name)
    wav_dir = root / "corpus/synth/wav/test"
    wav_dir.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i, key in enumerate(KEYS):
        n = int(16000 * (2.0 + 0.2 * i))  # long enough for every transcript to align
        t = np.arange(n) / 16000
        wav = 0.3 * np.sin(2 * np.pi * (220 + 90 * i) * t * (1 + 0.5 * t))
        sf.write(wav_dir / f"{key}.wav", (wav + 0.02 * rng.standard_normal(n)).astype(np.float32),
                 16000)
    test = root / "raw_wav/test"
    test.mkdir(parents=True)
    (test / "wav.scp").write_text("".join(f"{k} {wav_dir / k}.wav\n" for k in KEYS))
    (test / "text").write_text("".join(f"{k} {s}\n" for k, s in zip(KEYS, SENTENCES)))
    rc = _run([sys.executable, "tools/make_shard_list.py", "--num_utts_per_shard", "2",
               str(test / "wav.scp"), str(test / "text"), str(test / "shards"),
               str(test / "data.list")], root)
    assert rc.returncode == 0, rc.stderr
    (root / "raw_wav/train").mkdir()
    (root / "raw_wav/train/global_cmvn").write_text(json.dumps(
        {"mean_stat": [10.0 * 100] * 80, "var_stat": [104.0 * 100] * 80, "frame_num": 100}))
    lang = root / "data/lang_char"
    lang.mkdir(parents=True)
    (lang / "input_train.txt").write_text("\n".join(SENTENCES * 5) + "\n")
    for cmd in (["tools/spm_train", f"--input={lang}/input_train.txt", "--vocab_size=30",
                 "--model_type=unigram", f"--model_prefix={lang}/train_unigram128",
                 "--character_coverage=1.0"],
                ["tools/make_units.sh", f"{lang}/train_unigram128.model",
                 f"{lang}/input_train.txt", f"{lang}/train_unigram128_units.txt"]):
        rc = _run(cmd, root)
        assert rc.returncode == 0, rc.stderr
    vocab = len((lang / "train_unigram128_units.txt").read_text().splitlines())
    cwd = os.getcwd()
    os.chdir(root)  # cmvn_file is relative to the recipe root, as run.sh writes it
    try:  # no units.txt in the experiment dir
        write_experiment(root / EXP, _config(vocab), "avg_2.pt", units=None, jit=True, ctc=8.0)
    finally:
        os.chdir(cwd)
    return root


def test_readme_section_has_the_promised_commands():
    code = "\n".join(body for _, body in readme_blocks())
    for needed in ("wenet/bin/transcribe.py", "--timestamps", "--nbest", "wenet/bin/alignment.py",
                   "--context_list_path", "wenet.load_model", "--srt", "--ctm"):
        assert needed in code, needed


def test_readme_commands_run_as_written(layout):
    root = layout
    for lang, body in readme_blocks():
        cmd = ["bash", "-euo", "pipefail", "-c", body] if lang == "bash" else \
            [sys.executable, "-c", body]
        rc = _run(cmd, root, timeout=600)
        assert rc.returncode == 0, f"{lang} block failed:\n{body}\n{rc.stderr[-3000:]}"
        if lang == "python":
            printed = rc.stdout.splitlines()
            assert [line.split()[0] for line in printed if not line.startswith(" ")] == KEYS[:2]
    exp = root / EXP
    lines = (exp / "test_transcribe.txt").read_text().splitlines()
    assert [line.split()[0] for line in lines] == KEYS
    rows = [json.loads(line) for line in (exp / "words.json").read_text().splitlines()]
    assert [r["key"] for r in rows] == KEYS
    for r in rows:
        assert r["nbest"][0]["text"] == r["text"] and len(r["nbest"]) <= 3
        assert [w["word"] for w in r["words"]] == r["text"].split()
    ctm_words = [line.split()[4] for line in (exp / "words.ctm").read_text().splitlines()]
    assert ctm_words == [w for r in rows for w in r["text"].split()]
    assert sorted(p.name for p in (exp / "srt").iterdir()) == [f"{k}.srt" for k in KEYS]
    aligned = (exp / "align/words.txt").read_text().splitlines()
    failed = (exp / "align/words.txt.failed").read_text().splitlines() \
        if (exp / "align/words.txt.failed").exists() else []
    assert {line.split()[0] for line in aligned + failed} == set(KEYS)
    assert [line.split()[0] for line in
            (exp / "test_hotwords.txt").read_text().splitlines()] == KEYS


def test_readme_front_door_transcribes_a_file(layout):
    """README.md's "Transcribe a file" blocks, run as written with my.wav one test file: the
    command line and the Python lines print the same text for it."""
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    section = text.split("## Transcribe a file\n", 1)[1].split("\n## ", 1)[0]
    blocks = dict(re.findall(r"```(bash|python)\n(.*?)```", section, flags=re.S))
    assert set(blocks) == {"bash", "python"}
    root = layout
    os.symlink(root / f"corpus/synth/wav/test/{KEYS[0]}.wav", root / "my.wav")
    os.symlink(os.path.join(REPO, "path.sh"), root / "path.sh")
    try:
        cli = _run(["bash", "-euo", "pipefail", "-c", blocks["bash"]], root, timeout=600)
        assert cli.returncode == 0, cli.stderr[-3000:]
        api = _run([sys.executable, "-c", blocks["python"]], root, timeout=600)
        assert api.returncode == 0, api.stderr[-3000:]
    finally:
        os.unlink(root / "my.wav")
        os.unlink(root / "path.sh")
    key, _, cli_text = cli.stdout.strip().partition(" ")
    assert key == "my"
    assert api.stdout.strip() == cli_text.strip()

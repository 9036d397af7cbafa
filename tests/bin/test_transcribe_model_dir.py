"""Model directories: which checkpoint, CMVN and units a dir resolves to; hotwords through the
API; run.sh's stage-5 options are type-checked before anything runs."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from tests.common import REPO, recipe_copy
from wenet.decode.options import DecodeOptions
from wenet.inference.loader import find_checkpoint, load_model_dir
from wenet.inference.recognizer import Recognizer
from wenet.models import init_model

UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "\u2581d", "<sos/eos>"]
CONFIG = {
    "encoder": "transformer",
    "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 16,
                     "num_blocks": 1, "dropout_rate": 0.0},
    "decoder": "transformer",
    "decoder_conf": {"attention_heads": 2, "linear_units": 16, "num_blocks": 1},
    "dataset_conf": {"fbank_conf": {"num_mel_bins": 20}},
    "input_dim": 20, "output_dim": len(UNITS), "cmvn_file": None,
}


def _touch(path, age_s=0.0):
    path.write_bytes(b"")
    t = time.time() - age_s
    os.utime(path, (t, t))


def test_checkpoint_choice(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        find_checkpoint(str(tmp_path))
    for n in (0, 1, 10, 2):
        _touch(tmp_path / f"{n}.pt")
    _touch(tmp_path / "step_500.pt")
    assert find_checkpoint(str(tmp_path)) == str(tmp_path / "10.pt")  # newest epoch, numerically
    _touch(tmp_path / "final.pt")
    assert find_checkpoint(str(tmp_path)) == str(tmp_path / "final.pt")
    _touch(tmp_path / "avg_5.pt", age_s=100)
    _touch(tmp_path / "avg_2.pt", age_s=10)
    assert find_checkpoint(str(tmp_path)) == str(tmp_path / "avg_2.pt")  # newest average


def _experiment(root, config, units_in_dir=True):
    exp = root / "exp" / "x"
    exp.mkdir(parents=True)
    (exp / "train.yaml").write_text(yaml.safe_dump(config))
    torch.manual_seed(0)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        model = init_model(config)
    finally:
        os.chdir(cwd)
    torch.save(model.state_dict(), exp / "avg_3.pt")
    if units_in_dir:
        (exp / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
    return exp, model


def test_cmvn_and_units_found_like_the_recipe_lays_them_out(tmp_path):
    (tmp_path / "raw_wav/train").mkdir(parents=True)
    mean, std = np.linspace(-1, 1, 20), np.linspace(1, 2, 20)
    (tmp_path / "raw_wav/train/global_cmvn").write_text(json.dumps(
        {"mean_stat": list(mean * 10), "var_stat": list((std ** 2 + mean ** 2) * 10),
         "frame_num": 10}))
    config = dict(CONFIG, cmvn_file="raw_wav/train/global_cmvn")
    exp, model = _experiment(tmp_path, config, units_in_dir=False)
    lang = tmp_path / "data/lang_char"
    lang.mkdir(parents=True)
    (lang / "other_units.txt").write_text("".join(f"u{i} {i}\n" for i in range(20)))
    with pytest.raises(FileNotFoundError, match="stage 6"):
        load_model_dir(str(exp))  # the only units file has 20 entries, the model 8
    (lang / "train_char_units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
    loaded = load_model_dir(str(exp))  # from another working directory than the recipe's
    assert loaded.tokenizer.symbol_table == {u: i for i, u in enumerate(UNITS)}
    assert loaded.checkpoint == str(exp / "avg_3.pt") and not loaded.scripted
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], value), name
    assert loaded.frame_shift_s == pytest.approx(4 * 0.010)


def test_hotwords_reach_the_search(tmp_path):
    exp, _ = _experiment(tmp_path, CONFIG)
    rng = np.random.default_rng(0)
    wav = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    sf.write(tmp_path / "a.wav", wav, 16000)
    asr = Recognizer(load_model_dir(str(exp)), DecodeOptions(beam_size=len(UNITS)))  # every unit expanded
    [plain] = asr.transcribe(str(tmp_path / "a.wav"), mode="ctc_prefix_beam_search")
    [again] = asr.transcribe(str(tmp_path / "a.wav"), mode="ctc_prefix_beam_search")
    assert again.text == plain.text
    asr.context_score = 50.0  # a bonus no random model's scores can outweigh
    [biased] = asr.transcribe(str(tmp_path / "a.wav"), mode="ctc_prefix_beam_search",
                              context_list=["abc"])
    assert "abc" in biased.text.replace(" ", "") and "abc" not in plain.text.replace(" ", "")


@pytest.mark.parametrize("args,message", [
    (["--ctc_weight", "abc"], "--ctc_weight takes a number"),
    (["--reverse_weight", "0.3.1"], "--reverse_weight takes a number"),
    (["--context_score", "x"], "--context_score takes a number"),
    (["--beam_size", "0"], "--beam_size takes a positive integer"),
    (["--nbest", "-1"], "--nbest takes a positive integer"),
    (["--decoding_chunk_size", "0"], "--decoding_chunk_size takes -1 (full context) or a positive"),
    (["--gpu", "-2"], "--gpu takes -1 (CPU) or a GPU index"),
    (["--timestamps", "yes"], "--timestamps takes true or false"),
    (["--simulate_streaming", "1"], "--simulate_streaming takes true or false"),
])
def test_run_sh_stage5_options_are_checked(args, message, tmp_path):
    r = subprocess.run(["./run.sh", *args], cwd=recipe_copy(tmp_path), capture_output=True,
                       text=True)
    assert r.returncode == 1 and message in r.stderr.splitlines()[0], r.stderr


def test_run_sh_accepts_numbers_in_every_form(tmp_path):
    # valid values pass the option checks and stop at the stage order check
    r = subprocess.run(["./run.sh", "--ctc_weight", "-0.5", "--reverse_weight", ".3",
                        "--context_score", "2e-3", "--decoding_chunk_size", "16", "--gpu", "0",
                        "--stage", "5", "--stop_stage", "4"], cwd=recipe_copy(tmp_path),
                       capture_output=True, text=True)
    assert r.returncode == 1 and "--stage 5 is after --stop_stage 4" in r.stderr


def test_import_wenet_stays_light():
    code = "import sys, wenet; assert 'torch' not in sys.modules, 'torch imported'; " \
           "assert callable(wenet.load_model)"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == 0, r.stderr

"""The ONNX runtime gives recognize.py's text, every supported mode, fp32: a tiny U2++
model (conformer, bidirectional decoder) and a tiny conformer transducer (LSTM predictor,
attention decoder) exported with wenet/bin/export_onnx.py, decoded by recognize.py from
the checkpoint and by ``python -m wenet.runtime`` from the ONNX directory; hotwords and
an n-gram LM too. Then the same with torch made unimportable (tests/runtime/no_torch):
the runtime's process never imports torch and prints the reference text.

Inputs the model cannot take (too short, another sample rate, not audio) are refused by
name, the others decoded as without them, and the exit status says so.
"""
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.common import REPO
from tests.zipformer.test_encoder import TINY as TINY_ZIPFORMER
from tests.tiny_experiment import (TRANSDUCER, read_hyps, tiny_config, write_experiment,
                                   write_tones, write_wav_scp)
from wenet.bin.export_onnx import main as export_main
from wenet.bin.recognize import main as recognize_main
from wenet.lm.ngram import train_kneser_ney
from wenet.runtime.__main__ import main as runtime_main

KEYS = [f"u{i}" for i in range(6)]
NO_TORCH = os.path.join(REPO, "tests", "runtime", "no_torch")
CTC_MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention_rescoring"]
RNNT_MODES = ["rnnt_greedy_search", "rnnt_beam_search", "rnnt_beam_attn_rescoring"]


def _experiment(root: Path, name: str, config, **sharpening) -> Path:
    d = root / name
    write_experiment(d, config, "avg_1.pt", **sharpening)
    export_main(["--config", str(d / "train.yaml"), "--checkpoint", str(d / "avg_1.pt"),
                 "--output_dir", str(d / "onnx"), "--units", str(d / "units.txt")])
    return d


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime_e2e")
    wavs = root / "wav"
    wavs.mkdir()
    write_tones(wavs, KEYS, [1.1, 0.5, 0.8, 0.35, 1.4, 0.6])
    write_wav_scp(root / "wav.scp", wavs, KEYS)
    (root / "hotwords.txt").write_text("cd\nab\n")
    lm = train_kneser_ney([s.split() for s in ["d dc", "dc dc d", "c d", "dc"]], order=2)
    lm.write_arpa(str(root / "lm.arpa"))
    att = _experiment(root, "att", tiny_config(), ctc=3.0, ctc_blank=2.0, eos=2.0)
    rnnt = _experiment(root, "rnnt", tiny_config(TRANSDUCER), joint=4.0, joint_blank=2.0)
    multi_blank = tiny_config(TRANSDUCER, {"model_conf": {"big_blank_durations": [2, 3]}})
    rnnt_mb = _experiment(root, "rnnt_mb", multi_blank, joint=4.0, joint_blank=1.0)
    zipformer = tiny_config({"encoder": "zipformer", "decoder": "transformer",
                             "decoder_conf": {"linear_units": 32, "r_num_blocks": None},
                             "model_conf": {"reverse_weight": None}})
    zipformer["encoder_conf"] = dict(TINY_ZIPFORMER)
    zip_dir = _experiment(root, "zipformer", zipformer, ctc=30.0)
    return {"root": root, "att": att, "rnnt": rnnt, "rnnt_mb": rnnt_mb, "zipformer": zip_dir}


def _reference(d: Path, scp: Path, modes, out: Path, *extra) -> dict:
    rc = recognize_main(["--config", str(d / "train.yaml"), "--checkpoint", str(d / "avg_1.pt"),
                         "--dict", str(d / "units.txt"), "--test_data", str(scp),
                         "--data_type", "scp", "--modes", " ".join(modes),
                         "--result_dir", str(out), "--batch_size", "4", *extra])
    assert rc == 0
    return {m: read_hyps(out / m / "text") for m in modes}


def _runtime(capsys, d: Path, scp: Path, mode: str, *extra, caplog=None) -> tuple:
    """(exit status, {key: text}, the log) of ``python -m wenet.runtime`` in this process."""
    capsys.readouterr()
    if caplog is not None:
        caplog.clear()
        caplog.set_level(logging.INFO)
    rc = runtime_main(["--onnx_dir", str(d / "onnx"), "--mode", mode, "--batch_size", "4",
                       str(scp), *extra])
    captured = capsys.readouterr()
    hyps = dict(line.split(" ", 1) if " " in line else (line, "")
                for line in captured.out.splitlines())
    return rc, hyps, caplog.text if caplog is not None else captured.err


OPTION_SETS = {  # name: (model, modes, options given to both)
    "ctc": ("att", CTC_MODES, []),
    "ctc_reverse": ("att", ["attention_rescoring"], ["--reverse_weight", "0.3",
                                                     "--ctc_weight", "0.7"]),
    "ctc_beam3_noskip": ("att", CTC_MODES[1:], ["--beam_size", "3",
                                                "--blank_skip_threshold", "0"]),
    "ctc_hotwords": ("att", CTC_MODES[1:], ["--context_list_path", "{root}/hotwords.txt",
                                            "--context_score", "2.5"]),
    "ctc_lm": ("att", CTC_MODES[1:], ["--lm_path", "{root}/lm.arpa", "--lm_weight", "0.8"]),
    "rnnt": ("rnnt", RNNT_MODES, ["--beam_size", "4"]),
    "rnnt_sym": ("rnnt", ["rnnt_greedy_search"], ["--max_sym_per_frame", "3"]),
    "rnnt_hotwords": ("rnnt", RNNT_MODES[1:], ["--context_list_path", "{root}/hotwords.txt",
                                               "--transducer_weight", "0.5"]),
    "rnnt_multi_blank": ("rnnt_mb", RNNT_MODES, []),
    "zipformer": ("zipformer", CTC_MODES, []),
}


@pytest.mark.parametrize("name", list(OPTION_SETS))
def test_runtime_text_equals_recognize(exp, tmp_path, capsys, name):
    model, modes, options = OPTION_SETS[name]
    options = [o.format(root=exp["root"]) for o in options]
    scp = exp["root"] / "wav.scp"
    ref = _reference(exp[model], scp, modes, tmp_path / "ref", *options)
    for mode in modes:
        rc, ours, _ = _runtime(capsys, exp[model], scp, mode, *options)
        assert rc == 0
        assert ours == ref[mode], mode
        assert list(ours) == KEYS  # input order
    assert any(text for texts in ref.values() for text in texts.values())


def test_options_reach_the_searches(exp, capsys):
    """Hotwords, the LM and the reverse weight change some text (so the equalities above
    test them, not a search that ignored them)."""
    scp = exp["root"] / "wav.scp"
    for model, mode, options in [
            ("att", "ctc_prefix_beam_search", ["--context_list_path",
                                               f"{exp['root']}/hotwords.txt"]),
            ("att", "ctc_prefix_beam_search", ["--lm_path", f"{exp['root']}/lm.arpa"]),
            ("rnnt", "rnnt_beam_search", ["--context_list_path", f"{exp['root']}/hotwords.txt",
                                          "--context_score", "6"])]:
        assert _runtime(capsys, exp[model], scp, mode, *options)[1] != \
            _runtime(capsys, exp[model], scp, mode)[1], (model, mode, options)


def _no_torch_run(args, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([NO_TORCH, REPO]))
    code = ("import runpy, sys; sys.argv[0] = 'wenet.runtime'; "
            "runpy.run_module('wenet.runtime', run_name='__main__', alter_sys=True)")
    probe = ("import sys; import atexit; atexit.register(lambda: sys.stderr.write("
             "'TORCH_LOADED=%s\\n' % any(m.split('.')[0] in ('torch', 'torchaudio') "
             "for m in sys.modules)))")
    return subprocess.run([sys.executable, "-c", f"{probe}; {code}", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("model,mode,options", [
    ("att", "attention_rescoring", ["--reverse_weight", "0.3"]),
    ("att", "ctc_prefix_beam_search", ["--lm_path", "{root}/lm.arpa"]),
    ("rnnt", "rnnt_beam_attn_rescoring", ["--context_list_path", "{root}/hotwords.txt"])])
def test_runtime_without_torch_prints_the_reference(exp, tmp_path, model, mode, options):
    options = [o.format(root=exp["root"]) for o in options]
    scp = exp["root"] / "wav.scp"
    blocked = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                             env=dict(os.environ, PYTHONPATH=NO_TORCH), text=True)
    assert blocked.returncode != 0 and "torch is blocked" in blocked.stderr
    proc = _no_torch_run(["--onnx_dir", str(exp[model] / "onnx"), "--mode", mode, *options,
                          "--wav_scp", str(scp)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "TORCH_LOADED=False" in proc.stderr
    ours = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert ours == _reference(exp[model], scp, [mode], tmp_path / "ref", *options)[mode]


def test_inputs_the_model_cannot_take_are_refused_by_name(exp, tmp_path, capsys, caplog):
    root = exp["root"]
    bad = tmp_path / "bad"
    bad.mkdir()
    sf.write(bad / "short.wav", np.zeros(800, dtype=np.float32), 16000)  # 0.05 s: 3 frames
    sf.write(bad / "rate8k.wav", np.zeros(8000, dtype=np.float32), 8000)
    (bad / "junk.wav").write_bytes(b"not audio at all")
    scp = tmp_path / "wav.scp"
    good = (root / "wav.scp").read_text().splitlines()
    scp.write_text("\n".join(good[:2] + [f"short {bad}/short.wav", f"rate8k {bad}/rate8k.wav",
                                         f"junk {bad}/junk.wav"] + good[2:]) + "\n")
    rc, ours, err = _runtime(capsys, exp["att"], scp, "attention_rescoring", caplog=caplog)
    assert rc == 1
    ref = _reference(exp["att"], root / "wav.scp", ["attention_rescoring"], tmp_path / "ref")
    assert ours == ref["attention_rescoring"] and list(ours) == KEYS
    assert "short" in err and "shorter than the model's minimum" in err
    assert "rate8k" in err and "8000 Hz, the model takes 16000 Hz" in err
    assert "junk" in err and "not audio" in err
    assert "3 of 9 inputs gave no result" in err
    assert _runtime(capsys, exp["att"], scp, "attention_rescoring", "--keep_going")[0] == 0


def test_zipformer_short_clips_are_decoded_as_recognize_decodes_them(exp, tmp_path, capsys):
    clips = tmp_path / "clips"
    clips.mkdir()
    rng = np.random.default_rng(0)
    for frames in (8, 9, 10, 11):  # 8 is too short for both
        sf.write(clips / f"f{frames}.wav",
                 0.1 * rng.standard_normal(400 + 160 * (frames - 1)).astype(np.float32), 16000)
    keys = ["f8", "f9", "f10", "f11"]
    scp = write_wav_scp(tmp_path / "wav.scp", clips, keys)
    ref = recognize_main(["--config", str(exp["zipformer"] / "train.yaml"), "--checkpoint",
                          str(exp["zipformer"] / "avg_1.pt"), "--dict",
                          str(exp["zipformer"] / "units.txt"), "--test_data", str(scp),
                          "--data_type", "scp", "--mode", "ctc_greedy_search", "--result_file",
                          str(tmp_path / "ref.txt"), "--keep_going"])
    assert ref == 0
    _, ours, _ = _runtime(capsys, exp["zipformer"], scp, "ctc_greedy_search", "--keep_going")
    assert ours == read_hyps(tmp_path / "ref.txt")


def test_int8_files_decode_every_input(exp, tmp_path, capsys, caplog):
    """--int8 reads the *.int8.onnx files (its text may differ from fp32's)."""
    d = exp["att"]
    export_main(["--config", str(d / "train.yaml"), "--checkpoint", str(d / "avg_1.pt"),
                 "--output_dir", str(tmp_path / "onnx"), "--units", str(d / "units.txt"),
                 "--int8"])
    rc, ours, err = _runtime(capsys, tmp_path, exp["root"] / "wav.scp", "ctc_greedy_search",
                             "--int8", caplog=caplog)
    assert rc == 0 and list(ours) == KEYS and "int8" in err
    os.remove(tmp_path / "onnx" / "ctc.int8.onnx")
    rc, _, err = _runtime(capsys, tmp_path, exp["root"] / "wav.scp", "ctc_greedy_search",
                          "--int8", caplog=caplog)
    assert rc == 1 and "ctc.int8.onnx is missing" in err


def test_unsupported_mode_and_missing_graph_are_named(exp, capsys, caplog):
    scp = exp["root"] / "wav.scp"
    rc, _, err = _runtime(capsys, exp["att"], scp, "attention", caplog=caplog)
    assert rc == 1 and "no incremental decoding step" in err
    rc, _, err = _runtime(capsys, exp["att"], scp, "rnnt_beam_search", caplog=caplog)
    assert rc == 1 and "needs encoder_proj/predictor/joiner.onnx" in err
    rc, _, err = _runtime(capsys, exp["rnnt"], scp, "ctc_greedy_search", caplog=caplog)
    assert rc == 1 and "needs ctc.onnx" in err

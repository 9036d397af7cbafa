"""Transducer models through transcribe: the same text as recognize.py (eager and final.zip),
n-best of the beam sorted with the mode's output first, and timestamps from the frames that
emit each token (the lattice's best path, checked against brute force)."""
import itertools
import json

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from wenet.bin.recognize import main as recognize_main
from wenet.bin.transcribe import main as transcribe_main
from wenet.decode.recognizer import rnnt_viterbi_frames
from wenet.export.jit import export_jit
from wenet.models import init_model

UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "\u2581d", "<sos/eos>"]
KEYS = [f"u{i}" for i in range(4)]


def _brute_force_frames(lp, tokens, blank):
    """Enumerate every path: token u is emitted on frame f_u with f nondecreasing."""
    T, U = lp.shape[0], len(tokens)
    best, best_frames = -np.inf, None
    for frames in itertools.combinations_with_replacement(range(T), U):
        score, u = 0.0, 0
        for t in range(T):
            while u < U and frames[u] == t:
                score += lp[t, u, tokens[u]]
                u += 1
            score += lp[t, u, blank]
        if score > best:
            best, best_frames = score, list(frames)
    return best_frames


def test_viterbi_frames_equal_brute_force():
    gen = torch.Generator().manual_seed(0)
    for T, tokens in [(1, [2]), (3, [1, 2]), (5, [3, 3, 1]), (6, [2, 1, 2, 3]), (4, [])]:
        for _ in range(5):
            lp = torch.log_softmax(3 * torch.randn(T, len(tokens) + 1, 4, generator=gen), -1)
            assert rnnt_viterbi_frames(lp, tokens, 0) == _brute_force_frames(
                lp.double().numpy(), tokens, 0), (T, tokens)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rnnt")
    rng = np.random.default_rng(0)
    for i, secs in enumerate([0.6, 0.3, 0.45, 0.5]):
        n = int(16000 * secs)
        t = np.arange(n) / 16000
        wav = 0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t) + 0.05 * rng.standard_normal(n)
        sf.write(d / f"{KEYS[i]}.wav", wav.astype(np.float32), 16000)
    (d / "wav.scp").write_text("".join(f"{k} {d / k}.wav\n" for k in KEYS))
    (d / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
    config = {"encoder": "conformer",
              "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 16,
                               "num_blocks": 1, "cnn_module_kernel": 3, "dropout_rate": 0.0},
              "decoder": "transformer",
              "decoder_conf": {"attention_heads": 2, "linear_units": 16, "num_blocks": 1},
              "model": "transducer", "predictor": "lstm",
              "predictor_conf": {"embed_size": 8, "hidden_size": 8, "output_size": 8},
              "joint_conf": {"join_dim": 16},
              "model_conf": {"attention_weight": 0.3},
              "dataset_conf": {"fbank_conf": {"num_mel_bins": 20, "frame_shift": 10,
                                              "frame_length": 25, "dither": 1.0},
                               "batch_conf": {"batch_size": 3}},
              "input_dim": 20, "output_dim": len(UNITS), "cmvn_file": None}
    (d / "train.yaml").write_text(yaml.safe_dump(config))
    torch.manual_seed(0)
    model = init_model(config)
    with torch.no_grad():
        model.joint.out.weight.mul_(4.0)
        model.joint.out.bias[0] -= 2.0
    torch.save(model.state_dict(), d / "avg_1.pt")
    export_jit(model.eval(), str(d / "final.zip"))
    return d


def _text(path):
    return dict(line.split(" ", 1) if " " in line else (line, "")
                for line in path.read_text().splitlines())


@pytest.mark.parametrize("mode", ["rnnt_greedy_search", "rnnt_beam_search"])
def test_transducer_text_nbest_and_emitting_frames(model_dir, tmp_path, mode):
    d = model_dir
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(d / "wav.scp"),
                    "--data_type", "scp", "--checkpoint", str(d / "avg_1.pt"), "--dict",
                    str(d / "units.txt"), "--beam_size", "3", "--mode", mode,
                    "--result_file", str(tmp_path / "rec")])
    expected = _text(tmp_path / "rec")
    assert any(expected.values())
    for extra in ([], ["--checkpoint", str(d / "avg_1.pt")]):
        out = tmp_path / f"t{len(extra)}"
        assert transcribe_main(["--model_dir", str(d), "--beam_size", "3", "--mode", mode,
                                "--format", "json", "--nbest", "3", "--timestamps",
                                "--output", str(out), *extra, str(d / "wav.scp")]) == 0
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert {r["key"]: r["text"] for r in rows} == expected
        for r in rows:
            scores = [h["score"] for h in r["nbest"]]
            if mode == "rnnt_beam_search":
                assert scores == sorted(scores, reverse=True)
            starts = [t["start"] for t in r["tokens"]]
            assert len(starts) == len(r["nbest"][0]["token_ids"])
            assert starts == sorted(starts)
            assert all(0 <= t["start"] < t["end"] <= r["duration"] + 0.04 for t in r["tokens"])

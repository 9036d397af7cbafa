"""recognize.py with the transducer modes on a tiny random model: batching changes nothing."""
import json
from unittest.mock import Mock

import numpy as np
import soundfile as sf
import torch
import yaml

from wenet.bin.recognize import main as recognize_main
from wenet.decode import context
from wenet.models import init_model

MODES = ["rnnt_greedy_search", "rnnt_beam_search", "rnnt_beam_attn_rescoring"]
UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "\u2581d", "<sos/eos>"]


def test_transducer_modes_batch_independent(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    lines = []
    for i, secs in enumerate([0.6, 0.3, 0.45, 0.5]):
        n = int(16000 * secs)
        t = np.arange(n) / 16000
        wav = 0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t) + 0.05 * rng.standard_normal(n)
        sf.write(tmp_path / f"u{i}.wav", wav.astype(np.float32), 16000)
        lines.append(json.dumps({"key": f"u{i}", "wav": str(tmp_path / f"u{i}.wav"),
                                 "txt": "abc"}))
    (tmp_path / "data.list").write_text("\n".join(lines) + "\n")
    (tmp_path / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
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
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(config))
    torch.manual_seed(0)
    model = init_model(config)
    with torch.no_grad():
        model.joint.out.weight.mul_(4.0)
        model.joint.out.bias[0] -= 2.0
    torch.save(model.state_dict(), tmp_path / "model.pt")
    texts, greedy_counts = {}, {}
    beam_search = Mock(wraps=context.rnnt_beam_search)
    monkeypatch.setattr(context, "rnnt_beam_search", beam_search)
    for bs in (1, 3):
        beam_search.reset_mock()
        out = tmp_path / f"bs{bs}"
        recognize_main(["--config", str(tmp_path / "train.yaml"),
                        "--test_data", str(tmp_path / "data.list"), "--data_type", "raw",
                        "--checkpoint", str(tmp_path / "model.pt"),
                        "--dict", str(tmp_path / "units.txt"), "--beam_size", "3",
                        "--batch_size", str(bs), "--max_sym_per_frame", "2",
                        "--transducer_weight", "0.5", "--modes", " ".join(MODES),
                        "--result_dir", str(out)])
        # one beam search per batch feeds rnnt_beam_search and rnnt_beam_attn_rescoring
        assert beam_search.call_count == {1: 4, 3: 2}[bs]
        texts[bs] = {m: sorted((out / m / "text").read_text().splitlines()) for m in MODES}
        rec = json.loads((out / "rnnt_greedy_search" / "rtf").read_text())
        greedy_counts[bs] = (rec["joint_evals"], rec["encoder_frames"])
    assert texts[1] == texts[3]
    # the joint-call count does not depend on batching; a standard-blank model
    # evaluates the joint at least once on every encoder frame
    assert greedy_counts[1] == greedy_counts[3]
    assert greedy_counts[1][0] >= greedy_counts[1][1] > 0
    for m in MODES:
        assert len(texts[1][m]) == 4
    assert any(len(line.split()) > 1 for line in texts[1]["rnnt_greedy_search"])

"""recognize.py with a causal Zipformer: --simulate_streaming (chunk by chunk with caches)
writes the hypotheses of the chunk-masked full forward, in every decode mode."""
import json

import numpy as np
import soundfile as sf
import torch
import yaml

from wenet.bin.recognize import main as recognize_main
from wenet.models import init_model
from tests.zipformer.test_encoder import TINY

MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]
UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "\u2581d", "<sos/eos>"]


def _setup(d):
    rng = np.random.default_rng(0)
    lines = []
    for i, secs in enumerate([0.6, 0.3, 0.45, 0.7, 0.35]):
        n = int(16000 * secs)
        t = np.arange(n) / 16000
        wav = 0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t) + 0.05 * rng.standard_normal(n)
        sf.write(d / f"u{i}.wav", wav.astype(np.float32), 16000)
        lines.append(json.dumps({"key": f"u{i}", "wav": str(d / f"u{i}.wav"), "txt": "abc"}))
    (d / "data.list").write_text("\n".join(lines) + "\n")
    (d / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
    config = {
        "encoder": "zipformer", "encoder_conf": {**TINY, "causal": True},
        "decoder": "transformer",
        "decoder_conf": {"attention_heads": 2, "linear_units": 32, "num_blocks": 1},
        "model_conf": {"ctc_weight": 0.3},
        "dataset_conf": {"fbank_conf": {"num_mel_bins": 20, "frame_shift": 10,
                                        "frame_length": 25, "dither": 0.0},
                         "batch_conf": {"batch_size": 1}},
        "input_dim": 20, "output_dim": len(UNITS), "cmvn_file": None,
    }
    (d / "train.yaml").write_text(yaml.safe_dump(config))
    torch.manual_seed(0)
    model = init_model(config)
    with torch.no_grad():  # a sharper random CTC head, so that hypotheses are not empty
        model.ctc.ctc_lo.weight.mul_(30.0)
    torch.save(model.state_dict(), d / "model.pt")


def test_simulate_streaming_equals_chunk_masked_decoding(tmp_path, one_thread):
    _setup(tmp_path)
    texts = {}
    for name, extra in (("masked", []), ("streamed", ["--simulate_streaming"])):
        out = tmp_path / name
        recognize_main(["--config", str(tmp_path / "train.yaml"),
                        "--test_data", str(tmp_path / "data.list"), "--data_type", "raw",
                        "--checkpoint", str(tmp_path / "model.pt"),
                        "--dict", str(tmp_path / "units.txt"), "--beam_size", "3",
                        "--batch_size", "1", "--decoding_chunk_size", "2",
                        "--num_decoding_left_chunks", "2", "--modes", " ".join(MODES),
                        "--result_dir", str(out), *extra])
        texts[name] = {m: (out / m / "text").read_text().splitlines() for m in MODES}
    assert texts["streamed"] == texts["masked"]
    assert sum(len(line.split()) > 1 for line in texts["masked"]["ctc_greedy_search"]) > 0

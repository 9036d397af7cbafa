"""A tiny streaming U2++ model directory (random weights, sharpened CTC head) and test audio,
built once per test session: train.yaml, units.txt, model.pt, final.zip, data.list, *.wav."""
import json

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from wenet.export.jit import export_jit
from wenet.models import init_model

UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "d", "e", "f", "<sos/eos>"]
CHUNK = 4


def tiny_config(streaming: bool = True) -> dict:
    return {
        "encoder": "conformer",
        "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64,
                         "num_blocks": 2, "cnn_module_kernel": 5, "dropout_rate": 0.0,
                         "input_layer": "conv2d", "causal": streaming,
                         "use_dynamic_chunk": streaming, "cnn_module_norm": "layer_norm"},
        "decoder": "bitransformer",
        "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1,
                         "r_num_blocks": 1, "dropout_rate": 0.0},
        "model_conf": {"ctc_weight": 0.3, "reverse_weight": 0.3},
        "dataset_conf": {"fbank_conf": {"num_mel_bins": 20, "frame_shift": 10,
                                        "frame_length": 25, "dither": 1.0},
                         "resample_conf": {"resample_rate": 16000},
                         "batch_conf": {"batch_size": 1}},
        "input_dim": 20, "output_dim": len(UNITS), "cmvn_file": None,
    }


def synth_audio(seconds: float, seed: int) -> np.ndarray:
    """Tones that change every 80 ms over noise, as int16 (a random model then emits
    many different tokens)."""
    rng = np.random.default_rng(seed)
    n = int(16000 * seconds)
    t = np.arange(n) / 16000
    freq = np.repeat(rng.uniform(150, 2500, n // 1280 + 1), 1280)[:n]
    wav = 0.3 * np.sin(2 * np.pi * np.cumsum(freq) / 16000) + 0.03 * rng.standard_normal(n)
    wav *= (t > 0.1)  # a short silence first
    return np.clip(wav * 32767, -32768, 32767).astype(np.int16)


def write_model_dir(d, streaming: bool = True):
    d.mkdir(parents=True, exist_ok=True)
    config = tiny_config(streaming)
    (d / "train.yaml").write_text(yaml.safe_dump(config))
    (d / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
    torch.manual_seed(0)
    model = init_model(config)
    with torch.no_grad():  # sharpen the random CTC head so that hypotheses are not empty
        model.ctc.ctc_lo.weight.mul_(6.0)
        model.ctc.ctc_lo.bias[0] -= 1.0
    torch.save(model.state_dict(), d / "model.pt")
    export_jit(model.eval(), str(d / "final.zip"))
    return d


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    d = write_model_dir(tmp_path_factory.mktemp("serve") / "model")
    lines = []
    for i, secs in enumerate([1.7, 2.3, 1.1]):
        sf.write(d / f"u{i}.wav", synth_audio(secs, i), 16000, subtype="PCM_16")
        lines.append(json.dumps({"key": f"u{i}", "wav": str(d / f"u{i}.wav"), "txt": "a"}))
    (d / "data.list").write_text("\n".join(lines) + "\n")
    return d

"""A tiny streaming U2++ model directory (random weights, sharpened CTC head) and test audio,
built once per test session: train.yaml, units.txt, model.pt, final.zip, data.list, *.wav."""
import numpy as np
import pytest
import soundfile as sf

from tests.tiny_experiment import tiny_config, write_data_list, write_experiment

UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "d", "e", "f", "<sos/eos>"]
CHUNK = 4


def streaming_config(streaming: bool = True) -> dict:
    """The tiny U2++ model of these tests; ``streaming``: causal, dynamic chunk training."""
    return tiny_config({"encoder_conf": {"cnn_module_kernel": 5, "input_layer": "conv2d",
                                         "causal": streaming, "use_dynamic_chunk": streaming,
                                         "cnn_module_norm": "layer_norm"},
                        "dataset_conf": {"batch_conf": {"batch_size": 1}},
                        "output_dim": len(UNITS)})


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
    write_experiment(d, streaming_config(streaming), units=UNITS, jit=True, ctc=6.0,
                     ctc_blank=1.0)
    return d


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    d = write_model_dir(tmp_path_factory.mktemp("serve") / "model")
    keys = [f"u{i}" for i in range(3)]
    for i, secs in enumerate([1.7, 2.3, 1.1]):
        sf.write(d / f"{keys[i]}.wav", synth_audio(secs, i), 16000, subtype="PCM_16")
    write_data_list(d / "data.list", d, keys, lambda key: "a")
    return d

"""Tiny streaming model directories (random weights, sharpened output layers) and test
audio, built once per test session: train.yaml, units.txt, model.pt, final.zip,
data.list, *.wav. The serve suite runs against each kind of model the server serves
(``SERVED``): a U2++ conformer (CTC + attention, dynamic chunk training), a causal
Zipformer (CTC + attention) and a chunk-trained conformer transducer (LSTM predictor)."""
import numpy as np
import pytest
import soundfile as sf

from tests.tiny_experiment import TRANSDUCER, tiny_config, write_data_list, write_experiment
from tests.zipformer.test_encoder import TINY as ZIPFORMER_TINY

UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "d", "e", "f", "<sos/eos>"]
CHUNK = 4  # output frames per chunk: a multiple of the tiny Zipformer's 2
SERVED = ("u2pp", "zipformer", "transducer")
_CHUNKED = {"causal": True, "use_dynamic_chunk": True, "cnn_module_kernel": 5,
            "input_layer": "conv2d", "cnn_module_norm": "layer_norm"}


def streaming_config(streaming: bool = True) -> dict:
    """The tiny U2++ model of these tests; ``streaming``: causal, dynamic chunk training."""
    return tiny_config({"encoder_conf": {**_CHUNKED, "causal": streaming,
                                         "use_dynamic_chunk": streaming},
                        "dataset_conf": {"batch_conf": {"batch_size": 1}},
                        "output_dim": len(UNITS)})


def model_config(kind: str, streaming: bool = True) -> dict:
    """The tiny model of a ``SERVED`` kind (``streaming`` False: its full-context twin)."""
    if kind == "u2pp":
        return streaming_config(streaming)
    common = {"dataset_conf": {"batch_conf": {"batch_size": 1}}, "output_dim": len(UNITS)}
    if kind == "zipformer":
        config = tiny_config(common, {"encoder": "zipformer", "encoder_conf": None})
        config["encoder_conf"] = {**ZIPFORMER_TINY, "causal": streaming}
        return config
    if kind == "transducer":
        return tiny_config(TRANSDUCER, common, {"encoder_conf": {
            **_CHUNKED, "causal": streaming, "use_dynamic_chunk": streaming}})
    raise ValueError(kind)


# per kind: how write_experiment sharpens the random model so that it emits tokens
_SHARPEN = {"u2pp": dict(ctc=6.0, ctc_blank=1.0), "zipformer": dict(ctc=6.0, ctc_blank=1.0),
            "transducer": dict(joint=4.0, joint_blank=2.0)}


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


def write_model_dir(d, streaming: bool = True, kind: str = "u2pp"):
    write_experiment(d, model_config(kind, streaming), units=UNITS, jit=True, **_SHARPEN[kind])
    return d


def _model_dir(tmp_path_factory, kind: str):
    d = write_model_dir(tmp_path_factory.mktemp("serve") / kind, kind=kind)
    keys = [f"u{i}" for i in range(3)]
    for i, secs in enumerate([1.7, 2.3, 1.1]):
        sf.write(d / f"{keys[i]}.wav", synth_audio(secs, i), 16000, subtype="PCM_16")
    write_data_list(d / "data.list", d, keys, lambda key: "a")
    return d


@pytest.fixture(scope="session", params=SERVED)
def model_dir(request, tmp_path_factory):
    """Each served kind's model directory in turn (tests using it run once per kind)."""
    return _model_dir(tmp_path_factory, request.param)


@pytest.fixture(scope="session")
def u2pp_dir(tmp_path_factory):
    """The U2++ model directory alone, for tests of the server that do not depend on the
    kind of model (limits, protocol, the page, the tools)."""
    return _model_dir(tmp_path_factory, "u2pp")


def kind_of(model_dir) -> str:
    return model_dir.name


@pytest.fixture(scope="session")
def transducer_dir(tmp_path_factory):
    """The transducer model directory alone, for the server's transducer-only options."""
    return _model_dir(tmp_path_factory, "transducer")

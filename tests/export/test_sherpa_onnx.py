"""``export_onnx.py --target sherpa-onnx`` runs in sherpa-onnx (2.0.1, its Python API,
recognizers configured from the export's ``sherpa-onnx.json``) and recognises exactly what
our own runtime's greedy search recognises on the default export of the same model: the
same tokens on every utterance, so the same text, for the float32 and the int8 files.

Models (tests/device/families.py's tiny configs, each with a global CMVN of the test audio,
which the graphs carry): a chunk-trained U2++ conformer CTC (offline Zipformer-CTC loader and
online WeNet-CTC loader, whose caches it has as they are), a chunk-trained transformer CTC
(no convolution cache: a padded one is carried), a causal Zipformer CTC (its packed caches
carried flat), a causal Zipformer transducer and a causal conformer transducer (offline and
online transducer loaders). The audio: three utterances of tone and noise segments of
random pitch and level, so the random models' sharpened outputs change along the
utterance (each model's hypotheses are checked to hold several distinct tokens).

Two ways sherpa-onnx differs from our searches by design, which the fixture keeps out of
the equality and ``test_transducer_unk_is_blank_in_sherpa`` pins down:
- its transducer greedy search treats ``<unk>`` as blank (no token, the decoder not
  advanced; ``y != 0 && y != unk_id_`` in online/offline-transducer-greedy-search-decoder.cc),
  while ours emits it;
- it does not stop at ``<sos/eos>`` (ours ends the text there); no CTC or transducer target
  is ever ``<sos/eos>``, so a trained model does not emit it.
The fixture models' output biases of these two units are lowered, as training leaves them.
The int8 files quantise activations with one range per tensor at run time, so in either
runtime an int8 result depends on what else is in the tensor: the other utterances of a
padded batch (and their padding), or, streaming, the other chunks. The comparisons decode
one utterance at a time and run heads per chunk when streaming (the float32 files also
decode padded batches as single utterances, which is checked).
Streaming, sherpa-onnx decodes whole chunks only (the frames after the last whole chunk
wait for more audio); each utterance is cut at a whole chunk for the online comparison.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.device.families import FAMILIES, STATELESS
from tests.tiny_experiment import UNITS, merged, write_experiment
from wenet.bin import export_onnx
from wenet.export.sherpa import check_exportable, sherpa_features
from wenet.models import init_model

sherpa_onnx = pytest.importorskip("sherpa_onnx")
from wenet.export import sherpa_recognizer  # noqa: E402  (needs sherpa_onnx)
from wenet.runtime.fbank import FbankOptions, fbank  # noqa: E402
from wenet.runtime import transducer_search  # noqa: E402
from wenet.runtime.recognizer import OnnxRecognizer, model_tokenizer  # noqa: E402
from wenet.runtime.session import OnnxModel  # noqa: E402

CHUNK, LEFT_CHUNKS = 4, 2
RATE = 16000
SECONDS = (1.0, 1.37, 0.81)
KEYS = [f"utt{i}" for i in range(len(SECONDS))]
UNK, EOS = UNITS.index("<unk>"), UNITS.index("<sos/eos>")
CHUNKED = {"use_dynamic_chunk": True, "use_dynamic_left_chunk": True}
MODELS = {
    "conformer_ctc": FAMILIES["conformer_u2pp_causal"],
    "transformer_ctc": merged(FAMILIES["transformer"], {"encoder_conf": CHUNKED}),
    "zipformer_ctc": FAMILIES["zipformer_causal"],
    "zipformer_transducer": merged(FAMILIES["zipformer_pruned_cr_ctc"],
                                   {"encoder_conf": {"causal": True}}),
    "conformer_transducer": merged(FAMILIES["transducer_fastemit_stateless"],
                                   {"encoder_conf": {"causal": True, **CHUNKED}}),
}


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models on one thread (conftest.one_thread)."""


def write_audio(d: Path, seed: int = 0) -> None:
    """``d/<key>.wav``: segments of 50-200 ms, each a tone of random pitch (100-4000 Hz)
    and level over noise of random level, one in six digital silence (exact zeros: the
    fbank's energy floor)."""
    rng = np.random.default_rng(seed)
    for key, secs in zip(KEYS, SECONDS):
        n, parts = int(RATE * secs), []
        while sum(len(p) for p in parts) < n:
            m = int(RATE * rng.uniform(0.05, 0.2))
            t = np.arange(m) / RATE
            tone = rng.uniform(0.01, 0.5) * np.sin(2 * np.pi * rng.uniform(100, 4000) * t)
            noise = rng.uniform(0.001, 0.1) * rng.standard_normal(m)
            parts.append(np.zeros(m) if rng.uniform() < 1 / 6 else tone + noise)
        sf.write(d / f"{key}.wav", np.concatenate(parts)[:n].astype(np.float32), RATE)


def write_cmvn(d: Path) -> Path:
    """global_cmvn of the test audio's fbank (20 bins)."""
    feats = np.concatenate([fbank(sf.read(d / f"{k}.wav", dtype="float32")[0],
                                  FbankOptions(num_mel_bins=20)) for k in KEYS]).astype(float)
    path = d / "global_cmvn"
    path.write_text(json.dumps({"mean_stat": feats.sum(0).tolist(),
                                "var_stat": (feats ** 2).sum(0).tolist(),
                                "frame_num": len(feats)}))
    return path


class Exported:
    """A model's exp dir, its default export (``ours``) and its sherpa-onnx export."""

    def __init__(self, root: Path, config: Dict, bias: Dict[int, float] = None):
        write_audio(root)
        config = dict(config, cmvn_file=str(write_cmvn(root)))
        self.transducer = "predictor" in config
        self.root, self.ours, self.sherpa = root, root / "ours", root / "sherpa"
        exp = root / "exp"
        sharpening = dict(joint=4.0) if self.transducer else {}
        model = write_experiment(exp, config, checkpoint="avg_1.pt", **sharpening)
        self.center(model.eval())
        # by default, what training does to units that are never (or hardly) targets
        with torch.no_grad():
            out = model.joint.out.bias if self.transducer else model.ctc.ctc_lo.bias
            for unit, change in (bias or {UNK: -30.0, EOS: -30.0}).items():
                out[unit] += change
        torch.save(model.state_dict(), exp / "avg_1.pt")
        common = ["--model_dir", str(exp), "--int8", "--chunk_size", str(CHUNK),
                  "--num_decoding_left_chunks", str(LEFT_CHUNKS)]
        export_onnx.main(common + ["--output_dir", str(self.ours)])
        export_onnx.main(common + ["--output_dir", str(self.sherpa), "--target", "sherpa-onnx"])
        self.mode = "rnnt_greedy_search" if self.transducer else "ctc_greedy_search"

    def center(self, model: torch.nn.Module) -> None:
        """Take the mean over the test audio out of the encoder's projection into the CTC
        head (the joint), and scale it (CTC logits of std 4, the joint's input of std 1): a
        random Zipformer's output varies little around a large constant, which alone
        would pick the same token everywhere."""
        feats = [torch.from_numpy(fbank(self.audio(k), FbankOptions(num_mel_bins=20)))
                 for k in KEYS]
        with torch.no_grad():
            hidden = torch.cat([model.encoder(f[None], torch.tensor([len(f)]), -1, -1)[0][0]
                                for f in feats])
            layer = model.joint.enc_proj if self.transducer else model.ctc.ctc_lo
            out = layer(hidden)
            scale = (1.0 if self.transducer else 4.0) / out.std(0).mean()
            layer.bias.sub_(out.mean(0)).mul_(scale)
            layer.weight.mul_(scale)

    def audio(self, key: str) -> np.ndarray:
        return sf.read(self.root / f"{key}.wav", dtype="float32")[0]

    def ours_ids(self, model: OnnxModel, wav: np.ndarray, streaming: bool = False,
                 **kwargs) -> List[int]:
        """Our runtime's greedy search (see sherpa_recognizer.runtime_greedy_ids)."""
        return sherpa_recognizer.runtime_greedy_ids(model, fbank(wav, model.info.features),
                                                    streaming, **kwargs)


@pytest.fixture(scope="module", params=sorted(MODELS))
def exported(request, tmp_path_factory) -> Exported:
    torch.set_num_threads(1)
    return Exported(tmp_path_factory.mktemp(request.param), MODELS[request.param])


def sherpa_piece(unit: str) -> str:
    """How sherpa-onnx shows a unit: a leading ``▁`` as a space (symbol-table.cc)."""
    return " " + unit[1:] if unit.startswith("\u2581") else unit


def assert_same(ours: Dict[str, List[int]], theirs: Dict[str, tuple], text_of) -> None:
    """Token for token equal on every utterance, and so the text (sherpa-onnx keeps the
    spaces of ``▁`` pieces as they come; ours collapses them), with hypotheses varied
    enough to mean something."""
    for key, ids in ours.items():
        text, tokens = theirs[key]
        assert tokens == [sherpa_piece(UNITS[i]) for i in ids], key
        assert " ".join(text.split()) == text_of(ids), key
    emitted = [i for ids in ours.values() for i in ids]
    assert len(set(emitted)) >= 2 and len(emitted) >= 4, ours


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_offline_recognizer_same_as_runtime(exported, int8):
    e = exported
    model = OnnxModel(str(e.ours), int8=int8)
    text_of = OnnxRecognizer(model, model_tokenizer(model)).text
    recognizer = sherpa_recognizer.offline_recognizer(str(e.sherpa), int8=int8)
    ours = {k: e.ours_ids(model, e.audio(k)) for k in KEYS}
    theirs = {k: sherpa_recognizer.decode_offline(recognizer, e.audio(k), RATE) for k in KEYS}
    assert_same(ours, theirs, text_of)
    if not int8:  # padded batches decode as single utterances (int8: see the docstring)
        batch = sherpa_recognizer.decode_offline_batch(recognizer,
                                                       [(e.audio(k), RATE) for k in KEYS])
        assert batch == [theirs[k] for k in KEYS]


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_online_recognizer_same_as_runtime(exported, int8):
    """Every model here is a streaming one: sherpa-onnx's online recognizer against our
    runtime's chunk-by-chunk encoding (the export's chunk size and left chunks), on each
    utterance followed by silence up to a whole chunk (sherpa-onnx leaves a partial last
    chunk undecoded)."""
    e = exported
    model = OnnxModel(str(e.ours), int8=int8, streaming=True)
    window = model.chunks.window
    text_of = OnnxRecognizer(model, model_tokenizer(model)).text
    recognizer = sherpa_recognizer.online_recognizer(str(e.sherpa), int8=int8)
    ours, theirs = {}, {}
    for key in KEYS:
        wav = sherpa_recognizer.whole_chunks(e.audio(key), window)
        frames = 1 + (len(wav) - 400) // 160  # sherpa-onnx runs (frames - 1) // stride
        starts = window.starts(frames, model.info.min_input_frames)
        assert len(starts) == (frames - window.window - 1) // window.stride + 1
        ours[key] = e.ours_ids(model, wav, streaming=True)
        theirs[key] = sherpa_recognizer.decode_online(recognizer, wav, RATE)
    assert_same(ours, theirs, text_of)
    if not int8:
        check_several_streams(recognizer, [sherpa_recognizer.whole_chunks(e.audio(k), window)
                                           for k in KEYS], [theirs[k] for k in KEYS],
                              e.transducer)


def check_several_streams(recognizer, utterances: List[np.ndarray], expected: List[tuple],
                          transducer: bool) -> None:
    """``decode_streams`` on several streams at once: the WeNet-CTC loader decodes them
    one by one (its model says it takes no batches), the same results; the transducer
    loader stacks them into one batch, which the streaming graph (one utterance, fixed
    shapes) refuses with an error, never a wrong result."""
    streams = []
    for wav in utterances:
        streams.append(recognizer.create_stream())
        streams[-1].accept_waveform(RATE, wav)
        streams[-1].input_finished()
    if transducer:
        with pytest.raises(RuntimeError, match="invalid dimensions for input: x"):
            recognizer.decode_streams(streams)
        return
    while any(recognizer.is_ready(s) for s in streams):
        recognizer.decode_streams([s for s in streams if recognizer.is_ready(s)])
    results = [recognizer.get_result_all(s) for s in streams]
    assert [(r.text, list(r.tokens)) for r in results] == expected


def test_manifest_and_metadata(exported):
    e = exported
    manifest = sherpa_recognizer.read_manifest(str(e.sherpa))
    assert manifest["features"] == {"sampling_rate": 16000, "feature_dim": 20,
                                    "low_freq": 20.0, "high_freq": 0.0, "dither": 0.0,
                                    "snip_edges": True}
    # each loader's default sample scale (what sherpa-onnx's other bindings give it)
    assert manifest["offline"]["normalize_samples"] is True
    assert manifest["online"]["normalize_samples"] is e.transducer  # wenet_ctc: False
    assert (e.sherpa / "tokens.txt").read_text() == (e.ours / "units.txt").read_text()
    onnx = pytest.importorskip("onnx")
    files = ({"encoder", "decoder", "joiner", "encoder-streaming"} if e.transducer
             else {"model", "model-streaming"})
    assert {p.name for p in e.sherpa.glob("*.onnx")} == \
        {f"{f}.onnx" for f in files} | {f"{f}.int8.onnx" for f in files}

    def meta(name):
        return {p.key: p.value for p in onnx.load(str(e.sherpa / name)).metadata_props}

    if e.transducer:
        assert meta("decoder.onnx")["context_size"] == "2"
        assert meta("encoder-streaming.onnx")["model_type"] == "conformer"
        assert manifest["online"]["loader"] == "transducer"
    else:
        assert meta("model.onnx")["model_type"] == "zipformer2_ctc"
        online = meta("model-streaming.onnx")
        assert online["model_type"] == "wenet_ctc"
        assert (online["chunk_size"], online["left_chunks"]) == (str(CHUNK), str(LEFT_CHUNKS))
        assert manifest["online"] == {"loader": "wenet_ctc", "model": "model-streaming.onnx",
                                      "chunk_size": CHUNK, "num_left_chunks": LEFT_CHUNKS,
                                      "normalize_samples": False}


def test_full_context_model(tmp_path):
    """A model not trained on chunks (U2++ without dynamic chunks) gets the offline model
    only, which decodes as our runtime does; asking for a streaming recognizer is an
    error naming the dir."""
    e = Exported(tmp_path, FAMILIES["conformer_u2pp"])
    assert {p.name for p in e.sherpa.glob("*.onnx")} == {"model.onnx", "model.int8.onnx"}
    assert "online" not in sherpa_recognizer.read_manifest(str(e.sherpa))
    with pytest.raises(ValueError, match="no streaming files"):
        sherpa_recognizer.online_recognizer(str(e.sherpa))
    model = OnnxModel(str(e.ours))
    recognizer = sherpa_recognizer.offline_recognizer(str(e.sherpa))
    assert_same({k: e.ours_ids(model, e.audio(k)) for k in KEYS},
                {k: sherpa_recognizer.decode_offline(recognizer, e.audio(k), RATE)
                 for k in KEYS}, OnnxRecognizer(model, model_tokenizer(model)).text)


def test_transducer_unk_is_blank_in_sherpa(tmp_path):
    """The one difference of sherpa-onnx's transducer greedy search from ours: ``<unk>``
    counts as a blank there (not emitted, the decoder not advanced). With ``<unk>`` made
    likely, sherpa-onnx's tokens are exactly our runtime's greedy search that reads
    ``<unk>`` as a one-frame blank, and differ from our plain greedy search."""
    e = Exported(tmp_path, MODELS["conformer_transducer"], bias={UNK: 2.0, EOS: -30.0})
    model = OnnxModel(str(e.ours))
    recognizer = sherpa_recognizer.offline_recognizer(str(e.sherpa))
    plain, unk_blank, theirs = [], [], []
    for key in KEYS:
        out, lens = model.encode([fbank(e.audio(key), model.info.features)])
        plain.append(transducer_search.rnnt_greedy_search(model.transducer(), out, lens)[0])
        unk_blank.append(e.ours_ids(model, e.audio(key), unk_as_blank=UNK))
        theirs.append(sherpa_recognizer.decode_offline(recognizer, e.audio(key), RATE)[1])
    assert theirs == [[sherpa_piece(UNITS[i]) for i in ids] for ids in unk_blank]
    assert any(UNK in ids for ids in plain) and plain != unk_blank


@pytest.mark.parametrize("family, message", [
    (FAMILIES["transducer_full"], "LSTM predictor"),
    (merged(FAMILIES["transducer_multi_blank"], STATELESS), "multi-blank"),
], ids=["lstm", "multi_blank"])
def test_refused_without_a_sherpa_loader(family, message):
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=message):
        check_exportable(init_model(family))


def test_refused_frame_sizes():
    config = merged(FAMILIES["conformer_u2pp"],
                    {"dataset_conf": {"fbank_conf": {"frame_length": 32}}})
    with pytest.raises(ValueError, match="frame_length 32 ms"):
        sherpa_features(config)


def test_one_target_per_output_dir(tmp_path):
    (tmp_path / "units.txt").write_text("<blank> 0\n")
    with pytest.raises(ValueError, match="another target's export"):
        export_onnx.check_output_dir(str(tmp_path), "sherpa-onnx")
    (tmp_path / "sherpa-onnx.json").write_text("{}")
    with pytest.raises(ValueError, match="another target's export"):
        export_onnx.check_output_dir(str(tmp_path), "wenet")


def test_int16_range_fbank_restores_the_int16_scale_and_places_floored_bins():
    """Hand-computed: a bin above the floor gains 30 ln 2; a bin sherpa-onnx floored in a
    frame with sound goes to ln 128 (= floor + 30 ln 2, the top of the range it lost); a
    frame floored in every bin (digital silence) stays at our floor, as our fbank has it."""
    from wenet.dataset.fbank import SILENCE_LOG_MEL
    from wenet.export.sherpa_graphs import int16_range_fbank

    floor = float(np.log(np.finfo(np.float32).eps))
    assert SILENCE_LOG_MEL == pytest.approx(floor)
    x = torch.tensor([[[-3.0, floor, 1.5], [floor, floor, floor]]])
    gain = 30 * np.log(2.0)
    expected = [[[-3.0 + gain, np.log(128.0), 1.5 + gain], [floor, floor, floor]]]
    assert torch.allclose(int16_range_fbank(x), torch.tensor(expected, dtype=torch.float32),
                          atol=1e-5)

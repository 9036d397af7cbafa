"""``python -m wenet.runtime --streaming``: each utterance encoded chunk by chunk with
``encoder_chunk.onnx`` gives recognize.py --simulate_streaming's text with the export's
chunk size and left chunks, every supported mode, for a streaming U2++ conformer, a
causal Zipformer and a chunk-trained transducer (tiny random models); also with torch
made unimportable. A model without encoder_chunk.onnx is refused by name."""
import pytest

from tests.runtime.test_end_to_end import CTC_MODES, KEYS, RNNT_MODES, _no_torch_run, _runtime
from tests.serve.conftest import UNITS, model_config
from tests.tiny_experiment import read_hyps, write_experiment, write_tones, write_wav_scp
from wenet.bin.export_onnx import main as export_main
from wenet.bin.recognize import main as recognize_main

pytest.importorskip("onnx")

CHUNK, LEFT = 4, 2
MODES = {"u2pp": CTC_MODES, "zipformer": CTC_MODES, "transducer": RNNT_MODES}
SHARPEN = {"u2pp": dict(ctc=6.0, ctc_blank=1.0), "zipformer": dict(ctc=6.0, ctc_blank=1.0),
           "transducer": dict(joint=4.0, joint_blank=2.0)}


@pytest.fixture(scope="module")
def streaming_exp(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime_streaming")
    wavs = root / "wav"
    wavs.mkdir()
    write_tones(wavs, KEYS, [1.1, 0.5, 0.8, 0.35, 1.9, 0.6])
    write_wav_scp(root / "wav.scp", wavs, KEYS)
    dirs = {}
    for kind in MODES:
        d = root / kind
        write_experiment(d, model_config(kind), "avg_1.pt", units=UNITS, **SHARPEN[kind])
        export_main(["--config", str(d / "train.yaml"), "--checkpoint", str(d / "avg_1.pt"),
                     "--output_dir", str(d / "onnx"), "--units", str(d / "units.txt"),
                     "--chunk_size", str(CHUNK), "--num_decoding_left_chunks", str(LEFT)])
        dirs[kind] = d
    return root, dirs


def _simulate_streaming(d, scp, modes, out):
    rc = recognize_main(["--config", str(d / "train.yaml"), "--checkpoint", str(d / "avg_1.pt"),
                         "--dict", str(d / "units.txt"), "--test_data", str(scp),
                         "--data_type", "scp", "--modes", " ".join(modes),
                         "--result_dir", str(out), "--batch_size", "1", "--simulate_streaming",
                         "--decoding_chunk_size", str(CHUNK),
                         "--num_decoding_left_chunks", str(LEFT)])
    assert rc == 0
    return {m: read_hyps(out / m / "text") for m in modes}


@pytest.mark.parametrize("kind", list(MODES))
def test_streaming_runtime_equals_simulate_streaming(streaming_exp, tmp_path, capsys, kind):
    root, dirs = streaming_exp
    scp = root / "wav.scp"
    ref = _simulate_streaming(dirs[kind], scp, MODES[kind], tmp_path / "ref")
    for mode in MODES[kind]:
        rc, ours, _ = _runtime(capsys, dirs[kind], scp, mode, "--streaming")
        assert rc == 0
        assert ours == ref[mode], mode
    assert any(text for text in ref[MODES[kind][0]].values())


@pytest.mark.parametrize("kind", list(MODES))
def test_chunk_by_chunk_encoding_equals_the_eager_encoder(streaming_exp, kind):
    """encode_chunk_by_chunk (fixed-size caches, masked until full) equals the eager
    encoder's forward_chunk_by_chunk with the same chunk size and left chunks, and is not
    the full-context output for the U2++ model (so the text equalities above test the
    chunked path; the tiny random Zipformer's and transducer's differ from it by < 3e-4)."""
    import torch
    from wenet.inference.loader import load_model_dir
    from wenet.runtime.audio import features
    from wenet.runtime.session import OnnxModel
    root, dirs = streaming_exp
    onnx = OnnxModel(str(dirs[kind] / "onnx"), streaming=True)
    model = load_model_dir(str(dirs[kind]), checkpoint=str(dirs[kind] / "avg_1.pt")).model
    feats = features(str(root / "wav" / "u4.wav"), onnx.info.features,
                     onnx.info.min_input_frames)
    ours = onnx.encode_chunk_by_chunk(feats)
    with torch.no_grad():
        xs = torch.from_numpy(feats)[None]
        ref = model.encoder.forward_chunk_by_chunk(xs, CHUNK, LEFT)[0].numpy()
    assert ours.shape == ref.shape and ours.shape[1] > CHUNK * LEFT  # the cache fills up
    assert abs(ours - ref).max() <= 1e-4 * max(1.0, abs(ref).max())
    if kind == "u2pp":  # the other tiny random models' chunked output is close to the
        full = onnx.encode([feats])[0]  # full-context one (within 3e-4)
        assert abs(full - ours).max() > 10 * 1e-4 * max(1.0, abs(ref).max())


def test_streaming_runtime_without_torch(streaming_exp, tmp_path):
    root, dirs = streaming_exp
    scp = root / "wav.scp"
    proc = _no_torch_run(["--onnx_dir", str(dirs["zipformer"] / "onnx"), "--streaming",
                          "--mode", "attention_rescoring", "--wav_scp", str(scp)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "TORCH_LOADED=False" in proc.stderr
    ours = dict(line.split(" ", 1) if " " in line else (line, "")
                for line in proc.stdout.splitlines())
    ref = _simulate_streaming(dirs["zipformer"], scp, ["attention_rescoring"], tmp_path / "ref")
    assert ours == ref["attention_rescoring"]


def test_streaming_needs_encoder_chunk(streaming_exp, capsys, caplog):
    root, dirs = streaming_exp
    d = dirs["u2pp"]
    (d / "onnx" / "encoder_chunk.onnx").rename(d / "encoder_chunk.onnx")
    try:
        rc, ours, log = _runtime(capsys, d, root / "wav.scp", "ctc_greedy_search",
                                 "--streaming", caplog=caplog)
    finally:
        (d / "encoder_chunk.onnx").rename(d / "onnx" / "encoder_chunk.onnx")
    assert rc == 1 and not ours
    assert "has no encoder_chunk.onnx" in log

"""The runtime loses no input and decodes nothing silently wrong (issue 57): long audio is
cut as transcribe.py cuts it, so the encoder never sees more than ``--max_segment_s``;
an input whose decoding fails (MemoryError...) is skipped by key and counted, the inputs
after it are decoded; Kaldi pipes run only with ``--allow_pipes``; the ONNX files of a
directory must come from one export; a WAV cut short is refused by name."""
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import soundfile as sf

from tests.runtime.test_end_to_end import KEYS, _experiment, _runtime
from tests.tiny_experiment import tiny_config, write_tones, write_wav_scp
from wenet.inference.segments import SegmentConf, file_blocks, split_stream
from wenet.runtime.session import OnnxModel

RATE = 16000


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime_reliability")
    wavs = root / "wav"
    wavs.mkdir()
    write_tones(wavs, KEYS, [1.1, 0.5, 0.8, 0.35, 1.4, 0.6])
    write_wav_scp(root / "wav.scp", wavs, KEYS)
    att = _experiment(root, "att", tiny_config(), ctc=3.0, ctc_blank=2.0, eos=2.0)
    return {"root": root, "wavs": wavs, "att": att}


def _long_recording(path: Path) -> None:
    """Five tones of 1.2 s with 0.7 s of quiet noise between them (8.3 s), float32."""
    rng = np.random.default_rng(5)
    parts = []
    for i in range(5):
        t = np.arange(int(1.2 * RATE)) / RATE
        parts.append(0.3 * np.sin(2 * np.pi * (250 + 120 * i) * t)
                     + 0.05 * rng.standard_normal(t.size))
        parts.append(0.002 * rng.standard_normal(int(0.7 * RATE)))
    sf.write(path, np.concatenate(parts[:-1]).astype(np.float32), RATE, subtype="FLOAT")


def test_long_audio_is_decoded_in_the_segments_transcribe_cuts(exp, tmp_path, capsys,
                                                              monkeypatch):
    """Each segment of transcribe.py's cut (segments.split_stream, --max_segment_s 2),
    decoded as a file of its own, gives the long file's text; the encoder never gets
    more than 2 s of frames."""
    long_wav = tmp_path / "long.wav"
    _long_recording(long_wav)
    rate, _, blocks = file_blocks(str(long_wav), 0.5)
    segments = list(split_stream(blocks, rate, SegmentConf.for_max_segment(2.0)))
    assert len(segments) >= 4
    seg_keys = [f"s{i}" for i in range(len(segments))]
    for key, seg in zip(seg_keys, segments):
        sf.write(tmp_path / f"{key}.wav", seg.samples, rate, subtype="FLOAT")
    _, seg_texts, _ = _runtime(capsys, exp["att"], write_wav_scp(tmp_path / "seg.scp", tmp_path,
                                                                seg_keys), "attention_rescoring")
    longest = []
    encode = OnnxModel.encode
    monkeypatch.setattr(OnnxModel, "encode", lambda self, feats: (
        longest.append(max(f.shape[0] for f in feats)), encode(self, feats))[1])
    wavs = exp["wavs"]
    (tmp_path / "long.scp").write_text(f"u0 {wavs}/u0.wav\nlong {long_wav}\nu1 {wavs}/u1.wav\n")
    rc, ours, _ = _runtime(capsys, exp["att"], tmp_path / "long.scp", "attention_rescoring",
                           "--max_segment_s", "2")
    assert rc == 0 and list(ours) == ["u0", "long", "u1"]  # input order
    assert ours["long"] == " ".join(t for t in seg_texts.values() if t)
    assert any(seg_texts.values())
    assert max(longest) <= 198  # fbank frames of 2 s (25 ms windows every 10 ms)


def test_an_input_that_fails_to_decode_loses_no_other(exp, tmp_path, capsys, caplog,
                                                     monkeypatch):
    """u4 (the longest) runs out of memory in the encoder: it is named and counted, u5 in
    its batch and every input after it are decoded as without it, exit 1."""
    scp = exp["root"] / "wav.scp"
    rc, ref, _ = _runtime(capsys, exp["att"], scp, "attention_rescoring")
    assert rc == 0 and list(ref) == KEYS
    encode = OnnxModel.encode

    def short_only(self, feats):
        if max(f.shape[0] for f in feats) > 130:  # u4: 1.4 s, 138 frames
            raise MemoryError()
        return encode(self, feats)
    monkeypatch.setattr(OnnxModel, "encode", short_only)
    rc, ours, err = _runtime(capsys, exp["att"], scp, "attention_rescoring", caplog=caplog)
    assert rc == 1
    assert ours == {k: v for k, v in ref.items() if k != "u4"}
    assert list(ours) == [k for k in KEYS if k != "u4"]
    assert "1 of 6 inputs gave no result" in err and "u4" in err and "MemoryError" in err


def test_pipes_run_only_with_allow_pipes(exp, tmp_path, capsys, caplog):
    wav = exp["wavs"] / "u0.wav"
    marker = tmp_path / "ran"
    scp = tmp_path / "wav.scp"
    scp.write_text(f"u0 {wav}\np1 cat {wav} |\np2 touch {marker}; cat {wav} |\n")
    rc, ours, err = _runtime(capsys, exp["att"], scp, "ctc_greedy_search", caplog=caplog)
    assert rc == 1 and ours == {} and not marker.exists()
    assert "p1" in err and "p2" in err and "--allow_pipes" in err
    rc, ours, _ = _runtime(capsys, exp["att"], scp, "ctc_greedy_search", "--allow_pipes")
    assert rc == 0 and marker.exists()
    assert ours["p1"] == ours["p2"] == ours["u0"]


def _set_metadata(path: Path, **values: str) -> None:
    model = onnx.load(str(path))
    for prop in model.metadata_props:
        if prop.key in values:
            prop.value = values[prop.key]
    onnx.save(model, str(path))


def test_onnx_files_of_two_exports_are_refused_by_name(exp, tmp_path):
    src = exp["att"] / "onnx"
    other = _experiment(tmp_path, "other", tiny_config(), ctc=5.0)  # same shapes, other weights
    for name, change, what in [
            ("ctc.onnx", lambda p: _set_metadata(p, vocab_size="9"), "vocab_size 9"),
            ("ctc.onnx", lambda p: _set_metadata(p, blank_id="3"), "blank_id 3"),
            ("encoder.onnx", lambda p: shutil.copy(other / "onnx" / "encoder.onnx", p),
             "export_id"),
            ("decoder.onnx", lambda p: shutil.copy(other / "onnx" / "decoder.onnx", p),
             "export_id")]:
        d = tmp_path / "mixed"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        change(d / name)
        with pytest.raises(ValueError) as e:
            OnnxModel(str(d))
        assert str(d / name) in str(e.value) and what in str(e.value), str(e.value)
        others = {"encoder.onnx", "ctc.onnx", "decoder.onnx"} - {name}
        assert any(str(d / o) in str(e.value) for o in others), str(e.value)
    OnnxModel(str(src))  # the export itself loads


def test_a_truncated_wav_is_skipped_by_name(exp, tmp_path, capsys, caplog):
    data = (exp["wavs"] / "u4.wav").read_bytes()
    (tmp_path / "cut.wav").write_bytes(data[:len(data) // 2])
    scp = tmp_path / "wav.scp"
    good = (exp["root"] / "wav.scp").read_text()
    scp.write_text(f"cut {tmp_path}/cut.wav\n" + good)
    rc, ours, err = _runtime(capsys, exp["att"], scp, "ctc_greedy_search", caplog=caplog)
    assert rc == 1 and list(ours) == KEYS
    assert f"{tmp_path}/cut.wav: truncated WAV" in err and "1 of 7 inputs gave no result" in err


def test_the_long_audio_bench_counts_word_errors_as_compute_wer():
    """bench/runtime_long_audio.py's row-by-row edit distance (for 10,000-word
    recordings) equals compute-wer.py's alignment on random word sequences."""
    from bench.runtime_long_audio import word_errors
    from wenet.eval.wer import align
    rng = np.random.default_rng(0)
    for _ in range(200):
        ref = [str(w) for w in rng.integers(0, 4, rng.integers(0, 12))]
        hyp = [str(w) for w in rng.integers(0, 4, rng.integers(0, 12))]
        counts, _ = align(ref, hyp)
        assert word_errors(ref, hyp) == counts.s + counts.d + counts.i, (ref, hyp)

"""Inputs that give no result (issue 35): a clip shorter than the model's minimum, an empty
file, a file that is not audio, a missing file. They are refused with the file and the
reason, the other inputs decode exactly as they do alone, and the exit status says so
(``wenet.dataset.stats.exit_status``); the API raises one documented exception each."""
import json
import logging

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.tiny_experiment import read_hyps, tiny_config, write_experiment, write_tones
from tests.zipformer.test_encoder import TINY
from wenet.bin.alignment import main as alignment_main
from wenet.bin.recognize import main as recognize_main
from wenet.bin.transcribe import main as transcribe_main
from wenet.dataset.stats import exit_status
from wenet.inference.loader import load_model_dir, min_input_frames
from wenet.inference.recognizer import AudioInputError, Recognizer
from wenet.models import init_model

GOOD = ["g0", "g1", "g2", "g3"]
MIN_S = 0.085  # conv2d front end: 7 frames = 25 ms + 6 x 10 ms


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("failures")
    write_tones(d, GOOD, [0.6, 0.3, 0.45, 0.7])
    write_experiment(d, tiny_config(), "avg_2.pt", jit=True, ctc=8.0, eos=1.0)
    rng = np.random.default_rng(1)
    sf.write(d / "short.wav", (0.1 * rng.standard_normal(800)).astype(np.float32), 16000)
    (d / "empty.wav").write_bytes(b"")
    (d / "notes.wav").write_bytes(b"these are notes, not audio\n" * 20)
    return d


def _wav(d, key):
    return str(d / f"{key}.wav")


def _transcribe(d, out, keys, *extra):
    rc = transcribe_main(["--model_dir", str(d), "--beam_size", "3", "--output", str(out),
                          *extra, *[_wav(d, k) for k in keys]])
    return rc, out.read_text()


def _front_end_minimum(model, frames_range=range(1, 40)):
    """Reference: the fewest input frames the encoder turns into one output frame, found
    by running the encoder with its own length check switched off."""
    encoder = model.encoder
    for n in frames_range:
        try:
            with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
                mp.setattr(encoder, "check_input_frames", lambda num: None)
                out, mask = encoder(torch.randn(1, n, 20), torch.tensor([n]), -1, -1)
        except (RuntimeError, ValueError):  # a convolution longer than its input
            continue
        if out.size(1) > 0 and int(mask.sum()) > 0:
            return n
    raise AssertionError("no input length gives an output frame")


@pytest.mark.parametrize("encoder_conf", [{"input_layer": "conv2d"},
                                          {"input_layer": "conv2d6"},
                                          {"input_layer": "conv2d8"}, "zipformer"])
def test_min_input_frames_is_the_shortest_input_with_an_output_frame(encoder_conf):
    if encoder_conf == "zipformer":
        config = tiny_config({"encoder": "zipformer", "decoder": "transformer",
                              "decoder_conf": {"r_num_blocks": None},
                              "model_conf": {"reverse_weight": None}})
        config["encoder_conf"] = dict(TINY)
    else:
        config = tiny_config({"encoder_conf": encoder_conf})
    torch.manual_seed(0)
    model = init_model(config).eval()
    assert min_input_frames(model) == _front_end_minimum(model)


def test_a_short_clip_among_good_files(model_dir, tmp_path, caplog):
    """The acceptance case: the good files' text, byte for byte what they give alone (in
    any batching), and a clear error naming the clip; exit 1, 0 with --keep_going."""
    d = model_dir
    rc, alone = _transcribe(d, tmp_path / "alone", GOOD, "--batch_size", "2")
    assert rc == 0 and sorted(read_hyps(tmp_path / "alone")) == GOOD
    mixed = ["g0", "short", "g1", "g2", "g3"]
    for batch_size, extra, status in (("1", [], 1), ("3", ["--keep_going"], 0)):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            rc, text = _transcribe(d, tmp_path / f"mixed{batch_size}", mixed,
                                   "--batch_size", batch_size, *extra)
        assert rc == status
        assert text == alone
        errors = "\n".join(r.getMessage() for r in caplog.records)
        assert (f"short ({_wav(d, 'short')}): 0.05 s (3 feature frames) is shorter than the "
                f"model's minimum {MIN_S} s (7 frames)") in errors


def test_unreadable_files_are_named_with_the_reason(model_dir, tmp_path, caplog):
    d = model_dir
    with caplog.at_level(logging.WARNING):
        rc, text = _transcribe(d, tmp_path / "t", ["empty", "g0", "notes"], "--keep_going")
    assert rc == 0 and [line.split()[0] for line in text.splitlines()] == ["g0"]
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert f"empty ({_wav(d, 'empty')}): cannot decode audio {_wav(d, 'empty')}: empty file " \
           "(0 bytes)" in log
    assert f"notes ({_wav(d, 'notes')}): cannot decode audio {_wav(d, 'notes')}: not audio: " \
           "Format not recognised." in log
    assert "BytesIO" not in log
    rc, text = _transcribe(d, tmp_path / "none", ["empty", "short"], "--keep_going")
    assert rc == 1 and text == ""  # nothing transcribed: 1 even with --keep_going


def test_exit_status_rule():
    # (done, failed, keep_going) -> status, as docs/interfaces.md states it
    table = {(3, 0, False): 0, (3, 0, True): 0, (3, 1, False): 1, (3, 1, True): 0,
             (0, 0, False): 1, (0, 0, True): 1, (0, 2, False): 1, (0, 2, True): 1}
    assert {k: exit_status(*k) for k in table} == table


def test_json_rounds_seconds_and_scores(model_dir, tmp_path):
    d = model_dir
    rc, text = _transcribe(d, tmp_path / "j", ["g1", "g3"], "--format", "json", "--timestamps",
                           "--nbest", "2")
    assert rc == 0
    rows = {r["key"]: r for r in map(json.loads, text.splitlines())}
    # 0.3 s: 1 + (4800 - 400) // 160 = 28 frames of 10 ms; 0.7 s: 68 frames
    assert rows["g1"]["duration"] == 0.28 and rows["g3"]["duration"] == 0.68
    assert '"duration": 0.28,' in text or '"duration": 0.28}' in text
    numbers = [(k, v) for r in rows.values() for k, v in _floats(r)]
    assert numbers
    for key, value in numbers:
        decimals = 3 if key in ("duration", "start", "end", "start_s", "end_s") else 4
        assert value == round(value, decimals), (key, value)


def _floats(obj, key=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _floats(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from _floats(v, key)
    elif isinstance(obj, float):
        yield key, obj


def test_api_raises_one_documented_exception(model_dir):
    d = model_dir
    asr = Recognizer(load_model_dir(str(d)), batch_size=2)
    with pytest.raises(FileNotFoundError, match="nowhere.wav"):
        asr.transcribe([_wav(d, "g0"), str(d / "nowhere.wav")])
    expected = asr.transcribe([_wav(d, k) for k in GOOD])
    assert asr.last_failures == []
    with pytest.raises(AudioInputError) as caught:
        asr.transcribe([_wav(d, k) for k in ["empty", "g0", "g1", "short", "g2", "notes", "g3"]])
    err = caught.value
    assert isinstance(err, ValueError)
    assert [(f.key, f.source) for f in err.failures] == [
        ("empty", _wav(d, "empty")), ("short", _wav(d, "short")), ("notes", _wav(d, "notes"))]
    reasons = [f.reason for f in err.failures]
    assert reasons[0].endswith("empty file (0 bytes)")
    assert reasons[1] == f"0.05 s (3 feature frames) is shorter than the model's minimum " \
                         f"{MIN_S} s (7 frames)"
    assert reasons[2].endswith("not audio: Format not recognised.")
    assert err.results == expected  # the good inputs' results ride on the exception
    # iter_results keeps going and records the failures instead
    got = list(asr.iter_results([("s", _wav(d, "short")), ("g", _wav(d, "g0"))]))
    assert [r.text for r in got] == [expected[0].text]
    assert [f.key for f in asr.last_failures] == ["s"]


def test_recognize_leaves_a_short_utterance_out_and_says_so(model_dir, tmp_path):
    d = model_dir
    outs = {}
    for name, keys, extra in (("alone", GOOD, []),
                              ("mixed", ["g0", "g1", "short", "g2", "g3"], []),
                              ("mixed", ["g0", "g1", "short", "g2", "g3"], ["--keep_going"]),
                              ("unreadable", GOOD + ["notes"], [])):
        data = tmp_path / f"{name}.list"
        data.write_text("".join(json.dumps({"key": k, "wav": _wav(d, k)}) + "\n" for k in keys))
        out = tmp_path / f"{name}{len(extra)}"
        rc = recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(data),
                             "--checkpoint", str(d / "avg_2.pt"), "--dict", str(d / "units.txt"),
                             "--batch_size", "3", "--modes", "ctc_greedy_search",
                             "--result_dir", str(out), *extra])
        outs[name, len(extra)] = (rc, read_hyps(out / "ctc_greedy_search" / "text"))
    assert outs["alone", 0][0] == 0
    assert outs["mixed", 0] == (1, outs["alone", 0][1])
    assert outs["mixed", 1] == (0, outs["alone", 0][1])
    assert outs["unreadable", 0] == (1, outs["alone", 0][1])  # the data pipeline's skip


def test_alignment_exit_status(model_dir, tmp_path):
    d = model_dir
    data = tmp_path / "data.list"
    data.write_text("".join(json.dumps({"key": k, "wav": _wav(d, k), "txt": "ab"}) + "\n"
                            for k in ["g0", "short", "g3"]))

    def align(*extra):
        return alignment_main(["--config", str(d / "train.yaml"), "--checkpoint",
                               str(d / "avg_2.pt"), "--input_file", str(data), "--dict",
                               str(d / "units.txt"), "--result_file",
                               str(tmp_path / "words"), *extra])
    assert align() == 1
    assert (tmp_path / "words.failed").read_text().startswith("short too few frames")
    assert align("--keep_going") == 0
    assert sorted({line.split()[0] for line in (tmp_path / "words").read_text().splitlines()}) \
        == ["g0", "g3"]


def test_no_audio_among_the_inputs_is_an_error(tmp_path, caplog):
    (tmp_path / "notes.txt").write_text("")  # an empty list file: no audio
    (tmp_path / "audio").mkdir()             # a directory without audio files
    with caplog.at_level(logging.ERROR):
        rc = transcribe_main(["--model_dir", str(tmp_path), str(tmp_path / "notes.txt"),
                              str(tmp_path / "audio")])
    assert rc == 1
    assert f"no audio among the inputs: {tmp_path / 'notes.txt'} {tmp_path / 'audio'}" in \
        caplog.text

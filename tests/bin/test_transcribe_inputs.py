"""Input keys and sources that transcribe.py and the Python API must not get wrong (issue
57): two inputs with one key are refused before decoding (the API too) and results come
in input order; a key from a file name has its spaces replaced by ``_`` (logged), so
``key text`` and CTM lines stay parseable; ``--srt DIR`` refuses keys that would not
name a file inside DIR before decoding; Kaldi pipes run from a wav.scp given to the
CLI, from the API only with ``allow_pipes=True``."""
import logging
import shutil

import pytest

import wenet
from tests.tiny_experiment import tiny_config, write_experiment, write_tones
from wenet.bin.transcribe import main as transcribe_main
from wenet.inference.recognizer import audio_items
from wenet.runtime.audio import audio_inputs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    write_tones(d, ["a", "b", "c"], [0.6, 0.9, 0.45])
    write_experiment(d, tiny_config(), "avg_2.pt", jit=True, ctc=8.0, eos=1.0)
    return d


@pytest.fixture(scope="module")
def asr(model_dir):
    return wenet.load_model(str(model_dir))


def _texts(results):
    return [(r.key, r.text) for r in results]


def test_api_refuses_two_inputs_with_one_key_and_keeps_input_order(model_dir, asr, tmp_path):
    for sub, src in (("c1", "a"), ("c2", "b")):
        (tmp_path / sub).mkdir()
        shutil.copy(model_dir / f"{src}.wav", tmp_path / sub / "same.wav")
    c1, c2 = str(tmp_path / "c1" / "same.wav"), str(tmp_path / "c2" / "same.wav")
    with pytest.raises(ValueError) as e:
        asr.transcribe([c2, c1])
    assert str(e.value).startswith(f"two inputs have the key 'same': {c2} and {c1}")
    alone = {k: asr.transcribe(str(model_dir / f"{k}.wav"))[0].text for k in "abc"}
    got = asr.transcribe([c2, c1, str(model_dir / "c.wav")], keys=["two", "one", "c"])
    assert _texts(got) == [("two", alone["b"]), ("one", alone["a"]), ("c", alone["c"])]
    assert any(alone.values())


def test_keys_from_file_names_have_no_spaces(model_dir, tmp_path, caplog):
    spaced = tmp_path / "my  clip.wav"
    shutil.copy(model_dir / "a.wav", spaced)
    caplog.set_level(logging.INFO)
    assert audio_inputs([str(spaced)]) == [("my_clip", str(spaced))]
    assert audio_items([str(spaced)]) == [("my_clip", str(spaced))]
    assert "key my_clip" in caplog.text and "my  clip.wav" in caplog.text
    shutil.copy(model_dir / "a.wav", tmp_path / "my_clip.wav")
    with pytest.raises(ValueError, match="two inputs have the key 'my_clip'"):
        audio_inputs([str(spaced), str(tmp_path / "my_clip.wav")])
    with pytest.raises(ValueError, match="key 'x y' has whitespace"):
        audio_items([str(spaced)], keys=["x y"])
    out, ctm = tmp_path / "out.txt", tmp_path / "out.ctm"
    assert transcribe_main(["--model_dir", str(model_dir), "--output", str(out), "--ctm",
                            str(ctm), str(spaced)]) == 0
    assert out.read_text().split(" ", 1)[0] == "my_clip"
    lines = ctm.read_text().splitlines()
    assert lines and all(len(line.split()) == 6 and line.split()[0] == "my_clip"
                         for line in lines)


@pytest.mark.parametrize("key", ["../escaped", "sub/x", ".."])
def test_srt_refuses_keys_that_name_no_file_in_dir_before_decoding(model_dir, tmp_path,
                                                                  caplog, key):
    scp = tmp_path / "wav.scp"
    scp.write_text(f"a {model_dir}/a.wav\n{key} {model_dir}/b.wav\n")
    srt, out = tmp_path / "sub" / "srt", tmp_path / "out.txt"
    rc = transcribe_main(["--model_dir", str(model_dir), "--output", str(out), "--srt",
                          str(srt), str(scp)])
    assert rc == 1
    assert f"--srt: the key '{key}' cannot name a file in {srt}" in caplog.text
    assert not out.exists()  # refused before decoding
    assert sorted(p.name for p in tmp_path.rglob("*.srt")) == []


def test_pipes_run_from_the_api_only_when_allowed(model_dir, asr, tmp_path):
    wav = model_dir / "a.wav"
    marker = tmp_path / "ran"
    pipe = f"touch {marker}; cat {wav} |"
    with pytest.raises(ValueError) as e:
        asr.transcribe(pipe)
    assert "allow_pipes=True" in str(e.value) and pipe in str(e.value)
    assert not marker.exists()
    allowed = wenet.load_model(str(model_dir), allow_pipes=True)
    assert allowed.transcribe(pipe, keys=["p"])[0].text == asr.transcribe(str(wav))[0].text
    assert marker.exists()
    marker.unlink()
    scp, out = tmp_path / "wav.scp", tmp_path / "out.txt"  # a wav.scp to the CLI: as Kaldi
    scp.write_text(f"p {pipe}\n")
    assert transcribe_main(["--model_dir", str(model_dir), "--output", str(out), str(scp)]) == 0
    assert marker.exists() and out.read_text().startswith("p ")

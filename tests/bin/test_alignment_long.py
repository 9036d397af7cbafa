"""alignment.py refuses utterances over --max_duration_s by key, with the reason, and
aligns the others exactly as without the limit."""
from tests.tiny_experiment import tiny_config, write_data_list, write_experiment, write_tones
from wenet.bin.alignment import main as alignment_main


def _align(d, out, *extra):
    out.mkdir()
    rc = alignment_main(["--config", str(d / "train.yaml"), "--checkpoint", str(d / "m.pt"),
                         "--input_file", str(d / "data.list"), "--dict", str(d / "units.txt"),
                         "--result_file", str(out / "words"), *extra])
    return rc, (out / "words").read_text(), (out / "words.failed").read_text()


def test_long_utterance_refused_the_others_aligned(tmp_path):
    d = tmp_path / "exp"
    write_experiment(d, tiny_config(), "m.pt", ctc=8.0)
    keys = ["a", "long", "b"]
    write_tones(d, keys, [0.8, 3.0, 0.6])
    write_data_list(d / "data.list", d, keys)
    rc, words, failed = _align(d, tmp_path / "limited", "--max_duration_s", "2")
    assert rc == 1  # an utterance failed: exit_status's rule without --keep_going
    assert failed.startswith("long too long: 3.0 s of audio, over --max_duration_s 2")
    assert "transcribe.py's segmentation" in failed and len(failed.splitlines()) == 1
    rc, all_words, none_failed = _align(d, tmp_path / "unlimited", "--max_duration_s", "0")
    assert rc == 0 and none_failed == ""
    assert words == "".join(line + "\n" for line in all_words.splitlines()
                            if not line.startswith("long "))
    assert any(line.startswith("long ") for line in all_words.splitlines())

"""Recognition never depends on references: an utterance whose transcript is valid, empty,
missing or out of vocabulary decodes to the same text; wav.scp and plain file lists (no text
at all) decode too; unreadable or too short audio is skipped by key and counted, the rest
still decoded."""
import io
import logging
import tarfile

import numpy as np
import pytest
import soundfile as sf

from tests.tiny_experiment import (read_hyps, tiny_config, write_data_list, write_experiment,
                                   write_tones, write_wav_scp)
from wenet.bin.recognize import main as recognize_main

MODES = ["ctc_greedy_search", "attention_rescoring"]
CONFIG = tiny_config({"decoder": "transformer", "decoder_conf": {"r_num_blocks": None},
                      "model_conf": {"reverse_weight": None},
                      "dataset_conf": {"resample_conf": None}})
KEYS = [f"u{i}" for i in range(4)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("noref")
    write_tones(d, KEYS, [0.6, 0.3, 0.45, 0.7], seed=1)
    write_experiment(d, CONFIG, ctc=8.0)
    return d


def _recognize(d, data_list, out, data_type="raw"):
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(data_list),
                    "--data_type", data_type, "--checkpoint", str(d / "model.pt"),
                    "--dict", str(d / "units.txt"), "--beam_size", "3", "--batch_size", "2",
                    "--modes", " ".join(MODES), "--result_dir", str(out)])
    return {m: read_hyps(out / m / "text") for m in MODES}


def test_empty_missing_oov_reference_decode_the_same(setup, tmp_path):
    d = setup
    valid = _recognize(d, write_data_list(tmp_path / "valid.list", d, KEYS), tmp_path / "v")
    assert sum(bool(t) for t in valid["ctc_greedy_search"].values()) > 0  # not all empty
    variants = {"empty": lambda k: "", "missing": lambda k: None, "oov": lambda k: "xyz qq",
                "mixed": lambda k: {"u0": "", "u1": None, "u2": "zz", "u3": "abc"}[k]}
    for name, txt_of in variants.items():
        data_list = write_data_list(tmp_path / f"{name}.list", d, KEYS, txt_of)
        got = _recognize(d, data_list, tmp_path / name)
        for m in MODES:
            assert got[m] == valid[m], (name, m)
            assert sorted(got[m]) == KEYS


def test_wav_scp_file_list_and_textless_shard(setup, tmp_path):
    d = setup
    valid = _recognize(d, write_data_list(tmp_path / "valid.list", d, KEYS), tmp_path / "v")
    scp = write_wav_scp(tmp_path / "wav.scp", d, KEYS)
    assert _recognize(d, scp, tmp_path / "scp", "scp") == valid
    files = tmp_path / "files.txt"
    files.write_text("".join(f"{d / (k + '.wav')}\n" for k in KEYS))
    assert _recognize(d, files, tmp_path / "files", "scp") == valid
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as tar:  # audio members only, one with an empty .txt
        for k in KEYS:
            if k == "u1":
                info = tarfile.TarInfo(f"{k}.txt")
                info.size = 0
                tar.addfile(info, io.BytesIO(b""))
            data = (d / f"{k}.wav").read_bytes()
            info = tarfile.TarInfo(f"{k}.wav")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "shard.list").write_text(f"{shard}\n")
    assert _recognize(d, tmp_path / "shard.list", tmp_path / "shard", "shard") == valid


def test_unreadable_audio_is_skipped_by_key_and_counted(setup, tmp_path, caplog):
    d = setup
    valid = _recognize(d, write_data_list(tmp_path / "valid.list", d, KEYS), tmp_path / "v")
    (tmp_path / "garbage.wav").write_bytes(b"not audio at all" * 10)
    sf.write(tmp_path / "short.wav", np.zeros(100, dtype=np.float32), 16000)  # < one window
    scp = tmp_path / "wav.scp"
    scp.write_text(f"bad1 {tmp_path / 'nonexistent.wav'}\n"
                   + f"short {tmp_path / 'short.wav'}\n"
                   + "".join(f"{k} {d / (k + '.wav')}\n" for k in KEYS[:2])
                   + f"bad2 {tmp_path / 'garbage.wav'}\n"
                   + "".join(f"{k} {d / (k + '.wav')}\n" for k in KEYS[2:]))
    with caplog.at_level(logging.INFO):
        got = _recognize(d, scp, tmp_path / "out", "scp")
    assert got == valid
    warnings = [r.getMessage() for r in caplog.records if "audio_decode_error" in r.getMessage()]
    assert any("utterance bad1" in w for w in warnings)
    assert any("utterance bad2" in w for w in warnings)
    assert any("utterance short" in r.getMessage() and "shorter_than_window" in r.getMessage()
               for r in caplog.records)
    summary = [r.getMessage() for r in caplog.records if "delivered" in r.getMessage()]
    assert summary and "skipped 3" in summary[-1] and "audio_decode_error=2" in summary[-1]

"""Recognition never depends on references: an utterance whose transcript is valid, empty,
missing or out of vocabulary decodes to the same text; wav.scp and plain file lists (no text
at all) decode too; unreadable or too short audio is skipped by key and counted, the rest
still decoded."""
import io
import json
import logging
import tarfile

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from wenet.bin.recognize import main as recognize_main
from wenet.models import init_model

MODES = ["ctc_greedy_search", "attention_rescoring"]
UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "\u2581d", "<sos/eos>"]
CONFIG = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64,
                     "num_blocks": 2, "cnn_module_kernel": 3, "dropout_rate": 0.0},
    "decoder": "transformer",
    "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1,
                     "dropout_rate": 0.0},
    "model_conf": {"ctc_weight": 0.3},
    "dataset_conf": {"fbank_conf": {"num_mel_bins": 20, "frame_shift": 10,
                                    "frame_length": 25, "dither": 1.0},
                     "batch_conf": {"batch_size": 3}},
    "input_dim": 20, "output_dim": len(UNITS), "cmvn_file": None,
}
KEYS = [f"u{i}" for i in range(4)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("noref")
    rng = np.random.default_rng(1)
    for i, secs in enumerate([0.6, 0.3, 0.45, 0.7]):
        n = int(16000 * secs)
        t = np.arange(n) / 16000
        wav = 0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t) + 0.05 * rng.standard_normal(n)
        sf.write(d / f"u{i}.wav", wav.astype(np.float32), 16000)
    (d / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
    (d / "train.yaml").write_text(yaml.safe_dump(CONFIG))
    torch.manual_seed(0)
    model = init_model(CONFIG)
    with torch.no_grad():  # sharpen the random CTC head so hypotheses are not empty
        model.ctc.ctc_lo.weight.mul_(8.0)
    torch.save(model.state_dict(), d / "model.pt")
    return d


def _recognize(d, data_list, out, data_type="raw"):
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(data_list),
                    "--data_type", data_type, "--checkpoint", str(d / "model.pt"),
                    "--dict", str(d / "units.txt"), "--beam_size", "3", "--batch_size", "2",
                    "--modes", " ".join(MODES), "--result_dir", str(out)])
    return {m: dict(line.split(" ", 1) if " " in line else (line, "")
                    for line in (out / m / "text").read_text().splitlines()) for m in MODES}


def _raw_list(d, path, txt_of):
    lines = []
    for k in KEYS:
        obj = {"key": k, "wav": str(d / f"{k}.wav")}
        txt = txt_of(k)
        if txt is not None:
            obj["txt"] = txt
        lines.append(json.dumps(obj))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_empty_missing_oov_reference_decode_the_same(setup, tmp_path):
    d = setup
    valid = _recognize(d, _raw_list(d, tmp_path / "valid.list", lambda k: "abc"), tmp_path / "v")
    assert sum(bool(t) for t in valid["ctc_greedy_search"].values()) > 0  # not all empty
    variants = {"empty": lambda k: "", "missing": lambda k: None, "oov": lambda k: "xyz qq",
                "mixed": lambda k: {"u0": "", "u1": None, "u2": "zz", "u3": "abc"}[k]}
    for name, txt_of in variants.items():
        got = _recognize(d, _raw_list(d, tmp_path / f"{name}.list", txt_of), tmp_path / name)
        for m in MODES:
            assert got[m] == valid[m], (name, m)
            assert sorted(got[m]) == KEYS


def test_wav_scp_file_list_and_textless_shard(setup, tmp_path):
    d = setup
    valid = _recognize(d, _raw_list(d, tmp_path / "valid.list", lambda k: "abc"), tmp_path / "v")
    scp = tmp_path / "wav.scp"
    scp.write_text("".join(f"{k} {d / (k + '.wav')}\n" for k in KEYS))
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
    valid = _recognize(d, _raw_list(d, tmp_path / "valid.list", lambda k: "abc"), tmp_path / "v")
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

"""global_cmvn: tools/compute_cmvn_stats.py against a direct numpy/torchaudio reference."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio
import torchaudio.compliance.kaldi as kaldi

from wenet.dataprep.cmvn import CmvnStats, load_cmvn, save_cmvn
from tests.common import REPO, load_tool
from tests.numerics import eps

ROOT = REPO
RATE = 16000


def _tool():
    return load_tool("compute_cmvn_stats")


def _write_config(path, resample_rate=None):
    text = ("dataset_conf:\n  fbank_conf:\n    num_mel_bins: 80\n    frame_length: 25\n"
            "    frame_shift: 10\n    dither: 1.0\n")  # dither must be ignored by CMVN
    if resample_rate:
        text += f"  resample_conf:\n    resample_rate: {resample_rate}\n"
    path.write_text(text)
    return str(path)


def _make_corpus(tmp_path, n=6):
    """n int16 wavs of different lengths; returns {key: int16 samples} and wav.scp path."""
    rng = np.random.default_rng(0)
    audio, lines = {}, []
    for i in range(n):
        x = (rng.standard_normal(RATE // 4 + 1000 * i) * 3000).clip(-32768, 32767).astype(np.int16)
        key = f"utt{i}"
        path = tmp_path / f"{key}.wav"
        sf.write(str(path), x, RATE, subtype="PCM_16")
        audio[key] = x
        # one entry goes through a Kaldi pipe command
        lines.append(f"{key} cat {path} |" if i == 2 else f"{key} {path}")
    scp = tmp_path / "wav.scp"
    scp.write_text("\n".join(lines) + "\n")
    return audio, str(scp)


def _reference(signals, rate=RATE):
    """Sums and sums of squares of Kaldi fbank (torchaudio) over int16-valued signals."""
    feats = [kaldi.fbank(torch.from_numpy(x.astype(np.float32)).unsqueeze(0), num_mel_bins=80,
                         frame_length=25, frame_shift=10, dither=0.0,
                         sample_frequency=rate).double().numpy() for x in signals]
    allf = np.concatenate(feats)
    return allf.sum(0), np.square(allf).sum(0), allf.shape[0], allf


def _run(tmp_path, scp, config, name, workers, extra=()):
    out = tmp_path / name
    rc = _tool().main(["--nj", str(workers), "--train_config", config,
                       "--in_scp", scp, "--out_cmvn", str(out), *extra])
    return rc, out


def test_workers_agree_with_reference(tmp_path):
    audio, scp = _make_corpus(tmp_path)
    config = _write_config(tmp_path / "train.yaml")
    mean_ref, var_ref, n_ref, allf = _reference(list(audio.values()))
    results = []
    for workers in (1, 4):
        rc, out = _run(tmp_path, scp, config, f"cmvn{workers}", workers)
        assert rc == 0
        text = out.read_text()
        assert text.count("\n") == 1 and text.endswith("\n")  # one-line JSON
        obj = json.loads(text)
        assert set(obj) == {"mean_stat", "var_stat", "frame_num"}
        assert obj["frame_num"] == n_ref
        np.testing.assert_allclose(obj["mean_stat"], mean_ref, rtol=1e-6)
        np.testing.assert_allclose(obj["var_stat"], var_ref, rtol=1e-6)
        results.append(obj)
    np.testing.assert_allclose(results[0]["mean_stat"], results[1]["mean_stat"], rtol=1e-6)
    np.testing.assert_allclose(results[0]["var_stat"], results[1]["var_stat"], rtol=1e-6)

    # load_cmvn gives the mean and inverse standard deviation of the frames
    mean, istd = load_cmvn(str(tmp_path / "cmvn1"))
    assert mean.shape == istd.shape == (80,)
    np.testing.assert_allclose(mean, allf.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(istd, 1.0 / allf.std(0), rtol=1e-4)


def test_nj_and_the_wenet_name_num_workers_set_the_process_count(tmp_path):
    _, scp = _make_corpus(tmp_path, n=1)
    config = _write_config(tmp_path / "train.yaml")
    for option in ("--nj", "--num_workers"):
        tool, seen = _tool(), []
        real = tool.compute_cmvn_stats

        def counting(utts, conf, workers, real=real, seen=seen):
            seen.append(workers)
            return real(utts, conf, 1)
        tool.compute_cmvn_stats = counting
        assert tool.main([option, "3", "--train_config", config, "--in_scp", scp,
                          "--out_cmvn", str(tmp_path / "cmvn")]) == 0
        assert seen == [3], option
    assert _tool().get_args(["--train_config", "c", "--in_scp", "s", "--out_cmvn", "o"]).nj == 1


def test_segments_beside_scp_are_honoured(tmp_path):
    rng = np.random.default_rng(1)
    rec = (rng.standard_normal(RATE) * 2000).astype(np.int16)
    path = tmp_path / "rec.wav"
    sf.write(str(path), rec, RATE, subtype="PCM_16")
    (tmp_path / "wav.scp").write_text(f"rec {path}\n")
    cuts = {"rec-a": (0.0, 0.31), "rec-b": (0.25, 0.62), "rec-c": (0.7, -1)}
    (tmp_path / "segments").write_text(
        "".join(f"{k} rec {s} {e}\n" for k, (s, e) in cuts.items()))
    pieces = [rec[int(round(s * RATE)):(len(rec) if e < 0 else int(round(e * RATE)))]
              for s, e in cuts.values()]
    mean_ref, var_ref, n_ref, _ = _reference(pieces)
    config = _write_config(tmp_path / "train.yaml")
    rc, out = _run(tmp_path, str(tmp_path / "wav.scp"), config, "cmvn", 2)
    assert rc == 0
    obj = json.loads(out.read_text())
    assert obj["frame_num"] == n_ref
    np.testing.assert_allclose(obj["mean_stat"], mean_ref, rtol=1e-6)
    np.testing.assert_allclose(obj["var_stat"], var_ref, rtol=1e-6)
    # --segments none: the whole recording instead
    rc, out = _run(tmp_path, str(tmp_path / "wav.scp"), config, "cmvn_whole", 1, ("--segments", "none"))
    assert json.loads(out.read_text())["frame_num"] == _reference([rec])[2]


def test_resample_rate_from_config(tmp_path):
    audio, scp = _make_corpus(tmp_path, n=2)
    config = _write_config(tmp_path / "train.yaml", resample_rate=8000)
    ref = [torchaudio.functional.resample(torch.from_numpy(x.astype(np.float32) / 32768), RATE, 8000)
           .numpy() * 32768 for x in audio.values()]
    mean_ref, var_ref, n_ref, _ = _reference(ref, rate=8000)
    rc, out = _run(tmp_path, scp, config, "cmvn", 1)
    obj = json.loads(out.read_text())
    assert rc == 0 and obj["frame_num"] == n_ref
    np.testing.assert_allclose(obj["mean_stat"], mean_ref, rtol=1e-5)
    np.testing.assert_allclose(obj["var_stat"], var_ref, rtol=1e-5)


def test_unreadable_audio_is_skipped_and_counted(tmp_path, caplog):
    audio, scp = _make_corpus(tmp_path, n=2)
    (tmp_path / "bad.wav").write_bytes(b"not audio at all")
    with open(scp, "a") as f:
        f.write(f"zz_bad {tmp_path / 'bad.wav'}\nzz_gone {tmp_path / 'missing.wav'}\n")
    config = _write_config(tmp_path / "train.yaml")
    rc, out = _run(tmp_path, scp, config, "cmvn", 2)
    assert rc == 0
    assert json.loads(out.read_text())["frame_num"] == _reference(list(audio.values()))[2]
    assert "zz_bad" in caplog.text and "zz_gone" in caplog.text
    assert "2 of 4 utterances skipped" in caplog.text
    # everything unreadable: non-zero exit and no output file
    (tmp_path / "bad.scp").write_text(f"zz_bad {tmp_path / 'bad.wav'}\n")
    rc, out = _run(tmp_path, str(tmp_path / "bad.scp"), config, "cmvn_none", 1)
    assert rc != 0 and not out.exists()


def test_load_cmvn_names_bad_file(tmp_path):
    bad = tmp_path / "global_cmvn"
    bad.write_text('{"mean_stat": [1.0], "frame_num": 3}\n')
    with pytest.raises(ValueError, match="global_cmvn"):
        load_cmvn(str(bad))


def _float_wav(path, int16_samples, bad_at, value):
    """A 32-bit float WAV of ``int16_samples`` / 32768 with sample ``bad_at`` set to ``value``."""
    x = int16_samples.astype(np.float32) / 32768
    x[bad_at] = value
    sf.write(str(path), x, RATE, subtype="FLOAT")


def test_non_finite_audio_is_skipped_and_named(tmp_path, caplog):
    audio, scp = _make_corpus(tmp_path, n=2)
    _float_wav(tmp_path / "nan.wav", audio["utt0"], 100, np.nan)
    _float_wav(tmp_path / "inf.wav", audio["utt1"], 5, -np.inf)
    with open(scp, "a") as f:
        f.write(f"zz_nan {tmp_path / 'nan.wav'}\nzz_inf {tmp_path / 'inf.wav'}\n")
    config = _write_config(tmp_path / "train.yaml")
    mean_ref, var_ref, n_ref, _ = _reference(list(audio.values()))
    rc, out = _run(tmp_path, scp, config, "cmvn", 2)
    assert rc == 0
    obj = json.loads(out.read_text())
    assert obj["frame_num"] == n_ref
    np.testing.assert_allclose(obj["mean_stat"], mean_ref, rtol=1e-6)
    np.testing.assert_allclose(obj["var_stat"], var_ref, rtol=1e-6)
    assert f"skipping utterance zz_nan: 1 NaN or infinite samples in {tmp_path / 'nan.wav'}" in caplog.text
    assert f"skipping utterance zz_inf: 1 NaN or infinite samples in {tmp_path / 'inf.wav'}" in caplog.text
    assert "2 of 4 utterances skipped" in caplog.text


def test_only_the_segment_holding_a_nan_is_skipped(tmp_path, caplog):
    rec = (np.random.default_rng(3).standard_normal(RATE) * 2000).astype(np.int16)
    _float_wav(tmp_path / "rec.wav", rec, int(0.8 * RATE), np.nan)
    (tmp_path / "wav.scp").write_text(f"rec {tmp_path / 'rec.wav'}\n")
    (tmp_path / "segments").write_text("rec-a rec 0.0 0.5\nrec-b rec 0.6 1.0\n")
    rc, out = _run(tmp_path, str(tmp_path / "wav.scp"), _write_config(tmp_path / "train.yaml"), "cmvn", 1)
    assert rc == 0
    mean_ref, var_ref, n_ref, _ = _reference([rec[:RATE // 2]])
    obj = json.loads(out.read_text())
    assert obj["frame_num"] == n_ref
    np.testing.assert_allclose(obj["mean_stat"], mean_ref, rtol=1e-6)
    np.testing.assert_allclose(obj["var_stat"], var_ref, rtol=1e-6)
    assert "skipping utterance rec-b" in caplog.text and "skipping utterance rec-a" not in caplog.text


def test_all_audio_non_finite_writes_no_file(tmp_path, caplog):
    audio, _ = _make_corpus(tmp_path, n=1)
    _float_wav(tmp_path / "nan.wav", audio["utt0"], 0, np.nan)
    (tmp_path / "nan.scp").write_text(f"zz_nan {tmp_path / 'nan.wav'}\n")
    rc, out = _run(tmp_path, str(tmp_path / "nan.scp"), _write_config(tmp_path / "train.yaml"), "cmvn", 1)
    assert rc == 1 and not out.exists()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [f"no features computed: all 1 utterances of {tmp_path / 'nan.scp'} failed"]


def test_save_cmvn_refuses_non_finite_statistics(tmp_path):
    path = tmp_path / "global_cmvn"
    for bad in (np.nan, np.inf):
        stats = CmvnStats(dim=3, mean_stat=np.array([1.0, 2.0, bad]), var_stat=np.array([4.0, 5.0, 6.0]),
                          frame_num=2)
        with pytest.raises(ValueError) as err:
            save_cmvn(stats, str(path))
        assert str(err.value) == (f"refusing to write {path}: CMVN statistics are NaN or infinite "
                                  "in 1 of 3 dimensions (first: 2)")
        assert not path.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text,problem", [
    ('{"mean_stat": [1.0, NaN], "var_stat": [1.0, 1.0], "frame_num": 3}',
     "global_cmvn's mean_stat is NaN or infinite in 1 of 2 dimensions (first: 1)"),
    ('{"mean_stat": [1.0, 2.0], "var_stat": [Infinity, 1.0], "frame_num": 3}',
     "global_cmvn's var_stat is NaN or infinite in 1 of 2 dimensions (first: 0)"),
    ('{"mean_stat": ["1.0", 2.0], "var_stat": [1.0, 1.0], "frame_num": 3}',
     "global_cmvn's mean_stat must be a non-empty list of numbers"),
    ('{"mean_stat": [], "var_stat": [], "frame_num": 3}',
     "global_cmvn's mean_stat must be a non-empty list of numbers"),
    ('{"mean_stat": [[1.0], [2.0]], "var_stat": [1.0, 1.0], "frame_num": 3}',
     "global_cmvn's mean_stat must be a non-empty list of numbers"),
    ('{"mean_stat": [1.0, 2.0], "var_stat": [1.0], "frame_num": 3}',
     "mean_stat has 2 values, var_stat 1"),
    ('{"mean_stat": [1.0], "var_stat": [-1.0], "frame_num": 3}',
     "var_stat holds negative sums of squares"),
    ('{"mean_stat": [1.0], "var_stat": [1.0], "frame_num": "3"}',
     "frame_num must be a positive integer, got '3'"),
    ('{"mean_stat": [1.0], "var_stat": [1.0], "frame_num": 2.5}',
     "frame_num must be a positive integer, got 2.5"),
    ('{"mean_stat": [1.0], "var_stat": [1.0], "frame_num": true}',
     "frame_num must be a positive integer, got True"),
    ('{"mean_stat": [1.0], "var_stat": [1.0], "frame_num": 0}',
     "frame_num must be a positive integer, got 0"),
    ('[[1.0], [1.0], 3]',
     "global_cmvn needs a JSON object with mean_stat, var_stat and frame_num"),
])
def test_load_cmvn_refuses_malformed_or_non_finite_values(tmp_path, text, problem):
    path = tmp_path / "cmvn.json"
    path.write_text(text + "\n")
    with pytest.raises(ValueError) as err:
        load_cmvn(str(path))
    assert str(err.value) == f"{path}: {problem}"


def test_load_cmvn_accepts_an_integral_float_frame_num(tmp_path):
    path = tmp_path / "cmvn.json"
    path.write_text('{"mean_stat": [2.0, 4.0], "var_stat": [8.0, 20.0], "frame_num": 2.0}\n')
    mean, istd = load_cmvn(str(path))
    np.testing.assert_array_equal(mean, [1.0, 2.0])  # variances 4 - 1 = 3 and 10 - 4 = 6
    # float32 sqrt and division, each correctly rounded (half an ulp, eps / 2 relative)
    np.testing.assert_allclose(istd, [3 ** -0.5, 6 ** -0.5], rtol=eps(torch.float32))


def test_bad_yaml_config_is_one_error_line(tmp_path, caplog):
    _, scp = _make_corpus(tmp_path, n=1)
    config = tmp_path / "train.yaml"
    config.write_text("dataset_conf:\n  fbank_conf: [80\n")
    rc, out = _run(tmp_path, scp, str(config), "cmvn", 1)
    assert rc == 1 and not out.exists()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].startswith(f"{config}:3: invalid YAML: ")

"""VTLP (vocal tract length perturbation): the VTLN-warped fbank against torchaudio's Kaldi
fbank, the direction of the warp, and its draws in the training pipeline."""
from __future__ import annotations

import math
import random
from typing import Dict

import numpy as np
import pytest
import torch
import torchaudio.compliance.kaldi as kaldi

from tests.dataset.test_pipeline import PLAIN, RATE, TABLE, collect, make_corpus, write_shards
from wenet.inference.batch_decoding import decoding_dataset_conf
from wenet.dataset import processor
from wenet.dataset.dataset import Dataset
from wenet.dataset.fbank import FeatureConf, compute_fbank
from wenet.dataset.stats import PipelineStats

GRID = [round(0.9 + 0.01 * i, 2) for i in range(21)]  # the warps a 0.9 .. 1.1 range can draw


def kaldi_fbank(audio: np.ndarray, warp: float) -> torch.Tensor:
    """torchaudio's Kaldi fbank of int16-range samples with ``--vtln-warp``."""
    wav = torch.from_numpy(audio.astype(np.float32)).unsqueeze(0)
    return kaldi.fbank(wav, num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0,
                       energy_floor=0.0, sample_frequency=RATE, vtln_warp=warp)


def sine(freq: float, seconds: float = 0.5) -> torch.Tensor:
    t = torch.arange(int(RATE * seconds), dtype=torch.float64) / RATE
    return (0.3 * torch.sin(2 * math.pi * freq * t)).float().unsqueeze(0)


@pytest.mark.parametrize("warp", [0.82, 0.9, 0.97, 1.0, 1.06, 1.2])
def test_warped_fbank_equals_torchaudio_kaldi_fbank(warp):
    audio = make_corpus(1, seed=5)[0][2]
    ours = compute_fbank(torch.from_numpy(audio.astype(np.float32) / 32768).unsqueeze(0),
                         RATE, vtln_warp=warp)
    torch.testing.assert_close(ours, kaldi_fbank(audio, warp), rtol=1e-4, atol=1e-3)


def peak_bin(feat: torch.Tensor) -> float:
    """The mel bin where a steady tone peaks, between bins by a parabola through the
    log energies of the top bin and its neighbours."""
    m = feat.mean(0)
    i = int(m.argmax())
    a, b, c = (float(v) for v in m[i - 1:i + 2])
    return i + 0.5 * (a - c) / (a - 2 * b + c)


@pytest.mark.parametrize("freq", [400.0, 1000.0, 2500.0, 5000.0])
@pytest.mark.parametrize("warp", [0.85, 0.92, 1.08, 1.15])
def test_warp_moves_content_at_f_to_where_warp_times_f_lies(freq, warp):
    """Between the VTLN cut-offs the warp scales frequency: a tone at ``f`` warped by
    ``a`` peaks where a tone at ``a * f`` peaks unwarped (within 0.15 of a bin)."""
    warped = peak_bin(compute_fbank(sine(freq), RATE, vtln_warp=warp))
    moved = peak_bin(compute_fbank(sine(warp * freq), RATE))
    plain = peak_bin(compute_fbank(sine(freq), RATE))
    assert abs(warped - moved) < 0.15
    assert math.copysign(1.0, warp - 1) * (warped - plain) > 0.7  # moved the right way


def test_fbank_stage_draws_warps_uniformly_on_a_0_01_grid():
    conf = FeatureConf(num_mel_bins=80)
    audio = make_corpus(1, seed=7)[0][2]
    wav = torch.from_numpy(audio.astype(np.float32) / 32768).unsqueeze(0)
    samples = [{"key": f"k{i}", "src": "mem", "wav": wav, "sample_rate": RATE}
               for i in range(400)]
    out = list(processor.fbank(iter(samples), PipelineStats("test"), random.Random(3), conf,
                               vtlp=(0.9, 1.1)))
    warps = [s["vtln_warp"] for s in out]
    assert set(warps) <= set(GRID)
    # 400 uniform draws: every one of the 21 values (inner ones have 2x the ends' mass),
    # and a mean at the centre within 4 standard errors (sd of U(0.9, 1.1) is 0.0577)
    assert set(warps) == set(GRID)
    assert abs(sum(warps) / len(warps) - 1.0) < 4 * 0.0577 / math.sqrt(400)
    for s in out[:5]:
        torch.testing.assert_close(s["feat"], compute_fbank(wav, RATE, vtln_warp=s["vtln_warp"]))


def _conf(**extra) -> dict:
    return {**PLAIN, "fbank_conf": {"num_mel_bins": 80, "dither": 0.0}, **extra}


def _warps_of(feats: Dict[str, tuple], corpus) -> Dict[str, float]:
    """The warp of each delivered utterance, found by trying every grid value against
    torchaudio (brute force); an utterance matching none fails."""
    found = {}
    for key, _, audio in corpus:
        feat = feats[key][0]
        hits = [w for w in GRID
                if torch.allclose(feat, kaldi_fbank(audio, w), rtol=1e-4, atol=1e-3)]
        assert len(hits) == 1, f"{key}: matches warps {hits}"
        found[key] = hits[0]
    return found


def test_training_pipeline_warps_each_utterance_anew_each_epoch(tmp_path):
    corpus = make_corpus(8, seed=11)
    data_list = write_shards(tmp_path, corpus, per_shard=3)
    conf = _conf(vtlp=True, vtlp_conf={"min_warp": 0.9, "max_warp": 1.1})
    ds = Dataset("shard", data_list, TABLE, conf, seed=2)
    by_epoch = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        by_epoch.append(_warps_of(collect(ds), corpus))
    assert len(set(by_epoch[0].values())) > 1            # per utterance, not per pass
    assert by_epoch[0] != by_epoch[1]                      # drawn anew each epoch
    again = Dataset("shard", data_list, TABLE, conf, seed=2)
    again.set_epoch(1)
    assert _warps_of(collect(again), corpus) == by_epoch[1]  # reproducible from the seed
    # CV and recognition never warp: plain Kaldi fbank
    cv = collect(Dataset("shard", data_list, TABLE, conf, seed=2, training=False))
    for key, _, audio in corpus:
        torch.testing.assert_close(cv[key][0], kaldi_fbank(audio, 1.0), rtol=1e-4, atol=1e-3)
    assert decoding_dataset_conf(conf, 4)["vtlp"] is False


def test_vtlp_conf_is_checked(tmp_path):
    data_list = write_shards(tmp_path, make_corpus(2), per_shard=2)
    with pytest.raises(ValueError, match="min_warp <= max_warp"):
        Dataset("shard", data_list, TABLE, _conf(vtlp=True, vtlp_conf={"min_warp": 1.1,
                                                                      "max_warp": 0.9}))
    with pytest.raises(ValueError, match="unknown keys \\['alpha'\\]"):
        Dataset("shard", data_list, TABLE, _conf(vtlp=True, vtlp_conf={"alpha": 0.1}))
    with pytest.raises(ValueError, match="vtlp would draw once for good"):
        Dataset("shard", data_list, TABLE, _conf(vtlp=True, cache_features=True))
    # decoding never warps, so the cache is accepted there
    Dataset("shard", data_list, TABLE, _conf(vtlp=True, cache_features=True), training=False)

"""The training data pipeline (wenet/dataset) against references.

Audio is generated here (numpy + soundfile); tar shards are written here in
WeNet's layout (``<key>.txt`` then ``<key>.wav``) or by tools/make_shard_list.py.
"""
from __future__ import annotations

import io
import logging
import math
import os
import random
import subprocess
import sys
import tarfile
from typing import Dict, List, Sequence, Tuple

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio.compliance.kaldi as kaldi
from torch.utils.data import DataLoader

from wenet.dataset import processor
from wenet.dataset.dataset import Dataset
from wenet.dataset.spec_aug import spec_aug, spec_sub, spec_trim, time_warp
from wenet.dataset.stats import PipelineStats
from wenet.dataset.tokenizer import SPACE, Tokenizer
from wenet.dataset.fbank import compute_fbank

from tests.common import REPO
RATE = 16000
WORDS = ["ab", "ba", "cab", "abc", "ca"]
# <blank> 0, <unk> 1, then the characters of WORDS and the space mark, <sos/eos> last
TABLE = {"<blank>": 0, "<unk>": 1, "a": 2, "b": 3, "c": 4, SPACE: 5, "<sos/eos>": 6}
PLAIN = {"batch_conf": {"batch_type": "static", "batch_size": 1}, "shuffle": False,
         "sort": False, "filter_conf": {"min_length": 0}}


# ---------------------------------------------------------------- helpers (also used by
# tests/test_dataset_bad_input.py)

def tone(seconds: float, seed: int, rate: int = RATE, channels: int = 1) -> np.ndarray:
    """int16 test signal: a few sines plus noise, (samples,) or (samples, channels)."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * rate))
    t = np.arange(n) / rate
    x = sum(0.2 * np.sin(2 * np.pi * f * t) for f in rng.uniform(100, 3000, 3))
    x = x + 0.05 * rng.standard_normal(n)
    x = (x * 32767 * 0.8).astype(np.int16)
    if channels > 1:
        x = np.stack([x, (x // 2).astype(np.int16)], axis=1)
    return x


def wav_bytes(x: np.ndarray, rate: int = RATE, fmt: str = "WAV") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format=fmt, subtype="PCM_16")
    return buf.getvalue()


def make_corpus(n: int, seed: int = 0) -> List[Tuple[str, str, np.ndarray]]:
    """``n`` utterances (key, text, int16 audio) of 0.3 .. 1.0 s."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        out.append((f"utt{i:03d}", text, tone(rng.uniform(0.3, 1.0), seed * 1000 + i)))
    return out


def write_shard(path: str, members: Sequence[Tuple[str, bytes]]) -> None:
    """A tar with the given (name, data) members, in order."""
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def write_shards(tmp_path, corpus, per_shard: int) -> str:
    """WeNet-layout shards of ``corpus`` and their data.list; returns the list path."""
    paths = []
    for s in range(0, len(corpus), per_shard):
        path = str(tmp_path / f"shard{s // per_shard:03d}.tar")
        members = []
        for key, text, audio in corpus[s:s + per_shard]:
            members += [(f"{key}.txt", text.encode()), (f"{key}.wav", wav_bytes(audio))]
        write_shard(path, members)
        paths.append(path)
    data_list = tmp_path / "shards.list"
    data_list.write_text("".join(p + "\n" for p in paths))
    return str(data_list)


def labels_of(text: str) -> List[int]:
    return [TABLE[SPACE if c == " " else c] for c in text]


def collect(batches) -> Dict[str, Tuple[torch.Tensor, List[int]]]:
    """{key: (feats unpadded, label)} from padded batches."""
    out = {}
    for b in batches:
        for i, key in enumerate(b["keys"]):
            feat = b["feats"][i, :b["feats_lengths"][i]]
            label = b["target"][i, :b["target_lengths"][i]].tolist()
            assert key not in out, f"{key} delivered twice"
            out[key] = (feat, label)
    return out


def reference_fbank(audio: np.ndarray) -> torch.Tensor:
    """torchaudio's Kaldi fbank on the int16-range samples."""
    wav = torch.from_numpy(audio.astype(np.float32)).unsqueeze(0)
    return kaldi.fbank(wav, num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0,
                       energy_floor=0.0, sample_frequency=RATE)


# ---------------------------------------------------------------- features

def test_pipeline_fbank_equals_torchaudio_kaldi_fbank(tmp_path):
    corpus = make_corpus(5)
    data_list = write_shards(tmp_path, corpus, per_shard=5)
    # training mode with every augmentation off: features must be plain Kaldi fbank
    conf = {**PLAIN, "shuffle": True, "spec_aug": False, "speed_perturb": False,
            "fbank_conf": {"num_mel_bins": 80, "dither": 0.0}}
    got = collect(Dataset("shard", data_list, TABLE, conf))
    assert sorted(got) == [k for k, _, _ in corpus]
    for key, text, audio in corpus:
        ref = reference_fbank(audio)
        assert got[key][0].shape == ref.shape
        torch.testing.assert_close(got[key][0], ref, rtol=0, atol=1e-4)
        assert got[key][1] == labels_of(text)


def test_compute_fbank_dither_draws_like_torchaudio():
    audio = tone(0.5, 7)
    wav = torch.from_numpy(audio.astype(np.float32) / 32768).unsqueeze(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        ours = compute_fbank(wav, RATE, dither=1.0)
        torch.manual_seed(3)
        ref = kaldi.fbank(wav * 32768, num_mel_bins=80, dither=1.0, energy_floor=0.0,
                          sample_frequency=RATE)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-4)


def _tool(name: str, *args: str) -> None:
    subprocess.run([sys.executable, os.path.join(REPO, "tools", name), *args], check=True,
                   capture_output=True, env={**os.environ, "PYTHONPATH": REPO})


def test_raw_and_shard_lists_deliver_the_same(tmp_path):
    corpus = make_corpus(6, seed=1)
    scp, text = tmp_path / "wav.scp", tmp_path / "text"
    for key, txt, audio in corpus:
        sf.write(str(tmp_path / f"{key}.wav"), audio, RATE, subtype="PCM_16")
    scp.write_text("".join(f"{k} {tmp_path / (k + '.wav')}\n" for k, _, _ in corpus))
    text.write_text("".join(f"{k} {t}\n" for k, t, _ in corpus))
    _tool("make_raw_list.py", str(scp), str(text), str(tmp_path / "raw.list"))
    _tool("make_shard_list.py", "--num_utts_per_shard", "4", str(scp), str(text),
          str(tmp_path / "shards"), str(tmp_path / "shard.list"))
    conf = {**PLAIN, "fbank_conf": {"dither": 0.0}}
    raw = collect(Dataset("raw", str(tmp_path / "raw.list"), TABLE, conf))
    shard = collect(Dataset("shard", str(tmp_path / "shard.list"), TABLE, conf))
    assert sorted(raw) == sorted(shard) == [k for k, _, _ in corpus]
    for key, txt, _ in corpus:
        assert raw[key][1] == shard[key][1] == labels_of(txt)
        assert torch.equal(raw[key][0], shard[key][0])


# ---------------------------------------------------------------- partitioning

def test_two_ranks_two_workers_read_each_utterance_once_per_epoch(tmp_path):
    corpus = make_corpus(24, seed=2)
    data_list = write_shards(tmp_path, corpus, per_shard=2)  # 12 shards
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 2},
            "shuffle_conf": {"shuffle_size": 4}, "sort_conf": {"sort_size": 2},
            "filter_conf": {"min_length": 0}, "fbank_conf": {"num_mel_bins": 8}}
    orders = {}
    for epoch in (0, 1):
        seen: List[str] = []
        for rank in (0, 1):
            ds = Dataset("shard", data_list, TABLE, conf, rank=rank, world_size=2, seed=5)
            ds.set_epoch(epoch)
            loader = DataLoader(ds, batch_size=None, num_workers=2)
            rank_keys = [k for b in ds.consume(loader) for k in b["keys"]]
            assert rank_keys, f"rank {rank} got nothing"
            seen += rank_keys
        assert sorted(seen) == [k for k, _, _ in corpus]  # all, and each exactly once
        orders[epoch] = seen
    assert orders[0] != orders[1]


# ---------------------------------------------------------------- tokenisation

def test_char_tokenizer_ids():
    tok = Tokenizer(TABLE)
    assert tok.encode(" ab  c ") == ([2, 3, 5, 5, 4], [])


def _train_word_model(tmp_path) -> str:
    import sentencepiece as spm
    corpus = tmp_path / "spm.txt"
    corpus.write_text("hello world\nworld hello\nhello there\n" * 20)
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "m"),
                                   model_type="word", vocab_size=6, minloglevel=2)
    return str(tmp_path / "m.model")


def test_bpe_tokenizer_ids_and_oov_pieces(tmp_path, caplog):
    model = _train_word_model(tmp_path)
    table = {"<blank>": 0, "<unk>": 1, "\u2581hello": 2, "\u2581there": 3, "\u2581world": 4,
             "你": 5, "好": 6, "<sos/eos>": 7}
    tok = Tokenizer(table, model)
    # CJK characters are tokens of their own, the rest goes through sentencepiece
    assert tok.pieces("hello 你好 world") == ["\u2581hello", "你", "好", "\u2581world"]
    assert tok.encode("hello 你好 world") == ([2, 5, 6, 4], [])
    assert tok.encode("there hello") == ([3, 2], [])

    # through the pipeline: an utterance with a piece missing from the table is
    # dropped, counted, and the piece is named in the log
    small = {k: v for k, v in table.items() if k != "\u2581there"}
    shard = str(tmp_path / "s.tar")
    write_shard(shard, [("u1.txt", b"hello world"), ("u1.wav", wav_bytes(tone(0.5, 1))),
                        ("u2.txt", b"hello there"), ("u2.wav", wav_bytes(tone(0.5, 2)))])
    (tmp_path / "l").write_text(shard + "\n")
    ds = Dataset("shard", str(tmp_path / "l"), small, PLAIN, bpe_model=model)
    with caplog.at_level(logging.WARNING):
        got = collect(ds)
    assert list(got) == ["u1"] and got["u1"][1] == [2, 4]
    assert ds.last_stats.counts["oov"] == 1
    assert ds.last_stats.oov_pieces == {"\u2581there": 1}
    assert any("u2" in r.message and "\u2581there" in r.message for r in caplog.records)


# ---------------------------------------------------------------- filter, sort, batch, pad

def _sample(key: str, seconds: float, tokens: int) -> dict:
    return {"key": key, "src": "t", "wav": torch.zeros(1, int(seconds * RATE)),
            "sample_rate": RATE, "label": [2] * tokens}


def test_filter_bounds_and_reasons():
    samples = [_sample("short", 0.09, 2), _sample("min", 0.10, 2), _sample("max", 1.00, 3),
               _sample("long", 1.01, 2), _sample("notok", 0.5, 0), _sample("mintok", 0.5, 1),
               _sample("maxtok", 0.5, 5), _sample("manytok", 0.5, 6),
               _sample("lowratio", 0.5, 1), _sample("highratio", 0.2, 5)]
    samples[8]["label"] = [2]  # 1 token / 50 frames = 0.02
    stats = PipelineStats("test")
    kept = processor.filter_samples(
        iter(samples), stats, max_length=100, min_length=10, token_max_length=5,
        token_min_length=1, min_output_input_ratio=0.021, max_output_input_ratio=0.2)
    assert [s["key"] for s in kept] == ["min", "max", "maxtok"]
    # "mintok" has ratio 1/50 = 0.02 < 0.021, "highratio" 5/20 = 0.25 > 0.2
    assert dict(stats.counts) == {
        "filtered_too_short": 1, "filtered_too_long": 1, "filtered_too_few_tokens": 1,
        "filtered_too_many_tokens": 1, "filtered_ratio_too_low": 2,
        "filtered_ratio_too_high": 1}


def _feat_samples(lengths: Sequence[int]) -> List[dict]:
    return [{"key": f"k{i}", "feat": torch.full((n, 3), float(i + 1)), "label": [7] * (i + 1)}
            for i, n in enumerate(lengths)]


def test_sort_buffer_orders_within_each_buffer():
    out = processor.sort(iter(_feat_samples([5, 3, 9, 1, 7, 2])), sort_size=4)
    assert [s["feat"].size(0) for s in out] == [1, 3, 5, 9, 2, 7]


def test_static_and_dynamic_batching():
    lengths = [10, 20, 30, 40, 5, 100, 10, 10]
    static = list(processor.static_batch(iter(_feat_samples(lengths)), batch_size=3))
    assert [len(b) for b in static] == [3, 3, 2]
    dynamic = list(processor.dynamic_batch(iter(_feat_samples(lengths)), max_frames_in_batch=60))
    # greedy by padded size (longest x count): [10, 20] pads to 40, adding 30 would make
    # 90; [30] + 40 -> 80; [40] + 5 -> 80; [5] + 100 -> 200; the 100-frame utterance is
    # over the limit on its own and goes alone; [10, 10] pads to 20
    assert [[s["feat"].size(0) for s in b] for b in dynamic] == \
        [[10, 20], [30], [40], [5], [100], [10, 10]]
    for b in dynamic:
        padded = max(s["feat"].size(0) for s in b) * len(b)
        assert padded <= 60 or len(b) == 1
    assert [s["key"] for b in dynamic for s in b] == [f"k{i}" for i in range(len(lengths))]


def test_padding_values_and_order():
    batch = next(processor.pad_batch(iter([_feat_samples([2, 4, 3])]), PipelineStats("t")))
    assert batch["keys"] == ["k1", "k2", "k0"]  # longest first, as WeNet
    assert batch["feats"].shape == (3, 4, 3) and batch["feats"].dtype == torch.float32
    assert batch["feats_lengths"].tolist() == [4, 3, 2]
    assert batch["target_lengths"].tolist() == [2, 3, 1]
    expected_feats = torch.zeros(3, 4, 3)
    expected_feats[0, :4] = 2.0
    expected_feats[1, :3] = 3.0
    expected_feats[2, :2] = 1.0
    assert torch.equal(batch["feats"], expected_feats)
    assert batch["target"].tolist() == [[7, 7, -1], [7, 7, 7], [7, -1, -1]]
    assert batch["target"].dtype == batch["feats_lengths"].dtype == torch.int64


# ---------------------------------------------------------------- augmentation

def test_speed_perturb_changes_duration_by_the_chosen_factor():
    n = RATE  # 1 s
    samples = [{"key": f"k{i}", "wav": torch.from_numpy(tone(1.0, i).astype(np.float32) / 32768)
                .unsqueeze(0), "sample_rate": RATE} for i in range(12)]
    out = list(processor.speed_perturb(iter(samples), random.Random(0)))
    lengths = {s["wav"].size(1) for s in out}
    # speed f plays the audio f times as fast: 1 s becomes 1/f s (resampling from
    # rate * f to rate gives ceil(n * rate / (rate * f)) samples)
    assert lengths == {math.ceil(n * 16000 / 14400), n, math.ceil(n * 16000 / 17600)}
    assert all(s["sample_rate"] == RATE for s in out)


def _runs(mask: torch.Tensor) -> List[Tuple[int, int]]:
    """Contiguous True runs of a 1-D bool mask as (start, length)."""
    runs, start = [], None
    for i, v in enumerate(mask.tolist() + [False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i - start))
            start = None
    return runs


def test_spec_aug_masks_are_zero_and_bounded():
    x = torch.rand(200, 80) + 1.0  # no natural zeros
    original = x.clone()
    for seed in range(20):
        rng = random.Random(seed)
        y = spec_aug(x, rng, num_t_mask=1, num_f_mask=0, max_t=30, max_f=10)
        zero_rows = (y == 0).all(dim=1)
        assert torch.equal(y[~zero_rows], x[~zero_rows])  # the rest untouched
        runs = _runs(zero_rows)
        assert len(runs) == 1 and 1 <= runs[0][1] <= 30
        y = spec_aug(x, rng, num_t_mask=0, num_f_mask=1, max_t=30, max_f=10)
        zero_cols = (y == 0).all(dim=0)
        assert torch.equal(y[:, ~zero_cols], x[:, ~zero_cols])
        runs = _runs(zero_cols)
        assert len(runs) == 1 and 1 <= runs[0][1] <= 10
        y = spec_aug(x, rng, num_t_mask=2, num_f_mask=2, max_t=30, max_f=10)
        rows, cols = (y == 0).all(dim=1), (y == 0).all(dim=0)
        assert torch.equal((y == 0), rows[:, None] | cols[None, :])  # zeros are whole masks
        assert all(n <= 60 for _, n in _runs(rows)) and all(n <= 20 for _, n in _runs(cols))
        assert 1 <= len(_runs(rows)) <= 2 and 1 <= len(_runs(cols)) <= 2
    assert torch.equal(x, original)  # the input is never modified


def test_time_warp_keeps_length_and_time_order():
    frames = 300
    x = torch.arange(frames, dtype=torch.float32)[:, None].repeat(1, 4)
    for seed in range(10):
        y = time_warp(x, random.Random(seed), max_w=40)
        assert y.shape == x.shape
        assert bool((y[1:, 0] >= y[:-1, 0] - 1e-4).all())  # still a monotone ramp
        assert y[0, 0] <= 1.0 and y[-1, 0] >= frames - 2
    short = torch.rand(50, 4)
    assert torch.equal(time_warp(short, random.Random(0), max_w=40), short)


def test_spec_sub_copies_earlier_frames_and_spec_trim_cuts_the_end():
    x = torch.arange(100, dtype=torch.float32)[:, None].repeat(1, 3)
    for seed in range(10):
        y = spec_sub(x, random.Random(seed), max_t=10, num_t_sub=3)
        src = y[:, 0].long()
        assert bool((src <= torch.arange(100)).all())  # every frame is itself or an earlier one
        assert torch.equal(y, x[src])
        z = spec_trim(x, random.Random(seed), max_t=10)
        assert 90 <= z.size(0) <= 99 and torch.equal(z, x[:z.size(0)])
    tiny = torch.rand(4, 3)
    assert torch.equal(spec_trim(tiny, random.Random(0), max_t=10), tiny)


def test_spec_aug_in_pipeline_only_when_training(tmp_path):
    corpus = make_corpus(3, seed=4)
    data_list = write_shards(tmp_path, corpus, per_shard=3)
    conf = {**PLAIN, "spec_aug": True,
            "spec_aug_conf": {"num_t_mask": 2, "num_f_mask": 2, "max_t": 5, "max_f": 5}}
    augmented = collect(Dataset("shard", data_list, TABLE, conf))
    plain = collect(Dataset("shard", data_list, TABLE, conf, training=False))
    for key, _, audio in corpus:
        ref = reference_fbank(audio)
        torch.testing.assert_close(plain[key][0], ref, rtol=0, atol=1e-4)
        aug, masked = augmented[key][0], augmented[key][0] == 0
        assert masked.any()
        torch.testing.assert_close(aug[~masked], ref[~masked], rtol=0, atol=1e-4)


# ---------------------------------------------------------------- resume

def _train_conf() -> dict:
    return {"speed_perturb": True, "spec_aug": True, "spec_sub": True, "spec_trim": True,
            "edge_pad": True, "fbank_conf": {"num_mel_bins": 20, "dither": 0.1},
            "shuffle_conf": {"shuffle_size": 5}, "sort_conf": {"sort_size": 3},
            "filter_conf": {"min_length": 0},
            "batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 250}}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_delivers_exactly_the_remaining_batches(tmp_path, num_workers):
    data_list = write_shards(tmp_path, make_corpus(16, seed=3), per_shard=2)

    def run(ds, stop=None):
        ds.set_epoch(1)
        loader = DataLoader(ds, batch_size=None, num_workers=num_workers)
        out = []
        for b in ds.consume(loader):
            out.append(b)
            if stop is not None and len(out) == stop:
                return out, ds.state_dict()
        return out, ds.state_dict()

    full, _ = run(Dataset("shard", data_list, TABLE, _train_conf(), seed=9))
    assert len(full) >= 6
    k = 3
    first, state = run(Dataset("shard", data_list, TABLE, _train_conf(), seed=9), stop=k)
    assert state["epoch"] == 1 and state["batches_consumed"] == k
    resumed_ds = Dataset("shard", data_list, TABLE, _train_conf(), seed=9)
    resumed_ds.load_state_dict(state)
    rest, end_state = run(resumed_ds)  # set_epoch(1) keeps the loaded position
    assert end_state["batches_consumed"] == len(full)
    assert len(first) + len(rest) == len(full)
    for a, b in zip(first + rest, full):
        assert a["keys"] == b["keys"]
        for name in ("feats", "feats_lengths", "target", "target_lengths", "added_frames"):
            assert torch.equal(a[name], b[name])
    # another epoch starts from its beginning, in another order
    resumed_ds.set_epoch(2)
    assert resumed_ds.state_dict()["batches_consumed"] == 0


# ---------------------------------------------------------------- feature cache

def _batches(ds: Dataset, epoch: int) -> List[dict]:
    ds.set_epoch(epoch)
    return list(ds.consume(ds))


def _assert_same_batches(got: List[dict], want: List[dict]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a["keys"] == b["keys"] and set(a) == set(b)
        for name in set(a) - {"keys"}:
            assert torch.equal(a[name], b[name])


def test_feature_cache_replays_the_uncached_pipeline(tmp_path, monkeypatch, caplog):
    """Epoch after epoch, a cached dataset delivers exactly the batches of an uncached one
    (dither 0: nothing before fbank is random), computes each fbank once and replays the
    first pass's skip counts."""
    data_list = write_shards(tmp_path, make_corpus(15, seed=8), per_shard=4)
    conf = {"spec_aug": True, "spec_sub": True, "spec_trim": True, "edge_pad": True,
            "fbank_conf": {"num_mel_bins": 20, "dither": 0.0},
            "shuffle_conf": {"shuffle_size": 5}, "sort_conf": {"sort_size": 3},
            "filter_conf": {"min_length": 50},  # drops the utterances under 0.5 s
            "batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 250}}
    calls = []
    real_fbank = processor.compute_fbank
    monkeypatch.setattr(processor, "compute_fbank",
                        lambda *a, **k: calls.append(1) or real_fbank(*a, **k))
    plain = Dataset("shard", data_list, TABLE, conf, seed=4)
    cached = Dataset("shard", data_list, TABLE, dict(conf, cache_features=True), seed=4)
    for epoch in range(3):
        want = _batches(plain, epoch)
        n_plain = len(calls)
        got = _batches(cached, epoch)
        _assert_same_batches(got, want)
        assert len(calls) - n_plain == (n_plain if epoch == 0 else 0)
        assert cached.last_stats.counts == plain.last_stats.counts
    assert plain.last_stats.counts["filtered_too_short"] > 0
    assert sum(len(b["keys"]) for b in want) + plain.last_stats.counts["filtered_too_short"] == 15


def test_feature_cache_first_pass_equals_uncached_with_dither(tmp_path):
    data_list = write_shards(tmp_path, make_corpus(8, seed=2), per_shard=3)
    conf = _train_conf()
    conf["speed_perturb"] = False
    want = _batches(Dataset("shard", data_list, TABLE, conf, seed=1), 0)
    cached = Dataset("shard", data_list, TABLE, dict(conf, cache_features=True), seed=1)
    _assert_same_batches(_batches(cached, 0), want)
    # a pass stopped half-way caches only the list items it read to their end
    # (no shuffle or sort, batch size 1: the 4th batch is the first of the second shard)
    partial = Dataset("shard", data_list, TABLE, dict(
        conf, cache_features=True, shuffle=False, sort=False,
        batch_conf={"batch_type": "static", "batch_size": 1}), seed=1)
    partial.set_epoch(0)
    batches = iter(partial)
    for _ in range(4):
        next(batches)
    assert [os.path.basename(p) for p in partial._cache] == ["shard000.tar"]


def test_feature_cache_refuses_speed_perturb(tmp_path):
    data_list = write_shards(tmp_path, make_corpus(2), per_shard=2)
    with pytest.raises(ValueError, match="speed_perturb"):
        Dataset("shard", data_list, TABLE, dict(_train_conf(), cache_features=True))
    # decoding never perturbs, so the same conf is accepted there
    Dataset("shard", data_list, TABLE, dict(_train_conf(), cache_features=True), training=False)

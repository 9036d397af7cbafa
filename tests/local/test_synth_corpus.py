"""Tests of the built-in synthetic corpus (local/synth, local/synth_data_prep.sh) and of
the engine both synthetic corpora share (local/synth/corpus.py)."""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess

import numpy as np
import pytest
import soundfile as sf

from local.synth.augment import AugmentParams, augment, coloured_noise
from local.synth.corpus import wav_is_complete
from local.synth.generate import DEFAULT_SIZES, generate_corpus, plan_corpus, synthesize
from local.synth.sentences import SentenceGenerator, number_words, ordinal_words, vocabulary
from local.synth.voices import split_voices
from tests.common import REPO

ROOT = REPO
SEED = 777
SIZES = {"train": 60, "dev": 10, "test": 10}
SETS = ("train", "dev", "test")
# sha256 of what the plan alone decides for SEED and SIZES (plan.json, COMPLETE, the
# Kaldi lists with the corpus folder written as ROOT, manifest.json without the audio
# lengths), recorded from the generator at 21059dc, before the two synthetic corpora
# shared local.synth.corpus (the audio of that corpus was byte-identical too). The
# audio itself goes through float resampling whose last bits may vary between CPUs,
# so it is pinned by its record reproducing it (test_audio_format_and_content).
PLAN_DIGESTS = {
    "plan.json": "3c44e73a6025767c86eff68972968354d9e0a932d88261d63416f71dace3a5eb",
    "COMPLETE": "be237ad54fc5f73ecc3ad4b0f01aae1a13d502111d56f9f92108f3634796f489",
    "lists/train/wav.scp": "144c4346e99a6a9fc66d69e2bd57802bfadd7ae759cbc25cfec00ac7aff14c9c",
    "lists/train/text": "d9824c55be3688949763b29bc5cd7ed7addb544d63f3be24a17b425086cb6ff1",
    "lists/train/utt2spk": "505a4b4c2005120cb55cca36f8d4f0d129e53be9f129a5492ff082c5365d51e4",
    "lists/train/spk2utt": "fc506059cbd6b5ddb2e7735464c4382c6f68968c05ab862dbd469912fb6ebba3",
    "lists/dev/wav.scp": "636f6abe983f6e8677aab60eee273f5df4ebdfff4e7a96cca4432e4f28fcf997",
    "lists/dev/text": "2a1f96a601cc5755ce03798bd6093e8c904f60bcf44a742e197ddd196c995665",
    "lists/dev/utt2spk": "737ed8ade8d07b4434a5a21c7946406e7fe33fafc836227119dd43f813940a0f",
    "lists/dev/spk2utt": "dbe255cc363058c7287e6e6ec29007b5eefbc540a6deda589e18395574356f61",
    "lists/test/wav.scp": "f5100bea0b07b5f965ae2f9bffee315d3147db8abad73c6eb60ef1f668d0167d",
    "lists/test/text": "e848d29664422923433d40fd5930003271249564ae734bd35a50dccbafab3379",
    "lists/test/utt2spk": "f4280a04f91a8e30b4406a567f81796bc0bf7f2cf64a6b5d44820868bfe0219e",
    "lists/test/spk2utt": "7bb3ab652deb0e81fa1247c463ea751a16186b7a3e68ff1289c9adaa2f069517",
    "manifest.json": "f09daaceab3ee3369e7eb3e0f369e0be9803b19edd7dc5243aec58ebf97e4d40",
}


def _read_map(path):
    with open(path, encoding="utf-8") as f:
        return dict(line.rstrip("\n").split(" ", 1) for line in f)


def _manifest(root):
    with open(os.path.join(root, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)["utterances"]


def _snapshot(root):
    """{relative path: (mtime_ns, bytes)} of every file under root."""
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (os.stat(p).st_mtime_ns, f.read())
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("synth") / "corpus")
    assert generate_corpus(root, SEED, SIZES, nj=2) == sum(SIZES.values())
    return root


def test_number_and_ordinal_words():
    assert number_words(0) == ["ZERO"]
    assert number_words(17) == ["SEVENTEEN"]
    assert number_words(40) == ["FORTY"]
    assert number_words(125) == "ONE HUNDRED TWENTY FIVE".split()
    assert number_words(900) == ["NINE", "HUNDRED"]
    assert number_words(21005) == "TWENTY ONE THOUSAND FIVE".split()
    assert ordinal_words(3) == ["THIRD"]
    assert ordinal_words(21) == ["TWENTY", "FIRST"]
    assert ordinal_words(30) == ["THIRTIETH"]
    with pytest.raises(ValueError):
        number_words(-1)


def test_default_sentences_size_and_vocabulary():
    records = plan_corpus(SEED, DEFAULT_SIZES)
    texts = [r["text"] for r in records]
    assert len(texts) == sum(DEFAULT_SIZES.values()) >= 2000
    assert len(set(texts)) == len(texts)
    vocab = vocabulary(texts)
    assert 200 <= len(vocab) <= 300, len(vocab)
    for t in texts:
        assert re.fullmatch(r"[A-Z]+( [A-Z]+)*", t), t
    # held-out sentences use only words training has (at the default sizes)
    train_vocab = vocabulary(t for r, t in zip(records, texts) if r["set"] == "train")
    assert vocabulary(t for r, t in zip(records, texts) if r["set"] != "train") <= train_vocab
    # the generator alone, with default settings, also gives >= 2000 distinct sentences
    alone = SentenceGenerator(random.Random(1)).distinct(2500)
    assert len(set(alone)) == 2500 and 200 <= len(vocabulary(alone)) <= 300


def test_held_out_voices_are_new_combinations_of_seen_ingredients():
    voices = split_voices(SEED)
    assert len(voices["train"]) >= 40
    ids = {s: {v.voice_id for v in voices[s]} for s in SETS}
    assert not ids["train"] & ids["dev"] and not ids["train"] & ids["test"] and not ids["dev"] & ids["test"]
    train_pairs = {(v.engine, v.name, v.variant) for v in voices["train"] if v.engine == "espeak"}
    train_flite = {(v.name, v.rate, v.pitch) for v in voices["train"] if v.engine == "flite"}
    for s in ("dev", "test"):
        for v in voices[s]:
            if v.engine == "espeak":
                assert (v.engine, v.name, v.variant) not in train_pairs
                assert any(p[1] == v.name for p in train_pairs)
                assert any(p[2] == v.variant for p in train_pairs)
            else:
                assert (v.name, v.rate, v.pitch) not in train_flite
                assert any(f[0] == v.name for f in train_flite)


def _plan_digests(root):
    """PLAN_DIGESTS of the corpus in ``root``."""
    root = os.path.abspath(root)

    def read(rel):
        with open(os.path.join(root, rel), "rb") as f:
            return f.read()

    out = {rel: read(rel) for rel in ("plan.json", "COMPLETE")}
    for s in SETS:
        for f in ("wav.scp", "text", "utt2spk", "spk2utt"):
            out[f"lists/{s}/{f}"] = read(f"lists/{s}/{f}").replace(root.encode(), b"ROOT")
    manifest = json.loads(read("manifest.json"))
    for r in manifest["utterances"]:
        del r["num_samples"]
    out["manifest.json"] = json.dumps(manifest).encode()
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in out.items()}


def test_corpus_files_match_those_recorded_before_the_shared_engine(corpus):
    assert _plan_digests(corpus) == PLAN_DIGESTS


def test_sets_disjoint_and_transcripts_match_record(corpus):
    records = {r["utt"]: r for r in _manifest(corpus)}
    spk, txt = {}, {}
    for s in SETS:
        d = os.path.join(corpus, "lists", s)
        text, utt2spk, wavs = (_read_map(os.path.join(d, f)) for f in ("text", "utt2spk", "wav.scp"))
        assert len(text) == SIZES[s] and list(text) == sorted(text)
        assert set(text) == set(utt2spk) == set(wavs)
        for utt, words in text.items():
            rec = records[utt]
            assert rec["set"] == s and words == rec["text"] and rec["spoken"] == words.lower()
            assert not re.search(r"[0-9]|[^\w\s']", words), words
            assert utt2spk[utt] == rec["voice_id"] and utt.startswith(rec["voice_id"] + "-")
            assert os.path.isabs(wavs[utt])
        spk2utt = _read_map(os.path.join(d, "spk2utt"))
        assert {u: k for k, v in spk2utt.items() for u in v.split()} == utt2spk
        spk[s], txt[s] = set(utt2spk.values()), set(text.values())
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        assert not spk[a] & spk[b] and not txt[a] & txt[b]


def test_audio_format_and_content(corpus, tmp_path):
    records = _manifest(corpus)
    for rec in records:
        path = os.path.join(corpus, "wav", rec["set"], rec["utt"] + ".wav")
        info = sf.info(path)
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert info.frames == rec["num_samples"]
        wav, _ = sf.read(path, dtype="int16")
        assert 0.5 < len(wav) / 16000 < 6.0
        assert np.sqrt(np.mean(wav.astype(np.float64) ** 2)) > 300  # not silence
    # the audio is exactly what the record (text, voice, augmentation) produces
    for rec in (records[0], records[-1]):
        again = synthesize(rec, str(tmp_path))
        on_disk, _ = sf.read(os.path.join(corpus, "wav", rec["set"], rec["utt"] + ".wav"), dtype="int16")
        np.testing.assert_array_equal(again, on_disk)


def test_same_seed_identical_other_seed_differs(corpus, tmp_path):
    other = str(tmp_path / "same")
    generate_corpus(other, SEED, SIZES, nj=1)  # another job count: same bytes
    a, b = _snapshot(os.path.join(corpus, "wav")), _snapshot(os.path.join(other, "wav"))
    assert a.keys() == b.keys()
    assert all(a[k][1] == b[k][1] for k in a)
    for s in SETS:
        for f in ("text", "utt2spk", "spk2utt"):
            with open(os.path.join(corpus, "lists", s, f), "rb") as x, \
                    open(os.path.join(other, "lists", s, f), "rb") as y:
                assert x.read() == y.read()
    plan_a, plan_b = plan_corpus(SEED, SIZES), plan_corpus(SEED + 1, SIZES)
    assert {r["text"] for r in plan_a} != {r["text"] for r in plan_b}
    assert [r["augment"] for r in plan_a] != [r["augment"] for r in plan_b]
    assert {r["voice_id"] for r in plan_a} != {r["voice_id"] for r in plan_b}
    wav_a = synthesize(plan_a[0], str(tmp_path))
    wav_b = synthesize(plan_b[0], str(tmp_path))
    assert wav_a.shape != wav_b.shape or not np.array_equal(wav_a, wav_b)


def test_rerun_does_nothing_and_repairs(corpus, tmp_path):
    root = str(tmp_path / "c")
    generate_corpus(root, SEED, SIZES, nj=2)
    before = _snapshot(root)
    assert generate_corpus(root, SEED, SIZES, nj=2) == 0
    assert _snapshot(root) == before  # nothing rewritten, nothing added

    wavs = sorted(k for k in before if k.startswith("wav" + os.sep))
    deleted, truncated = wavs[3], wavs[40]
    os.remove(os.path.join(root, deleted))
    with open(os.path.join(root, truncated), "r+b") as f:
        f.truncate(len(before[truncated][1]) // 2)
    assert not wav_is_complete(os.path.join(root, truncated))
    assert generate_corpus(root, SEED, SIZES, nj=2) == 2
    after = _snapshot(root)
    for k in wavs:
        assert after[k][1] == before[k][1]
        if k not in (deleted, truncated):
            assert after[k][0] == before[k][0]  # untouched

    # an interrupted run (no marker, no manifest) is finished, not redone
    for name in ("COMPLETE", "manifest.json"):
        os.remove(os.path.join(root, name))
    os.remove(os.path.join(root, wavs[7]))
    assert generate_corpus(root, SEED, SIZES, nj=2) == 1
    assert os.path.exists(os.path.join(root, "COMPLETE"))
    assert [r["num_samples"] for r in _manifest(root)] == [r["num_samples"] for r in _manifest(corpus)]


def test_wav_is_complete_rejects_bad_files(tmp_path):
    good = str(tmp_path / "good.wav")
    sf.write(good, np.arange(1000, dtype=np.int16), 16000, subtype="PCM_16")
    assert wav_is_complete(good) and wav_is_complete(good, 1000) and not wav_is_complete(good, 999)
    for name, kwargs in (("stereo.wav", {"channels": 2}), ("rate.wav", {"rate": 8000})):
        path = str(tmp_path / name)
        data = np.zeros((100, kwargs.get("channels", 1)), dtype=np.int16)
        sf.write(path, data, kwargs.get("rate", 16000), subtype="PCM_16")
        assert not wav_is_complete(path)
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not a wav file at all, just text")
    assert not wav_is_complete(str(junk)) and not wav_is_complete(str(tmp_path / "missing.wav"))


def test_coloured_noise_spectrum_slope():
    rng = np.random.default_rng(0)
    n = 1 << 16
    for colour, slope in (("white", 0.0), ("pink", -1.0), ("brown", -2.0)):
        noise = coloured_noise(n, colour, rng)
        assert abs(np.mean(noise ** 2) - 1.0) < 1e-9
        psd = np.abs(np.fft.rfft(noise)) ** 2
        freqs = np.fft.rfftfreq(n)
        band = (freqs > 0.01) & (freqs < 0.4)  # above the brown-noise floor at 20 Hz
        fitted = np.polyfit(np.log(freqs[band]), np.log(psd[band]), 1)[0]
        assert abs(fitted - slope) < 0.05, (colour, fitted)


def test_augment_snr_speed_and_peak():
    t = np.arange(16000) / 16000
    clean = 0.5 * np.sin(2 * np.pi * 440 * t)
    params = AugmentParams(speed=1.0, pad_ms=(100, 50), noise="pink", snr_db=20.0, peak=0.5,
                           noise_seed=42)
    out = augment(clean, 16000, params).astype(np.float64)
    assert len(out) == 16000 + 1600 + 800
    assert abs(np.max(np.abs(out)) - 0.5 * 32767) <= 1
    padded = np.concatenate([np.zeros(1600), clean, np.zeros(800)])
    noise = coloured_noise(len(padded), "pink", np.random.default_rng(42))
    (a, b), *_ = np.linalg.lstsq(np.stack([padded, noise], 1), out, rcond=None)
    snr = 10 * np.log10(a ** 2 * np.mean(clean ** 2) / b ** 2)
    assert abs(snr - 20.0) < 0.05, snr
    # 10 % faster from a 22.05 kHz engine: resampled from 24,300 Hz to 16 kHz
    fast = augment(clean[:11025], 22050, AugmentParams(1.1, (0, 0), "white", 30.0, 0.9, 1))
    assert abs(len(fast) - 11025 * 16000 / 24300) <= 1


def test_data_prep_script_makes_valid_data_dirs(corpus, tmp_path):
    """... and replaces what another corpus's stage 0 left in the same data dirs (the
    speechocean762 recipe's spk2gender made a later broad-corpus stage 0 fail; a stale
    ``segments`` would silently cut every recording)."""
    data = str(tmp_path / "data")
    os.makedirs(os.path.join(data, "train"))
    for stale in ("spk2gender", "segments", "utt2dur"):
        with open(os.path.join(data, "train", stale), "w", encoding="utf-8") as f:
            f.write("other_speaker_or_utt f\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(
        [os.path.join(ROOT, "local", "synth_data_prep.sh"), "--nj", "2", "--seed", str(SEED),
         "--train_utts", "60", "--dev_utts", "10", "--test_utts", "10", corpus, data],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
    assert "nothing to do" in proc.stdout
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line.split() and line.split()[0] in SETS}
    for s in SETS:
        for f in ("text", "utt2spk", "spk2utt", "wav.scp"):
            with open(os.path.join(data, s, f), encoding="utf-8") as x, \
                    open(os.path.join(corpus, "lists", s, f), encoding="utf-8") as y:
                assert x.read() == y.read()
        kept = sorted(f for f in os.listdir(os.path.join(data, s)) if not f.startswith("."))
        assert kept == ["spk2utt", "text", "utt2spk", "wav.scp"]  # .backup: fix_data_dir.sh's
        utt2spk = _read_map(os.path.join(data, s, "utt2spk"))
        assert int(rows[s][1]) == SIZES[s] and int(rows[s][3]) == len(set(utt2spk.values()))

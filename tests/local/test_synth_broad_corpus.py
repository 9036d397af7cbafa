"""The broad corpus (local/synth_broad): voice and sentence hold-out, the size option,
simulation shares, determinism from the seed, reruns and the stage-0 script."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from local.synth.voices import ESPEAK_ACCENTS, SETS
from local.synth_broad import text as T
from local.synth_broad import voices as V
from local.synth_broad.generate import DEFAULT_HOURS, generate_corpus, synthesize
from local.synth_broad.plan import plan_corpus
from local.synth_broad.simulate import SIM_KINDS, parse_simulation, share_counts
from local.synth_broad.style import check_style_engines, parse_styles
from tests.common import REPO

INSTALLED = all(os.path.exists(marker) for _, marker in T.PACKAGE_MARKERS)
pytestmark = pytest.mark.skipif(
    not INSTALLED, reason="wordnet-base / fortunes / fortunes-min are not installed "
                          "(tools/install.sh installs them as root)")
SEED = 777
SMALL = {"hours": 0.03, "dev_utts": 4, "test_utts": 4}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """The extracted sentences' cache file, made once for the module."""
    path = str(tmp_path_factory.mktemp("text") / "sentences.tsv")
    T.load_sentences(path)
    return path


@pytest.fixture(scope="module")
def sentences(cache):
    return T.load_sentences(cache)


def _generate(root: str, cache: str, nj: int = 2, **changes) -> int:
    os.makedirs(os.path.join(root, "text"), exist_ok=True)
    if not os.path.exists(os.path.join(root, "text", "sentences.tsv")):
        shutil.copy(cache, os.path.join(root, "text", "sentences.tsv"))
    args = {**SMALL, **changes}
    return generate_corpus(root, SEED, args["hours"], args["dev_utts"], args["test_utts"],
                           args.get("simulation", "default"), nj, args.get("styles", "none"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, cache):
    root = str(tmp_path_factory.mktemp("broad") / "corpus")
    assert _generate(root, cache) > 0
    return root


def _manifest(root):
    with open(os.path.join(root, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def test_voice_split_holds_out_new_pairs_of_seen_ingredients():
    voices = V.split_voices(SEED)
    n_pairs = len(ESPEAK_ACCENTS) * len(V.ESPEAK_VARIANTS)
    held = len(ESPEAK_ACCENTS) * V.HELD_OUT_PER_ACCENT
    assert len(voices["train"]["espeak"]) == (n_pairs - 2 * held) * V.SETTINGS_PER_PAIR
    for s in ("dev", "test"):
        assert len(voices[s]["espeak"]) == held * V.SETTINGS_PER_PAIR
        assert len(voices[s]["flite"]) == len(V.FLITE_F0)
    ids = {s: {v.voice_id for e in voices[s].values() for v in e} for s in SETS}
    assert not ids["train"] & ids["dev"] and not ids["train"] & ids["test"] \
        and not ids["dev"] & ids["test"]
    train_pairs = {(v.name, v.variant) for v in voices["train"]["espeak"]}
    train_flite = {(v.name, v.rate, v.pitch) for v in voices["train"]["flite"]}
    for s in ("dev", "test"):
        for v in voices[s]["espeak"]:
            assert (v.name, v.variant) not in train_pairs
            assert any(a == v.name for a, _ in train_pairs)
            assert any(b == v.variant for _, b in train_pairs)
        for v in voices[s]["flite"]:
            assert (v.name, v.rate, v.pitch) not in train_flite
            assert any(f[0] == v.name for f in train_flite)


def test_plan_holds_out_sentences_and_voices_and_keeps_dev_test_across_sizes(sentences):
    shares = parse_simulation("default")
    small = plan_corpus(sentences, SEED, 0.3, 60, 60, shares)
    large = plan_corpus(sentences, SEED, 1.0, 60, 60, shares)
    by_set = {s: [r for r in small if r["set"] == s] for s in SETS}
    texts = {s: {r["text"] for r in by_set[s]} for s in SETS}
    spk = {s: {r["voice_id"] for r in by_set[s]} for s in SETS}
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        assert not texts[a] & texts[b] and not spk[a] & spk[b]
    assert len({r["text"] for r in small}) == len(small)
    for r in small:
        assert r["utt"].startswith(r["voice_id"] + "-")
    # dev and test do not depend on the training size; training grows by appending
    assert [r for r in large if r["set"] != "train"] == [r for r in small if r["set"] != "train"]
    large_train = {r["utt"]: r for r in large if r["set"] == "train"}
    assert all(large_train[r["utt"]] == r for r in by_set["train"])


@pytest.mark.parametrize("hours", [0.25, 1.0, 3.0])
def test_size_option_plans_the_requested_hours(sentences, hours):
    records = plan_corpus(sentences, SEED, hours, 10, 10, parse_simulation("default"))
    planned = sum(r["est_seconds"] for r in records if r["set"] == "train") / 3600
    assert abs(planned - hours) / hours < 0.02, planned


def test_default_size_has_a_broad_training_vocabulary(sentences):
    records = plan_corpus(sentences, SEED, DEFAULT_HOURS, 300, 300, parse_simulation("default"))
    train = [r for r in records if r["set"] == "train"]
    assert len(T.vocabulary(r["text"] for r in train)) >= 10_000
    assert len({r["voice_id"] for r in train}) >= 1_500


def test_simulation_shares_follow_the_request(sentences):
    default = plan_corpus(sentences, SEED, 2.0, 10, 10, parse_simulation("default"))
    train = [r for r in default if r["set"] == "train"]
    shares = share_counts(train)["train"]
    wanted = parse_simulation("default")
    for kind in SIM_KINDS:  # within 4 binomial standard deviations
        sd = math.sqrt(max(wanted[kind] * (1 - wanted[kind]), 1e-9) / len(train))
        assert abs(shares[kind] - wanted[kind]) <= 4 * sd + 1e-9, (kind, shares[kind])
    off = plan_corpus(sentences, SEED, 2.0, 10, 10, parse_simulation("none"))
    assert all(v == 0 for s in share_counts(off).values() for v in s.values())
    no_babble = plan_corpus(sentences, SEED, 2.0, 10, 10, parse_simulation("default,babble=0"))
    assert share_counts(no_babble)["train"]["babble"] == 0
    for a, b in zip(default, no_babble):  # switching one kind off leaves the others' draws
        assert a["utt"] == b["utt"] and a["sim"]["rir"] == b["sim"]["rir"]
        assert a["sim"]["channel"] == b["sim"]["channel"]


def test_corpus_size_lists_audio_and_manifest(corpus):
    manifest = _manifest(corpus)
    records = manifest["utterances"]
    train_hours = sum(r["num_samples"] for r in records if r["set"] == "train") / 16000 / 3600
    assert abs(train_hours - SMALL["hours"]) / SMALL["hours"] < 0.15, train_hours
    assert manifest["statistics"]["train"]["hours"] == pytest.approx(train_hours, abs=1e-4)
    assert set(manifest["simulation_shares"]) == set(SETS)
    assert manifest["synthesis"]["utterances"] == len(records)
    for s in SETS:
        d = os.path.join(corpus, "lists", s)
        with open(os.path.join(d, "text"), encoding="utf-8") as f:
            text = dict(line.rstrip("\n").split(" ", 1) for line in f)
        recs = {r["utt"]: r for r in records if r["set"] == s}
        assert list(text) == sorted(text) and set(text) == set(recs)
        assert all(text[u] == recs[u]["text"] for u in text)
    for r in records:
        info = sf.info(os.path.join(corpus, "wav", r["set"], r["utt"] + ".wav"))
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert info.frames == r["num_samples"]


def test_same_seed_same_audio_bytes(corpus, cache, tmp_path):
    other = str(tmp_path / "again")
    _generate(other, cache, nj=1)  # another job count: the same bytes
    for sub in ["babble"] + [os.path.join("wav", s) for s in SETS]:
        names = sorted(os.listdir(os.path.join(corpus, sub)))
        assert names == sorted(os.listdir(os.path.join(other, sub)))
        for name in names:
            assert Path(corpus, sub, name).read_bytes() == Path(other, sub, name).read_bytes()
    # and a record alone reproduces its audio (babble, room and channel included)
    records = _manifest(corpus)["utterances"]
    picked = [next(r for r in records if r["sim"][k]) for k in ("noise", "rir", "channel")]
    for r in picked:
        on_disk, _ = sf.read(os.path.join(corpus, "wav", r["set"], r["utt"] + ".wav"), dtype="int16")
        np.testing.assert_array_equal(synthesize(r, corpus, str(tmp_path)), on_disk)


def test_styled_corpus_same_seed_same_audio(cache, tmp_path):
    """Every style at once (natural voices where installed): the manifest keeps each
    record's style, the plain corpus's hash does not change, and another job count
    gives the same bytes."""
    natural = 0.3
    try:
        check_style_engines({"natural": natural})
    except ValueError:
        natural = 0.0
    spec = f"child=0.5,accent=0.7,reading=0.5,natural={natural}"
    roots = [str(tmp_path / f"s{nj}") for nj in (2, 1)]
    for root, nj in zip(roots, (2, 1)):
        assert _generate(root, cache, nj=nj, styles=spec, simulation="none", hours=0.01) > 0
    manifest = _manifest(roots[0])
    assert manifest["config"]["styles"] == parse_styles(spec)
    kinds = {k for r in manifest["utterances"] for k in (r["style"] or {})}
    assert kinds == {"child", "accent", "reading"}
    if natural:
        assert {r["voice"]["engine"] for r in manifest["utterances"]} >= {"festival", "piper"}
    for s in SETS:
        names = sorted(os.listdir(os.path.join(roots[0], "wav", s)))
        assert names == sorted(os.listdir(os.path.join(roots[1], "wav", s)))
        for name in names:
            assert Path(roots[0], "wav", s, name).read_bytes() == Path(roots[1], "wav", s, name).read_bytes()


def test_rerun_does_nothing_then_repairs(corpus, cache, tmp_path):
    root = str(tmp_path / "c")
    shutil.copytree(corpus, root)
    assert _generate(root, cache) == 0
    wav = sorted(Path(root, "wav", "train").iterdir())[2]
    before = wav.read_bytes()
    wav.unlink()
    assert _generate(root, cache) == 1
    assert wav.read_bytes() == before


def test_stage0_script_makes_data_dirs(corpus, tmp_path):
    data = str(tmp_path / "data")
    proc = subprocess.run(
        [os.path.join(REPO, "local", "synth_broad_data_prep.sh"), "--nj", "2", "--seed", str(SEED),
         "--hours", str(SMALL["hours"]), "--dev_utts", "4", "--test_utts", "4", corpus, data],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
    assert "nothing to do" in proc.stdout
    for s in SETS:
        for f in ("text", "utt2spk", "spk2utt", "wav.scp"):
            assert Path(data, s, f).read_text() == Path(corpus, "lists", s, f).read_text()

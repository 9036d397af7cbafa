"""local/speechocean762_data_prep.sh on a tiny fake corpus in the release layout."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import soundfile as sf
from tests.common import ROOT_PATH

ROOT = ROOT_PATH
PREP = ROOT / "local" / "speechocean762_data_prep.sh"
RATE = 16000

# (speaker, gender, [(utt, raw transcript)])
TRAIN = [
    ("0003", "M", [("000030001", "we call it bear."), ("000030002", "Don't go!")]),
    ("0001", "f", [("000010001", "ZERO  THREE"), ("000010002", "it's ok")]),
    ("0007", "m", [("000070001", "LET'S GO"), ("000070002", "yes,   no")]),
    ("0012", "f", [("000120001", "hello"), ("000120002", "HELLO")]),
    ("0009", "m", [("000090001", "cat"), ("000090002", "dog")]),
    ("0005", "f", [("000050001", "a b"), ("000050002", "c d")]),
]
TEST = [("0100", "m", [("001000001", "one"), ("001000002", "two")])]


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT)
    env["LC_ALL"] = "C"
    return env


def make_corpus(root: Path, lists: Dict[str, list], ext: Dict[str, str]) -> Dict[str, float]:
    """Writes the release layout; returns the audio length per utterance in seconds."""
    lengths = {}
    rng = np.random.default_rng(0)
    for name, speakers in lists.items():
        d = root / name
        d.mkdir(parents=True)
        wav, text, u2s, s2u, s2g = [], [], [], [], []
        for spk, gender, utts in speakers:
            s2u.append(f"{spk} " + " ".join(u for u, _ in utts))
            s2g.append(f"{spk}\t{gender}")
            for utt, words in utts:
                seconds = 0.25 + 0.05 * len(lengths)
                lengths[utt] = seconds
                rel = f"WAVE/SPEAKER{spk}/{utt}.{ext[name]}"
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                audio = (0.1 * rng.standard_normal(int(seconds * RATE))).astype(np.float32)
                sf.write(root / rel, audio, RATE, subtype="PCM_16")
                wav.append(f"{utt}\t{rel}")
                text.append(f"{utt}\t{words}")
                u2s.append(f"{utt} {spk}")
        # The release's files are sorted; keep them so (speaker ids are utt prefixes).
        for fname, lines in (("wav.scp", wav), ("text", text), ("utt2spk", u2s),
                             ("spk2utt", s2u), ("spk2gender", s2g)):
            (d / fname).write_text("".join(line + "\n" for line in sorted(lines)))
    return lengths


def read_dir(d: Path) -> Dict[str, str]:
    return {p.name: p.read_text() for p in sorted(d.iterdir()) if p.is_file()}


def expected_dir(corpus: Path, speakers: List[Tuple[str, str, list]], ext: str) -> Dict[str, str]:
    """The data dir written by hand from the speaker table (normalised text below)."""
    norm = {
        "we call it bear.": "WE CALL IT BEAR", "Don't go!": "DON'T GO", "ZERO  THREE": "ZERO THREE",
        "it's ok": "IT'S OK", "LET'S GO": "LET'S GO", "yes,   no": "YES NO", "hello": "HELLO",
        "HELLO": "HELLO", "cat": "CAT", "dog": "DOG", "a b": "A B", "c d": "C D",
        "one": "ONE", "two": "TWO",
    }
    rows = sorted((u, spk, g, w) for spk, g, utts in speakers for u, w in utts)
    spks = sorted((spk, g, utts) for spk, g, utts in speakers)
    real = os.path.realpath(corpus)
    return {
        "spk2gender": "".join(f"{s} {g.lower()}\n" for s, g, _ in spks),
        "spk2utt": "".join(f"{s} " + " ".join(sorted(u for u, _ in utts)) + "\n" for s, _, utts in spks),
        "text": "".join(f"{u} {norm[w]}\n" for u, _, _, w in rows),
        "utt2spk": "".join(f"{u} {s}\n" for u, s, _, _ in rows),
        "wav.scp": "".join(f"{u} {real}/WAVE/SPEAKER{s}/{u}.{ext}\n" for u, s, _, _ in rows),
    }


def run_prep(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(PREP), *map(str, args)], capture_output=True, text=True,
                          env=_env())


def test_without_dev_takes_whole_speakers_out_of_train(tmp_path: Path):
    corpus = tmp_path / "so762"
    lengths = make_corpus(corpus, {"train": TRAIN, "test": TEST}, {"train": "WAV", "test": "flac"})
    out = tmp_path / "data"
    r = run_prep("--num_dev_spk", 2, corpus, out)
    assert r.returncode == 0, r.stderr
    # Sorted speakers 0001 0003 0005 0007 0009 0012: evenly spread picks 0003 and 0009.
    dev = [t for t in TRAIN if t[0] in ("0003", "0009")]
    train = [t for t in TRAIN if t[0] not in ("0003", "0009")]
    assert read_dir(out / "dev") == expected_dir(corpus, dev, "WAV")
    assert read_dir(out / "train") == expected_dir(corpus, train, "WAV")
    assert read_dir(out / "test") == expected_dir(corpus, TEST, "flac")
    assert sorted(p.name for p in out.iterdir()) == ["dev", "test", "train"]
    # Counts and durations reported per set.
    secs = {name: sum(lengths[u] for _, _, utts in spk for u, _ in utts)
            for name, spk in (("train", train), ("dev", dev), ("test", TEST))}
    for name, n_utt, n_spk in (("train", 8, 4), ("dev", 4, 2), ("test", 2, 1)):
        assert (f"{out}/{name}: {n_utt} utterances, {secs[name] / 3600:.2f} hours "
                f"({secs[name]:.1f} s), {n_spk} speakers") in r.stderr
    # Rerunning gives the same files.
    first = {s: read_dir(out / s) for s in ("train", "dev", "test")}
    assert run_prep("--num_dev_spk", 2, corpus, out).returncode == 0
    assert {s: read_dir(out / s) for s in ("train", "dev", "test")} == first


def test_with_dev_list_and_no_test(tmp_path: Path):
    corpus = tmp_path / "so762"
    make_corpus(corpus, {"train": TRAIN[:4], "dev": TRAIN[4:]}, {"train": "flac", "dev": "flac"})
    out = tmp_path / "data"
    (out / "test").mkdir(parents=True)  # stale set from an earlier run
    r = run_prep(corpus, out)
    assert r.returncode == 0, r.stderr
    assert read_dir(out / "train") == expected_dir(corpus, TRAIN[:4], "flac")
    assert read_dir(out / "dev") == expected_dir(corpus, TRAIN[4:], "flac")
    assert not (out / "test").exists()


def test_missing_audio_and_missing_corpus_fail_clearly(tmp_path: Path):
    corpus = tmp_path / "so762"
    make_corpus(corpus, {"train": TRAIN[:3], "dev": TRAIN[3:]}, {"train": "WAV", "dev": "WAV"})
    (corpus / "WAVE" / "SPEAKER0007" / "000070002.WAV").unlink()
    r = run_prep(corpus, tmp_path / "data")
    assert r.returncode != 0
    assert "audio of utterance 000070002 not found" in r.stderr
    r = run_prep(tmp_path / "nowhere", tmp_path / "data")
    assert r.returncode != 0
    assert "nowhere/train/wav.scp not found" in r.stderr and "--download true" in r.stderr

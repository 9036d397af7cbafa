"""Kaldi data-directory tools (tools/*_data_dir.sh, remove_dup_utts.sh) and
tools/normalize_text.py, checked against hand-written expected directories."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from tests.common import ROOT_PATH

ROOT = ROOT_PATH
TOOLS = ROOT / "tools"
sys.path.insert(0, str(TOOLS))
from normalize_text import normalize_transcript  # noqa: E402


def write_dir(d: Path, files: Dict[str, str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return d


def read_dir(d: Path) -> Dict[str, str]:
    return {p.name: p.read_text() for p in sorted(d.iterdir()) if p.is_file()}


def run(*cmd) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True)


# A valid, sorted directory used by several tests.
GOOD = {
    "wav.scp": "a1 /w/a1.wav\na2 /w/a2.wav\nb1 sox /w/b1.flac -t wav - |\nc1 /w/c1.wav\n",
    "text": "a1 HELLO WORLD\na2 YES\nb1 NO\nc1 YES\n",
    "utt2spk": "a1 spkA\na2 spkA\nb1 spkB\nc1 spkC\n",
    "spk2utt": "spkA a1 a2\nspkB b1\nspkC c1\n",
    "spk2gender": "spkA f\nspkB m\nspkC f\n",
}

# Segmented: three recordings, five segments.
SEG = {
    "wav.scp": "r1 /w/r1.wav\nr2 /w/r2.wav\nr3 /w/r3.wav\n",
    "segments": "r1-001 r1 0.00 1.50\nr1-002 r1 1.50 3.00\nr2-001 r2 0.0 2.0\n"
                "r3-001 r3 0.5 1.0\nr3-002 r3 1.0 2.5\n",
    "text": "r1-001 ONE\nr1-002 TWO\nr2-001 THREE\nr3-001 FOUR\nr3-002 FIVE\n",
    "utt2spk": "r1-001 r1\nr1-002 r1\nr2-001 r2\nr3-001 r3\nr3-002 r3\n",
    "spk2utt": "r1 r1-001 r1-002\nr2 r2-001\nr3 r3-001 r3-002\n",
}


# ---------------------------------------------------------------- normalize_text

@pytest.mark.parametrize("raw, expected", [
    ("Hello,   world!", "HELLO WORLD"),
    ("don't  stop", "DON'T STOP"),
    ("it\u2019s O'Clock.", "IT'S O'CLOCK"),
    ("'quoted' dogs' bone", "QUOTED DOGS BONE"),
    ("well-known (really?)", "WELL KNOWN REALLY"),
    ("[noise] uh, [VOCALIZED-NOISE]yes [laughter].", "[NOISE] UH [VOCALIZED-NOISE] YES [LAUGHTER]"),
    ("caf\u00e9 na\u00efve", "CAF\u00c9 NA\u00cfVE"),
    ("  ...  ", ""),
])
def test_normalize_transcript(raw: str, expected: str):
    assert normalize_transcript(raw) == expected


def test_normalize_text_cli_keeps_keys(tmp_path: Path):
    src = tmp_path / "text"
    src.write_text("utt-B\tHi there,  you!\nUtt_a\t[noise] ok.\n\nutt-c ?!\n")
    expected = "utt-B HI THERE YOU\nUtt_a [NOISE] OK\nutt-c\n"
    r = run(sys.executable, TOOLS / "normalize_text.py", src)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected
    assert "skipped 1 blank lines" in r.stderr
    assert "empty transcript, first at" in r.stderr and ":4 (utt-c)" in r.stderr
    piped = subprocess.run([sys.executable, str(TOOLS / "normalize_text.py")], input=src.read_text(),
                           capture_output=True, text=True)
    assert piped.stdout == expected


def test_normalize_text_rejects_bad_utf8_naming_the_line(tmp_path: Path):
    src = tmp_path / "text"
    src.write_bytes(b"u1 fine\nu2 bad \xff\xfe\n")
    r = run(sys.executable, TOOLS / "normalize_text.py", src)
    assert r.returncode == 1
    assert f"{src}:2: not valid UTF-8" in r.stderr


# ---------------------------------------------------------------- fix_data_dir.sh

def test_fix_data_dir_drops_incomplete_utterances(tmp_path: Path):
    d = write_dir(tmp_path / "d", {
        # unsorted, a1 duplicated, b2 missing from text, c1 with an empty transcript,
        # d1 missing from wav.scp, e1 only in text
        "wav.scp": "b2 /w/b2.wav\na1 /w/a1.wav\nc1 /w/c1.wav\na2 /w/a2.wav\nb1 /w/b1.wav\n",
        "text": "a2 YES\na1 HELLO\nb1 NO\nc1\nd1 LOST\ne1 ORPHAN\na1 SECOND COPY\n",
        "utt2spk": "a1 spkA\na2 spkA\nb1 spkB\nb2 spkB\nc1 spkC\nd1 spkD\n",
        "spk2utt": "spkA a1\n",
        "spk2gender": "spkD m\nspkB m\nspkA f\nspkC f\n",
    })
    originals = read_dir(d)
    r = run(TOOLS / "fix_data_dir.sh", d)
    assert r.returncode == 0, r.stderr
    assert read_dir(d) == {
        "wav.scp": "a1 /w/a1.wav\na2 /w/a2.wav\nb1 /w/b1.wav\n",
        "text": "a1 HELLO\na2 YES\nb1 NO\n",
        "utt2spk": "a1 spkA\na2 spkA\nb1 spkB\n",
        "spk2utt": "spkA a1 a2\nspkB b1\n",
        "spk2gender": "spkA f\nspkB m\n",
    }
    assert (f"{d}: kept 3 of 7 utterances; dropped 4: 1 not in utt2spk, 1 not in text, "
            "1 empty transcript, 1 not in wav.scp") in r.stdout
    assert "text: dropped 1 lines whose key was already seen" in r.stderr
    assert read_dir(d / ".backup") == originals
    # Idempotent: a second run changes nothing, and the result validates.
    fixed = read_dir(d)
    assert run(TOOLS / "fix_data_dir.sh", d).returncode == 0
    assert read_dir(d) == fixed
    assert run(TOOLS / "validate_data_dir.sh", d).returncode == 0


def test_fix_data_dir_with_segments(tmp_path: Path):
    files = dict(SEG)
    files["wav.scp"] = "r1 /w/r1.wav\nr3 /w/r3.wav\nr4 /w/r4.wav\n"     # r2 missing, r4 unused
    files["text"] = SEG["text"].replace("r3-001 FOUR", "r3-001")     # empty transcript
    files["utt2spk"] = SEG["utt2spk"] + "r5-001 r5\n"                 # no segment
    d = write_dir(tmp_path / "d", files)
    r = run(TOOLS / "fix_data_dir.sh", d)
    assert r.returncode == 0, r.stderr
    assert read_dir(d) == {
        "wav.scp": "r1 /w/r1.wav\nr3 /w/r3.wav\n",
        "segments": "r1-001 r1 0.00 1.50\nr1-002 r1 1.50 3.00\nr3-002 r3 1.0 2.5\n",
        "text": "r1-001 ONE\nr1-002 TWO\nr3-002 FIVE\n",
        "utt2spk": "r1-001 r1\nr1-002 r1\nr3-002 r3\n",
        "spk2utt": "r1 r1-001 r1-002\nr3 r3-002\n",
    }
    assert ("kept 3 of 6 utterances; dropped 3: 1 not in text, 1 empty transcript, "
            "1 recording not in wav.scp") in r.stdout
    assert "dropped 1 of 3 recordings no kept segment uses" in r.stdout


def test_fix_data_dir_fails_when_nothing_is_left(tmp_path: Path):
    d = write_dir(tmp_path / "d", {"wav.scp": "a /a.wav\n", "text": "b HI\n", "utt2spk": "a s\nb s\n"})
    r = run(TOOLS / "fix_data_dir.sh", d)
    assert r.returncode == 1
    assert "no utterances left" in r.stderr


# ---------------------------------------------------------------- validate_data_dir.sh

def test_validate_accepts_good_dirs(tmp_path: Path):
    for name, files in (("good", GOOD), ("seg", SEG)):
        r = run(TOOLS / "validate_data_dir.sh", write_dir(tmp_path / name, files))
        assert r.returncode == 0, r.stderr
        assert "is valid" in r.stdout


@pytest.mark.parametrize("change, message", [
    # unsorted text: b1 and a2 swapped
    ({"text": "a1 HELLO WORLD\nb1 NO\na2 YES\nc1 YES\n"},
     "text:3: key a2 comes after b1: not sorted in the C locale"),
    # C-locale order puts upper case first: 'B' < 'a'
    ({"spk2gender": "spkA f\nspkB m\nspkC f\nSPKD m\n"}, "spk2gender:4: key SPKD comes after spkC"),
    ({"wav.scp": GOOD["wav.scp"].replace("a2 /w/a2.wav", "a1 /w/a2.wav")}, "wav.scp:2: duplicate key a1"),
    ({"text": "a1 HELLO WORLD\na2\nb1 NO\nc1 YES\n"}, "text:2: empty transcript"),
    ({"text": "a1 HELLO WORLD\na2 YES\nc1 YES\n"}, "utt2spk:3: b1 is missing from"),
    ({"wav.scp": GOOD["wav.scp"] + "d1 /w/d1.wav\n"}, "wav.scp:5: d1 is not in"),
    ({"spk2utt": "spkA a1\nspkB a2 b1\nspkC c1\n"},
     "utt2spk:2: utterance a2 has speaker spkA but"),
    ({"utt2spk": "a1 spkA\na2 spkA extra\nb1 spkB\nc1 spkC\n"}, "utt2spk:2: expected"),
    ({"text": b"a1 HELLO WORLD\na2 YES\nb1 N\xc3O\nc1 YES\n"}, "text:3: not valid UTF-8"),
    ({"text": "a1 HELLO WORLD\r\na2 YES\nb1 NO\nc1 YES\n"}, "text:1: carriage return"),
    ({"spk2gender": "spkA f\nspkB x\nspkC f\n"}, "spk2gender:2: expected"),
])
def test_validate_rejects_naming_file_and_line(tmp_path: Path, change, message):
    files = dict(GOOD)
    files.update(change)
    d = write_dir(tmp_path / "d", files)
    r = run(TOOLS / "validate_data_dir.sh", d)
    assert r.returncode == 1
    assert f"{d}/{message}" in r.stderr


def test_validate_segments_and_switches(tmp_path: Path):
    files = dict(SEG)
    files["wav.scp"] = "r1 /w/r1.wav\nr3 /w/r3.wav\n"
    d = write_dir(tmp_path / "seg", files)
    r = run(TOOLS / "validate_data_dir.sh", d)
    assert r.returncode == 1
    assert f"{d}/segments:3: recording r2 of segment r2-001 is not in {d}/wav.scp" in r.stderr
    files = dict(SEG)
    files["segments"] = SEG["segments"].replace("r2 0.0 2.0", "r2 2.0 2.0")
    r = run(TOOLS / "validate_data_dir.sh", write_dir(tmp_path / "seg2", files))
    assert r.returncode == 1 and "segments:3: end is not after start" in r.stderr
    # --no-text / --no-wav allow those files to be absent, not otherwise.
    files = {k: v for k, v in GOOD.items() if k not in ("text", "wav.scp")}
    d = write_dir(tmp_path / "bare", files)
    r = run(TOOLS / "validate_data_dir.sh", d)
    assert r.returncode == 1 and f"{d}/text does not exist" in r.stderr
    assert run(TOOLS / "validate_data_dir.sh", "--no-text", "--no-wav", d).returncode == 0


# ---------------------------------------------------------------- subset_data_dir.sh

@pytest.mark.parametrize("opts, expected", [
    (["--first", "2"], {
        "wav.scp": "a1 /w/a1.wav\na2 /w/a2.wav\n", "text": "a1 HELLO WORLD\na2 YES\n",
        "utt2spk": "a1 spkA\na2 spkA\n", "spk2utt": "spkA a1 a2\n", "spk2gender": "spkA f\n"}),
    (["--last", "2"], {
        "wav.scp": "b1 sox /w/b1.flac -t wav - |\nc1 /w/c1.wav\n", "text": "b1 NO\nc1 YES\n",
        "utt2spk": "b1 spkB\nc1 spkC\n", "spk2utt": "spkB b1\nspkC c1\n",
        "spk2gender": "spkB m\nspkC f\n"}),
    (["--utt-list", "LIST"], {
        "wav.scp": "a2 /w/a2.wav\nc1 /w/c1.wav\n", "text": "a2 YES\nc1 YES\n",
        "utt2spk": "a2 spkA\nc1 spkC\n", "spk2utt": "spkA a2\nspkC c1\n",
        "spk2gender": "spkA f\nspkC f\n"}),
    (["--spk-list", "LIST"], {
        "wav.scp": "a1 /w/a1.wav\na2 /w/a2.wav\nc1 /w/c1.wav\n",
        "text": "a1 HELLO WORLD\na2 YES\nc1 YES\n",
        "utt2spk": "a1 spkA\na2 spkA\nc1 spkC\n", "spk2utt": "spkA a1 a2\nspkC c1\n",
        "spk2gender": "spkA f\nspkC f\n"}),
])
def test_subset_data_dir(tmp_path: Path, opts, expected):
    src = write_dir(tmp_path / "src", GOOD)
    lst = tmp_path / "list"
    # --utt-list reads utterance ids, --spk-list speaker ids; unknown ids are ignored.
    lst.write_text("c1\na2\nzz9\n" if opts[0] == "--utt-list" else "spkC x\nspkA\n")
    opts = [str(lst) if o == "LIST" else o for o in opts]
    dest = tmp_path / "dest"
    r = run(TOOLS / "subset_data_dir.sh", *opts, src, dest)
    assert r.returncode == 0, r.stderr
    assert read_dir(dest) == expected
    assert read_dir(src) == GOOD


def test_subset_data_dir_with_segments(tmp_path: Path):
    src = write_dir(tmp_path / "src", SEG)
    lst = tmp_path / "utts"
    lst.write_text("r3-002\nr1-001\n")
    dest = tmp_path / "dest"
    r = run(TOOLS / "subset_data_dir.sh", "--utt-list", lst, src, dest)
    assert r.returncode == 0, r.stderr
    assert read_dir(dest) == {
        "wav.scp": "r1 /w/r1.wav\nr3 /w/r3.wav\n",
        "segments": "r1-001 r1 0.00 1.50\nr3-002 r3 1.0 2.5\n",
        "text": "r1-001 ONE\nr3-002 FIVE\n",
        "utt2spk": "r1-001 r1\nr3-002 r3\n",
        "spk2utt": "r1 r1-001\nr3 r3-002\n",
    }
    r = run(TOOLS / "subset_data_dir.sh", "--first", "3", src, tmp_path / "first3")
    assert read_dir(tmp_path / "first3")["wav.scp"] == "r1 /w/r1.wav\nr2 /w/r2.wav\n"


def test_subset_data_dir_rejects_bad_requests(tmp_path: Path):
    src = write_dir(tmp_path / "src", GOOD)
    r = run(TOOLS / "subset_data_dir.sh", "--first", "5", src, tmp_path / "x")
    assert r.returncode == 1 and "has only 4 utterances" in r.stderr
    r = run(TOOLS / "subset_data_dir.sh", "--first", "1", "--last", "1", src, tmp_path / "x")
    assert r.returncode == 1 and "exactly one of" in r.stderr
    r = run(TOOLS / "subset_data_dir.sh", "--frist", "1", src, tmp_path / "x")
    assert r.returncode == 1 and "unknown option --frist" in r.stderr


# ---------------------------------------------------------------- remove_dup_utts.sh

def test_remove_dup_utts_keeps_first_max_per_transcript(tmp_path: Path):
    src = write_dir(tmp_path / "src", {
        "wav.scp": "".join(f"u{i} /w/u{i}.wav\n" for i in range(1, 8)),
        # four "UH HUH" (one with extra spaces), two "YEAH", one unique
        "text": "u1 YEAH\nu2 UH HUH\nu3 UH  HUH\nu4 YEAH\nu5 UH HUH\nu6 HELLO THERE\nu7 UH HUH\n",
        "utt2spk": "".join(f"u{i} s{i % 2}\n" for i in range(1, 8)),
        "spk2utt": "s0 u2 u4 u6\ns1 u1 u3 u5 u7\n",
    })
    dest = tmp_path / "nodup"
    r = run(TOOLS / "data" / "remove_dup_utts.sh", 2, src, dest)
    assert r.returncode == 0, r.stderr
    assert read_dir(dest) == {
        "wav.scp": "u1 /w/u1.wav\nu2 /w/u2.wav\nu3 /w/u3.wav\nu4 /w/u4.wav\nu6 /w/u6.wav\n",
        "text": "u1 YEAH\nu2 UH HUH\nu3 UH  HUH\nu4 YEAH\nu6 HELLO THERE\n",
        "utt2spk": "u1 s1\nu2 s0\nu3 s1\nu4 s0\nu6 s0\n",
        "spk2utt": "s0 u2 u4 u6\ns1 u1 u3\n",
    }
    assert "removed 2 of 7 utterances" in r.stdout
    r = run(TOOLS / "data" / "remove_dup_utts.sh", 0, src, dest)
    assert r.returncode == 1 and "positive integer" in r.stderr

"""One tiny corpus written in every form stage 0 of ``--corpus custom`` reads.

The corpus: 5 speakers, each with one recording (tones over noise, 16 kHz) of two
utterances; train holds 3 speakers, dev and test one each. ``SEGMENTED`` forms (Kaldi
dirs with segments, TSV, CSV, NeMo JSON lines, lhotse) describe the recordings and their
segments; ``WHOLE`` forms (Common Voice with mp3, audiofolder, LibriSpeech tree) hold each
utterance as its own file, cut from the same recordings. Each form comes with the Kaldi
form of the same audio (``kaldi`` or ``kaldi_whole``/``kaldi_mp3``), the reference the
tests compare it against. Keys are chosen as each form's reader derives them when the
form has no id column (the audio file's name; plus start and end in ms for a segment).
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import soundfile as sf

RATE = 16000
SETS = {"train": ["s1", "s2", "s3"], "dev": ["s4"], "test": ["s5"]}
TEXTS = ["Hello, world!", "a cat sat", "the red dog", "good day", "one two",
         "it's three", "four five", "six seven", "eight nine", "ten again"]
# (start, end) of each speaker's two utterances in their 2.0 s recording
CUTS = [(0.1, 0.9), (1.0, 1.95)]


def _speakers() -> List[str]:
    return [s for spks in SETS.values() for s in spks]


def utterances(set_name: str) -> List[Tuple[str, str, str, float, float, str]]:
    """(key, speaker, recording, start, end, text) of a set, in the segmented forms."""
    out = []
    for spk in SETS[set_name]:
        i = _speakers().index(spk)
        for j, (start, end) in enumerate(CUTS):
            rec = f"{spk}rec"
            key = f"{rec}-{round(start * 1000):08d}-{round(end * 1000):08d}"
            out.append((key, spk, rec, start, end, TEXTS[2 * i + j]))
    return out


def write_recordings(d: Path) -> Dict[str, Path]:
    """``d/audio/<spk>rec.wav`` for every speaker; {recording: path}."""
    rng = np.random.default_rng(0)
    (d / "audio").mkdir(parents=True, exist_ok=True)
    out = {}
    for i, spk in enumerate(_speakers()):
        t = np.arange(int(2.0 * RATE)) / RATE
        wav = 0.3 * np.sin(2 * np.pi * (200 + 90 * i) * t) + 0.05 * rng.standard_normal(t.size)
        path = d / "audio" / f"{spk}rec.wav"
        sf.write(path, wav.astype(np.float32), RATE, subtype="PCM_16")
        out[f"{spk}rec"] = path
    return out


def _write(path: Path, lines: List[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def kaldi(d: Path, recs: Dict[str, Path], pipes: bool = False) -> Path:
    """Kaldi data dirs with segments (absolute paths, or ``cat PATH |`` with ``pipes``)."""
    for name in SETS:
        utts = utterances(name)
        audio = {r: f"cat {recs[r]} |" if pipes else str(recs[r]) for r in recs}
        _write(d / name / "wav.scp", sorted({f"{r} {audio[r]}" for _, _, r, _, _, _ in utts}))
        _write(d / name / "segments", [f"{k} {r} {s} {e}" for k, _, r, s, e, _ in utts])
        _write(d / name / "text", [f"{k} {t}" for k, _, _, _, _, t in utts])
        _write(d / name / "utt2spk", [f"{k} {spk}" for k, spk, _, _, _, _ in utts])
    return d


def table(d: Path, recs: Dict[str, Path], suffix: str) -> Path:
    """``d/<set>.tsv`` or ``.csv``: path relative to the manifest, start, end, text, speaker."""
    d.mkdir(parents=True, exist_ok=True)
    for name in SETS:
        with open(d / f"{name}{suffix}", "w", newline="", encoding="utf-8") as f:
            if suffix == ".tsv":
                w = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n")
            else:
                w = csv.writer(f, lineterminator="\n")
            w.writerow(["path", "start", "end", "sentence", "speaker"])
            for _, spk, r, s, e, t in utterances(name):
                w.writerow([os.path.relpath(recs[r], d), s, e, t, spk])
    return d


def nemo(d: Path, recs: Dict[str, Path]) -> Path:
    """NeMo JSON lines (absolute paths, offset/duration, no speaker)."""
    d.mkdir(parents=True, exist_ok=True)
    for name in SETS:
        _write(d / f"{name}.jsonl", [json.dumps({"audio_filepath": str(recs[r]), "offset": s,
                                                 "duration": round(e - s, 6), "text": t})
                                     for _, _, r, s, e, t in utterances(name)])
    return d


def lhotse_manifests(d: Path, recs: Dict[str, Path]) -> Path:
    """lhotse recordings + supervisions for train and dev, cuts for test."""
    from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet
    d.mkdir(parents=True, exist_ok=True)
    for name in SETS:
        utts = utterances(name)
        recordings = RecordingSet.from_recordings(
            Recording.from_file(recs[r], recording_id=r) for r in sorted({u[2] for u in utts}))
        sups = SupervisionSet.from_segments(
            SupervisionSegment(id=k, recording_id=r, start=s, duration=round(e - s, 6), text=t,
                               speaker=spk) for k, spk, r, s, e, t in utts)
        if name == "test":
            cuts = CutSet.from_manifests(recordings=recordings, supervisions=sups)
            cuts.to_file(d / f"corpus_cuts_{name}.jsonl.gz")
        else:
            recordings.to_file(d / f"corpus_recordings_{name}.jsonl.gz")
            sups.to_file(d / f"corpus_supervisions_{name}.jsonl")
    return d


def _cut(recs: Dict[str, Path], rec: str, start: float, end: float) -> np.ndarray:
    wav, rate = sf.read(recs[rec], dtype="int16")
    return wav[int(round(start * rate)):int(round(end * rate))]


def whole_files(d: Path, recs: Dict[str, Path], fmt: str) -> Dict[str, Path]:
    """Each utterance as its own file ``d/<key>.<fmt>`` (wav or mp3); {key: path}."""
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in SETS:
        for k, _, r, s, e, _ in utterances(name):
            path = d / f"{k}.{fmt}"
            if fmt == "mp3":
                sf.write(path, _cut(recs, r, s, e).astype(np.float32) / 32768, RATE,
                         format="MP3")
            else:
                sf.write(path, _cut(recs, r, s, e), RATE, subtype="PCM_16")
            out[k] = path
    return out


def kaldi_whole(d: Path, files: Dict[str, Path]) -> Path:
    """Kaldi data dirs without segments over ``files`` (the reference of the WHOLE forms)."""
    for name in SETS:
        utts = utterances(name)
        _write(d / name / "wav.scp", [f"{k} {files[k]}" for k, _, _, _, _, _ in utts])
        _write(d / name / "text", [f"{k} {t}" for k, _, _, _, _, t in utts])
        _write(d / name / "utt2spk", [f"{k} {spk}" for k, spk, _, _, _, _ in utts])
    return d


def common_voice(d: Path, mp3s: Dict[str, Path]) -> Path:
    """Common Voice's layout: train/dev/test.tsv with clips/<key>.mp3 (its real columns)."""
    (d / "clips").mkdir(parents=True, exist_ok=True)
    for name in SETS:
        rows = ["client_id\tpath\tsentence_id\tsentence\tsentence_domain\tup_votes\tdown_votes"
                "\tage\tgender\taccents\tvariant\tlocale\tsegment"]
        for k, spk, _, _, _, t in utterances(name):
            os.link(mp3s[k], d / "clips" / f"{k}.mp3")
            rows.append(f"{spk}\t{k}.mp3\tx{k}\t{t}\t\t2\t0\t\t\t\t\ten\t")
        _write(d / f"{name}.tsv", rows)
    return d


def audiofolder(d: Path, wavs: Dict[str, Path]) -> Path:
    """Hugging Face audiofolder: <set>/metadata.csv (file_name, transcription) + audio."""
    for name in SETS:
        (d / name / "data").mkdir(parents=True, exist_ok=True)
        with open(d / name / "metadata.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["file_name", "transcription"])
            for k, _, _, _, _, t in utterances(name):
                os.link(wavs[k], d / name / "data" / f"{k}.wav")
                w.writerow([f"data/{k}.wav", t])
    return d


def librispeech(d: Path, flacs: Dict[str, Path]) -> Path:
    """<set>/<spk>/<chapter>/<spk>-<chapter>.trans.txt beside <key>.flac."""
    for name in SETS:
        for k, spk, _, _, _, t in utterances(name):
            chapter = d / name / spk / "100"
            chapter.mkdir(parents=True, exist_ok=True)
            os.link(flacs[k], chapter / f"{k}.flac")
            with open(chapter / f"{spk}-100.trans.txt", "a", encoding="utf-8") as f:
                f.write(f"{k} {t}\n")
    return d

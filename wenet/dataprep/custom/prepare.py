"""Checked Kaldi data dirs from a user's corpus: stage 0 of ``--corpus custom``.

For every set: read its entries (``detect``), then check each utterance, skipping and
counting (never stopping on) what cannot train: an empty transcript (after
normalisation), a duplicate key, a recording id given to two audio files, audio that is
missing or that libsndfile cannot open, a segment with start >= end or past the end of
its recording. Audio is indexed, not decoded: duration, sample rate and channels come
from the file's header (``soundfile.info``; for mp3 libsndfile reads the frame headers,
still without decoding). Pipe commands (``cmd |``) are not run at stage 0: their
utterances are kept unchecked and counted (stage 1 runs them and stops naming the one
that fails). Utterances at another sample rate than the model's are kept (the pipeline
resamples them) and counted.

Without a dev set, whole training speakers are held out (seeded): never single
utterances of a speaker who stays in train. Speakers found in train and in dev or a
test set are reported. Each set's report is ``<out>/<set>/stage0_report.txt``.
"""
from __future__ import annotations

import logging
import math
import os
import random
import shutil
from collections import Counter, defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

import soundfile as sf

from wenet.dataprep.custom.detect import find_set, require_set
from wenet.dataprep.custom.records import CorpusError, Entry, Report
from wenet.dataprep.text_norm import normalize_transcript

REPORT_NAME = "stage0_report.txt"
SEGMENT_TOLERANCE = 0.02  # seconds a segment may end after its recording (rounding of times)

_Header = Tuple[float, int, int]  # (seconds, sample rate, channels)


class HeaderCache:
    """Audio headers by path: each file opened once however many segments use it."""

    def __init__(self) -> None:
        self._seen: Dict[str, object] = {}

    def get(self, path: str) -> _Header:
        """(seconds, rate, channels); raises RuntimeError with libsndfile's reason."""
        hit = self._seen.get(path)
        if hit is None:
            try:
                info = sf.info(path)
                hit = (info.frames / info.samplerate, int(info.samplerate), int(info.channels))
            except Exception as e:  # soundfile raises several types for missing/bad files
                hit = RuntimeError(str(e).splitlines()[0] if str(e) else type(e).__name__)
            self._seen[path] = hit
        if isinstance(hit, RuntimeError):
            raise hit
        return hit  # type: ignore[return-value]


def _where(e: Entry) -> str:
    return f"{e.origin} ({e.key})"


def check_entries(entries: Sequence[Entry], report: Report, text_norm: str,
                  sample_rate: int, headers: Optional[HeaderCache] = None) -> List[Entry]:
    """The entries that can train, texts normalised; every other one skipped in ``report``."""
    headers = headers or HeaderCache()
    kept: List[Entry] = []
    first_of: Dict[str, str] = {}
    audio_of: Dict[str, Tuple[str, str]] = {}
    rates: Counter = Counter()
    pipes = 0
    for e in entries:
        text = normalize_transcript(e.text, text_norm)
        if not text:
            report.skip("empty transcript", _where(e))
            continue
        if e.key in first_of:
            report.skip("duplicate key", f"{_where(e)}, first at {first_of[e.key]}")
            continue
        if e.recording in audio_of and audio_of[e.recording][0] != e.audio:
            report.skip("recording id of two audio files",
                        f"{_where(e)}: {e.recording} is {audio_of[e.recording][0]} at "
                        f"{audio_of[e.recording][1]}, here {e.audio}")
            continue
        if e.is_segment and (e.start < 0 or (e.end != -1 and e.end <= e.start)):
            report.skip("segment start >= end", f"{_where(e)}: [{e.start}, {e.end}]")
            continue
        if e.audio.endswith("|"):
            pipes += 1
        else:
            try:
                seconds, rate, channels = headers.get(e.audio)
            except RuntimeError as err:
                report.skip("audio missing or unreadable", f"{_where(e)}: {e.audio}: {err}")
                continue
            if e.is_segment and (e.start >= seconds or e.end > seconds + SEGMENT_TOLERANCE):
                report.skip("segment past the end of its recording",
                            f"{_where(e)}: [{e.start}, {e.end}] of {seconds:.3f} s")
                continue
            rates[rate] += 1
            if channels > 1:
                report.count("utterances with more than one channel (the first is used)")
        first_of[e.key] = e.origin
        audio_of.setdefault(e.recording, (e.audio, e.origin))
        e.text = text
        kept.append(e)
    if pipes:
        report.count("utterances read by a pipe command (not run at stage 0: audio, "
                     "duration and sample rate unchecked)", pipes)
    for rate, n in sorted(rates.items()):
        if rate != sample_rate:
            report.count(f"utterances at {rate} Hz (resampled to the model's {sample_rate} Hz "
                         "when read)", n)
            logging.info("%s: %d utterances at %d Hz, resampled to %d Hz when read",
                         report.name, n, rate, sample_rate)
    return kept


def hold_out_speakers(entries: List[Entry], share: float, seed: int
                      ) -> Tuple[List[Entry], List[Entry], List[str]]:
    """(train, dev, dev speakers): whole speakers, drawn with ``seed``, until dev holds at
    least ``share`` of the utterances; at least one speaker each side."""
    by_speaker: Dict[str, int] = Counter(e.speaker for e in entries)
    speakers = sorted(by_speaker)
    if len(speakers) < 2:
        raise CorpusError(f"cannot hold out dev speakers: the training set has "
                          f"{len(speakers)} speaker(s); give a dev set (--dev_set)")
    random.Random(seed).shuffle(speakers)
    target = math.ceil(share * len(entries))
    chosen: List[str] = []
    held = 0
    for spk in speakers[:-1]:
        if held >= target and chosen:
            break
        chosen.append(spk)
        held += by_speaker[spk]
    dev_set = set(chosen)
    return ([e for e in entries if e.speaker not in dev_set],
            [e for e in entries if e.speaker in dev_set], sorted(chosen))


def _seconds(x: float) -> str:
    return repr(float(x))


def write_data_dir(entries: List[Entry], out_dir: str) -> None:
    """wav.scp, text, utt2spk, spk2utt (and segments when any entry is a segment), sorted
    by key in the C locale (code point order, as UTF-8 bytes sort)."""
    os.makedirs(out_dir, exist_ok=True)
    entries = sorted(entries, key=lambda e: e.key)
    segmented = any(e.is_segment for e in entries)
    files: Dict[str, List[str]] = defaultdict(list)
    recordings: Dict[str, str] = {}
    spk2utt: Dict[str, List[str]] = defaultdict(list)
    for e in entries:
        files["text"].append(f"{e.key} {e.text}")
        files["utt2spk"].append(f"{e.key} {e.speaker}")
        spk2utt[e.speaker].append(e.key)
        if segmented:
            recordings[e.recording] = e.audio
            start, end = (e.start, e.end) if e.is_segment else (0.0, -1.0)
            files["segments"].append(f"{e.key} {e.recording} {_seconds(start)} {_seconds(end)}")
        else:
            recordings[e.key] = e.audio
    files["wav.scp"] = [f"{r} {recordings[r]}" for r in sorted(recordings)]
    files["spk2utt"] = [f"{s} {' '.join(spk2utt[s])}" for s in sorted(spk2utt)]
    for name, lines in files.items():
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))


def _speakers_of(entries: List[Entry]) -> set:
    return {e.speaker for e in entries}


def _read_set(name: str, form: str, reader, report: Report, text_norm: str,
              sample_rate: int, headers: HeaderCache) -> List[Entry]:
    """The checked entries of one set; an utterance without a speaker is its own."""
    logging.info("set %s: %s", name, form)
    report.notes.append(f"read from {form}")
    entries = reader(report)
    no_speaker = sum(e.speaker is None for e in entries)
    for e in entries:
        e.speaker = e.speaker or e.key
    if no_speaker:
        report.notes.append(f"{no_speaker} utterances name no speaker: each is its own "
                            "speaker (utt2spk maps it to its key)")
    return check_entries(entries, report, text_norm, sample_rate, headers)


def _report_shared_speakers(kept: Dict[str, List[Entry]], reports: Dict[str, Report],
                            train_set: str) -> None:
    train_speakers = _speakers_of(kept[train_set])
    for name in kept:
        shared = sorted(train_speakers & _speakers_of(kept[name])) if name != train_set else []
        if shared:
            msg = (f"{len(shared)} speakers of {name} are also in {train_set}: "
                   + " ".join(shared[:20]) + (" ..." if len(shared) > 20 else ""))
            logging.warning("%s", msg)
            reports[name].notes.append(msg)
            reports[name].count(f"speakers shared with {train_set}", len(shared))


def _write_set(entries: List[Entry], report: Report, out_dir: str) -> None:
    """The data dir and its stage0_report.txt; the summary logged."""
    shutil.rmtree(out_dir, ignore_errors=True)
    write_data_dir(entries, out_dir)
    report.counts["utterances kept"] = len(entries)
    with open(os.path.join(out_dir, REPORT_NAME), "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in report.lines()))
    summary = f"{report.name}: kept {len(entries)} utterances, skipped {report.num_skipped}"
    if report.num_skipped:
        logging.warning("%s (%s): %s", summary, os.path.join(out_dir, REPORT_NAME),
                        "; ".join(f"{len(w)} {r}" for r, w in sorted(report.skipped.items())))
    else:
        logging.info("%s", summary)


def prepare_corpus(root: str, out: str, train_set: str = "train", dev_set: str = "dev",
                   test_sets: Sequence[str] = ("test",), text_norm: str = "upper",
                   sample_rate: int = 16000, dev_share: float = 0.1, seed: int = 777
                   ) -> Dict[str, Report]:
    """Write ``out/<set>`` for the train, dev and test sets of ``root``; {set: report}.

    Raises :class:`CorpusError` when a set is missing (a dev set may be: it is then held
    out of train), a file cannot be read at all, or a set keeps no utterance.
    """
    if not os.path.isdir(root):
        raise CorpusError(f"--data_root {root} is not a directory")
    if train_set in (dev_set, *test_sets):
        raise CorpusError(f"the training set {train_set} cannot also be the dev or a test set")
    names = list(dict.fromkeys([train_set, dev_set, *test_sets]))
    found = {train_set: require_set(root, train_set, "--train_set")}
    dev_found = find_set(root, dev_set)
    if dev_found is not None:
        found[dev_set] = dev_found
    for name in test_sets:
        if name not in found and name != dev_set:
            found[name] = require_set(root, name, "--test_sets")
    reports = {name: Report(name) for name in names}
    headers = HeaderCache()
    kept = {name: _read_set(name, form, reader, reports[name], text_norm, sample_rate, headers)
            for name, (form, reader) in found.items()}
    if dev_found is None:
        kept[train_set], kept[dev_set], chosen = hold_out_speakers(kept[train_set], dev_share, seed)
        msg = (f"no set '{dev_set}' in {root}: held out {len(chosen)} of the training speakers "
               f"({len(kept[dev_set])} utterances, --dev_share {dev_share}, --seed {seed})")
        logging.info("%s", msg)
        reports[dev_set].notes.append(msg + ": " + " ".join(chosen))
    for name in names:
        if not kept.get(name):
            raise CorpusError(f"set {name} of {root} keeps no utterance: "
                              + "; ".join(reports[name].lines(max_listed=3)))
    _report_shared_speakers(kept, reports, train_set)
    for name in names:
        _write_set(kept[name], reports[name], os.path.join(out, name))
    return reports

"""Plan and synthesise the built-in corpus into Kaldi data dirs.

Layout under ``data_root``::

    plan.json                config of the corpus being built (seed, sizes, version)
    wav/<set>/<utt>.wav      16 kHz mono int16 audio
    lists/<set>/{wav.scp,text,utt2spk,spk2utt}
    manifest.json            the generator's record: per utterance its text, the
                             engine command, augmentation and number of samples
    COMPLETE                 marker holding the config hash; written last

Everything is drawn from the seed before any audio is made, so the corpus does
not depend on the number of jobs or on which utterances a rerun redoes. A
rerun checks every WAV (present, well-formed RIFF of the expected length); with
a matching marker and no bad file it writes nothing. A changed config removes
the old audio first. The split: dev and test voices are held out (see
``voices``), and their sentences are drawn after the training ones, excluding
every training sentence and preferring sentences whose words training covers.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import random
import shutil
import struct
import subprocess
import tempfile
from typing import Dict, List, Optional

import numpy as np
import soundfile as sf
from tqdm import tqdm

from local.synth.augment import NOISE_COLOURS, TARGET_RATE, AugmentParams, augment
from local.synth.sentences import SentenceGenerator, vocabulary
from local.synth.voices import SETS, Voice, split_voices
from wenet.utils.file_utils import atomic_open, atomic_write_text

VERSION = 2  # 2: 138 training voices (voices.py)
# Training audio is cheap to make (~100 utterances/s), and a model that sees
# each of 1,700 utterances 32 times learns them by heart (12.7 % WER on its
# training utterances, ~38 % on a training voice saying a new sentence or a new
# voice saying a training sentence): the main job trains on 6,000 utterances
# 9 times instead, the same compute (RESULTS.md).
DEFAULT_SIZES = {"train": 6000, "dev": 230, "test": 230}  # ~4.2 h, ~10 min, ~10 min
SPEED_RANGE = (0.92, 1.08)
SNR_RANGE_DB = (15.0, 35.0)
PAD_RANGE_MS = (50, 250)
PEAK_RANGE = (0.3, 0.9)

logger = logging.getLogger(__name__)


def corpus_config(seed: int, sizes: Dict[str, int]) -> dict:
    """Everything that determines the corpus; its hash identifies a finished corpus."""
    return {"version": VERSION, "seed": seed, "sizes": {s: sizes[s] for s in SETS},
            "speed_range": SPEED_RANGE, "snr_range_db": SNR_RANGE_DB,
            "pad_range_ms": PAD_RANGE_MS, "peak_range": PEAK_RANGE}


def config_hash(config: dict) -> str:
    """A stable hash of the config (sorted JSON)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def plan_corpus(seed: int, sizes: Dict[str, int]) -> List[dict]:
    """One record per utterance (sorted by utterance id within each set)."""
    voices = split_voices(seed)
    gen = SentenceGenerator(random.Random(f"{seed}-sentences"))
    texts = {"train": gen.distinct(sizes["train"])}
    train_vocab = vocabulary(texts["train"])
    used = set(texts["train"])
    for subset in ("dev", "test"):
        texts[subset] = gen.distinct(sizes[subset], exclude=used, vocab=train_vocab)
        used.update(texts[subset])
    aug_rng = random.Random(f"{seed}-augment")
    records: List[dict] = []
    for set_index, subset in enumerate(SETS):
        n = sizes[subset]
        pool = voices[subset]
        assigned = [pool[i % len(pool)] for i in range(n)]
        aug_rng.shuffle(assigned)
        set_records = []
        for idx, (text, voice) in enumerate(zip(texts[subset], assigned)):
            params = AugmentParams(
                speed=round(aug_rng.uniform(*SPEED_RANGE), 4),
                pad_ms=(aug_rng.randint(*PAD_RANGE_MS), aug_rng.randint(*PAD_RANGE_MS)),
                noise=aug_rng.choice(NOISE_COLOURS),
                snr_db=round(aug_rng.uniform(*SNR_RANGE_DB), 2),
                peak=round(aug_rng.uniform(*PEAK_RANGE), 3),
                noise_seed=aug_rng.getrandbits(63))
            jitter = voice.pitch_jitter
            set_records.append({
                "utt": f"{voice.voice_id}-{subset}{idx:05d}", "set": subset, "text": text,
                "spoken": text.lower(), "voice": dataclasses.asdict(voice),
                "voice_id": voice.voice_id,
                "pitch_offset": aug_rng.randint(-jitter, jitter) if jitter else 0,
                "augment": dataclasses.asdict(params)})
        records += sorted(set_records, key=lambda r: r["utt"])
    return records


def wav_path(data_root: str, record: dict) -> str:
    """Where a record's audio lives."""
    return os.path.join(data_root, "wav", record["set"], record["utt"] + ".wav")


def wav_is_complete(path: str, expected_samples: Optional[int] = None) -> bool:
    """True when ``path`` is a whole 16 kHz mono int16 RIFF/WAVE file (sizes in the
    header agree with the file) holding ``expected_samples`` samples if given."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
                return False
            if struct.unpack("<I", head[4:8])[0] + 8 != size:
                return False
            fmt_ok, data_bytes, pos = False, None, 12
            while pos + 8 <= size:
                f.seek(pos)
                cid, clen = struct.unpack("<4sI", f.read(8))
                if cid == b"fmt ":
                    tag, chans, rate = struct.unpack("<HHI", f.read(8))
                    f.seek(pos + 22)
                    bits = struct.unpack("<H", f.read(2))[0]
                    fmt_ok = tag == 1 and chans == 1 and rate == TARGET_RATE and bits == 16
                elif cid == b"data":
                    data_bytes = clen if pos + 8 + clen <= size else None
                pos += 8 + clen + (clen & 1)
    except (OSError, struct.error):
        return False
    if not fmt_ok or data_bytes is None or data_bytes == 0:
        return False
    return expected_samples is None or data_bytes == 2 * expected_samples


def engine_samples(record: dict, tmp_dir: str) -> tuple:
    """Run the record's engine (its ``voice`` speaking ``spoken``) → (float32 samples, rate);
    a failed engine or output that is not mono speech at the voice's rate is an error
    naming the utterance."""
    voice = Voice(**record["voice"])
    raw = os.path.join(tmp_dir, record["utt"] + ".raw.wav")
    cmd = voice.command(record["spoken"], record["pitch_offset"], raw)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0 or not os.path.exists(raw):
        raise RuntimeError(f"utterance {record['utt']}: {' '.join(cmd)} failed "
                           f"({proc.returncode}): {proc.stderr.decode(errors='replace').strip()}")
    try:
        samples, rate = sf.read(raw, dtype="float32")
    finally:
        os.remove(raw)
    if rate != voice.sample_rate or samples.ndim != 1 or not np.any(samples):
        raise RuntimeError(f"utterance {record['utt']}: engine wrote {samples.shape} samples "
                           f"at {rate} Hz, expected speech (mono, {voice.sample_rate} Hz)")
    return samples, rate


def synthesize(record: dict, tmp_dir: str) -> np.ndarray:
    """Run the record's engine and augmentation → int16 samples at 16 kHz."""
    samples, rate = engine_samples(record, tmp_dir)
    aug = record["augment"]
    params = AugmentParams(**{**aug, "pad_ms": tuple(aug["pad_ms"])})
    try:
        return augment(samples, rate, params)
    except ValueError as e:
        raise RuntimeError(f"utterance {record['utt']}: {e}") from e


def _init_worker() -> None:
    import torch
    torch.set_num_threads(1)


def _make_one(job: tuple) -> tuple:
    record, path = job
    with tempfile.TemporaryDirectory(prefix="synth_") as tmp:
        wav = synthesize(record, tmp)
    with atomic_open(path, "wb") as f:
        sf.write(f, wav, TARGET_RATE, subtype="PCM_16", format="WAV")
    return record["utt"], len(wav)


def _write_lists(data_root: str, records: List[dict]) -> None:
    for subset in SETS:
        recs = sorted((r for r in records if r["set"] == subset), key=lambda r: r["utt"])
        out = os.path.join(data_root, "lists", subset)
        os.makedirs(out, exist_ok=True)
        spk2utt: Dict[str, List[str]] = {}
        for r in recs:
            spk2utt.setdefault(r["voice_id"], []).append(r["utt"])
        files = {
            "wav.scp": "".join(f"{r['utt']} {os.path.abspath(wav_path(data_root, r))}\n" for r in recs),
            "text": "".join(f"{r['utt']} {r['text']}\n" for r in recs),
            "utt2spk": "".join(f"{r['utt']} {r['voice_id']}\n" for r in recs),
            "spk2utt": "".join(f"{s} {' '.join(u)}\n" for s, u in sorted(spk2utt.items())),
        }
        for name, content in files.items():
            atomic_write_text(os.path.join(out, name), content)


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        logger.warning("ignoring unreadable %s: %s", path, e)
        return None


def _start_plan(data_root: str, digest: str, config: dict) -> None:
    """Keep what ``data_root`` holds when its plan.json has this ``digest``; otherwise
    remove the audio, lists and markers of another plan and write this one."""
    plan_file = os.path.join(data_root, "plan.json")
    old_plan = _read_json(plan_file)
    if old_plan is not None and old_plan.get("hash") == digest:
        return
    if os.path.exists(os.path.join(data_root, "wav")):
        logger.info("%s holds audio of other or unknown parameters; removing it", data_root)
    for name in ("wav", "lists"):
        shutil.rmtree(os.path.join(data_root, name), ignore_errors=True)
    for name in ("COMPLETE", "manifest.json"):
        if os.path.exists(os.path.join(data_root, name)):
            os.remove(os.path.join(data_root, name))
    atomic_write_text(plan_file, json.dumps({"hash": digest, "config": config}, indent=1) + "\n")


def _synthesise(jobs: List[tuple], nj: int) -> Dict[str, int]:
    """Write the WAV of every (record, path) job with ``nj`` processes → {utt: samples}."""
    lengths: Dict[str, int] = {}
    if nj > 1 and len(jobs) > 1:
        with multiprocessing.get_context("fork").Pool(nj, initializer=_init_worker) as pool:
            for utt, n in tqdm(pool.imap_unordered(_make_one, jobs, chunksize=4),
                               total=len(jobs), desc="synth", unit="utt",
                               mininterval=1.0):
                lengths[utt] = n
    else:
        _init_worker()
        for job in tqdm(jobs, desc="synth", unit="utt", mininterval=1.0):
            utt, n = _make_one(job)
            lengths[utt] = n
    return lengths


def generate_corpus(data_root: str, seed: int, sizes: Dict[str, int], nj: int = 1) -> int:
    """Build (or finish) the corpus in ``data_root``; returns the number of WAVs written."""
    for subset in SETS:
        if sizes[subset] < 1:
            raise ValueError(f"size of {subset} must be at least 1, got {sizes[subset]}")
    config = corpus_config(seed, sizes)
    digest = config_hash(config)
    os.makedirs(data_root, exist_ok=True)
    marker = os.path.join(data_root, "COMPLETE")
    _start_plan(data_root, digest, config)

    records = plan_corpus(seed, sizes)
    manifest = _read_json(os.path.join(data_root, "manifest.json")) or {}
    known = {r["utt"]: r.get("num_samples") for r in manifest.get("utterances", [])} \
        if manifest.get("hash") == digest else {}
    todo = [r for r in records if not wav_is_complete(wav_path(data_root, r), known.get(r["utt"]))]
    marker_ok = _read_text(marker) == digest
    if marker_ok and not todo:
        logger.info("corpus in %s is complete (seed %d, %d utterances); nothing to do",
                    data_root, seed, len(records))
        return 0
    if os.path.exists(marker):
        os.remove(marker)
    logger.info("synthesising %d of %d utterances with %d jobs", len(todo), len(records), nj)
    for subset in SETS:
        os.makedirs(os.path.join(data_root, "wav", subset), exist_ok=True)
    jobs = [(r, wav_path(data_root, r)) for r in todo]
    lengths = _synthesise(jobs, nj)
    for r in records:
        n = lengths.get(r["utt"], known.get(r["utt"]))
        if n is None:  # reused from an interrupted run: the header tells the length
            n = sf.info(wav_path(data_root, r)).frames
        r["num_samples"] = n
    _write_lists(data_root, records)
    atomic_write_text(os.path.join(data_root, "manifest.json"),
                      json.dumps({"hash": digest, "config": config, "utterances": records}) + "\n")
    atomic_write_text(marker, digest + "\n")
    hours = {s: sum(r["num_samples"] for r in records if r["set"] == s) / TARGET_RATE / 3600
             for s in SETS}
    logger.info("corpus done: %s", ", ".join(f"{s} {hours[s]:.3f} h" for s in SETS))
    return len(jobs)


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_root", required=True, help="corpus folder (audio, lists, manifest)")
    parser.add_argument("--seed", type=int, default=777)
    parser.add_argument("--nj", type=int, default=os.cpu_count() or 1, help="parallel jobs")
    for subset in SETS:
        parser.add_argument(f"--{subset}_utts", type=int, default=DEFAULT_SIZES[subset],
                            help=f"utterances in {subset} (default {DEFAULT_SIZES[subset]})")
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = get_parser().parse_args(argv)
    sizes = {s: getattr(args, f"{s}_utts") for s in SETS}
    generate_corpus(args.data_root, args.seed, sizes, max(1, args.nj))


if __name__ == "__main__":
    main()

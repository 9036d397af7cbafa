"""Plan and synthesise the built-in corpus into Kaldi data dirs.

The layout under ``data_root`` and the rerun rules are those of every synthetic
corpus (``local.synth.corpus``); this corpus's ``manifest.json`` holds per
utterance its text, voice, augmentation and number of samples.

Everything is drawn from the seed before any audio is made, so the corpus does
not depend on the number of jobs or on which utterances a rerun redoes. The
split: dev and test voices are held out (see ``voices``), and their sentences
are drawn after the training ones, excluding every training sentence and
preferring sentences whose words training covers.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import random
from typing import Dict, List, Optional, Tuple

import numpy as np

from local.synth.augment import NOISE_COLOURS, AugmentParams, augment
from local.synth.corpus import build_corpus, engine_samples, run_jobs, wav_path, write_wav
from local.synth.sentences import SentenceGenerator, vocabulary
from local.synth.voices import SETS, split_voices

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


def corpus_config(seed: int, sizes: Dict[str, int]) -> dict:
    """Everything that determines the corpus; its hash identifies a finished corpus."""
    return {"version": VERSION, "seed": seed, "sizes": {s: sizes[s] for s in SETS},
            "speed_range": SPEED_RANGE, "snr_range_db": SNR_RANGE_DB,
            "pad_range_ms": PAD_RANGE_MS, "peak_range": PEAK_RANGE}


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


def synthesize(record: dict, tmp_dir: str) -> np.ndarray:
    """Run the record's engine and augmentation → int16 samples at 16 kHz."""
    samples, rate = engine_samples(record, tmp_dir)
    aug = record["augment"]
    params = AugmentParams(**{**aug, "pad_ms": tuple(aug["pad_ms"])})
    try:
        return augment(samples, rate, params)
    except ValueError as e:
        raise RuntimeError(f"utterance {record['utt']}: {e}") from e


def _make_one(job: Tuple[dict, str]) -> Tuple[str, int]:
    record, path = job
    return record["utt"], write_wav(path, lambda tmp: synthesize(record, tmp))


def generate_corpus(data_root: str, seed: int, sizes: Dict[str, int], nj: int = 1) -> int:
    """Build (or finish) the corpus in ``data_root``; returns the number of WAVs written."""
    for subset in SETS:
        if sizes[subset] < 1:
            raise ValueError(f"size of {subset} must be at least 1, got {sizes[subset]}")

    def synthesise(todo: List[dict]) -> Dict[str, int]:
        jobs = [(r, wav_path(data_root, r)) for r in todo]
        return run_jobs(_make_one, jobs, nj, "synth")

    return build_corpus(data_root, corpus_config(seed, sizes), plan_corpus(seed, sizes), synthesise)


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

"""Synthesise the broad corpus (``--corpus synth_broad``, stage 0).

Layout under ``data_root`` (as ``local.synth.generate``, plus the text and the
babble bank)::

    text/sentences.tsv       the extracted sentences (cache; remade when the
                             Debian sources or the extractor change)
    plan.json                config of the corpus being built
    babble/<utt>.wav         clean audio of the training utterances babble is made of
    wav/<set>/<utt>.wav      16 kHz mono int16 audio
    lists/<set>/{wav.scp,text,utt2spk,spk2utt}
    manifest.json            per utterance: text, voice, simulation, samples; the
                             simulation shares and the synthesis rate
    COMPLETE                 marker holding the config hash; written last

Everything is drawn from the seed before any audio is made, so the audio does
not depend on the number of jobs; a rerun checks every WAV and redoes only the
missing or broken ones; a changed config removes the old audio first.
"""
from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import soundfile as sf
from tqdm import tqdm

from local.synth.generate import (_read_json, _read_text, _write_lists, config_hash,
                                  engine_samples, wav_is_complete, wav_path)
from local.synth.voices import SETS, Voice
from local.synth_broad import acoustics
from local.synth_broad.plan import plan_corpus
from local.synth_broad.simulate import apply_simulation, parse_simulation, share_counts
from local.synth_broad.text import (MissingPackageError, check_packages, load_sentences,
                                   source_fingerprint, text_statistics, vocabulary)
from wenet.utils.file_utils import atomic_open, atomic_write_text

VERSION = 1
# 10 h: stage 0 in ~4-5 minutes with 2 jobs on a quiet 2-core machine (43 utterances/s
# measured on 200; README), under 10 minutes at half that rate
DEFAULT_HOURS = 10.0
DEFAULT_DEV_UTTS = 300
DEFAULT_TEST_UTTS = 300
BANK_PEAK = 0.9

logger = logging.getLogger(__name__)


def corpus_config(seed: int, hours: float, dev_utts: int, test_utts: int,
                  shares: Dict[str, float], text_id: str) -> dict:
    """Everything that determines the corpus; its hash identifies a finished corpus."""
    return {"version": VERSION, "seed": seed, "hours": hours, "dev_utts": dev_utts,
            "test_utts": test_utts, "simulation": shares, "text": text_id}


def engine_audio(record: dict, tmp_dir: str) -> np.ndarray:
    """The record's sentence spoken by its voice: clean float samples at 16 kHz."""
    samples, rate = engine_samples(record, tmp_dir)
    return acoustics.resample_array(samples, rate, acoustics.RATE)


def bank_path(data_root: str, utt: str) -> str:
    """Where a babble-bank utterance's clean audio lives."""
    return os.path.join(data_root, "babble", utt + ".wav")


_TALKERS: Dict[str, np.ndarray] = {}  # per worker process: babble bank audio read so far


def _talker(data_root: str, utt: str) -> np.ndarray:
    path = bank_path(data_root, utt)
    if path not in _TALKERS:
        _TALKERS[path] = sf.read(path, dtype="float64")[0]
    return _TALKERS[path]


def synthesize(record: dict, data_root: str, tmp_dir: str) -> np.ndarray:
    """The record's audio: engine output through its simulation -> int16 at 16 kHz
    (babble reads the bank under ``data_root``)."""
    speech = engine_audio(record, tmp_dir)
    noise = record["sim"]["noise"]
    talkers = [_talker(data_root, u) for u in noise["talkers"]] if noise else []
    try:
        return apply_simulation(speech, record["sim"], talkers)
    except ValueError as e:
        raise RuntimeError(f"utterance {record['utt']}: {e}") from e


def _init_worker() -> None:
    import torch
    torch.set_num_threads(1)


def _make_one(job: Tuple[str, dict, str]) -> Tuple[str, int]:
    kind, record, data_root = job
    with tempfile.TemporaryDirectory(prefix="synth_broad_") as tmp:
        if kind == "bank":
            wav = acoustics.to_int16(acoustics.set_peak(engine_audio(record, tmp), BANK_PEAK))
            path = bank_path(data_root, record["utt"])
        else:
            wav = synthesize(record, data_root, tmp)
            path = wav_path(data_root, record)
    with atomic_open(path, "wb") as f:
        sf.write(f, wav, acoustics.RATE, subtype="PCM_16", format="WAV")
    return record["utt"], len(wav)


def _run_jobs(jobs: List[tuple], nj: int, desc: str) -> Dict[str, int]:
    lengths: Dict[str, int] = {}
    if nj > 1 and len(jobs) > 1:
        with multiprocessing.get_context("fork").Pool(nj, initializer=_init_worker) as pool:
            for utt, n in tqdm(pool.imap_unordered(_make_one, jobs, chunksize=4),
                               total=len(jobs), desc=desc, unit="utt", mininterval=1.0):
                lengths[utt] = n
    else:
        _init_worker()
        for job in tqdm(jobs, desc=desc, unit="utt", mininterval=1.0):
            utt, n = _make_one(job)
            lengths[utt] = n
    return lengths


def _start_plan(data_root: str, digest: str, config: dict) -> None:
    """Keep ``data_root``'s audio when plan.json has this ``digest``; else remove it."""
    plan_file = os.path.join(data_root, "plan.json")
    old = _read_json(plan_file)
    if old is not None and old.get("hash") == digest:
        return
    if os.path.exists(os.path.join(data_root, "wav")):
        logger.info("%s holds audio of other or unknown parameters; removing it", data_root)
    for name in ("wav", "lists", "babble"):
        shutil.rmtree(os.path.join(data_root, name), ignore_errors=True)
    for name in ("COMPLETE", "manifest.json"):
        if os.path.exists(os.path.join(data_root, name)):
            os.remove(os.path.join(data_root, name))
    atomic_write_text(plan_file, json.dumps({"hash": digest, "config": config}, indent=1) + "\n")


def corpus_statistics(records: List[dict]) -> Dict[str, dict]:
    """Per set: utterances, hours, voices, words, vocabulary, words unseen in train."""
    train_vocab = vocabulary(r["text"] for r in records if r["set"] == "train")
    out = {}
    for s in SETS:
        recs = [r for r in records if r["set"] == s]
        vocab = vocabulary(r["text"] for r in recs)
        out[s] = {"utts": len(recs), "hours": round(sum(r["num_samples"] for r in recs)
                                                    / acoustics.RATE / 3600, 4),
                  "voices": len({r["voice_id"] for r in recs}),
                  "words": sum(len(r["text"].split()) for r in recs), "vocabulary": len(vocab),
                  "unseen_in_train": len(vocab - train_vocab)}
    return out


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _synthesise_missing(data_root: str, records: List[dict], known: Dict[str, int],
                        nj: int) -> Dict[str, int]:
    """Make the babble bank (the utterances babble uses), then every missing or broken
    WAV; -> {utt: samples} written."""
    for sub in ["babble"] + [os.path.join("wav", s) for s in SETS]:
        os.makedirs(os.path.join(data_root, sub), exist_ok=True)
    talkers = {u for r in records if r["sim"]["noise"] for u in r["sim"]["noise"]["talkers"]}
    bank = [("bank", r, data_root) for r in records
            if r["utt"] in talkers and not wav_is_complete(bank_path(data_root, r["utt"]))]
    todo = [("utt", r, data_root) for r in records
            if not wav_is_complete(wav_path(data_root, r), known.get(r["utt"]))]
    logger.info("synthesising %d of %d utterances (+%d babble-bank ones) with %d jobs",
                len(todo), len(records), len(bank), nj)
    if bank:
        _run_jobs(bank, nj, "babble bank")
    return _run_jobs(todo, nj, "synth")


def generate_corpus(data_root: str, seed: int, hours: float, dev_utts: int = DEFAULT_DEV_UTTS,
                    test_utts: int = DEFAULT_TEST_UTTS, simulation: str = "default",
                    nj: int = 1) -> int:
    """Build (or finish) the corpus in ``data_root``; returns the number of WAVs written."""
    shares = parse_simulation(simulation)
    sentences = load_sentences(os.path.join(data_root, "text", "sentences.tsv"))
    config = corpus_config(seed, hours, dev_utts, test_utts, shares, source_fingerprint())
    digest = config_hash(config)
    os.makedirs(data_root, exist_ok=True)
    marker = os.path.join(data_root, "COMPLETE")
    _start_plan(data_root, digest, config)
    records = plan_corpus(sentences, seed, hours, dev_utts, test_utts, shares)
    manifest = _read_json(os.path.join(data_root, "manifest.json")) or {}
    known = {r["utt"]: r.get("num_samples") for r in manifest.get("utterances", [])} \
        if manifest.get("hash") == digest else {}
    if _read_text(marker) == digest and all(
            wav_is_complete(wav_path(data_root, r), known.get(r["utt"])) for r in records):
        logger.info("corpus in %s is complete (seed %d, %d utterances); nothing to do",
                    data_root, seed, len(records))
        return 0
    if os.path.exists(marker):
        os.remove(marker)
    shares_planned = share_counts(records)
    for s in SETS:
        logger.info("simulation shares in %s: %s", s,
                    ", ".join(f"{k} {v:.1%}" for k, v in shares_planned[s].items()))
    start_wall, start_cpu = time.time(), _cpu_seconds()
    lengths = _synthesise_missing(data_root, records, known, nj)
    wall, cpu = time.time() - start_wall, _cpu_seconds() - start_cpu
    for r in records:
        n = lengths.get(r["utt"], known.get(r["utt"]))
        r["num_samples"] = n if n is not None else sf.info(wav_path(data_root, r)).frames
    made_hours = sum(lengths.values()) / acoustics.RATE / 3600
    rate = {"utterances": len(lengths), "audio_hours": round(made_hours, 4),
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "jobs": nj,
            "utts_per_s": round(len(lengths) / max(wall, 1e-9), 2),
            "audio_hours_per_min": round(made_hours / max(wall, 1e-9) * 60, 4)}
    stats = corpus_statistics(records)
    _write_lists(data_root, records)
    atomic_write_text(os.path.join(data_root, "manifest.json"), json.dumps(
        {"hash": digest, "config": config, "text": text_statistics(sentences),
         "statistics": stats, "simulation_shares": shares_planned, "synthesis": rate,
         "utterances": records}) + "\n")
    atomic_write_text(marker, digest + "\n")
    logger.info("synthesis: %s", rate)
    for s in SETS:
        logger.info("%s: %s", s, stats[s])
    return len(lengths)


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_root", required=True, help="corpus folder (text, audio, lists)")
    parser.add_argument("--seed", type=int, default=777)
    parser.add_argument("--nj", type=int, default=os.cpu_count() or 1, help="parallel jobs")
    parser.add_argument("--hours", type=float, default=DEFAULT_HOURS,
                        help=f"training audio in hours, estimated at planning (default {DEFAULT_HOURS})")
    parser.add_argument("--dev_utts", type=int, default=DEFAULT_DEV_UTTS)
    parser.add_argument("--test_utts", type=int, default=DEFAULT_TEST_UTTS)
    parser.add_argument("--simulation", default="default",
                        help="default | none | items kind=share, e.g. 'default,babble=0' "
                             "(kinds: rir noise babble band telephone gain)")
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = get_parser()
    args = parser.parse_args(argv)
    try:
        parse_simulation(args.simulation)
        check_packages()
    except (ValueError, MissingPackageError) as e:
        parser.exit(1, f"{parser.prog}: error: {e}\n")
    generate_corpus(args.data_root, args.seed, args.hours, args.dev_utts, args.test_utts,
                    args.simulation, max(1, args.nj))


if __name__ == "__main__":
    main()

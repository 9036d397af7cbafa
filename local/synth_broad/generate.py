"""Synthesise the broad corpus (``--corpus synth_broad``, stage 0).

The layout under ``data_root`` and the rerun rules are those of every synthetic
corpus (``local.synth.corpus``), plus::

    text/sentences.tsv       the extracted sentences (cache; remade when the
                             Debian sources or the extractor change)
    babble/<utt>.wav         clean audio of the training utterances babble is made of

and ``manifest.json`` holds per utterance its text, voice, simulation and number
of samples, with the text and corpus statistics, the simulation shares and the
synthesis rate. Everything is drawn from the seed before any audio is made, so
the audio does not depend on the number of jobs.
"""
from __future__ import annotations

import argparse
import logging
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import soundfile as sf

from local.synth.corpus import (SynthesisRun, build_corpus, engine_samples, run_jobs,
                                wav_is_complete, wav_path, write_wav)
from local.synth.voices import SETS
from local.synth_broad import acoustics
from local.synth_broad.plan import plan_corpus
from local.synth_broad.simulate import apply_simulation, parse_simulation, share_counts
from local.synth_broad.style import check_style_engines, parse_styles, render
from local.synth_broad.text import (MissingPackageError, check_packages, load_sentences,
                                   source_fingerprint, text_statistics, vocabulary)

VERSION = 1
# 10 h: stage 0 in ~4-5 minutes with 2 jobs on a quiet 2-core machine (43 utterances/s
# measured on 200; README), under 10 minutes at half that rate
DEFAULT_HOURS = 10.0
DEFAULT_DEV_UTTS = 300
DEFAULT_TEST_UTTS = 300
BANK_PEAK = 0.9

logger = logging.getLogger(__name__)


def corpus_config(seed: int, hours: float, dev_utts: int, test_utts: int,
                  shares: Dict[str, float], text_id: str,
                  styles: Optional[Dict[str, float]] = None) -> dict:
    """Everything that determines the corpus; its hash identifies a finished corpus
    (styles only when some share is set, so a corpus without them keeps its hash)."""
    config = {"version": VERSION, "seed": seed, "hours": hours, "dev_utts": dev_utts,
              "test_utts": test_utts, "simulation": shares, "text": text_id}
    if styles and any(styles.values()):
        config["styles"] = styles
    return config


def engine_audio(record: dict, tmp_dir: str) -> np.ndarray:
    """The record's sentence spoken by its voice (in its style, if any): clean float
    samples at 16 kHz."""
    if record.get("style"):
        return render(record, tmp_dir)
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


def _make_one(job: Tuple[str, dict, str]) -> Tuple[str, int]:
    kind, record, data_root = job
    if kind == "bank":
        path = bank_path(data_root, record["utt"])
        return record["utt"], write_wav(path, lambda tmp: acoustics.to_int16(
            acoustics.set_peak(engine_audio(record, tmp), BANK_PEAK)))
    return record["utt"], write_wav(wav_path(data_root, record),
                                    lambda tmp: synthesize(record, data_root, tmp))


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


def synthesis_rate(run: SynthesisRun, nj: int) -> dict:
    """Utterances and audio hours made, per second and per minute of wall time."""
    made_hours = sum(run.lengths.values()) / acoustics.RATE / 3600
    return {"utterances": len(run.lengths), "audio_hours": round(made_hours, 4),
            "wall_s": round(run.wall_s, 1), "cpu_s": round(run.cpu_s, 1), "jobs": nj,
            "utts_per_s": round(len(run.lengths) / max(run.wall_s, 1e-9), 2),
            "audio_hours_per_min": round(made_hours / max(run.wall_s, 1e-9) * 60, 4)}


def generate_corpus(data_root: str, seed: int, hours: float, dev_utts: int = DEFAULT_DEV_UTTS,
                    test_utts: int = DEFAULT_TEST_UTTS, simulation: str = "default",
                    nj: int = 1, styles: str = "none") -> int:
    """Build (or finish) the corpus in ``data_root``; returns the number of WAVs written."""
    shares = parse_simulation(simulation)
    style_shares = parse_styles(styles)
    sentences = load_sentences(os.path.join(data_root, "text", "sentences.tsv"))
    config = corpus_config(seed, hours, dev_utts, test_utts, shares, source_fingerprint(),
                           style_shares)
    records = plan_corpus(sentences, seed, hours, dev_utts, test_utts, shares, style_shares)
    shares_planned = share_counts(records)

    def synthesise(todo: List[dict]) -> Dict[str, int]:
        """The babble bank (the utterances babble uses) first, then ``todo``."""
        for s in SETS:
            logger.info("simulation shares in %s: %s", s,
                        ", ".join(f"{k} {v:.1%}" for k, v in shares_planned[s].items()))
        talkers = {u for r in records if r["sim"]["noise"] for u in r["sim"]["noise"]["talkers"]}
        bank = [("bank", r, data_root) for r in records
                if r["utt"] in talkers and not wav_is_complete(bank_path(data_root, r["utt"]))]
        if bank:
            logger.info("babble bank: %d utterances to make", len(bank))
            run_jobs(_make_one, bank, nj, "babble bank")
        return run_jobs(_make_one, [("utt", r, data_root) for r in todo], nj, "synth")

    def describe(done: List[dict], run: SynthesisRun) -> dict:
        rate, stats = synthesis_rate(run, nj), corpus_statistics(done)
        logger.info("synthesis: %s", rate)
        for s in SETS:
            logger.info("%s: %s", s, stats[s])
        return {"text": text_statistics(sentences), "statistics": stats,
                "simulation_shares": shares_planned, "synthesis": rate}

    return build_corpus(data_root, config, records, synthesise, describe, extra_dirs=("babble",))


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
    parser.add_argument("--styles", default="none",
                        help="none | items kind=share, e.g. 'child=0.3,accent=0.5,reading=0.3,"
                             "natural=0.2' (kinds: child accent reading natural; "
                             "local/synth_broad/style.py)")
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = get_parser()
    args = parser.parse_args(argv)
    try:
        parse_simulation(args.simulation)
        check_packages()
        check_style_engines(parse_styles(args.styles))
    except (ValueError, MissingPackageError) as e:
        parser.exit(1, f"{parser.prog}: error: {e}\n")
    generate_corpus(args.data_root, args.seed, args.hours, args.dev_utts, args.test_utts,
                    args.simulation, max(1, args.nj), args.styles)


if __name__ == "__main__":
    main()

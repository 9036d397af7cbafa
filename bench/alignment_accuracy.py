#!/usr/bin/env python3
"""Word-boundary accuracy of forced alignment's word times on audio with known word times.

Each test utterance is built from words synthesised one at a time
(``local/synth/word_chain.py``: the built-in corpus's engines and held-out test voices;
words from the corpus vocabulary, which the units cover), each trimmed to its speech
(first/last 10 ms window within ``--trim_db`` of the word's loudest one), joined with
silences of ``--min_gap``..``--max_gap`` seconds, padded at both ends, with noise added
at ``--snr_db`` like the corpus's augmentation (60: near clean). The true start and end
of every word are therefore known to the sample.

The utterances are aligned to their transcripts along each of ``--paths`` and timed by
``wenet.alignment.timing`` (what ``alignment.py`` and ``transcribe.py`` report):

- ``ctc``: the CTC head's forced alignment, the frames' times (encoder offset corrected,
  ``timing.frame_offset_seconds``; words at least 50 ms): ``--no-refine_boundaries``;
- ``refined``: the same search steered by the audio's pauses, word boundaries moved to
  them (the default of alignment.py / transcribe.py);
- ``transducer``: a transducer's (``--transducer_exp_dir``) forced alignment through its
  lattice (``alignment.rnnt``), steered and refined by the pauses likewise;
- ``transducer_ctc``: that transducer's CTC head, refined;
- ``transducer_plain``: the transducer's lattice, the frames' times.

Printed per path: the fraction of word boundaries (starts and ends) within
``--tolerance`` of the truth, the error distribution (median, quartiles, the best constant
shift as an oracle), per kind of boundary. The ``ctc`` path also checks that our Viterbi
gives torchaudio's ``forced_align`` path on the same log-probabilities.

    . ./path.sh && python bench/alignment_accuracy.py \\
        --exp_dir exp/synth_train_zipformer \\
        --dict data/lang_char/train_unigram128_units.txt \\
        --bpe_model data/lang_char/train_unigram128.model [--snr_db 60] \\
        [--paths ctc,refined,transducer --transducer_exp_dir exp/synth_zipformer_rnnt]
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import random
import sys
import tempfile
from dataclasses import replace
from typing import Dict, List, Tuple

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as taf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from local.synth.augment import TARGET_RATE  # noqa: E402
from local.synth.sentences import SentenceGenerator, vocabulary  # noqa: E402
from local.synth.voices import split_voices  # noqa: E402
from local.synth.word_chain import ChainConf, word_chain  # noqa: E402
from wenet.alignment.align import ctc_forced_align, frames_needed  # noqa: E402
from wenet.alignment.pauses import pause_runs  # noqa: E402
from wenet.alignment.aligner import Aligner, Failure, Utterance  # noqa: E402
from wenet.decode.options import (ENCODER, add_refine_options, add_search_options,  # noqa: E402
                                   refine_conf, search_options)
from wenet.inference.loader import load_model_dir  # noqa: E402


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exp_dir", required=True, help="holds train.yaml and the checkpoints")
    p.add_argument("--checkpoint", default=None, help="default: the newest avg_*.pt")
    p.add_argument("--paths", default="ctc,refined",
                   help="comma-separated: " + ", ".join(PATHS) + " (module docstring)")
    p.add_argument("--transducer_exp_dir", default=None,
                   help="a transducer experiment (train.yaml + checkpoints) for the "
                        "transducer paths")
    p.add_argument("--transducer_checkpoint", default=None,
                   help="default: the newest avg_*.pt, else the newest N.pt")
    p.add_argument("--dict", required=True)
    p.add_argument("--bpe_model", default=None)
    p.add_argument("--num_utts", type=int, default=40)
    p.add_argument("--min_words", type=int, default=3)
    p.add_argument("--max_words", type=int, default=6)
    p.add_argument("--min_gap", type=float, default=0.15, help="seconds between words")
    p.add_argument("--max_gap", type=float, default=0.40)
    p.add_argument("--pad", type=float, default=0.25, help="silence before/after, seconds")
    p.add_argument("--snr_db", type=float, default=30.0)
    p.add_argument("--trim_db", type=float, default=50.0)
    p.add_argument("--tolerance", type=float, default=0.05, help="seconds")
    p.add_argument("--voices", default="test", choices=["train", "dev", "test"])
    p.add_argument("--corpus_seed", type=int, default=777, help="run.sh's seed: the voice split")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep_dir", default=None, help="keep the wavs, data.list and truth here")
    p.add_argument("--load_dir", default=None, help="reuse a set written by --keep_dir")
    p.add_argument("--word_source", default="vocabulary", choices=["vocabulary", "sentences"],
                   help="random corpus words, or the words of a corpus-style sentence in order")
    add_refine_options(p)
    add_search_options(p, ENCODER)
    p.add_argument("--sweep", action="store_true",
                   help="also try a grid of pause and speech penalties (on dev voices only)")
    return p


def make_set(args, tmp: str) -> List[dict]:
    """The synthetic utterances: key, samples, words with their true times."""
    rng = random.Random(args.seed)
    vocab = sorted(vocabulary(SentenceGenerator(random.Random(args.corpus_seed)).distinct(3000)))
    voices = split_voices(args.corpus_seed)[args.voices]
    sentences = SentenceGenerator(random.Random(f"{args.seed}-sentences"), args.min_words,
                                  args.max_words)
    chain = ChainConf(args.min_gap, args.max_gap, args.pad, args.snr_db, args.trim_db)
    utts = []
    for n in range(args.num_utts):
        voice = voices[n % len(voices)]
        if args.word_source == "sentences":
            words = sentences.sentence().split()
        else:
            words = rng.sample(vocab, rng.randint(args.min_words, args.max_words))
        wav, truth = word_chain(rng, voice, words, tmp, chain)
        utts.append({"key": f"align{n:03d}_{voice.voice_id}", "wav": wav, "truth": truth})
    return utts


def torchaudio_path(log_probs: torch.Tensor, tokens: List[int], blank: int) -> List[int]:
    path, _ = taf.forced_align(log_probs[None], torch.tensor([tokens], dtype=torch.int32),
                               blank=blank)
    return path[0].tolist()


def edit_distance(a: List[int], b: List[int]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def greedy_ter(log_probs: torch.Tensor, tokens: List[int], blank: int) -> float:
    """Token error rate of CTC greedy search against the transcript's tokens."""
    best = log_probs.argmax(-1).tolist()
    hyp = [x for i, x in enumerate(best) if x != blank and (i == 0 or x != best[i - 1])]
    return edit_distance(tokens, hyp) / max(1, len(tokens))


def boundaries(words, truth, ter: float, pad: float) -> List[Tuple[str, float, str, float]]:
    """(kind, signed error s, gap class, greedy TER) per word boundary."""
    if [w.word for w in words] != [t[0] for t in truth]:
        raise RuntimeError(f"word mismatch: {[w.word for w in words]} vs {truth}")
    gaps = [pad] + [b[1] - a[2] for a, b in zip(truth, truth[1:])] + [pad]
    out = []
    for i, (w, t) in enumerate(zip(words, truth)):
        out.append(("start", w.start_s - t[1], gap_class(gaps[i], i == 0), ter))
        out.append(("end", w.end_s - t[2], gap_class(gaps[i + 1], i == len(truth) - 1), ter))
    return out


def gap_class(gap: float, edge: bool) -> str:
    return "pad" if edge else ("gap<0.25s" if gap < 0.25 else "gap>=0.25s")


def report(name: str, rows, tol: float) -> float:
    err = np.array([r[1] for r in rows])
    within = float((np.abs(err) <= tol).mean())
    print(f"{name}: {100 * within:.1f} % of {len(err)} word boundaries within "
          f"{1000 * tol:.0f} ms (median |error| {1000 * np.median(np.abs(err)):.0f} ms); "
          + ", ".join(f"{100 * (np.abs(err) <= t).mean():.1f} % within {1000 * t:.0f} ms"
                      for t in (0.1, 0.2, 0.4)))
    q1, q3 = np.percentile(err, [25, 75])
    print(f"  signed error: median {1000 * np.median(err):+.0f} ms, quartiles "
          f"{1000 * q1:+.0f} .. {1000 * q3:+.0f} ms")
    shift = float(np.median(err))
    print(f"  after the best constant shift on these same utterances ({1000 * shift:+.0f} ms, "
          f"an oracle): {100 * (np.abs(err - shift) <= tol).mean():.1f} % within "
          f"{1000 * tol:.0f} ms")
    groups = {}
    for kind, e, gap, ter in rows:
        ter_group = [] if ter != ter else [f"{kind} TER{'<=' if ter <= 0.25 else '>'}0.25"]
        for g in [kind, f"{kind} {gap}"] + ter_group:
            groups.setdefault(g, []).append(e)
    for g, e in sorted(groups.items()):
        e = np.array(e)
        print(f"  {g:22s} n={len(e):4d} within {100 * (np.abs(e) <= tol).mean():5.1f} %, "
              f"mean {1000 * e.mean():+6.0f} ms, median |error| "
              f"{1000 * np.median(np.abs(e)):4.0f} ms, max |error| {1000 * np.abs(e).max():4.0f} ms")
    return within


PATHS = {  # name: (model, method, refined)
    "ctc": ("ctc", "ctc", False),
    "refined": ("ctc", "ctc", True),
    "transducer": ("transducer", "transducer", True),
    "transducer_ctc": ("transducer", "ctc", True),
    "transducer_plain": ("transducer", "transducer", False),
}


def newest_checkpoint(exp_dir: str) -> str:
    """The newest avg_*.pt of an experiment, else its newest epoch checkpoint N.pt."""
    averaged = sorted(glob.glob(os.path.join(exp_dir, "avg_*.pt")))
    if averaged:
        return averaged[-1]
    epochs = [p for p in glob.glob(os.path.join(exp_dir, "*.pt"))
              if os.path.basename(p)[:-3].isdigit()]
    if not epochs:
        raise FileNotFoundError(f"{exp_dir}: no avg_*.pt or N.pt checkpoint")
    return max(epochs, key=lambda p: int(os.path.basename(p)[:-3]))


def load_aligners(args, paths: List[str]) -> Dict[str, Aligner]:
    """One Aligner per path (models loaded once)."""
    options = search_options(args)
    loaded = {}
    for name in paths:
        which = PATHS[name][0]
        if which in loaded:
            continue
        exp_dir, ckpt = ((args.exp_dir, args.checkpoint) if which == "ctc"
                         else (args.transducer_exp_dir, args.transducer_checkpoint))
        if exp_dir is None:
            raise SystemExit(f"path {name} needs --transducer_exp_dir")
        ckpt = ckpt or newest_checkpoint(exp_dir)
        loaded[which] = load_model_dir(exp_dir, "cpu", ckpt, units=args.dict,
                                       bpe_model=args.bpe_model)
        print(f"{which} model {ckpt}; decoding_chunk_size {options.chunk_size}, "
              f"num_decoding_left_chunks {options.num_left_chunks}")
    aligners = {}
    for name in paths:
        which, method, refined = PATHS[name]
        lm = loaded[which]
        aligners[name] = Aligner(lm.model, lm.tokenizer, lm.feature_conf, "cpu",
                                 refine_conf(args) if refined else None, options.chunk_size,
                                 options.num_left_chunks, method=method)
    return aligners


SWEEP = [(penalty, speech) for penalty in (0.0, 10.0, 20.0, 40.0)
         for speech in (0.0, 2.0, 5.0, 10.0)]  # (pause_penalty, speech_penalty)


def aligned_words(aligner: Aligner, u: dict):
    """The words of utterance ``u`` as ``aligner`` times them, and its prepared form."""
    txt = " ".join(t[0] for t in u["truth"])
    prepared = aligner.prepare({"key": u["key"], "txt": txt, "sample_rate": TARGET_RATE,
                                "wav": torch.from_numpy(u["wav"]).float()[None]})
    if not isinstance(prepared, Utterance):
        raise RuntimeError(f"{u['key']}: {prepared}")
    prepared.wav, prepared.sample_rate = torch.from_numpy(u["wav"]), TARGET_RATE
    if aligner.refine is None:
        prepared.wav = None
    (ali,) = aligner.align([prepared])
    if isinstance(ali, Failure):
        raise RuntimeError(f"{u['key']}: {ali}")
    return ali.words, prepared


def align_all(args, aligners: Dict[str, Aligner], utts: List[dict]) -> Dict[str, list]:
    """Boundary rows per path; prints the CTC head's greedy TER and, for the ctc path,
    agreement with torchaudio."""
    rows: Dict[str, list] = {name: [] for name in aligners}
    sweep = {setting: [] for setting in SWEEP}
    same, ters, density = 0, [], []
    # the greedy token error and the torchaudio check: the first path with a CTC search
    ctc_aligner = next((a for a in aligners.values() if a.method == "ctc"), None)
    for u in utts:
        ter = float("nan")
        if ctc_aligner is not None:
            _, prepared = aligned_words(ctc_aligner, u)
            (logp,) = ctc_aligner.log_probs([prepared])
            ter = greedy_ter(logp, prepared.tokens, ctc_aligner.blank_id)
            ters.append(ter)
            density.append(frames_needed(prepared.tokens) / len(logp))
            same += (ctc_forced_align(logp, prepared.tokens, ctc_aligner.blank_id)
                     == torchaudio_path(logp, prepared.tokens, ctc_aligner.blank_id))
        for name, aligner in aligners.items():
            words, _ = aligned_words(aligner, u)
            rows[name] += boundaries(words, u["truth"], ter, args.pad)
        for (penalty, speech), r in (sweep.items() if args.sweep else ()):
            aligner = aligners["refined"]
            keep_conf = aligner.refine
            aligner.refine = replace(refine_conf(args), pause_penalty=penalty,
                                     speech_penalty=speech)
            r += boundaries(aligned_words(aligner, u)[0], u["truth"], ter, args.pad)
            aligner.refine = keep_conf
    print(f"{len(utts)} utterances, {sum(len(u['truth']) for u in utts)} words")
    if ters:
        print(f"{1000 * ctc_aligner.frame_shift_s:.0f} ms per encoder frame, offset "
              f"{1000 * ctc_aligner.geometry.offset_s:+.1f} ms; CTC greedy token error rate "
              f"{100 * np.mean(ters):.1f} % (per utterance: median {100 * np.median(ters):.0f} %, "
              f"{sum(t <= 0.25 for t in ters)} of {len(ters)} at most 25 %)")
        print(f"CTC frames needed / encoder frames: mean {np.mean(density):.2f}, max "
              f"{np.max(density):.2f}")
        print(f"agreement: our Viterbi path equals torchaudio's in {same} of {len(utts)} "
              "utterances")
    for (penalty, speech), r in sweep.items():
        if r:
            e = np.abs([x[1] for x in r])
            print(f"sweep pause penalty {penalty:g} speech penalty {speech:g}: "
                  f"{100 * (e <= args.tolerance).mean():.1f} % within {1000 * args.tolerance:.0f} ms")
    return rows


def pause_edge_ceiling(args, utts: List[dict]) -> None:
    """How many true boundaries have a pause edge (``pause_runs`` at the refinement's
    settings) within the tolerance: what snapping can reach with a perfect model."""
    hits = {"start": [], "end": []}
    for u in utts:
        runs = pause_runs(u["wav"], TARGET_RATE, refine_conf(args))
        for _, start, end in u["truth"]:
            hits["start"].append(min([abs(b - start) for _, b in runs], default=np.inf))
            hits["end"].append(min([abs(a - end) for a, _ in runs], default=np.inf))
    within = {k: 100 * float((np.array(v) <= args.tolerance).mean()) for k, v in hits.items()}
    print(f"audio alone: a pause edge lies within {1000 * args.tolerance:.0f} ms of "
          f"{(within['start'] + within['end']) / 2:.1f} % of the true boundaries (starts "
          f"{within['start']:.1f} %, ends {within['end']:.1f} %): the most snapping can reach")


def evaluate(args, utts: List[dict]) -> None:
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise SystemExit(f"unknown --paths {unknown}; known: {', '.join(PATHS)}")
    if args.sweep and "refined" not in paths:
        raise SystemExit("--sweep varies the refined path: include it in --paths")
    pause_edge_ceiling(args, utts)
    rows = align_all(args, load_aligners(args, paths), utts)
    print(f"voices: {args.voices}; refinement: slack {1000 * args.refine_slack:.0f} ms, "
          f"margin {args.refine_margin_db:.0f} dB, edge margin {args.refine_edge_margin_db:.0f} dB, "
          f"min pause {1000 * args.refine_min_pause:.0f} ms, "
          "penalties (pause, speech) CTC %g / %g, transducer %g / %g"
          % (*refine_conf(args).penalties(), *refine_conf(args).penalties(transducer=True)))
    within = {name: report(name, r, args.tolerance) for name, r in rows.items()}
    print(f"summary ({args.voices} voices, {args.snr_db:g} dB SNR): " + ", ".join(
        f"{name} {100 * w:.1f} %" for name, w in within.items())
          + f" of {len(next(iter(rows.values())))} boundaries within "
          f"{1000 * args.tolerance:.0f} ms")


def keep(args, utts: List[dict]) -> None:
    """Write the wavs, a raw data.list and the true times (for alignment.py or Praat)."""
    os.makedirs(args.keep_dir, exist_ok=True)
    with open(os.path.join(args.keep_dir, "data.list"), "w") as lst, \
            open(os.path.join(args.keep_dir, "truth.json"), "w") as tru:
        for u in utts:
            path = os.path.abspath(os.path.join(args.keep_dir, u["key"] + ".wav"))
            sf.write(path, u["wav"].astype(np.float32), TARGET_RATE, subtype="PCM_16")
            txt = " ".join(t[0] for t in u["truth"])
            lst.write(json.dumps({"key": u["key"], "wav": path, "txt": txt}) + "\n")
            tru.write(json.dumps({"key": u["key"], "words": u["truth"]}) + "\n")
    with open(os.path.join(args.keep_dir, "set.json"), "w") as f:  # what --load_dir reports
        json.dump({"voices": args.voices, "snr_db": args.snr_db, "seed": args.seed}, f)


def load(load_dir: str) -> List[dict]:
    """The set ``keep`` wrote."""
    with open(os.path.join(load_dir, "truth.json")) as f:
        truth = {d["key"]: d["words"] for d in map(json.loads, f)}
    utts = []
    with open(os.path.join(load_dir, "data.list")) as f:
        for d in map(json.loads, f):
            wav, rate = sf.read(d["wav"], dtype="float64")
            if rate != TARGET_RATE:
                raise ValueError(f"{d['wav']}: {rate} Hz, expected {TARGET_RATE}")
            utts.append({"key": d["key"], "wav": wav, "truth": truth[d["key"]]})
    return utts


def main() -> None:
    parser = get_parser()
    args = parser.parse_args()
    if args.sweep and args.voices == "test":
        parser.error("--sweep tunes the refinement: use --voices dev (test voices report)")
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    if args.load_dir:
        utts = load(args.load_dir)
        meta = os.path.join(args.load_dir, "set.json")
        if os.path.exists(meta):  # report the set's own voices and noise
            with open(meta) as f:
                for name, value in json.load(f).items():
                    setattr(args, name, value)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            utts = make_set(args, tmp)
    if args.keep_dir and not args.load_dir:
        keep(args, utts)
    with torch.no_grad():
        evaluate(args, utts)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Word-boundary accuracy of CTC forced alignment on audio with known word times.

Each test utterance is built from words synthesised one at a time (the built-in
corpus's engines and held-out test voices, ``local/synth``; words from the corpus
vocabulary, which the units cover), each trimmed to its speech (first/last 10 ms
window within ``--trim_db`` of the word's loudest one), joined with silences of
``--min_gap``..``--max_gap`` seconds, padded at both ends, with noise added at
``--snr_db`` like the corpus's augmentation. The true start and end of every word
are therefore known to the sample.

The utterances are aligned to their transcripts with a trained model twice: with
``wenet.decode.align.ctc_forced_align`` (what ``wenet/bin/alignment.py`` runs) and
with ``torchaudio.functional.forced_align``, on the same CTC log-probabilities and
with the same token-to-word grouping. Printed: the fraction of word boundaries
(starts and ends) within ``--tolerance`` of the truth for both, the error
distribution per kind of boundary, and how often the two aligners agree.

    . ./path.sh && python bench/alignment_accuracy.py \\
        --exp_dir /work/mainjob/exp/synth_train_conformer \\
        --dict /work/mainjob/data/lang_char/train_unigram128_units.txt \\
        --bpe_model /work/mainjob/data/lang_char/train_unigram128.model
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as taf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from local.synth.augment import TARGET_RATE, coloured_noise  # noqa: E402
from local.synth.sentences import SentenceGenerator, vocabulary  # noqa: E402
from local.synth.voices import split_voices  # noqa: E402
from wenet.dataset.audio import resample  # noqa: E402
from wenet.dataset.fbank import FeatureConf  # noqa: E402
from wenet.dataset.tokenizer import Tokenizer  # noqa: E402
from wenet.decode.align import ctc_forced_align, token_spans, word_spans  # noqa: E402
from wenet.decode.align_batch import Aligner, Utterance  # noqa: E402
from wenet.models import load_model  # noqa: E402
from wenet.utils.file_utils import load_yaml, read_symbol_table  # noqa: E402


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exp_dir", required=True, help="holds train.yaml and the checkpoints")
    p.add_argument("--checkpoint", default=None, help="default: the newest avg_*.pt")
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
    return p


def trim(samples: np.ndarray, rate: int, trim_db: float) -> np.ndarray:
    """Samples from the first to the last 10 ms window within ``trim_db`` of the loudest."""
    win = rate // 100
    n = len(samples) // win
    energy = (samples[: n * win].reshape(n, win) ** 2).mean(axis=1)
    loud = np.nonzero(energy >= energy.max() * 10 ** (-trim_db / 10))[0]
    return samples[loud[0] * win: (loud[-1] + 1) * win]


def synth_word(voice, word: str, tmp: str, trim_db: float) -> np.ndarray:
    """One word spoken by ``voice``, trimmed, at 16 kHz."""
    out = os.path.join(tmp, "w.wav")
    cmd = voice.command(word, 0, out)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples, rate = sf.read(out, dtype="float32")
    wav = resample(torch.from_numpy(trim(samples, rate, trim_db))[None], rate, TARGET_RATE)
    return wav[0].numpy().astype(np.float64)


def build_utterance(rng: random.Random, voice, words: List[str], args, tmp: str
                    ) -> Tuple[np.ndarray, List[Tuple[str, float, float]]]:
    """(16 kHz float samples, [(word, true start s, true end s)])."""
    pieces, truth, now = [np.zeros(int(args.pad * TARGET_RATE))], [], args.pad
    for i, word in enumerate(words):
        if i:
            gap = np.zeros(int(rng.uniform(args.min_gap, args.max_gap) * TARGET_RATE))
            pieces.append(gap)
            now += len(gap) / TARGET_RATE
        wav = synth_word(voice, word, tmp, args.trim_db)
        truth.append((word, now, now + len(wav) / TARGET_RATE))
        pieces.append(wav)
        now += len(wav) / TARGET_RATE
    pieces.append(np.zeros(int(args.pad * TARGET_RATE)))
    wav = np.concatenate(pieces)
    speech = np.concatenate([p for p in pieces if p.any()])
    noise = coloured_noise(len(wav), rng.choice(["white", "pink", "brown"]),
                           np.random.default_rng(rng.getrandbits(32)))
    wav = wav + noise * np.sqrt(np.mean(speech ** 2) / 10 ** (args.snr_db / 10))
    return 0.7 * wav / np.abs(wav).max(), truth


def make_set(args, tmp: str) -> List[dict]:
    """The synthetic utterances: key, samples, words with their true times."""
    rng = random.Random(args.seed)
    vocab = sorted(vocabulary(SentenceGenerator(random.Random(args.corpus_seed)).distinct(3000)))
    voices = split_voices(args.corpus_seed)[args.voices]
    utts = []
    for n in range(args.num_utts):
        voice = voices[n % len(voices)]
        words = rng.sample(vocab, rng.randint(args.min_words, args.max_words))
        wav, truth = build_utterance(rng, voice, words, args, tmp)
        utts.append({"key": f"align{n:03d}_{voice.voice_id}", "wav": wav, "truth": truth})
    return utts


def torchaudio_path(log_probs: torch.Tensor, tokens: List[int], blank: int) -> List[int]:
    path, _ = taf.forced_align(log_probs[None], torch.tensor([tokens], dtype=torch.int32),
                               blank=blank)
    return path[0].tolist()


def errors(words, truth) -> Dict[str, List[float]]:
    """Signed errors (predicted - true, s) of word starts and ends."""
    if [w.word for w in words] != [t[0] for t in truth]:
        raise RuntimeError(f"word mismatch: {[w.word for w in words]} vs {truth}")
    return {"start": [w.start_s - t[1] for w, t in zip(words, truth)],
            "end": [w.end_s - t[2] for w, t in zip(words, truth)]}


def report(name: str, errs: Dict[str, List[float]], tol: float) -> float:
    both = np.abs(np.array(errs["start"] + errs["end"]))
    within = float((both <= tol).mean())
    print(f"{name}: {100 * within:.1f} % of {len(both)} word boundaries within "
          f"{1000 * tol:.0f} ms (median |error| {1000 * np.median(both):.0f} ms)")
    signed = np.array(errs["start"] + errs["end"])
    shift = float(np.median(signed))
    sweep = ", ".join(f"{100 * (both <= t).mean():.1f} % within {1000 * t:.0f} ms"
                      for t in (0.1, 0.2, 0.4))
    print(f"  {sweep}; after the best constant shift ({1000 * shift:+.0f} ms, an oracle): "
          f"{100 * (np.abs(signed - shift) <= tol).mean():.1f} % within {1000 * tol:.0f} ms")
    for kind in ("start", "end"):
        e = np.array(errs[kind])
        print(f"  {kind:5s}: within {100 * (np.abs(e) <= tol).mean():5.1f} %, mean error "
              f"{1000 * e.mean():+6.0f} ms, median |error| {1000 * np.median(np.abs(e)):4.0f} ms, "
              f"max |error| {1000 * np.abs(e).max():4.0f} ms")
    return within


def evaluate(args, utts: List[dict]) -> None:
    ckpt = args.checkpoint or sorted(glob.glob(os.path.join(args.exp_dir, "avg_*.pt")))[-1]
    configs = load_yaml(os.path.join(args.exp_dir, "train.yaml"))
    cmvn = configs.get("cmvn_file")
    if cmvn and not os.path.isabs(cmvn) and not os.path.exists(cmvn):
        # a path relative to the recipe root (exp_dir/../..), where training ran
        configs["cmvn_file"] = os.path.join(args.exp_dir, "..", "..", cmvn)
    model = load_model(configs, ckpt)
    aligner = Aligner(model, Tokenizer(read_symbol_table(args.dict), args.bpe_model),
                      FeatureConf.from_config(configs))
    print(f"model {ckpt}; {len(utts)} utterances, {sum(len(u['truth']) for u in utts)} words, "
          f"{1000 * aligner.frame_shift_s:.0f} ms per encoder frame")
    errs = {"ours": {"start": [], "end": []}, "torchaudio": {"start": [], "end": []}}
    same_paths, same_bounds, total_bounds, secs = 0, 0, 0, {"ours": 0.0, "torchaudio": 0.0}
    for u in utts:
        txt = " ".join(t[0] for t in u["truth"])
        prepared = aligner.prepare({"key": u["key"], "txt": txt, "sample_rate": TARGET_RATE,
                                    "wav": torch.from_numpy(u["wav"]).float()[None]})
        if not isinstance(prepared, Utterance):
            raise RuntimeError(f"{u['key']}: {prepared}")
        (logp,) = aligner.log_probs([prepared])
        words = {}
        for name, fn in (("ours", ctc_forced_align), ("torchaudio", torchaudio_path)):
            start = time.perf_counter()
            path = fn(logp, prepared.tokens, aligner.blank_id)
            secs[name] += time.perf_counter() - start
            spans = token_spans(path, logp, aligner.blank_id)
            words[name] = word_spans(spans, prepared.units, aligner.frame_shift_s)
            for kind, e in errors(words[name], u["truth"]).items():
                errs[name][kind] += e
            if name == "ours":
                ours_path = path
        same_paths += ours_path == path
        pairs = zip(words["ours"], words["torchaudio"])
        same_bounds += sum((a.start_s == b.start_s) + (a.end_s == b.end_s) for a, b in pairs)
        total_bounds += 2 * len(words["ours"])
    report("ours      ", errs["ours"], args.tolerance)
    report("torchaudio", errs["torchaudio"], args.tolerance)
    print(f"agreement: identical frame paths in {same_paths} of {len(utts)} utterances, "
          f"identical boundaries {same_bounds} of {total_bounds}")
    print(f"Viterbi time: ours {secs['ours']:.3f} s, torchaudio {secs['torchaudio']:.3f} s "
          f"({len(utts)} utterances)")


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


def main() -> None:
    args = get_parser().parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        utts = make_set(args, tmp)
    if args.keep_dir:
        keep(args, utts)
    with torch.no_grad():
        evaluate(args, utts)


if __name__ == "__main__":
    main()

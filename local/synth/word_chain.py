"""Utterances with known word times: words synthesised one at a time, each trimmed to its
speech, joined with silences of random length, padded at both ends, noise added.

What ``bench/alignment_accuracy.py`` measures forced alignment on, and what the
alignment tests build their reference utterances from: the true start and end of every
word are known to the sample.
"""
from __future__ import annotations

import os
import random
import subprocess
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np
import soundfile as sf
import torch

from local.synth.augment import TARGET_RATE, coloured_noise, trim_to_speech
from local.synth.voices import Voice
from wenet.dataset.audio import resample


@dataclass
class ChainConf:
    """Silences between words (``min_gap_s``..``max_gap_s``) and around them (``pad_s``),
    noise level against the speech (``snr_db``; ``inf``: none) and the trimming of each
    word (first/last 10 ms window within ``trim_db`` of its loudest)."""

    min_gap_s: float = 0.15
    max_gap_s: float = 0.40
    pad_s: float = 0.25
    snr_db: float = 30.0
    trim_db: float = 50.0


def synth_word(voice: Voice, word: str, tmp_dir: str, trim_db: float) -> np.ndarray:
    """``word`` spoken by ``voice``, trimmed to its speech, at 16 kHz (float64)."""
    out = os.path.join(tmp_dir, "word.wav")
    subprocess.run(voice.command(word, 0, out), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    samples, rate = sf.read(out, dtype="float32")
    wav = resample(torch.from_numpy(trim_to_speech(samples, rate, trim_db))[None], rate,
                   TARGET_RATE)
    return wav[0].numpy().astype(np.float64)


def word_chain(rng: random.Random, voice: Voice, words: List[str], tmp_dir: str,
               conf: ChainConf = ChainConf()) -> Tuple[np.ndarray, List[Tuple[str, float, float]]]:
    """(16 kHz samples peaking at 0.7, [(word, true start s, true end s)]); the gaps, the
    noise colour and the noise itself come from ``rng``."""
    pieces, truth, now = [np.zeros(int(conf.pad_s * TARGET_RATE))], [], conf.pad_s
    for i, word in enumerate(words):
        if i:
            gap = np.zeros(int(rng.uniform(conf.min_gap_s, conf.max_gap_s) * TARGET_RATE))
            pieces.append(gap)
            now += len(gap) / TARGET_RATE
        wav = synth_word(voice, word, tmp_dir, conf.trim_db)
        truth.append((word, now, now + len(wav) / TARGET_RATE))
        pieces.append(wav)
        now += len(wav) / TARGET_RATE
    pieces.append(np.zeros(int(conf.pad_s * TARGET_RATE)))
    wav = np.concatenate(pieces)
    speech = np.concatenate([p for p in pieces if p.any()])
    noise = coloured_noise(len(wav), rng.choice(["white", "pink", "brown"]),
                           np.random.default_rng(rng.getrandbits(32)))
    wav = wav + noise * np.sqrt(np.mean(speech ** 2) / 10 ** (conf.snr_db / 10))
    return 0.7 * wav / np.abs(wav).max(), truth

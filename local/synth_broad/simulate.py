"""Which simulation each utterance gets (drawn at planning) and its application.

Kinds and their default shares (probability per utterance):

=========  =====  ===========================================================
rir        0.5    a Polack room, RT60 0.2-0.8 s, DRR 0-12 dB
noise      0.45   white, pink or brown noise, SNR 5-30 dB   } at most one
babble     0.2    3-7 other utterances of the corpus, SNR 5-30 dB } of the two
band       0.15   band-limit: highs cut at 3-7.5 kHz, half the time lows below 50-250 Hz
telephone  0.1    8 kHz mu-law telephone channel           } at most one
gain       1.0    RMS level -38..-16 dBFS (loud ones clip); off: peak 0.5
=========  =====  ===========================================================

Order: silence padding -> room -> noise (SNR against the reverberant speech, the
padding excluded) -> channel -> level -> int16. Why at generation and not on the
fly: the machine has 2 cores and the training loader already competes with
training for them; the recipe caches each utterance's fbank after the first
epoch (``cache_features``), which waveform simulation on the fly would defeat
(fbank again every epoch); and drawn once, every utterance's audio is
reproducible from its manifest record, and the shares are exact counts. The
price, one fixed simulation per utterance, is small next to the corpus having
more utterances than training has epochs.
"""
from __future__ import annotations

import random
from typing import Dict, List, Optional, Sequence

import numpy as np

from local.synth.augment import NOISE_COLOURS, coloured_noise
from local.synth_broad import acoustics

SIM_KINDS = ("rir", "noise", "babble", "band", "telephone", "gain")
DEFAULT_SHARES = {"rir": 0.5, "noise": 0.45, "babble": 0.2, "band": 0.15, "telephone": 0.1,
                  "gain": 1.0}
EXCLUSIVE = (("noise", "babble"), ("band", "telephone"))
RT60_RANGE_S = (0.2, 0.8)
DRR_RANGE_DB = (0.0, 12.0)
SNR_RANGE_DB = (5.0, 30.0)
BABBLE_TALKERS = (3, 7)
BAND_HIGH_RANGE_HZ = (3000.0, 7500.0)
BAND_LOW_RANGE_HZ = (50.0, 250.0)
LEVEL_RANGE_DBFS = (-38.0, -16.0)
PEAK_WITHOUT_GAIN = 0.5
# silence before / after the speech: a lead of varying length, so that a model cannot
# learn where speech starts (local/synth found its model emitting tokens too early)
LEAD_RANGE_MS = (50, 600)
TAIL_RANGE_MS = (50, 250)


def parse_simulation(spec: str) -> Dict[str, float]:
    """``default``, ``none``, or comma-separated items ``default``/``none``/``kind=share``
    applied in order (``default,babble=0``); kinds not set are 0."""
    shares = {k: 0.0 for k in SIM_KINDS}
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        if item == "default":
            shares.update(DEFAULT_SHARES)
        elif item == "none":
            shares = {k: 0.0 for k in SIM_KINDS}
        else:
            kind, sep, value = item.partition("=")
            if not sep or kind.strip() not in SIM_KINDS:
                raise ValueError(f"simulation: bad item {item!r}; expected default, none or "
                                 f"kind=share with kind one of {', '.join(SIM_KINDS)}")
            try:
                share = float(value)
            except ValueError:
                raise ValueError(f"simulation: {item!r}: share is not a number") from None
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"simulation: {item!r}: share must be in [0, 1]")
            shares[kind.strip()] = share
    for a, b in EXCLUSIVE:
        if shares[a] + shares[b] > 1.0 + 1e-9:
            raise ValueError(f"simulation: {a} and {b} exclude each other; their shares "
                             f"add up to {shares[a] + shares[b]:g} > 1")
    return shares


def _pick_exclusive(rng: random.Random, shares: Dict[str, float], pair: Sequence[str]) -> Optional[str]:
    u = rng.random()
    if u < shares[pair[0]]:
        return pair[0]
    if u < shares[pair[0]] + shares[pair[1]]:
        return pair[1]
    return None


def draw_simulation(rng: random.Random, shares: Dict[str, float], bank: Sequence[str],
                    utt: str) -> dict:
    """One utterance's simulation parameters (JSON-able); ``bank`` lists the utterances
    babble may use (``utt`` itself excepted). Every draw happens whatever the shares,
    so switching one kind off leaves the other kinds' parameters unchanged."""
    pad = [rng.randint(*LEAD_RANGE_MS), rng.randint(*TAIL_RANGE_MS)]
    use_rir = rng.random() < shares["rir"]
    rir = {"rt60": round(rng.uniform(*RT60_RANGE_S), 3),
           "drr_db": round(rng.uniform(*DRR_RANGE_DB), 2), "seed": rng.getrandbits(63)}
    noise_kind = _pick_exclusive(rng, shares, EXCLUSIVE[0])
    colour = rng.choice(NOISE_COLOURS)
    others = [u for u in bank if u != utt]
    talkers = rng.sample(others, min(rng.randint(*BABBLE_TALKERS), len(others)))
    noise = {"kind": colour if noise_kind == "noise" else "babble",
             "snr_db": round(rng.uniform(*SNR_RANGE_DB), 2), "seed": rng.getrandbits(63),
             "talkers": talkers if noise_kind == "babble" else []}
    if noise_kind == "babble" and not talkers:
        noise_kind = None  # a corpus of one utterance has nobody to babble
    channel_kind = _pick_exclusive(rng, shares, EXCLUSIVE[1])
    low = rng.uniform(*BAND_LOW_RANGE_HZ) if rng.random() < 0.5 else 0.0
    channel = {"kind": channel_kind, "low_hz": round(low, 1),
               "high_hz": round(rng.uniform(*BAND_HIGH_RANGE_HZ), 1)}
    level_dbfs = round(rng.uniform(*LEVEL_RANGE_DBFS), 2)
    level = {"kind": "gain", "dbfs": level_dbfs} if rng.random() < shares["gain"] \
        else {"kind": "peak", "peak": PEAK_WITHOUT_GAIN}
    return {"pad_ms": pad, "rir": rir if use_rir else None,
            "noise": noise if noise_kind else None,
            "channel": channel if channel_kind else None, "level": level}


def sim_kinds(sim: dict) -> List[str]:
    """The kinds applied by one record's parameters (for the share counts)."""
    kinds = []
    if sim["rir"]:
        kinds.append("rir")
    if sim["noise"]:
        kinds.append("babble" if sim["noise"]["kind"] == "babble" else "noise")
    if sim["channel"]:
        kinds.append(sim["channel"]["kind"])
    if sim["level"]["kind"] == "gain":
        kinds.append("gain")
    return kinds


def share_counts(records: Sequence[dict]) -> Dict[str, Dict[str, float]]:
    """{set: {kind: fraction of the set's utterances}} of planned records."""
    out: Dict[str, Dict[str, float]] = {}
    for subset in sorted({r["set"] for r in records}):
        recs = [r for r in records if r["set"] == subset]
        counts = {k: 0 for k in SIM_KINDS}
        for r in recs:
            for k in sim_kinds(r["sim"]):
                counts[k] += 1
        out[subset] = {k: round(counts[k] / len(recs), 4) for k in SIM_KINDS}
    return out


def apply_simulation(speech: np.ndarray, sim: dict,
                     talkers: Sequence[np.ndarray] = ()) -> np.ndarray:
    """Clean speech (float, 16 kHz) -> int16 samples after ``sim`` (see the module
    docstring for the order); ``talkers``: the babble utterances' clean audio."""
    rate = acoustics.RATE
    lead, tail = (int(ms * rate / 1000) for ms in sim["pad_ms"])
    wav = np.concatenate([np.zeros(lead), speech.astype(np.float64), np.zeros(tail)])
    if sim["rir"]:
        r = sim["rir"]
        rir = acoustics.polack_rir(r["rt60"], r["drr_db"], np.random.default_rng(r["seed"]))
        wav = acoustics.reverberate(wav, rir)
    if sim["noise"]:
        n = sim["noise"]
        rng = np.random.default_rng(n["seed"])
        noise = acoustics.babble(talkers, len(wav), rng) if n["kind"] == "babble" \
            else coloured_noise(len(wav), n["kind"], rng)
        speech_power = float(np.mean(wav[lead:len(wav) - tail] ** 2))
        wav = acoustics.mix_at_snr(wav, noise, n["snr_db"], speech_power)
    if sim["channel"]:
        c = sim["channel"]
        wav = acoustics.telephone(wav) if c["kind"] == "telephone" \
            else acoustics.band_limit(wav, c["low_hz"], c["high_hz"])
    level = sim["level"]
    wav = acoustics.set_level(wav, level["dbfs"]) if level["kind"] == "gain" \
        else acoustics.set_peak(wav, level["peak"])
    return acoustics.to_int16(wav)

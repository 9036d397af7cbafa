"""Every English voice espeak-ng and flite give, split into train/dev/test voices.

A voice is one engine setting (``local.synth.voices.Voice``): espeak-ng accent x
variant x rate x pitch, or a flite voice x duration stretch x mean F0.

* espeak-ng: 8 English accents x 84 variants (all of espeak-ng's variants except
  the robotic, demonic, whispered and test ones, and ``Mr serious`` whose file name
  holds a space). Per accent, 2 variants go to test and 2 others to dev, each
  variant held out in at most one accent: so every held-out (accent, variant) pair
  is one training never heard, while its accent and its variant both occur in
  training (with 7 other accents). Every pair gets ``SETTINGS_PER_PAIR`` distinct
  (rate, pitch) settings drawn from wide ranges.
* flite: kal, kal16, awb, rms, slt (``awb_time`` speaks only times); per voice a
  grid of duration stretch x mean F0 is shuffled, one setting goes to dev, one to
  test, the rest to training (flite has too few voices to hold whole ones out).
"""
from __future__ import annotations

import random
from typing import Dict, List, Tuple

from local.synth.voices import ESPEAK_ACCENTS, FESTIVAL_VOICES, SETS, Voice, grid_split

ESPEAK_VARIANTS = (
    "adam", "Alex", "Alicia", "Andrea", "Andy", "Annie", "antonio", "aunty", "belinda",
    "benjamin", "boris", "caleb", "david", "Denis", "Diogo", "ed", "edward", "edward2", "Gene",
    "Gene2", "gustave", "Henrique", "Hugo", "iven", "iven2", "iven3", "iven4", "Jacky", "john",
    "kaukovalta", "Lee", "linda", "marcelo", "Marco", "Mario", "max", "Michael", "michel",
    "miguel", "Mike", "Nguyen", "pablo", "paul", "pedro", "quincy", "RicishayMax",
    "RicishayMax2", "RicishayMax3", "rob", "robert", "steph", "steph2", "steph3", "Storm",
    "Tweaky", "zac", "anika", "AnxiousAndy", "f1", "f2", "f3", "f4", "f5", "grandma", "grandpa",
    "klatt", "klatt2", "klatt3", "klatt4", "klatt5", "klatt6", "m1", "m2", "m3", "m4", "m5", "m6",
    "m7", "m8", "norbert", "sandro", "shelby", "travis", "victor")
ESPEAK_RATES = range(120, 241, 10)   # words per minute (engine default 175)
ESPEAK_PITCHES = range(15, 86, 5)    # 0..99, engine default 50
SETTINGS_PER_PAIR = 3
HELD_OUT_PER_ACCENT = 2              # (accent, variant) pairs per accent in dev and in test

# flite voice -> mean F0 choices in Hz (empty: the voice ignores the F0 setting)
FLITE_F0: Dict[str, Tuple[int, ...]] = {
    "kal": (80, 93, 105, 118, 130),
    "kal16": (80, 93, 105, 118, 130),
    "awb": (85, 98, 110, 123, 135),
    "rms": (),
    "slt": (140, 155, 170, 185, 200),
}
FLITE_STRETCHES = (0.8, 0.88, 0.96, 1.04, 1.12, 1.2)
# the "natural" voices (--styles natural=...): festival's diphone voices x stretch x
# mean F0, its HTS voice and piper's neural voice x stretch (neither takes an F0)
FESTIVAL_F0: Dict[str, Tuple[int, ...]] = {
    "kal_diphone": (85, 95, 105, 115, 125), "ked_diphone": (85, 95, 105, 115, 125),
    "cmu_us_slt_arctic_hts": ()}
PIPER_NAMES = ("joe",)
NATURAL_STRETCHES = (0.85, 0.92, 1.0, 1.08, 1.16, 1.25)


def _held_out_pairs(rng: random.Random) -> Dict[str, List[Tuple[str, str]]]:
    """(accent, variant) pairs of dev and test; no variant is held out twice."""
    free = list(ESPEAK_VARIANTS)
    rng.shuffle(free)
    out: Dict[str, List[Tuple[str, str]]] = {"dev": [], "test": []}
    for accent in ESPEAK_ACCENTS:
        for subset in ("dev", "test"):
            for _ in range(HELD_OUT_PER_ACCENT):
                out[subset].append((accent, free.pop()))
    return out


def _settings(rng: random.Random, n: int) -> List[Tuple[int, int]]:
    grid = [(r, p) for r in ESPEAK_RATES for p in ESPEAK_PITCHES]
    return rng.sample(grid, n)


def _espeak_split(rng: random.Random) -> Dict[str, List[Voice]]:
    held = _held_out_pairs(rng)
    held_set = {p for pairs in held.values() for p in pairs}
    pairs = {"train": [(a, v) for a in ESPEAK_ACCENTS for v in ESPEAK_VARIANTS
                       if (a, v) not in held_set], **held}
    out: Dict[str, List[Voice]] = {s: [] for s in SETS}
    for subset in SETS:
        for accent, variant in pairs[subset]:
            out[subset] += [Voice("espeak", accent, variant, float(rate), pitch)
                            for rate, pitch in _settings(rng, SETTINGS_PER_PAIR)]
    return out


def natural_split(seed: int) -> Dict[str, Dict[str, List[Voice]]]:
    """{set: {"festival": voices, "piper": voices}}: per voice its settings grid
    shuffled, one setting to dev, one to test, the rest to training (as flite's)."""
    rng = random.Random(f"{seed}-broad-natural-voices")
    assert set(FESTIVAL_F0) == set(FESTIVAL_VOICES)
    festival = grid_split(rng, FESTIVAL_F0, NATURAL_STRETCHES, engine="festival")
    piper = grid_split(rng, {n: () for n in PIPER_NAMES}, NATURAL_STRETCHES, engine="piper")
    return {s: {"festival": festival[s], "piper": piper[s]} for s in SETS}


def split_voices(seed: int, natural: bool = False) -> Dict[str, Dict[str, List[Voice]]]:
    """{set: {engine: voices}} for ``seed`` (festival and piper too when ``natural``);
    the sets share no voice."""
    rng = random.Random(f"{seed}-broad-voices")
    espeak, flite = _espeak_split(rng), grid_split(rng, FLITE_F0, FLITE_STRETCHES)
    voices = {s: {"espeak": espeak[s], "flite": flite[s]} for s in SETS}
    if natural:
        for s, natural_voices in natural_split(seed).items():
            voices[s].update(natural_voices)
    ids = [v.voice_id for s in SETS for e in voices[s].values() for v in e]
    if len(ids) != len(set(ids)):  # an internal invariant, cheap to keep honest
        raise AssertionError("voice ids collide")
    return voices

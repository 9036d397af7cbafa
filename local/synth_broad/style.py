"""Speaker styles of the broad corpus (issue 38): children, a Mandarin accent,
read-aloud style and natural voices, each switchable with a share.

``--styles`` takes ``none`` or comma-separated ``kind=share`` items:

=========  ===================================================================
child      the utterance's voice made a child's: engine F0 raised into
           ``child.F0_RANGE_HZ`` (espeak: pitch 75-99; flite and festival's
           diphone voices: the mean F0) and formants and F0 scaled together by a
           drawn factor (``child.child_shift``)
accent     the share of espeak-ng utterances (the only engine that reads
           phonemes) whose phonemes the Mandarin-L1 rules of ``accent`` rewrite
           before synthesis (the transcript unchanged)
reading    read-aloud style (``reading``): slower, phrases with pauses,
           restarts and held sounds
natural    the share of utterances spoken by festival's voices and piper's
           neural voice, half each (taken from espeak-ng's share; flite keeps
           its own); piper has no F0 setting, so its children get the formant
           and F0 scaling alone
=========  ===================================================================

A record's style is drawn at planning from its own random stream (so the texts,
voices and simulation of the corpus do not move when a share changes) and stored
in the record; ``render`` makes its audio. Shares 0 everywhere give exactly the
corpus without styles.
"""
from __future__ import annotations

import dataclasses
import os
import random
import shutil
from typing import Dict, List, Optional

import numpy as np

from local.synth.corpus import voice_samples
from local.synth.piper_voice import PiperVoiceMissing, check_piper_voice
from local.synth.voices import Voice
from local.synth_broad import acoustics
from local.synth_broad.accent import apply_accent, espeak_words, phoneme_input
from local.synth_broad.child import F0_RANGE_HZ, child_shift, draw_child, wsola_stretch
from local.synth_broad.reading import HOLD_MS, draw_reading
from local.synth_broad.voices import PIPER_NAMES

STYLE_KINDS = ("child", "accent", "reading", "natural")
CHILD_ESPEAK_PITCH = (75, 99)
ESPEAK_MIN_RATE = 80        # words per minute: espeak-ng's floor
TRIM_DB = -40.0             # a read-aloud phrase's edges quieter than this under its peak are cut
TRIM_MARGIN_MS = 20


def parse_styles(spec: str) -> Dict[str, float]:
    """``none`` or ``kind=share`` items (kinds ``STYLE_KINDS``, shares in [0, 1]);
    kinds not named are 0."""
    shares = {k: 0.0 for k in STYLE_KINDS}
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        if item == "none":
            shares = {k: 0.0 for k in STYLE_KINDS}
            continue
        kind, sep, value = item.partition("=")
        if not sep or kind not in shares:
            raise ValueError(f"bad style item {item!r} in {spec!r}: expected none or kind=share "
                             f"with kind one of {', '.join(STYLE_KINDS)}")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"style share {item!r} in {spec!r} must be a number in [0, 1]")
        shares[kind] = share
    return shares


FESTIVAL_PACKAGES = {"kal_diphone": "festvox-kallpc16k", "ked_diphone": "festvox-kdlpc16k",
                     "cmu_us_slt_arctic_hts": "festvox-us-slt-hts"}
FESTIVAL_VOICE_DIRS = ("/usr/share/festival/voices/english", "/usr/share/festival/voices/us")


def check_style_engines(shares: Dict[str, float]) -> None:
    """Raise ValueError naming what to install when a share needs an engine or voice
    that is missing (festival and its voices, piper and its voice packages); nothing
    is ever downloaded."""
    if not shares.get("natural"):
        return
    missing = [] if shutil.which("festival") else ["festival"]
    missing += [pkg for name, pkg in FESTIVAL_PACKAGES.items()
                if not any(os.path.isdir(os.path.join(d, name)) for d in FESTIVAL_VOICE_DIRS)]
    problems = []
    if missing:
        problems.append(f"festival voices are missing: apt-get install -y {' '.join(missing)} "
                        f"(tools/install.sh does this as root)")
    for name in PIPER_NAMES:
        try:
            check_piper_voice(name)
        except PiperVoiceMissing as e:
            problems.append(str(e))
    if problems:
        raise ValueError("--styles natural=... needs: " + "; ".join(problems))


def draw_style(rng: random.Random, voice: Voice, spoken: str,
               shares: Dict[str, float]) -> Optional[dict]:
    """The style of one utterance (None when it has none); every kind is drawn, so a
    share's change moves only that kind's draws."""
    style: dict = {}
    is_child, child = rng.random() < shares["child"], draw_child(rng)
    pitch = (rng.randint(*CHILD_ESPEAK_PITCH) if voice.engine == "espeak"
             else round(rng.uniform(*F0_RANGE_HZ) / child["formant_factor"]))
    if is_child:
        if voice.engine == "espeak" or (voice.engine in ("flite", "festival") and voice.pitch):
            child["pitch"] = pitch
        style["child"] = child
    is_accent, accent_seed = rng.random() < shares["accent"], rng.randrange(2 ** 31)
    if is_accent and voice.engine == "espeak":
        style["accent"] = accent_seed
    is_reading, reading = rng.random() < shares["reading"], draw_reading(spoken, rng)
    if is_reading:
        style["reading"] = reading
    return style or None


def slowed(voice: Voice, stretch: float) -> Voice:
    """``voice`` with its durations stretched by ``stretch`` (espeak: a lower rate)."""
    if voice.engine == "espeak":
        return dataclasses.replace(voice, rate=float(max(ESPEAK_MIN_RATE, round(voice.rate / stretch))))
    return dataclasses.replace(voice, rate=round(voice.rate * stretch, 3))


def trim(x: np.ndarray, rate: int) -> np.ndarray:
    """``x`` without its leading and trailing parts quieter than ``TRIM_DB`` under its
    peak (10 ms frames), keeping ``TRIM_MARGIN_MS`` on each side."""
    frame = rate // 100
    n = len(x) // frame
    if n == 0:
        return x
    energy = np.sqrt(np.mean(x[:n * frame].reshape(n, frame) ** 2, axis=1))
    loud = np.flatnonzero(energy > energy.max() * 10 ** (TRIM_DB / 20))
    margin = rate * TRIM_MARGIN_MS // 1000
    return x[max(0, loud[0] * frame - margin):min(len(x), (loud[-1] + 1) * frame + margin)]


def hold_end(x: np.ndarray, rate: int, stretch: float) -> np.ndarray:
    """The last ``HOLD_MS`` of ``x`` stretched by ``stretch`` (pitch kept)."""
    n = min(len(x), rate * HOLD_MS // 1000)
    if stretch <= 1.0 or n == 0:
        return x
    return np.concatenate([x[:len(x) - n], wsola_stretch(x[len(x) - n:], stretch, rate)])


def _spoken_chunks(record: dict) -> List[dict]:
    reading = record["style"].get("reading")
    if reading:
        return reading["chunks"]
    return [{"text": record["spoken"], "pause_ms": 0, "hold": 1.0}]


def render(record: dict, tmp_dir: str) -> np.ndarray:
    """The clean audio of a record with a style: float samples at ``acoustics.RATE``."""
    style = record["style"]
    voice = Voice(**record["voice"])
    child, reading = style.get("child"), style.get("reading")
    if child and "pitch" in child:
        voice = dataclasses.replace(voice, pitch=int(child["pitch"]))
    if reading:
        voice = slowed(voice, float(reading["slow"]))
    accent_rng = random.Random(style["accent"]) if "accent" in style else None
    pieces: List[np.ndarray] = []
    for k, chunk in enumerate(_spoken_chunks(record)):
        text = str(chunk["text"])
        if accent_rng is not None:
            text = phoneme_input(apply_accent(espeak_words(text, voice.name), accent_rng)[0])
        samples, rate = voice_samples(voice, text, record["pitch_offset"], tmp_dir,
                                      f"{record['utt']}.{k}")
        x = acoustics.resample_array(samples, rate, acoustics.RATE)
        if reading:
            x = hold_end(trim(x, acoustics.RATE), acoustics.RATE, float(chunk["hold"]))
        pieces += [x, np.zeros(acoustics.RATE * int(chunk["pause_ms"]) // 1000, dtype=x.dtype)]
    audio = np.concatenate(pieces)
    if child:
        audio = child_shift(audio, acoustics.RATE, float(child["formant_factor"]))
    return audio

"""Voices of the synthetic corpus and how they are split into train/dev/test.

A voice is one engine setting: espeak-ng accent x variant x rate x pitch, or a
flite voice x duration stretch x mean F0. The model must recognise voices it
never heard, so dev and test use held-out voices. They are *new combinations of
ingredients the training set contains* rather than a new engine: a network
trained on one engine's voices does not transfer to a synthesiser with a
different signal model, and the corpus is meant to test generalisation across
speakers, not across synthesis technologies.

The split (all drawn from the seed):

* espeak-ng: the variant order is shuffled; accent ``i`` and variant position
  ``j`` form a pair of class ``(j - 2 i) mod V``. Classes ``0 .. T-1`` are
  training voices, class ``T`` dev, class ``T + 1`` test, the rest unused. With
  ``T >= 2`` every accent and every variant occurs in training, while each
  dev/test pair (accent, variant) is one training never saw. Rate and pitch are
  drawn per voice from the same ranges for every set.
* flite: each voice has a grid of (duration stretch, F0) settings; per voice
  the grid is shuffled, one setting goes to dev, one to test and the rest to
  training. So every flite voice is in training, and dev/test hear it at a
  rate/pitch combination training lacks.

Many training voices with few utterances each generalise better than few voices
with many: with 6 espeak classes and 2 flite settings per voice (58 training
voices) the main job's model learnt its training voices and reached ~40 % WER on
the held-out ones (RESULTS.md); 12 classes and every remaining flite setting
give 130 training voices at the same number of hours.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Tuple

ESPEAK_ACCENTS = ["en-us", "en", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp",
                  "en-gb-x-gbcwmd", "en-029", "en-us-nyc"]
ESPEAK_VARIANTS = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5",
                   "steph", "linda", "john", "klatt"]
ESPEAK_TRAIN_CLASSES = 12         # training pairs per accent (T above)
ESPEAK_RATES = range(145, 200, 5)  # words per minute
ESPEAK_PITCHES = range(30, 75, 5)  # 0..99 scale, 50 is the engine default
ESPEAK_RATE_HZ = 22050

# flite voice -> (output rate, mean F0 choices; empty: the voice ignores F0 settings)
FLITE_VOICES: Dict[str, Tuple[int, Tuple[int, ...]]] = {
    "kal": (8000, (90, 105, 120)),
    "kal16": (16000, (90, 105, 120)),
    "awb": (16000, (95, 110, 125)),
    "rms": (16000, ()),
    "slt": (16000, (150, 170, 190)),
}
FLITE_STRETCHES = (0.88, 0.96, 1.04, 1.12)
# festival voice -> (output rate, the voice's own mean F0 in Hz; 0: F0 not settable).
# Debian: festvox-kallpc16k, festvox-kdlpc16k (diphone voices: Duration_Stretch and the
# intonation model's target mean F0), festvox-us-slt-hts (HTS: the engine's speed
# option; its F0 option has no effect through festival, so pitch stays the voice's).
FESTIVAL_VOICES: Dict[str, Tuple[int, int]] = {
    "kal_diphone": (16000, 105),
    "ked_diphone": (16000, 105),
    "cmu_us_slt_arctic_hts": (32000, 0),
}

SETS = ("train", "dev", "test")


@dataclass(frozen=True)
class Voice:
    """One synthesis setting. ``rate``: espeak words/min, or the duration stretch of
    flite, festival and piper (piper's length scale); ``pitch``: espeak 0..99, or the
    mean F0 in Hz of flite and festival (0: engine default; piper has none)."""

    engine: str
    name: str
    variant: str
    rate: float
    pitch: int

    @property
    def voice_id(self) -> str:
        """Speaker id for utt2spk; no id is a prefix of another (fixed-width tails)."""
        if self.engine == "espeak":
            return f"espeak_{self.name}_{self.variant}_s{int(self.rate):03d}_p{self.pitch:03d}"
        return f"{self.engine}_{self.name}_d{int(round(self.rate * 100)):03d}_f{self.pitch:03d}"

    @property
    def sample_rate(self) -> int:
        """Rate of the engine's output WAV."""
        if self.engine == "espeak":
            return ESPEAK_RATE_HZ
        if self.engine == "festival":
            return FESTIVAL_VOICES[self.name][0]
        if self.engine == "piper":
            from local.synth.piper_voice import piper_sample_rate
            return piper_sample_rate(self.name)
        return FLITE_VOICES[self.name][0]

    @property
    def pitch_jitter(self) -> int:
        """Largest per-utterance pitch offset (engine units); 0 when pitch is not settable."""
        if self.engine == "espeak":
            return 4
        return 6 if self.pitch and self.engine != "piper" else 0

    def command(self, text: str, pitch_offset: int, out_path: str) -> List[str]:
        """The engine command line that speaks ``text`` into ``out_path``."""
        if self.engine == "espeak":
            pitch = min(99, max(0, self.pitch + pitch_offset))
            return ["espeak-ng", "-v", f"{self.name}+{self.variant}", "-s", str(int(self.rate)),
                    "-p", str(pitch), "-w", out_path, text]
        if self.engine == "festival":
            return festival_command(self, text, pitch_offset, out_path)
        if self.engine != "flite":
            raise ValueError(f"{self.engine} voices are not spoken by a command")
        cmd = ["flite", "-voice", self.name, "--setf", f"duration_stretch={self.rate:.2f}"]
        if self.pitch:
            cmd += ["--setf", f"int_f0_target_mean={self.pitch + pitch_offset}"]
        return cmd + ["-t", text, "-o", out_path]


def _scheme_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def festival_command(voice: Voice, text: str, pitch_offset: int, out_path: str) -> List[str]:
    """``festival --batch`` speaking ``text`` with a festival ``voice`` into ``out_path``
    (RIFF): diphone voices stretch durations and set the intonation's mean F0, the HTS
    voice sets the engine's speed (1 / stretch)."""
    if voice.name not in FESTIVAL_VOICES:
        raise ValueError(f"unknown festival voice {voice.name!r}; known: {sorted(FESTIVAL_VOICES)}")
    steps = [f"(voice_{voice.name})"]
    if voice.name.endswith("_hts"):
        steps.append(f'(set! hts_engine_params (append hts_engine_params '
                     f'(list (list "-r" {1.0 / voice.rate:.4f}))))')
    else:
        steps.append(f"(Parameter.set 'Duration_Stretch {voice.rate:.4f})")
        if voice.pitch:
            steps.append(f"(set! int_lr_params (cons (list 'target_f0_mean "
                         f"{voice.pitch + pitch_offset}) int_lr_params))")
    steps.append(f"(utt.save.wave (utt.synth (Utterance Text {_scheme_string(text)})) "
                 f"{_scheme_string(out_path)} 'riff)")
    return ["festival", "--batch", *steps]


def _espeak_split(rng: random.Random) -> Dict[str, List[Voice]]:
    variants = list(ESPEAK_VARIANTS)
    rng.shuffle(variants)
    n_var = len(variants)
    out: Dict[str, List[Voice]] = {s: [] for s in SETS}
    for i, accent in enumerate(ESPEAK_ACCENTS):
        for j, variant in enumerate(variants):
            cls = (j - 2 * i) % n_var
            if cls < ESPEAK_TRAIN_CLASSES:
                subset = "train"
            elif cls == ESPEAK_TRAIN_CLASSES:
                subset = "dev"
            elif cls == ESPEAK_TRAIN_CLASSES + 1:
                subset = "test"
            else:
                continue
            out[subset].append(Voice("espeak", accent, variant, float(rng.choice(ESPEAK_RATES)),
                                     rng.choice(ESPEAK_PITCHES)))
    return out


def grid_split(rng: random.Random, f0_choices: Dict[str, Tuple[int, ...]],
                stretches: Tuple[float, ...], engine: str = "flite") -> Dict[str, List[Voice]]:
    """Per voice of ``engine`` (name -> its mean-F0 choices; empty: the voice ignores F0),
    its (duration stretch, F0) grid shuffled: one setting to dev, one to test, the rest to
    train."""
    out: Dict[str, List[Voice]] = {s: [] for s in SETS}
    for name, pitches in f0_choices.items():
        grid = [(st, p) for st in stretches for p in (pitches or (0,))]
        rng.shuffle(grid)
        chosen = {"dev": grid[:1], "test": grid[1:2], "train": grid[2:]}
        for subset, settings in chosen.items():
            out[subset] += [Voice(engine, name, "", st, p) for st, p in settings]
    return out


def split_voices(seed: int) -> Dict[str, List[Voice]]:
    """Train/dev/test voice lists for ``seed``; the three sets share no voice."""
    rng = random.Random(f"{seed}-voices")
    espeak = _espeak_split(rng)
    flite = grid_split(rng, {name: f0 for name, (_, f0) in FLITE_VOICES.items()},
                        FLITE_STRETCHES)
    voices = {s: espeak[s] + flite[s] for s in SETS}
    ids = [v.voice_id for s in SETS for v in voices[s]]
    if len(ids) != len(set(ids)):  # an internal invariant, cheap to keep honest
        raise AssertionError("voice ids collide across sets")
    return voices

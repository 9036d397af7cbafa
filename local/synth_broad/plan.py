"""Plan the broad corpus: every utterance's sentence, voice and simulation, from the seed.

Sentences are drawn without replacement from the extracted text, the source
chosen per draw by ``SOURCE_WEIGHTS`` (WordNet's examples and the fortunes are
whole everyday sentences, its definitions mostly noun phrases with a technical
vocabulary, so they get less than their 61 % of the text). Test sentences are
drawn first, then dev, then training ones, so the three sets share no
transcript. Each set's voices are its own (``voices``); a voice deck per engine
is dealt in a shuffled order, reshuffled when used up, so voices are used evenly;
``FLITE_SHARE`` of the utterances go to flite.

The training set grows until the *estimated* audio reaches ``hours``: duration
is predicted from the number of letters and the voice's rate (fitted on 160
synthesised sentences: per-utterance error ~10 %, none on the total), plus the
silence padding. Dev and test have fixed utterance counts.
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Dict, Iterator, List, Optional, Sequence

from local.synth.voices import SETS, Voice
from local.synth_broad.simulate import LEAD_RANGE_MS, TAIL_RANGE_MS, draw_simulation
from local.synth_broad.reading import reading_seconds
from local.synth_broad.style import draw_style
from local.synth_broad.text import Sentence
from local.synth_broad.voices import split_voices

SOURCE_WEIGHTS = {"wordnet-example": 0.45, "fortunes": 0.25, "wordnet-definition": 0.30}
FLITE_SHARE = 0.3
NOMINAL_PAD_MS = (sum(LEAD_RANGE_MS) / 2, sum(TAIL_RANGE_MS) / 2)  # mean padding
BABBLE_BANK = 64  # training utterances whose clean audio babble is made of
# seconds = OFFSET + PER_LETTER * letters * pace: espeak pace 175 / rate (words/min),
# flite pace duration stretch x the voice's own tempo
ESPEAK_OFFSET_S, ESPEAK_PER_LETTER_S = 0.287, 0.0646
FLITE_OFFSET_S, FLITE_PER_LETTER_S = 0.410, 0.0641
FLITE_TEMPO = {"kal": 0.93, "kal16": 0.96, "awb": 1.03, "rms": 1.10, "slt": 1.08}
# festival and piper: flite's fit with their own tempo (not fitted: assumed 1)


def estimate_seconds(voice: Voice, spoken: str, pad_ms: Sequence[int] = (0, 0),
                     style: Optional[dict] = None) -> float:
    """Predicted length of ``spoken`` in ``voice`` plus the padding (and a reading
    style's pauses and slower rate), in seconds."""
    letters = len(re.sub(r"[^a-z]", "", spoken.lower()))
    if voice.engine == "espeak":
        speech = ESPEAK_OFFSET_S + ESPEAK_PER_LETTER_S * letters * 175.0 / voice.rate
    else:
        speech = (FLITE_OFFSET_S + FLITE_PER_LETTER_S * letters * voice.rate
                  * FLITE_TEMPO.get(voice.name, 1.0))
    if style and style.get("reading"):
        pauses, slow = reading_seconds(style["reading"])
        speech = speech * slow + pauses
    return speech + sum(pad_ms) / 1000.0


def sentence_stream(sentences: Sequence[Sentence], rng: random.Random) -> Iterator[Sentence]:
    """Every sentence once, in a random order where each draw's source follows
    ``SOURCE_WEIGHTS`` (renormalised over the sources not yet used up)."""
    decks: Dict[str, List[int]] = {}
    for i, s in enumerate(sentences):
        decks.setdefault(s.source, []).append(i)
    for deck in decks.values():
        rng.shuffle(deck)
    names = sorted(decks)
    while names:
        weights = [SOURCE_WEIGHTS.get(n, 0.1) for n in names]
        name = rng.choices(names, weights)[0]
        yield sentences[decks[name].pop()]
        if not decks[name]:
            names.remove(name)


class VoiceDealer:
    """Deals a set's voices: flite with probability ``FLITE_SHARE``, festival and piper
    with ``natural_share / 2`` each, else espeak-ng; within an engine a shuffled deck,
    reshuffled once dealt out."""

    def __init__(self, voices: Dict[str, List[Voice]], rng: random.Random,
                 natural_share: float = 0.0) -> None:
        self.voices = voices
        self.rng = rng
        self.natural_share = natural_share
        self.decks: Dict[str, List[Voice]] = {e: [] for e in voices}

    def next(self) -> Voice:
        u = self.rng.random()
        engine = ("flite" if u < FLITE_SHARE else
                  "festival" if u < FLITE_SHARE + self.natural_share / 2 else
                  "piper" if u < FLITE_SHARE + self.natural_share else "espeak")
        if not self.decks[engine]:
            self.decks[engine] = list(self.voices[engine])
            self.rng.shuffle(self.decks[engine])
        return self.decks[engine].pop()


def _record(subset: str, idx: int, sentence: Sentence, voice: Voice, rng: random.Random) -> dict:
    jitter = voice.pitch_jitter
    return {"utt": f"{voice.voice_id}-{subset}{idx:06d}", "set": subset, "source": sentence.source,
            "text": sentence.text, "spoken": sentence.spoken, "voice": dataclasses.asdict(voice),
            "voice_id": voice.voice_id,
            "pitch_offset": rng.randint(-jitter, jitter) if jitter else 0}


def plan_corpus(sentences: Sequence[Sentence], seed: int, hours: float, dev_utts: int,
                test_utts: int, shares: Dict[str, float],
                styles: Optional[Dict[str, float]] = None) -> List[dict]:
    """One record per utterance: train, dev, then test records (each set sorted by
    utterance id); training grows until its estimated audio reaches ``hours``.
    ``styles``: the shares of ``style.parse_styles`` (None or all 0: no styles, and
    records exactly as without them)."""
    if hours <= 0 or dev_utts < 1 or test_utts < 1:
        raise ValueError(f"need hours > 0 and at least one dev and test utterance, got "
                         f"{hours} h, {dev_utts} dev, {test_utts} test")
    styled = bool(styles) and any(styles.values())
    natural_share = styles["natural"] if styled else 0.0
    stream = sentence_stream(sentences, random.Random(f"{seed}-broad-text"))
    voices = split_voices(seed, natural=natural_share > 0)
    voice_rng = random.Random(f"{seed}-broad-voice-deal")
    style_rng = random.Random(f"{seed}-broad-style")
    by_set: Dict[str, List[dict]] = {s: [] for s in SETS}
    need = {"test": test_utts, "dev": dev_utts}
    for subset in ("test", "dev", "train"):
        dealer = VoiceDealer(voices[subset], voice_rng, natural_share)
        seconds = 0.0
        while (len(by_set[subset]) < need[subset]) if subset != "train" else seconds < hours * 3600:
            sentence = next(stream, None)
            if sentence is None:
                raise ValueError(f"the text runs out after {sum(map(len, by_set.values()))} "
                                 f"utterances; ask for fewer hours than {hours}")
            rec = _record(subset, len(by_set[subset]), sentence, dealer.next(), voice_rng)
            if styled:
                rec["style"] = draw_style(style_rng, Voice(**rec["voice"]), rec["spoken"], styles)
            by_set[subset].append(rec)
            seconds += estimate_seconds(Voice(**rec["voice"]), rec["spoken"], NOMINAL_PAD_MS,
                                        rec.get("style"))
    bank = [r["utt"] for r in by_set["train"][:BABBLE_BANK]]
    sim_rng = random.Random(f"{seed}-broad-sim")
    for subset in ("test", "dev", "train"):  # dev/test draws do not depend on the hours
        for rec in by_set[subset]:
            rec["sim"] = draw_simulation(sim_rng, shares, bank, rec["utt"])
            rec["est_seconds"] = round(estimate_seconds(Voice(**rec["voice"]), rec["spoken"],
                                                        rec["sim"]["pad_ms"], rec.get("style")), 3)
            rec["babble_bank"] = rec["utt"] in bank
    return [r for subset in SETS for r in sorted(by_set[subset], key=lambda r: r["utt"])]

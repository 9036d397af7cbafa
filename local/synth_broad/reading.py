"""Read-aloud style: a sentence read slowly, in phrases, with the odd hesitation.

speechocean762's speakers read prompts aloud in a language they are learning:
slower than the engines' conversational defaults, with pauses where a fluent
reader would not make them, and now and then a false start or a held sound. A
reading plan, drawn per utterance at planning from the spoken words alone (the
transcript is never touched), says how to speak the sentence:

* ``slow``: every duration stretched by 1.1-1.4 (the engine's rate setting);
* ``chunks``: the sentence cut into phrases, each synthesised on its own and
  followed by a pause of a drawn length: after a comma or the end of a clause
  (``PUNCT_PAUSE``), otherwise between any two words (``WORD_PAUSE``);
* hesitations: a *restart*, the start of a word (its letters up to the end of
  the first vowel group) spoken alone, a short pause, then the word; and a
  *held sound*, the last ``HOLD_MS`` of a phrase before a pause stretched by
  1.6-2.5 (``style.render`` does it with WSOLA, which keeps the pitch).

Rates and lengths are this project's choices, set to be audible and not to
dominate (to be tuned on speechocean762 dev); the pause lengths follow what
reading-fluency studies report for slow readers, pauses mostly 0.2-0.7 s.
"""
from __future__ import annotations

import random
import re
from typing import Dict, List, Tuple

SLOW_RANGE = (1.1, 1.4)
PUNCT_PAUSE = (0.8, (250, 700))   # probability after , ; : and its length range in ms
WORD_PAUSE = (0.1, (120, 450))    # probability after any other word (not the last)
RESTART = (0.03, (150, 350))      # probability per word of 4+ letters, pause after the fragment
HOLD = (0.25, (1.6, 2.5))         # probability per phrase that ends in a pause, stretch range
HOLD_MS = 150
RESTART_MIN_LETTERS = 4
_VOWELS = "aeiouy"


def word_start(word: str) -> str:
    """The letters a false start says: up to the end of the first vowel group
    (``book`` -> ``boo``, ``strong`` -> ``stro``); '' when the word has no vowel."""
    letters = re.sub(r"[^a-z']", "", word.lower())
    m = re.match(rf"^[^{_VOWELS}]*[{_VOWELS}]+", letters)
    return m.group(0) if m and len(m.group(0)) < len(letters) else ""


def _chunk(text: str, pause_ms: int = 0, hold: float = 1.0) -> Dict[str, object]:
    return {"text": text, "pause_ms": pause_ms, "hold": hold}


def draw_reading(spoken: str, rng: random.Random) -> dict:
    """The reading plan of ``spoken``: {"slow": stretch, "chunks": [{"text", "pause_ms",
    "hold"}]}; joined, the chunks' texts hold every word of ``spoken`` in order (plus
    the restart fragments), the last chunk has no pause."""
    words = spoken.split()
    if not words:
        raise ValueError("nothing to read: empty sentence")
    chunks: List[Dict[str, object]] = []
    current: List[str] = []

    def close(pause_ms: int) -> None:
        hold = 1.0
        if pause_ms and rng.random() < HOLD[0]:
            hold = round(rng.uniform(*HOLD[1]), 3)
        chunks.append(_chunk(" ".join(current), pause_ms, hold))
        current.clear()

    for i, word in enumerate(words):
        fragment = word_start(word) if len(re.sub(r"[^a-z]", "", word.lower())) >= RESTART_MIN_LETTERS else ""
        if fragment and rng.random() < RESTART[0]:
            if current:
                close(rng.randint(80, 200))
            chunks.append(_chunk(fragment, rng.randint(*RESTART[1])))
        current.append(word)
        if i == len(words) - 1:
            break
        p, (lo, hi) = PUNCT_PAUSE if word[-1] in ",;:" else WORD_PAUSE
        if rng.random() < p:
            close(rng.randint(lo, hi))
    close(0)
    return {"slow": round(rng.uniform(*SLOW_RANGE), 3), "chunks": chunks}


def reading_seconds(plan: dict) -> Tuple[float, float]:
    """(seconds of pause, duration stretch) the plan adds, for the length estimate."""
    return sum(int(c["pause_ms"]) for c in plan["chunks"]) / 1000.0, float(plan["slow"])

"""Transcript normalisation for stage 0 (``tools/normalize_text.py``, ``--text_norm``).

Three modes:

* ``upper`` (the recipe's default): upper-cased, punctuation and symbols turned into word
  breaks, whitespace collapsed. Two things survive: apostrophes between two letters or
  digits (``DON'T``; typographic apostrophes U+2019, U+02BC become ``'`` first) and
  bracketed tags such as ``[NOISE]``, kept whole and upper-cased like the words. A
  punctuation run between two letters of a caseless script (Han, kana, Thai, ...:
  Unicode category ``Lo``) is dropped instead, because those scripts do not separate
  words by spaces: ``你好，世界`` becomes ``你好世界``, not two "words".
* ``lower``: the same, lower-cased.
* ``none``: as written, only whitespace collapsed.

Why: the units and the scoring must see one spelling per word, so ``Hello, world!`` and
``HELLO WORLD`` have to end up identical.
"""
from __future__ import annotations

import re
import unicodedata

TEXT_NORMS = ("upper", "lower", "none")
_TAG = re.compile(r"\[[^\[\]\s]+\]")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})


def _is_break(ch: str) -> bool:
    """Unicode punctuation (P*) and symbols (S*) separate words."""
    return unicodedata.category(ch)[0] in ("P", "S")


def _caseless_letter(ch: str) -> bool:
    return bool(ch) and unicodedata.category(ch) == "Lo"


def _normalize_plain(text: str, case: str) -> str:
    """Normalise text that holds no bracketed tag."""
    text = text.translate(_APOSTROPHES)
    out = []
    for i, ch in enumerate(text):
        if ch == "'":
            before = text[i - 1] if i > 0 else ""
            after = text[i + 1] if i + 1 < len(text) else ""
            out.append("'" if before.isalnum() and after.isalnum() else " ")
        elif _is_break(ch):
            j = i
            while j > 0 and _is_break(text[j - 1]):
                j -= 1
            k = i
            while k + 1 < len(text) and _is_break(text[k + 1]):
                k += 1
            before = text[j - 1] if j > 0 else ""
            after = text[k + 1] if k + 1 < len(text) else ""
            out.append("" if _caseless_letter(before) and _caseless_letter(after) else " ")
        else:
            out.append(ch)
    joined = "".join(out)
    return " ".join((joined.upper() if case == "upper" else joined.lower()).split())


def normalize_transcript(text: str, mode: str = "upper") -> str:
    """Normalise one transcript (without its key) by ``mode`` (module docstring)."""
    if mode == "none":
        return " ".join(text.split())
    if mode not in TEXT_NORMS:
        raise ValueError(f"text normalisation takes one of {'|'.join(TEXT_NORMS)}, not {mode!r}")
    words = []
    pos = 0
    for m in _TAG.finditer(text):
        words.append(_normalize_plain(text[pos:m.start()], mode))
        tag = m.group(0)
        words.append(tag.upper() if mode == "upper" else tag.lower())
        pos = m.end()
    words.append(_normalize_plain(text[pos:], mode))
    return " ".join(w for w in words if w)

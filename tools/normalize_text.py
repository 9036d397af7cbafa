#!/usr/bin/env python3
"""Normalise the transcripts of a Kaldi ``text`` file.

Reads ``key transcript`` lines (stdin or a file) and writes them to stdout with
the key untouched and the transcript upper-cased, punctuation and symbols
turned into word breaks, and whitespace collapsed. Two things survive:

* apostrophes between two letters or digits (``DON'T``, ``O'CLOCK``);
  typographic apostrophes (U+2019, U+02BC) become ``'`` first;
* bracketed tags such as ``[NOISE]`` or ``[vocalized-noise]``: kept whole,
  brackets and inner punctuation included, and upper-cased like the words.

Why: the BPE model and the WER scoring must see one spelling per word, so
``Hello, world!`` and ``HELLO WORLD`` have to end up identical.
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
import unicodedata
from typing import BinaryIO, Iterable, Iterator

_TAG = re.compile(r"\[[^\[\]\s]+\]")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})


def _is_break(ch: str) -> bool:
    """Unicode punctuation (P*) and symbols (S*) separate words."""
    return unicodedata.category(ch)[0] in ("P", "S")


def _normalize_plain(text: str) -> str:
    """Normalise text that holds no bracketed tag."""
    text = text.translate(_APOSTROPHES)
    out = []
    for i, ch in enumerate(text):
        if ch == "'":
            before = text[i - 1] if i > 0 else ""
            after = text[i + 1] if i + 1 < len(text) else ""
            out.append("'" if before.isalnum() and after.isalnum() else " ")
        elif _is_break(ch):
            out.append(" ")
        else:
            out.append(ch)
    return " ".join("".join(out).upper().split())


def normalize_transcript(text: str) -> str:
    """Normalise one transcript (without its key); see the module docstring."""
    words = []
    pos = 0
    for m in _TAG.finditer(text):
        words.append(_normalize_plain(text[pos:m.start()]))
        words.append(m.group(0).upper())
        pos = m.end()
    words.append(_normalize_plain(text[pos:]))
    return " ".join(w for w in words if w)


def normalize_lines(lines: Iterable[str], name: str = "<stdin>") -> Iterator[str]:
    """Normalise Kaldi ``text`` lines; yields ``key transcript`` (or just ``key``).

    Blank lines are skipped; blank lines and transcripts that end up empty are
    counted and reported in the log with ``name``.
    """
    blank = emptied = 0
    first_emptied = ""
    for lineno, line in enumerate(lines, 1):
        parts = line.strip().split(maxsplit=1)
        if not parts:
            blank += 1
            continue
        key = parts[0]
        words = normalize_transcript(parts[1]) if len(parts) > 1 else ""
        if not words:
            emptied += 1
            first_emptied = first_emptied or f"{name}:{lineno} ({key})"
        yield f"{key} {words}" if words else key
    if blank:
        logging.warning("%s: skipped %d blank lines", name, blank)
    if emptied:
        logging.warning("%s: %d utterances have an empty transcript, first at %s",
                        name, emptied, first_emptied)


def _decoded(stream: BinaryIO, name: str) -> Iterator[str]:
    """Lines of a byte stream as text; invalid UTF-8 is an error naming the line."""
    for lineno, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{name}:{lineno}: not valid UTF-8 ({e})") from None


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("text", nargs="?", help="Kaldi text file (default: stdin)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s normalize_text: %(message)s")
    name = args.text or "<stdin>"
    stream = open(args.text, "rb") if args.text else sys.stdin.buffer
    out = sys.stdout.buffer
    try:
        for line in normalize_lines(_decoded(stream, name), name):
            out.write((line + "\n").encode("utf-8"))
    except ValueError as e:
        logging.error("%s", e)
        return 1
    finally:
        if args.text:
            stream.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main())

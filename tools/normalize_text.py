#!/usr/bin/env python3
"""Normalise the transcripts of a Kaldi ``text`` file.

Reads ``key transcript`` lines (stdin or a file) and writes them to stdout with the key
untouched and the transcript normalised by ``--mode`` (default ``upper``: upper-cased,
punctuation and symbols turned into word breaks, whitespace collapsed; ``lower``;
``none``: as written). What each mode keeps: wenet/dataprep/text_norm.py.
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import BinaryIO, Iterable, Iterator

from wenet.dataprep.text_norm import TEXT_NORMS, normalize_transcript


def normalize_lines(lines: Iterable[str], name: str = "<stdin>",
                    mode: str = "upper") -> Iterator[str]:
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
        words = normalize_transcript(parts[1], mode) if len(parts) > 1 else ""
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
    parser.add_argument("--mode", choices=TEXT_NORMS, default="upper",
                        help="upper (default), lower, or none (as written)")
    parser.add_argument("text", nargs="?", help="Kaldi text file (default: stdin)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s normalize_text: %(message)s")
    name = args.text or "<stdin>"
    stream = open(args.text, "rb") if args.text else sys.stdin.buffer
    out = sys.stdout.buffer
    try:
        for line in normalize_lines(_decoded(stream, name), name, args.mode):
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

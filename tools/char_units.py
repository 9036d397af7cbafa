#!/usr/bin/env python3
"""Character units (run.sh stage 2 with --token_type char), as WeNet's AISHELL recipe has them.

``char_units.py TEXT UNITS`` writes ``UNITS``: ``<blank> 0``, ``<unk> 1``, every character
of the training text (one sentence a line) in code point order, a space as ``▁``, then
``<sos/eos>`` last. The characters are cut exactly as training and decoding cut
transcripts without a BPE model (``wenet.dataset.tokenizer.Tokenizer``).
``char_units.py --pieces TEXT`` prints each line's characters, space-separated instead.
"""
from __future__ import annotations

import argparse
import sys
from typing import Iterable, List, Optional

from wenet.dataprep.cli import run_tool
from wenet.dataset.tokenizer import EOS_SYMBOL, Tokenizer
from wenet.utils.file_utils import atomic_write_text, text_lines


def char_units(lines: Iterable[str]) -> List[str]:
    """The units.txt lines of the characters of ``lines``."""
    cut = Tokenizer({}, None)
    chars = sorted({p for line in lines for p in cut.pieces(line)})
    units = ["<blank>", "<unk>", *chars, EOS_SYMBOL]
    return [f"{u} {i}" for i, u in enumerate(units)]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pieces", action="store_true", help="print the characters of each line")
    p.add_argument("text", help="training text, one sentence a line")
    p.add_argument("units", nargs="?", help="units.txt to write")
    args = p.parse_args(argv)
    if not args.pieces and not args.units:
        p.error("give UNITS to write, or --pieces")

    def work() -> None:
        lines = [line for _, line in text_lines(args.text)]
        if args.pieces:
            cut = Tokenizer({}, None)
            sys.stdout.write("".join(" ".join(cut.pieces(line)) + "\n" for line in lines))
        else:
            atomic_write_text(args.units, "".join(u + "\n" for u in char_units(lines)))
    return run_tool(work)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Word (or character) error rate of a hypothesis file against a reference file.

Usage: compute-wer.py [--char=0|1] [--v=0|1] [--cs=0|1] [--ig=FILE] [--rt=0|1]
                      [--padding-symbol=space|underline] REF HYP > WER
Both files hold ``key text`` lines. The report matches WeNet's tools/compute-wer.py
(per-utterance blocks with --v=1, then the ``Overall ->`` line). Keys that are in only
one file are named on stderr and counted on an ``Unscored ->`` line after ``Overall``:
hypotheses without reference (recognised audio that has no transcript) are not scored,
references without hypothesis count as deletions.
"""
import argparse
import logging
import sys

from wenet.utils.file_utils import read_lists
from wenet.eval.wer import compute_wer


def _flag(value: str) -> bool:
    v = value.lower()
    if v in ("1", "true", "yes"):
        return True
    if v in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected 0 or 1, got '{value}'")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--char", type=_flag, default=False,
                        help="score characters: CJK one per token, Latin words whole")
    parser.add_argument("--v", type=int, default=1, help="1: per-utterance alignments")
    parser.add_argument("--cs", type=_flag, default=False, help="case-sensitive comparison")
    parser.add_argument("--ig", default=None, help="file of words to ignore, one per line")
    parser.add_argument("--rt", type=_flag, default=True, help="remove <tags> from tokens")
    parser.add_argument("--padding-symbol", choices=["space", "underline"], default="space",
                        help="fill character aligning lab:/rec: columns")
    parser.add_argument("ref", help="reference text (key words...)")
    parser.add_argument("hyp", help="hypothesis text (key words...)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="compute-wer: %(levelname)s: %(message)s")
    try:
        ignore = set(read_lists(args.ig)) if args.ig else set()
        compute_wer(args.ref, args.hyp, sys.stdout, char_mode=args.char, verbose=args.v,
                    case_sensitive=args.cs, ignore_words=ignore, remove_tags=args.rt,
                    padding="_" if args.padding_symbol == "underline" else " ")
    except (ValueError, OSError) as e:  # bad text file: one line naming file:line, no traceback
        logging.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""N-best oracle WER: the error rate of the best hypothesis within the first N of each list.

    tools/nbest_oracle.py data/dev/text exp/x/dev/attention_rescoring/nbest --depths 1 5 10 20

The n-best file is what ``recognize.py --nbest N`` (or stage 5's ``--nbest``) writes.
Depth 1 is the 1-best; the gap to a deeper oracle bounds what rescoring those lists
can gain (wenet/eval/oracle.py).
"""
import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from wenet.eval.oracle import nbest_oracle  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ref", help="reference text (key words...)")
    p.add_argument("nbest", help="n-best JSON lines (recognize.py --nbest)")
    p.add_argument("--depths", type=int, nargs="+", default=[1, 2, 5, 10, 20])
    p.add_argument("--cs", action="store_true", help="case-sensitive comparison")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="nbest_oracle: %(levelname)s: %(message)s")
    try:
        table = nbest_oracle(args.ref, args.nbest, args.depths, args.cs)
    except (ValueError, OSError) as e:
        logging.error("%s", e)
        return 1
    for depth, (counts, rank) in table.items():
        print(f"oracle@{depth} -> {counts.summary()} (mean rank of the picks {rank:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

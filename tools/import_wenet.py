#!/usr/bin/env python3
"""Import a WeNet 2.x / 3.x model dir (train.yaml, final.pt, units, global_cmvn, BPE model)
as one of our model dirs, which every tool then loads as its own: transcribe.py,
recognize.py, alignment.py, export_onnx.py, serve.py, run.sh --init_checkpoint.

    tools/import_wenet.py /path/to/wenet/exp/u2pp_conformer exp/imported

Anything the WeNet model uses that this toolkit does not compute the same way (an encoder
type, an attention variant, a CMVN kind...) is refused by its train.yaml key and value, and
nothing is written. See docs/import.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wenet.dataprep.cli import run_tool  # noqa: E402
from wenet.models.wenet_import import import_wenet  # noqa: E402


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="the WeNet model dir (its train.yaml and checkpoint)")
    p.add_argument("dst", help="our model dir to write")
    p.add_argument("--checkpoint", default=None,
                   help="the WeNet checkpoint (default: SRC/final.pt, else the only avg_*.pt)")
    p.add_argument("--units", default=None,
                   help="the units file (default: found in SRC: units.txt, lang_char.txt, "
                        "words.txt or *_units.txt, or the one train.yaml names)")
    p.add_argument("--bpe_model", default=None,
                   help="the sentencepiece model (default: found in SRC, or none)")
    args = p.parse_args(argv)
    return run_tool(lambda: import_wenet(args.src, args.dst, args.checkpoint, args.units,
                                         args.bpe_model))


if __name__ == "__main__":
    sys.exit(main())

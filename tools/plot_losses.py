#!/usr/bin/env python3
"""Plot training and CV loss per epoch of an experiment as a PNG (no matplotlib needed).

Reads EXP_DIR/{N}.yaml: ``cv_loss``, and ``train_loss`` (the epoch's mean training
loss per utterance) when the executor recorded it.

    python tools/plot_losses.py --exp_dir exp/synth_train_conformer [--out exp/.../loss.png]
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import List, Optional

from wenet.eval.png_plot import Series, line_plot, write_png
from wenet.eval.results import loss_curves, read_epoch_infos


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exp_dir", required=True, help="directory holding {N}.yaml")
    p.add_argument("--out", default=None, help="PNG to write (default EXP_DIR/loss.png)")
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=400)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    out = args.out or os.path.join(args.exp_dir, "loss.png")
    infos = read_epoch_infos(args.exp_dir)
    if not infos:
        sys.exit(f"{sys.argv[0]}: no epoch checkpoint yaml ({{N}}.yaml) in {args.exp_dir}")
    curves = loss_curves(infos)
    series = [Series(name, curves["epoch"], curves[key])
              for name, key in (("train", "train_loss"), ("cv", "cv_loss"))
              if any(math.isfinite(v) for v in curves[key])]
    if not series:
        sys.exit(f"{sys.argv[0]}: no finite train_loss or cv_loss in {args.exp_dir}/*.yaml")
    pixels, _ = line_plot(series, args.width, args.height)
    write_png(out, pixels)
    logging.info("%d epochs (%s) -> %s", len(infos), ", ".join(s.name for s in series), out)


if __name__ == "__main__":
    main()

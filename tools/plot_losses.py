#!/usr/bin/env python3
"""Plot training and CV loss per epoch of an experiment as a PNG (matplotlib, Agg backend).

Reads EXP_DIR/{N}.yaml: ``cv_loss``, and ``train_loss`` (the epoch's mean training
loss per utterance) when the executor recorded it.

    python tools/plot_losses.py --exp_dir exp/synth_train_zipformer [--out exp/.../loss.png]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import List, Optional

from wenet.eval.plot import plot_loss_curves
from wenet.eval.results import loss_curves, read_epoch_infos


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exp_dir", required=True, help="directory holding {N}.yaml")
    p.add_argument("--out", default=None, help="PNG to write (default EXP_DIR/loss.png)")
    p.add_argument("--title", default=None, help="plot title (default: EXP_DIR's name)")
    p.add_argument("--width", type=int, default=640, help="image width in pixels")
    p.add_argument("--height", type=int, default=400, help="image height in pixels")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    out = args.out or os.path.join(args.exp_dir, "loss.png")
    try:
        infos = read_epoch_infos(args.exp_dir)
    except (OSError, ValueError) as e:  # no exp dir, or a bad {N}.yaml (named with its line)
        sys.exit(f"{sys.argv[0]}: {e}")
    if not infos:
        sys.exit(f"{sys.argv[0]}: no epoch checkpoint yaml ({{N}}.yaml) in {args.exp_dir}")
    title = args.title or f"{os.path.basename(os.path.normpath(args.exp_dir))}: loss per epoch"
    try:
        plot = plot_loss_curves(loss_curves(infos), out, title, args.width, args.height)
    except ValueError as e:
        sys.exit(f"{sys.argv[0]}: {e} in {args.exp_dir}/*.yaml")
    logging.info("%d epochs (%s) -> %s", len(infos), ", ".join(plot.names), out)


if __name__ == "__main__":
    main()

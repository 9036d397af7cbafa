#!/usr/bin/env python3
"""Global CMVN statistics of a training set (run.sh stage 1).

Features are the training fbank (the config's dataset_conf.fbank_conf and
resample_conf, without dither); the output is WeNet's one-line JSON
``global_cmvn``. A ``segments`` file beside wav.scp is honoured unless
--segments says otherwise.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import List, Optional

import torch

from wenet.dataprep.cli import run_tool
from wenet.dataprep.cmvn import compute_cmvn_stats, save_cmvn
from wenet.dataset.fbank import FeatureConf
from wenet.dataprep.data_list import read_utterances
from wenet.utils.file_utils import load_yaml


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nj", "--num_workers", dest="nj", type=int, default=1,
                   help="parallel processes (Kaldi's nj; --num_workers is WeNet's name for it)")
    p.add_argument("--train_config", required=True, help="training yaml (dataset_conf)")
    p.add_argument("--in_scp", required=True, help="wav.scp of the training set")
    p.add_argument("--segments", default=None,
                   help="Kaldi segments file (default: 'segments' beside --in_scp, if present; "
                        "'none' to ignore it)")
    p.add_argument("--out_cmvn", required=True, help="output global_cmvn (JSON)")
    return p.parse_args(argv)


def compute(args: argparse.Namespace) -> None:
    """Read the config and the data dir, sum the features, write global_cmvn.

    Bad input raises one of ``DATA_ERRORS`` naming the file (and line) at fault.
    """
    configs = load_yaml(args.train_config) or {}
    if not isinstance(configs, dict):
        raise ValueError(f"{args.train_config}: a training config must be a YAML mapping")
    conf = FeatureConf.from_config(configs, args.train_config)
    segments = args.segments
    if segments is None:
        beside = os.path.join(os.path.dirname(args.in_scp), "segments")
        segments = beside if os.path.isfile(beside) else None
    elif segments == "none":
        segments = None
    if segments:
        logging.info("using segments %s", segments)
    utts = read_utterances(args.in_scp, segments)
    stats, num_failed = compute_cmvn_stats(utts, conf, args.nj)
    if stats.frame_num == 0:
        raise ValueError(f"no features computed: all {num_failed} utterances of {args.in_scp} failed")
    save_cmvn(stats, args.out_cmvn)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_args(argv)
    # one thread per process: the work is parallel over processes, and torch's own
    # threads on top of them oversubscribe the cores (measured 4x slower on 2 cores)
    torch.set_num_threads(1)
    return run_tool(lambda: compute(args))


if __name__ == "__main__":
    sys.exit(main())

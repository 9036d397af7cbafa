#!/usr/bin/env python3
"""Kaldi data dirs from a corpus of one's own (run.sh stage 0 with --corpus custom).

Finds each set in DATA_ROOT in whatever form it is (Kaldi data dirs, TSV/CSV/JSON-lines
manifests, Common Voice, audiofolder, NeMo, LibriSpeech-style trees, lhotse manifests:
wenet/dataprep/custom/detect.py), checks every utterance against its audio header and
writes OUT/<set>/{wav.scp,text,utt2spk,spk2utt[,segments],stage0_report.txt}. What was
skipped, and why, is in each set's stage0_report.txt; nothing is skipped silently.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from wenet.dataprep.cli import run_tool
from wenet.dataprep.custom.prepare import prepare_corpus
from wenet.dataprep.text_norm import TEXT_NORMS
from wenet.utils.file_utils import load_yaml


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train_set", default="train")
    p.add_argument("--dev_set", default="dev", help="held out of train (whole speakers) "
                   "when DATA_ROOT has no such set")
    p.add_argument("--test_sets", default="test", help="space-separated set names")
    p.add_argument("--text_norm", choices=TEXT_NORMS, default="upper")
    p.add_argument("--dev_share", type=float, default=0.1,
                   help="share of the training utterances held out as dev (no dev set)")
    p.add_argument("--seed", type=int, default=777, help="seed of the dev speakers' draw")
    p.add_argument("--sample_rate", type=int, default=None,
                   help="the model's rate (default: --train_config's resample_rate, else 16000)")
    p.add_argument("--train_config", default=None, help="training yaml: its resample_rate")
    p.add_argument("data_root")
    p.add_argument("out_dir")
    return p.parse_args(argv)


def _sample_rate(args: argparse.Namespace) -> int:
    if args.sample_rate:
        return args.sample_rate
    if args.train_config:
        conf = (load_yaml(args.train_config) or {}).get("dataset_conf") or {}
        rate = (conf.get("resample_conf") or {}).get("resample_rate")
        if rate:
            return int(rate)
    return 16000


def main(argv: Optional[List[str]] = None) -> int:
    args = get_args(argv)
    return run_tool(lambda: prepare_corpus(
        args.data_root, args.out_dir, args.train_set, args.dev_set, args.test_sets.split(),
        args.text_norm, _sample_rate(args), args.dev_share, args.seed))


if __name__ == "__main__":
    sys.exit(main())

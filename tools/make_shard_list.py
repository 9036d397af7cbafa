#!/usr/bin/env python3
"""Pack a Kaldi data dir into WeNet tar shards and list them in data.list (run.sh stage 3).

Each utterance becomes ``<key>.txt`` then ``<key>.<ext>`` in a shard. Audio is
stored byte for byte unless --segments cuts it or --resample changes its rate;
then it is stored as 16-bit ``<key>.wav``. (WeNet resamples segments to 16 kHz
by default; here nothing is resampled unless --resample is given.)
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Optional

import torch

from wenet.dataprep.data_list import attach_text, read_utterances
from wenet.dataprep.shard_writer import make_shards


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num_utts_per_shard", type=int, default=1000, help="utterances per shard")
    p.add_argument("--nj", "--num_threads", dest="nj", type=int, default=1,
                   help="shard-writing processes (Kaldi's nj; --num_threads is WeNet's name for it)")
    p.add_argument("--prefix", default="shards", help="shard file name prefix")
    p.add_argument("--segments", default=None, help="Kaldi segments file")
    p.add_argument("--resample", type=int, default=None, help="store audio at this rate (Hz)")
    p.add_argument("wav_file", help="wav.scp")
    p.add_argument("text_file", help="text")
    p.add_argument("shards_dir", help="output directory for the shards")
    p.add_argument("shards_list", help="output data.list (one shard path a line)")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_args(argv)
    # one thread per process: the work is parallel over processes, and torch's own
    # threads on top of them oversubscribe the cores (measured 4x slower on 2 cores)
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        utts = attach_text(read_utterances(args.wav_file, args.segments), args.text_file)
        make_shards(utts, args.shards_dir, args.shards_list, args.num_utts_per_shard,
                    args.nj, args.resample, args.prefix)
    except (ValueError, RuntimeError, OSError) as e:  # bad data dir: say where, no traceback
        logging.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Pack a Kaldi data dir into WeNet tar shards and list them in data.list (run.sh stage 3).

Each utterance becomes ``<key>.txt`` then ``<key>.<ext>`` in a shard. Audio in a
format the shard reader accepts (``wenet.dataset.audio.AUDIO_FORMATS``) is stored
byte for byte; other audio libsndfile decodes is re-encoded as WAV, and audio it
cannot decode is skipped with a warning naming the utterance. --segments cuts and
--resample changes the rate; such audio is stored as 16-bit ``<key>.wav``. (WeNet
resamples segments to 16 kHz by default; here nothing is resampled unless
--resample is given.)
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import torch

from wenet.dataprep.cli import data_dir_parser, read_data_dir, run_tool
from wenet.dataprep.shard_writer import make_shards


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = data_dir_parser(__doc__)
    p.add_argument("--num_utts_per_shard", type=int, default=1000, help="utterances per shard")
    p.add_argument("--nj", "--num_threads", dest="nj", type=int, default=1,
                   help="shard-writing processes (Kaldi's nj; --num_threads is WeNet's name for it)")
    p.add_argument("--prefix", default="shards", help="shard file name prefix")
    p.add_argument("--resample", type=int, default=None, help="store audio at this rate (Hz)")
    p.add_argument("shards_dir", help="output directory for the shards")
    p.add_argument("shards_list", help="output data.list (one shard path a line)")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_args(argv)
    # one thread per process: the work is parallel over processes, and torch's own
    # threads on top of them oversubscribe the cores (measured 4x slower on 2 cores)
    torch.set_num_threads(1)
    return run_tool(lambda: make_shards(read_data_dir(args), args.shards_dir, args.shards_list,
                                        args.num_utts_per_shard, args.nj, args.resample, args.prefix))


if __name__ == "__main__":
    sys.exit(main())

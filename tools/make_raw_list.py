#!/usr/bin/env python3
"""Write a raw data.list: one JSON line {"key", "wav", "txt"} per utterance (run.sh stage 3).

With --segments each line also has "start" and "end" in seconds, and "wav" is
the recording's wav.scp value.
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Optional

from wenet.dataprep.data_list import attach_text, read_utterances, write_raw_list


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--segments", default=None, help="Kaldi segments file")
    p.add_argument("wav_file", help="wav.scp")
    p.add_argument("text_file", help="text")
    p.add_argument("output_file", help="output data.list")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        utts = attach_text(read_utterances(args.wav_file, args.segments), args.text_file)
        write_raw_list(utts, args.output_file)
    except (ValueError, RuntimeError, OSError) as e:  # bad data dir: say where, no traceback
        logging.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

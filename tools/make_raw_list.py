#!/usr/bin/env python3
"""Write a raw data.list: one JSON line {"key", "wav", "txt"} per utterance (run.sh stage 3).

With --segments each line also has "start" and "end" in seconds, and "wav" is
the recording's wav.scp value.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from wenet.dataprep.cli import data_dir_parser, read_data_dir, run_tool
from wenet.dataprep.data_list import write_raw_list


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = data_dir_parser(__doc__)
    p.add_argument("output_file", help="output data.list")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_args(argv)
    return run_tool(lambda: write_raw_list(read_data_dir(args), args.output_file))


if __name__ == "__main__":
    sys.exit(main())

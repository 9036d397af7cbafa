"""What the data tools in tools/ share: the data-dir arguments and reading the dir, and
turning a data error into one logged line and exit status 1 instead of a traceback."""
from __future__ import annotations

import argparse
import logging
from typing import Callable, List, Optional

from wenet.dataprep.data_list import Utterance, attach_text, read_utterances

# Errors that mean bad input (they name the file, line or utterance at fault), not a bug.
DATA_ERRORS = (ValueError, RuntimeError, OSError)
LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"


def data_dir_parser(description: Optional[str]) -> argparse.ArgumentParser:
    """An argument parser holding what every data-list tool reads: --segments, wav.scp, text."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--segments", default=None, help="Kaldi segments file")
    p.add_argument("wav_file", help="wav.scp")
    p.add_argument("text_file", help="text")
    return p


def read_data_dir(args: argparse.Namespace) -> List[Utterance]:
    """Utterances with both audio and a transcript, from ``data_dir_parser``'s arguments."""
    return attach_text(read_utterances(args.wav_file, args.segments), args.text_file)


def run_tool(work: Callable[[], object]) -> int:
    """Set up the tools' logging and run ``work`` → 0; a data error is logged as one line → 1."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        work()
    except DATA_ERRORS as e:
        logging.error("%s", e)
        return 1
    return 0

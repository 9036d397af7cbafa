#!/usr/bin/env python3
"""Helpers for local/speechocean762_data_prep.sh.

``wav-scp CORPUS SCP``: rewrites a release ``wav.scp`` (paths relative to the
corpus root) with absolute paths, failing on the first utterance whose audio
file is missing, so a broken copy of the corpus is caught at stage 0 rather
than as a decoding error in stage 1.

``dev-speakers SPK2UTT N``: picks N speakers spread evenly over the sorted
speaker list, the same ones on every run.

``summary DIR...``: utterances, hours (from the audio headers) and speakers of
Kaldi data directories.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import List, Tuple

import soundfile as sf

from wenet.utils.file_utils import read_kaldi_map


def absolute_wav_scp(corpus: str, scp: str) -> List[Tuple[str, str]]:
    """(utt, absolute audio path) for each line of a release ``wav.scp``.

    Raises FileNotFoundError naming the utterance when an audio file is missing.
    """
    root = os.path.realpath(corpus)
    out = []
    for utt, rel in read_kaldi_map(scp).items():
        path = rel if os.path.isabs(rel) else os.path.join(root, rel)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{scp}: audio of utterance {utt} not found: {path}")
        out.append((utt, path))
    return out


def dev_speakers(spk2utt: str, num: int) -> List[str]:
    """``num`` speakers spread evenly over the C-sorted speakers of ``spk2utt``."""
    speakers = sorted(read_kaldi_map(spk2utt))
    if num <= 0 or num >= len(speakers):
        raise ValueError(f"{spk2utt}: cannot take {num} dev speakers out of {len(speakers)}")
    return [speakers[(2 * i + 1) * len(speakers) // (2 * num)] for i in range(num)]


def summarize(data_dir: str) -> Tuple[int, float, int]:
    """(utterances, hours, speakers) of a data dir whose wav.scp holds plain paths."""
    wavs = read_kaldi_map(os.path.join(data_dir, "wav.scp"))
    seconds = 0.0
    for utt, path in wavs.items():
        try:
            seconds += sf.info(path).duration
        except Exception as e:  # soundfile raises several types for unreadable audio
            raise RuntimeError(f"{data_dir}/wav.scp: cannot read audio of {utt} ({path}): {e}") from e
    speakers = read_kaldi_map(os.path.join(data_dir, "spk2utt"))
    return len(wavs), seconds / 3600.0, len(speakers)


def _main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("wav-scp", help="absolute-path wav.scp on stdout")
    p.add_argument("corpus")
    p.add_argument("scp")
    p = sub.add_parser("dev-speakers", help="deterministic dev speakers on stdout")
    p.add_argument("spk2utt")
    p.add_argument("num", type=int)
    p = sub.add_parser("summary", help="utterances, hours and speakers per data dir")
    p.add_argument("dirs", nargs="+")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s speechocean762_prep: %(message)s")
    try:
        if args.cmd == "wav-scp":
            for utt, path in absolute_wav_scp(args.corpus, args.scp):
                sys.stdout.write(f"{utt} {path}\n")
        elif args.cmd == "dev-speakers":
            sys.stdout.write("".join(s + "\n" for s in dev_speakers(args.spk2utt, args.num)))
        else:
            for d in args.dirs:
                utts, hours, spks = summarize(d)
                logging.info("%s: %d utterances, %.2f hours (%.1f s), %d speakers",
                             d, utts, hours, hours * 3600.0, spks)
    except (OSError, ValueError, RuntimeError) as e:
        logging.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())

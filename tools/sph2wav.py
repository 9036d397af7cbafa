#!/usr/bin/env python3
"""One channel of a NIST SPHERE file as 16-bit WAV on stdout (sph2pipe's ``-f wav -p -c N``).

Used in Switchboard/eval2000 ``wav.scp`` pipes when sph2pipe is not installed::

    sw02001-A python tools/sph2wav.py -c 1 /corpora/LDC97S62/swb1_d1/data/sw02001.sph |

Decoding is libsndfile's (soundfile): 16-bit PCM, mu-law and a-law. A
shorten-compressed file is refused with an error naming it: it needs sph2pipe.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
from typing import List, Optional

import soundfile as sf

# wav.scp pipes run in whatever process reads the data dir: find this checkout's wenet
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# torch-free, so that a pipe run once per recording starts quickly
from wenet.dataset.audio_bytes import AudioError, decode_samples, read_audio_bytes  # noqa: E402


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-c", "--channel", type=int, default=None,
                   help="1-based channel to write (default: all channels)")
    p.add_argument("sph", help="SPHERE file")
    args = p.parse_args(argv)
    try:
        wav, rate = decode_samples(read_audio_bytes(args.sph), args.sph, dtype="int16")
        if args.channel is not None:
            if not 1 <= args.channel <= wav.shape[0]:
                raise AudioError(f"{args.sph} has {wav.shape[0]} channels, no channel {args.channel}")
            wav = wav[args.channel - 1:args.channel]
        out = io.BytesIO()
        sf.write(out, wav.T, rate, format="WAV", subtype="PCM_16")
        sys.stdout.buffer.write(out.getvalue())
    except AudioError as e:
        sys.stderr.write(f"sph2wav.py: error: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Reading segments of long recordings: the costs that grow with the recording, not the segment.

On a synthetic recording of ``--minutes`` (tones of 0.3-2 s and pauses of 0.05-0.8 s over
low noise, 16 kHz mono 16-bit WAV, written to a temporary folder), each row times one
way of getting at its pieces, and where there is an older way, that way beside it:

* ``segment by path``: ``load_audio(path, start, end)`` of ``--segments`` 3 s pieces at
  random places (a raw data.list with start/end), against decoding the whole file and
  cutting (what it did before; the same samples, checked);
* ``segments through a pipe``: the raw reader (``sources.raw_samples``) over the same
  pieces as ``cat FILE |`` lines, in order, against one ``load_audio`` per line (the pipe
  run per segment, as before); pipe runs counted;
* ``VAD segmentation``: ``SegmentedItems`` (transcribe.py's cutting of long audio, default
  ``SegmentConf``) over the whole recording.

    . ./path.sh && python bench/segment_io.py [--minutes 20 --segments 40]

Quote the CPU (``lscpu`` model name, printed) and the machine's load with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import soundfile as sf
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.transcribe import cpu_name  # noqa: E402
from wenet.dataset.audio import cut_audio, decode_audio, load_audio, read_audio_bytes  # noqa: E402
from wenet.dataset.sources import raw_samples  # noqa: E402
from wenet.dataset.stats import PipelineStats  # noqa: E402
from wenet.inference.long_audio import SegmentedItems  # noqa: E402
from wenet.inference.segments import SegmentConf  # noqa: E402

RATE = 16000


def write_recording(path: str, minutes: float, seed: int) -> None:
    """Tones and pauses over low noise, written minute by minute."""
    rng = np.random.default_rng(seed)
    with sf.SoundFile(path, "w", RATE, 1, subtype="PCM_16") as f:
        for _ in range(int(round(minutes))):
            pieces, n, tone = [], 0, True
            while n < 60 * RATE:
                length = int(RATE * (rng.uniform(0.3, 2.0) if tone else rng.uniform(0.05, 0.8)))
                t = np.arange(length) / RATE
                pieces.append(0.3 * np.sin(2 * np.pi * rng.uniform(150, 900) * t) if tone
                              else np.zeros(length))
                n += length
                tone = not tone
            audio = np.concatenate(pieces)[:60 * RATE]
            f.write((audio + 0.003 * rng.standard_normal(len(audio))).astype(np.float32))


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--segments", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        wav = os.path.join(tmp, "long.wav")
        write_recording(wav, args.minutes, args.seed)
        rng = np.random.default_rng(args.seed)
        starts = np.sort(rng.uniform(0, args.minutes * 60 - 3.0, args.segments)).round(2)
        cuts = [(float(s), float(s) + 3.0) for s in starts]
        print(f"recording {args.minutes:g} min, {args.segments} segments of 3 s; CPU: {cpu_name()}")
        print("| what | now s | before s | speed-up |")
        print("|---|---:|---:|---:|")

        def whole_then_cut():
            out = []
            for a, b in cuts:
                w, r = decode_audio(read_audio_bytes(wav), wav)
                out.append(cut_audio(w, r, a, b))
            return out
        now, parts = timed(lambda: [load_audio(wav, a, b)[0] for a, b in cuts])
        before, ref = timed(whole_then_cut)
        assert all(torch.equal(x, y) for x, y in zip(parts, ref))
        print(f"| segment by path (per segment) | {now / len(cuts):.4f} | {before / len(cuts):.4f} "
              f"| {before / now:.0f}x |")

        runs = os.path.join(tmp, "runs")
        pipe = f"sh -c 'echo >> {runs}; cat {wav}' |"
        lines = [(f"data.list:{i + 1}", json.dumps({"key": f"s{i}", "wav": pipe, "txt": "a",
                                                    "start": a, "end": b}))
                 for i, (a, b) in enumerate(cuts)]
        now, samples = timed(lambda: list(raw_samples(lines, PipelineStats("data.list"))))
        now_runs = len(open(runs).read().splitlines())
        before, ref = timed(lambda: [load_audio(pipe, a, b)[0] for a, b in cuts])
        assert all(torch.equal(s["wav"], y) for s, y in zip(samples, ref))
        print(f"| segments through a pipe (all {len(cuts)}; pipe runs {now_runs} vs {len(cuts)}) "
              f"| {now:.2f} | {before:.2f} | {before / now:.0f}x |")

        now, segments = timed(lambda: list(SegmentedItems([("long", wav)], SegmentConf())))
        print(f"| VAD segmentation ({len(segments)} segments) | {now:.2f} | | |")


if __name__ == "__main__":
    main()

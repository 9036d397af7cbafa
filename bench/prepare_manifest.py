#!/usr/bin/env python3
"""Stage 0 of ``--corpus custom`` on a large TSV manifest: lines per second and peak memory.

Writes, in a temporary folder, ``--files`` short WAV files as symbolic links to
``--distinct`` real ones (so every line's header is opened and parsed, as with a real
corpus of one file per utterance, without writing gigabytes), a ``train.tsv`` of
``--lines`` rows over them (path, sentence, client_id: Common Voice's columns, speakers of
~100 utterances) and a small ``test.tsv``, then times
``wenet.dataprep.custom.prepare.prepare_corpus`` (no dev set: speakers held out) and
prints lines/s and the process's peak resident memory before and after.

    . ./path.sh && python bench/prepare_manifest.py [--lines 100000]

Quote the CPU (``lscpu`` model name, printed) and the machine's load with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import tempfile
import time

import numpy as np
import soundfile as sf

from wenet.dataprep.custom.prepare import prepare_corpus


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(x.split(":", 1)[1].strip() for x in out.splitlines() if x.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build(root: str, lines: int, files: int, distinct: int) -> None:
    rng = np.random.default_rng(0)
    audio = os.path.join(root, "clips")
    os.makedirs(audio)
    real = []
    for i in range(distinct):
        path = os.path.join(root, f"real{i}.wav")
        sf.write(path, (0.1 * rng.standard_normal(8000 + 800 * i)).astype(np.float32), 16000,
                 subtype="PCM_16")
        real.append(path)
    for i in range(files):
        os.symlink(real[i % distinct], os.path.join(audio, f"u{i:07d}.wav"))
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    with open(os.path.join(root, "train.tsv"), "w") as f:
        f.write("client_id\tpath\tsentence\n")
        for i in range(lines):
            text = " ".join(words[(i + k) % len(words)] for k in range(1 + i % 7))
            f.write(f"spk{i // 100:05d}\tu{i % files:07d}.wav\t{text.capitalize()}.\n")
    with open(os.path.join(root, "test.tsv"), "w") as f:
        f.write("client_id\tpath\tsentence\n")
        for i in range(distinct):
            f.write(f"other{i}\t{real[i]}\tgolf hotel\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lines", type=int, default=100000)
    p.add_argument("--files", type=int, default=0, help="audio files (default: one a line)")
    p.add_argument("--distinct", type=int, default=4, help="real files the links point at")
    args = p.parse_args()
    files = args.files or args.lines
    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        build(root, args.lines, files, args.distinct)
        built = time.perf_counter() - t0
        before = _peak_mib()
        t0 = time.perf_counter()
        reports = prepare_corpus(root, os.path.join(root, "data"))
        seconds = time.perf_counter() - t0
        after = _peak_mib()
        kept = sum(int(r.counts["utterances kept"]) for r in reports.values())
    print(json.dumps({
        "cpu": _cpu(), "lines": args.lines, "audio_files": files,
        "build_s": round(built, 2), "prepare_s": round(seconds, 2),
        "lines_per_s": round(args.lines / seconds), "utterances_kept": kept,
        "peak_rss_mib_before": round(before, 1), "peak_rss_mib_after": round(after, 1),
    }, indent=1))


if __name__ == "__main__":
    main()

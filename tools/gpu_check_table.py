#!/usr/bin/env python3
"""The one table of tools/gpu_check.sh, from what its steps left in its work dir.

Reads WORK/probe.json (the environment), WORK/steps.tsv (``step limit_s wall_s status``
per step), WORK/runs.tsv (``run config precision`` per training run) and for each run
WORK/exp/<run>/train.0.log (the epoch-end throughput lines of wenet/train/progress.py and
the cv_loss lines), WORK/exp/<run>/test/<mode>/wer (tools/compute-wer.py's Overall line)
and .../rtf. Prints markdown: training throughput per config and precision (audio s/s
over all epochs and in the last one, s/batch, peak CUDA memory), WER and RTF per
decoding mode, and wall time per step.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from wenet.train.progress import parse_throughput  # noqa: E402

_OVERALL = re.compile(r"^Overall -> ([\d.]+) % N=(\d+)", re.M)
_CV = re.compile(r"epoch (\d+): train_loss ([\d.naif+-]+), cv_loss ([\d.naif+-]+)")


def read_tsv(path: str) -> List[List[str]]:
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def train_figures(log: str) -> Optional[Dict]:
    """Throughput over a run's epochs (rank 0's log), None when no epoch finished."""
    if not os.path.isfile(log):
        return None
    text = open(log, encoding="utf-8", errors="replace").read()
    epochs = parse_throughput(text)
    if not epochs:
        return None
    audio = sum(e["audio_s"] for e in epochs)
    wall = sum(e["wall_s"] for e in epochs)
    batches = sum(e["batches"] for e in epochs)
    peaks = [e["peak_mib"] for e in epochs if e["peak_mib"] is not None]
    cv = _CV.findall(text)
    return {"epochs": len(epochs), "audio_s": audio, "audio_s_per_s": audio / wall,
            "last_audio_s_per_s": epochs[-1]["audio_s_per_s"], "s_per_batch": wall / batches,
            "peak_mib": max(peaks) if peaks else None, "cv_loss": cv[-1][2] if cv else None}


def wer_of(path: str) -> Optional[Dict]:
    if not os.path.isfile(path):
        return None
    m = _OVERALL.search(open(path, encoding="utf-8").read())
    return {"wer": float(m.group(1)), "words": int(m.group(2))} if m else None


def table(work: str) -> str:
    out: List[str] = []
    probe: Dict = {}
    if os.path.isfile(os.path.join(work, "probe.json")):
        probe = json.load(open(os.path.join(work, "probe.json"), encoding="utf-8"))
    device = probe.get("gpu") or ("CPU (" + str(probe.get("cpus")) + " cores)")
    out.append(f"GPU check on {device}: python {probe.get('python')}, torch {probe.get('torch')}, "
               f"CUDA {probe.get('torch_cuda')}, driver {probe.get('nvidia_smi', '?')}")
    out += ["", "| run | config | precision | epochs | audio s/s | last epoch audio s/s "
            "| s/batch | peak CUDA MiB | cv_loss |", "|---|---|---|---|---|---|---|---|---|"]
    runs = read_tsv(os.path.join(work, "runs.tsv"))
    for run, config, precision in runs:
        f = train_figures(os.path.join(work, "exp", run, "train.0.log"))
        if f is None:
            out.append(f"| {run} | {config} | {precision} | 0 | - | - | - | - | - |")
            continue
        peak = "-" if f["peak_mib"] is None else f"{f['peak_mib']:.0f}"
        out.append(f"| {run} | {config} | {precision} | {f['epochs']} | {f['audio_s_per_s']:.1f} "
                   f"| {f['last_audio_s_per_s']:.1f} | {f['s_per_batch']:.4f} | {peak} "
                   f"| {f['cv_loss'] or '-'} |")
    out += ["", "| run | mode | WER % | words | RTF |", "|---|---|---|---|---|"]
    for run, _, _ in runs:
        test_dir = os.path.join(work, "exp", run, "test")
        modes = sorted(os.listdir(test_dir)) if os.path.isdir(test_dir) else []
        for mode in modes:
            w = wer_of(os.path.join(test_dir, mode, "wer"))
            rtf_file = os.path.join(test_dir, mode, "rtf")
            rtf = (f"{json.loads(open(rtf_file, encoding='utf-8').read())['rtf']:.4f}"
                   if os.path.isfile(rtf_file) else "-")
            out.append(f"| {run} | {mode} | {w['wer']:.2f} | {w['words']} | {rtf} |" if w else
                       f"| {run} | {mode} | - | - | {rtf} |")
    out += ["", "| step | limit s | wall s | status |", "|---|---|---|---|"]
    total = 0.0
    for step, limit, wall, status in read_tsv(os.path.join(work, "steps.tsv")):
        total += float(wall)
        out.append(f"| {step} | {limit} | {wall} | {status} |")
    out.append(f"| total | | {total:.0f} | |")
    return "\n".join(out) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", required=True, help="tools/gpu_check.sh's work dir")
    args = p.parse_args(argv)
    sys.stdout.write(table(args.work))
    return 0


if __name__ == "__main__":
    sys.exit(main())

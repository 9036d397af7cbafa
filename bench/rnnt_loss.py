"""Time and peak memory of the transducer loss: full (ours, torchaudio) against pruned.

    . ./path.sh && python bench/rnnt_loss.py [--device cpu|cuda] [--vocabs "500 2000"] [--prune_range 5]

What is measured, forward + backward, from the encoder and predictor outputs
(B, T, 144) and (B, U+1, 144) of the conf/train_conformer_rnnt.yaml sizes:

* full: the joint network (join_dim 256, tanh) on the whole lattice, a
  (B, T, U+1, V) tensor, then the loss, ours (wenet/transducer/rnnt_loss.py) or
  ``torchaudio.functional.rnnt_loss``;
* pruned (wenet/transducer/pruned_loss.py): the simple projections and loss
  (lm_scale 0.25), the pruning bounds, the joint on (B, T, prune_range, V) and its
  loss (what TransducerModel computes with ``transducer_loss: pruned``).

Times are medians over ``--repeats`` runs after a warm-up. Peak memory: on CUDA
``torch.cuda.max_memory_allocated`` above what the inputs hold; on CPU the rise of
the process's peak resident set during one forward + backward, each configuration
in a fresh subprocess. Defaults: B=8, T=200, U=30 (lengths vary in the batch, the
longest at full size), V=500 and 2000.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict

import torch
import torchaudio.functional as taf

from wenet.transducer.joint import TransducerJoint
from wenet.transducer.pruned_loss import pruned_rnnt_loss, pruning_bounds, simple_rnnt_loss
from wenet.transducer.rnnt_loss import rnnt_loss

IMPLS = ("full_ours", "full_torchaudio", "pruned")
DIM = 144


def _step_fn(impl: str, args: argparse.Namespace, V: int, device: torch.device) -> Callable:
    """A closure running one forward + backward of ``impl`` at vocabulary ``V``."""
    g = torch.Generator().manual_seed(0)
    B, T, U = args.batch, args.frames, args.labels
    torch.manual_seed(0)
    joint = TransducerJoint(V, DIM, DIM, join_dim=256).to(device)
    am_proj = torch.nn.Linear(DIM, V).to(device)
    lm_proj = torch.nn.Linear(DIM, V).to(device)
    enc = torch.randn(B, T, DIM, generator=g).to(device).requires_grad_()
    pred = torch.randn(B, U + 1, DIM, generator=g).to(device).requires_grad_()
    targets = torch.randint(1, V, (B, U), generator=g, dtype=torch.int32).to(device)
    t_lens = torch.linspace(T * 0.7, T, B).round().int().to(device)
    u_lens = torch.linspace(U * 0.6, U, B).round().int().to(device)

    def full(loss_fn):
        logits = joint(joint.project_encoder(enc).unsqueeze(2),
                       joint.project_predictor(pred).unsqueeze(1))
        return loss_fn(logits, targets, t_lens, u_lens, blank=0, reduction="sum")

    def pruned():
        simple, (leave, label) = simple_rnnt_loss(am_proj(enc), lm_proj(pred), targets, t_lens,
                                                  u_lens, lm_scale=0.25, reduction="sum")
        starts = pruning_bounds(leave, label, t_lens, u_lens, args.prune_range)
        return 0.5 * simple + pruned_rnnt_loss(
            joint, joint.project_encoder(enc), joint.project_predictor(pred), targets, starts,
            args.prune_range, t_lens, u_lens, reduction="sum")

    forward = {"full_ours": lambda: full(rnnt_loss),
               "full_torchaudio": lambda: full(taf.rnnt_loss), "pruned": pruned}[impl]
    params = list(joint.parameters()) + list(am_proj.parameters()) + list(lm_proj.parameters())

    def step():
        for p in params + [enc, pred]:
            p.grad = None
        forward().backward()
    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_one(impl: str, args: argparse.Namespace, V: int) -> Dict[str, float]:
    """Peak memory of the first run, then the median time of the next ones."""
    device = torch.device(args.device)
    step = _step_fn(impl, args, V, device)
    _sync(device)
    if device.type == "cuda":
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    step()
    _sync(device)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    return {"ms": statistics.median(times) * 1000, "peak_mb": peak / 2 ** 20}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--labels", type=int, default=30)
    p.add_argument("--vocabs", default="500 2000")
    p.add_argument("--prune_range", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads (1: on a loaded 2-core machine more threads made the many "
                        "small lattice steps wait on each other, 30x slower)")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # "impl V": child process
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.one:
        impl, V = args.one.split()
        print(json.dumps(measure_one(impl, args, int(V))))
        return
    print(f"device={args.device} B={args.batch} T={args.frames} U={args.labels} "
          f"prune_range={args.prune_range} threads={args.threads} (forward+backward of joint "
          f"and loss, median of {args.repeats})")
    print("| V | loss | ms | peak MB |\n|---:|---|---:|---:|")
    for V in [int(v) for v in args.vocabs.split()]:
        rows = {}
        for impl in IMPLS:
            cmd = [sys.executable, os.path.abspath(__file__), "--one", f"{impl} {V}"] + \
                [a for a in sys.argv[1:]]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            rows[impl] = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {V} | {impl} | {rows[impl]['ms']:.1f} | {rows[impl]['peak_mb']:.1f} |",
                  flush=True)
        full = rows["full_ours"]
        print(f"V={V}: pruned / full_ours: time {rows['pruned']['ms'] / full['ms']:.3f}, "
              f"memory {rows['pruned']['peak_mb'] / full['peak_mb']:.3f}; full_ours / "
              f"torchaudio: time {full['ms'] / rows['full_torchaudio']['ms']:.3f}, memory "
              f"{full['peak_mb'] / rows['full_torchaudio']['peak_mb']:.3f}", flush=True)


if __name__ == "__main__":
    main()

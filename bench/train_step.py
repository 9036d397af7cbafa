#!/usr/bin/env python3
"""Time of one training step, split into data wait, forward, backward and optimizer, on CPU.

For each config, the same synthetic batches (random fbank-sized features and
targets, WeNet batch layout) go through

1. a bare loop: forward, backward, clip, optimizer and scheduler step — pure model compute;
2. wenet.train.executor.Executor.train_epoch — the real training loop with its
   checks (finite loss, gradient norm), logging, model average and bookkeeping;

alternating step by step, and the loop's overhead over the bare loop (median
step times) is printed (goal: <= 10 %).

    . ./path.sh && python bench/train_step.py [--configs conf/a.yaml ...] [--steps 4]

``--override_config "key.sub value"`` (repeatable, as in train.py) changes every
benchmarked config, e.g. to compare front ends:
``--override_config "encoder_conf.input_layer conv2d" --override_config "encoder_conf.subsampling_channels 0"``.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from typing import Dict, List

import torch

from wenet.models import init_model
from wenet.train.executor import Executor
from wenet.train.model_average import ModelAverager
from wenet.train.optim import build_optimizer
from wenet.train.progress import StepTimes
from wenet.train.scheduler import build_scheduler
from wenet.train.setup import DistInfo, TrainConf, input_dim_of, override_config, seed_everything
from wenet.utils.file_utils import load_yaml


def synthetic_batches(n: int, batch_size: int, frames: int, dim: int, vocab: int,
                      seed: int = 0) -> List[Dict[str, object]]:
    """Batches shaped like the data pipeline's: lengths between 70 % and 100 % of ``frames``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        lengths = torch.randint(int(frames * 0.7), frames + 1, (batch_size,), generator=g)
        lengths[0] = frames
        tlen = torch.clamp(lengths // 25, min=1)
        target = torch.full((batch_size, int(tlen.max())), -1, dtype=torch.long)
        for b in range(batch_size):
            target[b, :tlen[b]] = torch.randint(2, vocab - 1, (int(tlen[b]),), generator=g)
        out.append({"keys": [f"b{i}u{b}" for b in range(batch_size)],
                    "feats": torch.randn(batch_size, frames, dim, generator=g),
                    "feats_lengths": lengths, "target": target, "target_lengths": tlen})
    return out


def bare_step(model, optimizer, scheduler, batch, grad_clip: float) -> Dict[str, float]:
    """One step of pure compute; seconds per phase."""
    t0 = time.perf_counter()
    out = model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])
    t1 = time.perf_counter()
    out["loss"].backward()
    t2 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    t3 = time.perf_counter()
    return {"forward": t1 - t0, "backward": t2 - t1, "optim": t3 - t2, "total": t3 - t0}


def bench_config(path: str, steps: int, batch_size: int, frames: int, vocab: int,
                 overrides: List[str]) -> None:
    """Alternate bare and Executor steps on the same batches (so load from other processes
    hits both alike) and compare median step times."""
    configs = override_config(load_yaml(path), overrides)
    configs.update(input_dim=input_dim_of(configs), output_dim=vocab, cmvn_file=None,
                   accum_grad=1, save_interval=0)
    conf = TrainConf.from_configs(configs)
    batches = synthetic_batches(steps + 1, batch_size, frames, configs["input_dim"], vocab)

    def fresh():
        seed_everything(0)
        model = init_model(configs)
        opt = build_optimizer(model.parameters(), conf.optim, conf.optim_conf)
        return model, opt, build_scheduler(opt, conf.scheduler, conf.scheduler_conf)

    model, opt, sched = fresh()
    model.train()
    ex_model, ex_opt, ex_sched = fresh()
    bare: List[Dict[str, float]] = []
    loop: List[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        ex = Executor(ex_model, ex_opt, ex_sched, conf, torch.device("cpu"), DistInfo(), tmp,
                      averager=ModelAverager(ex_model.state_dict(), conf.average_period))
        for i, batch in enumerate(batches):
            b = bare_step(model, opt, sched, batch, conf.grad_clip)
            if i == 0:  # warm-up
                ex.train_epoch([batch])
                ex.times = StepTimes()
                continue
            bare.append(b)
            start = time.perf_counter()
            ex.train_epoch([batch])
            loop.append(time.perf_counter() - start)
    t = ex.times
    n = len(loop)
    bare_med = statistics.median(b["total"] for b in bare)
    loop_med = statistics.median(loop)
    bare_min, loop_min = min(b["total"] for b in bare), min(loop)
    audio_s = statistics.mean(float(b["feats_lengths"].sum()) for b in batches[1:]) * conf.frame_shift_ms / 1000
    params = sum(p.numel() for p in model.parameters()) / 1e6
    name = f"{path} with {'; '.join(overrides)}" if overrides else path
    print(f"\n{name}: {params:.1f} M params, {n} steps of {batch_size} x <={frames} frames "
          f"({audio_s:.1f} s audio/step)")
    print(f"  {'':10s}{'data':>8s}{'forward':>9s}{'backward':>9s}{'optim':>8s}{'sync':>7s}{'step':>8s}"
          "   (s; mean per phase, median step)")
    print(f"  {'bare':10s}{0.0:8.3f}{statistics.mean(b['forward'] for b in bare):9.3f}"
          f"{statistics.mean(b['backward'] for b in bare):9.3f}{statistics.mean(b['optim'] for b in bare):8.3f}"
          f"{0.0:7.3f}{bare_med:8.3f}")
    print(f"  {'Executor':10s}{t.data / n:8.3f}{t.forward / n:9.3f}{t.backward / n:9.3f}"
          f"{t.optim / n:8.3f}{t.sync / n:7.3f}{loop_med:8.3f}")
    print(f"  throughput {audio_s / loop_med:.1f} audio s/s; loop overhead over pure compute: "
          f"{100.0 * (loop_med - bare_med) / bare_med:+.1f} % (median step), "
          f"{100.0 * (loop_min - bare_min) / bare_min:+.1f} % (fastest step)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+",
                   default=["conf/train_conformer.yaml", "conf/train_conformer_swbd.yaml"])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--frames", type=int, default=500, help="longest utterance of a batch (10 ms frames)")
    p.add_argument("--vocab", type=int, default=500, help="output units (synthetic targets)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: steadier figures on a shared machine)")
    p.add_argument("--override_config", action="append", default=[],
                   help='"key.sub value" applied to every config (value read as YAML); repeatable')
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    for path in args.configs:
        bench_config(path, args.steps, args.batch_size, args.frames, args.vocab,
                     args.override_config)


if __name__ == "__main__":
    main()

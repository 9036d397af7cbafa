#!/usr/bin/env python3
"""Training throughput (audio seconds per second) of several configs, taking turns, at
each thread count, with and without a second process loading the CPU (issue 34).

    . ./path.sh && python bench/train_throughput.py \
        [--configs conf/train_conformer.yaml conf/train_zipformer.yaml] \
        [--threads 1 2] [--load 0 1] [--rounds 3] [--steps 4] [--batch_count 700] [--compile]

A config may carry overrides after ``::`` (as train.py's ``--override_config``) and a
label before ``=``, e.g. ``"relu=conf/train_zipformer.yaml::encoder_conf.frontend_activation relu"``.

Each config gets a model, its optimizer, scheduler and the real training loop
(``Executor.train_epoch``) on the same synthetic batches (bench/train_step.py's, padded
lengths varying between 60 % and 100 % of ``--frames`` as real batches do). For each
setting (threads x load) the configs take turns for ``--rounds`` rounds of ``--steps``
steps, so that whatever else the machine does hits them alike; the figure is the
audio of a round's steps over their time, median over the rounds. ``--load 1`` starts a process that keeps one
core busy with single-threaded matrix products (another training job's shape of load)
for that setting; the slowdown column compares each config with its own unloaded figure
at the same thread count, which is what shows a model made of many small operations.

The schedules of the Zipformer (dropout, skip rates, balancer probabilities) follow the
update count, so the loop starts at ``--batch_count`` (default 700, the middle of the
main job's ~1,450 updates) rather than at 0.

``--compile``: every model through ``wenet.train.device.compile_model`` (train.py
--compile); the seconds spent before the first timed round (compilation included) are
printed, so that the break-even point within a job can be read off.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_step import synthetic_batches  # noqa: E402

LOAD_SCRIPT = ("import torch\ntorch.set_num_threads(1)\na = torch.randn(384, 384)\n"
               "while True:\n    a = torch.tanh(a @ a)\n")


def parse_spec(spec: str) -> Tuple[str, str, List[str]]:
    """``[label=]path::key value::key value`` -> (label, path, overrides); the label
    defaults to the file name without .yaml and train_."""
    label, _, rest = spec.rpartition("=") if "=" in spec.split("::")[0] else ("", "", spec)
    path, *overrides = rest.split("::")
    if not label:
        label = os.path.basename(path).removesuffix(".yaml").removeprefix("train_")
        label += "".join(f" [{o}]" for o in overrides)
    return label, path, overrides


def varied_batches(n: int, batch_size: int, frames: int, dim: int, vocab: int
                   ) -> List[Dict[str, object]]:
    """bench/train_step.py's batches with the padded length varied per batch (60-100 %)."""
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        longest = int(frames * (0.6 + 0.4 * torch.rand((), generator=g).item()))
        out += synthetic_batches(1, batch_size, longest, dim, vocab, seed=100 + i)
    return out


class Runner:
    """One config's model, optimizer and training loop."""

    def __init__(self, spec: str, vocab: int, batch_count: int, compile_model: bool,
                 tmp: str) -> None:
        from wenet.models import init_model
        from wenet.train.config import TrainConf, input_dim_of, override_config
        from wenet.train.device import compile_model as compile_fn
        from wenet.train.device import seed_everything
        from wenet.train.distributed import DistInfo
        from wenet.train.executor import Executor
        from wenet.train.model_average import ModelAverager
        from wenet.train.optim import build_optimizer
        from wenet.train.scheduler import build_scheduler
        from wenet.utils.file_utils import load_yaml

        self.name, path, overrides = parse_spec(spec)
        configs = override_config(load_yaml(path), overrides)
        configs.update(input_dim=input_dim_of(configs), output_dim=vocab, cmvn_file=None,
                       accum_grad=1, save_interval=0)
        self.input_dim = configs["input_dim"]
        conf = TrainConf.from_configs(configs)
        self.frame_shift_s = conf.frame_shift_ms / 1000
        seed_everything(0)
        model = init_model(configs)
        self.params = sum(p.numel() for p in model.parameters())
        if compile_model:
            model = compile_fn(model)
        opt = build_optimizer(model.parameters(), conf.optim, conf.optim_conf)
        sched = build_scheduler(opt, conf.scheduler, conf.scheduler_conf)
        self.executor = Executor(model, opt, sched, conf, torch.device("cpu"), DistInfo(),
                                 os.path.join(tmp, str(id(self))),
                                 averager=ModelAverager(model.state_dict(), conf.average_period))
        self.executor.state.step = batch_count

    def step(self, batch: Dict[str, object]) -> float:
        start = time.perf_counter()
        self.executor.train_epoch([batch])
        return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+",
                   default=["conf/train_conformer.yaml", "conf/train_zipformer.yaml"])
    p.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    p.add_argument("--load", type=int, nargs="+", default=[0, 1], choices=[0, 1])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="steps per config per round")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--frames", type=int, default=500, help="longest padded batch (10 ms frames)")
    p.add_argument("--vocab", type=int, default=500)
    p.add_argument("--batch_count", type=int, default=700,
                   help="update count the loop starts at (the schedules' position)")
    p.add_argument("--compile", action="store_true", help="torch.compile every model")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "unknown")
    print(f"torch {torch.__version__}, CPU {cpu}, {os.cpu_count()} cores; "
          f"{args.rounds} rounds x {args.steps} steps of {args.batch_size} utterances "
          f"(<= {args.frames} frames), schedules at update {args.batch_count}"
          + (", compiled" if args.compile else ""))
    with tempfile.TemporaryDirectory() as tmp:
        torch.set_num_threads(max(args.threads))
        runners = [Runner(s, args.vocab, args.batch_count, args.compile, tmp)
                   for s in args.configs]
        batches = varied_batches(args.rounds * args.steps + 1, args.batch_size, args.frames,
                                 runners[0].input_dim, args.vocab)
        audio = [float(b["feats_lengths"].sum()) * runners[0].frame_shift_s for b in batches]
        for r in runners:  # warm-up (and compilation): every batch shape once
            start = time.perf_counter()
            for b in batches:
                r.step(b)
            print(f"  {r.name}: {r.params / 1e6:.2f} M params; first pass over the "
                  f"{len(batches)} batches {time.perf_counter() - start:.1f} s")
        results: Dict[Tuple[int, int], Dict[str, float]] = {}
        for threads in args.threads:
            for load in args.load:
                torch.set_num_threads(threads)
                loader = (subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT])
                          if load else None)
                try:
                    if loader is not None:
                        time.sleep(1.0)
                    rates: Dict[str, List[float]] = {r.name: [] for r in runners}
                    for rnd in range(args.rounds):
                        chunk = range(1 + rnd * args.steps, 1 + (rnd + 1) * args.steps)
                        for r in runners:
                            times = [(r.step(batches[i]), audio[i]) for i in chunk]
                            rates[r.name].append(sum(a for _, a in times)
                                                 / sum(t for t, _ in times))
                finally:
                    if loader is not None:
                        loader.kill()
                        loader.wait()
                results[(threads, load)] = {n: statistics.median(v) for n, v in rates.items()}
    names = [r.name for r in runners]
    heads = [f"{n} audio s/s" for n in names] + [f"{n} / {names[0]}" for n in names[1:]]
    print("\n| threads | other core loaded | " + " | ".join(heads) + " |")
    print("|---:|---|" + "---:|" * len(heads))
    for (threads, load), row in results.items():
        cells = [f"{row[n]:.1f}" for n in names]
        base = results.get((threads, 0))
        if load and base:
            cells = [f"{row[n]:.1f} (x{row[n] / base[n]:.2f})" for n in names]
        ratios = [f"{row[n] / row[names[0]]:.2f}" for n in names[1:]]
        print(f"| {threads} | {'yes' if load else 'no'} | " + " | ".join(cells + ratios) + " |")


if __name__ == "__main__":
    main()

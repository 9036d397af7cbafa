#!/usr/bin/env python3
"""Time of one optimizer step (``opt.step()`` alone) on a config's model, random gradients.

    . ./path.sh && python bench/optimizer_step.py [--config conf/train_zipformer.yaml] [--threads 2]

Prints the number of parameter tensors and the median milliseconds per step over
``--steps`` steps after ``--warmup`` untimed ones (the optimizer and its options are the
config's: ScaledAdam for the Zipformer configs).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="conf/train_zipformer.yaml")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=500)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=8)
    args = p.parse_args()
    from wenet.models import init_model
    from wenet.train.config import input_dim_of
    from wenet.train.optim import build_optimizer
    from wenet.utils.file_utils import load_yaml

    torch.set_num_threads(args.threads)
    configs = load_yaml(args.config)
    configs.update(input_dim=input_dim_of(configs), output_dim=args.vocab, cmvn_file=None)
    torch.manual_seed(0)
    model = init_model(configs)
    opt = build_optimizer(model.parameters(), configs.get("optim", "adam"),
                          configs.get("optim_conf", {}))
    params = list(model.parameters())
    for x in params:
        x.grad = torch.randn_like(x) * 1e-3
    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        opt.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    print(f"{args.config}: {type(opt).__name__}, {len(params)} tensors "
          f"({sum(x.numel() for x in params) / 1e6:.2f} M values), {args.threads} threads: "
          f"{1000 * statistics.median(times):.1f} ms per step")


if __name__ == "__main__":
    main()

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

``--compare REV`` (issue 19) times another revision against the working tree instead:

    . ./path.sh && python bench/train_step.py --compare c47cba8 [--rounds 3] [--profile]

REV is checked out in a temporary ``git worktree``; each side runs in its own worker
process that imports its own ``wenet`` (the package layout differs between revisions).
Both build conf/bench_wenet_small_conformer.yaml (WeNet 2.2.1's small conformer,
4,725,012 parameters with the default vocabulary of 258) with the same initial weights
(REV's state dict, loaded by the working tree's model), check that the eval-mode loss and
gradients of the first batch agree, and then take turns (old, new, old, new, ...) on the
same static batches of 16 utterances of speechocean762's train set (fbank of a random
sort window of 500 utterances sorted by length; synthetic fbank without the corpus).
A step is forward, backward, gradient clipping and each side's own optimizer. The new
side sets itself up as wenet/bin/train.py does (``tune_host_memory`` when it exists;
``--compile``: ``compile_model``; both in wenet.train.device, wenet.train.setup before
issue 33). Printed: audio seconds per second of each side per round, their ratio, the
median over the rounds, and the same per CPU second of the worker (steadier on a shared
machine); ``--profile [N]`` adds the top N operators of each side (torch.profiler, self
CPU time). Without ``--compare``, ``--profile [N]`` prints per config the forward time of
each module down to ``--profile_depth`` levels and the top N operators of the step.
``--counts`` adds per config, at update ``--counts_at`` (the schedules' position), the
arithmetic of one forward + backward (GFLOP, ``torch.utils.flop_counter``) and the number
of operators it runs (torch.profiler; aten calls other than views and allocations, nested
calls included), which timing noise does not touch (issue 34: the Zipformer's step runs
~2.9x the Conformer's operators at any width).
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_profile import profile_modules, step_counts  # noqa: E402


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
                 overrides: List[str], profile_rows: int = 0, profile_depth: int = 3,
                 counts_at: int = -1) -> None:
    """Alternate bare and Executor steps on the same batches (so load from other processes
    hits both alike) and compare median step times."""
    from wenet.models import init_model
    from wenet.train.config import TrainConf, input_dim_of, override_config
    from wenet.train.device import seed_everything
    from wenet.train.distributed import DistInfo
    from wenet.train.executor import Executor
    from wenet.train.model_average import ModelAverager
    from wenet.train.optim import build_optimizer
    from wenet.train.progress import StepTimes
    from wenet.train.scheduler import build_scheduler
    from wenet.utils.file_utils import load_yaml

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
    if profile_rows:
        profile_modules(lambda b: bare_step(model, opt, sched, b, conf.grad_clip), model,
                        batches[1:], profile_rows, profile_depth)
    if counts_at >= 0:
        gflop, ops, products = step_counts(model, batches[1:3], counts_at)
        print(f"  forward + backward at update {counts_at}: {gflop:.2f} GFLOP, {ops:.0f} "
              f"operators ({products:.0f} products / convolutions)")



# ------------------------------------------------------------------ --compare REV
# Two worker processes, one per source tree (the old layout's imports differ, so each side
# imports its own ``wenet`` in its own interpreter), take turns on identical batches.

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPLY = "@@reply "


def _side_api():
    """init_model and build_optimizer of whichever layout is on sys.path."""
    try:
        from wenet.models import init_model
        from wenet.train.optim import build_optimizer
    except ImportError:  # the layout before the redesign (c47cba8)
        from wenet.utils.init_model import init_model
        from wenet.utils.train_utils import build_optimizer
    return init_model, build_optimizer


def _train_device_helper(name: str):
    """wenet/bin/train.py's helper ``name`` of whichever layout is on sys.path (wenet.train.device;
    wenet.train.setup before issue 33 split it), or None where the revision has none."""
    import importlib
    for module in ("wenet.train.device", "wenet.train.setup"):
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    return None


AMP = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def _worker_step(model, opt, batch, grad_clip: float, amp: str = "none") -> float:
    """forward (under CPU autocast to ``amp``), backward, clip, optimizer step; seconds."""
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=AMP[amp] or torch.bfloat16, enabled=AMP[amp] is not None):
        out = model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])
    out["loss"].backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def _worker_check(model, batch, path: str) -> Dict[str, float]:
    """Eval-mode (no dropout) loss and gradients of one batch, saved to ``path``."""
    model.eval()
    out = model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])
    out["loss"].backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    model.train()
    torch.save({"loss": out["loss"].detach(), "grads": grads}, path)
    return {"loss": float(out["loss"].detach())}


def _profile(model, opt, batches, grad_clip: float, rows: int) -> str:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches:
            _worker_step(model, opt, batch, grad_clip)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def _cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def worker(args) -> None:
    """Serve the parent's commands (one JSON line each on stdin) with this tree's wenet."""
    import json
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    init_model, build_optimizer = _side_api()
    tune_host_memory = _train_device_helper("tune_host_memory")  # train.py's first step
    if tune_host_memory is not None and not args.no_tune_memory:
        tune_host_memory()
    with open(args.worker_conf) as f:
        configs = json.load(f)
    batches = torch.load(args.worker_batches)
    model = opt = None
    for line in sys.stdin:
        cmd = json.loads(line)
        reply: Dict[str, object] = {}
        if cmd["op"] == "build":
            torch.manual_seed(0)
            model = init_model(configs)
            if cmd.get("load"):
                model.load_state_dict(torch.load(cmd["load"]))
            if cmd.get("save"):
                torch.save(model.state_dict(), cmd["save"])
            if args.compile:
                model = _train_device_helper("compile_model")(model)
            model.train()
            opt = build_optimizer(model.parameters(), configs.get("optim", "adam"),
                                  configs.get("optim_conf", {"lr": 0.001}))
            reply = {"params": sum(p.numel() for p in model.parameters())}
        elif cmd["op"] == "check":
            reply = _worker_check(model, batches[0], cmd["path"])
        elif cmd["op"] == "run":
            torch.manual_seed(cmd.get("seed", 0))
            cpu = time.process_time()
            reply = {"times": [_worker_step(model, opt, b, configs.get("grad_clip", 5.0), args.amp)
                               for b in batches[:cmd.get("n", len(batches))]],
                     "cpu": time.process_time() - cpu}
        elif cmd["op"] == "profile":
            reply = {"table": _profile(model, opt, batches, configs.get("grad_clip", 5.0), cmd["rows"])}
        print(REPLY + json.dumps(reply), flush=True)


class _Side:
    """A worker process over the source tree ``root``."""

    def __init__(self, name: str, root: str, tmp: str, threads: int, flags: Tuple[str, ...] = ()) -> None:
        import subprocess
        self.name = name
        env = dict(os.environ, PYTHONPATH=root)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--threads", str(threads),
               "--worker_conf", os.path.join(tmp, "conf.json"),
               "--worker_batches", os.path.join(tmp, "batches.pt")] + list(flags)
        self.proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def call(self, **cmd) -> Dict[str, object]:
        import json
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY):])
            print(f"  [{self.name}] {line}", end="")
        raise RuntimeError(f"{self.name} worker died (rc {self.proc.wait()})")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def corpus_batches(corpus: str, n_batches: int, batch_size: int, vocab: int, seed: int,
                   window: int = 500) -> List[Dict[str, object]]:
    """Static batches of ``batch_size`` from a Kaldi data dir as the pipeline makes them
    (a random sort window of ``window`` utterances, sorted by length), ``n_batches`` of
    them spread over the window's lengths; fbank without dither, normalised with the
    batches' own global mean/std; characters as targets."""
    import random
    import soundfile
    from wenet.dataset.audio import load_audio, resample, to_mono
    from wenet.dataset.fbank import compute_fbank
    from wenet.utils.file_utils import read_kaldi_map
    scp = read_kaldi_map(os.path.join(corpus, "train", "wav.scp"))
    text = read_kaldi_map(os.path.join(corpus, "train", "text"), allow_empty_value=True)
    keys = random.Random(seed).sample(sorted(scp), min(window, len(scp)))
    seconds = {k: soundfile.info(os.path.join(corpus, scp[k])).duration for k in keys}
    keys.sort(key=lambda k: seconds[k])
    groups = [keys[i:i + batch_size] for i in range(0, len(keys) - batch_size + 1, batch_size)]
    groups = groups[::max(1, len(groups) // n_batches)][:n_batches]
    chars = sorted(set("".join(text.values())))
    if len(chars) + 2 > vocab - 1:
        raise ValueError(f"{len(chars)} characters do not fit a vocabulary of {vocab}")
    utts = []
    for group in groups:
        for k in group:
            wav, rate = load_audio(os.path.join(corpus, scp[k]))
            ids = [chars.index(c) + 2 for c in text.get(k, "").strip()] or [2]
            utts.append((compute_fbank(resample(to_mono(wav), rate, 16000), 16000), torch.tensor(ids)))
    allf = torch.cat([f for f, _ in utts])
    mean, std = allf.mean(0), allf.std(0)
    utts = [((f - mean) / std, t) for f, t in utts]
    return [_pad_batch(utts[i:i + batch_size], i // batch_size)
            for i in range(0, len(utts), batch_size)]


def _pad_batch(utts, index: int) -> Dict[str, object]:
    feats = torch.nn.utils.rnn.pad_sequence([f for f, _ in utts], batch_first=True)
    target = torch.nn.utils.rnn.pad_sequence([t for _, t in utts], batch_first=True, padding_value=-1)
    return {"keys": [f"b{index}u{i}" for i in range(len(utts))], "feats": feats,
            "feats_lengths": torch.tensor([f.size(0) for f, _ in utts]), "target": target,
            "target_lengths": torch.tensor([t.size(0) for _, t in utts])}


def _grad_check(tmp: str) -> None:
    """Relative difference of loss and gradients between the two sides: the whole gradient
    (all parameters as one vector) and the worst single tensor, leaving out the biases
    whose gradient is zero in exact arithmetic (rounding noise only)."""
    a, b = torch.load(os.path.join(tmp, "old.check.pt")), torch.load(os.path.join(tmp, "new.check.pt"))
    missing = set(a["grads"]) ^ set(b["grads"])
    names = [n for n in a["grads"] if n in b["grads"]]
    diff = torch.cat([(a["grads"][n] - b["grads"][n]).double().flatten() for n in names])
    whole = float(diff.norm() / torch.cat([a["grads"][n].double().flatten() for n in names]).norm())
    zero_grad = ("linear_k.bias", "depthwise_conv.bias")
    worst = max(((float((a["grads"][n] - b["grads"][n]).norm() / a["grads"][n].norm().clamp(min=1e-30)), n)
                 for n in names if not n.endswith(zero_grad)), default=(0.0, "-"))
    loss_rel = float((a["loss"] - b["loss"]).abs() / a["loss"].abs())
    print(f"same numbers (eval-mode loss and gradients of batch 0): loss {float(a['loss']):.6f} vs "
          f"{float(b['loss']):.6f} (rel {loss_rel:.1e}); whole gradient rel. diff {whole:.1e}, "
          f"worst tensor {worst[0]:.1e} ({worst[1]})"
          f"{'; params only on one side: ' + str(sorted(missing)) if missing else ''}")


def compare(args) -> None:
    """Time REV (a temporary git worktree) and the working tree alternately on the same batches."""
    import json
    import subprocess
    from wenet.train.config import input_dim_of, override_config
    from wenet.utils.file_utils import load_yaml
    configs = override_config(load_yaml(args.compare_config), args.override_config)
    configs.update(input_dim=input_dim_of(configs), output_dim=args.vocab, cmvn_file=None)
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "tree")
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "-q", tree, args.compare],
                       check=True)
        try:
            _compare_in(args, configs, tmp, tree)
        finally:
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], check=False)


def _compare_in(args, configs, tmp: str, tree: str) -> None:
    import json
    with open(os.path.join(tmp, "conf.json"), "w") as f:
        json.dump(configs, f)
    if os.path.isdir(args.corpus):
        batches = corpus_batches(args.corpus, args.batches, args.batch_size, args.vocab, seed=0)
        source = args.corpus
    else:
        batches = synthetic_batches(args.batches, args.batch_size, args.frames, configs["input_dim"], args.vocab)
        source = "synthetic fbank"
    torch.save(batches, os.path.join(tmp, "batches.pt"))
    frames = sum(int(b["feats_lengths"].sum()) for b in batches)
    padded = sum(b["feats"].shape[0] * b["feats"].shape[1] for b in batches)
    audio_s = frames * 0.01
    print(f"{len(batches)} batches of {args.batch_size} from {source}: {audio_s:.1f} s of audio, "
          f"{100 * (1 - frames / padded):.1f} % padding; config {args.compare_config}; "
          f"{args.threads} thread(s) per side")
    flags = ((("--compile",) if args.compile else ()) + (("--no_tune_memory",) if args.no_tune_memory else ())
             + ("--amp", args.amp))
    old = _Side(f"old {args.compare}", tree, tmp, args.threads)
    new = _Side("new", REPO, tmp, args.threads, flags)
    try:
        p_old = old.call(op="build", save=os.path.join(tmp, "init.pt"))["params"]
        p_new = new.call(op="build", load=os.path.join(tmp, "init.pt"))["params"]
        print(f"parameters: old {p_old:,}, new {p_new:,} (same initial weights)")
        old.call(op="check", path=os.path.join(tmp, "old.check.pt"))
        new.call(op="check", path=os.path.join(tmp, "new.check.pt"))
        _grad_check(tmp)
        for side in (old, new):  # warm-up (and torch.compile's compilation)
            start = time.perf_counter()
            side.call(op="run", n=args.warmup)
            print(f"warm-up {side.name}: {time.perf_counter() - start:.1f} s for {args.warmup} step(s)")
        _alternate(args, old, new, audio_s)
        if args.profile:
            for side in (old, new):
                print(f"\ntop operators, {side.name} (self CPU time, one pass over the batches):")
                print(side.call(op="profile", rows=args.profile)["table"])
    finally:
        old.close()
        new.close()


def _alternate(args, old: _Side, new: _Side, audio_s: float) -> None:
    """Rounds of (old, new); audio seconds per wall-clock second, and per CPU second of the
    worker (steadier on a loaded machine: time spent waiting for a core is not counted)."""
    ratios, cpu_ratios = [], []
    speeds: Dict[str, List[float]] = {old.name: [], new.name: []}
    for r in range(args.rounds):
        cpu = {}
        for side in (old, new):
            res = side.call(op="run", seed=r)
            speeds[side.name].append(audio_s / sum(res["times"]))
            cpu[side.name] = audio_s / res["cpu"]
        ratios.append(speeds[new.name][-1] / speeds[old.name][-1])
        cpu_ratios.append(cpu[new.name] / cpu[old.name])
        print(f"round {r + 1}: old {speeds[old.name][-1]:.2f}, new {speeds[new.name][-1]:.2f} "
              f"audio s/s, ratio {ratios[-1]:.3f} (per CPU second: old {cpu[old.name]:.2f}, "
              f"new {cpu[new.name]:.2f}, ratio {cpu_ratios[-1]:.3f})", flush=True)
    print(f"median over {args.rounds} alternations: old {statistics.median(speeds[old.name]):.2f}, "
          f"new {statistics.median(speeds[new.name]):.2f} audio s/s; "
          f"ratio new/old {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
          f"per CPU second {statistics.median(cpu_ratios):.3f}")


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
    p.add_argument("--compare", metavar="REV",
                   help="time REV (a git worktree) against the working tree, alternately")
    p.add_argument("--compare_config", default="conf/bench_wenet_small_conformer.yaml")
    p.add_argument("--corpus", default=os.path.join(REPO, "..", "shared", "corpora", "speechocean762"),
                   help="Kaldi corpus dir with train/{wav.scp,text}; synthetic fbank when absent")
    p.add_argument("--batches", type=int, default=6, help="--compare: batches per round")
    p.add_argument("--rounds", type=int, default=3, help="--compare: alternations (old, new)")
    p.add_argument("--warmup", type=int, default=1, help="--compare: untimed steps per side first")
    p.add_argument("--compile", action="store_true", help="--compare: torch.compile the new side")
    p.add_argument("--profile", type=int, nargs="?", const=25, default=0,
                   help="print the top N operators (torch.profiler); --configs: also the "
                        "forward time of each module down to --profile_depth")
    p.add_argument("--profile_depth", type=int, default=3,
                   help="--profile with --configs: module names with fewer dots than this")
    p.add_argument("--counts", action="store_true",
                   help="--configs: also GFLOP and operator calls of a forward + backward")
    p.add_argument("--counts_at", type=int, default=700,
                   help="--counts: the update the schedules (balancers, skips) are at")
    p.add_argument("--no_tune_memory", action="store_true",
                   help="--compare: the new side leaves the allocator as it is")
    p.add_argument("--amp", default="none", choices=sorted(AMP),
                   help="--compare: CPU autocast dtype of the new side's forward (the old side: float32)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker_conf", help=argparse.SUPPRESS)
    p.add_argument("--worker_batches", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    if args.compare:
        if "--batch_size" not in sys.argv:
            args.batch_size = 16  # the issue's static batch
        if "--vocab" not in sys.argv:
            args.vocab = 258  # 4,725,012 parameters, as WeNet's small conformer
        print(f"torch {torch.__version__}, CPU: {_cpu_model()}")
        return compare(args)
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    for path in args.configs:
        bench_config(path, args.steps, args.batch_size, args.frames, args.vocab,
                     args.override_config, args.profile, args.profile_depth,
                     args.counts_at if args.counts else -1)


if __name__ == "__main__":
    main()

"""Helpers for the training tests: a tiny shard corpus, a tiny config, and a runner for train.py.

Kept out of test_*.py so several test files can share it (pytest puts tests/ on sys.path).
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from typing import Dict, List, Optional, Sequence

import numpy as np
import soundfile as sf
import torch
import yaml

from tests.common import REPO
LETTERS = "abcde"

TINY_CONFIG: Dict = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64, "num_blocks": 1,
                     "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                     "attention_dropout_rate": 0.0, "input_layer": "conv2d",
                     "pos_enc_layer_type": "rel_pos", "cnn_module_kernel": 3},
    "decoder": "bitransformer",
    "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1, "r_num_blocks": 1,
                     "dropout_rate": 0.1},
    "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "reverse_weight": 0.3},
    "dataset_conf": {
        "filter_conf": {"max_length": 3000, "min_length": 10},
        "fbank_conf": {"num_mel_bins": 40, "frame_length": 25, "frame_shift": 10, "dither": 0.1},
        "spec_aug": True,
        "spec_aug_conf": {"num_t_mask": 1, "num_f_mask": 1, "max_t": 10, "max_f": 5},
        "shuffle": True, "shuffle_conf": {"shuffle_size": 20},
        "sort": True, "sort_conf": {"sort_size": 8},
        "batch_conf": {"batch_type": "static", "batch_size": 4},
    },
    "grad_clip": 5.0, "accum_grad": 2, "max_epoch": 2, "log_interval": 2,
    "save_interval": 0, "average_period": 2,
    "optim": "adam", "optim_conf": {"lr": 0.002},
    "scheduler": "warmuplr", "scheduler_conf": {"warmup_steps": 5},
}


def make_corpus(root: str, num_utts: int = 24, num_shards: int = 2, seed: int = 0,
                cv_utts: int = 6) -> Dict[str, str]:
    """Noise/tone utterances (0.5–1 s, 16 kHz) with random 'abcde' transcripts, as tar shards.

    Returns paths: train (data.list), cv (data.list), units (units.txt).
    """
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)

    def write_set(name: str, n: int, shards: int) -> str:
        keys = [f"{name}{i:03d}" for i in range(n)]
        paths = []
        for s in range(shards):
            path = os.path.join(root, f"{name}_shard{s}.tar")
            with tarfile.open(path, "w") as tar:
                for key in keys[s::shards]:
                    dur = rng.uniform(0.5, 1.0)
                    t = np.arange(int(dur * 16000)) / 16000
                    wav = 0.1 * np.sin(2 * np.pi * rng.uniform(200, 800) * t) + 0.02 * rng.standard_normal(t.size)
                    text = "".join(rng.choice(list(LETTERS), size=rng.integers(2, 6)))
                    buf = io.BytesIO()
                    sf.write(buf, wav.astype(np.float32), 16000, format="WAV", subtype="PCM_16")
                    for member, data in ((f"{key}.txt", text.encode()), (f"{key}.wav", buf.getvalue())):
                        info = tarfile.TarInfo(member)
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
            paths.append(path)
        lst = os.path.join(root, f"{name}.list")
        with open(lst, "w") as f:
            f.write("".join(p + "\n" for p in paths))
        return lst

    units = os.path.join(root, "units.txt")
    with open(units, "w") as f:
        f.write("<blank> 0\n<unk> 1\n")
        for i, ch in enumerate(LETTERS):
            f.write(f"{ch} {i + 2}\n")
        f.write(f"<sos/eos> {len(LETTERS) + 2}\n")
    return {"train": write_set("train", num_utts, num_shards), "cv": write_set("cv", cv_utts, 1),
            "units": units}


def write_config(path: str, **overrides) -> str:
    """TINY_CONFIG with top-level keys replaced, written as YAML."""
    conf = dict(TINY_CONFIG, **overrides)
    with open(path, "w") as f:
        yaml.safe_dump(conf, f)
    return path


def train_args(corpus: Dict[str, str], config: str, model_dir: str, extra: Sequence[str] = ()) -> List[str]:
    return ["--config", config, "--data_type", "shard", "--symbol_table", corpus["units"],
            "--train_data", corpus["train"], "--cv_data", corpus["cv"], "--model_dir", model_dir,
            "--num_workers", "0", "--seed", "7", *extra]


def env() -> Dict[str, str]:
    """Environment for subprocesses: repo importable, one thread (deterministic, no contention)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    e["OMP_NUM_THREADS"] = "1"
    e["LC_ALL"] = "C"
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(var, None)
    return e


def train_cmd(args: Sequence[str]) -> List[str]:
    return [sys.executable, os.path.join(REPO, "wenet", "bin", "train.py"), *args]


def run_train(args: Sequence[str], timeout: float = 120, log: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run train.py to completion; raise with its output if it fails."""
    proc = subprocess.run(train_cmd(args), env=env(), capture_output=True, text=True, timeout=timeout)
    if log:
        with open(log, "w") as f:
            f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def start_ranks(args: Sequence[str], init_file: str, log_dir: str, world: int = 2,
                extra: Sequence[str] = ()) -> List[subprocess.Popen]:
    """Start ``world`` gloo ranks of train.py (no launcher, so a test can kill one);
    rank r logs to ``log_dir/rank{r}.log``."""
    os.makedirs(log_dir, exist_ok=True)
    if os.path.exists(init_file):
        os.remove(init_file)
    procs = []
    for rank in range(world):
        with open(os.path.join(log_dir, f"rank{rank}.log"), "w") as log:
            procs.append(subprocess.Popen(
                train_cmd([*args, "--ddp.init_method", f"file://{init_file}",
                           "--ddp.world_size", str(world), "--ddp.rank", str(rank),
                           "--ddp.dist_backend", "gloo", *extra]),
                env=env(), stdout=log, stderr=subprocess.STDOUT))
    return procs


def stop_all(procs: Sequence[subprocess.Popen]) -> None:
    """Kill whatever of ``procs`` still runs (a test's clean-up)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def load_state(path: str) -> Dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_same_state(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> None:
    """Bitwise equality of two state_dicts."""
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs (max |diff| {(a[k].double() - b[k].double()).abs().max()})"


class LinearStandIn(torch.nn.Module):
    """A model with ASRModel's forward signature whose loss is NaN when feats[0, 0, 0] > 100."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, feats, feats_lengths, target, target_lengths):
        loss = self.linear(feats).mean()
        if float(feats[0, 0, 0]) > 100:
            loss = loss * float("nan")
        return {"loss": loss, "loss_ctc": None, "loss_att": None}


class ConstantLoss(torch.nn.Module):
    """Loss = mean of the batch's features, whatever the weights (so it is known in advance)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, feats, feats_lengths, target, target_lengths):
        return {"loss": feats.mean() + 0.0 * self.w.sum(), "loss_ctc": None, "loss_att": None}


class ListSet:
    """Stands in for the training Dataset of Executor.fit: the loader is the batch list."""

    def set_epoch(self, epoch):
        pass

    def consume(self, loader):
        return loader

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def constant_batches(values: Sequence[float], utts: int = 1) -> List[Dict[str, torch.Tensor]]:
    """One batch of ``utts`` utterances per value, every feature equal to that value."""
    return [{"keys": [f"k{i}" for i in range(utts)], "feats": torch.full((utts, 5, 4), v),
             "feats_lengths": torch.full((utts,), 5), "target": torch.zeros(utts, 1, dtype=torch.long),
             "target_lengths": torch.ones(utts, dtype=torch.long)} for v in values]


def ddp_nan_worker(rank: int, init_file: str, poisoned_batch: int, out_dir: str) -> None:
    """One gloo rank of the executor on stand-in batches; rank 1 gets a NaN loss at
    ``poisoned_batch`` and one batch fewer than rank 0. Writes its state and parameter hash."""
    import torch.distributed as dist
    from wenet.train.config import TrainConf
    from wenet.train.distributed import DistInfo, shutdown_distributed
    from wenet.train.executor import Executor
    from wenet.train.scheduler import WarmupLR

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(LinearStandIn())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ex = Executor(model, opt, WarmupLR(opt, 2), TrainConf(accum_grad=2, log_interval=100),
                  torch.device("cpu"), DistInfo(rank, 2), out_dir)
    g = torch.Generator().manual_seed(rank)
    batches = []
    for i in range(7 if rank == 0 else 6):
        feats = torch.randn(2, 3, 4, generator=g)
        if rank == 1 and i == poisoned_batch:
            feats[0, 0, 0] = 1000.0
        batches.append({"keys": [f"r{rank}b{i}"], "feats": feats, "feats_lengths": torch.tensor([3, 3]),
                        "target": torch.zeros(2, 1, dtype=torch.long), "target_lengths": torch.tensor([1, 1])})
    ex.train_epoch(batches)
    with open(os.path.join(out_dir, f"rank{rank}.yaml"), "w") as f:
        yaml.safe_dump({"step": ex.state.step, "batches": ex.state.batches_done,
                        "skipped": ex.state.skipped_nonfinite, "sha": ex.check_replicas()}, f)
    del ex, model, opt  # the DDP reducer holds the process group: release it before leaving
    shutdown_distributed()

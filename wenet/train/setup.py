"""Training set-up shared by wenet/bin/train.py, bench/ and the tests.

Config handling (WeNet-style ``--override_config``, the training keys with
their defaults, ``train.yaml``), DDP initialisation (launcher arguments or
torchrun's environment), the device, seeding and the mixed-precision choice.
The optimizer is built by wenet/train/optim.py, the schedule by scheduler.py.
"""
from __future__ import annotations

import copy
import ctypes
import datetime
import gc
import logging
import os
import random
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import torch
import torch.distributed as dist
import yaml

from wenet.dataset.fbank import FeatureConf
from wenet.models.paths import recorded_paths
from wenet.utils.file_utils import atomic_write_text

_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


class TrainingError(RuntimeError):
    """A fault of the run's set-up or data whose message says everything: train.py prints
    it as one line (no traceback) and exits non-zero."""


@dataclass
class TrainConf:
    """The training-loop keys of the YAML config (top level, as in WeNet 2.x) and their defaults."""

    max_epoch: int = 100
    grad_clip: float = 5.0           # max global grad norm; <= 0: no clipping (the norm is still logged)
    accum_grad: int = 1              # batches per optimizer update
    log_interval: int = 100          # batches between log lines / tensorboard points
    save_interval: int = 0           # updates between step_{S} checkpoints; 0: only at epoch ends
    keep_step_checkpoints: int = 2   # newest step_{S} checkpoints kept on disk
    keep_last_k: int = 1             # epochs whose {N}.resume.pt and {N}.avg.pt are kept (the
                                     # newest k); {N}.pt and {N}.yaml are always kept
    average_period: int = 100        # updates between model-average updates
    max_bad_steps: int = 20          # consecutive non-finite steps before stopping with a dump
    optim: str = "adam"              # adam | adamw
    optim_conf: Dict[str, Any] = field(default_factory=lambda: {"lr": 0.001})
    scheduler: str = "warmuplr"      # warmuplr | warmupcosine (wenet/train/scheduler.py)
    scheduler_conf: Dict[str, Any] = field(default_factory=lambda: {"warmup_steps": 25000})
    grad_scale_warn: float = 0.01    # fp16: warn when the grad scale falls below this
    grad_scale_min: float = 1e-5     # fp16: stop when it falls below this (it collapsed)
    frame_shift_ms: float = 10.0     # from dataset_conf.fbank_conf, to turn frames into seconds

    @classmethod
    def from_configs(cls, configs: Mapping[str, Any]) -> "TrainConf":
        """Read the training keys of a config; missing keys take the defaults above."""
        kwargs = {f.name: configs[f.name] for f in fields(cls) if f.name in configs}
        kwargs["frame_shift_ms"] = FeatureConf.from_config(configs).frame_shift
        conf = cls(**kwargs)
        for name in ("accum_grad", "max_epoch", "log_interval", "keep_last_k"):
            value = getattr(conf, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"config key {name} must be an integer >= 1, got {value!r}")
        return conf


def override_config(configs: Dict[str, Any], overrides: List[str]) -> Dict[str, Any]:
    """Apply ``"key.sub value"`` overrides (value parsed as YAML) to a copy of ``configs``.

    A missing intermediate key is an error; a new leaf key is added with a warning,
    so ``train_conf``-style extras can be set from the command line.
    """
    new = copy.deepcopy(configs)
    for item in overrides:
        parts = item.split(maxsplit=1)
        if len(parts) != 2:
            raise ValueError(f"--override_config expects 'key.sub value', got {item!r}")
        path, raw = parts[0].split("."), parts[1]
        node = new
        for depth, key in enumerate(path[:-1]):
            if not isinstance(node.get(key), dict):
                raise ValueError(f"--override_config {item!r}: '{'.'.join(path[:depth + 1])}' "
                                 "is not a section of the config")
            node = node[key]
        if path[-1] not in node:
            logging.warning("--override_config adds new key %s", parts[0])
        node[path[-1]] = yaml.safe_load(raw)
    return new


def train_yaml_configs(configs: Dict[str, Any], input_dim: int, output_dim: int,
                       cmvn_file: Optional[str], symbol_table: Optional[str] = None,
                       bpe_model: Optional[str] = None) -> Dict[str, Any]:
    """The config as trained plus what inference needs: ``input_dim``, ``output_dim``, and
    the files training read (``cmvn_file``, ``symbol_table``, ``bpe_model``) with the
    ``recipe_root`` their relative paths start from (wenet.models.paths)."""
    out = copy.deepcopy(configs)
    out.update(input_dim=int(input_dim), output_dim=int(output_dim), is_json_cmvn=True,
               **recorded_paths(cmvn_file, symbol_table, bpe_model))
    return out


def input_dim_of(configs: Mapping[str, Any]) -> int:
    """Feature dimension the dataset will produce (fbank ``num_mel_bins``, 80 by default)."""
    return FeatureConf.from_config(configs).num_mel_bins


def save_yaml(configs: Mapping[str, Any], path: str) -> None:
    """Write a config atomically (``yaml.safe_load`` reads it back)."""
    atomic_write_text(path, yaml.safe_dump(dict(configs), sort_keys=False, allow_unicode=True))


@dataclass
class DistInfo:
    """Where this process stands in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    torchrun: bool = False

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def under_torchrun() -> bool:
    """True when torchrun (or an equivalent launcher) set the env:// variables."""
    return all(v in os.environ for v in _TORCHRUN_VARS)


def init_distributed(init_method: Optional[str], world_size: int, rank: int, backend: str,
                     timeout_s: float) -> DistInfo:
    """Join the process group: torchrun's env:// values when present, else the given ones.

    ``timeout_s`` (train.py's ``--ddp_timeout``) bounds the rendezvous (how late the
    last rank, e.g. a second node's, may join) and every collective (how long peers
    wait while rank 0 writes a checkpoint), so a rank whose peer died or hangs fails
    with an error instead of waiting forever.
    """
    if under_torchrun():
        info = DistInfo(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                        int(os.environ["LOCAL_RANK"]), torchrun=True)
        init_method = "env://"
    else:
        local = int(os.environ.get("LOCAL_RANK", 0))
        info = DistInfo(rank, world_size, local)
    if not 0 <= info.rank < info.world_size:
        raise ValueError(f"rank {info.rank} is outside world size {info.world_size}")
    if info.distributed:
        if not init_method:
            raise ValueError("--ddp.init_method is required when --ddp.world_size > 1")
        logging.info("joining process group: %s, rank %d of %d, backend %s, timeout %.0f s",
                     init_method, info.rank, info.world_size, backend, timeout_s)
        try:
            dist.init_process_group(backend, init_method=init_method, world_size=info.world_size,
                                    rank=info.rank, timeout=datetime.timedelta(seconds=timeout_s))
        except RuntimeError as e:  # the rendezvous store's "Wait timeout" and kin
            raise TrainingError(f"rank {info.rank}: the {info.world_size} ranks did not all join "
                                f"{init_method} within {timeout_s:g} s (--ddp_timeout): "
                                f"{str(e).strip().splitlines()[0]}") from e
    return info


def shutdown_distributed() -> None:
    """Leave the process group cleanly, once every rank has finished its collectives.

    Call it after the last reference to the DDP model is gone: DDP's reducer keeps the
    process group alive, and a gloo group torn down only at interpreter exit can abort
    the process (SIGABRT, "terminate called without an active exception") after a
    successful run. The barrier keeps a fast rank from closing its connections while a
    peer is still inside its last collective.
    """
    if not dist.is_initialized():
        return
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def training_device(gpu: int, local_rank: int) -> torch.device:
    """The device of this process (``gpu`` -1: CPU), made CUDA's current device.

    Under torchrun every process sees all GPUs and takes its local rank's; otherwise
    the launcher narrowed ``CUDA_VISIBLE_DEVICES`` to ``gpu`` and it is device 0.
    """
    if gpu < 0:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(f"--gpu {gpu} given but CUDA is not available (use --gpu -1)")
    device = torch.device("cuda", local_rank if under_torchrun() else 0)
    torch.cuda.set_device(device)
    return device


def tune_host_memory() -> bool:
    """Let glibc's malloc keep freed memory for reuse instead of returning it to the system.

    A training step allocates and frees activations of the same large sizes every time.
    Above malloc's mmap threshold (32 MB at most by default) each one is a fresh mapping
    whose pages the kernel faults in and zeroes again, which cost about a quarter of a
    small conformer's CPU step (bench/train_step.py --compare). With the mmap and trim
    thresholds raised they are reused from the heap: the computed numbers do not change,
    the process keeps its peak heap. Linux/glibc only; elsewhere a no-op. True if applied.
    """
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's mallopt parameters
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
        applied = (mallopt(m_mmap_threshold, 2**31 - 1) == 1
                   and mallopt(m_trim_threshold, 2**31 - 1) == 1)
    except (OSError, AttributeError):  # not glibc
        applied = False
    logging.info("host memory: freed blocks %s", "kept for reuse (glibc mallopt)" if applied
                 else "handled by the default allocator (no glibc mallopt)")
    return applied


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """train.py --compile (off by default): ``torch.compile`` the model's forward in place,
    so parameter and checkpoint names stay the same. Shapes become dynamic once a batch
    of a new length arrives (torch's automatic dynamic shapes; ``dynamic=True`` from the
    start fails in torch 2.14's inductor on the conformer with "cannot determine truth
    value of Relational"). It did not pay on a 2-core AMD EPYC (issue 19): the first three
    batch lengths cost 166, 226 and 84 s of compilation and the compiled step was no
    faster than the eager one."""
    model.compile()
    return model


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


AMP_DTYPES: Dict[str, Optional[torch.dtype]] = {
    "none": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def amp_dtype_for(choice: str, device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype of ``--use_amp choice`` on ``device`` (None: full precision).

    ``auto`` is bf16 where the hardware computes it natively (a CUDA device with
    bf16 support; a CPU with AVX512-BF16 or AMX) and full precision elsewhere,
    where bf16 would be emulated. Native is not always faster: on a 2-core
    AVX512-BF16 CPU the small main-job model trained no faster than in float32.
    """
    if choice != "auto":
        if choice not in AMP_DTYPES:
            raise ValueError(f"use_amp must be one of {sorted(AMP_DTYPES) + ['auto']}, got {choice!r}")
        return AMP_DTYPES[choice]
    if device.type == "cuda":
        native = torch.cuda.is_bf16_supported()
    else:
        # private probes of torch.cpu (present since torch 2.3); absent: assume emulation
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        native = any(getattr(torch.cpu, name, lambda: False)() for name in probes)
    return torch.bfloat16 if native else None

"""Distributed set-up: where this process stands in the job (:class:`DistInfo`), joining
the process group (launcher arguments or torchrun's environment) and leaving it cleanly."""
from __future__ import annotations

import datetime
import gc
import logging
import os
from dataclasses import dataclass
from typing import Optional

import torch.distributed as dist

from wenet.train.config import TrainingError

_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


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

"""Where and how this process computes: its device, mixed precision (the autocast dtype
and the loss scaler), TF32, pinned memory and host-to-device copies, the host allocator,
``torch.compile`` and the seeds of python, numpy and torch."""
from __future__ import annotations

import contextlib
import ctypes
import logging
import random
from typing import Dict, Optional

import numpy as np
import torch

from wenet.train.distributed import under_torchrun


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
        # emulated bf16 (V100, T4) counts as supported by default; it is slower than fp32
        native = torch.cuda.is_bf16_supported(including_emulation=False)
    else:
        # private probes of torch.cpu (present since torch 2.3); absent: assume emulation
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        native = any(getattr(torch.cpu, name, lambda: False)() for name in probes)
    return torch.bfloat16 if native else None


def autocast_for(device: torch.device, amp_dtype: Optional[torch.dtype]
                 ) -> contextlib.AbstractContextManager:
    """``torch.amp.autocast`` of ``device``'s type in ``amp_dtype`` (None: full precision,
    a context that does nothing)."""
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.amp.autocast(device.type, dtype=amp_dtype)


def grad_scaler_for(device: torch.device, amp_dtype: Optional[torch.dtype]
                    ) -> Optional[torch.amp.GradScaler]:
    """The loss scaler mixed precision needs: fp16's narrow exponent range makes small
    gradients underflow, so fp16 gets a ``torch.amp.GradScaler`` of the device's type;
    bf16 has float32's range and, like full precision, trains without one."""
    return torch.amp.GradScaler(device.type) if amp_dtype is torch.float16 else None


def set_tf32(device: torch.device, enabled: bool) -> bool:
    """train.py --tf32: let float32 matmuls and convolutions on a CUDA device run in TF32
    (tensor cores, 10-bit mantissa; several times faster on Ampere and later), or keep
    them in full float32 (``enabled`` False). Only CUDA has TF32: on any other device
    nothing is changed. True if the flags were set.

    Uses the ``fp32_precision`` settings where torch has them (2.9+; mixing them with
    the older ``allow_tf32`` flags is an error there), else ``allow_tf32``.
    """
    if device.type != "cuda":
        return False
    backends = torch.backends
    if hasattr(backends.cuda.matmul, "fp32_precision") and hasattr(backends.cudnn, "conv"):
        mode = "tf32" if enabled else "ieee"
        backends.cuda.matmul.fp32_precision = mode
        backends.cudnn.conv.fp32_precision = mode
        backends.cudnn.rnn.fp32_precision = mode
    else:  # torch before 2.9
        backends.cuda.matmul.allow_tf32 = enabled
        backends.cudnn.allow_tf32 = enabled
    logging.info("float32 matmuls and convolutions on %s: %s", device,
                 "TF32 allowed (--tf32 true)" if enabled else "full float32 (--tf32 false)")
    return True


def pin_memory_for(choice: str, device: torch.device) -> bool:
    """train.py --pin_memory: ``auto`` pins the batches (page-locked host memory, whose
    copies to the GPU can overlap compute, see ``to_device``) only when training on CUDA;
    ``true``/``false`` force it."""
    if choice not in ("auto", "true", "false"):
        raise ValueError(f"pin_memory must be auto, true or false, got {choice!r}")
    return device.type == "cuda" if choice == "auto" else choice == "true"


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``; a copy from pinned memory is asynchronous (non_blocking),
    any other copy is synchronous, as an asynchronous copy from pageable memory would
    not overlap anything."""
    return tensor.to(device, non_blocking=tensor.is_pinned())

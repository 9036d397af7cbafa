"""Learning-rate schedules stepped once per optimizer update.

Both schedules are closed-form functions of the update count, so a restored
``state_dict`` (which holds that count) gives exactly the same rates again.

Convention (as WeNet's): after ``n`` calls of ``scheduler.step()`` the rate in
the optimizer is the one for update number ``n + 1`` (1-based), so the first
update already uses ``f(1)`` and ``warmuplr`` peaks at update ``warmup_steps``.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List

import torch
from torch.optim.lr_scheduler import LRScheduler


def warmup_lr_factor(step: int, warmup_steps: int) -> float:
    """Noam factor: rises as ``step / warmup^1.5``, decays as ``step^-0.5``; 1.0 at ``warmup_steps``."""
    if warmup_steps <= 0:
        return step ** -0.5
    return warmup_steps ** 0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


class WarmupLR(LRScheduler):
    """WeNet's ``warmuplr``: linear warm-up to the optimizer's lr at ``warmup_steps``, then ∝ 1/√step."""

    def __init__(self, optimizer: torch.optim.Optimizer, warmup_steps: int = 25000,
                 last_epoch: int = -1) -> None:
        self.warmup_steps = int(warmup_steps)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        factor = warmup_lr_factor(self.last_epoch + 1, self.warmup_steps)
        return [base * factor for base in self.base_lrs]


class WarmupCosineLR(LRScheduler):
    """Linear warm-up to the optimizer's lr at ``warmup_steps``, then a half cosine down to
    ``min_lr`` at ``max_steps`` (held there afterwards).

    Unlike ``warmuplr`` it needs the training length in updates (``max_steps``).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, max_steps: int, warmup_steps: int = 0,
                 min_lr: float = 0.0, last_epoch: int = -1) -> None:
        if max_steps <= warmup_steps:
            raise ValueError(f"warmupcosine: max_steps ({max_steps}) must exceed warmup_steps ({warmup_steps})")
        self.max_steps = int(max_steps)
        self.warmup_steps = int(warmup_steps)
        self.min_lr = float(min_lr)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        step = self.last_epoch + 1
        if step <= self.warmup_steps:
            return [base * step / self.warmup_steps for base in self.base_lrs]
        progress = min(1.0, (step - self.warmup_steps) / (self.max_steps - self.warmup_steps))
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return [self.min_lr + (base - self.min_lr) * cosine for base in self.base_lrs]


_SCHEDULERS = {"warmuplr": WarmupLR, "warmupcosine": WarmupCosineLR}


def build_scheduler(optimizer: torch.optim.Optimizer, name: str, conf: Dict[str, Any]) -> LRScheduler:
    """The schedule called ``name`` (``warmuplr`` | ``warmupcosine``) with ``scheduler_conf`` ``conf``."""
    if name not in _SCHEDULERS:
        raise ValueError(f"unknown scheduler '{name}' (known: {', '.join(sorted(_SCHEDULERS))})")
    try:
        return _SCHEDULERS[name](optimizer, **(conf or {}))
    except TypeError as e:
        raise ValueError(f"bad scheduler_conf for '{name}': {e}") from None

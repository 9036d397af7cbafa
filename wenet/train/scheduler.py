"""Learning-rate schedules stepped once per optimizer update.

Every schedule is a closed-form function of the update count (and, for ``eden``,
of the epoch), so a restored ``state_dict`` (which holds both) gives exactly the
same rates again.

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


def eden_factor(batch: float, epoch: float, lr_batches: float, lr_epochs: float,
                warmup_batches: float, warmup_start: float) -> float:
    """Eden's multiplier of the base rate after ``batch`` updates in epoch ``epoch`` (0-based)."""
    batch_decay = ((batch ** 2 + lr_batches ** 2) / lr_batches ** 2) ** -0.25
    epoch_decay = ((epoch ** 2 + lr_epochs ** 2) / lr_epochs ** 2) ** -0.25
    warmup = 1.0 if batch >= warmup_batches else \
        warmup_start + (1.0 - warmup_start) * batch / warmup_batches
    return batch_decay * epoch_decay * warmup


class Eden(LRScheduler):
    """icefall's Eden: a rate that decays with both the update count and the epoch,

    ``lr = base * ((b^2 + lr_batches^2) / lr_batches^2)^-0.25
    * ((e^2 + lr_epochs^2) / lr_epochs^2)^-0.25 * warmup(b)``,

    flat near the start, then ∝ b^-0.5 and e^-0.5; ``warmup`` rises linearly from
    ``warmup_start`` to 1 over ``warmup_batches`` updates. ``b`` is the number of updates
    already made (the first update uses b = 0, as icefall) and ``e`` the number of
    finished epochs, set by the training loop through :meth:`set_epoch` at the start of
    each epoch. Both are in ``state_dict``, so a resumed run continues on the same curve.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, lr_batches: float = 7500,
                 lr_epochs: float = 3.5, warmup_batches: float = 500.0,
                 warmup_start: float = 0.5, last_epoch: int = -1) -> None:
        if lr_batches <= 0 or lr_epochs <= 0 or warmup_batches < 0 or not 0 < warmup_start <= 1:
            raise ValueError(f"eden: need lr_batches > 0, lr_epochs > 0, warmup_batches >= 0 "
                             f"and 0 < warmup_start <= 1 (got {lr_batches}, {lr_epochs}, "
                             f"{warmup_batches}, {warmup_start})")
        self.lr_batches = float(lr_batches)
        self.lr_epochs = float(lr_epochs)
        self.warmup_batches = float(warmup_batches)
        self.warmup_start = float(warmup_start)
        self.epoch = 0
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        factor = eden_factor(self.last_epoch, self.epoch, self.lr_batches, self.lr_epochs,
                             self.warmup_batches, self.warmup_start)
        return [base * factor for base in self.base_lrs]

    def set_epoch(self, epoch: int) -> None:
        """Enter epoch ``epoch`` (0-based: the number of finished epochs); rates follow at once."""
        self.epoch = int(epoch)
        lrs = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = lrs


_SCHEDULERS = {"warmuplr": WarmupLR, "warmupcosine": WarmupCosineLR, "eden": Eden}


def build_scheduler(optimizer: torch.optim.Optimizer, name: str, conf: Dict[str, Any]) -> LRScheduler:
    """The schedule called ``name`` (``warmuplr`` | ``warmupcosine`` | ``eden``) with
    ``scheduler_conf`` ``conf``."""
    if name not in _SCHEDULERS:
        raise ValueError(f"unknown scheduler '{name}' (known: {', '.join(sorted(_SCHEDULERS))})")
    try:
        return _SCHEDULERS[name](optimizer, **(conf or {}))
    except TypeError as e:
        raise ValueError(f"bad scheduler_conf for '{name}': {e}") from None

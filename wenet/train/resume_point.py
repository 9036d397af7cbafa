"""Which checkpoint a run continues from when none is named, and what to do when the
newest one cannot be read (issue 57).

The candidates are the complete checkpoints of the model dir: those with a
``NAME.resume.pt`` (wenet/train/checkpoint.py writes it last). Each is checked by loading
it (``torch.load``, memory-mapped: a truncated or overwritten file fails there). The run
continues from the readable one with the most updates. When a newer one is unreadable
(a disk that filled, a copy cut short), the run falls back to the newest intact one with
a warning (the updates after it are trained again and the unreadable files replaced).
With no intact resume state left, or with epoch models but no resume state at all, it
never starts again from scratch over those models: it stops with a ValueError that says
how to go on from the newest model's weights (``--checkpoint``) or start in a new dir.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

from wenet.train.checkpoint import (MODEL_SUFFIX, RESUME_SUFFIX, checkpoint_base,
                                    checkpoint_files, load_infos)

# order of checkpoints: (updates, epoch checkpoint over step checkpoint on a tie, epoch)
Order = Tuple[float, int, int]


@dataclass(frozen=True)
class _Candidate:
    order: Order
    base: str
    error: Optional[str] = None   # why its resume state cannot be read; None: intact


def _candidates(model_dir: str) -> List[_Candidate]:
    found = []
    for kind in ("epoch", "step"):
        for number, path in checkpoint_files(model_dir, kind, RESUME_SUFFIX):
            base = checkpoint_base(path)
            try:
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
                order = (int(state["step"]), 1 if state.get("epoch_done") else 0,
                         int(state.get("epoch", 0)))
                found.append(_Candidate(order, base))
            except Exception as e:  # any failure to read it: not a state to continue from
                found.append(_Candidate(_order_by_name(kind, number, base), base,
                                        f"{type(e).__name__}: {e}"))
    return found


def _order_by_name(kind: str, number: int, base: str) -> Order:
    """Where an unreadable checkpoint stands: step_S after S updates, epoch N after the
    updates its N.yaml records (after everything when that is unreadable too)."""
    if kind == "step":
        return (number, 0, 0)
    try:
        return (int(load_infos(base)["step"]), 1, number)
    except Exception:  # no step known: count it as the newest, never as an old one
        return (float("inf"), 1, number)


def _newest_model(model_dir: str) -> Optional[str]:
    models = checkpoint_files(model_dir, "epoch", MODEL_SUFFIX) or \
        checkpoint_files(model_dir, "step", MODEL_SUFFIX)
    return models[-1][1] if models else None


def _how_to_go_on(model_dir: str, unreadable: List[_Candidate]) -> str:
    steps = [f"mv {c.base}{RESUME_SUFFIX} {c.base}{RESUME_SUFFIX}.bad" for c in unreadable]
    model = _newest_model(model_dir)
    cont = (f"To continue from the weights of {model} (optimizer, schedule and data "
            f"position start afresh): {'; '.join(steps + [''])}rerun with --checkpoint "
            f"{model} (run.sh --checkpoint {model}). " if model else "")
    return (f"{cont}To start over instead, train into a new --dir (or move the checkpoints "
            f"of {model_dir} away).")


def resume_point(model_dir: str) -> Optional[str]:
    """Base path of the checkpoint to continue from (None: a new run); ValueError when
    continuing would silently lose trained epochs (see the module docstring)."""
    if not os.path.isdir(model_dir):
        return None
    candidates = _candidates(model_dir)
    intact = [c for c in candidates if c.error is None]
    best = max(intact, key=lambda c: c.order, default=None)
    newer_bad = sorted((c for c in candidates if c.error is not None
                        and (best is None or c.order > best.order)), key=lambda c: c.order)
    for c in candidates:
        if c.error is not None and c not in newer_bad:
            logging.warning("ignoring unreadable resume state %s%s (older than %s): %s",
                            c.base, RESUME_SUFFIX, best.base, c.error)
    bad_list = "; ".join(f"{c.base}{RESUME_SUFFIX} is unreadable ({c.error})" for c in newer_bad)
    if best is None and newer_bad:
        raise ValueError(f"{bad_list}, and no intact resume state is left in {model_dir}: "
                         "refusing to start from scratch over its checkpoints. "
                         + _how_to_go_on(model_dir, newer_bad))
    if best is None:
        model = _newest_model(model_dir)
        if model is not None:
            raise ValueError(f"{model_dir} holds checkpoints ({os.path.basename(model)} the "
                             "newest) but no resume state: refusing to start from scratch "
                             "over them. " + _how_to_go_on(model_dir, []))
        return None
    if newer_bad:
        logging.warning("%s: falling back to the newest intact resume state %s (the updates "
                        "after it are trained again)", bad_list, best.base)
    return best.base

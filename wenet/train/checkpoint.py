"""Checkpoint files: atomic writes, the WeNet layout, and the exact-resume state.

One checkpoint called ``NAME`` (``{epoch}`` at an epoch end, ``step_{S}`` every
``save_interval`` updates) is up to four files in the experiment dir::

    NAME.pt         bare model state_dict (DDP prefix stripped), as WeNet tools expect
    NAME.avg.pt     the running weight average, same keys (epoch checkpoints)
    NAME.yaml       epoch, step, lr, cv_loss, save_time, ... (epoch checkpoints only: WeNet's
                    average_model.py globs every ``*.yaml`` but train.yaml and needs cv_loss)
    NAME.resume.pt  optimizer, scheduler, scaler, counters, RNG per rank, data position

Every file is written to a temporary name, fsync'ed and renamed, and
``NAME.resume.pt`` is written last: a checkpoint counts as complete (resumable)
only when it exists, so a process killed while saving leaves the previous
checkpoint intact and the half-written one ignored. Everything loads with
``torch.load(weights_only=True)`` and ``yaml.safe_load``.
"""
from __future__ import annotations

import glob
import logging
import os
import random
import re
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch
import yaml

from wenet.utils.file_utils import atomic_open, atomic_write_text

RESUME_SUFFIX = ".resume.pt"
_STEP_RE = re.compile(r"^step_(\d+)$")


def atomic_torch_save(obj: Any, path: str) -> None:
    """``torch.save`` through ``atomic_open``: readers never see half a file."""
    with atomic_open(path, "wb") as f:
        torch.save(obj, f)


def strip_ddp_prefix(state_dict: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Drop the ``module.`` prefix DistributedDataParallel adds to every key."""
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state_dict.items()}


def load_init_weights(model: torch.nn.Module, path: str, exclude: str = ""
                      ) -> Tuple[List[str], List[str]]:
    """Initialise ``model`` from another experiment's weights (transfer learning).

    Copies every tensor of ``path`` whose name and shape match one of the model's
    and whose name does not match the regular expression ``exclude`` (e.g. the
    output layers of a different unit inventory, or ``global_cmvn`` so the new
    corpus keeps its own statistics). Returns (copied, not copied) names, the
    latter with the reason; raises if nothing could be copied (a wrong file).
    """
    source = strip_ddp_prefix(torch.load(path, map_location="cpu", weights_only=True))
    pattern = re.compile(exclude) if exclude else None
    own = model.state_dict()
    copied: List[str] = []
    skipped: List[str] = []
    update = {}
    for name, tensor in own.items():
        if name not in source:
            skipped.append(f"{name} (not in {path})")
        elif pattern is not None and pattern.search(name):
            skipped.append(f"{name} (excluded)")
        elif source[name].shape != tensor.shape:
            skipped.append(f"{name} (shape {tuple(source[name].shape)} there, "
                           f"{tuple(tensor.shape)} here)")
        else:
            update[name] = source[name]
            copied.append(name)
    if not copied:
        raise ValueError(f"{path}: no tensor matches the model by name and shape; "
                         f"is it a checkpoint of this kind of model?")
    model.load_state_dict(update, strict=False)
    return copied, skipped


def checkpoint_base(path: str) -> str:
    """``exp/3.pt`` or ``exp/3.resume.pt`` → ``exp/3`` (the name shared by a checkpoint's files)."""
    for suffix in (RESUME_SUFFIX, ".avg.pt", ".pt", ".yaml"):
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def save_checkpoint(base: str, model_state: Mapping[str, torch.Tensor], infos: Dict[str, Any],
                    avg_state: Optional[Mapping[str, torch.Tensor]] = None,
                    resume_state: Optional[Dict[str, Any]] = None, write_yaml: bool = True) -> None:
    """Write the files of checkpoint ``base`` (a path without extension), resume state last.

    ``infos`` (plus ``save_time``) go to ``base.yaml`` when ``write_yaml``, and
    into the resume state (key ``infos``) in any case.
    """
    os.makedirs(os.path.dirname(os.path.abspath(base)), exist_ok=True)
    start = time.time()
    atomic_torch_save(dict(model_state), f"{base}.pt")
    if avg_state is not None:
        atomic_torch_save(dict(avg_state), f"{base}.avg.pt")
    infos = dict(infos, save_time=time.strftime("%Y-%m-%d %H:%M:%S"))
    if write_yaml:
        atomic_write_text(f"{base}.yaml", yaml.safe_dump(infos, sort_keys=True))
    if resume_state is not None:
        atomic_torch_save(dict(resume_state, infos=infos), f"{base}{RESUME_SUFFIX}")
    logging.info("saved checkpoint %s in %.1f s", base, time.time() - start)


def load_infos(base: str) -> Dict[str, Any]:
    """The ``base.yaml`` of a checkpoint, or {} when it has none."""
    path = f"{base}.yaml"
    if not os.path.exists(path):
        return {}
    with open(path, "r", encoding="utf-8") as f:
        infos = yaml.safe_load(f)
    if not isinstance(infos, dict):
        raise ValueError(f"{path}: expected a mapping, got {type(infos).__name__}")
    return infos


def load_resume_state(base: str) -> Dict[str, Any]:
    """The resume state of checkpoint ``base`` (``base.resume.pt``)."""
    return torch.load(f"{base}{RESUME_SUFFIX}", map_location="cpu", weights_only=True)


def find_latest_checkpoint(model_dir: str) -> Optional[str]:
    """Base path of the complete checkpoint with the most updates in ``model_dir``, or None.

    Complete means its ``.resume.pt`` exists. On a tie an epoch checkpoint wins
    over a step checkpoint (it also records that the epoch's CV was done).
    """
    best: Optional[tuple] = None
    for path in glob.glob(os.path.join(model_dir, f"*{RESUME_SUFFIX}")):
        base = checkpoint_base(path)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as e:  # a corrupt file must not stop the search for a good one
            logging.warning("ignoring unreadable resume state %s: %s", path, e)
            continue
        key = (int(state["step"]), 1 if state.get("epoch_done") else 0, state.get("epoch", 0))
        if best is None or key > best[0]:
            best = (key, base)
    return None if best is None else best[1]


def step_checkpoints(model_dir: str) -> List[str]:
    """Bases of the ``step_{S}`` checkpoints in ``model_dir``, oldest (fewest updates) first."""
    found = []
    for path in glob.glob(os.path.join(model_dir, "step_*.pt")):
        base = checkpoint_base(path)
        m = _STEP_RE.match(os.path.basename(base))
        if m:
            found.append((int(m.group(1)), base))
    return [base for _, base in sorted(set(found))]


def prune_step_checkpoints(model_dir: str, keep: int) -> None:
    """Delete all but the newest ``keep`` step checkpoints (their resume state first)."""
    bases = step_checkpoints(model_dir)
    for base in bases[: max(0, len(bases) - keep)]:
        for suffix in (RESUME_SUFFIX, ".yaml", ".avg.pt", ".pt"):
            if os.path.exists(base + suffix):
                os.remove(base + suffix)
        logging.info("removed old step checkpoint %s", base)


def capture_rng_state() -> Dict[str, Any]:
    """This process's python, numpy, torch (and CUDA) generator states, weights_only-loadable."""
    np_state = np.random.get_state(legacy=False)
    state: Dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
                  "pos": int(np_state["state"]["pos"]),
                  "has_gauss": int(np_state["has_gauss"]), "gauss": float(np_state["gauss"])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    nps = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": nps["key"].numpy().astype(np.uint32), "pos": nps["pos"]},
                         "has_gauss": nps["has_gauss"], "gauss": nps["gauss"]})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

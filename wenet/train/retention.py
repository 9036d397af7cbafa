"""What training leaves on disk: old checkpoints pruned, stale temporary files removed, sizes.

Retention (config key ``keep_last_k``, default 1): after the checkpoint of epoch
``N`` is complete, the resume states ``{M}.resume.pt`` and running averages
``{M}.avg.pt`` of epochs ``M <= N - k`` are deleted, and so are the step
checkpoints taken before the oldest kept epoch ended (they are superseded by it).
The epoch models ``{M}.pt`` and ``{M}.yaml``, which averaging reads, always stay.
Pruning runs only after the new checkpoint's resume state, its last file, is in
place, so a kill at any moment leaves at least one complete checkpoint.

Temporary files: every checkpoint file is written as ``<path>.tmp.<pid>`` and
renamed (wenet.utils.file_utils.atomic_open); a process killed while writing
leaves its temporary behind. :func:`remove_stale_temp_files` deletes those
whose process is gone (rank 0 calls it when training starts).
"""
from __future__ import annotations

import logging
import os
from typing import Dict, List, Optional, Tuple

from wenet.train.checkpoint import (AVERAGE_SUFFIX, INFOS_SUFFIX, MODEL_SUFFIX, RESUME_SUFFIX,
                                    checkpoint_files, epoch_base, load_infos,
                                    parse_checkpoint_name)
from wenet.utils.file_utils import TMP_MARK, dead_writers_temp_files

_TEMP_DIRS = ("", "bad_batch")  # the model dir and the bad-batch dump dir under it


def _remove(path: str) -> Optional[int]:
    """Delete ``path``; the bytes freed, None when it did not exist."""
    try:
        size = os.path.getsize(path)
        os.remove(path)
    except FileNotFoundError:
        return None
    return size


def prune_checkpoints(model_dir: str, epoch: int, keep: int) -> List[str]:
    """Apply the retention policy after epoch ``epoch``'s checkpoint is complete.

    Returns the deleted paths. Epochs after ``epoch`` (left by another run) are not touched.
    """
    if keep < 1:
        raise ValueError(f"keep_last_k must be >= 1, got {keep}")
    oldest_kept = epoch - keep + 1
    removed: List[str] = []
    for suffix in (RESUME_SUFFIX, AVERAGE_SUFFIX):  # resume state first: incomplete at once
        for number, path in checkpoint_files(model_dir, "epoch", suffix):
            if number < oldest_kept and _remove(path) is not None:
                removed.append(path)
    if oldest_kept >= 0:
        kept_step = load_infos(epoch_base(model_dir, oldest_kept)).get("step")
        if kept_step is not None:
            removed += _remove_steps_up_to(model_dir, int(kept_step))
    if removed:
        logging.info("keep_last_k %d: removed %s", keep,
                     ", ".join(os.path.basename(p) for p in removed))
    return removed


def _remove_steps_up_to(model_dir: str, step: int) -> List[str]:
    """Delete the files of step checkpoints ``step_{S}`` with ``S <= step``."""
    removed = []
    for suffix in (RESUME_SUFFIX, INFOS_SUFFIX, AVERAGE_SUFFIX, MODEL_SUFFIX):
        for number, path in checkpoint_files(model_dir, "step", suffix):
            if number <= step and _remove(path) is not None:
                removed.append(path)
    return removed


def stale_temp_files(model_dir: str) -> List[str]:
    """Temporaries of dead writers in ``model_dir`` and its bad_batch/ (``file_utils``)."""
    found: List[str] = []
    for sub in _TEMP_DIRS:
        found += dead_writers_temp_files(os.path.join(model_dir, sub))
    return found


def remove_stale_temp_files(model_dir: str) -> Tuple[int, int]:
    """Delete the temporaries that killed writers left in ``model_dir``; (files, bytes) freed.

    Only files whose writer's pid is not alive here: a shared model dir must not be
    written by a live process on another machine while training starts.
    """
    paths = stale_temp_files(model_dir)
    freed = sum(_remove(p) or 0 for p in paths)
    if paths:
        logging.info("removed %d temporary file(s) left by killed writers in %s, %d bytes "
                     "freed: %s", len(paths), model_dir, freed,
                     ", ".join(os.path.basename(p) for p in paths))
    return len(paths), freed


def _category(name: str) -> str:
    parsed = parse_checkpoint_name(name)
    if parsed is None:
        return "temporary" if TMP_MARK in name else "other"
    if parsed.kind != "epoch":
        return {"step": "step checkpoints", "average": "averaged models"}[parsed.kind]
    return {MODEL_SUFFIX: "epoch models", INFOS_SUFFIX: "epoch models",
            RESUME_SUFFIX: "resume states", AVERAGE_SUFFIX: "running averages"}[parsed.suffix]


def model_dir_usage(model_dir: str) -> Dict[str, int]:
    """Bytes under ``model_dir`` by kind of file, and ``total`` (every regular file below it,
    tensorboard logs and decoding results included; links are not followed)."""
    usage: Dict[str, int] = {"total": 0}
    for root, _, files in os.walk(model_dir):
        top = os.path.normpath(root) == os.path.normpath(model_dir)
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            size = os.path.getsize(path)
            kind = _category(name) if top else "subdirectories"
            usage[kind] = usage.get(kind, 0) + size
            usage["total"] += size
    return usage


def format_usage(usage: Dict[str, int]) -> str:
    """``123.4 MB (epoch models 80.1, resume states 30.2, ...)`` of :func:`model_dir_usage`."""
    parts = ", ".join(f"{kind} {size / 2 ** 20:.1f}" for kind, size in sorted(usage.items())
                      if kind != "total")
    return f"{usage['total'] / 2 ** 20:.1f} MB ({parts})"

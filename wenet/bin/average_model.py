"""Average epoch checkpoints ``{N}.pt`` of an experiment into one model.

Selection: with ``--val_best`` the ``num`` epochs with the lowest ``cv_loss``
in ``{N}.yaml``; otherwise the ``num`` newest epochs.  Only epoch checkpoints
``{N}.pt`` count (not ``avg_*.pt``, ``init.pt``, ``step_*.pt``, ...): the names
are wenet/train/checkpoint.py's.
Floating tensors are summed in float64 and cast back to their dtype; integer
and bool tensors (``num_batches_tracked``, ...) cannot be meaningfully
averaged and are copied from the reference checkpoint: the best one with
``--val_best``, the newest one otherwise.

``--use_model_avg`` writes instead the training-time running average
``{N}.avg.pt`` of the newest (or val-best) epoch among those whose average
training kept (its ``keep_last_k``), cast to the dtypes of
``{N}.pt`` when that file exists (float32 otherwise).

``--models A.pt B.pt ...`` averages the given checkpoints instead, e.g. the averaged
models of several fine-tuning runs that started from the same pretrained weights (a
"model soup"; averaging runs from different starts gives a useless model). Integer
tensors come from the first.
"""
from __future__ import annotations

import argparse
import logging
import os
from typing import Dict, List, Optional, Tuple

import torch

from wenet.train.checkpoint import (AVERAGE_SUFFIX, INFOS_SUFFIX, MODEL_SUFFIX,
                                    atomic_torch_save, epoch_checkpoints, epoch_file)
from wenet.utils.file_utils import load_yaml


def _read_cv_loss(yaml_path: str, n: int) -> Optional[Tuple[float, int]]:
    """(cv_loss, epoch) from ``{N}.yaml``, or None (with a warning) when unusable."""
    if not os.path.exists(yaml_path):
        logging.warning("%s missing: epoch checkpoint %d not ranked", yaml_path, n)
        return None
    info = load_yaml(yaml_path) or {}
    if not isinstance(info, dict) or info.get("cv_loss") is None:
        logging.warning("%s has no cv_loss: epoch checkpoint %d not ranked", yaml_path, n)
        return None
    return float(info["cv_loss"]), int(info.get("epoch", n))


def select_checkpoints(src_path: str, num: int, val_best: bool, min_epoch: int = 0,
                       max_epoch: int = 1 << 62, suffix: str = MODEL_SUFFIX) -> List[int]:
    """Epoch numbers to average, the reference (best or newest) one first, among the
    epochs that have a ``{N}`` + ``suffix`` file (``.avg.pt``: those whose running
    average training kept, see its ``keep_last_k``)."""
    ckpts = dict(epoch_checkpoints(src_path, suffix))
    if val_best:
        ranked = []
        for n in ckpts:
            got = _read_cv_loss(epoch_file(src_path, n, INFOS_SUFFIX), n)
            if got is not None and min_epoch <= got[1] <= max_epoch:
                ranked.append((got[0], n))
        ranked.sort()
        chosen = [n for _, n in ranked[:num]]
        for loss, n in ranked[:num]:
            logging.info("epoch %d cv_loss %.6f", n, loss)
        what = f"epoch checkpoints with a cv_loss in epochs [{min_epoch}, {max_epoch}]"
        found = len(ranked)
    else:
        eligible = sorted((n for n in ckpts if min_epoch <= n <= max_epoch), reverse=True)
        chosen = eligible[:num]
        what = f"epoch checkpoints {{N}}{suffix} with {min_epoch} <= N <= {max_epoch}"
        found = len(eligible)
    if found < num:
        raise ValueError(f"asked to average {num} checkpoints but found only {found} {what} "
                         f"in {src_path}")
    return chosen


def _load(path: str) -> Dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a state_dict")
    return state


def average_state_dicts(paths: List[str]) -> Dict[str, torch.Tensor]:
    """Mean of the floating tensors of ``paths``; other tensors from ``paths[0]``."""
    ref = _load(paths[0])
    sums = {k: v.to(torch.float64) for k, v in ref.items() if v.is_floating_point()}
    for path in paths[1:]:
        state = _load(path)
        if set(state) != set(ref):
            diff = sorted(set(state) ^ set(ref))[:5]
            raise ValueError(f"{path} and {paths[0]} have different keys (e.g. {diff})")
        for k in sums:
            if state[k].shape != ref[k].shape:
                raise ValueError(f"{path}: '{k}' has shape {tuple(state[k].shape)}, "
                                 f"{paths[0]} has {tuple(ref[k].shape)}")
            sums[k] += state[k].to(torch.float64)
    return {k: (sums[k] / len(paths)).to(v.dtype) if k in sums else v.clone()
            for k, v in ref.items()}


def running_average(src_path: str, n: int) -> Dict[str, torch.Tensor]:
    """``{n}.avg.pt`` cast to the dtypes of ``{n}.pt`` (float32 without it)."""
    avg_path = epoch_file(src_path, n, AVERAGE_SUFFIX)
    if not os.path.exists(avg_path):
        raise FileNotFoundError(f"{avg_path} not found: was training run with a model average?")
    avg = _load(avg_path)
    pt = epoch_file(src_path, n)
    dtypes = {k: v.dtype for k, v in _load(pt).items()} if os.path.exists(pt) else {}
    return {k: v.to(dtypes.get(k, torch.float32)) if v.is_floating_point() else v
            for k, v in avg.items()}


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dst_model", required=True, help="averaged model to write")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--src_path", help="directory holding {N}.pt, {N}.yaml")
    source.add_argument("--models", nargs="+", metavar="PT",
                        help="average these checkpoint files (runs from one common start)")
    parser.add_argument("--num", type=int, default=5, help="how many checkpoints to average")
    parser.add_argument("--val_best", action="store_true", help="lowest cv_loss, not newest")
    parser.add_argument("--min_epoch", type=int, default=0)
    parser.add_argument("--max_epoch", type=int, default=1 << 62)
    parser.add_argument("--use_model_avg", action="store_true",
                        help="write the running average {N}.avg.pt of the chosen epoch")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.num < 1:
        parser.error("--num must be at least 1")
    if args.models:
        if args.use_model_avg:
            parser.error("--use_model_avg takes --src_path, not --models")
        logging.info("averaging %s", " ".join(args.models))
        state = average_state_dicts(args.models)
    elif args.use_model_avg:
        n = select_checkpoints(args.src_path, 1, args.val_best, args.min_epoch,
                               args.max_epoch, suffix=AVERAGE_SUFFIX)[0]
        logging.info("writing the running average of epoch %d", n)
        state = running_average(args.src_path, n)
    else:
        chosen = select_checkpoints(args.src_path, args.num, args.val_best, args.min_epoch,
                                    args.max_epoch)
        paths = [epoch_file(args.src_path, n) for n in chosen]
        logging.info("averaging %s", " ".join(paths))
        state = average_state_dicts(paths)
    write_model(state, args.dst_model)
    logging.info("wrote %s", args.dst_model)


def write_model(state: Dict[str, torch.Tensor], path: str) -> None:
    """Save ``state`` to ``path`` atomically; on failure nothing is left behind: neither
    the temporary file nor the directories created for it."""
    created = []
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder):
        created.append(folder)
        folder = os.path.dirname(folder)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        atomic_torch_save(state, path)
    except BaseException:
        for folder in created:  # innermost first; only if still empty
            try:
                os.rmdir(folder)
            except OSError:
                break
        raise


if __name__ == "__main__":
    main()

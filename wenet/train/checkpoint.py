"""Checkpoint files: their names, atomic writes, the WeNet layout, loading them back.

One checkpoint called ``NAME`` (``{epoch}`` at an epoch end, ``step_{S}`` every
``save_interval`` updates) is up to four files in the experiment dir::

    NAME.pt         bare model state_dict (DDP prefix stripped), as WeNet tools expect
    NAME.avg.pt     the running weight average, same keys (epoch checkpoints)
    NAME.yaml       epoch, step, lr, cv_loss, save_time, ... (epoch checkpoints only: WeNet's
                    average_model.py globs every ``*.yaml`` but train.yaml and needs cv_loss)
    NAME.resume.pt  optimizer, scheduler, scaler, counters, RNG per rank, data position

``avg_{n}.pt`` is an average of ``n`` epoch checkpoints (wenet/bin/average_model.py).
This module is the only one that knows these names: everything else lists an
experiment dir through :func:`parse_checkpoint_name` and :func:`epoch_checkpoints`.
It is the file layer only: what goes into a checkpoint, when one is written, which
ones are kept and which one a run resumes from is wenet/train/checkpoint_manager.py's.

Every file is written to a temporary name, fsync'ed and renamed, and
``NAME.resume.pt`` is written last: a checkpoint counts as complete (resumable)
only when it exists, so a process killed while saving leaves the previous
checkpoint intact and the half-written one ignored. Everything loads with
``torch.load(weights_only=True)`` and ``yaml.safe_load``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import time
import zipfile
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import torch
import yaml

from wenet.models.factory import architecture_differences
from wenet.utils.file_utils import atomic_open, atomic_write_text, load_yaml

MODEL_SUFFIX = ".pt"
AVERAGE_SUFFIX = ".avg.pt"
INFOS_SUFFIX = ".yaml"
RESUME_SUFFIX = ".resume.pt"
SAVE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # {N}.yaml save_time, local time
_SUFFIXES = (RESUME_SUFFIX, AVERAGE_SUFFIX, MODEL_SUFFIX, INFOS_SUFFIX)  # longest match first
_KINDS = {"": "epoch", "step_": "step", "avg_": "average"}
_NAME_RE = re.compile(r"^(step_|avg_)?(\d+)(\.resume\.pt|\.avg\.pt|\.pt|\.yaml)$")


@dataclass(frozen=True)
class CheckpointName:
    """What a file name of the experiment dir says: ``step_40.resume.pt`` is
    ``CheckpointName("step", 40, ".resume.pt")``."""

    kind: str      # "epoch" ({N}.*), "step" (step_{S}.*) or "average" (avg_{n}.pt)
    number: int    # N, S or n
    suffix: str    # one of MODEL_SUFFIX, AVERAGE_SUFFIX, INFOS_SUFFIX, RESUME_SUFFIX


def parse_checkpoint_name(name: str) -> Optional[CheckpointName]:
    """The checkpoint file ``name`` (a base name, no directory) stands for, or None.

    None for every other file of an experiment dir (``train.yaml``, ``init.pt``,
    ``final.zip``, temporary files) and for ``avg_{n}`` with another suffix than ``.pt``.
    """
    m = _NAME_RE.match(name)
    if m is None:
        return None
    kind = _KINDS[m.group(1) or ""]
    if kind == "average" and m.group(3) != MODEL_SUFFIX:
        return None
    return CheckpointName(kind, int(m.group(2)), m.group(3))


def _listdir(model_dir: str) -> List[str]:
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"checkpoint directory {model_dir} does not exist")
    return os.listdir(model_dir)


def checkpoint_files(model_dir: str, kind: str, suffix: str) -> List[Tuple[int, str]]:
    """(number, path) of the ``kind`` checkpoint files ending in ``suffix``, in numeric order."""
    found = []
    for name in _listdir(model_dir):
        parsed = parse_checkpoint_name(name)
        if parsed is not None and parsed.kind == kind and parsed.suffix == suffix:
            found.append((parsed.number, os.path.join(model_dir, name)))
    return sorted(found)


def epoch_checkpoints(model_dir: str, suffix: str = MODEL_SUFFIX) -> List[Tuple[int, str]]:
    """(epoch, path) of the epoch checkpoints ``{N}.pt`` of ``model_dir``, in epoch order.

    ``suffix=INFOS_SUFFIX`` lists their ``{N}.yaml`` instead (``AVERAGE_SUFFIX``: ``{N}.avg.pt``).
    Step checkpoints, averages, resume states and other files are left out.
    """
    return checkpoint_files(model_dir, "epoch", suffix)


def epoch_file(model_dir: str, epoch: int, suffix: str = MODEL_SUFFIX) -> str:
    """Path of epoch checkpoint ``epoch``'s file with ``suffix`` (``exp/3.pt``, ``exp/3.yaml``...)."""
    return os.path.join(model_dir, f"{epoch}{suffix}")


def epoch_base(model_dir: str, epoch: int) -> str:
    """Base path (no suffix) of the checkpoint written at the end of ``epoch``."""
    return os.path.join(model_dir, str(epoch))


def step_base(model_dir: str, step: int) -> str:
    """Base path (no suffix) of the checkpoint written after update ``step``."""
    return os.path.join(model_dir, f"step_{step}")


class _WriteRecorder:
    """A binary file that keeps the OSError of a failed write: torch.save swallows it and
    reports "enforce fail ... unexpected pos" instead (e.g. on a full disk)."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.name = getattr(f, "name", None)  # what a file object says it is
        self.error: Optional[OSError] = None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()

    def truncate(self, size: Optional[int] = None) -> int:
        return self.f.truncate(size)


class CheckpointWriteError(OSError):
    """A checkpoint file could not be written (a full disk, a quota): names the file and
    the cause; the file that was there before, if any, is intact (``atomic_open``)."""


@contextlib.contextmanager
def _write_errors_named(path: str) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        if e.errno is None or isinstance(e, CheckpointWriteError):
            raise
        raise CheckpointWriteError(e.errno, f"cannot write {path}: {e.strerror} (the "
                                   f"previous {os.path.basename(path)}, if any, is intact)"
                                   ) from e


def atomic_torch_save(obj: Any, path: str) -> None:
    """``torch.save`` through ``atomic_open``: readers never see half a file. A failed
    write is a :class:`CheckpointWriteError` naming ``path`` and the cause."""
    with _write_errors_named(path), atomic_open(path, "wb") as f:
        recorder = _WriteRecorder(f)
        try:
            torch.save(obj, recorder)
        except RuntimeError as e:
            if recorder.error is None:
                raise
            raise recorder.error from e


def strip_ddp_prefix(state_dict: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Drop the ``module.`` prefix DistributedDataParallel adds to every key."""
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state_dict.items()}


def _is_torchscript(path: str) -> bool:
    """True for a TorchScript archive (export_jit's final.zip: it holds ``<name>/code/``)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any(n.split("/", 1)[-1].startswith("code/") for n in z.namelist())


def _init_state(path: str) -> Dict[str, torch.Tensor]:
    """The weights of a checkpoint, or of an exported TorchScript model (stage 6's
    final.zip), whose state dict names the same tensors as the model's."""
    if _is_torchscript(path):
        logging.info("%s is a TorchScript export: taking its weights", path)
        return dict(torch.jit.load(path, map_location="cpu").state_dict())
    return torch.load(path, map_location="cpu", weights_only=True)


def load_init_weights(model: torch.nn.Module, path: str, exclude: str = ""
                      ) -> Tuple[List[str], List[str]]:
    """Initialise ``model`` from another experiment's weights (transfer learning): a
    checkpoint (``avg_N.pt``) or an exported TorchScript model (``final.zip``).

    Copies every tensor of ``path`` whose name and shape match one of the model's
    and whose name does not match the regular expression ``exclude`` (e.g. the
    output layers of a different unit inventory, or ``global_cmvn`` so the new
    corpus keeps its own statistics). Returns (copied, not copied) names, the
    latter with the reason; raises if nothing could be copied (a wrong file).
    """
    source = strip_ddp_prefix(_init_state(path))
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


def check_init_architecture(configs: Dict[str, Any], path: str, allow_mismatch: bool = False
                            ) -> List[str]:
    """Refuse to start ``configs``'s model from ``path`` when the ``train.yaml`` beside it
    builds a model that computes another function (an activation, a norm, causal
    attention...): its tensors would all copy by name and shape into the wrong places and
    training would start from a broken model without a word. Returns the differences
    (``wenet.models.factory.architecture_differences``); raises ValueError naming them
    unless ``allow_mismatch``, then only logs them. No train.yaml there: nothing to check
    (logged)."""
    other_yaml = os.path.join(os.path.dirname(os.path.abspath(path)), "train.yaml")
    if not os.path.isfile(other_yaml):
        logging.info("no train.yaml beside %s: its model's architecture is not checked", path)
        return []
    differences = architecture_differences(configs, load_yaml(other_yaml))
    if differences and not allow_mismatch:
        raise ValueError(
            f"--init_checkpoint {path}: this config builds a different model from the one "
            f"{other_yaml} describes, so its weights would start a broken model: "
            + "; ".join(differences) + ". Make the options equal (e.g. --override_config, or "
            "run.sh --train_overrides), or give --init_allow_mismatch if this is intended")
    for line in differences:
        logging.warning("--init_checkpoint %s: %s (allowed by --init_allow_mismatch)", path, line)
    return differences


def checkpoint_base(path: str) -> str:
    """``exp/3.pt`` or ``exp/3.resume.pt`` → ``exp/3`` (the name shared by a checkpoint's files)."""
    for suffix in _SUFFIXES:
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
    atomic_torch_save(dict(model_state), f"{base}{MODEL_SUFFIX}")
    if avg_state is not None:
        atomic_torch_save(dict(avg_state), f"{base}{AVERAGE_SUFFIX}")
    infos = dict(infos, save_time=time.strftime(SAVE_TIME_FORMAT))
    if write_yaml:
        with _write_errors_named(f"{base}{INFOS_SUFFIX}"):
            atomic_write_text(f"{base}{INFOS_SUFFIX}", yaml.safe_dump(infos, sort_keys=True))
    if resume_state is not None:
        atomic_torch_save(dict(resume_state, infos=infos), f"{base}{RESUME_SUFFIX}")
    logging.info("saved checkpoint %s in %.1f s", base, time.time() - start)


def load_infos(base: str) -> Dict[str, Any]:
    """The ``base.yaml`` of a checkpoint, or {} when it has none."""
    path = f"{base}{INFOS_SUFFIX}"
    if not os.path.exists(path):
        return {}
    infos = load_yaml(path)
    if not isinstance(infos, dict):
        raise ValueError(f"{path}: expected a mapping, got {type(infos).__name__}")
    return infos


def dump_bad_batch(model_dir: str, rank: int, batch: Mapping[str, Any],
                   model_state: Optional[Mapping[str, torch.Tensor]], infos: Dict[str, Any]) -> str:
    """Save the batch (per rank) and, from rank 0, the model under ``model_dir/bad_batch/``.

    Written when training stops after too many non-finite steps, so the culprit can be replayed.
    """
    out = os.path.join(model_dir, "bad_batch")
    os.makedirs(out, exist_ok=True)
    cpu_batch = {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in batch.items()}
    atomic_torch_save(cpu_batch, os.path.join(out, f"batch.rank{rank}.pt"))
    if model_state is not None:
        atomic_torch_save(dict(model_state), os.path.join(out, "model.pt"))
        atomic_write_text(os.path.join(out, "info.yaml"), yaml.safe_dump(infos, sort_keys=True))
    return out

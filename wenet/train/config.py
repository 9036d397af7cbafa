"""The training config: the training-loop keys and their defaults, ``--override_config``,
and the ``train.yaml`` written to the experiment dir.

Also :class:`TrainingError`, the one-line failure of a run's set-up or data. DDP set-up
is wenet/train/distributed.py, the device and precision wenet/train/device.py.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional

import yaml

from wenet.dataset.fbank import FeatureConf
from wenet.models.paths import recorded_paths
from wenet.utils.file_utils import atomic_write_text


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

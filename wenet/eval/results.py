"""Read what an experiment left behind (epoch infos, WER reports, RTF files) and summarise it.

Used by ``tools/plot_losses.py`` and ``tools/summarize_results.py``.
"""
from __future__ import annotations

import datetime
import json
import logging
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence


from wenet.train.checkpoint import INFOS_SUFFIX, SAVE_TIME_FORMAT, epoch_checkpoints
from wenet.utils.file_utils import load_yaml

_OVERALL = re.compile(r"^Overall -> \s*([0-9.]+|nan|inf) % N=(\d+) C=(\d+) S=(\d+) D=(\d+) I=(\d+)\s*$")


def read_epoch_infos(exp_dir: str) -> List[Dict[str, Any]]:
    """The ``{N}.yaml`` dicts of ``exp_dir`` in epoch order (``epoch`` defaults to N)."""
    if not os.path.isdir(exp_dir):
        raise FileNotFoundError(f"experiment directory {exp_dir} does not exist")
    infos = []
    for epoch, path in epoch_checkpoints(exp_dir, INFOS_SUFFIX):
        info = load_yaml(path)
        if not isinstance(info, dict):
            raise ValueError(f"{path}: not a mapping")
        info.setdefault("epoch", epoch)
        infos.append(info)
    return sorted(infos, key=lambda i: int(i["epoch"]))


def _number(value: Any) -> float:
    """A float from a yaml value; None and junk become NaN."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def loss_curves(infos: Sequence[Dict[str, Any]]) -> Dict[str, List[float]]:
    """``{"epoch": [...], "train_loss": [...], "cv_loss": [...]}`` (NaN where missing)."""
    return {"epoch": [float(i["epoch"]) for i in infos],
            "train_loss": [_number(i.get("train_loss")) for i in infos],
            "cv_loss": [_number(i.get("cv_loss")) for i in infos]}


@dataclass
class WerScore:
    """The ``Overall ->`` line of a compute-wer.py report."""

    wer: float
    n: int
    c: int
    s: int
    d: int
    i: int


def read_overall_wer(path: str) -> WerScore:
    """The last ``Overall -> x % N=.. C=.. S=.. D=.. I=..`` line of ``path``."""
    found = None
    with open(path, "r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith("Overall"):
                m = _OVERALL.match(line.strip())
                if not m:
                    raise ValueError(f"{path}:{lineno}: unreadable Overall line: {line.strip()!r}")
                found = WerScore(float(m.group(1)), *(int(m.group(k)) for k in range(2, 7)))
    if found is None:
        raise ValueError(f"{path}: no 'Overall ->' line (was compute-wer.py interrupted?)")
    return found


def read_rtf(path: str) -> Optional[float]:
    """RTF from a ``<mode>/rtf`` file: recognize.py's JSON line, or ``rtf VALUE`` text; None if absent."""
    if not os.path.exists(path):
        return None
    with open(path, "r", encoding="utf-8") as f:
        text = f.read().strip()
    if text.startswith("{"):
        value = json.loads(text).get("rtf")
        return None if value is None else float(value)
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "rtf":
            return float(parts[1])
    raise ValueError(f"{path}: no rtf value (expected a JSON line or 'rtf VALUE')")


def training_wall_time(infos: Sequence[Dict[str, Any]]) -> Optional[float]:
    """Seconds between the first and the last epoch's ``save_time``; None with fewer than two.

    This spans epochs 1..N-1 (epoch 0's start is not recorded) and includes any
    pause between resumed runs.
    """
    stamps = []
    for info in infos:
        value = info.get("save_time")
        if value is None:
            continue
        stamps.append(datetime.datetime.strptime(str(value), SAVE_TIME_FORMAT))
    if len(stamps) < 2:
        return None
    return (max(stamps) - min(stamps)).total_seconds()


def format_duration(seconds: float) -> str:
    """``H:MM:SS``."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def count_parameters(config_path: str, checkpoint: Optional[str] = None) -> int:
    """Trainable-parameter count of the model that ``train.yaml`` builds.

    With ``checkpoint`` its state_dict is loaded strictly first, so the count is
    known to describe that checkpoint.
    """
    import torch  # only here: the rest of the module stays light

    from wenet.models import init_model
    configs = load_yaml(config_path)
    model = init_model(configs)
    if checkpoint:
        model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True))
    return sum(p.numel() for p in model.parameters())


def results_table(rows: Sequence[Dict[str, Any]], metric: str = "WER") -> str:
    """Markdown table of ``{"mode", "score": WerScore, "rtf"}`` rows; ``metric`` names the
    error-rate column ("CER" where compute-wer.py scored characters)."""
    lines = [f"| mode | {metric} % | N | S | D | I | RTF |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        sc: WerScore = row["score"]
        rtf = row.get("rtf")
        rtf_text = "n/a" if rtf is None or not math.isfinite(rtf) else f"{rtf:.4f}"
        lines.append(f"| {row['mode']} | {sc.wer:.2f} | {sc.n} | {sc.s} | {sc.d} | {sc.i} | {rtf_text} |")
    return "\n".join(lines) + "\n"


def collect_scores(exp_dir: str, test_set: str, modes: Sequence[str]) -> List[Dict[str, Any]]:
    """Rows for :func:`results_table` from ``exp_dir/test_set/<mode>/{wer,rtf}``.

    A missing ``wer`` is an error naming it; a missing ``rtf`` gives RTF n/a (logged).
    """
    rows = []
    for mode in modes:
        wer_path = os.path.join(exp_dir, test_set, mode, "wer")
        if not os.path.exists(wer_path):
            raise FileNotFoundError(f"no WER for mode '{mode}' of test set '{test_set}': "
                                    f"{wer_path} does not exist (run stage 5 with this mode)")
        rtf_path = os.path.join(exp_dir, test_set, mode, "rtf")
        rtf = read_rtf(rtf_path)
        if rtf is None:
            logging.warning("%s missing or empty: RTF of %s shown as n/a", rtf_path, mode)
        rows.append({"mode": mode, "score": read_overall_wer(wer_path), "rtf": rtf})
    return rows

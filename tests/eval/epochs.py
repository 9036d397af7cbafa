"""Epoch files (``{N}.yaml``) as the executor writes them, for the tests of tests/eval."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import yaml


def write_epochs(d: Path, train: Sequence[Optional[float]], cv: Sequence[float],
                 minutes: Optional[Sequence[int]] = None) -> None:
    """``d/{N}.yaml`` per epoch; ``train_loss`` only where given, ``save_time`` at 10:MM
    when ``minutes`` is given."""
    for n, (t, c) in enumerate(zip(train, cv)):
        info = {"epoch": n, "step": 10 * (n + 1), "lr": 0.001, "cv_loss": c}
        if minutes is not None:
            info["save_time"] = f"2024-05-01 10:{minutes[n]:02d}:00"
        if t is not None:
            info["train_loss"] = t
        (d / f"{n}.yaml").write_text(yaml.safe_dump(info))

"""The loss-per-epoch plot of an experiment (``loss.png`` beside RESULTS.md).

Drawn with matplotlib's Agg backend on a figure of its own (no pyplot, no
display, no global state), so it works on headless machines and inside tests.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import List, Mapping, Sequence, Tuple

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from wenet.utils.file_utils import atomic_open

logger = logging.getLogger(__name__)

# (legend name, key of loss_curves(), colour): each curve keeps its colour whether
# or not the other one is drawn.
LOSS_SERIES: Tuple[Tuple[str, str, str], ...] = (("train", "train_loss", "#1f77b4"),
                                                 ("cv", "cv_loss", "#ff7f0e"))


@dataclass(frozen=True)
class PixelBox:
    """A rectangle of the written image in pixels: columns left..right, rows top..bottom
    (row 0 is the top of the image)."""

    left: int
    top: int
    right: int
    bottom: int


@dataclass(frozen=True)
class LossPlot:
    """What :func:`plot_loss_curves` drew: the curves' names, the axes and the legend."""

    names: List[str]
    axes: PixelBox
    legend: PixelBox


def _pixel_box(extent, height: int) -> PixelBox:
    """matplotlib display extent (origin bottom-left) → image pixel box (origin top-left)."""
    return PixelBox(int(math.floor(extent.x0)), int(math.floor(height - extent.y1)),
                    int(math.ceil(extent.x1)), int(math.ceil(height - extent.y0)))


def plot_loss_curves(curves: Mapping[str, Sequence[float]], out: str, title: str = "loss per epoch",
                     width: int = 640, height: int = 400, dpi: int = 100) -> LossPlot:
    """Draw train and CV loss against epoch and write a ``width`` x ``height`` PNG to ``out``.

    ``curves`` is :func:`wenet.eval.results.loss_curves` output. A curve with no
    finite value is left out (NaN points break a line); with neither curve drawable
    this raises ValueError. The file is written atomically.
    """
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    names = []
    for name, key, color in LOSS_SERIES:
        values = list(curves[key])
        if any(math.isfinite(v) for v in values):
            ax.plot(curves["epoch"], values, color=color, linewidth=2, marker="o", markersize=4,
                    label=name)
            names.append(name)
    if not names:
        raise ValueError("no finite train_loss or cv_loss to plot")
    ax.set_title(title)
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, color="#e0e0e0")
    legend = ax.legend(loc="best")
    fig.tight_layout()
    fig.canvas.draw()
    plot = LossPlot(names, _pixel_box(ax.get_window_extent(), height),
                    _pixel_box(legend.get_window_extent(), height))
    with atomic_open(out, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi)
    logger.debug("loss plot %s: %s, axes %s", out, names, plot.axes)
    return plot

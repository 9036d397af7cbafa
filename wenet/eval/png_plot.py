"""A small dependency-free line plotter: numpy RGB canvas, Bresenham lines, 5x7 font, PNG writer.

Enough to draw training curves (``tools/plot_losses.py``) on machines without
matplotlib. The PNG is 8-bit RGB, one IDAT chunk, filter type 0 on every row.
"""
from __future__ import annotations

import logging
import math
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

Color = Tuple[int, int, int]
WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)
GRID: Color = (225, 225, 225)
PALETTE: Tuple[Color, ...] = ((31, 119, 180), (230, 100, 10), (44, 160, 44), (200, 30, 40))

# 5x7 glyphs: seven rows, bit 4 is the leftmost column.
FONT_5X7: Dict[str, Tuple[int, ...]] = {
    "0": (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E), "1": (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "2": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F), "3": (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    "4": (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02), "5": (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    "6": (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E), "7": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E), "9": (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    ".": (0, 0, 0, 0, 0, 0x0C, 0x0C), "-": (0, 0, 0, 0x1F, 0, 0, 0), "+": (0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0),
    " ": (0, 0, 0, 0, 0, 0, 0), "_": (0, 0, 0, 0, 0, 0, 0x1F),
    "a": (0, 0, 0x0E, 0x01, 0x0F, 0x11, 0x0F), "c": (0, 0, 0x0E, 0x10, 0x10, 0x11, 0x0E),
    "d": (0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F), "e": (0, 0, 0x0E, 0x11, 0x1F, 0x10, 0x0E),
    "h": (0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11), "i": (0x04, 0, 0x0C, 0x04, 0x04, 0x04, 0x0E),
    "l": (0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E), "n": (0, 0, 0x16, 0x19, 0x11, 0x11, 0x11),
    "o": (0, 0, 0x0E, 0x11, 0x11, 0x11, 0x0E), "p": (0, 0, 0x1E, 0x11, 0x1E, 0x10, 0x10),
    "r": (0, 0, 0x16, 0x19, 0x10, 0x10, 0x10), "s": (0, 0, 0x0E, 0x10, 0x0E, 0x01, 0x1E),
    "t": (0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06), "v": (0, 0, 0x11, 0x11, 0x11, 0x0A, 0x04),
    "x": (0, 0, 0x11, 0x0A, 0x04, 0x0A, 0x11),
}
GLYPH_W, GLYPH_H = 5, 7


def glyph_bitmap(char: str) -> np.ndarray:
    """The 7x5 boolean bitmap of ``char``; ValueError for characters the font lacks."""
    rows = FONT_5X7.get(char)
    if rows is None:
        raise ValueError(f"png_plot font has no glyph for {char!r} (has {''.join(sorted(FONT_5X7))!r})")
    return np.array([[(r >> (GLYPH_W - 1 - c)) & 1 for c in range(GLYPH_W)] for r in rows], dtype=bool)


class Canvas:
    """An RGB uint8 image (``pixels[row, col]``) with clipped drawing primitives."""

    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        self.pixels = np.empty((height, width, 3), dtype=np.uint8)
        self.pixels[:] = background

    @property
    def height(self) -> int:
        return self.pixels.shape[0]

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    def dot(self, x: int, y: int, color: Color, size: int = 1) -> None:
        """A ``size`` x ``size`` square whose top-left pixel is ``(x - size//2, y - size//2)``."""
        x0, y0 = x - size // 2, y - size // 2
        xa, xb = max(0, x0), min(self.width, x0 + size)
        ya, yb = max(0, y0), min(self.height, y0 + size)
        if xa < xb and ya < yb:
            self.pixels[ya:yb, xa:xb] = color

    def line(self, x0: int, y0: int, x1: int, y1: int, color: Color, width: int = 1) -> None:
        """Bresenham line from (x0, y0) to (x1, y1), both ends included."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            self.dot(x0, y0, color, width)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x: int, y: int, s: str, color: Color = BLACK, scale: int = 1) -> None:
        """Draw ``s`` with its top-left corner at (x, y); one blank column between glyphs."""
        for i, ch in enumerate(s):
            bitmap = glyph_bitmap(ch)
            for r, c in zip(*np.nonzero(bitmap)):
                self.dot(x + (i * (GLYPH_W + 1) + c) * scale + scale // 2,
                         y + r * scale + scale // 2, color, scale)


def text_width(s: str, scale: int = 1) -> int:
    """Width in pixels of ``s`` drawn by :meth:`Canvas.text`."""
    return max(0, len(s) * (GLYPH_W + 1) - 1) * scale


def encode_png(pixels: np.ndarray) -> bytes:
    """PNG bytes of an ``[H, W, 3]`` uint8 image (8-bit RGB, no interlace)."""
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"encode_png needs uint8 [H, W, 3], got {pixels.dtype} {pixels.shape}")
    h, w, _ = pixels.shape

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    rows = np.concatenate([np.zeros((h, 1), np.uint8), pixels.reshape(h, w * 3)], axis=1)
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 9))
            + chunk(b"IEND", b""))


def write_png(path: str, pixels: np.ndarray) -> None:
    """Write ``pixels`` as a PNG file (through a temporary file and a rename)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(encode_png(pixels))
    os.replace(tmp, path)


def nice_ticks(lo: float, hi: float, target: int = 5, integer: bool = False) -> List[float]:
    """About ``target`` round tick values (1, 2 or 5 x 10^k apart) covering [lo, hi].

    The first tick is <= lo and the last >= hi, so the axis can span exactly the ticks.
    With ``integer`` the step is at least 1.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"axis range must be finite, got [{lo}, {hi}]")
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = 1.0 if integer or lo == 0 else abs(lo) * 0.1
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(1, target)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw * (1 - 1e-9))
    if integer:
        step = max(1.0, round(step))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def format_tick(value: float, ticks: Sequence[float]) -> str:
    """``value`` with as many decimals as the tick step needs."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{value:.{decimals}f}"


@dataclass
class Axes:
    """The plot area in pixels, the data range it shows and the tick values."""

    left: int
    top: int
    width: int
    height: int
    x_range: Tuple[float, float]
    y_range: Tuple[float, float]
    x_ticks: List[float]
    y_ticks: List[float]

    def to_pixel(self, x: float, y: float) -> Tuple[int, int]:
        """(col, row) of data point (x, y); a range's ends land on the area's edge pixels."""
        (x0, x1), (y0, y1) = self.x_range, self.y_range
        col = self.left + round((x - x0) / (x1 - x0) * (self.width - 1))
        row = self.top + round((y1 - y) / (y1 - y0) * (self.height - 1))
        return col, row


@dataclass
class Series:
    """One curve: its legend name, points and colour (None: from the palette)."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    color: Optional[Color] = None


def line_plot(series: Sequence[Series], width: int = 640, height: int = 400,
              xlabel: str = "epoch", ylabel: str = "loss", scale: int = 2
              ) -> Tuple[np.ndarray, Axes]:
    """Render curves with axes, ticks, grid and a legend; returns (pixels, axes).

    Non-finite y values are left out and break the line there. Every point also
    gets a small square marker, so a one-point curve is visible.
    """
    pts = [(x, y) for s in series for x, y in zip(s.xs, s.ys) if math.isfinite(y)]
    if not pts:
        raise ValueError("line_plot: no finite point to draw")
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x_lo, x_hi = (min(xs), max(xs)) if max(xs) > min(xs) else (min(xs) - 1, max(xs) + 1)
    x_pad = 0.03 * (x_hi - x_lo)  # keeps the first and last markers off the frame
    x_ticks = [v for v in nice_ticks(x_lo, x_hi, 8, integer=True) if x_lo <= v <= x_hi]
    y_ticks = nice_ticks(min(ys), max(ys), 6)
    y_labels = [format_tick(v, y_ticks) for v in y_ticks]
    char_h = GLYPH_H * scale
    left = 12 + max(text_width(t, scale) for t in y_labels)
    top, right, bottom = 12 + char_h + 8, 16, 16 + 2 * char_h + 8
    axes = Axes(left, top, width - left - right, height - top - bottom,
                (x_lo - x_pad, x_hi + x_pad), (y_ticks[0], y_ticks[-1]), x_ticks, y_ticks)
    if axes.width < 20 or axes.height < 20:
        raise ValueError(f"line_plot: {width}x{height} leaves no room for the plot area")
    canvas = Canvas(width, height)
    x_end, y_end = axes.left + axes.width - 1, axes.top + axes.height - 1
    for v, label in zip(y_ticks, y_labels):
        _, row = axes.to_pixel(x_lo, v)
        canvas.line(axes.left, row, x_end, row, GRID)
        canvas.line(axes.left - 5, row, axes.left - 1, row, BLACK)
        canvas.text(axes.left - 8 - text_width(label, scale), row - char_h // 2, label, BLACK, scale)
    for v in x_ticks:
        col, _ = axes.to_pixel(v, y_ticks[0])
        canvas.line(col, y_end + 1, col, y_end + 5, BLACK)
        label = format_tick(v, x_ticks)
        canvas.text(col - text_width(label, scale) // 2, y_end + 9, label, BLACK, scale)
    canvas.text(axes.left + (axes.width - text_width(xlabel, scale)) // 2,
                y_end + 12 + char_h, xlabel, BLACK, scale)
    canvas.text(axes.left - 8 - text_width(y_labels[-1], scale), 8, ylabel, BLACK, scale)
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        prev = None
        for x, y in zip(s.xs, s.ys):
            if not math.isfinite(y):
                prev = None
                continue
            point = axes.to_pixel(x, y)
            if prev is not None:
                canvas.line(*prev, *point, color, width=2)
            canvas.dot(*point, color, size=5)
            prev = point
    # frame last, so curves on the range's edge do not hide it
    for a, b in (((axes.left, axes.top), (x_end, axes.top)), ((axes.left, y_end), (x_end, y_end)),
                 ((axes.left, axes.top), (axes.left, y_end)), ((x_end, axes.top), (x_end, y_end))):
        canvas.line(*a, *b, BLACK)
    _legend(canvas, axes, series, scale)
    logging.debug("line_plot: %d series, x ticks %s, y ticks %s", len(series), x_ticks, y_ticks)
    return canvas.pixels, axes


def _legend(canvas: Canvas, axes: Axes, series: Sequence[Series], scale: int) -> None:
    """Names with a colour swatch, in a framed white box at the plot's top right."""
    row_h = GLYPH_H * scale + 6
    box_w = 10 + 24 + 6 + max(text_width(s.name, scale) for s in series) + 10
    box_h = 8 + row_h * len(series)
    x0 = axes.left + axes.width - 1 - 8 - box_w
    y0 = axes.top + 8
    canvas.pixels[y0:y0 + box_h, x0:x0 + box_w] = WHITE
    for a, b in (((x0, y0), (x0 + box_w - 1, y0)), ((x0, y0 + box_h - 1), (x0 + box_w - 1, y0 + box_h - 1)),
                 ((x0, y0), (x0, y0 + box_h - 1)), ((x0 + box_w - 1, y0), (x0 + box_w - 1, y0 + box_h - 1))):
        canvas.line(*a, *b, BLACK)
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        y = y0 + 6 + i * row_h
        mid = y + GLYPH_H * scale // 2
        canvas.line(x0 + 10, mid, x0 + 33, mid, color, width=3)
        canvas.text(x0 + 40, y, s.name, BLACK, scale)

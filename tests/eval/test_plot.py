"""The loss plot (wenet/eval/plot.py through tools/plot_losses.py), read back from the PNG."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from wenet.eval.plot import LOSS_SERIES, PixelBox, plot_loss_curves
from wenet.eval.results import loss_curves, read_epoch_infos
from tests.common import load_tool
from tests.eval.epochs import write_epochs

TRAIN_RGB, CV_RGB = [tuple(int(color[i:i + 2], 16) for i in (1, 3, 5)) for _, _, color in LOSS_SERIES]


def read_rgb(path: Path) -> np.ndarray:
    """[H, W, 3] uint8 pixels of a PNG (PIL, independent of the writer)."""
    with Image.open(path) as im:
        assert im.format == "PNG"
        return np.asarray(im.convert("RGB"))


def mask(img: np.ndarray, rgb) -> np.ndarray:
    """Pixels of exactly colour ``rgb`` (a line's antialiased core)."""
    return np.all(img == np.array(rgb, dtype=np.uint8), axis=-1)


def inside(m: np.ndarray, box: PixelBox) -> np.ndarray:
    """``m`` with everything outside ``box`` cleared."""
    out = np.zeros_like(m)
    out[box.top:box.bottom + 1, box.left:box.right + 1] = m[box.top:box.bottom + 1, box.left:box.right + 1]
    return out


def test_plot_losses_draws_both_curves_where_the_data_says(tmp_path: Path):
    train, cv = [10.0, 6.0, 4.0, 3.0], [13.0, 11.0, 10.0, 9.5]
    write_epochs(tmp_path, train, cv)
    (tmp_path / "step_5.yaml").write_text("junk: 1\n")  # not an epoch file: ignored
    load_tool("plot_losses").main(["--exp_dir", str(tmp_path), "--out", str(tmp_path / "loss.png"),
                                   "--width", "640", "--height", "400"])
    img = read_rgb(tmp_path / "loss.png")
    assert img.shape == (400, 640, 3)
    # the same drawing through the library call, which also reports where the axes are
    plot = plot_loss_curves(loss_curves(read_epoch_infos(str(tmp_path))), str(tmp_path / "again.png"),
                            title=f"{tmp_path.name}: loss per epoch")
    assert (tmp_path / "again.png").read_bytes() == (tmp_path / "loss.png").read_bytes()  # rerun: same file
    assert plot.names == ["train", "cv"]
    box, legend = plot.axes, plot.legend
    assert 0 < box.left < box.right < 640 and 0 < box.top < box.bottom < 400
    # the axes frame is drawn where the box says (dark rows/columns within a pixel of its edges)
    dark = img.astype(int).sum(axis=-1) < 200
    assert any(dark[r, box.left + 2:box.right - 1].all() for r in (box.top - 1, box.top, box.top + 1))
    assert any(dark[box.top + 2:box.bottom - 1, c].all() for c in (box.left - 1, box.left, box.left + 1))

    train_px, cv_px = mask(img, TRAIN_RGB), mask(img, CV_RGB)
    assert train_px.sum() > 300 and cv_px.sum() > 300  # not blank: both curves are there
    assert (inside(train_px, box) == train_px).all() and (inside(cv_px, box) == cv_px).all()
    # the legend shows a swatch of each colour
    assert inside(train_px, legend).any() and inside(cv_px, legend).any()

    # the curves themselves (legend cleared): cv lies above train in every column, train falls,
    # and on a linear axis the gap grows from 3 (epoch 0) to 6.5 (epoch 3) loss units
    curves = []
    for m in (train_px, cv_px):
        m = m.copy()
        m[legend.top:legend.bottom + 1, legend.left:legend.right + 1] = False
        curves.append(m)
    cols = [c for c in range(box.left, box.right + 1) if curves[0][:, c].any() and curves[1][:, c].any()]
    rows = {c: [np.nonzero(m[:, c])[0].mean() for m in curves] for c in cols}
    assert len(cols) > 300 and all(cv_row < train_row for train_row, cv_row in rows.values())
    first, last = cols[:3], cols[-3:]
    train_first = np.mean([rows[c][0] for c in first])
    train_last = np.mean([rows[c][0] for c in last])
    assert train_first < train_last  # rows grow downwards: the loss fell
    gap_first = np.mean([rows[c][0] - rows[c][1] for c in first])
    gap_last = np.mean([rows[c][0] - rows[c][1] for c in last])
    assert gap_last / gap_first == pytest.approx(6.5 / 3.0, rel=0.1)


def test_plot_losses_without_train_loss_draws_cv_only(tmp_path: Path):
    write_epochs(tmp_path, [None, None], [5.0, 4.0])
    load_tool("plot_losses").main(["--exp_dir", str(tmp_path), "--width", "500", "--height", "300"])
    img = read_rgb(tmp_path / "loss.png")
    assert img.shape == (300, 500, 3)
    assert mask(img, CV_RGB).sum() > 100 and mask(img, TRAIN_RGB).sum() == 0


def test_plot_losses_without_any_loss_exits_and_writes_nothing(tmp_path: Path):
    write_epochs(tmp_path, [None], [float("nan")])
    with pytest.raises(SystemExit, match="no finite train_loss or cv_loss"):
        load_tool("plot_losses").main(["--exp_dir", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.yaml"]


def test_plot_losses_bad_epoch_yaml_is_one_line_naming_file_and_line(tmp_path: Path):
    write_epochs(tmp_path, [2.0], [1.5])
    (tmp_path / "1.yaml").write_text("epoch: 1\ncv_loss: [1.0\n")
    with pytest.raises(SystemExit) as err:
        load_tool("plot_losses").main(["--exp_dir", str(tmp_path)])
    message = str(err.value.code)
    assert message.endswith(f": {tmp_path / '1.yaml'}:3: invalid YAML: expected ',' or ']', but "
                            "got '<stream end>'") and "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.yaml", "1.yaml"]

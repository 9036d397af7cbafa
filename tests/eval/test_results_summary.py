"""Results reporting: the PNG plotter (read back with an independent decoder), the loss plot,
RESULTS.md, per-mode RTF files from recognize.py and train_loss in the epoch yaml."""
from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from wenet.eval import png_plot
from wenet.eval.png_plot import Canvas, Series, encode_png, line_plot, nice_ticks
from tests.common import REPO, load_tool

TOOLS = os.path.join(REPO, "tools")


def _tool_main(name: str):
    """``main`` of tools/<name>.py."""
    return load_tool(name).main


def read_png(data: bytes) -> np.ndarray:
    """Minimal independent PNG reader for 8-bit RGB, filter-0 rows: returns [H, W, 3] uint8."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        tag, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF, tag
        chunks.append((tag, body))
        pos += 12 + length
    assert [t for t, _ in chunks][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    w, h, depth, ctype, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, ctype, comp, filt, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(b for t, b in chunks if t == b"IDAT"))
    assert len(raw) == h * (1 + 3 * w)
    rows = []
    for y in range(h):
        line = raw[y * (1 + 3 * w):(y + 1) * (1 + 3 * w)]
        assert line[0] == 0, "only filter type 0 expected"
        rows.append(np.frombuffer(line[1:], dtype=np.uint8).reshape(w, 3))
    return np.stack(rows)


def test_png_round_trip_exact_pixels():
    img = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255]],
                    [[1, 2, 3], [250, 251, 252], [0, 0, 0]]], dtype=np.uint8)
    out = read_png(encode_png(img))
    assert out.shape == (2, 3, 3)
    assert out.tolist() == img.tolist()


def test_bresenham_one_pixel_per_column_at_rounded_y():
    c = Canvas(8, 4)
    c.line(0, 0, 6, 2, (0, 0, 0))
    drawn = {(int(x), int(y)) for y, x in zip(*np.nonzero(c.pixels[:, :, 0] == 0))}
    # y = x/3 rounded to nearest: the ideal line's pixels
    assert drawn == {(0, 0), (1, 0), (2, 1), (3, 1), (4, 1), (5, 2), (6, 2)}
    c2 = Canvas(8, 8)
    c2.line(6, 2, 0, 0, (0, 0, 0))  # same pixels drawn backwards
    assert {(int(x), int(y)) for y, x in zip(*np.nonzero(c2.pixels[:, :, 0] == 0))} == drawn


def test_font_draws_the_glyph_bitmap():
    c = Canvas(14, 9)
    c.text(1, 1, "1.", color=(0, 0, 0))
    ink = (c.pixels[:, :, 0] == 0).astype(int)
    expected_one = ["..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."]
    expected_dot = [".....", ".....", ".....", ".....", ".....", ".##..", ".##.."]
    for r in range(7):
        assert "".join(".#"[v] for v in ink[1 + r, 1:6]) == expected_one[r]
        assert "".join(".#"[v] for v in ink[1 + r, 7:12]) == expected_dot[r]
    assert ink[0].sum() == 0 and ink[8].sum() == 0 and ink[:, 6].sum() == 0
    with pytest.raises(ValueError, match="no glyph for 'Q'"):
        c.text(0, 0, "Q")


def test_nice_ticks():
    assert nice_ticks(0.13, 0.87, 5) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(12, 103, 6) == [0, 20, 40, 60, 80, 100, 120]
    assert nice_ticks(0, 3, 8, integer=True) == [0, 1, 2, 3]
    assert nice_ticks(5, 5, 5) == [4.4, 4.6, 4.8, 5.0, 5.2, 5.4, 5.6]  # padded to [4.5, 5.5]
    assert png_plot.format_tick(0.4, [0.0, 0.2]) == "0.4"
    assert png_plot.format_tick(40.0, [0, 20]) == "40"


def _write_epochs(d, train, cv, minutes):
    for n, (t, c, m) in enumerate(zip(train, cv, minutes)):
        info = {"epoch": n, "step": 10 * (n + 1), "lr": 0.001, "cv_loss": c,
                "save_time": f"2024-05-01 10:{m:02d}:00"}
        if t is not None:
            info["train_loss"] = t
        (d / f"{n}.yaml").write_text(yaml.safe_dump(info))


def test_plot_losses_draws_both_curves_where_the_data_says(tmp_path):
    plot_main = _tool_main("plot_losses")
    train, cv = [10.0, 6.0, 4.0, 3.0], [13.0, 11.0, 10.0, 9.5]
    _write_epochs(tmp_path, train, cv, [1, 2, 3, 4])
    (tmp_path / "step_5.yaml").write_text("junk: 1\n")  # not an epoch file: ignored
    plot_main(["--exp_dir", str(tmp_path), "--out", str(tmp_path / "loss.png")])
    img = read_png((tmp_path / "loss.png").read_bytes())
    assert img.shape == (400, 640, 3)
    ref, axes = line_plot([Series("train", [0, 1, 2, 3], train), Series("cv", [0, 1, 2, 3], cv)])
    assert np.array_equal(img, ref)
    assert axes.y_ticks == [2, 4, 6, 8, 10, 12, 14] and axes.x_ticks == [0, 1, 2, 3]
    # the mapping itself: y up, ticks 2..14 span the area's rows, epochs inside its columns
    assert axes.to_pixel(0, 10.0)[1] == axes.top + round(4 / 12 * (axes.height - 1))
    assert axes.to_pixel(0, 14.0)[1] == axes.top
    assert axes.left < axes.to_pixel(0, 3)[0] < axes.to_pixel(3, 3)[0] < axes.left + axes.width - 1
    blue, orange = png_plot.PALETTE[0], png_plot.PALETTE[1]
    for color, ys in ((blue, train), (orange, cv)):
        for x, y in enumerate(ys):
            col, row = axes.to_pixel(x, y)
            assert tuple(img[row, col]) == color, (x, y)
        # the segment between epochs 1 and 2 passes through the interpolated row (±2 px)
        for col in range(axes.to_pixel(1, 0)[0] + 3, axes.to_pixel(2, 0)[0] - 3):
            x = (col - axes.to_pixel(0, 0)[0]) / (axes.to_pixel(1, 0)[0] - axes.to_pixel(0, 0)[0])
            row = axes.to_pixel(x, ys[1] + (ys[2] - ys[1]) * (x - 1))[1]
            assert any(tuple(img[r, col]) == color for r in range(row - 2, row + 3)), col
    # the lowest y tick (2) is on the bottom edge of the plot area, the frame is black there
    col, row = axes.to_pixel(1.5, 2)
    assert row == axes.top + axes.height - 1 and tuple(img[row, col]) == (0, 0, 0)


def test_plot_losses_without_train_loss_draws_cv_only(tmp_path):
    plot_main = _tool_main("plot_losses")
    _write_epochs(tmp_path, [None, None], [5.0, 4.0], [1, 2])
    plot_main(["--exp_dir", str(tmp_path)])
    img = read_png((tmp_path / "loss.png").read_bytes())
    blue = np.all(img == png_plot.PALETTE[0], axis=-1).sum()
    orange = np.all(img == png_plot.PALETTE[1], axis=-1).sum()
    assert blue > 50 and orange == 0  # "cv" is the only series, so it takes the first colour


TINY = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 32,
                     "num_blocks": 1, "cnn_module_kernel": 3, "dropout_rate": 0.0},
    "decoder": "transformer",
    "decoder_conf": {"attention_heads": 2, "linear_units": 32, "num_blocks": 1, "dropout_rate": 0.0},
    "model_conf": {"ctc_weight": 0.3},
    "dataset_conf": {"fbank_conf": {"num_mel_bins": 20, "frame_shift": 10, "frame_length": 25,
                                    "dither": 0.0}, "batch_conf": {"batch_size": 2}},
    "input_dim": 20, "output_dim": 8, "cmvn_file": None,
}
MODES = ["ctc_greedy_search", "attention_rescoring"]


@pytest.fixture()
def exp(tmp_path):
    from wenet.models import init_model
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(TINY))
    torch.manual_seed(0)
    model = init_model(TINY)
    torch.save(model.state_dict(), tmp_path / "avg_2.pt")
    _write_epochs(tmp_path, [9.0, 7.5, 6.0], [8.0, 6.25, 6.5], [10, 25, 40])
    wer = {"ctc_greedy_search": "Overall -> 25.00 % N=40 C=32 S=5 D=3 I=2\n",
           "attention_rescoring": "Overall -> 12.50 % N=40 C=36 S=3 D=1 I=1\n"}
    for mode in MODES:
        (tmp_path / "test" / mode).mkdir(parents=True)
        (tmp_path / "test" / mode / "wer").write_text(
            "utt: u1\nWER: 0.00 % N=2 C=2 S=0 D=0 I=0\nlab: a b\nrec: a b\n\n" + wer[mode])
    (tmp_path / "test" / "ctc_greedy_search" / "rtf").write_text(
        json.dumps({"mode": "ctc_greedy_search", "rtf": 0.01234}) + "\n")
    (tmp_path / "test" / "attention_rescoring" / "rtf").write_text("rtf 0.2\n")
    return tmp_path, sum(p.numel() for p in model.parameters())


def test_summarize_results_writes_exact_report(exp, capsys):
    summarize_main = _tool_main("summarize_results")
    d, params = exp
    summarize_main(["--exp_dir", str(d), "--test_set", "test", "--modes", " ".join(MODES),
                    "--config_name", "conf/tiny.yaml", "--checkpoint", str(d / "avg_2.pt")])
    table = ("| mode | WER % | N | S | D | I | RTF |\n"
             "|---|---:|---:|---:|---:|---:|---:|\n"
             "| ctc_greedy_search | 25.00 | 40 | 5 | 3 | 2 | 0.0123 |\n"
             "| attention_rescoring | 12.50 | 40 | 3 | 1 | 1 | 0.2000 |\n")
    assert capsys.readouterr().out == "### test\n\n" + table
    md = (d / "RESULTS.md").read_text()
    assert md.startswith(f"# Results: {d.name}\n\n## Model\n\n- config: `conf/tiny.yaml`\n"
                         f"- parameters: {params:,} ({params / 1e6:.2f} M) (checkpoint `{d / 'avg_2.pt'}`)\n"
                         "- epochs trained: 3 (last epoch 2; best cv_loss 6.2500 at epoch 1)\n"
                         "- training wall time: 0:30:00 from the end of the first to the end of the "
                         "last epoch (2 epochs, 0:15:00 each;")
    assert "### test\n\n" + table in md
    assert md.endswith("## Loss per epoch\n\n![loss](loss.png)\n")


def test_summarize_results_missing_wer_names_the_file(exp):
    summarize_main = _tool_main("summarize_results")
    d, _ = exp
    with pytest.raises(SystemExit, match=r"mode 'attention'.*test/attention/wer does not exist"):
        summarize_main(["--exp_dir", str(d), "--test_set", "test",
                        "--modes", "ctc_greedy_search attention"])
    assert not (d / "RESULTS.md").exists()


def test_recognize_writes_per_mode_rtf(exp):
    from wenet.bin.recognize import main as recognize_main
    d, _ = exp
    rng = np.random.default_rng(0)
    lines, samples = [], [9600, 4800, 7200]
    for i, n in enumerate(samples):
        sf.write(d / f"u{i}.wav", (0.1 * rng.standard_normal(n)).astype(np.float32), 16000)
        lines.append(json.dumps({"key": f"u{i}", "wav": str(d / f"u{i}.wav"), "txt": "a"}))
    (d / "data.list").write_text("\n".join(lines) + "\n")
    (d / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(
        ["<blank>", "<unk>", "\u2581", "a", "b", "c", "\u2581d", "<sos/eos>"])))
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(d / "data.list"),
                    "--checkpoint", str(d / "avg_2.pt"), "--dict", str(d / "units.txt"),
                    "--batch_size", "2", "--beam_size", "2", "--modes", " ".join(MODES),
                    "--result_dir", str(d / "dec")])
    # Kaldi framing: 1 + (samples - 400) // 160 frames of 10 ms
    audio_s = sum(1 + (n - 400) // 160 for n in samples) * 0.01
    recs = [json.loads((d / "dec" / m / "rtf").read_text()) for m in MODES]
    for mode, rec in zip(MODES, recs):
        assert rec["mode"] == mode and rec["utterances"] == 3
        assert rec["audio_s"] == pytest.approx(audio_s, abs=1e-6)
        assert rec["encoder_s"] > 0 and rec["search_s"] > 0
        # rtf comes from the unrounded times; encoder_s and search_s are stored rounded to
        # the microsecond, so their sum may differ from rtf x audio by up to 2 x 0.5 us
        assert abs(rec["rtf"] * audio_s - (rec["encoder_s"] + rec["search_s"])) <= 1e-6 + 1e-12
        assert len((d / "dec" / mode / "text").read_text().splitlines()) == 3
    assert recs[0]["encoder_s"] == recs[1]["encoder_s"]  # one encoder pass, counted in each mode


class _ConstantLoss(torch.nn.Module):
    """Loss = mean of the batch's features, whatever the weights (so it is known in advance)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, feats, feats_lengths, target, target_lengths):
        return {"loss": feats.mean() + 0.0 * self.w.sum(), "loss_ctc": None, "loss_att": None}


class _ListSet:
    def set_epoch(self, epoch):
        pass

    def consume(self, loader):
        return loader

    def state_dict(self):
        return {}


def test_epoch_yaml_records_mean_train_loss_per_utterance(tmp_path):
    from wenet.train.executor import Executor
    from wenet.train.scheduler import WarmupLR
    from wenet.train.setup import DistInfo, TrainConf
    batches = []
    for b, value in zip((1, 2, 3), (4.0, 1.0, 2.0)):
        batches.append({"keys": [f"k{i}" for i in range(b)], "feats": torch.full((b, 5, 4), value),
                        "feats_lengths": torch.full((b,), 5), "target": torch.zeros(b, 1, dtype=torch.long),
                        "target_lengths": torch.ones(b, dtype=torch.long)})
    model = _ConstantLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ex = Executor(model, opt, WarmupLR(opt, 2), TrainConf(max_epoch=2, accum_grad=1, log_interval=100),
                  torch.device("cpu"), DistInfo(), str(tmp_path), train_set=_ListSet())
    ex.fit(lambda epoch: batches, lambda: batches[:1])
    for n in (0, 1):
        info = yaml.safe_load((tmp_path / f"{n}.yaml").read_text())
        # per utterance: (1*4 + 2*1 + 3*2) / 6 = 2; not the per-batch mean (7/3)
        assert info["train_loss"] == pytest.approx(2.0) and info["cv_loss"] == pytest.approx(4.0)

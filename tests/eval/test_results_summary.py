"""Results reporting: RESULTS.md, per-mode RTF files from recognize.py and train_loss in the
epoch yaml (the loss plot: test_plot.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from tests.common import load_tool
from tests.eval.epochs import write_epochs


def _tool_main(name: str):
    """``main`` of tools/<name>.py."""
    return load_tool(name).main


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
    write_epochs(tmp_path, [9.0, 7.5, 6.0], [8.0, 6.25, 6.5], [10, 25, 40])
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

"""wenet/bin/export_onnx.py as docs/export.md runs it, and its errors on
bad input (each names the file or dir at fault)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tests.common import REPO
from tests.device.families import FAMILIES
from tests.tiny_experiment import write_experiment
from wenet.bin import export_onnx

ort = pytest.importorskip("onnxruntime")


def _readme_export_commands():
    """The export_onnx.py commands of docs/export.md, section "ONNX"."""
    text = open(os.path.join(REPO, "docs", "export.md"), encoding="utf-8").read()
    section = text.split("## ONNX\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    commands = [c for c in block.replace("\\\n", " ").splitlines()
                if c.startswith("python wenet/bin/export_onnx.py")]
    assert len(commands) == 2, commands
    return commands


def test_readme_commands_write_the_model_dir(tmp_path: Path):
    """Both forms of docs/export.md, run as written (with $dir the main job's dir, so both write
    the same output dir), write an encoder equal to eager: --model_dir finds avg_*.pt
    itself; the second export, without --int8, removes the first one's int8 files."""
    exp = tmp_path / "exp" / "synth_train_zipformer"
    model = write_experiment(exp, FAMILIES["zipformer"], checkpoint="avg_2.pt").eval()
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    feats = torch.randn(2, 60, 20)
    lens = torch.tensor([60, 45])
    with torch.no_grad():
        want, mask = model.encoder(feats, lens, -1, -1)
    graphs = {"encoder.onnx", "ctc.onnx", "decoder.onnx"}
    int8 = {name.replace(".onnx", ".int8.onnx") for name in graphs}
    for command, files in zip(_readme_export_commands(),
                              (graphs | int8 | {"units.txt"}, graphs | {"units.txt"})):
        argv = shlex.split(command.replace("$dir", str(exp)))  # as the shell expands it
        argv[0:2] = [sys.executable, os.path.join(REPO, argv[1])]
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        out = Path(tmp_path, argv[argv.index("--output_dir") + 1])
        assert out == exp / "onnx"
        assert "no encoder_chunk.onnx" in r.stderr  # a non-causal Zipformer: said, not written
        assert {p.name for p in out.iterdir()} == files
        if "--int8" not in argv:
            assert r.stderr.count("left by an earlier export") == len(int8)
        got, got_lens = ort.InferenceSession(str(out / "encoder.onnx")).run(
            None, {"feats": feats.numpy(), "feats_lens": lens.numpy()})
        assert got_lens.tolist() == mask.squeeze(1).sum(1).tolist()
        for row, n in enumerate(got_lens):
            np.testing.assert_allclose(got[row, :n], want[row, :n].numpy(), rtol=0, atol=2e-5)


def test_bad_input_is_an_error_naming_the_file(tmp_path: Path):
    exp = tmp_path / "exp"
    write_experiment(exp, FAMILIES["transformer"], checkpoint="avg_1.pt")
    out = str(tmp_path / "onnx")
    with pytest.raises(FileNotFoundError, match=re.escape(f"checkpoint {exp}/nope.pt does not")):
        export_onnx.main(["--model_dir", str(exp), "--checkpoint", str(exp / "nope.pt"),
                          "--output_dir", out])
    (exp / "avg_1.pt").rename(exp / "final.zip")  # only TorchScript: nothing to trace
    with pytest.raises(ValueError, match=re.escape(f"{exp}/final.zip: a TorchScript model")):
        export_onnx.main(["--model_dir", str(exp), "--checkpoint", str(exp / "final.zip"),
                          "--output_dir", out])
    with pytest.raises(FileNotFoundError, match=re.escape(f"{exp}: only final.zip, no checkpoint")):
        export_onnx.main(["--model_dir", str(exp), "--output_dir", out])
    (exp / "final.zip").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(f"{exp}: no checkpoint")):
        export_onnx.main(["--model_dir", str(exp), "--output_dir", out])
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'missing'} does not exist")):
        export_onnx.main(["--model_dir", str(tmp_path / "missing"), "--output_dir", out])

    bad = tmp_path / "bad"
    write_experiment(bad, FAMILIES["transformer"], checkpoint="avg_1.pt")
    config = yaml.safe_load((bad / "train.yaml").read_text())
    config["encoder"] = "mamba"
    (bad / "train.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match=re.escape(
            f"{bad / 'train.yaml'}: encoder must be one of ['conformer', 'transformer', "
            "'zipformer'], got 'mamba'")):
        export_onnx.main(["--model_dir", str(bad), "--output_dir", out])
    (bad / "units.txt").unlink()
    config["encoder"] = "transformer"
    (bad / "train.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(FileNotFoundError, match=re.escape(f"{bad}: no units.txt")):
        export_onnx.main(["--model_dir", str(bad), "--output_dir", out])
    with pytest.raises(SystemExit):  # argparse: --config needs --checkpoint
        export_onnx.main(["--config", str(bad / "train.yaml"), "--output_dir", out])
    assert not os.path.exists(out)  # nothing was written by any of these

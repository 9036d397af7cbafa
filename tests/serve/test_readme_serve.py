"""docs/server.md's "Serve a model" commands run as written on a dir laid out like the U2++
run's (exp/synth_train_u2++_conformer with train.yaml, units.txt, avg_2.pt and final.zip;
corpus/synth/wav/test audio; data/test/wav.scp), with a tiny random streaming model. Only
the load benchmark is shortened (--clients 2 --utts_per_client 1 instead of its
default 1 4 16 clients of 2 utterances)."""
import os
import re
import subprocess
import sys

import soundfile as sf

from tests.common import REPO
from tests.serve.conftest import synth_audio, write_model_dir

EXP = "exp/synth_train_u2++_conformer"


def readme_block():
    text = open(os.path.join(REPO, "docs", "server.md"), encoding="utf-8").read()
    section = text.split("## Serve a model\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_readme_serve_commands_run_as_written(tmp_path):
    for name in ("wenet", "tools", "bench"):
        os.symlink(os.path.join(REPO, name), tmp_path / name)
    write_model_dir(tmp_path / EXP)
    # a run's dir has its averaged checkpoint, which export_onnx.py --model_dir exports
    (tmp_path / EXP / "avg_2.pt").write_bytes((tmp_path / EXP / "model.pt").read_bytes())
    (tmp_path / "corpus/synth/wav/test").mkdir(parents=True)
    (tmp_path / "data/test").mkdir(parents=True)
    lines = []
    for i, secs in enumerate([1.2, 1.6, 1.0]):
        path = tmp_path / f"corpus/synth/wav/test/synth-test{i:05d}.wav"
        sf.write(path, synth_audio(secs, i), 16000, subtype="PCM_16")
        lines.append(f"synth-test{i:05d} {path}\n")
    (tmp_path / "data/test/wav.scp").write_text("".join(lines))
    (tmp_path / "data/test/text").write_text("".join(f"synth-test{i:05d} b e f\n"
                                                     for i in range(3)))
    body = readme_block()
    assert "--wav_scp data/test/wav.scp --chunk_size 8" in body
    body = body.replace("--wav_scp data/test/wav.scp --chunk_size 8",
                        "--wav_scp data/test/wav.scp --chunk_size 8 --clients 2 "
                        "--utts_per_client 1")
    env = {**os.environ, "PYTHONPATH": REPO,
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert '"status": "ok"' in out  # the health check
    for i in range(3):  # ws_client's "file text" lines
        assert re.search(rf"^corpus/synth/wav/test/synth-test{i:05d}\.wav ", out, re.M)
    assert '"type": "final_result"' in out  # --json
    server_text = (tmp_path / EXP / "test_server.txt").read_text().splitlines()
    assert [line.split()[0] for line in server_text] == [f"synth-test{i:05d}" for i in range(3)]
    assert "Overall -> " in out  # compute-wer.py
    assert re.search(r"^\| 2 \| [0-9.]+ / [0-9.]+ \|", out, re.M)  # the bench table
    # the ONNX server: a line per utterance, its keys in the wav.scp's order
    onnx_text = (tmp_path / EXP / "test_server_onnx.txt").read_text().splitlines()
    assert [line.split()[0] for line in onnx_text] == [f"synth-test{i:05d}" for i in range(3)]
    assert (tmp_path / EXP / "onnx" / "encoder_chunk.onnx").is_file()

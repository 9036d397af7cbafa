"""tools/gpu_check.sh on the CPU: --make_bundle from a tiny recipe dir (a few synthetic
utterances, a character BPE model), then the dry run (--device cpu, one epoch, shrunk
configs) through every step, and its table checked against references: WER per mode
against tools/compute-wer.py on the hypotheses it wrote, the epoch's audio seconds
against the fbank frame count of the training audio, epochs and audio s/s against the
train log."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import soundfile as sf

from tests import common as T

WORDS = ["abc", "bad", "cab", "dab", "ace", "bee", "dad", "fed"]
SETS = {"train": 6, "dev": 3, "test": 3}
MAIN_MODES = ["attention", "attention_rescoring", "ctc_greedy_search", "ctc_prefix_beam_search"]
SMALL_MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "rnnt_beam_search", "rnnt_greedy_search"]


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["LC_ALL"] = "C"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _run(args: List[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=timeout)


def make_recipe(root: Path) -> Path:
    """data/<set> Kaldi dirs (tones over noise, 0.6-1.2 s, 16 kHz WAV), a character BPE
    model and its units (stage 2's tools), a global_cmvn: what stages 0-3 leave."""
    rng = np.random.default_rng(3)
    lines: List[str] = []
    for name, n in SETS.items():
        d = root / "data" / name
        (d / "wav").mkdir(parents=True)
        scp, text, u2s = [], [], []
        for i in range(n):
            utt = f"spk{i % 2}-{name}{i:02d}"
            t = np.arange(int(rng.uniform(0.6, 1.2) * 16000)) / 16000
            wav = 0.2 * np.sin(2 * np.pi * rng.uniform(200, 900) * t) + 0.02 * rng.standard_normal(t.size)
            sf.write(d / "wav" / f"{utt}.wav", wav.astype(np.float32), 16000, subtype="PCM_16")
            words = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 4)))).upper()
            scp.append(f"{utt} {d / 'wav' / f'{utt}.wav'}\n")
            text.append(f"{utt} {words}\n")
            u2s.append(f"{utt} spk{i % 2}\n")
            lines.append(words + "\n")
        (d / "wav.scp").write_text("".join(sorted(scp)))
        (d / "text").write_text("".join(sorted(text)))
        (d / "utt2spk").write_text("".join(sorted(u2s)))
        (d / "spk2utt").write_text("".join(f"spk{s} " + " ".join(sorted(
            u.split()[0] for u in u2s if u.split()[1] == f"spk{s}")) + "\n" for s in (0, 1)))
    lang = root / "data" / "lang_char"
    lang.mkdir()
    (lang / "input.txt").write_text("".join(lines))
    for cmd in ([os.path.join(T.TOOLS_DIR, "spm_train"), f"--input={lang / 'input.txt'}",
                 "--vocab_size=9", "--model_type=char", f"--model_prefix={lang / 'train_char9'}"],
                [os.path.join(T.TOOLS_DIR, "make_units.sh"), str(lang / "train_char9.model"),
                 str(lang / "input.txt"), str(lang / "train_char9_units.txt")]):
        r = _run(cmd)
        assert r.returncode == 0, r.stderr
    cmvn = root / "raw_wav" / "train" / "global_cmvn"
    cmvn.parent.mkdir(parents=True)
    cmvn.write_text(json.dumps({"mean_stat": [1000.0] * 80, "var_stat": [12000.0] * 80,
                                "frame_num": 100}) + "\n")
    return root


def frames(samples: int) -> int:
    """Kaldi fbank frames of 25 ms every 10 ms at 16 kHz (snip_edges)."""
    return 1 + (samples - 400) // 160


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    recipe = make_recipe(tmp_path_factory.mktemp("recipe"))
    out = tmp_path_factory.mktemp("b") / "bundle"
    r = _run(["bash", os.path.join(T.TOOLS_DIR, "gpu_check.sh"), "--make_bundle", str(out),
              "--recipe", str(recipe), "--python", sys.executable, "--nj", "1"])
    assert r.returncode == 0, r.stderr
    return out


def test_bundle_holds_the_recipe_with_opus_audio(bundle):
    recipe = Path(json.loads((bundle / "manifest.json").read_text())["source"])
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["codec"] == "opus"
    for name, n in SETS.items():
        for f in ("text", "utt2spk", "spk2utt"):
            assert (bundle / "data" / name / f).read_bytes() == (recipe / "data" / name / f).read_bytes()
        src = dict(line.split() for line in (recipe / "data" / name / "wav.scp").read_text().splitlines())
        dst = dict(line.split() for line in (bundle / "data" / name / "wav.scp").read_text().splitlines())
        assert sorted(dst) == sorted(src) and len(dst) == n
        total = 0.0
        for utt, rel in dst.items():
            assert rel == f"audio/{name}/{utt}.opus"  # relative to the bundle
            info, orig = sf.info(str(bundle / rel)), sf.info(src[utt])
            assert (info.format, info.subtype, info.samplerate) == ("OGG", "OPUS", 16000)
            assert info.frames == orig.frames  # same length: the features keep their frame count
            coded, _ = sf.read(str(bundle / rel))
            clean, _ = sf.read(src[utt])
            # a lossy copy of the same signal: the error is well below the signal
            assert np.sqrt(np.mean((coded - clean) ** 2)) < 0.3 * np.sqrt(np.mean(clean ** 2))
            total += orig.frames / 16000
        assert manifest["sets"][name] == {"utts": n, "audio_s": pytest.approx(total, abs=0.01)}
    assert (bundle / "lang" / "units.txt").read_bytes() == \
        (recipe / "data" / "lang_char" / "train_char9_units.txt").read_bytes()
    assert (bundle / "lang" / "bpe.model").read_bytes() == \
        (recipe / "data" / "lang_char" / "train_char9.model").read_bytes()
    assert (bundle / "global_cmvn").read_bytes() == \
        (recipe / "raw_wav" / "train" / "global_cmvn").read_bytes()


def test_dry_run_table_matches_references(bundle, tmp_path):
    work = tmp_path / "work"
    max_utts = 4
    r = _run(["bash", os.path.join(T.TOOLS_DIR, "gpu_check.sh"), "--bundle", str(bundle),
              "--device", "cpu", "--epochs", "1", "--max_utts", str(max_utts), "--tiny", "true",
              "--python", sys.executable, "--nj", "1", "--work", str(work)], timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table = (work / "table.md").read_text()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| run |") and not line.startswith("| step |")]
    train_rows = {r[0]: r for r in rows if len(r) == 9}
    wer_rows = {(r[0], r[1]): r for r in rows if len(r) == 5}
    step_rows = {r[0]: r for r in rows if len(r) == 4}
    # every step ran and ended well (the table's own step is not in the table)
    assert list(step_rows) == ["probe", "lists", "train_main_bf16", "average_main", "decode_main",
                               "export_main", "train_main_fp16", "train_small_bf16",
                               "average_small", "decode_small", "total"]
    assert all(row[3] == "ok" for name, row in step_rows.items() if name != "total"), step_rows
    assert (work / "exp" / "main_bf16" / "final.zip").is_file()
    # training: one epoch of the first max_utts train utterances; audio = their fbank frames
    wavs = [line.split()[1] for line in (work / "data" / "train" / "wav.scp").read_text().splitlines()]
    audio = sum(frames(sf.info(w).frames) for w in wavs) / 100
    assert len(wavs) == max_utts
    for run, precision in (("main_bf16", "bf16"), ("main_fp16", "fp16"), ("small_bf16", "bf16")):
        row = train_rows[run]
        assert row[2] == precision and row[3] == "1" and row[7] == "-"  # no CUDA memory on CPU
        log = (work / "exp" / run / "train.0.log").read_text()
        m = re.search(r"throughput: ([\d.]+) s of audio in ([\d.]+) s, ([\d.]+) audio s/s", log)
        assert float(m.group(1)) == pytest.approx(audio, abs=0.051)
        assert float(row[4]) == pytest.approx(float(m.group(1)) / float(m.group(2)), abs=0.051)
        assert row[5] == m.group(3)
    # decoding: every mode, its WER as compute-wer.py scores the hypotheses against the text
    ref = work / "data" / "test" / "text"
    assert len(ref.read_text().splitlines()) == min(max_utts, SETS["test"])
    for run, modes in (("main_bf16", MAIN_MODES), ("small_bf16", SMALL_MODES)):
        assert sorted(m for (r, m) in wer_rows if r == run) == modes
        for mode in modes:
            hyp = work / "exp" / run / "test" / mode / "text"
            assert len(hyp.read_text().splitlines()) == len(ref.read_text().splitlines())
            out = _run([sys.executable, os.path.join(T.TOOLS_DIR, "compute-wer.py"), "--char=0",
                        str(ref), str(hyp)]).stdout
            wer = re.search(r"^Overall -> ([\d.]+) %", out, re.M).group(1)
            assert float(wer_rows[(run, mode)][2]) == float(wer)


def test_steps_end_at_the_budget_and_leave_no_process(bundle, tmp_path):
    """A step that overruns: the running step is killed at its limit (with the processes it
    started), the later ones are skipped, the table is still written, and the check fails.
    The overrun is made, not hoped for: the --python given is a wrapper under which
    train.py sleeps (its command line still naming the work dir, so a survivor would be
    seen), so the outcome does not depend on how fast this machine runs the steps."""
    work = tmp_path / "work"
    budget = 25  # probe + lists take ~8 s (AMD EPYC); the stalled training gets the rest
    stall = tmp_path / "stalling_python"
    stall.write_text("#!/bin/bash\n"
                     'case " $* " in *wenet/bin/train.py*)\n'
                     f'  exec "{sys.executable}" -c "import time; time.sleep(600)" "$@" ;;\n'
                     "esac\n"
                     f'exec "{sys.executable}" "$@"\n')
    stall.chmod(0o755)
    r = _run(["bash", os.path.join(T.TOOLS_DIR, "gpu_check.sh"), "--bundle", str(bundle),
              "--device", "cpu", "--epochs", "1", "--max_utts", "4", "--tiny", "true",
              "--python", str(stall), "--nj", "1", "--work", str(work),
              "--budget", str(budget)], timeout=150)
    assert r.returncode == 1
    steps = [line.split("\t") for line in (work / "steps.tsv").read_text().splitlines()]
    names = [s[0] for s in steps]
    statuses = [s[3] for s in steps[:-1]]
    assert names[:3] == ["probe", "lists", "train_main_bf16"], (names, statuses)
    assert statuses[:3] == ["ok", "ok", "timeout"], statuses
    # the stalled step ran to its limit (what was left of the budget), not beyond timeout's
    # 5 s grace; a timed-out step stops what needs it, the rest finds no time left
    assert float(steps[2][2]) == pytest.approx(float(steps[2][1]), abs=5.5)
    assert all(st.startswith("skipped") for st in statuses[3:]), statuses
    assert names[3:-1] == ["average_main", "train_main_fp16", "train_small_bf16", "average_small"]
    assert steps[-1][0] == "table" and steps[-1][3] == "ok"
    assert sum(float(s[2]) for s in steps[:-1]) <= budget + 5 + 1
    assert "| step | limit s | wall s | status |" in (work / "table.md").read_text()
    left = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout
    assert left == "", f"processes of the check still running: {left}"


def _wheel(folder: Path, dist: str, version: str) -> Path:
    """A minimal pure-python wheel of one module ``<dist>_mod`` (the files pip needs)."""
    import zipfile
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    files = {f"{dist}_mod.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
             f"{info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                               "Tag: py3-none-any\n")}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_wheels_install_only_what_is_missing(tmp_path):
    """--wheels: a wheel of a distribution this python lacks is installed into the target
    (and imports from it); one of an installed distribution (tqdm here) is left alone."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "gpucheckdummy", "1.2")
    _wheel(wheels, "tqdm", "0.0.1")
    target = tmp_path / "pylib"
    probe = os.path.join(T.TOOLS_DIR, "gpu_check_probe.py")
    r = _run([sys.executable, probe, "--install_from", str(wheels), "--target", str(target)])
    assert r.returncode == 0, r.stderr
    assert "gpucheckdummy-1.2-py3-none-any.whl" in r.stdout and "tqdm" not in r.stdout
    assert sorted(p.name for p in target.iterdir() if not p.name.startswith("__")) == \
        ["gpucheckdummy-1.2.dist-info", "gpucheckdummy_mod.py"]
    env = dict(_env(), PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", "import gpucheckdummy_mod as m, tqdm; "
                          "print(m.VERSION, tqdm.__version__ != '0.0.1')"],
                         capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["1.2", "True"], out.stderr
    # a second run finds it installed in the target and installs nothing
    r = _run([sys.executable, probe, "--install_from", str(wheels), "--target", str(target)])
    assert "nothing (all present)" in r.stdout

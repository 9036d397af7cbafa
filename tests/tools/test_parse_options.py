"""tools/parse_options.sh and run.sh's use of it, driven through small bash scripts."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.common import ROOT_PATH

ROOT = ROOT_PATH
PARSER = ROOT / "tools" / "parse_options.sh"

SCRIPT = f"""#!/usr/bin/env bash
set -euo pipefail
some_name=default
nj=4
use_gpu=false
help_message="Usage: demo [--some-name X] [--nj N] [--use-gpu true|false] args"
. "{PARSER}"
echo "some_name=$some_name"
echo "nj=$nj"
echo "use_gpu=$use_gpu"
echo "args=$*"
"""


@pytest.fixture()
def demo(tmp_path: Path) -> Path:
    script = tmp_path / "demo.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    return script


def _run(cmd, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)


def _vars(stdout: str) -> dict:
    return dict(line.split("=", 1) for line in stdout.splitlines())


def test_dash_and_underscore_spellings_set_the_variable(demo: Path):
    for spelling in ("--some-name", "--some_name"):
        r = _run([demo, spelling, "x y", "--nj", "7"])
        assert r.returncode == 0, r.stderr
        assert _vars(r.stdout) == {"some_name": "x y", "nj": "7", "use_gpu": "false", "args": ""}


def test_positional_arguments_remain(demo: Path):
    r = _run([demo, "--nj", "2", "a", "--not-an-option-anymore", "b"])
    assert r.returncode == 0, r.stderr
    assert _vars(r.stdout)["args"] == "a --not-an-option-anymore b"
    assert _vars(r.stdout)["nj"] == "2"


def test_unknown_option_fails_naming_it_and_printing_usage(demo: Path):
    r = _run([demo, "--bogus-thing", "1"])
    assert r.returncode == 1
    assert "unknown option --bogus-thing" in r.stderr
    assert "Usage: demo [--some-name X]" in r.stderr
    assert r.stdout == ""


def test_help_prints_help_message_and_exits_zero(demo: Path):
    r = _run([demo, "--help"])
    assert r.returncode == 0
    assert r.stdout.strip() == "Usage: demo [--some-name X] [--nj N] [--use-gpu true|false] args"


def test_config_file_gives_defaults_and_explicit_options_win(demo: Path, tmp_path: Path):
    conf = tmp_path / "opts.conf"
    conf.write_text("nj=9\nsome_name=from_config\n")
    # --config after the explicit option: the explicit value still wins.
    r = _run([demo, "--nj", "3", "--config", conf, "pos"])
    assert r.returncode == 0, r.stderr
    assert _vars(r.stdout) == {"some_name": "from_config", "nj": "3", "use_gpu": "false", "args": "pos"}
    r = _run([demo, "--config", tmp_path / "missing.conf"])
    assert r.returncode == 1
    assert "missing.conf" in r.stderr


def test_boolean_variables_take_only_true_or_false(demo: Path):
    r = _run([demo, "--use-gpu", "true"])
    assert r.returncode == 0 and _vars(r.stdout)["use_gpu"] == "true"
    r = _run([demo, "--use-gpu", "yes"])
    assert r.returncode == 1
    assert "--use-gpu takes true or false, not 'yes'" in r.stderr


def test_option_without_value_fails(demo: Path):
    r = _run([demo, "--nj"])
    assert r.returncode == 1
    assert "--nj needs a value" in r.stderr


def test_run_sh_rejects_a_misspelt_option():
    r = _run(["./run.sh", "--stop_stag", "3"], cwd=ROOT)
    assert r.returncode == 1
    assert "unknown option --stop_stag" in r.stderr
    assert "Usage:" in r.stderr
    assert "====" not in r.stdout  # no stage started


def test_run_sh_help_exits_zero_with_usage():
    r = _run(["./run.sh", "--help"], cwd=ROOT)
    assert r.returncode == 0
    assert r.stdout.startswith("Usage: ./run.sh [options]")
    assert "--stage N / --stop_stage M" in r.stdout

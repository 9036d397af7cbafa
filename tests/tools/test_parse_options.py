"""tools/parse_options.sh and run.sh's use of it, driven through small bash scripts."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.common import ROOT_PATH, recipe_copy

ROOT = ROOT_PATH
PARSER = ROOT / "tools" / "parse_options.sh"

SCRIPT = f"""#!/usr/bin/env bash
set -euo pipefail
some_name=default
nj=4
use_gpu=false
help_message="Usage: demo [--some-name X] [--nj N] [--use-gpu true|false] args"
set_after_help=1
. "{PARSER}"
echo "some_name=$some_name"
echo "nj=$nj"
echo "use_gpu=$use_gpu"
echo "args=$*"
"""

# A script with typed options (option_types), printing what it got.
TYPED = f"""#!/usr/bin/env bash
set -euo pipefail
stage=0
count=1
offset=0
level=0
mode=a
name=x
flag=false
help_message="Usage: typed [options]"
option_types=(stage=0..6 count=posint offset=int level=uint mode='a|b|c' name=nonempty)
. "{PARSER}"
for v in stage count offset level mode name flag; do echo "$v=${{!v}}"; done
"""


@pytest.fixture()
def demo(tmp_path: Path) -> Path:
    script = tmp_path / "demo.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    return script


@pytest.fixture()
def typed(tmp_path: Path) -> Path:
    script = tmp_path / "typed.sh"
    script.write_text(TYPED)
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


def test_run_sh_rejects_a_misspelt_option(tmp_path: Path):
    r = _run(["./run.sh", "--stop_stag", "3"], cwd=recipe_copy(tmp_path / "recipe"))
    assert r.returncode == 1
    assert "unknown option --stop_stag" in r.stderr
    assert "Usage:" in r.stderr
    assert "====" not in r.stdout  # no stage started


def test_run_sh_help_exits_zero_with_usage(tmp_path: Path):
    r = _run(["./run.sh", "--help"], cwd=recipe_copy(tmp_path / "recipe"))
    assert r.returncode == 0
    assert r.stdout.startswith("Usage: ./run.sh [options]")
    assert "--stage N / --stop_stage M" in r.stdout


def test_name_equals_value_form_sets_the_variable(demo: Path):
    r = _run([demo, "--some-name=a=b c", "--nj=7", "--use_gpu=true", "--some_name=", "pos"])
    assert r.returncode == 0, r.stderr
    assert _vars(r.stdout) == {"some_name": "", "nj": "7", "use_gpu": "true", "args": "pos"}


@pytest.mark.parametrize("option", ["--PATH", "--HOME", "--help_message", "--set_after_help",
                                    "--_po_name", "--BASH_VERSION"])
def test_only_the_scripts_own_defaults_are_options(demo: Path, tmp_path: Path, option: str):
    """Shell and environment variables, help_message and variables set after it are no options."""
    for args in ([option, "x"], [f"{option}=x"]):
        r = _run([demo, *args])
        assert r.returncode == 1, (args, r.stdout)
        assert f"unknown option {option}" in r.stderr
        assert "Usage: demo" in r.stderr and r.stdout == ""


def test_a_config_file_is_parsed_never_run(demo: Path, tmp_path: Path):
    conf = tmp_path / "opts.conf"
    conf.write_text("# a comment\n\n  nj=9   # trailing comment\n"
                    "some_name='$(touch pwned) `touch pwned2` ;x'\n"
                    'use_gpu="true"  # quoted\n')
    r = _run([demo, "--config", conf], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _vars(r.stdout) == {"some_name": "$(touch pwned) `touch pwned2` ;x", "nj": "9",
                               "use_gpu": "true", "args": ""}
    conf.write_text('some_name="a \\" \\\\ \\$ \\n b"\n')  # as the shell reads "..."
    r = _run([demo, "--config=" + str(conf)], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _vars(r.stdout)["some_name"] == 'a " \\ $ \\n b'
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


@pytest.mark.parametrize("line, message", [
    ("nj=$(touch pwned)", "opts.conf:2: cannot read the value '$(touch pwned)'"),
    ("$(touch pwned)", "opts.conf:2: expected name=value, got: $(touch pwned)"),
    ('some_name="$(touch pwned)"', "opts.conf:2: cannot read the value '\"$(touch pwned)\"'"),
    ("some_name=`touch pwned`", "opts.conf:2: cannot read the value '`touch pwned`'"),
    ("some_name=a; touch pwned", "opts.conf:2: cannot read the value 'a; touch pwned'"),
    ("some_name=a b", "opts.conf:2: cannot read the value 'a b'"),
    ("some_name='open", "opts.conf:2: cannot read the value ''open'"),
    ("export nj=3", "opts.conf:2: expected name=value, got: export nj=3"),
    ("PATH=/tmp", "opts.conf:2: unknown option 'PATH'"),
    ("nj=x", "opts.conf:2: --nj takes a positive integer (1, 2, ...), not 'x'"),
    ("use_gpu=yes", "opts.conf:2: --use_gpu takes true or false, not 'yes'"),
])
def test_a_bad_config_line_is_refused_naming_file_and_line(tmp_path: Path, line: str, message: str):
    typed_nj = tmp_path / "demo_nj.sh"  # nj typed, to see a type error from a config line
    typed_nj.write_text(SCRIPT.replace('. "', "option_types=(nj=posint)\n. \"", 1))
    typed_nj.chmod(0o755)
    conf = tmp_path / "opts.conf"
    conf.write_text(f"nj=5\n{line}\nsome_name=never_reached\n")
    r = _run([typed_nj, "--config", "opts.conf"], cwd=tmp_path)
    assert r.returncode == 1
    assert f"demo_nj.sh: {message}" in r.stderr
    assert r.stdout == ""
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("args, message", [
    (["--stage", "abc"], "--stage takes an integer from 0 to 6, not 'abc'"),
    (["--stage", "7"], "--stage takes an integer from 0 to 6, not '7'"),
    (["--stage=-1"], "--stage takes an integer from 0 to 6, not '-1'"),
    (["--count", "0"], "--count takes a positive integer (1, 2, ...), not '0'"),
    (["--count", "1.5"], "--count takes a positive integer (1, 2, ...), not '1.5'"),
    (["--level", "-2"], "--level takes a non-negative integer (0, 1, 2, ...), not '-2'"),
    (["--offset", "x"], "--offset takes an integer, not 'x'"),
    (["--mode", "d"], "--mode takes one of a|b|c, not 'd'"),
    (["--mode", "a|b"], "--mode takes one of a|b|c, not 'a|b'"),
    (["--name", ""], "--name takes a non-empty value, not ''"),
    (["--flag", "1"], "--flag takes true or false, not '1'"),
])
def test_typed_options_refuse_bad_values_naming_the_accepted_ones(typed: Path, args, message):
    r = _run([typed, *args])
    assert r.returncode == 1
    assert r.stderr == f"{typed}: {message}\n"
    assert r.stdout == ""


def test_typed_options_take_good_values_integers_in_decimal(typed: Path):
    r = _run([typed, "--stage", "06", "--count=12", "--offset", "-007", "--level", "0",
              "--mode", "c", "--name", "y z", "--flag", "true"])
    assert r.returncode == 0, r.stderr
    assert _vars(r.stdout) == {"stage": "6", "count": "12", "offset": "-7", "level": "0",
                               "mode": "c", "name": "y z", "flag": "true"}


def test_option_types_must_name_an_option(tmp_path: Path):
    script = tmp_path / "bad.sh"
    script.write_text(TYPED.replace("option_types=(", "option_types=(PATH=uint ", 1))
    r = _run(["bash", script])
    assert r.returncode == 2
    assert "option_types names 'PATH', which is not an option of" in r.stderr


def test_help_wins_wherever_it_stands_but_not_as_a_value(demo: Path):
    r = _run([demo, "--nj", "x", "--bogus", "1", "--help"])
    assert r.returncode == 0 and r.stdout.startswith("Usage: demo")
    r = _run([demo, "--some-name", "--help"])
    assert r.returncode == 0 and _vars(r.stdout)["some_name"] == "--help"

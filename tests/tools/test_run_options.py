"""run.sh's options: every bad value stops it before anything runs (before path.sh
installs or activates the virtualenv), naming the option and what it takes; good
values reach the stage scripts.

run.sh runs in a copy of the recipe whose path.sh, stage-0 scripts and training
launcher are stubs that record their calls in calls.log, so a test sees exactly
what started, and nothing heavy does.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest
from tests.common import ROOT_PATH

ROOT = ROOT_PATH

RECORD = ('{ printf "%s" "$(basename "${BASH_SOURCE[0]}")"; for a in "$@"; do printf " [%s]" "$a"; done; echo; }'
          " >> calls.log\n")
STUBS = {
    "path.sh": RECORD,  # sourced by run.sh from the recipe dir
    "local/synth_data_prep.sh": "#!/usr/bin/env bash\n" + RECORD,
    "local/speechocean762_data_prep.sh": "#!/usr/bin/env bash\n" + RECORD,
    "local/swbd_stage0.sh": "#!/usr/bin/env bash\n" + RECORD,
    "tools/launch_train.sh": "#!/usr/bin/env bash\n" + RECORD,
}
BASE = ["--stage", "0", "--stop_stage", "0"]  # valid: only the stage-0 stub runs


@pytest.fixture()
def recipe(tmp_path: Path) -> Path:
    """run.sh and the real option parser beside stub stages; conf/ is the real one."""
    d = tmp_path / "recipe"
    (d / "tools").mkdir(parents=True)
    (d / "local").mkdir()
    shutil.copy(ROOT / "run.sh", d / "run.sh")
    shutil.copy(ROOT / "tools" / "parse_options.sh", d / "tools" / "parse_options.sh")
    (d / "conf").symlink_to(ROOT / "conf")
    for name, text in STUBS.items():
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return d


def run_sh(recipe: Path, args: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["./run.sh", *args], cwd=recipe, capture_output=True, text=True, timeout=60)


def calls(recipe: Path) -> List[str]:
    log = recipe / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


BAD = [
    (["--stage", "abc"], "--stage takes an integer from 0 to 6, not 'abc'"),
    (["--stage=abc"], "--stage takes an integer from 0 to 6, not 'abc'"),
    (["--stop_stage", "7"], "--stop_stage takes an integer from 0 to 6, not '7'"),
    (["--stage", "1", "--stop_stage", "0"],
     "--stage 1 is after --stop_stage 0: nothing would run (stages 0..6, --stage <= --stop_stage)"),
    (["--nbpe", "abc"], "--nbpe takes a non-negative integer (0, 1, 2, ...), not 'abc'"),
    (["--average_num", "x"], "--average_num takes a non-negative integer (0, 1, 2, ...), not 'x'"),
    (["--seed", "-3"], "--seed takes a non-negative integer (0, 1, 2, ...), not '-3'"),
    (["--nj", "0"], "--nj takes a positive integer (1, 2, ...), not '0'"),
    (["--num-cpu-workers", "-1"], "--num-cpu-workers takes a positive integer (1, 2, ...), not '-1'"),
    (["--num_utts_per_shard", "1e3"], "--num_utts_per_shard takes a positive integer (1, 2, ...), not '1e3'"),
    (["--prefetch", "many"], "--prefetch takes a positive integer (1, 2, ...), not 'many'"),
    (["--ddp_timeout", "0"], "--ddp_timeout takes a positive integer (1, 2, ...), not '0'"),
    (["--ddp_timeout", "1.5"], "--ddp_timeout takes a positive integer (1, 2, ...), not '1.5'"),
    (["--num_nodes", "2", "--node_rank", "2"], "--node_rank takes 0..1 with --num_nodes 2, not '2'"),
    (["--num_nodes", "0"], "--num_nodes takes a positive integer (1, 2, ...), not '0'"),
    (["--corpus", "timit"], "--corpus takes one of synth|synth_broad|speechocean762|swbd, not 'timit'"),
    (["--data_type", "foo"], "--data_type takes one of shard|raw, not 'foo'"),
    (["--use_amp", "maybe"], "--use_amp takes one of none|bf16|fp16|auto, not 'maybe'"),
    (["--bpemode", "wordpiece"], "--bpemode takes one of unigram|bpe|char|word, not 'wordpiece'"),
    (["--cmvn", "yes"], "--cmvn takes true or false, not 'yes'"),
    (["--download", "1"], "--download takes true or false, not '1'"),
    (["--use_model_avg", "True"], "--use_model_avg takes true or false, not 'True'"),
    (["--average_checkpoint="], "--average_checkpoint takes true or false, not ''"),
    (["--feat_dir", ""], "--feat_dir takes a non-empty value, not ''"),
    (["--decode_modes", ""], "--decode_modes takes a non-empty value, not ''"),
    (["--stage", "1", "--stop_stage", "1", "--train_config", "missing.yaml"],
     "--train_config takes a yaml file; no such file 'missing.yaml'"),
    (["--stage", "4", "--stop_stage", "4", "--checkpoint", "missing.pt"],
     "--checkpoint takes a checkpoint file; no such file 'missing.pt'"),
    (["--stage", "4", "--stop_stage", "4", "--init_checkpoint", "missing.pt"],
     "--init_checkpoint takes a checkpoint file; no such file 'missing.pt'"),
    (["--PATH", "/tmp"], "unknown option --PATH"),
    (["--help_message", "x"], "unknown option --help_message"),
    (["--stop_stag", "3"], "unknown option --stop_stag"),
    (["--nj"], "option --nj needs a value"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_value_stops_run_sh_before_anything_runs(recipe: Path, args: List[str], message: str):
    r = run_sh(recipe, BASE + args)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.splitlines()[0] == f"./run.sh: {message}"
    if message.startswith(("unknown option", "option --nj")):
        assert "Usage: ./run.sh [options]" in r.stderr  # the accepted options
    assert calls(recipe) == []  # neither path.sh nor any stage ran
    assert r.stdout == ""


def test_good_values_reach_path_sh_then_the_stage(recipe: Path):
    """The control for the table above: the same base options run stage 0 (its stub)."""
    r = run_sh(recipe, BASE + ["--nj=3", "--seed", "0012", "--use-amp", "bf16"])
    assert r.returncode == 0, r.stderr
    assert calls(recipe) == ["path.sh", "synth_data_prep.sh [--nj] [3] [--seed] [12] [corpus/synth] [data]"]
    assert "run.sh: stages 0-0 finished" in r.stdout


def test_a_config_file_sets_options_and_is_checked(recipe: Path, tmp_path: Path):
    conf = tmp_path / "run.conf"
    conf.write_text("# my run\nstage=4\nstop_stage=4\nuse_amp=bf16\nddp_timeout=1800\n"
                    "train_overrides='max_epoch 1; optim_conf.lr 0.001'\n")
    r = run_sh(recipe, ["--config", str(conf), "--ddp_timeout", "900"])  # the command line wins
    assert r.returncode == 0, r.stderr
    launch = [c for c in calls(recipe) if c.startswith("launch_train.sh")]
    assert len(launch) == 1
    assert "[--use_amp] [bf16]" in launch[0] and "[--ddp_timeout] [900]" in launch[0]
    assert "[--override_config] [max_epoch 1]" in launch[0]
    conf.write_text("stage=4\nuse_amp=$(touch pwned)\n")
    r = run_sh(recipe, ["--config", str(conf)])
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == f"./run.sh: {conf}:2: cannot read the value '$(touch pwned)': " \
        "values are taken literally, never expanded or run; quote a value with spaces or shell characters in '...'"
    conf.write_text("data_type=foo\n")
    r = run_sh(recipe, ["--config", str(conf)])
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == f"./run.sh: {conf}:1: --data_type takes one of shard|raw, not 'foo'"
    assert not (recipe / "pwned").exists() and not (tmp_path / "pwned").exists()


def test_ddp_timeout_reaches_train_py_through_the_launcher(recipe: Path):
    for extra, timeout in (([], "600"), (["--ddp_timeout", "1800"], "1800")):
        (recipe / "calls.log").unlink(missing_ok=True)
        r = run_sh(recipe, ["--stage", "4", "--stop_stage", "4", *extra])
        assert r.returncode == 0, r.stderr
        [launch] = [c for c in calls(recipe) if c.startswith("launch_train.sh")]
        launcher_opts, train_args = launch.split(" [--] ", 1)
        assert "ddp_timeout" not in launcher_opts
        assert f"[--ddp_timeout] [{timeout}]" in train_args


def test_download_reaches_the_switchboard_stage_0(recipe: Path):
    r = run_sh(recipe, BASE + ["--corpus", "swbd", "--download", "true", "--swbd1_dir", "/c/swbd",
                               "--eval2000_dir", "/c/hub5 /c/tr"])
    assert r.returncode == 0, r.stderr
    assert calls(recipe)[1] == "swbd_stage0.sh [--download] [true] [/c/swbd] [/c/hub5 /c/tr] [data]"
    (recipe / "calls.log").unlink()
    r = run_sh(recipe, BASE + ["--corpus", "speechocean762", "--download", "true"])
    assert r.returncode == 0, r.stderr
    assert calls(recipe)[1] == ("speechocean762_data_prep.sh [--download] [true] "
                                "[../shared/corpora/speechocean762] [data]")


@pytest.fixture()
def bare_recipe(tmp_path: Path) -> Path:
    """run.sh with the real path.sh and no .venv; tools/install.sh is a stub that only
    records that it was called (a real one would install about 6 GB)."""
    d = tmp_path / "bare"
    (d / "tools").mkdir(parents=True)
    for name in ("run.sh", "path.sh", "tools/parse_options.sh", "requirements.txt", "requirements-test.txt"):
        shutil.copy(ROOT / name, d / name)
    (d / "conf").symlink_to(ROOT / "conf")
    (d / "tools" / "install.sh").write_text('#!/usr/bin/env bash\necho "$0" >> "$(dirname "$0")/../install.log"\n'
                                             "exit 1\n")
    return d


def test_help_and_bad_values_need_no_virtualenv(bare_recipe: Path):
    r = run_sh(bare_recipe, ["--help"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage: ./run.sh [options]\n")
    assert "--ddp_timeout S" in r.stdout and "--config FILE" in r.stdout
    r = run_sh(bare_recipe, ["--stage", "abc"])
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == "./run.sh: --stage takes an integer from 0 to 6, not 'abc'"
    assert not (bare_recipe / "install.log").exists()
    assert not (bare_recipe / ".venv").exists()
    # A good command line does need the environment: path.sh installs it first.
    r = run_sh(bare_recipe, ["--stage", "6"])
    assert r.returncode == 1 and "path.sh: tools/install.sh failed" in r.stderr
    assert (bare_recipe / "install.log").read_text().count("install.sh") == 1

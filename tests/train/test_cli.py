"""train.py as a user meets it: --ddp_timeout, faults of the set-up as one line and a
non-zero exit (no traceback), and an epoch that trains on nothing as an error."""
from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
import torch
from wenet.bin.train import cli, get_parser
from wenet.train.config import TrainConf, TrainingError
from wenet.train.distributed import DistInfo
from wenet.train.executor import Executor
from wenet.train.scheduler import WarmupLR

from tests.train import testlib as T

BASE = ["--config", "c", "--model_dir", "m", "--train_data", "t", "--cv_data", "v",
        "--symbol_table", "u"]


def test_ddp_timeout_option():
    assert get_parser().parse_args(BASE).ddp_timeout == 60.0
    assert get_parser().parse_args(BASE + ["--ddp_timeout", "300"]).ddp_timeout == 300.0
    assert get_parser().parse_args(BASE + ["--ddp.timeout", "7.5"]).ddp_timeout == 7.5


@pytest.mark.parametrize("bad", ["0", "-5", "abc", "inf"])
def test_ddp_timeout_refuses_non_positive_or_non_numbers(bad, capsys):
    with pytest.raises(SystemExit) as e:
        get_parser().parse_args(BASE + ["--ddp_timeout", bad])
    assert e.value.code == 2
    assert f"--ddp_timeout/--ddp.timeout: expected seconds (a number > 0), got '{bad}'" in \
        capsys.readouterr().err


def test_a_missing_rank_fails_after_ddp_timeout_with_one_line(tmp_path):
    """Rank 0 of 2 alone: it waits --ddp_timeout for its peer (how late a second node may
    join), then exits 1 with one line naming the rendezvous and the option."""
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=2, num_shards=1, cv_utts=1)
    config = T.write_config(str(tmp_path / "conf.yaml"))
    init = tmp_path / "ddp_init"
    start = time.time()
    proc = subprocess.run(T.train_cmd(T.train_args(corpus, config, str(tmp_path / "exp"), [
        "--ddp.init_method", f"file://{init}", "--ddp.world_size", "2", "--ddp.rank", "0",
        "--ddp.dist_backend", "gloo", "--ddp_timeout", "2"])),
        env=T.env(), capture_output=True, text=True, timeout=120)
    elapsed = time.time() - start
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].startswith(
        f"train.py: error: rank 0: the 2 ranks did not all join file://{init} within 2 s "
        "(--ddp_timeout)")
    assert 2 < elapsed < 45, elapsed  # the default 60 s would fail this


def _run_cli(capsys, corpus, config, model_dir, extra=()):
    code = cli(T.train_args(corpus, config, str(model_dir), extra))
    err = capsys.readouterr().err
    return code, err.rstrip().splitlines()[-1] if err.strip() else "", err


def test_setup_faults_are_one_line_and_exit_1(tmp_path, capsys):
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=2, num_shards=1, cv_utts=1)
    exp = tmp_path / "exp"
    exp.mkdir()
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("encoder: conformer\nencoder_conf:\n  output_size: [32\n")
    code, line, err = _run_cli(capsys, corpus, str(bad_yaml), exp)
    assert code == 1 and "Traceback" not in err
    assert re.match(rf"train.py: error: {re.escape(str(bad_yaml))}:\d+: ", line)  # file:line

    config = T.write_config(str(tmp_path / "conf.yaml"))
    missing = dict(corpus, train=str(tmp_path / "missing.list"))
    code, line, err = _run_cli(capsys, missing, config, exp)
    assert code == 1 and "Traceback" not in err
    assert line.endswith(f"No such file or directory: '{tmp_path / 'missing.list'}'")

    typo = T.write_config(str(tmp_path / "typo.yaml"), dataset_conf=dict(
        T.TINY_CONFIG["dataset_conf"], fbank_conf={"num_mel_bin": 40}))
    code, line, _ = _run_cli(capsys, corpus, typo, exp)
    assert code == 1 and "dataset_conf.fbank_conf: unknown keys ['num_mel_bin']" in line


def test_an_epoch_without_batches_is_an_error_not_nan(tmp_path, capsys):
    """Every utterance filtered out: exit 1 naming the epoch, not 'train_loss nan' and 0."""
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=4, num_shards=1, cv_utts=1)
    config = T.write_config(str(tmp_path / "conf.yaml"), dataset_conf=dict(
        T.TINY_CONFIG["dataset_conf"], filter_conf={"max_length": 5}))
    code, line, err = _run_cli(capsys, corpus, config, tmp_path / "exp")
    assert code == 1 and "Traceback" not in err
    assert "error: epoch 0 trained on nothing: the data gave no batch" in line
    assert not os.path.exists(tmp_path / "exp" / "0.pt")


def test_executor_names_the_ranks_without_data(tmp_path):
    """Rank 0 of 2 has a batch, rank 1 none: the end-of-data protocol ends the epoch for
    both before any batch, and the error says which rank had nothing."""
    model = T.ConstantLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ex = Executor(model, opt, WarmupLR(opt, 2), TrainConf(max_epoch=1, log_interval=100),
                  torch.device("cpu"), DistInfo(rank=0, world_size=2), str(tmp_path),
                  train_set=T.ListSet())

    def reduce_with_empty_rank_1(values, op=None):  # what all_reduce gives with rank 1's zeros
        return torch.tensor([0.0] if len(values) == 1 else values, dtype=torch.float64)

    ex._reduce = reduce_with_empty_rank_1
    with pytest.raises(TrainingError, match=r"epoch 0 trained on nothing: rank\(s\) 1 of 2 got "
                                            r"no batch, which ends the epoch for every rank"):
        ex.train_epoch(T.constant_batches([1.0, 2.0]))

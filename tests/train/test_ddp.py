"""Training as processes: DDP over gloo (uneven shards, two simulated nodes), one rank
SIGKILLed mid-epoch (its peer fails fast; the rerun resumes bit for bit with the feature
cache and dither on), checkpoint retention, a non-finite loss on one rank. Tiny model,
tiny generated corpus."""
from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import yaml

from tests.train import testlib as T

LAUNCH = os.path.join(T.REPO, "tools", "launch_train.sh")
LAUNCHED_DDP_TIMEOUT = 90  # a rank left waiting in a collective would fail only after this


def _hashes(log_text: str):
    return re.findall(r"epoch (\d+): parameters sha256 ([0-9a-f]{64})", log_text)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _wait_for(predicate, timeout: float, what: str) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def _wait_all(procs, timeout: float) -> list:
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        T.stop_all(procs)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """One 2-rank run through tools/launch_train.sh, the reference of the kill test:
    3 shards of 12 utterances for 2 ranks (rank 0 reads 2 shards, rank 1 one, so every
    epoch ends after rank 1's 6 batches: 3 updates), cache_features with dither, a step
    checkpoint every 2 updates, keep_last_k 1 (the default)."""
    root = tmp_path_factory.mktemp("launched")
    corpus = T.make_corpus(str(root / "data"), num_utts=36, num_shards=3, cv_utts=4)
    dataset_conf = dict(T.TINY_CONFIG["dataset_conf"], cache_features=True,
                        batch_conf={"batch_type": "static", "batch_size": 2})
    assert dataset_conf["fbank_conf"]["dither"] > 0
    config = T.write_config(str(root / "conf.yaml"), save_interval=2, log_interval=2,
                            dataset_conf=dataset_conf)
    exp = str(root / "exp")
    start = time.time()
    proc = subprocess.run(
        ["bash", LAUNCH, "--num_cpu_workers", "2", "--",
         *T.train_args(corpus, config, exp, ["--ddp_timeout", str(LAUNCHED_DDP_TIMEOUT)])],
        env=T.env(), capture_output=True, text=True, timeout=2 * LAUNCHED_DDP_TIMEOUT)
    return SimpleNamespace(corpus=corpus, config=config, exp=exp, proc=proc,
                           elapsed=time.time() - start, root=root)


# what a finished run keeps (keep_last_k 1): the epoch models, the newest resume state and
# running average; no step checkpoint, no temporary file
EXP_FILES = ["0.pt", "0.yaml", "1.avg.pt", "1.pt", "1.resume.pt", "1.yaml", "tensorboard",
             "train.0.log", "train.1.log", "train.yaml"]


def test_two_ranks_uneven_shards_finish_with_equal_parameters(launched):
    proc, exp = launched.proc, launched.exp
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert launched.elapsed < LAUNCHED_DDP_TIMEOUT - 10, \
        f"{launched.elapsed:.0f} s: did a rank wait out a collective?"
    logs = [_read(f"{exp}/train.{r}.log") for r in (0, 1)]
    assert "another rank ran out of data" in logs[0]
    assert _hashes(logs[0]) == _hashes(logs[1]) and len(_hashes(logs[0])) == 2
    assert re.findall(r"epoch (\d): (\d+) batches, step (\d+)", logs[0]) == [
        ("0", "6", "3"), ("1", "6", "6")]
    assert "epoch 1 batch 6 " in proc.stdout  # rank 0 is also on the console
    assert sorted(os.listdir(exp)) == sorted(EXP_FILES + ["ddp_init"])


def test_sigkill_of_one_rank_then_resume_is_bitwise_identical_with_feature_cache(launched, tmp_path):
    """Rank 1 is killed mid-epoch 1; rank 0 must fail fast, well before --ddp_timeout;
    the rerun resumes from the newest step checkpoint with empty feature caches, and
    ends with the launched run's bytes."""
    assert launched.proc.returncode == 0
    args = T.train_args(launched.corpus, launched.config, str(tmp_path / "exp"))
    cut = str(tmp_path / "exp")
    procs = T.start_ranks(args, str(tmp_path / "init1"), str(tmp_path / "cut_logs"),
                          extra=["--ddp_timeout", "60"])
    try:
        _wait_for(lambda: os.path.exists(f"{cut}/step_4.resume.pt") or procs[0].poll() is not None,
                  120, "the step checkpoint in epoch 1")
        procs[1].send_signal(signal.SIGKILL)
        killed = time.time()
        procs[0].wait(timeout=90)
        survivor_s = time.time() - killed
    finally:
        T.stop_all(procs)
    assert procs[1].returncode == -signal.SIGKILL and procs[0].returncode not in (0, None)
    assert survivor_s < 20, f"rank 0 took {survivor_s:.0f} s to notice (--ddp_timeout 60)"
    assert not os.path.exists(f"{cut}/1.pt"), "killed too late: epoch 1 had finished"
    # what a kill during a save leaves: a temporary of a process that is gone
    with open(f"{cut}/1.resume.pt.tmp.{procs[1].pid}", "wb") as f:
        f.write(b"x" * 1000)

    # rerun without --checkpoint: resumes from the newest complete checkpoint
    logs = tmp_path / "resume_logs"
    assert _wait_all(T.start_ranks(args, str(tmp_path / "init2"), str(logs)), 150) == [0, 0]
    log0 = _read(logs / "rank0.log")
    assert re.search(r"resumed from \S+/step_4: epoch 1 \(in progress\), step 4, batch 2", log0)
    assert re.search(r"removed 1 temporary file\(s\) .*, 1000 bytes freed: 1\.resume\.pt\.tmp\.", log0)
    ref = launched.exp
    for name in ("1.pt", "1.avg.pt"):
        T.assert_same_state(T.load_state(f"{cut}/{name}"), T.load_state(f"{ref}/{name}"))
    assert [l for l in _read(f"{cut}/1.yaml").splitlines() if l.startswith(("cv_loss", "step"))] == \
        [l for l in _read(f"{ref}/1.yaml").splitlines() if l.startswith(("cv_loss", "step"))]
    assert sorted(os.listdir(cut)) == [f for f in EXP_FILES if not f.startswith("train.")] + [
        "train.yaml"]


def test_two_nodes_train_together(tmp_path):
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=16, num_shards=2)
    config = T.write_config(str(tmp_path / "conf.yaml"), max_epoch=1)
    exp = str(tmp_path / "exp")
    nodes = []
    for node in (0, 1):
        nodes.append(subprocess.Popen(
            ["bash", LAUNCH, "--num_nodes", "2", "--node_rank", str(node), "--num_cpu_workers", "1",
             "--", *T.train_args(corpus, config, exp)],
            env=T.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        time.sleep(1.0)  # node 0 clears the init file first
    outs = [p.communicate(timeout=150)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outs
    logs = [_read(f"{exp}/train.{r}.log") for r in (0, 1)]
    assert "rank 0 of 2" in logs[0] and "rank 1 of 2" in logs[1]
    assert _hashes(logs[0]) == _hashes(logs[1]) and len(_hashes(logs[0])) == 1


def test_nonfinite_loss_on_one_rank_is_skipped_by_both(tmp_path):
    # batch 1 completes an update: its forward ran outside no_sync, and no rank may backward it
    poisoned_batch = 1
    code = ("import sys; from tests.train import testlib as T; "
            "T.ddp_nan_worker(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4])")
    e = T.env()
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r), str(tmp_path / "init"),
                               str(poisoned_batch), str(tmp_path)], env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=90)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    states = [yaml.safe_load(_read(str(tmp_path / f"rank{r}.yaml"))) for r in (0, 1)]
    # 6 common batches, one skipped on both ranks: 5 good ones make 2 updates (the 5th is dropped)
    assert states[0] == states[1]
    assert (states[0]["batches"], states[0]["skipped"], states[0]["step"]) == (6, 1, 2)

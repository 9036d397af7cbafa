"""Training as processes: DDP over gloo (uneven shards, two simulated nodes), exact resume
after SIGKILL, and a dead rank making its peer fail fast. Tiny model, tiny generated corpus."""
from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time

import yaml

from tests.train import testlib as T

LAUNCH = os.path.join(T.REPO, "tools", "launch_train.sh")


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


def test_two_ranks_uneven_shards_finish_with_equal_parameters(tmp_path):
    # 3 shards for 2 ranks: rank 0 reads 16 utterances per epoch, rank 1 only 8
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=24, num_shards=3)
    config = T.write_config(str(tmp_path / "conf.yaml"))
    exp = str(tmp_path / "exp")
    start = time.time()
    proc = subprocess.run(["bash", LAUNCH, "--num_cpu_workers", "2", "--",
                           *T.train_args(corpus, config, exp)],
                          env=T.env(), capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert time.time() - start < 150
    logs = [_read(f"{exp}/train.{r}.log") for r in (0, 1)]
    assert "another rank ran out of data" in logs[0]
    assert _hashes(logs[0]) == _hashes(logs[1]) and len(_hashes(logs[0])) == 2
    assert sorted(os.path.basename(p) for p in glob.glob(f"{exp}/*.pt")) == [
        "0.avg.pt", "0.pt", "0.resume.pt", "1.avg.pt", "1.pt", "1.resume.pt"]
    assert "epoch 1 batch" in proc.stdout  # rank 0 is also on the console


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


def test_sigkill_mid_epoch_then_resume_is_bitwise_identical(tmp_path):
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=48, num_shards=2)
    config = T.write_config(str(tmp_path / "conf.yaml"), save_interval=3, log_interval=4,
                            dataset_conf=dict(T.TINY_CONFIG["dataset_conf"],
                                              batch_conf={"batch_type": "static", "batch_size": 2}))
    ref, cut = str(tmp_path / "ref"), str(tmp_path / "cut")
    T.run_train(T.train_args(corpus, config, ref))

    proc = subprocess.Popen(T.train_cmd(T.train_args(corpus, config, cut)), env=T.env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: os.path.exists(f"{cut}/step_3.resume.pt") or proc.poll() is not None,
                  90, "the first step checkpoint")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not os.path.exists(f"{cut}/0.pt"), "killed too late: epoch 0 had finished"

    # rerun without --checkpoint: resumes from the newest complete checkpoint, here with a worker
    out = T.run_train(T.train_args(corpus, config, cut, ["--num_workers", "1"]))
    assert re.search(r"resumed from \S+/step_\d+: epoch 0 \(in progress\)", out.stderr)
    for name in ("1.pt", "1.avg.pt"):
        T.assert_same_state(T.load_state(f"{cut}/{name}"), T.load_state(f"{ref}/{name}"))
    # the CV loss after each epoch is the same too
    assert [l for l in _read(f"{cut}/1.yaml").splitlines() if l.startswith(("cv_loss", "step"))] == \
        [l for l in _read(f"{ref}/1.yaml").splitlines() if l.startswith(("cv_loss", "step"))]
    # step checkpoints: only the newest two kept, none has a yaml for averaging tools to pick up
    steps = sorted(int(m) for m in re.findall(r"step_(\d+)\.pt", " ".join(os.listdir(cut))))
    assert len(steps) == 2 and not glob.glob(f"{cut}/step_*.yaml")


def test_dead_rank_makes_the_other_fail_fast(tmp_path):
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=16, num_shards=2)
    config = T.write_config(str(tmp_path / "conf.yaml"), max_epoch=500)
    exp = str(tmp_path / "exp")
    os.makedirs(exp)
    procs, logs = [], []
    for rank in (0, 1):
        logs.append(open(tmp_path / f"rank{rank}.log", "w"))
        procs.append(subprocess.Popen(
            T.train_cmd(T.train_args(corpus, config, exp, [
                "--ddp.init_method", f"file://{exp}/ddp_init", "--ddp.world_size", "2",
                "--ddp.rank", str(rank), "--ddp.dist_backend", "gloo"])),
            env=T.env(), stdout=logs[-1], stderr=subprocess.STDOUT))
    try:
        _wait_for(lambda: "epoch 0 batch 2 " in _read(tmp_path / "rank0.log"), 90, "training to start")
        procs[1].send_signal(signal.SIGKILL)
        killed = time.time()
        procs[0].wait(timeout=60)
        assert time.time() - killed < 60
        assert procs[0].returncode not in (0, None)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs:
            f.close()


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

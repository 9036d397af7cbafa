"""tools/launch_train.sh's GPU branch on a CPU machine: a fake ``nvidia-smi`` on PATH or
``CUDA_VISIBLE_DEVICES`` says which GPUs there are, and ``wenet/bin/train.py`` is a stub
that records its arguments and environment. The launcher and parse_options.sh are the
checkout's (symlinked into a temporary recipe dir, where the launcher finds the stub)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from tests import common as T

TRAIN_ARGS = ["--config", "conf/x.yaml", "--model_dir", "EXP", "--seed", "7"]

STUB = """\
import json, os, sys, time
args = sys.argv[1:]
rank = int(args[args.index("--ddp.rank") + 1])
out = args[args.index("--model_dir") + 1]
with open(os.path.join(out, f"stub.{rank}.json"), "w") as f:
    json.dump({"argv": args, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
               "omp": os.environ.get("OMP_NUM_THREADS")}, f)
if os.environ.get("STUB_FAIL_RANK") == str(rank):
    sys.exit(3)
if os.environ.get("STUB_SLEEP"):
    time.sleep(float(os.environ["STUB_SLEEP"]))
"""


def fake_smi(n: int, rc: int = 0) -> str:
    """An nvidia-smi whose ``-L`` lists ``n`` GPUs the way the real one does."""
    lines = "".join(f"echo 'GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d}-aaaa-bbbb-cccc-"
                    f"000000000000)'\n" for i in range(n))
    if rc:
        lines += f"echo 'No devices were found'\nexit {rc}\n"
    return f"#!/bin/sh\n[ \"$1\" = -L ] || exit 2\n{lines}"


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    d = tmp_path / "recipe"
    (d / "tools").mkdir(parents=True)
    for name in ("launch_train.sh", "parse_options.sh"):
        (d / "tools" / name).symlink_to(os.path.join(T.TOOLS_DIR, name))
    (d / "wenet" / "bin").mkdir(parents=True)
    (d / "wenet" / "bin" / "train.py").write_text(STUB)
    (d / "bin").mkdir()
    # the test's own python as `python`, whatever PATH holds
    (d / "bin" / "python").symlink_to(sys.executable)
    return d


def launch(recipe: Path, launcher_opts: List[str], smi: Optional[str] = None,
           cvd: Optional[str] = None, extra_env: Optional[Dict[str, str]] = None,
           timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")}
    smi_dir = recipe / "smi"
    smi_dir.mkdir(exist_ok=True)
    if smi is not None:
        (smi_dir / "nvidia-smi").write_text(smi)
        (smi_dir / "nvidia-smi").chmod(0o755)
    # only the fake nvidia-smi (or none) on PATH: the stub dir first, no real one reachable
    env["PATH"] = f"{recipe / 'bin'}:{smi_dir}:/usr/bin:/bin"
    if cvd is not None:
        env["CUDA_VISIBLE_DEVICES"] = cvd
    env.update(extra_env or {})
    args = [a if a != "EXP" else str(recipe / "exp") for a in TRAIN_ARGS]
    return subprocess.run(["bash", str(recipe / "tools" / "launch_train.sh"), *launcher_opts,
                           "--", *args], env=env, cwd=recipe, capture_output=True, text=True,
                          timeout=timeout)


def records(recipe: Path) -> Dict[int, dict]:
    out = {}
    for f in sorted((recipe / "exp").glob("stub.*.json")):
        out[int(f.name.split(".")[1])] = json.loads(f.read_text())
    return out


def opt(argv: List[str], name: str) -> str:
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


def check_ranks(recipe: Path, gpus: List[str], node_rank: int, num_nodes: int) -> None:
    """One process per listed GPU, global ranks node_rank * len(gpus) + i, nccl, the user's
    arguments passed through unchanged, every rank's log written."""
    recs = records(recipe)
    first = node_rank * len(gpus)
    assert sorted(recs) == list(range(first, first + len(gpus)))
    init = f"file://{os.path.realpath(recipe / 'exp')}/ddp_init"
    for i, gpu in enumerate(gpus):
        argv = recs[first + i]["argv"]
        assert argv[:len(TRAIN_ARGS)] == [a if a != "EXP" else str(recipe / "exp") for a in TRAIN_ARGS]
        assert opt(argv, "--gpu") == gpu
        assert opt(argv, "--ddp.dist_backend") == "nccl"
        assert opt(argv, "--ddp.world_size") == str(num_nodes * len(gpus))
        assert opt(argv, "--ddp.init_method") == init
        assert recs[first + i]["omp"] is None  # the CPU branch's thread split is not applied
        assert (recipe / "exp" / f"train.{first + i}.log").is_file()


@pytest.mark.parametrize("n", [1, 2, 4])
def test_one_process_per_gpu_nvidia_smi_lists(recipe, n):
    r = launch(recipe, [], smi=fake_smi(n))
    assert r.returncode == 0, r.stderr
    check_ranks(recipe, [str(i) for i in range(n)], node_rank=0, num_nodes=1)
    assert f"{n} nccl process(es), world size {n}" in r.stdout


@pytest.mark.parametrize("cvd,gpus", [
    ("0,2", ["0", "2"]),
    ("3", ["3"]),
    (" 1, 0 ", ["1", "0"]),      # the order given is kept: rank 0 on GPU 1
    ("1,-1,0", ["1"]),           # -1 hides itself and every later id, as in CUDA
    ("2,foo,0", ["2"]),          # so does an entry CUDA cannot parse
])
def test_cuda_visible_devices_wins_over_nvidia_smi(recipe, cvd, gpus):
    r = launch(recipe, [], smi=fake_smi(4), cvd=cvd)
    assert r.returncode == 0, r.stderr
    check_ranks(recipe, gpus, node_rank=0, num_nodes=1)


@pytest.mark.parametrize("cvd", ["", "-1", "-1,0"])
def test_no_visible_gpu_trains_on_cpu(recipe, cvd):
    r = launch(recipe, ["--num_cpu_workers", "2"], smi=fake_smi(4), cvd=cvd)
    assert r.returncode == 0, r.stderr
    recs = records(recipe)
    assert sorted(recs) == [0, 1]
    for rec in recs.values():
        assert opt(rec["argv"], "--gpu") == "-1"
        assert opt(rec["argv"], "--ddp.dist_backend") == "gloo"
        assert opt(rec["argv"], "--ddp.world_size") == "2"
        assert int(rec["omp"]) == max(1, os.cpu_count() // 2)


def test_failing_nvidia_smi_means_cpu(recipe):
    r = launch(recipe, [], smi=fake_smi(0, rc=6))
    assert r.returncode == 0, r.stderr
    assert "'nvidia-smi -L' failed (exit 6)" in r.stderr
    assert opt(records(recipe)[0]["argv"], "--ddp.dist_backend") == "gloo"


@pytest.mark.parametrize("cvd", ["GPU-8f2e1c3a-aaaa-bbbb-cccc-000000000000", "0,MIG-1a2b3c"])
def test_gpu_uuids_are_refused(recipe, cvd):
    r = launch(recipe, [], smi=fake_smi(2), cvd=cvd)
    assert r.returncode == 1
    assert "by UUID" in r.stderr and "CUDA_VISIBLE_DEVICES=0,1" in r.stderr
    assert records(recipe) == {}  # nothing started


@pytest.mark.parametrize("num_nodes,node_rank,n", [(2, 1, 2), (2, 0, 4), (4, 3, 1), (4, 2, 2)])
def test_several_nodes_give_global_ranks(recipe, num_nodes, node_rank, n):
    (recipe / "exp").mkdir()
    (recipe / "exp" / "ddp_init").write_text("stale")
    r = launch(recipe, ["--num_nodes", str(num_nodes), "--node_rank", str(node_rank)],
               smi=fake_smi(n))
    assert r.returncode == 0, r.stderr
    check_ranks(recipe, [str(i) for i in range(n)], node_rank=node_rank, num_nodes=num_nodes)
    # only node 0 removes a stale init file; the others must not race it
    assert (recipe / "exp" / "ddp_init").exists() == (node_rank != 0)


def test_failing_rank_stops_the_others(recipe):
    start = time.monotonic()
    r = launch(recipe, [], smi=fake_smi(4), extra_env={"STUB_FAIL_RANK": "2", "STUB_SLEEP": "60"})
    took = time.monotonic() - start
    assert r.returncode == 3
    assert "rank 2 failed (exit 3)" in r.stderr
    assert took < 30, f"the launcher waited {took:.0f} s for ranks that should have been killed"
    assert 2 in records(recipe)  # the others may be killed before their stub wrote anything
    left = subprocess.run(["pgrep", "-f", str(recipe)], capture_output=True, text=True).stdout
    assert left == "", f"ranks still running after the launcher returned: {left}"

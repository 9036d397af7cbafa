"""path.sh reinstalls the virtualenv when requirements*.txt differ from the ones it was
installed from, and only then. Driven on a copy of path.sh beside a stub tools/install.sh
that records each call and makes a fake .venv (as c47cba8's installer did, it touches
.venv/.installed), so no real installation happens."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
import pytest
from tests.common import ROOT_PATH

ROOT = ROOT_PATH
INSTALL_STUB = """#!/usr/bin/env bash
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
echo install >> "${root}/install.log"
[ ! -f "${root}/fail_install" ] || exit 3
mkdir -p "${root}/.venv/bin"
echo 'export FAKE_VENV=active' > "${root}/.venv/bin/activate"
touch "${root}/.venv/.installed"
"""
SOURCE = 'set -euo pipefail; . ./path.sh; echo "venv=${FAKE_VENV:-none} pythonpath=${PYTHONPATH}"'


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    d = tmp_path / "home"
    (d / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "path.sh", d / "path.sh")
    (d / "requirements.txt").write_text("torch==1.0\n")
    (d / "requirements-test.txt").write_text("pytest==1.0\n")
    (d / "tools" / "install.sh").write_text(INSTALL_STUB)
    return d


def source(d: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", SOURCE], cwd=d, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})


def installs(d: Path) -> int:
    log = d / "install.log"
    return log.read_text().count("install") if log.exists() else 0


def stamp(d: Path) -> str:
    return (d / ".venv" / ".installed").read_text().strip()


def test_installs_once_then_reuses_the_venv(home: Path):
    r = source(home)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"venv=active pythonpath={home}"
    assert installs(home) == 1
    first = stamp(home)
    assert len(first) == 64 and all(c in "0123456789abcdef" for c in first)
    r = source(home)
    assert r.returncode == 0 and r.stdout.startswith("venv=active")
    assert installs(home) == 1 and stamp(home) == first


def test_a_work_dir_linking_path_sh_uses_the_real_venv_and_requirements(home: Path, tmp_path: Path):
    """Tests mirror the repository by symlinks (tests/local/test_swbd_prep.py): that must
    not reinstall, must read the hash from the real .venv, and PYTHONPATH is the work dir."""
    assert source(home).returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    for name in ("path.sh", ".venv", "tools"):
        (work / name).symlink_to(home / name)
    r = source(work)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"venv=active pythonpath={work}"
    assert installs(home) == 1 and len(stamp(work)) == 64


def test_changed_requirements_reinstall(home: Path):
    assert source(home).returncode == 0
    first = stamp(home)
    for name, text in (("requirements.txt", "torch==2.0\n"), ("requirements-test.txt", "pytest==2.0\n")):
        (home / name).write_text(text)
        r = source(home)
        assert r.returncode == 0, r.stderr
        assert "requirements*.txt changed since" in r.stderr and "reinstalling" in r.stderr
    assert installs(home) == 3
    assert stamp(home) != first
    assert source(home).returncode == 0 and installs(home) == 3


def test_a_venv_without_a_hash_is_reinstalled(home: Path):
    """A .venv from before the hash (an empty .installed, as c47cba8 wrote) is not trusted."""
    assert source(home).returncode == 0
    (home / ".venv" / ".installed").write_text("")
    assert source(home).returncode == 0
    assert installs(home) == 2 and len(stamp(home)) == 64


def test_a_failed_install_is_not_recorded_and_is_retried(home: Path):
    assert source(home).returncode == 0
    (home / "requirements.txt").write_text("torch==3.0\n")
    (home / "fail_install").touch()
    r = source(home)
    assert r.returncode == 1
    assert "path.sh: tools/install.sh failed" in r.stderr
    assert "venv=" not in r.stdout  # the caller stopped: nothing ran on a half-made venv
    assert not (home / ".venv" / ".installed").exists()
    (home / "fail_install").unlink()
    assert source(home).returncode == 0
    assert installs(home) == 3 and len(stamp(home)) == 64

"""Fixtures and hooks shared by every test folder (paths and helpers: tests/common.py).

Every test runs isolated from the checkout's state (the pytest_* hooks at the end): its
working directory is a decoy recipe whose files contradict any real run's, and the kernel
tells which files under the repository's own run outputs (``OUTPUT_DIRS``, what
``./run.sh`` writes) or under the decoy were opened, written, created, deleted or moved
meanwhile. Either fails the test by name: a test keeps its files in ``tmp_path`` and
names tracked files by ``REPO``, so the suite passes the same on a fresh clone and after
``./run.sh`` (tests/test_isolation.py checks the check).
"""
import ctypes
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Tuple

import pytest
import torch

from tests.common import OUTPUT_DIRS, REPO


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """Tools' main() and some tests change torch's thread count; give every test the
    session's setting back so one test never slows or changes another."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def one_thread():
    """One intra-op thread: tiny models run 5-10x faster on busy cores without a pool
    of threads fighting over small ops (restored by _restore_torch_threads)."""
    torch.set_num_threads(1)


# inotify(7) event bits and what they mean for a file or directory
_WHAT = {0x20: "opened", 0x02: "written", 0x04: "metadata changed", 0x40: "moved away",
         0x80: "moved in", 0x100: "created", 0x200: "deleted", 0x400: "deleted",
         0x800: "moved"}
_IN_Q_OVERFLOW, _IN_IGNORED, _IN_ISDIR, _IN_OPEN = 0x4000, 0x8000, 0x40000000, 0x20
_TREE_MASK = sum(_WHAT)
_PARENT_MASK = 0x40 | 0x80 | 0x100 | 0x200  # an output dir appears or goes


class _TreeWatch:
    """inotify watches on directory trees: the files under them that were opened,
    written, created, deleted or moved since the last look, by this process or any
    other (tools a test starts). One system call per look however many files the trees
    hold; opening a directory to list it does not count (imports list the working dir)."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._dirs: Dict[int, Tuple[str, Optional[FrozenSet[str]]]] = {}

    def add_tree(self, top: str) -> None:
        """Watch ``top`` and every directory under it."""
        for d, _, _ in os.walk(top):
            self._add(d, _TREE_MASK, None)

    def add_parent(self, d: str, names: FrozenSet[str]) -> None:
        """Watch ``d`` only for entries called ``names`` appearing or going."""
        self._add(d, _PARENT_MASK, names)

    def _add(self, d: str, mask: int, names: Optional[FrozenSet[str]]) -> None:
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(d), mask)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {d}")
        self._dirs[wd] = (d, names)

    def changes(self) -> List[Tuple[str, str]]:
        """(path, what happened) for each event since the last call."""
        out = []
        while True:
            try:
                buf = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return out
            pos = 0
            while pos < len(buf):
                wd, mask, _, size = struct.unpack_from("iIII", buf, pos)
                name = os.fsdecode(buf[pos + 16:pos + 16 + size].rstrip(b"\0"))
                pos += 16 + size
                if mask & _IN_Q_OVERFLOW:
                    out.append(("(too many events to list)", "changed"))
                    continue
                d, names = self._dirs.get(wd, ("?", None))
                if mask & _IN_IGNORED or (mask & _IN_ISDIR and mask & _IN_OPEN) \
                        or (names is not None and name not in names):
                    continue
                what = next((w for bit, w in _WHAT.items() if mask & bit), "changed")
                out.append((os.path.join(d, name) if name else d, what))

    def close(self) -> None:
        os.close(self._fd)


# The decoy recipe: files where a run puts them, with contents no real run writes, so a
# test or loader that reads a relative recipe path from the working directory fails
# loudly (or is caught by the watch) instead of picking up the last ./run.sh's outputs.
_DECOY_UNITS = "<blank> 0\n<unk> 1\n\u2581DECOY 2\n<sos/eos> 3\n"
_DECOY_SET = {"text": "decoy-0001 DECOY TRANSCRIPT\n", "utt2spk": "decoy-0001 decoy\n",
              "spk2utt": "decoy decoy-0001\n", "wav.scp": "decoy-0001 decoy/missing.wav\n",
              "data.list": "decoy/shards/missing.tar\n"}
_DECOY_FILES = {
    # 80 dims like real fbank, with sums no audio gives: a mean of 1e9, a negative variance
    "raw_wav/train/global_cmvn": json.dumps({"mean_stat": [1e9] * 80, "var_stat": [-1.0] * 80,
                                             "frame_num": 1}),
    **{f"{top}/{s}/{f}": text for top in ("data", "raw_wav") for s in ("train", "dev", "test")
       for f, text in _DECOY_SET.items()},
    **{f"data/lang_char/train_{m}{n}_units.txt": _DECOY_UNITS
       for m in ("unigram", "bpe", "char") for n in (128, 500)},
    **{f"data/lang_char/train_{m}{n}.model": "decoy: not a sentencepiece model\n"
       for m in ("unigram", "bpe") for n in (128, 500)},
    **{f"exp/synth_{c}/{f}": text for c in ("train_zipformer", "train_u2++_conformer")
       for f, text in (("train.yaml", "decoy: true\ninput_dim: 3\noutput_dim: 4\n"
                                      "cmvn_file: raw_wav/train/global_cmvn\nencoder: decoy\n"),
                       ("units.txt", _DECOY_UNITS), ("avg_2.pt", "decoy checkpoint\n"),
                       ("final.zip", "decoy export\n"))},
    "corpus/synth/manifest.json": '{"decoy": true}\n',
    "corpus/synth/lists/train/text": _DECOY_SET["text"],
    "conf/train_zipformer.yaml": "decoy: a relative conf/ path read from the working dir\n",
}


def _write_decoy(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
    for rel, text in _DECOY_FILES.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)


class _Isolation:
    """The decoy working directory and the watch on it and on the repository's outputs."""

    def __init__(self, decoy: Path) -> None:
        self.decoy = decoy
        _write_decoy(decoy)
        self._watch: Optional[_TreeWatch] = None
        self.unwatched = ""  # why the watch is off, if it is
        try:
            self._start()
        except (OSError, AttributeError) as e:  # not Linux, or no inotify watches left
            self.unwatched = (f"no inotify ({e}): reads and writes of the checkout's "
                              f"{', '.join(OUTPUT_DIRS)} were not checked")

    def _start(self) -> None:
        if self._watch is not None:
            self._watch.close()
        self._watch = _TreeWatch()
        self._watch.add_parent(REPO, frozenset(OUTPUT_DIRS))
        for name in OUTPUT_DIRS:
            if os.path.isdir(os.path.join(REPO, name)):
                self._watch.add_tree(os.path.join(REPO, name))
        self._watch.add_tree(str(self.decoy))

    def check(self, who: str) -> None:
        """Fail, naming ``who``, if anything touched the watched trees since the last check
        (and rewatch them: new directories, a fresh decoy)."""
        changes = self._watch.changes() if self._watch is not None else []
        if not changes:
            return
        decoy = str(self.decoy) + os.sep
        touched: Dict[str, List[str]] = {}
        for p, what in changes:
            p = f"{p[len(decoy):]} (in the working directory)" if p.startswith(decoy) \
                else os.path.relpath(p, REPO)
            if what not in touched.setdefault(p, []):
                touched[p].append(what)
        lines = [f"  {p}: {', '.join(whats)}" for p, whats in sorted(touched.items())]
        _write_decoy(self.decoy)
        self._start()
        pytest.fail(
            f"{who} used the checkout's run outputs ({', '.join(OUTPUT_DIRS)}) or recipe paths "
            "relative to its working directory (a decoy recipe; without this check, wherever "
            "pytest started):\n" + "\n".join(lines[:20]) + "\nKeep a test's files in tmp_path "
            "and name tracked files by REPO (tests/common.py); run run.sh in a copy "
            "(tests.common.recipe_copy). If another process (a ./run.sh in this checkout) "
            "was using these files, run the tests after it.", pytrace=False)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()


_isolation: Optional[_Isolation] = None  # for the session: the decoy and the watch


def pytest_sessionstart(session: pytest.Session) -> None:
    global _isolation
    _isolation = _Isolation(Path(tempfile.mkdtemp(prefix="decoy_recipe_")))


def pytest_collection_finish(session: pytest.Session) -> None:
    """From here on (fixtures of every scope included) the working directory is the decoy;
    collection stays where pytest started, which resolves the command line's paths."""
    os.chdir(_isolation.decoy)


# Hooks, not an autouse fixture: a fixture costs pytest ~0.3 ms a test, the look ~30 us.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    os.chdir(_isolation.decoy)  # whatever directory the previous test left
    result = yield
    _isolation.check(f"{item.nodeid} (setting up its fixtures; before the first test, "
                     f"collecting the test modules)")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Optional[pytest.Item]):
    try:
        return (yield)
    finally:  # the test and its fixtures' teardown (module and session ones, at their end)
        os.chdir(_isolation.decoy)
        _isolation.check(item.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    os.chdir(session.config.invocation_params.dir)
    _isolation.close()
    shutil.rmtree(_isolation.decoy, ignore_errors=True)


def pytest_terminal_summary(terminalreporter) -> None:
    if _isolation is not None and _isolation.unwatched:
        terminalreporter.write_line(f"tests/conftest.py: {_isolation.unwatched}")

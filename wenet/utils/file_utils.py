"""Readers for the Kaldi/WeNet text formats, and the one way to write a file atomically.

Every reader raises ``ValueError`` naming the file and line at fault, so a bad
data directory is reported where it is, not as a crash far downstream.
"""
from __future__ import annotations

import contextlib
import os
from typing import IO, Any, Dict, Iterator, List, Tuple

TMP_MARK = ".tmp."  # temporary files are ``<path>.tmp.<pid>``


def _open_text(path: str):
    return open(path, "r", encoding="utf-8")


def _utf8_error(path: str) -> str:
    """``path:line: not valid UTF-8 (...)`` for the first line of ``path`` that does not decode."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return (f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at "
                        f"column {e.start + 1}: {e.reason})")
    return f"{path}: not valid UTF-8"


def text_lines(path: str) -> Iterator[Tuple[int, str]]:
    """(line number from 1, line) of a UTF-8 text file, lines as ``open(path)`` splits them;
    invalid UTF-8 is a one-line ``ValueError`` naming the file and line."""
    try:
        with _open_text(path) as f:
            yield from enumerate(f, 1)
    except UnicodeDecodeError:
        raise ValueError(_utf8_error(path)) from None


def read_lists(path: str) -> List[str]:
    """Non-empty lines of ``path`` with surrounding whitespace stripped."""
    return [line.strip() for _, line in text_lines(path) if line.strip()]


def read_kaldi_map(path: str, allow_empty_value: bool = False) -> Dict[str, str]:
    """``key value...`` lines → {key: value}; duplicate keys are an error.

    The value is the rest of the line after the first run of whitespace.
    """
    out: Dict[str, str] = {}
    for lineno, line in text_lines(path):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        parts = line.strip().split(maxsplit=1)
        key = parts[0]
        value = parts[1] if len(parts) > 1 else ""
        if not value and not allow_empty_value:
            raise ValueError(f"{path}:{lineno}: no value for key '{key}'")
        if key in out:
            raise ValueError(f"{path}:{lineno}: duplicate key '{key}'")
        out[key] = value
    return out


def read_segments(path: str) -> Dict[str, Tuple[str, float, float]]:
    """Kaldi ``segments``: ``seg rec start end`` → {seg: (rec, start, end)} in seconds."""
    out: Dict[str, Tuple[str, float, float]] = {}
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 4:
            raise ValueError(f"{path}:{lineno}: expected 'seg rec start end', got {line.strip()!r}")
        try:
            start, end = float(parts[2]), float(parts[3])
        except ValueError:
            raise ValueError(f"{path}:{lineno}: start/end are not numbers: {line.strip()!r}") from None
        if end != -1 and end <= start:
            raise ValueError(f"{path}:{lineno}: end {end} is not after start {start}")
        if parts[0] in out:
            raise ValueError(f"{path}:{lineno}: duplicate segment '{parts[0]}'")
        out[parts[0]] = (parts[1], start, end)
    return out


def read_symbol_table(path: str) -> Dict[str, int]:
    """``units.txt`` (``token id`` per line) → {token: id}; a token or an id given twice
    is an error naming the file and line (an id of two tokens would decode as either)."""
    table: Dict[str, int] = {}
    owner: Dict[int, Tuple[str, int]] = {}  # id -> (token, line)
    for lineno, line in text_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise ValueError(f"{path}:{lineno}: expected 'token id', got {line.strip()!r}")
        token, idx = parts[0], int(parts[1])
        if token in table:
            raise ValueError(f"{path}:{lineno}: duplicate token '{token}'")
        if idx in owner:
            raise ValueError(f"{path}:{lineno}: id {idx} is given twice (token '{token}', "
                             f"and '{owner[idx][0]}' on line {owner[idx][1]})")
        table[token], owner[idx] = idx, (token, lineno)
    return table


def load_yaml(path: str) -> Any:
    """``yaml.safe_load`` of a file; a syntax error or a tag that safe loading refuses
    (``!!python/...``) becomes a one-line ``ValueError`` naming the file and line."""
    import yaml  # here, not at the top: the torch-free runtime reads text files, no YAML
    try:
        with _open_text(path) as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ValueError(f"{where}: invalid YAML: {problem}") from None
    except UnicodeDecodeError:
        raise ValueError(_utf8_error(path)) from None


def fsync_dir(path: str) -> None:
    """fsync the directory holding ``path`` so a rename into it survives a crash
    (best effort: some file systems refuse directory fsync)."""
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (one of another user counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_writers_temp_files(folder: str, prefix: str = "") -> List[str]:
    """``<prefix>*.tmp.<pid>`` files in ``folder`` whose writer (``pid``) is gone: what a
    killed ``atomic_open`` left behind. A live writer's temporary is never listed."""
    if not os.path.isdir(folder):
        return []
    found = []
    for name in sorted(os.listdir(folder)):
        head, mark, pid = name.rpartition(TMP_MARK)
        if (mark and head.startswith(prefix) and head and pid.isdigit()
                and not _pid_alive(int(pid))):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(path)
    return found


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w") -> Iterator[IO]:
    """Open ``<path>.tmp.<pid>`` for writing; on a clean exit flush, fsync and rename it
    to ``path``; on an exception remove it. Readers never see half a file.

    ``mode`` is ``"w"`` (UTF-8 text) or ``"wb"``.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    tmp = f"{path}{TMP_MARK}{os.getpid()}"
    try:
        with open(tmp, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    fsync_dir(path)


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see ``atomic_open``)."""
    with atomic_open(path, "w") as f:
        f.write(text)

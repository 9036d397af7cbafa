"""utils/file_utils: the YAML loader's and text readers' errors, and the atomic writer's clean-up."""
import os

import pytest

from wenet.utils.file_utils import (atomic_open, atomic_write_text, load_yaml, read_kaldi_map,
                                    read_lists, read_segments, read_symbol_table)


def test_load_yaml_reads_a_config(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("a: 1\nb: [x, y]\n")
    assert load_yaml(str(path)) == {"a": 1, "b": ["x", "y"]}


@pytest.mark.parametrize("text,line,problem", [
    ("a: 1\nb: !!python/object/apply:os.system ['true']\n", 2, "could not determine a constructor"),
    ("a: [1, 2\nb: 3\n", 2, "expected ',' or ']'"),
])
def test_load_yaml_error_names_file_and_line(tmp_path, text, line, problem):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        load_yaml(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: invalid YAML: {problem}")
    assert "\n" not in message


def test_atomic_open_leaves_nothing_on_failure_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.txt"
    atomic_write_text(str(path), "old\n")
    with pytest.raises(RuntimeError):
        with atomic_open(str(path), "w") as f:
            f.write("half")
            raise RuntimeError("writer died")
    assert path.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["out.txt"]
    with atomic_open(str(path), "wb") as f:
        f.write(b"new\n")
    assert path.read_bytes() == b"new\n" and sorted(os.listdir(tmp_path)) == ["out.txt"]


# Each reader gets 5000 valid lines of its format (made from the line number), then one
# line with the bytes 0xff 0xfe; the bad byte lies far beyond the text decoder's first chunk.
_BAD_UTF8_CASES = {
    "read_kaldi_map": (read_kaldi_map, "k{i} x", b"c \xff\xfe"),
    "read_lists": (read_lists, "line {i}", b"c \xff\xfe"),
    "read_segments": (read_segments, "s{i} r {i} {i}.5", b"s \xff\xfe 2 3"),
    "read_symbol_table": (read_symbol_table, "t{i} {i}", b"\xff\xfe 2"),
    "load_yaml": (load_yaml, "k{i}: {i}", b"c: \xff\xfe"),
}


@pytest.mark.parametrize("name", sorted(_BAD_UTF8_CASES))
def test_invalid_utf8_names_file_and_line(tmp_path, name):
    reader, good, bad = _BAD_UTF8_CASES[name]
    path = tmp_path / "file"
    path.write_bytes("".join(good.format(i=i) + "\n" for i in range(5000)).encode() + bad + b"\n")
    column = bad.index(b"\xff") + 1
    with pytest.raises(ValueError) as err:
        reader(str(path))
    assert str(err.value) == (f"{path}:5001: not valid UTF-8 (byte 0xff at column {column}: "
                              "invalid start byte)")


def test_readers_keep_crlf_and_blank_line_handling(tmp_path):
    path = tmp_path / "map"
    path.write_bytes(b"a x y\r\n\r\nb \xc3\xa9\r\n")
    assert read_kaldi_map(str(path)) == {"a": "x y", "b": "\u00e9"}
    assert read_lists(str(path)) == ["a x y", "b \u00e9"]


def test_dead_writers_temp_files_lists_only_dead_writers_with_the_prefix(tmp_path):
    import subprocess
    import sys
    from wenet.utils.file_utils import dead_writers_temp_files
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # its pid now names no process (reaped)
    dead, live = child.pid, os.getpid()
    for name in (f"shards_000.tar.tmp.{dead}", f"shards_001.tar.tmp.{live}",
                 f"other.tar.tmp.{dead}", "shards_002.tar", f"shards_003.tar.tmp.x{dead}"):
        (tmp_path / name).write_bytes(b"x")
    assert dead_writers_temp_files(str(tmp_path), "shards_") == [
        str(tmp_path / f"shards_000.tar.tmp.{dead}")]
    assert dead_writers_temp_files(str(tmp_path)) == [
        str(tmp_path / f"other.tar.tmp.{dead}"), str(tmp_path / f"shards_000.tar.tmp.{dead}")]
    assert dead_writers_temp_files(str(tmp_path / "missing")) == []


@pytest.mark.parametrize("text,error", [
    ("<blank> 0\na 1\nb 1\nc 3\n", "units.txt:3: id 1 is given twice (token 'b', and 'a' on line 2)"),
    ("<blank> 0\na 1\nb 2\na 3\n", "units.txt:4: duplicate token 'a'"),
])
def test_units_with_a_duplicate_id_or_token_are_refused_by_file_and_line(tmp_path, text, error):
    """Two tokens with one id would decode that id as either of them (issue 57.6)."""
    path = tmp_path / "units.txt"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        read_symbol_table(str(path))
    assert str(e.value) == f"{tmp_path}/{error}"

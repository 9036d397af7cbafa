"""utils/file_utils: the YAML loader's errors and the atomic writer's clean-up."""
import os

import pytest

from wenet.utils.file_utils import atomic_open, atomic_write_text, load_yaml


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

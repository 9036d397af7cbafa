"""--text_norm's three modes (wenet/dataprep/text_norm.py), against hand-written results."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.common import REPO
from wenet.dataprep.text_norm import normalize_transcript

CASES = [
    # raw, upper, lower, none
    ("Hello, world!", "HELLO WORLD", "hello world", "Hello, world!"),
    ("  don't  [noise] stop ", "DON'T [NOISE] STOP", "don't [noise] stop", "don't [noise] stop"),
    ("你好，世界。", "你好世界", "你好世界", "你好，世界。"),
    ("こんにちは、世界！", "こんにちは世界", "こんにちは世界", "こんにちは、世界！"),
    ("我有3个苹果, OK?", "我有3个苹果 OK", "我有3个苹果 ok", "我有3个苹果, OK?"),
    ("Straße-Ölbaum", "STRASSE ÖLBAUM", "straße ölbaum", "Straße-Ölbaum"),
    ("?!", "", "", "?!"),
]


@pytest.mark.parametrize("raw, upper, lower, none", CASES)
def test_modes(raw, upper, lower, none):
    assert normalize_transcript(raw) == normalize_transcript(raw, "upper") == upper
    assert normalize_transcript(raw, "lower") == lower
    assert normalize_transcript(raw, "none") == none


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="upper|lower|none"):
        normalize_transcript("x", "title")


def test_cli_mode(tmp_path):
    src = tmp_path / "text"
    src.write_text("u1 Hello, World!\nu2 你好，世界。\n", encoding="utf-8")
    r = subprocess.run([sys.executable, f"{REPO}/tools/normalize_text.py", "--mode", "lower",
                        str(src)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode("utf-8") == "u1 hello world\nu2 你好世界\n"

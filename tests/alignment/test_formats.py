"""CTM, SRT and TextGrid writers against hand-written expected files."""
import os

import pytest

from wenet.alignment.align import WordSpan
from wenet.alignment.formats import (ctm_lines, fill_tier, srt_text, srt_timestamp,
                                       subtitle_groups, textgrid_text)

EXPECTED = os.path.join(os.path.dirname(__file__), "timing_expected")


def _expected(name):
    with open(os.path.join(EXPECTED, name), encoding="utf-8") as f:
        return f.read()


# (word, start, end, confidence)
SENTENCE = [("the", 0.10, 0.30, 0.95), ("cat", 0.30, 0.62, 0.876), ("sat", 0.70, 1.00, 0.5),
            ("on", 1.00, 1.10, 1.0), ("a", 1.10, 1.20, 1.0), ("mat", 1.20, 1.60, 1.0),
            ("and", 1.60, 1.80, 1.0), ("then", 1.80, 2.00, 1.0),
            ("it", 2.00, 2.30, 1.0),          # 9th word: a new cue (8 words at most)
            ("slept", 2.30, 2.80, 1.0),
            ("soundly", 4.00, 4.50, 1.0),     # 1.2 s pause: a new cue
            ("all", 4.50, 4.70, 1.0),
            ("day", 4.70, 8.40, 1.0)]         # would make the cue 4.4 s long: a new cue


def _words(rows):
    return [WordSpan(w, s, e, c) for w, s, e, c in rows]


def test_ctm():
    text = "".join(line + "\n" for line in ctm_lines("utt1", _words(SENTENCE[:3])))
    assert text == _expected("words.ctm")


def test_srt():
    assert srt_text(_words(SENTENCE)) == _expected("words.srt")


def test_srt_groups_and_timestamps():
    groups = subtitle_groups(_words(SENTENCE), max_words=3, max_seconds=100, max_gap_s=100)
    assert [len(g) for g in groups] == [3, 3, 3, 3, 1]
    assert srt_timestamp(3723.4567) == "01:02:03,457"
    assert srt_timestamp(0) == "00:00:00,000"
    assert srt_text([]) == ""


def test_textgrid():
    words = [(0.1, 0.4, "hi"), (0.4, 0.8, 'say "yo"')]
    tokens = [(0.1, 0.2, "\u2581h"), (0.2, 0.4, "i"), (0.5, 0.8, "\u2581yo")]
    assert textgrid_text(1.25, {"words": words, "tokens": tokens}) == _expected("words.TextGrid")


def test_fill_tier_covers_the_duration():
    assert fill_tier([], 2.0) == [(0.0, 2.0, "")]
    # out of order, overlapping, past the end, and a zero-length item
    items = [(1.5, 2.5, "c"), (0.0, 0.5, "a"), (0.4, 1.0, "b"), (1.2, 1.2, "z")]
    assert fill_tier(items, 2.0) == [(0.0, 0.5, "a"), (0.5, 1.0, "b"), (1.0, 1.5, ""),
                                     (1.5, 2.0, "c")]


def test_praat_reads_the_textgrid(tmp_path):
    """Praat itself (through parselmouth, when installed) reads the file back."""
    parselmouth = pytest.importorskip("parselmouth")
    path = tmp_path / "a.TextGrid"
    path.write_text(_expected("words.TextGrid"), encoding="utf-8")
    grid = parselmouth.read(str(path))
    assert parselmouth.praat.call(grid, "Get number of tiers") == 2
    assert parselmouth.praat.call(grid, "Get number of intervals", 2) == 6
    assert parselmouth.praat.call(grid, "Get label of interval", 1, 3) == 'say "yo"'
    assert parselmouth.praat.call(grid, "Get end time of interval", 2, 5) == pytest.approx(0.8)

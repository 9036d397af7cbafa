"""Text formats for timed words: CTM, SRT subtitles and Praat TextGrid.

Each writer returns the text (so callers can write it atomically with
``utils.file_utils.atomic_open``, or print it). Times are in seconds.

- CTM (NIST): ``key channel start duration word confidence`` per word, times with
  two decimals, confidence with two.
- SRT: numbered cues ``HH:MM:SS,mmm --> HH:MM:SS,mmm`` then the words; a cue holds
  at most ``max_words`` words, spans at most ``max_seconds`` and is cut at a pause
  longer than ``max_gap_s``.
- TextGrid: Praat's long text format, interval tiers that cover ``[0, duration]``;
  the gaps between items become intervals with empty text.
"""
from __future__ import annotations

import os
from typing import List, Mapping, Sequence, Tuple

from wenet.alignment.align import WordSpan

Interval = Tuple[float, float, str]  # (start s, end s, text)


def ctm_lines(key: str, words: Sequence[WordSpan], channel: str = "1") -> List[str]:
    """CTM lines (no newline) for the words of one utterance."""
    return [f"{key} {channel} {w.start_s:.2f} {max(0.0, w.end_s - w.start_s):.2f} "
            f"{w.word} {w.confidence:.2f}" for w in words]


def key_file(directory: str, key: str, suffix: str) -> str:
    """``directory/<key><suffix>``; ValueError when the key would not name a file inside
    ``directory`` (a ``/``, ``..``, an empty key): wav.scp keys are any text but spaces."""
    if not key or key in (".", "..") or "/" in key or os.sep in key or "\0" in key:
        raise ValueError(f"the key '{key}' cannot name a file in {directory} (no '/', '..' "
                         "or empty keys: rename it in the wav.scp)")
    return os.path.join(directory, key + suffix)


def srt_timestamp(seconds: float) -> str:
    """``HH:MM:SS,mmm`` of a time in seconds (rounded to the millisecond)."""
    ms = int(round(max(0.0, seconds) * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d},{ms:03d}"


def subtitle_groups(words: Sequence[WordSpan], max_words: int = 8, max_seconds: float = 4.0,
                    max_gap_s: float = 1.0) -> List[List[WordSpan]]:
    """Consecutive words split into cues: a word starts a new cue when the current one
    has ``max_words`` words, would last longer than ``max_seconds`` with it, or ended
    more than ``max_gap_s`` before it."""
    groups: List[List[WordSpan]] = []
    for w in words:
        cue = groups[-1] if groups else None
        if (cue is None or len(cue) >= max_words or w.end_s - cue[0].start_s > max_seconds
                or w.start_s - cue[-1].end_s > max_gap_s):
            groups.append([w])
        else:
            cue.append(w)
    return groups


def srt_text(words: Sequence[WordSpan], max_words: int = 8, max_seconds: float = 4.0,
             max_gap_s: float = 1.0) -> str:
    """SubRip subtitles of one recording's words (see ``subtitle_groups``)."""
    blocks = []
    for i, cue in enumerate(subtitle_groups(words, max_words, max_seconds, max_gap_s), 1):
        blocks.append(f"{i}\n{srt_timestamp(cue[0].start_s)} --> {srt_timestamp(cue[-1].end_s)}\n"
                      + " ".join(w.word for w in cue) + "\n")
    return "\n".join(blocks)


def _num(x: float) -> str:
    """A time as Praat writes it: shortest decimal form, no trailing zeros."""
    return f"{round(x, 6):.6f}".rstrip("0").rstrip(".") or "0"


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def fill_tier(items: Sequence[Interval], duration: float) -> List[Interval]:
    """Intervals covering ``[0, duration]``: the items (sorted, clipped to the duration,
    an item starting before the previous one's end starts at that end) with empty-text
    intervals in the gaps. Items left with no length are dropped."""
    out: List[Interval] = []
    now = 0.0
    for start, end, text in sorted(items, key=lambda x: (x[0], x[1])):
        start, end = max(start, now), min(end, duration)
        if end <= start:
            continue
        if start > now:
            out.append((now, start, ""))
        out.append((start, end, text))
        now = end
    if now < duration or not out:
        out.append((now, duration, ""))
    return out


def textgrid_text(duration: float, tiers: Mapping[str, Sequence[Interval]]) -> str:
    """A Praat TextGrid (long text format) with one interval tier per ``tiers`` entry, in
    the mapping's order, each filled to cover ``[0, duration]`` (``fill_tier``)."""
    lines = ['File type = "ooTextFile"', 'Object class = "TextGrid"', "",
             "xmin = 0 ", f"xmax = {_num(duration)} ", "tiers? <exists> ",
             f"size = {len(tiers)} ", "item []: "]
    for n, (name, items) in enumerate(tiers.items(), 1):
        intervals = fill_tier(items, duration)
        lines += [f"    item [{n}]:", '        class = "IntervalTier" ',
                  f"        name = {_quote(name)} ", "        xmin = 0 ",
                  f"        xmax = {_num(duration)} ",
                  f"        intervals: size = {len(intervals)} "]
        for i, (start, end, text) in enumerate(intervals, 1):
            lines += [f"        intervals [{i}]:", f"            xmin = {_num(start)} ",
                      f"            xmax = {_num(end)} ", f"            text = {_quote(text)} "]
    return "\n".join(lines) + "\n"

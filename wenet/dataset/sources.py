"""Where the data pipeline's samples come from: tar shards and raw data.list lines.

A shard is read as a stream (a local path or an http(s) URL); its members are
grouped by key into ``{key, src, txt, wav, sample_rate}`` samples. A raw list
line is a JSON object whose ``wav`` is a wav.scp value, optionally cut by
``start``/``end``. An ``scp`` list line is a wav.scp line (``key value``) or the
path of an audio file (key: its name without the extension). As in every stage,
bad data is skipped and counted in a ``PipelineStats`` with a warning that names
the utterance and where it came from.

With ``need_text=False`` (recognition) the transcript is optional: a missing or
empty one becomes ``""`` and the utterance is kept; only training and
cross-validation, which need labels, skip such utterances.
"""
from __future__ import annotations

import json
import os
import tarfile
import urllib.request
from typing import BinaryIO, Dict, Iterable, Iterator, Optional, Tuple

from wenet.dataset.audio import (AUDIO_FORMATS, AudioError, RecordingCache, cut_audio, decode_audio,
                                 load_audio)
from wenet.dataset.stats import PipelineStats

Sample = Dict[str, object]
ListItem = Tuple[str, str]  # (where: "data.list:LINE", the line's text)


def open_stream(src: str) -> BinaryIO:
    """A readable binary stream for a shard path or an http(s) URL (streamed, not downloaded)."""
    if "://" in src:
        scheme = src.split("://", 1)[0].lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme '{scheme}' (local paths, http, https)")
        return urllib.request.urlopen(src, timeout=60)
    return open(src, "rb")


def _finish_group(group: Sample, stats: PipelineStats, need_text: bool = True) -> Optional[Sample]:
    """A complete sample from one shard group, or None (counted) when it is unusable."""
    key, src = group["key"], group["src"]
    others = group.get("other_exts", [])
    if others and "audio" not in group:
        stats.warn("unsupported_audio_format",
                   f"utterance {key} in {src}: member {key}.{others[0]} is not audio in a "
                   f"supported format ({', '.join(sorted(AUDIO_FORMATS))})")
        return None
    for ext in others:
        stats.warn("unknown_member", f"shard {src}: member {key}.{ext} is neither "
                   "transcript nor audio, ignored")
    if "txt" not in group and need_text:
        stats.warn("missing_transcript", f"utterance {key} in {src}: no {key}.txt member")
        return None
    if "audio" not in group:
        stats.warn("missing_audio", f"utterance {key} in {src}: no audio member")
        return None
    try:
        txt = group.get("txt", b"").decode("utf-8").strip()
    except UnicodeDecodeError as e:
        if need_text:
            stats.warn("bad_transcript", f"utterance {key} in {src}: transcript is not UTF-8: {e}")
            return None
        txt = ""
    if not txt and need_text:
        stats.warn("empty_transcript", f"utterance {key} in {src}: empty transcript")
        return None
    try:
        wav, rate = decode_audio(group["audio"], f"{key} in {src}")
    except AudioError as e:
        stats.warn("audio_decode_error", str(e))
        return None
    return {"key": key, "src": src, "txt": txt, "wav": wav, "sample_rate": rate}


def _member_key(member: tarfile.TarInfo, src: str, stats: PipelineStats) -> Optional[Tuple[str, str]]:
    """(utterance key, lower-case extension) of a shard member, or None (counted) for a
    member that is not a regular file, has an unsafe name or no extension."""
    name = member.name
    if not member.isfile():
        stats.warn("non_file_member", f"shard {src}: member {name} is not a file, ignored")
        return None
    if name.startswith("/") or ".." in name.replace("\\", "/").split("/"):
        stats.warn("unsafe_member_name", f"shard {src}: member name {name!r} is "
                   "absolute or contains '..', ignored")
        return None
    base = name.rsplit("/", 1)[-1]
    dot = base.rfind(".")
    if dot <= 0:
        stats.warn("unknown_member", f"shard {src}: member {name} has no extension, ignored")
        return None
    return base[:dot], base[dot + 1:].lower()


def _tar_samples(src: str, stream: BinaryIO, stats: PipelineStats,
                 need_text: bool = True) -> Iterator[Sample]:
    """Read one tar shard as a stream, grouping consecutive members by key.

    Members are only read into memory; nothing is ever extracted to disk, so
    absolute or ``..`` names are harmless, but they are refused and counted.
    """
    try:
        tar = tarfile.open(fileobj=stream, mode="r|")
    except (tarfile.TarError, OSError, EOFError) as e:
        stats.warn("shard_unreadable", f"shard {src} is not a readable tar: {e}")
        return
    group: Optional[Sample] = None
    name = "<start>"
    try:
        for member in tar:
            name = member.name
            key_ext = _member_key(member, src, stats)
            if key_ext is None:
                continue
            key, ext = key_ext
            if group is None or group["key"] != key:
                if group is not None:
                    sample = _finish_group(group, stats, need_text)
                    if sample is not None:
                        yield sample
                group = {"key": key, "src": src}
            fobj = tar.extractfile(member)
            data = fobj.read() if fobj is not None else b""
            if ext == "txt":
                group["txt"] = data
            elif ext in AUDIO_FORMATS:
                group["audio"] = data
            else:  # judged when the group ends: audio in an unsupported format, or a stray member
                group.setdefault("other_exts", []).append(ext)
    except (tarfile.TarError, OSError, EOFError) as e:
        lost = f"; utterance {group['key']} lost" if group is not None else ""
        stats.warn("shard_truncated", f"shard {src} is truncated or corrupt at member {name}: "
                   f"{e}{lost}")
        return
    if group is not None:
        sample = _finish_group(group, stats, need_text)
        if sample is not None:
            yield sample


def shard_samples(items: Iterable[ListItem], stats: PipelineStats,
                  need_text: bool = True) -> Iterator[Sample]:
    """Samples from tar shards named in data.list lines (paths or http(s) URLs)."""
    for where, src in items:
        try:
            stream = open_stream(src)
        except (OSError, ValueError) as e:
            stats.warn("shard_unreadable", f"{where}: cannot open shard {src}: {e}")
            continue
        try:
            yield from _tar_samples(src, stream, stats, need_text)
        finally:
            stream.close()


def raw_samples(items: Iterable[ListItem], stats: PipelineStats,
                need_text: bool = True) -> Iterator[Sample]:
    """Samples from raw data.list lines: JSON ``{"key","wav","txt"[,"start","end"]}``
    (``txt`` optional when ``need_text`` is False). Consecutive lines of one piped
    recording (``"wav": "sph2pipe ... |"`` with start/end, as make_raw_list.py writes
    Switchboard's segments) run the pipe once."""
    piped = RecordingCache()
    for where, line in items:
        try:
            obj = json.loads(line)
            key, spec = str(obj["key"]), str(obj["wav"])
            txt = obj["txt"] if need_text or "txt" in obj else ""
            txt = "" if txt is None else str(txt).strip()
            start = float(obj.get("start", 0.0))
            end = obj.get("end")
            end = None if end is None else float(end)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            what = "key, wav, txt" if need_text else "key, wav"
            stats.warn("bad_list_line", f"{where}: not a JSON object with {what}: {e}")
            continue
        if not txt and need_text:
            stats.warn("empty_transcript", f"utterance {key} ({where}): empty transcript")
            continue
        sample = _load(key, where, spec, stats, start, end, piped)
        if sample is not None:
            sample["txt"] = txt
            yield sample


def scp_line(line: str) -> Tuple[str, str]:
    """(key, wav.scp value) of an ``scp`` list line: ``key value`` or an audio file's path
    (a line naming an existing file is a path; its key is the name without the extension)."""
    line = line.strip()
    if os.path.isfile(line) or len(line.split(None, 1)) == 1:
        return os.path.splitext(os.path.basename(line))[0], line
    key, spec = line.split(None, 1)
    return key, spec.strip()


def scp_samples(items: Iterable[ListItem], stats: PipelineStats) -> Iterator[Sample]:
    """Samples without transcript from wav.scp lines or audio file paths (``scp_line``)."""
    for where, line in items:
        key, spec = scp_line(line)
        sample = _load(key, where, spec, stats)
        if sample is not None:
            sample["txt"] = ""
            yield sample


def _load(key: str, where: str, spec: str, stats: PipelineStats, start: float = 0.0,
          end: Optional[float] = None, piped: Optional[RecordingCache] = None) -> Optional[Sample]:
    """A sample with the audio of ``spec``, or None (counted as ``audio_decode_error``).
    A pipe's recording comes through ``piped`` when given (decoded once for its segments)."""
    try:
        if piped is not None and spec.strip().endswith("|"):
            wav, rate = piped.get(spec)
            wav = cut_audio(wav, rate, start, end)
        else:
            wav, rate = load_audio(spec, start, end)
    except AudioError as e:
        stats.warn("audio_decode_error", f"utterance {key} ({where}): {e}")
        return None
    return {"key": key, "src": where, "wav": wav, "sample_rate": rate}

"""The utterance table behind CMVN and the data lists: wav.scp (+ segments) (+ text).

A Kaldi data dir names audio in ``wav.scp`` (a path or ``cmd |``) and, when a
``segments`` file is present, utterances are pieces of those recordings. This
module turns that into one list of :class:`Utterance` and writes WeNet's raw
``data.list`` (JSON lines). Entries that cannot be paired are skipped, counted
and logged, never dropped silently.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Dict, Iterator, List, Optional, Tuple

from wenet.utils.file_utils import atomic_write_text, read_kaldi_map, read_segments

# How many skipped keys to name in the log before only counting them.
_MAX_NAMED = 5


@dataclass(frozen=True)
class Utterance:
    """One utterance: its audio source, optional cut in seconds, optional transcript."""

    key: str
    wav: str
    start: float = 0.0
    end: Optional[float] = None  # None: no segment (whole file); -1: to the end
    txt: Optional[str] = None

    @property
    def is_segment(self) -> bool:
        """True when the utterance is a cut of a longer recording."""
        return self.end is not None


def _log_skipped(what: str, keys: List[str]) -> None:
    if keys:
        named = ", ".join(keys[:_MAX_NAMED]) + (", ..." if len(keys) > _MAX_NAMED else "")
        logging.warning("skipped %d %s: %s", len(keys), what, named)


def read_utterances(wav_scp: str, segments: Optional[str] = None) -> List[Utterance]:
    """Utterances of a data dir, in the order of ``segments`` (if given) or ``wav.scp``.

    Segments whose recording is missing from wav.scp are skipped and counted.
    """
    wavs = read_kaldi_map(wav_scp)
    if segments is None:
        return [Utterance(key, spec) for key, spec in wavs.items()]
    utts: List[Utterance] = []
    missing: List[str] = []
    for seg, (rec, start, end) in read_segments(segments).items():
        if rec not in wavs:
            missing.append(seg)
            continue
        utts.append(Utterance(seg, wavs[rec], start, end))
    _log_skipped(f"segments of {segments} whose recording is not in {wav_scp}", missing)
    if not utts:
        raise ValueError(f"no segment of {segments} refers to a recording in {wav_scp}")
    return utts


def attach_text(utts: List[Utterance], text_file: str) -> List[Utterance]:
    """Pair utterances with their transcripts; either side without the other is skipped and counted."""
    texts: Dict[str, str] = read_kaldi_map(text_file, allow_empty_value=True)
    out = [replace(u, txt=texts[u.key]) for u in utts if u.key in texts]
    have_audio = {u.key for u in utts}
    _log_skipped(f"utterances with audio but no transcript in {text_file}",
                 [u.key for u in utts if u.key not in texts])
    _log_skipped("transcripts with no audio", [k for k in texts if k not in have_audio])
    empty = [u.key for u in out if not u.txt]
    if empty:
        logging.warning("%d utterances have an empty transcript (kept): %s", len(empty),
                        ", ".join(empty[:_MAX_NAMED]))
    if not out:
        raise ValueError(f"no utterance has both audio and a transcript in {text_file}")
    logging.info("%d utterances with audio and transcript", len(out))
    return out


def group_by_recording(utts: List[Utterance]) -> Iterator[Tuple[str, List[Utterance]]]:
    """Runs of consecutive utterances that share an audio source, so it is decoded once."""
    for spec, run in groupby(utts, key=lambda u: u.wav):
        yield spec, list(run)


def raw_list_line(utt: Utterance) -> str:
    """One JSON line of a raw data.list: key, wav, txt (+ start, end for segments)."""
    obj: Dict[str, object] = {"key": utt.key, "wav": utt.wav, "txt": utt.txt or ""}
    if utt.is_segment:
        obj["start"] = utt.start
        obj["end"] = utt.end
    return json.dumps(obj, ensure_ascii=False)


def write_raw_list(utts: List[Utterance], data_list: str) -> None:
    """Write a raw data.list atomically."""
    atomic_write_text(data_list, "".join(raw_list_line(u) + "\n" for u in utts))
    logging.info("wrote %s: %d utterances", data_list, len(utts))

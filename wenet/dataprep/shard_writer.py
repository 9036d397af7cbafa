"""Tar shards for WeNet's ``shard`` data type (run.sh stage 3).

Each shard is an uncompressed tar in which every utterance is two consecutive
members, ``<key>.txt`` (UTF-8 transcript) then ``<key>.<ext>`` (audio), the
layout WeNet 2.x's tools/make_shard_list.py writes and its data pipeline reads.
As there, audio in one of ``wenet.dataset.audio.AUDIO_FORMATS`` (the formats the
shard reader accepts) is stored byte for byte, its suffix named by its content;
other audio libsndfile decodes (AIFF, CAF, ...) is re-encoded as WAV with the same
samples, and audio it cannot decode (m4a, wma, ...) is skipped with a warning
naming the utterance, so no shard holds a member the reader refuses. A segment of
a longer recording, or audio that must be resampled, is stored as 16-bit WAV
(``<key>.wav``).

Unlike WeNet, every shard is written atomically (``atomic_open``: a temporary
``<shard>.tmp.<pid>``, fsynced and renamed), and ``data.list`` is written
(atomically too) only after all shards are in place,
so a killed run never leaves a truncated shard under a listed name. Members
carry fixed metadata (mtime 0, mode 0644), so a rerun gives identical files.
"""
from __future__ import annotations

import io
import logging
import multiprocessing
import os
import tarfile
from typing import List, Optional, Tuple

import torch
from tqdm import tqdm

from wenet.dataset.audio import (AudioError, RecordingCache, audio_header, cut_audio, encode_wav16,
                                 read_audio_bytes, reencode_wav, resample)
from wenet.dataprep.data_list import Utterance
from wenet.utils.file_utils import atomic_open, atomic_write_text, dead_writers_temp_files

_Failure = Tuple[str, str]  # (utterance key, reason)


def shard_name(prefix: str, index: int) -> str:
    """File name of shard ``index``: ``<prefix>_000000000.tar`` (WeNet's numbering)."""
    return f"{prefix}_{index:09d}.tar"


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def utterance_audio(utt: Utterance, resample_rate: Optional[int],
                    cache: RecordingCache) -> Tuple[str, bytes]:
    """(member suffix, bytes) of one utterance's audio; raises AudioError if unreadable."""
    held = cache.lookup(utt.wav) if utt.is_segment else None
    if held is not None:
        wav, rate = held
    else:
        data = read_audio_bytes(utt.wav)
        header = audio_header(data, utt.wav)
        if not utt.is_segment and not (resample_rate and header.rate != resample_rate):
            if header.suffix is not None:
                return header.suffix, data
            logging.debug("utterance %s: %s audio re-encoded as WAV", utt.key, header.container)
            return "wav", reencode_wav(data, utt.wav)
        wav, rate = cache.get(utt.wav, data)
    if utt.is_segment:
        wav = cut_audio(wav, rate, utt.start, utt.end)
        if wav.shape[1] == 0:
            raise AudioError(f"segment [{utt.start}, {utt.end}) of {utt.wav} is empty")
    if resample_rate and rate != resample_rate:
        wav = resample(wav, rate, int(resample_rate))
        rate = int(resample_rate)
    return "wav", encode_wav16(wav, rate)


class _EmptyShard(Exception):
    """Raised inside ``atomic_open`` to drop a shard none of whose utterances could be read."""


def write_shard(utts: List[Utterance], path: str,
                resample_rate: Optional[int] = None) -> Tuple[int, List[_Failure]]:
    """Write one shard atomically → (utterances written, skipped (key, reason) pairs).

    Nothing is left at ``path`` unless the whole shard was written; a shard whose
    utterances all fail is not created.
    """
    cache = RecordingCache()
    failures: List[_Failure] = []
    written = 0
    try:
        with atomic_open(path, "wb") as f:
            with tarfile.open(fileobj=f, mode="w") as tar:
                for utt in utts:
                    try:
                        ext, audio = utterance_audio(utt, resample_rate, cache)
                    except AudioError as e:
                        failures.append((utt.key, str(e)))
                        continue
                    _add_member(tar, f"{utt.key}.txt", (utt.txt or "").encode("utf-8"))
                    _add_member(tar, f"{utt.key}.{ext}", audio)
                    written += 1
            if not written:
                raise _EmptyShard()
    except _EmptyShard:
        pass
    return written, failures


def _write_task(task: Tuple[List[Utterance], str, Optional[int]]) -> Tuple[str, int, List[_Failure]]:
    utts, path, rate = task
    written, failures = write_shard(utts, path, rate)
    return path, written, failures


def _init_worker() -> None:
    torch.set_num_threads(1)


def make_shards(utts: List[Utterance], shards_dir: str, data_list: str, num_utts_per_shard: int,
                num_workers: int = 1, resample_rate: Optional[int] = None,
                prefix: str = "shards") -> List[str]:
    """Write ``utts`` as shards of ``num_utts_per_shard`` and then ``data.list``; → shard paths.

    Shards are written by ``num_workers`` processes. Unreadable audio is skipped
    with a warning naming the utterance, and counted. Temporary files left by an
    earlier killed run are removed first.
    """
    if num_utts_per_shard <= 0:
        raise ValueError(f"num_utts_per_shard must be positive, got {num_utts_per_shard}")
    os.makedirs(shards_dir, exist_ok=True)
    for stale in dead_writers_temp_files(shards_dir, f"{prefix}_"):
        logging.warning("removing %s, left by an interrupted run", stale)
        os.remove(stale)
    tasks = [(utts[i:i + num_utts_per_shard],
              os.path.join(shards_dir, shard_name(prefix, i // num_utts_per_shard)), resample_rate)
             for i in range(0, len(utts), num_utts_per_shard)]
    listed: List[str] = []
    num_failed = 0
    bar = tqdm(total=len(tasks), desc=os.path.basename(os.path.normpath(shards_dir)), unit="shard")
    pool = None
    if num_workers > 1 and len(tasks) > 1:
        pool = multiprocessing.get_context("fork").Pool(min(num_workers, len(tasks)),
                                                        initializer=_init_worker)
        results = pool.imap(_write_task, tasks)
    else:
        results = map(_write_task, tasks)
    try:
        for path, written, failures in results:
            for key, why in failures:
                logging.warning("skipping utterance %s: %s", key, why)
            num_failed += len(failures)
            if written:
                listed.append(path)
            bar.update(1)
    finally:
        bar.close()
        if pool is not None:  # all results are in, or we are failing: stop the workers
            pool.terminate()
            pool.join()
    if num_failed:
        logging.warning("%d of %d utterances skipped (unreadable audio)", num_failed, len(utts))
    if not listed:
        raise RuntimeError(f"no shard written to {shards_dir}: all {len(utts)} utterances failed")
    atomic_write_text(data_list, "".join(p + "\n" for p in listed))
    logging.info("wrote %d shards (%d utterances) and %s", len(listed), len(utts) - num_failed, data_list)
    return listed

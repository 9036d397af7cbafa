"""Building a synthetic corpus on disk: the engine both synthetic corpora share.

``local.synth.generate`` (the built-in corpus) and ``local.synth_broad.generate``
(the broad pretraining corpus) each plan their utterances from a seed, as records
(dicts with at least ``utt``, ``set``, ``text``, ``spoken``, ``voice``,
``voice_id`` and ``pitch_offset``), and say how one record becomes audio. This
module does the rest, the same way for both:

* speaking a record's text with its espeak-ng or flite voice (``engine_samples``);
* writing 16 kHz mono int16 WAVs atomically (``write_wav``) from parallel worker
  processes with a progress bar (``run_jobs``);
* the layout under ``data_root`` and its bookkeeping (``build_corpus``)::

      plan.json                config of the corpus being built (and its hash)
      wav/<set>/<utt>.wav      the audio
      lists/<set>/{wav.scp,text,utt2spk,spk2utt}
      manifest.json            the config, per utterance its record and number of
                               samples, and what the corpus adds (``describe``)
      COMPLETE                 marker holding the config hash; written last

  A rerun checks every WAV (present, well-formed RIFF of the expected length);
  with a matching marker and no bad file it writes nothing, else it redoes only
  the missing or broken WAVs. A changed config removes the old audio first.
"""
from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import soundfile as sf
from tqdm import tqdm

from local.synth.augment import TARGET_RATE
from local.synth.voices import SETS, Voice
from wenet.utils.file_utils import atomic_open, atomic_write_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SynthesisRun:
    """What one call of ``build_corpus`` synthesised: samples per utterance written
    (not counting reused WAVs) and the wall and CPU seconds it took (workers included)."""
    lengths: Dict[str, int]
    wall_s: float
    cpu_s: float


def config_hash(config: dict) -> str:
    """A stable hash of the config (sorted JSON)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def wav_path(data_root: str, record: dict) -> str:
    """Where a record's audio lives."""
    return os.path.join(data_root, "wav", record["set"], record["utt"] + ".wav")


def wav_is_complete(path: str, expected_samples: Optional[int] = None) -> bool:
    """True when ``path`` is a whole 16 kHz mono int16 RIFF/WAVE file (sizes in the
    header agree with the file) holding ``expected_samples`` samples if given."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
                return False
            if struct.unpack("<I", head[4:8])[0] + 8 != size:
                return False
            fmt_ok, data_bytes, pos = False, None, 12
            while pos + 8 <= size:
                f.seek(pos)
                cid, clen = struct.unpack("<4sI", f.read(8))
                if cid == b"fmt ":
                    tag, chans, rate = struct.unpack("<HHI", f.read(8))
                    f.seek(pos + 22)
                    bits = struct.unpack("<H", f.read(2))[0]
                    fmt_ok = tag == 1 and chans == 1 and rate == TARGET_RATE and bits == 16
                elif cid == b"data":
                    data_bytes = clen if pos + 8 + clen <= size else None
                pos += 8 + clen + (clen & 1)
    except (OSError, struct.error):
        return False
    if not fmt_ok or data_bytes is None or data_bytes == 0:
        return False
    return expected_samples is None or data_bytes == 2 * expected_samples


def engine_samples(record: dict, tmp_dir: str) -> Tuple[np.ndarray, int]:
    """Run the record's engine (its ``voice`` speaking ``spoken``) → (float32 samples, rate);
    a failed engine or output that is not mono speech at the voice's rate is an error
    naming the utterance."""
    return voice_samples(Voice(**record["voice"]), record["spoken"], record["pitch_offset"],
                         tmp_dir, record["utt"])


def voice_samples(voice: Voice, text: str, pitch_offset: int, tmp_dir: str,
                  utt: str) -> Tuple[np.ndarray, int]:
    """``text`` spoken by ``voice`` → (float32 samples, rate); errors name ``utt``."""
    if voice.engine == "piper":
        from local.synth.piper_voice import piper_samples
        samples, rate = piper_samples(voice.name, text, voice.rate)
        if not np.any(samples):
            raise RuntimeError(f"utterance {utt}: piper voice {voice.name} gave silence")
        return samples, rate
    raw = os.path.join(tmp_dir, utt + ".raw.wav")
    cmd = voice.command(text, pitch_offset, raw)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0 or not os.path.exists(raw):
        raise RuntimeError(f"utterance {utt}: {' '.join(cmd)} failed "
                           f"({proc.returncode}): {proc.stderr.decode(errors='replace').strip()}")
    try:
        samples, rate = sf.read(raw, dtype="float32")
    finally:
        os.remove(raw)
    if rate != voice.sample_rate or samples.ndim != 1 or not np.any(samples):
        raise RuntimeError(f"utterance {utt}: engine wrote {samples.shape} samples "
                           f"at {rate} Hz, expected speech (mono, {voice.sample_rate} Hz)")
    return samples, rate


def write_wav(path: str, make: Callable[[str], np.ndarray]) -> int:
    """Write ``make(tmp_dir)`` (int16 samples at 16 kHz; ``tmp_dir`` a scratch folder
    removed afterwards) to ``path`` as a WAV, atomically → the number of samples."""
    with tempfile.TemporaryDirectory(prefix="synth_") as tmp:
        wav = make(tmp)
    with atomic_open(path, "wb") as f:
        sf.write(f, wav, TARGET_RATE, subtype="PCM_16", format="WAV")
    return len(wav)


def _init_worker() -> None:
    import torch
    torch.set_num_threads(1)


def run_jobs(work: Callable[[tuple], Tuple[str, int]], jobs: Sequence[tuple], nj: int,
             desc: str) -> Dict[str, int]:
    """``work(job)`` → (utt, samples) for every job, in ``nj`` forked processes (one torch
    thread each) under a progress bar named ``desc`` → {utt: samples}. ``work`` must be
    a module-level function (it is pickled by name)."""
    lengths: Dict[str, int] = {}
    if nj > 1 and len(jobs) > 1:
        with multiprocessing.get_context("fork").Pool(nj, initializer=_init_worker) as pool:
            for utt, n in tqdm(pool.imap_unordered(work, jobs, chunksize=4),
                               total=len(jobs), desc=desc, unit="utt", mininterval=1.0):
                lengths[utt] = n
    else:
        _init_worker()
        for job in tqdm(jobs, desc=desc, unit="utt", mininterval=1.0):
            utt, n = work(job)
            lengths[utt] = n
    return lengths


def write_lists(data_root: str, records: Sequence[dict]) -> None:
    """Kaldi lists ``lists/<set>/{wav.scp,text,utt2spk,spk2utt}`` of the records (speaker:
    the voice), sorted by utterance, with absolute WAV paths."""
    for subset in SETS:
        recs = sorted((r for r in records if r["set"] == subset), key=lambda r: r["utt"])
        out = os.path.join(data_root, "lists", subset)
        os.makedirs(out, exist_ok=True)
        spk2utt: Dict[str, List[str]] = {}
        for r in recs:
            spk2utt.setdefault(r["voice_id"], []).append(r["utt"])
        files = {
            "wav.scp": "".join(f"{r['utt']} {os.path.abspath(wav_path(data_root, r))}\n" for r in recs),
            "text": "".join(f"{r['utt']} {r['text']}\n" for r in recs),
            "utt2spk": "".join(f"{r['utt']} {r['voice_id']}\n" for r in recs),
            "spk2utt": "".join(f"{s} {' '.join(u)}\n" for s, u in sorted(spk2utt.items())),
        }
        for name, content in files.items():
            atomic_write_text(os.path.join(out, name), content)


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        logger.warning("ignoring unreadable %s: %s", path, e)
        return None


def _start_plan(data_root: str, digest: str, config: dict, extra_dirs: Sequence[str]) -> None:
    """Keep what ``data_root`` holds when its plan.json has this ``digest``; otherwise
    remove the audio, lists, ``extra_dirs`` and markers of another plan and write this one."""
    plan_file = os.path.join(data_root, "plan.json")
    old_plan = _read_json(plan_file)
    if old_plan is not None and old_plan.get("hash") == digest:
        return
    if os.path.exists(os.path.join(data_root, "wav")):
        logger.info("%s holds audio of other or unknown parameters; removing it", data_root)
    for name in ("wav", "lists", *extra_dirs):
        shutil.rmtree(os.path.join(data_root, name), ignore_errors=True)
    for name in ("COMPLETE", "manifest.json"):
        if os.path.exists(os.path.join(data_root, name)):
            os.remove(os.path.join(data_root, name))
    atomic_write_text(plan_file, json.dumps({"hash": digest, "config": config}, indent=1) + "\n")


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def build_corpus(data_root: str, config: dict, records: List[dict],
                 synthesise: Callable[[List[dict]], Dict[str, int]],
                 describe: Optional[Callable[[List[dict], SynthesisRun], dict]] = None,
                 extra_dirs: Sequence[str] = ()) -> int:
    """Build (or finish) the corpus of ``records``, planned from ``config``, in ``data_root``
    → the number of WAVs written.

    ``synthesise(todo)`` writes the WAV of every record in ``todo`` (those missing or
    broken, see ``wav_is_complete``) and returns {utt: samples}; ``describe(records,
    run)``, called once every record has its ``num_samples``, gives the manifest's
    fields between ``config`` and ``utterances``. ``extra_dirs`` are folders of
    ``data_root`` the corpus writes besides ``wav`` (made here; removed with the
    audio when the config changes).
    """
    digest = config_hash(config)
    os.makedirs(data_root, exist_ok=True)
    marker = os.path.join(data_root, "COMPLETE")
    _start_plan(data_root, digest, config, extra_dirs)
    manifest = _read_json(os.path.join(data_root, "manifest.json")) or {}
    known = {r["utt"]: r.get("num_samples") for r in manifest.get("utterances", [])} \
        if manifest.get("hash") == digest else {}
    todo = [r for r in records if not wav_is_complete(wav_path(data_root, r), known.get(r["utt"]))]
    if _read_text(marker) == digest and not todo:
        logger.info("corpus in %s is complete (seed %s, %d utterances); nothing to do",
                    data_root, config.get("seed"), len(records))
        return 0
    if os.path.exists(marker):
        os.remove(marker)
    for sub in [*extra_dirs, *(os.path.join("wav", s) for s in SETS)]:
        os.makedirs(os.path.join(data_root, sub), exist_ok=True)
    logger.info("synthesising %d of %d utterances", len(todo), len(records))
    start_wall, start_cpu = time.time(), _cpu_seconds()
    lengths = synthesise(todo)
    run = SynthesisRun(lengths, time.time() - start_wall, _cpu_seconds() - start_cpu)
    for r in records:
        n = lengths.get(r["utt"], known.get(r["utt"]))
        if n is None:  # reused from an interrupted run: the header tells the length
            n = sf.info(wav_path(data_root, r)).frames
        r["num_samples"] = n
    extra = describe(records, run) if describe is not None else {}
    write_lists(data_root, records)
    atomic_write_text(os.path.join(data_root, "manifest.json"), json.dumps(
        {"hash": digest, "config": config, **extra, "utterances": records}) + "\n")
    atomic_write_text(marker, digest + "\n")
    hours = {s: sum(r["num_samples"] for r in records if r["set"] == s) / TARGET_RATE / 3600
             for s in SETS}
    logger.info("corpus done: %s", ", ".join(f"{s} {hours[s]:.3f} h" for s in SETS))
    return len(lengths)

"""Long audio: the WER, wall time and peak memory of ``transcribe.py`` on a test set's
files one by one and joined into one long recording.

    . ./path.sh && python bench/long_audio.py exp/synth_train_zipformer data/test \
        exp/long_audio --runs separate,joined,hour

Runs (``--runs``, comma-separated):

* ``separate``: the data dir's ``wav.scp`` as it is, scored against its ``text``;
* ``joined``: its utterances (sorted by key) concatenated into ``WORK/joined.wav`` with
  ``--gap_s`` seconds of digital silence between them (drawn uniformly, seeded), scored
  against the transcripts joined in the same order (one utterance, key ``joined``);
* ``padded``: every file of the set with ``--pad_edges_s`` seconds of digital silence
  added before and after it (``WORK/padded.scp``), scored against its ``text``: how much
  the model minds a longer, quieter lead-in than its training data had, as a segment cut
  from a long recording has;
* ``joined_whole``: the same file with ``--max_segment_s 0`` (decoded in one piece:
  what transcribe.py did before segmentation; minutes and gigabytes);
* ``hour``: ``joined.wav`` repeated to at least ``--hour_minutes`` (written in blocks):
  memory and time only, not scored (its text is the joined run's, repeated; and
  compute-wer.py's alignment of one utterance of some 20,000 words takes gigabytes).

Each run is one ``wenet/bin/transcribe.py`` child process (``--max_segment_s``,
``--mode``, ``--batch_size`` passed on), timed by wall clock; its peak memory is the
child's own ``ru_maxrss`` (``os.wait4`` in a small launcher process: see
``timed_child``). Scores: ``tools/compute-wer.py``. Prints one
row per run; quote the CPU (printed) and the machine's load with the figures.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from typing import Dict, List, Tuple

import numpy as np
import soundfile as sf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.transcribe import cpu_name  # noqa: E402
from wenet.dataset.audio import load_audio, to_mono  # noqa: E402
from wenet.dataset.sources import scp_line  # noqa: E402


def read_kv(path: str) -> Dict[str, str]:
    """``key value`` lines as a dict (value: the rest of the line)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                key, _, value = line.strip().partition(" ")
                out[key] = value.strip()
    return out


def read_scp(data_dir: str) -> Dict[str, str]:
    """The data dir's ``wav.scp`` as {key: value}."""
    with open(os.path.join(data_dir, "wav.scp"), encoding="utf-8") as f:
        return dict(scp_line(line) for line in f if line.strip())


def write_joined(data_dir: str, work_dir: str, gap_s: Tuple[float, float], seed: int,
                 minutes: float = 0.0, name: str = "joined"
                 ) -> Tuple[str, str, float, List[str]]:
    """``WORK/<name>.wav`` (16-bit, the first file's rate): the utterances sorted by key,
    with ``gap_s`` of silence between them; with ``minutes``, cycled from the first again
    until it is that long. ``WORK/<name>.text`` its reference (key ``name``). Returns
    the path, the reference path, the duration and the keys in order."""
    scp = read_scp(data_dir)
    text = read_kv(os.path.join(data_dir, "text"))
    keys = sorted(scp)
    rng = np.random.default_rng(seed)
    wav_path = os.path.join(work_dir, f"{name}.wav")
    order: List[str] = []
    rate, total, with_out = None, 0, None
    try:
        while rate is None or (total < minutes * 60 * rate if minutes else len(order) < len(keys)):
            key = keys[len(order) % len(keys)]
            wav, r = load_audio(scp[key])
            if rate is None:
                rate = r
                with_out = sf.SoundFile(wav_path, "w", rate, 1, subtype="PCM_16")
            if r != rate:
                raise ValueError(f"{key}: {r} Hz, the first file has {rate} Hz")
            gap = np.zeros(int(round(rng.uniform(*gap_s) * rate)), dtype=np.float32) \
                if total else np.zeros(0, dtype=np.float32)
            samples = np.concatenate([gap, to_mono(wav)[0].numpy()])
            with_out.write(samples)
            total += len(samples)
            order.append(key)
    finally:
        if with_out is not None:
            with_out.close()
    ref = os.path.join(work_dir, f"{name}.text")
    with open(ref, "w", encoding="utf-8") as f:
        f.write(f"{name} " + " ".join(text[k] for k in order if text.get(k)) + "\n")
    return wav_path, ref, total / rate, order


def write_padded(data_dir: str, work_dir: str, pad_s: float) -> Tuple[str, float]:
    """Each file of ``data_dir`` with ``pad_s`` of zeros at both ends, as 16-bit WAVs under
    ``WORK/padded/``, listed in ``WORK/padded.scp`` under the same keys; (scp, duration)."""
    scp = read_scp(data_dir)
    out_dir = os.path.join(work_dir, "padded")
    os.makedirs(out_dir, exist_ok=True)
    scp_path, total = os.path.join(work_dir, "padded.scp"), 0.0
    with open(scp_path, "w", encoding="utf-8") as out:
        for key in sorted(scp):
            wav, rate = load_audio(scp[key])
            zeros = np.zeros(int(round(pad_s * rate)), dtype=np.float32)
            samples = np.concatenate([zeros, to_mono(wav)[0].numpy(), zeros])
            path = os.path.join(out_dir, f"{key}.wav")
            sf.write(path, samples, rate, subtype="PCM_16")
            out.write(f"{key} {path}\n")
            total += len(samples) / rate
    return scp_path, total


def write_repeated(src: str, ref: str, work_dir: str, minutes: float) -> Tuple[str, str, float]:
    """``src`` repeated to at least ``minutes`` as ``WORK/hour.wav`` (block by block), and its
    reference; the path, reference path and duration."""
    info = sf.info(src)
    times = int(np.ceil(minutes * 60 / (info.frames / info.samplerate)))
    wav_path = os.path.join(work_dir, "hour.wav")
    with sf.SoundFile(wav_path, "w", info.samplerate, 1, subtype="PCM_16") as out:
        for _ in range(times):
            with sf.SoundFile(src) as f:
                for block in f.blocks(blocksize=10 * info.samplerate, dtype="int16"):
                    out.write(block)
    words = read_kv(ref)["joined"]
    hour_ref = os.path.join(work_dir, "hour.text")
    with open(hour_ref, "w", encoding="utf-8") as f:
        f.write("hour " + " ".join([words] * times) + "\n")
    return wav_path, hour_ref, times * info.frames / info.samplerate


def run_transcribe(args: argparse.Namespace, inputs: List[str], hyp: str, log: str,
                   max_segment_s: float) -> Tuple[float, float]:
    """transcribe.py in a child process: (wall seconds, peak RSS in MB of that child)."""
    cmd = [sys.executable, os.path.join(REPO, "wenet", "bin", "transcribe.py"),
           "--model_dir", args.model_dir, "--mode", args.mode,
           "--batch_size", str(args.batch_size), "--max_segment_s", str(max_segment_s),
           "--output", hyp, *inputs]
    return timed_child(cmd, log, "transcribe.py")


# Runs the command given after it and writes its peak RSS (kB) to argv[1]. The child of a
# large process would report that process's RSS as its own peak (Linux copies the
# high-water mark across fork and exec); the child of this small launcher does not.
_PEAK_LAUNCHER = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[2:]); "
                  "_, status, usage = os.wait4(p.pid, 0); "
                  "open(sys.argv[1], 'w').write(str(usage.ru_maxrss)); "
                  "sys.exit(os.waitstatus_to_exitcode(status))")


def timed_child(cmd: List[str], log: str, name: str) -> Tuple[float, float]:
    """``cmd`` in a child process, its stderr to ``log``: (wall seconds, peak RSS in MB of
    that child alone); RuntimeError naming ``name`` and the log when it fails."""
    peak = log + ".peak_kb"
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as err:
        code = subprocess.call([sys.executable, "-c", _PEAK_LAUNCHER, peak, *cmd],
                               stdout=subprocess.DEVNULL, stderr=err,
                               env={**os.environ, "PYTHONPATH": REPO})
    wall = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"{name} failed (exit {code}), see {log}")
    with open(peak, encoding="utf-8") as f:
        return wall, int(f.read()) / 1024.0  # kB on Linux


def score(ref: str, hyp: str) -> str:
    """compute-wer.py's ``Overall`` figures: ``x.xx % N=… C=… S=… D=… I=…``."""
    out = subprocess.run([sys.executable, os.path.join(REPO, "tools", "compute-wer.py"),
                          "--v=0", ref, hyp], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": REPO}).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("Overall"))
    return line.split("->", 1)[1].strip()


def segments_of(log: str) -> str:
    """The segment counts transcribe.py (``long_audio.joined``) or the runtime logged, or -."""
    with open(log, encoding="utf-8") as f:
        counts = re.findall(r"recording \S+: (\d+) segments", f.read())
    return "+".join(counts) if counts else "-"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir")
    p.add_argument("data_dir", help="a Kaldi data dir with wav.scp and text")
    p.add_argument("work_dir")
    p.add_argument("--runs", default="separate,joined,hour")
    p.add_argument("--max_segment_s", type=float, default=20.0)
    p.add_argument("--mode", default="attention_rescoring")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--gap_s", default="0.3,0.5", help="range of the silences between files")
    p.add_argument("--pad_edges_s", type=float, default=0.3,
                   help="silence added at both ends of each file by the padded run")
    p.add_argument("--hour_minutes", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    return p


def main() -> None:
    args = get_parser().parse_args()
    runs = [r for r in args.runs.split(",") if r]
    unknown = set(runs) - {"separate", "padded", "joined", "joined_whole", "hour"}
    if unknown:
        sys.exit(f"unknown runs {sorted(unknown)}")
    os.makedirs(args.work_dir, exist_ok=True)
    gap = tuple(float(g) for g in args.gap_s.split(","))
    joined = None
    if set(runs) & {"joined", "joined_whole", "hour"}:
        joined = write_joined(args.data_dir, args.work_dir, gap, args.seed)
    print(f"model {args.model_dir}, data {args.data_dir}, mode {args.mode}, batch "
          f"{args.batch_size}, --max_segment_s {args.max_segment_s:g}, CPU: {cpu_name()}")
    print(f"| run | audio | segments | WER | wall s | peak RSS MB |\n|---|---|---|---|---|---|")
    for run in runs:
        if run == "separate":
            inputs, ref = [os.path.join(args.data_dir, "wav.scp")], \
                os.path.join(args.data_dir, "text")
            scp = read_kv(inputs[0])
            audio_s = sum(sf.info(v).duration for v in scp.values())
            what = f"{len(scp)} files, {audio_s:.0f} s"
        elif run == "padded":
            scp_path, audio_s = write_padded(args.data_dir, args.work_dir, args.pad_edges_s)
            inputs, ref = [scp_path], os.path.join(args.data_dir, "text")
            what = f"{len(read_kv(scp_path))} files, {audio_s:.0f} s"
        elif run in ("joined", "joined_whole"):
            inputs, ref, audio_s = [joined[0]], joined[1], joined[2]
            what = f"1 file, {audio_s:.0f} s"
        else:
            path, _, audio_s = write_repeated(joined[0], joined[1], args.work_dir,
                                              args.hour_minutes)
            ref = None
            inputs, what = [path], f"1 file, {audio_s / 60:.1f} min"
        hyp = os.path.join(args.work_dir, f"{run}.hyp")
        log = os.path.join(args.work_dir, f"{run}.log")
        wall, rss = run_transcribe(args, inputs, hyp, log,
                                   0.0 if run == "joined_whole" else args.max_segment_s)
        wer = "not scored" if run == "hour" else score(ref, hyp)
        print(f"| {run} | {what} | {segments_of(log)} | {wer} | {wall:.1f} | {rss:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()

"""Long audio through the ONNX runtime (``python -m wenet.runtime``): peak memory and WER
of recordings of 1, 5, 10 and 60 minutes against the same audio as separate files.

    . ./path.sh && OMP_NUM_THREADS=1 python bench/runtime_long_audio.py \
        exp/synth_train_zipformer/onnx data/test exp/runtime_long_audio --minutes 1,5,10,60

A recording of ``M`` minutes is the data dir's utterances (sorted by key, cycled from
the first again when the set is shorter) written one after another into
``WORK/long_<M>min.wav`` with ``--gap_s`` seconds of digital silence between them
(drawn uniformly, seeded), 16-bit at the files' rate; its reference is their
transcripts in the same order. ``separate``: the set's files decoded one by one in one
runtime process; the separate figure of a recording is the texts of its utterances
joined in the same order, scored against the same reference. So both rows score the
same audio, once as files and once as one recording that the runtime cuts at pauses
(``--max_segment_s``).

Each run is one runtime child process (``--mode``, ``--batch_size``, ``--num_threads``
passed on), timed by wall clock; its peak memory is the child's own ``ru_maxrss``
(``bench.long_audio.timed_child``). ``--whole_minutes``: the recordings up to that
length are also decoded with ``--max_segment_s 0`` (whole: what the runtime did before it cut long audio; its
memory grows with the square of the length). The WER is the word edit distance over
the reference's words (computed row by row: compute-wer.py's alignment table of one
10,000-word utterance would take gigabytes). Prints one markdown row per run and the
CPU (``lscpu``'s model name).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Sequence, Tuple

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.long_audio import (read_kv, read_scp, segments_of, timed_child,  # noqa: E402
                              write_joined)
from bench.transcribe import cpu_name  # noqa: E402


def word_errors(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """The word edit distance (substitutions + deletions + insertions), one row at a time."""
    vocab: Dict[str, int] = {}
    r = np.array([vocab.setdefault(w, len(vocab)) for w in ref], dtype=np.int64)
    h = np.array([vocab.setdefault(w, len(vocab)) for w in hyp], dtype=np.int64)
    cols = np.arange(len(h) + 1)
    prev = cols.copy()
    for i, word in enumerate(r, 1):
        cur = np.empty_like(prev)
        cur[0] = i
        cur[1:] = np.minimum(prev[1:] + 1, prev[:-1] + (h != word))  # deletion, substitution
        prev = np.minimum.accumulate(cur - cols) + cols  # insertions, left to right
    return int(prev[-1])


def run_runtime(args: argparse.Namespace, inputs: List[str], hyp: str, log: str,
                max_segment_s: float) -> Tuple[float, float]:
    """The runtime in a child process: (wall seconds, peak RSS in MB of that child)."""
    cmd = [sys.executable, "-m", "wenet.runtime", "--onnx_dir", args.onnx_dir,
           "--mode", args.mode, "--batch_size", str(args.batch_size),
           "--num_threads", str(args.num_threads), "--max_segment_s", str(max_segment_s),
           "--output", hyp, *inputs]
    return timed_child(cmd, log, "the runtime")


def wer(ref_words: List[str], hyp_text: str) -> str:
    errors = word_errors(ref_words, hyp_text.split())
    return f"{100.0 * errors / max(1, len(ref_words)):.2f} % ({errors}/{len(ref_words)})"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("onnx_dir")
    p.add_argument("data_dir", help="a Kaldi data dir with wav.scp and text")
    p.add_argument("work_dir")
    p.add_argument("--minutes", default="1,5,10,60")
    p.add_argument("--whole_minutes", type=float, default=0.0,
                   help="also decode recordings up to this long whole (--max_segment_s 0)")
    p.add_argument("--max_segment_s", type=float, default=20.0)
    p.add_argument("--mode", default="attention_rescoring")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--num_threads", type=int, default=1)
    p.add_argument("--gap_s", default="0.3,0.5", help="range of the silences between files")
    p.add_argument("--seed", type=int, default=0)
    return p


def main() -> None:
    args = get_parser().parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    scp = read_scp(args.data_dir)
    gap = tuple(float(g) for g in args.gap_s.split(","))
    print(f"onnx {args.onnx_dir}, data {args.data_dir} ({len(scp)} files), mode {args.mode}, "
          f"batch {args.batch_size}, {args.num_threads} thread(s), --max_segment_s "
          f"{args.max_segment_s:g}, CPU: {cpu_name()}")
    print("| run | audio | segments | WER | wall s | peak RSS MB |\n|---|---|---|---|---|---|")
    sep_hyp = os.path.join(args.work_dir, "separate.hyp")
    wall, rss = run_runtime(args, [os.path.join(args.data_dir, "wav.scp")], sep_hyp,
                            os.path.join(args.work_dir, "separate.log"), args.max_segment_s)
    separate = read_kv(sep_hyp)
    print(f"| separate | {len(scp)} files | - | - | {wall:.1f} | {rss:.0f} |", flush=True)
    for minutes in (float(m) for m in args.minutes.split(",") if m):
        name = f"long_{minutes:g}min"
        path, ref_path, seconds, order = write_joined(args.data_dir, args.work_dir, gap,
                                                      args.seed, minutes, name)
        ref = read_kv(ref_path)[name].split()
        what = f"{seconds / 60:.1f} min, {len(order)} utts, {len(ref)} words"
        print(f"| {name} as separate files | {what} | - | "
              f"{wer(ref, ' '.join(separate.get(k, '') for k in order))} | - | - |")
        runs = [(name, args.max_segment_s)] + \
            ([(f"{name} whole", 0.0)] if minutes <= args.whole_minutes else [])
        for run, max_segment_s in runs:
            hyp = os.path.join(args.work_dir, f"{run.replace(' ', '_')}.hyp")
            log = os.path.join(args.work_dir, f"{run.replace(' ', '_')}.log")
            wall, rss = run_runtime(args, [path], hyp, log, max_segment_s)
            print(f"| {run} | {what} | {segments_of(log)} | "
                  f"{wer(ref, read_kv(hyp).get(name, ''))} | {wall:.1f} | {rss:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()

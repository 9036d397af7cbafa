"""Transcription throughput: seconds of audio transcribed per second of wall time.

    . ./path.sh && python bench/transcribe.py --model_dir exp/synth_train_zipformer \
        --data_list raw_wav/test/data.list --data_type shard

The audio of the list is decoded into memory first (not timed); then, for each batch
size, ``Recognizer.iter_results`` transcribes all of it: features (resampling, fbank),
batching, one encoder pass per batch and the mode's search, exactly what
``wenet/bin/transcribe.py`` does after reading the files. Prints one row per batch size
and mode: wall seconds (the fastest of ``--repeat`` passes, since other work on a shared
machine slows some passes down), audio seconds per second and RTF. Quote the CPU
(``lscpu``) with the figures.
"""
from __future__ import annotations

import argparse
import logging
import platform
import time
from typing import List, Tuple

import torch

from wenet.dataset import sources
from wenet.dataset.stats import PipelineStats
from wenet.inference.loader import load_model_dir
from wenet.decode.options import add_search_options, search_options
from wenet.inference.recognizer import Recognizer
from wenet.utils.file_utils import read_lists


def cpu_name() -> str:
    """The CPU model (/proc/cpuinfo), to quote with the figures."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def read_audio(data_list: str, data_type: str, limit: int) -> List[Tuple[str, tuple]]:
    """(key, (wav, rate)) of the list's utterances, at most ``limit`` (0: all)."""
    items = [(f"{data_list}:{i + 1}", line) for i, line in enumerate(read_lists(data_list))]
    stats = PipelineStats("bench")
    if data_type == "shard":
        samples = sources.shard_samples(items, stats, need_text=False)
    elif data_type == "raw":
        samples = sources.raw_samples(items, stats, need_text=False)
    else:
        samples = sources.scp_samples(items, stats)
    out = []
    for s in samples:
        out.append((s["key"], (s["wav"], s["sample_rate"])))
        if limit and len(out) >= limit:
            break
    return out


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--checkpoint", default=None, help="instead of final.zip / newest avg")
    p.add_argument("--data_list", required=True)
    p.add_argument("--data_type", default="shard", choices=["shard", "raw", "scp"])
    p.add_argument("--modes", default="attention_rescoring ctc_greedy_search")
    p.add_argument("--batch_sizes", default="1 16")
    add_search_options(p, ("beam_size", "ctc_weight"))
    p.add_argument("--limit", type=int, default=0, help="at most this many utterances")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--gpu", type=int, default=-1)
    p.add_argument("--repeat", type=int, default=3,
                   help="passes per row; the fastest counts (a shared machine's load varies)")
    return p


def main() -> None:
    args = get_parser().parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    device = f"cuda:{args.gpu}" if args.gpu >= 0 else "cpu"
    loaded = load_model_dir(args.model_dir, device, args.checkpoint)
    audio = read_audio(args.data_list, args.data_type, args.limit)
    audio_s = sum(wav.size(1) / rate for _, (wav, rate) in audio)
    print(f"model {loaded.checkpoint} ({'TorchScript' if loaded.scripted else 'eager'}), "
          f"{len(audio)} utterances, {audio_s:.1f} s of audio, {args.threads} threads, "
          f"{device}, CPU: {cpu_name()}")
    print(f"{'mode':<22} {'batch':>5} {'wall s':>8} {'audio s/s':>10} {'RTF':>7}")
    options = search_options(args)
    for mode in args.modes.split():
        for batch_size in (int(b) for b in args.batch_sizes.split()):
            asr = Recognizer(loaded, options, batch_size)
            walls = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                with torch.no_grad():
                    n = sum(1 for _ in asr.iter_results(audio, mode))
                if device != "cpu":
                    torch.cuda.synchronize()
                walls.append(time.perf_counter() - start)
                assert n == len(audio), f"{len(audio) - n} utterances were skipped"
            wall = min(walls)
            print(f"{mode:<22} {batch_size:>5} {wall:>8.2f} {audio_s / wall:>10.1f} "
                  f"{wall / audio_s:>7.4f}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Throughput of the training data pipeline: seconds of audio delivered per second
of wall time by ONE DataLoader worker (fbank + SpecAugment + shuffle/sort + batching),
and the CPU cost of a pass in the training process with and without
``dataset_conf.cache_features``.

Data: ../shared/corpora/speechocean762/train when present, else data/train of the
built-in corpus. The Kaldi data dir is turned into tar shards on local disk with
tools/make_shard_list.py when that tool exists, otherwise into a raw list.

    . ./path.sh && python bench/data_pipeline.py [--max_utts 1000] [--speed_perturb]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

import soundfile as sf
import torch
from torch.utils.data import DataLoader

from wenet.dataset.dataset import Dataset
from wenet.dataset.tokenizer import SPACE
from wenet.dataset.audio import load_audio
from wenet.utils.file_utils import read_kaldi_map

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_data_dir() -> Tuple[str, str]:
    """(Kaldi data dir, root that its relative wav.scp paths start from)."""
    so = os.path.join(REPO, "..", "shared", "corpora", "speechocean762")
    if os.path.isfile(os.path.join(so, "train", "wav.scp")):
        return os.path.join(so, "train"), so
    builtin = os.path.join(REPO, "data", "train")
    if os.path.isfile(os.path.join(builtin, "wav.scp")):
        return builtin, REPO
    sys.exit("no data: neither ../shared/corpora/speechocean762 nor data/train (run stage 0)")


def duration(spec: str) -> float:
    """Seconds of audio behind a wav.scp value (a path or ``cmd |``)."""
    if spec.rstrip().endswith("|"):
        wav, rate = load_audio(spec)
        return wav.size(1) / rate
    return sf.info(spec).duration


def make_list(data_dir: str, root: str, max_utts: int, work: str) -> Tuple[str, str, float]:
    """Write a data.list (shards if the shard tool exists, else raw); returns
    (data_type, list path, total seconds of audio)."""
    wavs = read_kaldi_map(os.path.join(data_dir, "wav.scp"))
    texts = read_kaldi_map(os.path.join(data_dir, "text"))
    keys = sorted(k for k in wavs if k in texts)[:max_utts]
    paths: Dict[str, str] = {k: wavs[k] if wavs[k].rstrip().endswith("|")
                             else os.path.normpath(os.path.join(root, wavs[k])) for k in keys}
    seconds = sum(duration(p) for p in paths.values())
    with open(os.path.join(work, "wav.scp"), "w", encoding="utf-8") as f:
        f.writelines(f"{k} {paths[k]}\n" for k in keys)
    with open(os.path.join(work, "text"), "w", encoding="utf-8") as f:
        f.writelines(f"{k} {texts[k]}\n" for k in keys)
    data_list = os.path.join(work, "data.list")
    tool = os.path.join(REPO, "tools", "make_shard_list.py")
    if os.path.isfile(tool):
        subprocess.run([sys.executable, tool, "--num_utts_per_shard", "200", "--nj", "2",
                        os.path.join(work, "wav.scp"), os.path.join(work, "text"),
                        os.path.join(work, "shards"), data_list], check=True)
        return "shard", data_list, seconds
    logging.warning("tools/make_shard_list.py not found: benchmarking a raw list instead")
    with open(data_list, "w", encoding="utf-8") as f:
        for k in keys:
            f.write(json.dumps({"key": k, "wav": paths[k], "txt": texts[k]}, ensure_ascii=False) + "\n")
    return "raw", data_list, seconds


def char_table(texts: List[str]) -> Dict[str, int]:
    chars = sorted(set("".join(texts).replace(" ", SPACE)))
    table = {"<blank>": 0, "<unk>": 1}
    table.update({c: i + 2 for i, c in enumerate(chars)})
    table["<sos/eos>"] = len(table)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max_utts", type=int, default=1000)
    parser.add_argument("--speed_perturb", action="store_true")
    parser.add_argument("--dither", type=float, default=0.1)
    parser.add_argument("--passes", type=int, default=2, help="timed passes (the best is reported)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    data_dir, root = find_data_dir()
    with tempfile.TemporaryDirectory() as work:
        data_type, data_list, seconds = make_list(data_dir, root, args.max_utts, work)
        texts = list(read_kaldi_map(os.path.join(work, "text")).values())
        conf = {
            "filter_conf": {"max_length": 40960, "min_length": 0, "token_max_length": 400},
            "fbank_conf": {"dither": args.dither},  # FeatureConf's bins and frames
            "speed_perturb": args.speed_perturb,
            "spec_aug": True, "spec_aug_conf": {"num_t_mask": 2, "num_f_mask": 2,
                                                "max_t": 50, "max_f": 10},
            "shuffle": True, "shuffle_conf": {"shuffle_size": 1500},
            "sort": True, "sort_conf": {"sort_size": 500},
            "batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 12000},
        }
        ds = Dataset(data_type, data_list, char_table(texts), conf)
        best = float("inf")
        for epoch in range(args.passes):
            ds.set_epoch(epoch)
            loader = DataLoader(ds, batch_size=None, num_workers=1, prefetch_factor=8)
            utts = 0
            start = time.perf_counter()
            for batch in ds.consume(loader):
                utts += len(batch["keys"])
            elapsed = time.perf_counter() - start
            best = min(best, elapsed)
            print(f"pass {epoch}: {utts} utterances, {seconds:.0f} s of audio in {elapsed:.2f} s "
                  f"({seconds / elapsed:.0f} s/s)")
        # The same work in this process, timed in CPU seconds: what one worker costs
        # when it has a core to itself (the wall figure above depends on machine load).
        ds.set_epoch(args.passes)
        cpu_start = time.process_time()
        for _ in ds.consume(ds):
            pass
        cpu = time.process_time() - cpu_start
        print(f"in-process pass: {cpu:.2f} CPU s ({seconds / cpu:.0f} s of audio per CPU second)")
        if not args.speed_perturb:
            # dataset_conf.cache_features: the first pass fills the cache, later ones reuse it
            cached = Dataset(data_type, data_list, char_table(texts), dict(conf, cache_features=True))
            for epoch, what in ((0, "filling the cache"), (1, "from the cache")):
                cached.set_epoch(epoch)
                cpu_start = time.process_time()
                for _ in cached.consume(cached):
                    pass
                cpu = time.process_time() - cpu_start
                print(f"cache_features pass {epoch} ({what}): {cpu:.2f} CPU s "
                      f"({seconds / cpu:.0f} s of audio per CPU second)")
    print(f"data pipeline ({data_type}, {os.path.basename(os.path.dirname(data_dir + '/'))}, "
          f"1 worker, speed_perturb={args.speed_perturb}, dither={args.dither}): "
          f"{seconds / best:.0f} s of audio per second")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()

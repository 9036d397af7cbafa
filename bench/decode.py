#!/usr/bin/env python3
"""Decoding speed per mode: real-time factor and utterances per second at several batch sizes.

Data: the built-in corpus's dev set (raw_wav/dev/data.list, made by run.sh
stages 0-3). Model: --checkpoint with its --config (an experiment's train.yaml);
without a checkpoint a RANDOMLY INITIALISED model from conf/train_conformer.yaml
is timed (the search then sees near-uniform posteriors, so attention decoding
runs to the maximum length: an upper bound, not a typical figure).

Features are computed once per batch size before timing; RTF covers the
encoder pass and the search of each mode on its own (model + search time),
"search RTF" the search alone (the seconds decode() charges the mode).

Transducer modes: ``--config conf/train_conformer_rnnt.yaml --modes rnnt_beam_search``
with a transducer checkpoint, or ``--init_checkpoint`` of a CTC/attention model to
time the search on its encoder with untrained transducer heads (near-uniform joint
outputs: every beam stays full, the search's worst case).

    . ./path.sh && python bench/decode.py [--checkpoint exp/.../avg_2.pt --config exp/.../train.yaml]
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Dict, List

import torch

from wenet.dataset.dataset import Dataset
from wenet.dataset.fbank import FeatureConf
from wenet.decode import MODES, DecodeOptions, decode
from wenet.inference.batch_decoding import decoding_dataset_conf
from wenet.decode.options import add_search_options, search_options
from wenet.models import model_from_checkpoint
from wenet.train.checkpoint import load_init_weights
from wenet.utils.file_utils import load_yaml, read_symbol_table

CTC_ATTENTION_MODES = [name for name, mode in MODES.items() if not mode.transducer]


@torch.no_grad()
def decode_one_mode(model: torch.nn.Module, batch: Dict[str, torch.Tensor], mode: str,
                    options: DecodeOptions) -> float:
    """What decoding one batch in ``mode`` alone costs: the encoder pass and the search;
    returns the search's own seconds."""
    encoder_out, encoder_mask = model.encode(batch["feats"], batch["feats_lengths"])
    return decode(model, encoder_out, encoder_mask, [mode], options)[mode].seconds


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="conf/train_conformer.yaml")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--init_checkpoint", default=None,
                   help="copy the tensors of this checkpoint whose name and shape match "
                        "(e.g. a CTC/attention model's encoder into a transducer)")
    p.add_argument("--data_list", default="raw_wav/dev/data.list")
    p.add_argument("--data_type", default="shard", choices=["raw", "shard"],
                   help="as run.sh made the list (its default: shard)")
    p.add_argument("--dict", default="data/lang_char/train_unigram128_units.txt")
    p.add_argument("--bpe_model", default="data/lang_char/train_unigram128.model")
    p.add_argument("--modes", default=" ".join(CTC_ATTENTION_MODES))
    p.add_argument("--batch_sizes", default="1 16")
    add_search_options(p, ("beam_size", "ctc_weight"))
    p.add_argument("--max_utts", type=int, default=0, help="0: the whole list")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    return p


def main() -> None:
    args = get_parser().parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for path in (args.data_list, args.dict, args.config):
        if not os.path.exists(path):
            raise SystemExit(f"{path} not found: run run.sh stages 0-3 first (or pass it)")
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = load_yaml(args.config)
    symbols = read_symbol_table(args.dict)
    features = FeatureConf.from_config(configs)
    configs.setdefault("input_dim", features.num_mel_bins)
    configs.setdefault("output_dim", len(symbols))
    configs.setdefault("cmvn_file", None)
    if not args.checkpoint:
        logging.warning("no --checkpoint: timing a randomly initialised model from %s",
                        args.config)
    model = model_from_checkpoint(configs, args.checkpoint, torch.device("cpu"))
    if args.init_checkpoint:
        copied, skipped = load_init_weights(model, args.init_checkpoint, "")
        logging.info("copied %d tensors from %s; not copied: %s", len(copied),
                     args.init_checkpoint, ", ".join(skipped) or "none")
    frame_shift = features.frame_shift / 1000.0
    bpe = args.bpe_model if os.path.exists(args.bpe_model) else None
    rows: List[str] = []
    for bs in [int(b) for b in args.batch_sizes.split()]:
        conf = decoding_dataset_conf(configs.get("dataset_conf", {}), bs)
        batches, n = [], 0
        for batch in Dataset(args.data_type, args.data_list, symbols, conf, bpe,
                             partition=False, training=False):
            batches.append(batch)
            n += len(batch["keys"])
            if args.max_utts and n >= args.max_utts:
                break
        if not batches:
            raise SystemExit(f"no utterance could be read from {args.data_list} "
                             f"(is --data_type {args.data_type} right?)")
        audio = sum(float(b["feats_lengths"].sum()) for b in batches) * frame_shift
        options = search_options(args)
        for mode in args.modes.split():
            decode_one_mode(model, batches[0], mode, options)  # warm-up, not timed
            start = time.perf_counter()
            search = sum(decode_one_mode(model, b, mode, options) for b in batches)
            took = time.perf_counter() - start
            rows.append(f"| {mode} | {bs} | {n} | {audio:.1f} | {took / audio:.4f} | "
                        f"{search / audio:.4f} | {n / took:.2f} |")
            logging.info(rows[-1])
    print("| mode | batch | utts | audio s | RTF | search RTF | utt/s |\n"
          "|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

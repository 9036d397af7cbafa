#!/usr/bin/env python3
"""Hotword biasing: the recall of the worst-recognised words, without and with them
in the context list, and the overall WER, per decoding mode.

1. The test set is decoded without context (``ctc_prefix_beam_search`` and
   ``attention_rescoring``; run.sh stage 5's settings: beam 10, ctc_weight 0.5).
2. Word recall: each reference is aligned with its hypothesis by
   ``wenet.eval.wer.align`` (the alignment compute-wer.py reports); a reference
   word is recalled where it is paired with the same word.  Among the words that
   occur at least ``--min_count`` times in the references, the ``--num_words``
   with the lowest recall (averaged over the modes; ties: more frequent first,
   then alphabetical) become the context list.
3. With ``--dev_list``/``--dev_text``, ``context_score`` is tuned per mode on the
   dev set first: dev's own lowest-recall words form the list there, and the
   score with the highest recall of them whose WER rises by at most
   ``--max_wer_rise`` (absolute %) is kept.  Otherwise ``--context_score`` is used.
4. The test set is decoded once more with the context list; the table shows each
   listed word's recall before/after and the overall WER before/after per mode.

The encoder runs once per set; every decoding pass reuses its output.

    . ./path.sh && python bench/context_biasing.py --exp_dir exp/synth_train_conformer \\
        --checkpoint exp/synth_train_conformer/avg_2.pt \\
        --test_list raw_wav/test/data.list --test_text data/test/text \\
        --dev_list raw_wav/dev/data.list --dev_text data/dev/text \\
        --dict data/lang_char/train_unigram128_units.txt \\
        --bpe_model data/lang_char/train_unigram128.model
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import logging
import os
import time
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from bench.transcribe import cpu_name
from wenet.dataset.dataset import Dataset
from wenet.dataset.tokenizer import Tokenizer
from wenet.decode import DecodeOptions, decode
from wenet.inference.batch_decoding import decoding_dataset_conf
from wenet.decode.context_graph import ContextGraph
from wenet.decode.options import add_search_options, search_options
from wenet.eval.wer import Counts, align, normalize
from wenet.inference.loader import load_model_dir
from wenet.utils.file_utils import read_kaldi_map

MODES = ["ctc_prefix_beam_search", "attention_rescoring"]
Encoded = List[Tuple[List[str], torch.Tensor, torch.Tensor]]   # keys, encoder out, mask
WordStats = Dict[str, List[int]]                                # word -> [count, recalled]


@torch.no_grad()
def encode_set(model, configs: dict, data_list: str, data_type: str, tokenizer: Tokenizer,
               batch_size: int) -> Encoded:
    """The encoder output of every batch of ``data_list`` (one pass, kept for reuse)."""
    conf = decoding_dataset_conf(configs.get("dataset_conf", {}), batch_size)
    dataset = Dataset(data_type, data_list, tokenizer.symbol_table, conf,
                      tokenizer.bpe_model, partition=False, training=False, need_text=False)
    out: Encoded = []
    for batch in dataset:
        enc, mask = model.encode(batch["feats"], batch["feats_lengths"])
        out.append((list(batch["keys"]), enc, mask))
    if not out:
        raise SystemExit(f"no utterance could be read from {data_list} "
                         f"(is --data_type {data_type} right?)")
    return out


def decode_set(model, encoded: Encoded, options: DecodeOptions,
               tokenizer: Tokenizer) -> Dict[str, Dict[str, str]]:
    """{mode: {key: text}} for every mode in MODES (shared CTC n-best per batch)."""
    texts: Dict[str, Dict[str, str]] = {m: {} for m in MODES}
    for keys, enc, mask in encoded:
        results = decode(model, enc, mask, MODES, options)
        for m, res in results.items():
            for key, hyp in zip(keys, res.hyps):
                texts[m][key] = tokenizer.decode(hyp, eos=model.eos)
    return texts


def score(refs: Dict[str, List[str]], hyps: Dict[str, str]) -> Tuple[Counts, WordStats]:
    """Overall error counts and per-word [count, recalled] over the references."""
    total, words = Counts(), {}
    for key, ref in refs.items():
        hyp = normalize(hyps.get(key, "").split(), set(), False, True)
        counts, pairs = align(ref, hyp)
        total.add(counts)
        for r, h in pairs:
            if r:
                stat = words.setdefault(r, [0, 0])
                stat[0] += 1
                stat[1] += int(r == h)
    return total, words


def lowest_recall(stats: Sequence[WordStats], num_words: int, min_count: int) -> List[str]:
    """The ``num_words`` words of at least ``min_count`` occurrences with the lowest
    recall averaged over ``stats`` (one per mode)."""
    def mean_recall(w: str) -> float:
        return sum(s[w][1] / s[w][0] for s in stats) / len(stats)
    candidates = [w for w, (n, _) in stats[0].items() if n >= min_count]
    candidates.sort(key=lambda w: (mean_recall(w), -stats[0][w][0], w))
    return candidates[:num_words]


def build_graph(words: Sequence[str], tokenizer: Tokenizer, context_score: float) -> ContextGraph:
    phrases = []
    for w in words:
        ids, missing = tokenizer.encode(w)
        if missing or not ids:
            logging.warning("context word %s skipped: units %s not in the dictionary", w, missing)
            continue
        phrases.append(ids)
    return ContextGraph(phrases, context_score)


def recall(stats: WordStats, words: Sequence[str]) -> float:
    n = sum(stats[w][0] for w in words)
    return 100.0 * sum(stats[w][1] for w in words) / n if n else 0.0


class Evaluator:
    """One data set, encoded once: decode with or without a context list and score."""

    def __init__(self, model, configs: dict, tokenizer: Tokenizer, data_list: str,
                 text: str, data_type: str, options: DecodeOptions, batch_size: int) -> None:
        self.model, self.tokenizer, self.options = model, tokenizer, options
        self.seconds: List[float] = []  # search time of each run (both modes together)
        self.refs = {k: normalize(v.split(), set(), False, True)
                     for k, v in read_kaldi_map(text, allow_empty_value=True).items()}
        self.encoded = encode_set(model, configs, data_list, data_type, tokenizer, batch_size)
        decoded = {k for keys, _, _ in self.encoded for k in keys}
        self.refs = {k: v for k, v in self.refs.items() if k in decoded}
        logging.info("%s: %d utterances encoded, %d with a reference", data_list,
                     len(decoded), len(self.refs))

    def run(self, words: Sequence[str] = (), context_score: float = 0.0
            ) -> Dict[str, Tuple[Counts, WordStats]]:
        """{mode: (counts, word stats)}, biased towards ``words`` if any."""
        graph = build_graph(words, self.tokenizer, context_score) if words else None
        options = dataclasses.replace(self.options, context_graph=graph)
        start = time.perf_counter()
        texts = decode_set(self.model, self.encoded, options, self.tokenizer)
        self.seconds.append(time.perf_counter() - start)
        return {m: score(self.refs, texts[m]) for m in MODES}


def tune(dev: Evaluator, scores: Sequence[float], num_words: int, min_count: int,
         max_wer_rise: float) -> Dict[str, float]:
    """The context score per mode chosen on the dev set (module docstring, step 3)."""
    base = dev.run()
    words = lowest_recall([base[m][1] for m in MODES], num_words, min_count)
    print(f"\n## Tuning on dev: its {len(words)} lowest-recall words: {' '.join(words)}\n")
    print("| context_score | mode | listed words' recall % | WER % |\n|---|---|---|---|")
    for m in MODES:
        print(f"| 0 (none) | {m} | {recall(base[m][1], words):.1f} | {base[m][0].wer:.2f} |")
    best = {m: (recall(base[m][1], words), -base[m][0].wer, 0.0) for m in MODES}
    for cs in scores:
        res = dev.run(words, cs)
        for m in MODES:
            r, wer = recall(res[m][1], words), res[m][0].wer
            print(f"| {cs:g} | {m} | {r:.1f} | {wer:.2f} |")
            if wer - base[m][0].wer <= max_wer_rise and (r, -wer) > best[m][:2]:
                best[m] = (r, -wer, cs)
    chosen = {m: best[m][2] for m in MODES}
    print(f"\nchosen context_score per mode: {chosen}")
    return chosen


def report(test: Evaluator, chosen: Dict[str, float], num_words: int, min_count: int) -> None:
    """Decode the test set without and with its lowest-recall words; print the table."""
    base = test.run()
    words = lowest_recall([base[m][1] for m in MODES], num_words, min_count)
    after: Dict[str, Tuple[Counts, WordStats]] = {}
    for cs in sorted(set(chosen.values())):
        res = test.run(words, cs) if cs > 0 else base
        after.update({m: res[m] for m in MODES if chosen[m] == cs})
    print(f"\n## Test: the {len(words)} lowest-recall words (>= {min_count} occurrences) "
          f"as the context list\n")
    head = " | ".join(f"{m} before | {m} after" for m in MODES)
    print(f"| word | count | {head} |\n|---|---|" + "---|---|" * len(MODES))
    for w in words:
        cells = " | ".join(f"{100 * base[m][1][w][1] / base[m][1][w][0]:.0f} % | "
                           f"{100 * after[m][1][w][1] / after[m][1][w][0]:.0f} %" for m in MODES)
        print(f"| {w} | {base[MODES[0]][1][w][0]} | {cells} |")
    cells = " | ".join(f"{recall(base[m][1], words):.1f} % | {recall(after[m][1], words):.1f} %"
                       for m in MODES)
    print(f"| all listed | {sum(base[MODES[0]][1][w][0] for w in words)} | {cells} |")
    cells = " | ".join(f"{base[m][0].wer:.2f} % | {after[m][0].wer:.2f} %" for m in MODES)
    print(f"| overall WER | {sum(c.n for c in [base[MODES[0]][0]])} words | {cells} |")
    print("\ncontext_score per mode: " + ", ".join(f"{m} {chosen[m]:g}" for m in MODES))
    for m in MODES:
        print(f"{m}: WER {base[m][0].summary()} -> {after[m][0].summary()}")
    print(f"search time of both modes on the test set ({cpu_name()}, {torch.get_num_threads()} "
          f"thread(s)): {test.seconds[0]:.2f} s without context, "
          + ", ".join(f"{s:.2f} s" for s in test.seconds[1:]) + " with it")


def _checkpoint(args: argparse.Namespace) -> str:
    if args.checkpoint:
        return args.checkpoint
    found = sorted(glob.glob(os.path.join(args.exp_dir, "avg_*.pt")))
    if not found:
        raise SystemExit(f"no avg_*.pt in {args.exp_dir}: pass --checkpoint")
    return found[-1]


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exp_dir", required=True, help="holds train.yaml (and avg_*.pt)")
    p.add_argument("--checkpoint", default=None, help="default: the exp dir's avg_*.pt")
    p.add_argument("--dict", required=True, help="units.txt")
    p.add_argument("--bpe_model", default=None)
    p.add_argument("--test_list", required=True)
    p.add_argument("--test_text", required=True, help="Kaldi text of the test set")
    p.add_argument("--dev_list", default=None, help="tune context_score on this set")
    p.add_argument("--dev_text", default=None)
    p.add_argument("--data_type", default="shard", choices=["raw", "shard"])
    p.add_argument("--scores", default="0.5 1 1.5 2 3 4", help="tried on the dev set")
    p.add_argument("--max_wer_rise", type=float, default=0.25,
                   help="dev tuning: largest WER rise (absolute %%) a chosen score may cause")
    p.add_argument("--num_words", type=int, default=10)
    p.add_argument("--min_count", type=int, default=2)
    add_search_options(p, ("beam_size", "ctc_weight", "context_score"))  # score: without a dev set
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    return p


def main(argv: Optional[List[str]] = None) -> None:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.set_num_threads(args.threads)
    checkpoint = _checkpoint(args)
    logging.info("model %s", checkpoint)
    loaded = load_model_dir(args.exp_dir, "cpu", checkpoint, units=args.dict,
                            bpe_model=args.bpe_model)
    model, configs, tokenizer = loaded.model, loaded.configs, loaded.tokenizer
    options = search_options(args)
    common = (model, configs, tokenizer)
    if args.dev_list:
        if not args.dev_text:
            raise SystemExit("--dev_list needs --dev_text")
        dev = Evaluator(*common, args.dev_list, args.dev_text, args.data_type, options,
                        args.batch_size)
        chosen = tune(dev, [float(s) for s in args.scores.split()], args.num_words,
                      args.min_count, args.max_wer_rise)
    else:
        chosen = {m: args.context_score for m in MODES}
    test = Evaluator(*common, args.test_list, args.test_text, args.data_type, options,
                     args.batch_size)
    report(test, chosen, args.num_words, args.min_count)


if __name__ == "__main__":
    main()

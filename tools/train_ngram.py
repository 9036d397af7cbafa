#!/usr/bin/env python3
"""Train a word n-gram language model (interpolated Kneser-Ney) and write it as ARPA.

Each ``--text`` file holds one sentence per line, already normalised as the
recipe's transcripts are (tools/normalize_text.py); with ``--has_key`` the first
field of each line is an utterance key (a Kaldi ``text`` file) and is dropped.
``FILE:N`` counts that file's sentences N times, so a small in-domain text can
weigh as much as a large general one.  Use the model in decoding with
``recognize.py`` / ``transcribe.py --lm_path``.

    tools/train_ngram.py --order 3 --has_key --text data/train/text:4 \\
        --text corpus/extra_sentences.txt --out data/lm/3gram.arpa

With ``--mix_text`` the ``--text`` sentences (the in-domain text) and the ``--mix_text``
ones (a general background text) each train a model, and the two are interpolated into
one (wenet/lm/ngram_mix.py); ``--mix_weight`` is the in-domain model's weight, by
default estimated by EM on every ``--heldout_every``-th in-domain sentence (with the
in-domain model trained on the others; the final one is trained on all):

    tools/train_ngram.py --order 3 --has_key --text data/train/text \\
        --mix_text corpus/extra_sentences.txt --out data/lm/3gram.arpa
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import Iterator, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from wenet.lm.ngram import NgramLM, train_kneser_ney  # noqa: E402
from wenet.lm.ngram_mix import estimate_mix_weights, mix_ngram_lms  # noqa: E402
from wenet.utils.file_utils import text_lines  # noqa: E402


def _text_arg(value: str) -> Tuple[str, int]:
    path, sep, times = value.rpartition(":")
    if not sep or not times.isdigit() or int(times) < 1:
        return value, 1
    return path, int(times)


def sentences(path: str, has_key: bool) -> Iterator[List[str]]:
    """The word lists of a text file (keys dropped with ``has_key``; empty lines skipped)."""
    for _, line in text_lines(path):
        words = line.split()
        if has_key:
            words = words[1:]
        if words:
            yield words


def perplexity(lm: NgramLM, path: str, has_key: bool) -> Tuple[float, int, int]:
    """(perplexity, words, OOV words) of ``path`` under ``lm``, ``</s>`` counted as a word."""
    total, n, oov = 0.0, 0, 0
    for words in sentences(path, has_key):
        total += lm.sentence_log10_prob(words)
        n += len(words) + 1
        oov += sum(w not in lm.vocab for w in words)
    return 10 ** (-total / max(n, 1)), n, oov


def _mix_weight_arg(value: str) -> Optional[float]:
    if value == "auto":
        return None
    try:
        weight = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'auto' or a number in [0, 1], got {value!r}") from None
    if not 0.0 <= weight <= 1.0:
        raise argparse.ArgumentTypeError(f"a weight in [0, 1], got {value!r}")
    return weight


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--text", action="append", required=True, type=_text_arg,
                   help="training text, one sentence per line; FILE:N repeats it N times")
    p.add_argument("--has_key", action="store_true", help="drop the first field of each line")
    p.add_argument("--order", type=int, default=3)
    p.add_argument("--out", required=True, help="ARPA file to write")
    p.add_argument("--mix_text", action="append", default=[], type=_text_arg,
                   help="background text (FILE[:N], repeatable): trained apart and mixed with "
                        "the --text model")
    p.add_argument("--mix_weight", type=_mix_weight_arg, default=None,
                   help="--mix_text: weight of the --text model, or 'auto' (default): "
                        "estimated on held-out --text sentences")
    p.add_argument("--heldout_every", type=int, default=10,
                   help="--mix_weight auto: every N-th --text sentence is held out")
    p.add_argument("--eval_text", default=None,
                   help="also print the perplexity of this text (same format as --text)")
    return p


def _mixed(args: argparse.Namespace, primary: List[List[str]],
           background: Iterator[List[str]]) -> NgramLM:
    """The --text model mixed with the --mix_text one (weight given or estimated)."""
    general = train_kneser_ney(background, args.order)
    weight = args.mix_weight
    if weight is None:
        held = primary[args.heldout_every - 1::args.heldout_every]
        rest = [s for i, s in enumerate(primary) if (i + 1) % args.heldout_every]
        if not held or not rest:
            raise SystemExit(f"--mix_weight auto: {len(primary)} --text sentences are too few "
                             f"to hold out every {args.heldout_every}-th; give --mix_weight")
        (weight, _), ppl = estimate_mix_weights(
            [train_kneser_ney(rest, args.order), general], held)
        logging.info("mix weight of the --text model %.3f (held-out perplexity %.1f over "
                     "%d sentences)", weight, ppl, len(held))
    print(f"mix weight of the --text model: {weight:.3f}")
    return mix_ngram_lms([train_kneser_ney(primary, args.order), general],
                         [weight, 1.0 - weight])


def main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.heldout_every < 2:
        parser.error(f"--heldout_every must be at least 2, got {args.heldout_every}")

    def all_sentences(texts: List[Tuple[str, int]]) -> Iterator[List[str]]:
        for path, times in texts:
            for _ in range(times):
                yield from sentences(path, args.has_key)
    if args.mix_text:
        lm = _mixed(args, list(all_sentences(args.text)), all_sentences(args.mix_text))
    else:
        lm = train_kneser_ney(all_sentences(args.text), args.order)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    lm.write_arpa(args.out)
    logging.info("wrote %s (%d words)", args.out, len(lm.vocab))
    if args.eval_text:
        ppl, n, oov = perplexity(lm, args.eval_text, args.has_key)
        print(f"{args.eval_text}: perplexity {ppl:.1f} over {n} words "
              f"({oov} outside the vocabulary, {100.0 * oov / max(n, 1):.1f} %)")
        if math.isinf(ppl):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write the broad corpus's sentences as language-model text, one per line.

The sentences are those ``--corpus synth_broad`` speaks (wordnet-base glosses and
examples, fortunes; :mod:`local.synth_broad.text`), already normalised to the
recipe's transcript conventions.  run.sh stage 2 uses them with ``--lm_order N
--lm_broad_text true``, so a small corpus's LM knows far more words than its own
transcripts hold.

    python -m local.synth_broad.lm_text data/lm/broad_sentences.txt
"""
from __future__ import annotations

import argparse
import logging
import os
from typing import List, Optional

from local.synth_broad.text import FORTUNE_DIR, WORDNET_DIR, load_sentences, text_statistics
from wenet.utils.file_utils import atomic_write_text


def main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="text file to write")
    p.add_argument("--cache", default=None,
                   help="the extracted sentences (TSV) kept for reuse; default OUT.tsv")
    p.add_argument("--wordnet_dir", default=WORDNET_DIR)
    p.add_argument("--fortune_dir", default=FORTUNE_DIR)
    args = p.parse_args(argv)
    sentences = load_sentences(args.cache or os.path.splitext(args.out)[0] + ".tsv",
                               args.wordnet_dir, args.fortune_dir)
    atomic_write_text(args.out, "".join(s.text + "\n" for s in sentences))
    stats = text_statistics(sentences)
    logging.info("wrote %s: %d sentences, %d words, %d distinct", args.out, stats["sentences"],
                 stats["words"], stats["vocabulary"])


if __name__ == "__main__":
    main()

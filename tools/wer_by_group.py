#!/usr/bin/env python3
"""WER per group of speakers, e.g. children and adults by speechocean762's spk2age.

Usage: wer_by_group.py --utt2spk FILE --spk2value FILE --bins 'children=0-13,adults=14-120'
                       REF HYP [HYP ...]
Each speaker's value (an age) falls in one bin (inclusive ranges) or, without --bins,
names its group itself (e.g. spk2gender). Prints one row per hypothesis file: WER of
each group and of all utterances, with N.
"""
import argparse
import logging
import sys
from typing import Dict, List, Tuple

from wenet.eval.wer import group_counts, read_transcripts
from wenet.utils.file_utils import read_kaldi_map


def _bins(spec: str) -> List[Tuple[str, float, float]]:
    out = []
    for item in spec.split(","):
        name, _, rng = item.partition("=")
        lo, _, hi = rng.partition("-")
        try:
            out.append((name.strip(), float(lo), float(hi)))
        except ValueError:
            raise ValueError(f"bad bin {item!r} in --bins {spec!r}: expected name=low-high")
    return out


def speaker_groups(spk2value: Dict[str, str], bins: List[Tuple[str, float, float]]) -> Dict[str, str]:
    """speaker -> group: the bin its numeric value falls in, or the value itself (no bins)."""
    if not bins:
        return dict(spk2value)
    out = {}
    for spk, value in spk2value.items():
        hits = [name for name, lo, hi in bins if lo <= float(value) <= hi]
        if len(hits) != 1:
            raise ValueError(f"speaker '{spk}': value {value} falls in {len(hits)} of the bins")
        out[spk] = hits[0]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utt2spk", required=True)
    parser.add_argument("--spk2value", required=True, help="e.g. spk2age or spk2gender")
    parser.add_argument("--bins", default="", help="name=low-high,... (inclusive); empty: "
                                                   "the values are the groups")
    parser.add_argument("ref")
    parser.add_argument("hyps", nargs="+")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="wer_by_group: %(levelname)s: %(message)s")
    try:
        groups = speaker_groups(read_kaldi_map(args.spk2value), _bins(args.bins) if args.bins else [])
        utt2spk = read_kaldi_map(args.utt2spk)
        refs = read_transcripts(args.ref, False)
        missing = sorted({utt2spk.get(u, "?") for u in refs if groups.get(utt2spk.get(u)) is None})
        if missing:
            raise ValueError(f"speakers without a value in {args.spk2value}: {missing[:10]}")
        utt2group = {u: groups[utt2spk[u]] for u in refs}
        names = sorted(set(utt2group.values()))
        print("\t".join(["hyp"] + [f"{g} WER (N)" for g in names + ["all"]]))
        for hyp in args.hyps:
            counts = group_counts(refs, read_transcripts(hyp, False), utt2group)
            print("\t".join([hyp] + [f"{counts[g].wer:.2f} ({counts[g].n})" for g in names + ["all"]]))
    except (ValueError, OSError) as e:
        logging.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

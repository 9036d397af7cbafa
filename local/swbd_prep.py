#!/usr/bin/env python3
"""Text processing for the Switchboard stage 0 (local/swbd1_*.sh, eval2000_data_prep.sh).

Subcommands (all read and write UTF-8 text; errors name file and line):

``ms98-trans FILE...``   MS98 ``*-trans.text`` lines -> ``utt words`` with Kaldi ids
                         ``sw02001-A_000098-001156`` (side, start and end in 10 ms);
                         [silence], <b_aside>, <e_aside> removed, empty turns dropped.
``map-words FIRST``      the MS98 word clean-up on fields FIRST.. of stdin lines:
                         [laughter-story] -> story, [it'n/isn't] -> it'n, partial words
                         -[an]y -> -y and ab[solute]- -> ab-, {yuppiedom} -> yuppiedom,
                         them_1 -> them.
``letters``              single-letter lexicon entries (``b b iy``).
``acronyms LEX OUT MAP`` rewrites acronym entries of a lexicon (words whose
                         pronunciation is the spelled-out letters) in the Fisher form
                         ``i._b._m.`` and writes the word -> form map.
``map-acronyms MAP``     applies that map to stdin transcripts (``i`` excepted).
``eval2000 PEM STM DIR`` Hub5 2000 segments (from the .pem, padded by 0.1 s without
                         overlapping neighbours) and text (from the .stm) in DIR.
``wav-scp FLIST``        wav.scp for the .sph files listed in FLIST, one line per
                         conversation side (sw02001-A = channel 1, -B = channel 2),
                         sorted: ``sph2pipe -f wav -p -c N FILE |`` when sph2pipe is
                         on PATH, else ``python <repo>/tools/sph2wav.py -c N FILE |``
                         (libsndfile: uncompressed SPHERE only).
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
from collections import defaultdict
from typing import Dict, Iterable, Iterator, List, Tuple

# Spelled-out letters in the MS98 phone set (lower case, as the lexicon).
LETTERS: Dict[str, str] = {
    "a": "ey", "b": "b iy", "c": "s iy", "d": "d iy", "e": "iy", "f": "eh f", "g": "jh iy",
    "h": "ey ch", "i": "ay", "j": "jh ey", "k": "k ey", "l": "eh l", "m": "eh m",
    "n": "eh n", "o": "ow", "p": "p iy", "q": "k y uw", "r": "aa r", "s": "eh s",
    "t": "t iy", "u": "y uw", "v": "v iy", "w": "d ah b ax l y uw", "x": "eh k s",
    "y": "w ay", "z": "z iy",
}


def _lines(path: str) -> Iterator[Tuple[int, str]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            yield lineno, line.rstrip("\n")


def ms98_turns(path: str) -> Iterator[str]:
    """Kaldi ``utt words`` lines of one MS98 ``*-trans.text`` file."""
    for lineno, line in _lines(path):
        parts = line.split()
        if not parts:
            continue
        m = re.match(r"^sw(\d{4})([AB])-ms98-a-\d+$", parts[0])
        if len(parts) < 3 or not m:
            raise ValueError(f"{path}:{lineno}: expected 'swNNNN[AB]-ms98-a-NNNN start end words', got {line!r}")
        try:
            start, end = float(parts[1]), float(parts[2])
        except ValueError:
            raise ValueError(f"{path}:{lineno}: start/end are not numbers: {line!r}") from None
        words = [w for w in parts[3:] if w.lower() not in ("[silence]", "<b_aside>", "<e_aside>")]
        if words:
            utt = f"sw0{m.group(1)}-{m.group(2)}_{int(100 * start + 0.5):06d}-{int(100 * end + 0.5):06d}"
            yield utt + " " + " ".join(words)


def map_word(w: str) -> str:
    """The MS98 spelling clean-up of one word (see the module docstring)."""
    w = re.sub(r"^(-?)\[laughter-(.+)\](-?)$", r"\1\2\3", w, flags=re.I)
    w = re.sub(r"^\[(.+)/.+\](-?)$", r"\1\2", w)          # mispronounced: keep what was said
    w = re.sub(r"^-?\[[^][]+\](.+)$", r"-\1", w)          # -[an]y -> -y
    w = re.sub(r"^(.+)\[[^][]+\]-?$", r"\1-", w)          # ab[solute]- -> ab-
    w = re.sub(r"^([^][]+)\[.+\]$", r"\1", w)             # stray bracket tails
    w = re.sub(r"^\{(.+)\}$", r"\1", w)                   # {yuppiedom} -> yuppiedom
    w = re.sub(r"_\d", "", w, count=1)                    # them_1 -> them
    return w


def map_words(lines: Iterable[str], first: int) -> Iterator[str]:
    """Apply map_word to fields ``first``.. (1-based) of each line."""
    for line in lines:
        fields = line.split()
        yield " ".join(f if i + 1 < first else map_word(f) for i, f in enumerate(fields))


def _spelled(word: str) -> str:
    return " ".join(LETTERS[c] for c in word.lower())


def acronym_form(word: str, pron: str) -> str:
    """Fisher form of an acronym entry (``ibm`` -> ``i._b._m.``), or '' when not one."""
    if not re.fullmatch(r"[a-z]+('s|s)?", word.lower()):
        return ""
    letters, tail = word.lower(), ""
    for suffix in ("'s", "s"):
        # A plural or possessive acronym ends in an s/z sound after the letters.
        if letters.endswith(suffix) and len(letters) > len(suffix) and pron.split()[-1] in ("s", "z") \
                and _spelled(letters[: -len(suffix)]) == " ".join(pron.split()[:-1]):
            letters, tail = letters[: -len(suffix)], suffix
            break
    else:
        if "'" in letters or letters.endswith("s") or _spelled(letters) != pron:
            return ""
    return "._".join(letters) + "." + tail


def acronyms(lexicon: str, out: str, map_out: str) -> None:
    """Rewrite the acronym entries of ``lexicon`` into ``out``; the mapping into ``map_out``."""
    entries, mapping = [], {}
    for lineno, line in _lines(lexicon):
        parts = line.split(maxsplit=1)
        if not parts:
            continue
        if len(parts) < 2:
            raise ValueError(f"{lexicon}:{lineno}: word without pronunciation: {line!r}")
        word, pron = parts[0], " ".join(parts[1].split())
        form = acronym_form(word, pron)
        if form:
            mapping[word] = form
        entries.append(f"{form or word} {pron}")
    with open(out, "w", encoding="utf-8") as f:
        f.write("".join(e + "\n" for e in entries))
    with open(map_out, "w", encoding="utf-8") as f:
        f.write("".join(f"{w}\t{mapping[w]}\n" for w in sorted(mapping)))


def map_acronyms(lines: Iterable[str], map_file: str) -> Iterator[str]:
    """Spell acronyms in the Fisher form in ``utt words`` lines."""
    mapping = {}
    for lineno, line in _lines(map_file):
        parts = line.split("\t")
        if len(parts) != 2:
            raise ValueError(f"{map_file}:{lineno}: expected 'word<TAB>form', got {line!r}")
        mapping[parts[0]] = parts[1]
    for line in lines:
        words = line.split()
        # "i" stays a word: in MS98 it is the pronoun far more often than the letter.
        yield " ".join(words[:1] + [w if w == "i" else mapping.get(w, w) for w in words[1:]])


def _hub5_turns(path: str, min_fields: int,
                layout: str) -> Iterator[Tuple[str, str, float, float, List[str]]]:
    """(utt, side, start, end, fields) of each turn of a Hub5 2000 .pem or .stm file, whose
    lines are ``layout`` (``file side speaker start end ...``, at least ``min_fields``
    fields; blank and ``;;`` lines skipped). Both files name a turn
    ``<file>-<side>_<start>-<end>`` (10 ms, truncated), so the segments and the text of
    one turn meet under one utterance id."""
    for lineno, line in _lines(path):
        fields = line.split()
        if not fields or line.startswith(";;"):
            continue
        if len(fields) < min_fields:
            raise ValueError(f"{path}:{lineno}: expected '{layout}', got {line!r}")
        side = f"{fields[0]}-{fields[1]}"
        start, end = float(fields[3]), float(fields[4])
        yield f"{side}_{int(start * 100):06d}-{int(end * 100):06d}", side, start, end, fields


def eval2000(pem: str, stm: str, out_dir: str, pad: float = 0.1) -> None:
    """Write ``segments`` and ``text`` of Hub5 2000 English into ``out_dir``."""
    turns = defaultdict(list)
    for utt, rec, start, end, _ in _hub5_turns(pem, 5, "file side speaker start end"):
        turns[rec].append((start, end, utt))
    segments: List[str] = []
    for rec in sorted(turns):
        segs = sorted(set(turns[rec]))
        for i, (start, end, utt) in enumerate(segs):
            lo = max(0.0, start - pad)
            hi = end + pad
            if i > 0 and segs[i - 1][1] > lo:
                lo = max(min(start, (segs[i - 1][1] + start) / 2), lo)
            if i + 1 < len(segs) and segs[i + 1][0] < hi:
                hi = min(max(end, (end + segs[i + 1][0]) / 2), hi)
            segments.append(f"{utt} {rec} {lo:.2f} {hi:.2f}")
    text = [(utt, " ".join(fields[6:])) for utt, _, _, _, fields
            in _hub5_turns(stm, 6, "file side speaker start end <tags> words")]
    seg_ids = sorted(s.split()[0] for s in segments)
    if sorted(u for u, _ in text) != seg_ids:
        missing = sorted(set(seg_ids) ^ {u for u, _ in text})
        raise ValueError(f"{pem} and {stm} disagree on the segments, e.g. {missing[:3]}")
    with open(os.path.join(out_dir, "segments"), "w", encoding="utf-8") as f:
        f.write("".join(s + "\n" for s in sorted(segments)))
    with open(os.path.join(out_dir, "text"), "w", encoding="utf-8") as f:
        f.write("".join(f"{u} {w}".rstrip() + "\n" for u, w in sorted(text)
                        if "IGNORE_TIME_SEGMENT_" not in w))


def sph_wav_scp(flist: str) -> List[str]:
    """Sorted ``side command |`` wav.scp lines, both sides of every .sph file listed in ``flist``."""
    if shutil.which("sph2pipe"):
        decoder = "sph2pipe -f wav -p"
    else:
        tool = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "sph2wav.py")
        decoder = f"python {tool}"
    lines = []
    for _, path in _lines(flist):
        if path.strip():
            name = re.sub(r"\.sph$", "", os.path.basename(path.strip()), flags=re.IGNORECASE)
            lines += [f"{name}-{side} {decoder} -c {channel} {path.strip()} |"
                      for side, channel in (("A", 1), ("B", 2))]
    return sorted(lines, key=lambda line: line.split(" ", 1)[0])


def _main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Switchboard stage-0 text processing")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("ms98-trans").add_argument("files", nargs="+")
    sub.add_parser("map-words").add_argument("first", type=int)
    sub.add_parser("letters", help="spelled-out single-letter lexicon entries")
    p = sub.add_parser("acronyms")
    for a in ("lexicon", "out", "map"):
        p.add_argument(a)
    sub.add_parser("map-acronyms").add_argument("map")
    p = sub.add_parser("eval2000")
    for a in ("pem", "stm", "out_dir"):
        p.add_argument(a)
    sub.add_parser("wav-scp").add_argument("flist")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s swbd_prep: %(message)s")
    stdin = (line.rstrip("\n") for line in sys.stdin)
    try:
        if args.cmd == "ms98-trans":
            for path in args.files:
                for line in ms98_turns(path):
                    sys.stdout.write(line + "\n")
        elif args.cmd == "map-words":
            sys.stdout.writelines(line + "\n" for line in map_words(stdin, args.first))
        elif args.cmd == "letters":
            sys.stdout.writelines(f"{c} {p}\n" for c, p in sorted(LETTERS.items()))
        elif args.cmd == "acronyms":
            acronyms(args.lexicon, args.out, args.map)
        elif args.cmd == "map-acronyms":
            sys.stdout.writelines(line + "\n" for line in map_acronyms(stdin, args.map))
        elif args.cmd == "wav-scp":
            sys.stdout.writelines(line + "\n" for line in sph_wav_scp(args.flist))
        else:
            eval2000(args.pem, args.stm, args.out_dir)
    except (OSError, ValueError) as e:
        logging.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())

"""Everyday English sentences from Debian text packages, normalised for the recipe.

Sources (both installed by tools/install.sh):

* ``wordnet-base``: every synset's gloss holds a definition ("an entity that has
  physical existence") and often quoted example sentences ("the children were
  playing in the garden"). Examples are kept as they are; definitions are kept
  when they hold no capitalised word after the first (that drops the Latin genus
  names and proper nouns that make up much of WordNet's encyclopaedic part).
* ``fortunes`` / ``fortunes-min``: quotations, jokes and proverbs, split into
  sentences (attribution lines dropped; the files of pictures, code and other
  languages skipped).

Text conventions (those of ``local/synth`` and ``tools/normalize_text.py``): the
transcript is upper-case words of A-Z, apostrophes inside a word kept (DON'T,
O'CLOCK), hyphens and dashes break words. A sentence is *dropped*, not rewritten,
when it holds a digit or a symbol an engine would read aloud (& % $ / + = ...),
an abbreviation (Mr., e.g., U.S., initials) or an all-capitals word of two letters
or more (acronyms, Roman numerals): spelling those out needs context a rule
cannot see, and with ~100,000 candidates dropping costs nothing. Kept: 2 to 20
words. What the engines read (``spoken``) is the same words in lower case, with
the source's commas and final mark kept for the prosody.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from wenet.utils.file_utils import atomic_write_text

WORDNET_DIR = "/usr/share/wordnet"
WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
FORTUNE_DIR = "/usr/share/games/fortunes"
# pictures, text in other languages, program code
FORTUNE_SKIP = frozenset({"ascii-art", "translate-me", "perl"})
# a file each package installs: its absence names the package to install
PACKAGE_MARKERS = (("wordnet-base", os.path.join(WORDNET_DIR, "data.noun")),
                   ("fortunes-min", os.path.join(FORTUNE_DIR, "fortunes")),
                   ("fortunes", os.path.join(FORTUNE_DIR, "wisdom")))
MIN_WORDS, MAX_WORDS = 2, 20
TEXT_VERSION = 2

logger = logging.getLogger(__name__)

_TRANSLATE = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'", "`": "'",
                            "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-",
                            "\u2026": "...", "\t": " "})
_BRACKETED = re.compile(r"\([^()]*\)|\[[^\[\]]*\]|\{[^{}]*\}")
_SPOKEN_SYMBOL = re.compile(r"[0-9&%$@#/\\=+*<>_|~^{}\[\]()]|https?:|www\.")
_ABBREVIATION = re.compile(
    r"\b(?:[A-Za-z]\.){2,}|\b[A-HJ-Z]\.(?=\s|$)|\b(?:mr|mrs|ms|dr|st|jr|sr|vs|etc|prof|gen|col|"
    r"capt|lt|sgt|rev|inc|ltd|co|mt|ft|cf|viz|approx|esp|no|vol|fig|ca)\.", re.IGNORECASE)
_ACRONYM = re.compile(r"\b[A-Z]{2,}\b")
_TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*|[,;:.!?]")
_LEFTOVER = re.compile(r"[^A-Za-z',;:.!?\"\s-]")
_DASH = re.compile(r"\s+-+\s+|-{2,}")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')]*\s+(?=[\"'(]*[A-Z])")


class MissingPackageError(RuntimeError):
    """A Debian package the text comes from is not installed."""


@dataclass(frozen=True)
class Sentence:
    """One sentence: ``text`` the transcript, ``spoken`` what the engines read."""

    source: str
    text: str
    spoken: str


def _ascii(raw: str) -> str:
    raw = raw.translate(_TRANSLATE)
    if raw.isascii():
        return raw
    return "".join(ch for ch in unicodedata.normalize("NFKD", raw) if not unicodedata.combining(ch))


def normalise(raw: str) -> Optional[Tuple[str, str]]:
    """``raw`` sentence -> (transcript, spoken form), or None when it is dropped
    (see the module docstring for the rules)."""
    s = _BRACKETED.sub(" ", _ascii(raw))
    if _SPOKEN_SYMBOL.search(s) or _ABBREVIATION.search(s) or _ACRONYM.search(s) \
            or _LEFTOVER.search(s):
        return None
    words: List[str] = []
    spoken: List[str] = []
    final = "."
    s = _DASH.sub(", ", s).replace("-", " ")  # a dash is a pause, a hyphen a word break
    for tok in _TOKEN.findall(s):
        if tok[0].isalpha():
            words.append(tok.upper())
            spoken.append(tok.lower())
        elif spoken:
            if tok in ".!?":
                final = tok
            if not spoken[-1].endswith(","):
                spoken[-1] += ","
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return None
    spoken[-1] = spoken[-1].rstrip(",") + final
    return " ".join(words), " ".join(spoken)


def wordnet_glosses(path: str) -> Iterator[Tuple[str, str]]:
    """(kind, raw text) of a WordNet ``data.*`` file: kind ``wordnet-example`` for the
    quoted examples, ``wordnet-definition`` for the definitions (before the first quote,
    split at semicolons; only those whose words after the first are lower case)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("  ") or " | " not in line:  # licence header
                continue
            gloss = line.split(" | ", 1)[1].strip()
            for example in re.findall(r'"([^"]+)"', gloss):
                yield "wordnet-example", example
            for definition in gloss.split('"', 1)[0].split(";"):
                definition = definition.strip()
                if definition and not re.search(r"\s[A-Z]", definition):
                    yield "wordnet-definition", definition


def fortune_paragraphs(path: str) -> Iterator[str]:
    """The fortunes of one file (``%`` lines separate them), each joined into one
    line, attribution lines (``-- Author``) and what follows them dropped."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines: List[str] = []
        attributed = False
        for line in f:
            if line.rstrip("\n") == "%":
                if lines:
                    yield " ".join(lines)
                lines, attributed = [], False
            elif line.strip().startswith("--"):
                attributed = True
            elif not attributed:
                lines.append(line.strip())
        if lines:
            yield " ".join(lines)


def split_sentences(paragraph: str) -> List[str]:
    """Split at . ! ? followed by space and a capital letter."""
    return [s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()]


def fortune_files(fortune_dir: str = FORTUNE_DIR) -> List[str]:
    """The fortune text files (UTF-8 ``.u8`` copies where installed), sorted."""
    names = sorted({n[:-3] if n.endswith(".u8") else n for n in os.listdir(fortune_dir)
                    if not n.endswith(".dat") and "." not in n.replace(".u8", "")})
    out = []
    for name in names:
        if name in FORTUNE_SKIP:
            continue
        u8 = os.path.join(fortune_dir, name + ".u8")
        out.append(u8 if os.path.exists(u8) else os.path.join(fortune_dir, name))
    return out


def check_packages(wordnet_dir: str = WORDNET_DIR, fortune_dir: str = FORTUNE_DIR) -> None:
    """Raise MissingPackageError naming each missing package and how to install it."""
    missing = []
    for package, marker in PACKAGE_MARKERS:
        marker = marker.replace(WORDNET_DIR, wordnet_dir).replace(FORTUNE_DIR, fortune_dir)
        if not os.path.exists(marker):
            missing.append((package, marker))
    if missing:
        names = " ".join(p for p, _ in missing)
        raise MissingPackageError(
            "the broad corpus's text comes from Debian packages that are missing: "
            + ", ".join(f"{p} (no {m})" for p, m in missing)
            + f"; install them with: apt-get update && apt-get install -y {names}"
            + " (tools/install.sh does this as root)")


def raw_sentences(wordnet_dir: str = WORDNET_DIR,
                  fortune_dir: str = FORTUNE_DIR) -> Iterator[Tuple[str, str]]:
    """(source, raw sentence) of every source, in a fixed order."""
    for name in WORDNET_FILES:
        yield from wordnet_glosses(os.path.join(wordnet_dir, name))
    for path in fortune_files(fortune_dir):
        for paragraph in fortune_paragraphs(path):
            for sentence in split_sentences(paragraph):
                yield "fortunes", sentence


def extract_sentences(wordnet_dir: str = WORDNET_DIR,
                      fortune_dir: str = FORTUNE_DIR) -> List[Sentence]:
    """Normalised, filtered sentences of the sources, each transcript once (first kept)."""
    check_packages(wordnet_dir, fortune_dir)
    out: List[Sentence] = []
    seen: Set[str] = set()
    dropped = 0
    for source, raw in raw_sentences(wordnet_dir, fortune_dir):
        norm = normalise(raw)
        if norm is None:
            dropped += 1
        elif norm[0] not in seen:
            seen.add(norm[0])
            out.append(Sentence(source, norm[0], norm[1]))
    logger.info("text: %d sentences kept, %d dropped by the filters", len(out), dropped)
    return out


def source_fingerprint(wordnet_dir: str = WORDNET_DIR, fortune_dir: str = FORTUNE_DIR) -> str:
    """Identifies the extractor version and the installed source files (names, sizes)."""
    paths = [os.path.join(wordnet_dir, n) for n in WORDNET_FILES] + fortune_files(fortune_dir)
    desc = [f"v{TEXT_VERSION}"] + [f"{os.path.basename(p)}:{os.path.getsize(p)}" for p in paths]
    return hashlib.sha256("\n".join(desc).encode()).hexdigest()[:16]


def load_sentences(cache_path: str, wordnet_dir: str = WORDNET_DIR,
                   fortune_dir: str = FORTUNE_DIR) -> List[Sentence]:
    """The sentences, from ``cache_path`` (TSV: source, text, spoken) when it was made
    from the same sources by the same extractor, else extracted and cached there."""
    check_packages(wordnet_dir, fortune_dir)
    fingerprint = source_fingerprint(wordnet_dir, fortune_dir)
    header = f"# synth_broad sentences {fingerprint}"
    if os.path.exists(cache_path):
        with open(cache_path, encoding="utf-8") as f:
            if f.readline().rstrip("\n") == header:
                return [Sentence(*line.rstrip("\n").split("\t")) for line in f]
        logger.info("%s was made from other sources; extracting again", cache_path)
    sentences = extract_sentences(wordnet_dir, fortune_dir)
    os.makedirs(os.path.dirname(os.path.abspath(cache_path)), exist_ok=True)
    atomic_write_text(cache_path, header + "\n" + "".join(
        f"{s.source}\t{s.text}\t{s.spoken}\n" for s in sentences))
    return sentences


def vocabulary(texts: Iterable[str]) -> Set[str]:
    """The words of the transcripts."""
    return {w for t in texts for w in t.split()}


def text_statistics(sentences: Sequence[Sentence]) -> dict:
    """Sentences, words, vocabulary and sentences per source."""
    per_source: dict = {}
    for s in sentences:
        per_source[s.source] = per_source.get(s.source, 0) + 1
    return {"sentences": len(sentences), "words": sum(len(s.text.split()) for s in sentences),
            "vocabulary": len(vocabulary(s.text for s in sentences)), "per_source": per_source}

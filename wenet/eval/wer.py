"""Word/character error rate in the manner of WeNet's ``tools/compute-wer.py``.

Tokens are aligned by Levenshtein distance with unit costs.  Among equally
cheap alignments the choice follows WeNet (a deletion is preferred, then an
insertion, then the diagonal step) so S/D/I splits match its reports.
"""
from __future__ import annotations

import dataclasses
import logging
import unicodedata
from typing import Dict, Iterable, List, Optional, Sequence, Set, TextIO, Tuple

from wenet.utils.file_utils import text_lines

# Punctuation dropped in character mode (as WeNet does).
CHAR_MODE_PUNCTS = set("!,?\u3001\u3002\uff01\uff0c\uff1b\uff1f\uff1a\u300c\u300d\ufe30"
                       "\u300e\u300f\u300a\u300b")


@dataclasses.dataclass
class Counts:
    """Error counts; ``n`` is the number of reference tokens (C + S + D).

    On the total of a file, ``no_reference`` lists the hypothesis keys that have no
    reference (not scored) and ``no_hypothesis`` the reference keys without a
    hypothesis (scored as all deletions).
    """
    n: int = 0
    c: int = 0
    s: int = 0
    d: int = 0
    i: int = 0
    no_reference: List[str] = dataclasses.field(default_factory=list)
    no_hypothesis: List[str] = dataclasses.field(default_factory=list)

    def add(self, other: "Counts") -> None:
        self.n += other.n
        self.c += other.c
        self.s += other.s
        self.d += other.d
        self.i += other.i

    @property
    def wer(self) -> float:
        """Error rate in percent; 0 when there is no reference token (as WeNet)."""
        return 100.0 * (self.s + self.d + self.i) / self.n if self.n else 0.0

    def summary(self) -> str:
        return f"{self.wer:4.2f} % N={self.n} C={self.c} S={self.s} D={self.d} I={self.i}"


def split_chars(text: str) -> List[str]:
    """Character-mode tokens: CJK-like letters one per token, other runs kept whole.

    Letters of Unicode category ``Lo`` (Han, kana, ...) become single tokens;
    a run of other characters (a Latin word, a number) stays one token; ``<tag>``
    is its own token even when glued to neighbours; spaces and the punctuation
    in ``CHAR_MODE_PUNCTS`` separate tokens and are dropped.
    """
    out: List[str] = []
    word: List[str] = []

    def flush() -> None:
        if word:
            out.append("".join(word))
            word.clear()

    i = 0
    while i < len(text):
        ch = text[i]
        cat = unicodedata.category(ch)
        if ch.isspace() or cat in ("Zs", "Cn") or ch in CHAR_MODE_PUNCTS:
            flush()
        elif cat == "Lo":
            flush()
            out.append(ch)
        elif ch == "<" and ">" in text[i:]:
            flush()
            j = text.index(">", i)
            out.append(text[i:j + 1])
            i = j
        else:
            word.append(ch)
        i += 1
    flush()
    return out


def strip_tags(token: str) -> str:
    """Remove ``<...>`` spans from a token (``<unk>`` → ``""``, ``a<noise>`` → ``a``)."""
    out: List[str] = []
    i = 0
    while i < len(token):
        if token[i] == "<":
            j = token.find(">", i)
            i = len(token) if j < 0 else j + 1
        else:
            out.append(token[i])
            i += 1
    return "".join(out)


def normalize(tokens: Iterable[str], ignore: Set[str], case_sensitive: bool,
              remove_tags: bool) -> List[str]:
    """Upper-case (unless case-sensitive), drop ignored words, strip tags, drop empties."""
    out = []
    for tok in tokens:
        if not case_sensitive:
            tok = tok.upper()
        if tok in ignore:
            continue
        if remove_tags:
            tok = strip_tags(tok)
        if tok:
            out.append(tok)
    return out


def align(ref: Sequence[str], hyp: Sequence[str]) -> Tuple[Counts, List[Tuple[str, str]]]:
    """Minimum-edit alignment → counts and the aligned ``(ref, hyp)`` pairs ('' = gap)."""
    n, m = len(ref), len(hyp)
    # op codes: 0 start, 1 correct, 2 substitution, 3 deletion, 4 insertion
    dist = [[0] * (m + 1) for _ in range(n + 1)]
    op = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        dist[i][0], op[i][0] = i, 3
    for j in range(1, m + 1):
        dist[0][j], op[0][j] = j, 4
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            best, code = dist[i - 1][j] + 1, 3
            if dist[i][j - 1] + 1 < best:
                best, code = dist[i][j - 1] + 1, 4
            diag = dist[i - 1][j - 1] + (0 if ref[i - 1] == hyp[j - 1] else 1)
            if diag < best:
                best, code = diag, (1 if ref[i - 1] == hyp[j - 1] else 2)
            dist[i][j], op[i][j] = best, code
    counts = Counts()
    pairs: List[Tuple[str, str]] = []
    i, j = n, m
    while op[i][j] != 0:
        code = op[i][j]
        if code in (1, 2):
            pairs.append((ref[i - 1], hyp[j - 1]))
            if code == 1:
                counts.c += 1
            else:
                counts.s += 1
            i, j = i - 1, j - 1
        elif code == 3:
            pairs.append((ref[i - 1], ""))
            counts.d += 1
            i -= 1
        else:
            pairs.append(("", hyp[j - 1]))
            counts.i += 1
            j -= 1
    counts.n = counts.c + counts.s + counts.d
    pairs.reverse()
    return counts, pairs


def _display_width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "AFW" else 1 for c in s)


def format_alignment(pairs: Sequence[Tuple[str, str]], padding: str = " ") -> Tuple[str, str]:
    """``lab:`` and ``rec:`` lines with each column padded to the wider token."""
    lab, rec = ["lab: "], ["rec: "]
    for r, h in pairs:
        w = max(_display_width(r), _display_width(h))
        lab.append(r + padding * (w - _display_width(r)) + " ")
        rec.append(h + padding * (w - _display_width(h)) + " ")
    return "".join(lab), "".join(rec)


def read_transcripts(path: str, char_mode: bool) -> Dict[str, List[str]]:
    """``key text`` file → {key: raw tokens}; empty text allowed; a duplicate key or
    invalid UTF-8 is a ValueError naming the file and line."""
    out: Dict[str, List[str]] = {}
    for lineno, line in text_lines(path):
        parts = line.strip().split(maxsplit=1)
        if not parts:
            continue
        key, text = parts[0], parts[1] if len(parts) > 1 else ""
        if key in out:
            raise ValueError(f"{path}:{lineno}: duplicate key '{key}'")
        out[key] = split_chars(text) if char_mode else text.split()
    return out


def compute_wer(ref_path: str, hyp_path: str, out: TextIO, char_mode: bool = False,
                verbose: int = 1, case_sensitive: bool = False,
                ignore_words: Optional[Set[str]] = None, remove_tags: bool = True,
                padding: str = " ", logger: Optional[logging.Logger] = None) -> Counts:
    """Score ``hyp_path`` against ``ref_path`` and write WeNet's report to ``out``.

    Utterances are taken in reference order.  A reference utterance without a
    hypothesis counts as all deletions and is warned about (WeNet skips it); a
    hypothesis whose key is not in the reference (e.g. unlabelled audio that was
    recognised) cannot be scored: it is warned about, and both kinds are counted on
    a line after ``Overall`` (``Unscored -> ...``, see :func:`unscored_line`).
    """
    log = logger or logging.getLogger(__name__)
    ignore = set(ignore_words or ())
    if not case_sensitive:
        ignore = {w.upper() for w in ignore}
    refs = read_transcripts(ref_path, char_mode)
    hyps = read_transcripts(hyp_path, char_mode)
    extra = [k for k in hyps if k not in refs]
    for k in extra:
        log.warning("%s: hypothesis '%s' has no reference in %s; ignored", hyp_path, k, ref_path)
    total = Counts(no_reference=extra)
    for key, ref_tokens in refs.items():
        ref = normalize(ref_tokens, ignore, case_sensitive, remove_tags)
        if key not in hyps:
            log.warning("%s: no hypothesis for utterance '%s'; counted as %d deletions",
                        hyp_path, key, len(ref))
            total.no_hypothesis.append(key)
        hyp = normalize(hyps.get(key, []), ignore, case_sensitive, remove_tags)
        counts, pairs = align(ref, hyp)
        total.add(counts)
        if verbose:
            lab, rec = format_alignment(pairs, padding)
            out.write(f"\nutt: {key}\nWER: {counts.summary()}\n{lab}\n{rec}\n\n")
    if total.no_hypothesis or extra:
        log.warning("%d reference utterances without hypothesis, %d hypotheses without "
                    "reference", len(total.no_hypothesis), len(extra))
    if verbose:
        out.write("=" * 75 + "\n\n")
    out.write(f"Overall -> {total.summary()}\n")
    if total.no_hypothesis or extra:
        out.write(unscored_line(total) + "\n")
    if not verbose:
        out.write("\n")
    return total


def unscored_line(total: Counts, show: int = 10) -> str:
    """``Unscored -> H hypotheses without reference (keys...); R references without
    hypothesis, counted as deletions (keys...)``: what the ``Overall`` line leaves out."""
    def keys(ks: List[str]) -> str:
        more = f" +{len(ks) - show} more" if len(ks) > show else ""
        return f" ({' '.join(ks[:show])}{more})" if ks else ""
    return (f"Unscored -> {len(total.no_reference)} hypotheses without reference"
            f"{keys(total.no_reference)}; {len(total.no_hypothesis)} references without "
            f"hypothesis, counted as deletions{keys(total.no_hypothesis)}")


def group_counts(refs: Dict[str, List[str]], hyps: Dict[str, List[str]],
                 utt2group: Dict[str, str], case_sensitive: bool = False) -> Dict[str, Counts]:
    """Error counts per group of utterances (``utt2group``: utterance -> group name), and
    ``"all"`` over every reference; a reference without a group is a ValueError naming it,
    one without a hypothesis counts as deletions (as in ``compute_wer``)."""
    out: Dict[str, Counts] = {"all": Counts()}
    for key, ref_tokens in refs.items():
        if key not in utt2group:
            raise ValueError(f"utterance '{key}' has no group")
        counts, _ = align(normalize(ref_tokens, set(), case_sensitive, True),
                          normalize(hyps.get(key, []), set(), case_sensitive, True))
        out.setdefault(utt2group[key], Counts()).add(counts)
        out["all"].add(counts)
    return out

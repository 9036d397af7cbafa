"""Mandarin-accented English for the broad corpus: rewrite a sentence's espeak-ng phonemes.

espeak-ng prints the phonemes it would speak (``espeak-ng -q -x``) and speaks phonemes it
is given inside ``[[ ... ]]`` with the same mnemonics. So an accented utterance is: the
sentence's phonemes (``espeak_words``), rewritten the way Mandarin-L1 speakers of English
are documented to speak (``apply_accent``), spoken back (``phoneme_input``). The transcript
stays the sentence's text; the rules only ever see phonemes.

Each rule fires independently, with probability ``rate * strength``, at each site where it
applies; rules run in ``RULES`` order, each on the output of the ones before.

==================  ==========================================================  ====
rule                what it does (espeak mnemonics)                             rate
==================  ==========================================================  ====
th_s                T (and en-029's t[) -> s, or f one time in four              0.5
dh_d                D -> d, or z one time in five                                0.5
v_w                 v before a vowel -> w                                        0.4
v_f                 v elsewhere (word-final, before a consonant) -> f            0.3
r_l                 r <-> l before a vowel                                       0.1
vowel_length        i: <-> I, u: <-> U                                           0.25
final_devoicing     word-final b d g z Z dZ -> p t k s S tS                      0.3
cluster_reduction   drop the last consonant of a word-final cluster, or the      0.2
                    l r w j of a word-initial cluster (pl -> p, str -> st)
final_deletion      drop a word-final plosive                                    0.15
final_epenthesis    add @ after a word-final plosive                             0.15
==================  ==========================================================  ====

Where the rules come from (read for this module; summaries in my words):

* Deterding, D. (2006), "The pronunciation of English by speakers from China", English
  World-Wide 27(2): thirteen young speakers from north-east, east and central China; the
  most salient feature is a vowel added after word-final plosives (final_epenthesis). A
  study citing it reports his speakers' /θ/ as [f] (the f variant of th_s).
* Liang, E. (2014), "Pronunciation of English consonants, vowels and diphthongs of
  Mandarin-Chinese speakers", Studies in Literature and Language 8(1) (abstract, 50
  speakers): the dental fricatives and regular plural endings are the hard consonants,
  /s/ for /θ/ is typical of northern speakers (th_s), and /iː/, /ɪ/ and /eɪ/ are confused
  (vowel_length).
* Pronunciation Studio (London), "10 English pronunciation errors by Mandarin speakers"
  (teachers' web page): /l/-/r/ confusion (r_l); /v/ replaced by /w/ or /f/ because
  Mandarin has no /v/ (v_w, v_f); th as /s z t d/ (th_s, dh_d); consonant clusters
  reduced, e.g. "asked" without /k t/, "needs" without /z/ (cluster_reduction); one [i]
  for both /iː/ and /ɪ/ (vowel_length).
* Flege, J. E. (1989), "Chinese subjects' perception of the word-final English /t/-/d/
  contrast", J. Acoust. Soc. Am. 86: Mandarin has no word-final obstruents and no final
  /t/-/d/ contrast; this motivates final_devoicing and final_deletion, but it is a
  perception study and says nothing of how often speakers devoice or drop.
* Chang, J. (2001), "Chinese speakers", in Swan & Smith (eds.), Learner English, 2nd ed.,
  CUP, is the teachers' standard reference for all of these features. It was NOT read for
  this module: check it before quoting it for any rule.

The v_w/v_f split by position (w before a vowel, f word-finally) follows teachers'
summaries of the same features; the onset half of cluster_reduction is this project's
choice (the sources give codas). No source read gives a rate per site: L2-ARCTIC (Zhao et
al. 2018, Interspeech) annotates Mandarin speakers' substitutions, deletions and additions
and could, but its annotations were not at hand. Every rate and split above is this
project's estimate, to be tuned on speechocean762 dev (Mandarin-L1 speakers).

espeak details: a word's phonemes are tokenised by longest match over ``INVENTORY``, the
mnemonics of espeak-ng 1.51's tables base, base1, en and its accents en-n, en-rp, en-sc,
en-us, en-us-nyc, en-wi, en-wm (every accent of local/synth/voices.py ESPEAK_ACCENTS),
less those holding '/' (never printed) or '|'. espeak-ng reads ``[[ ]]`` by the same
longest match, a single '|' separating two phonemes; ``espeak_words`` asks for '|' between
phonemes (``--sep``), so a word keeps espeak's own segmentation ("aI|@", not the
triphthong "aI@"). Rules find their sites by phoneme class and position, so accents'
different mnemonics (post-vocalic r in en-gb-scotland only, t[ for /θ/ in en-029) are
handled. espeak still applies its accent's own allophony to what it is given: an added
word-final @ sounds as that accent's final schwa (V in en-gb-scotland, a# in en-gb-x-rp).
A word holding a symbol outside the inventory is left exactly as it is.
"""
from __future__ import annotations

import logging
import random
import subprocess
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

logger = logging.getLogger(__name__)

INVENTORY = frozenset("""
    #@ #X1 #a #e #i #o #u % %% ' '! '' * ** , ,, - 0 0# 02 1 3 3: : ; = ? @ @# @- @2 @5 @L
    A# A: A@ A~ B C D E E# E2 I I# I2 I2# IR J J^ L N N- O O2 O: O@ OI O~ Q Q" Q^ R R2 R3
    S S; T U U@ V VR X Z Z; _ _! _: _:: _;_ _X1 _^_ a a# a#2 a2 aI aI2 aI3 aI@ aU aU@ aa b
    c d d# dZ dZ; d[ e e# e: e@ eI f g h i i: i@ i@3 j k l l# l- l. l^ m m- n n- n. n^ o
    o: o@ oU oU# p q r r" r- r. s s. s; t t# t2 tS tS; t[ u u: v v# w w# x z z# z. z;
    """.split())
_LONGEST = max(len(m) for m in INVENTORY)
STRESS = frozenset("' , '' ,, % %% = '!".split())
VOWELS = frozenset("""
    0 0# 02 3 3: @ @# @2 @5 @L A# A: A@ A~ E E# E2 I I# I2 I2# IR O O2 O: O@ OI O~ U U@ V VR
    a a# a#2 a2 aI aI2 aI3 aI@ aU aU@ aa e# e: e@ eI i i: i@ i@3 o: o@ oU oU# u: e o u @-
    m- n- N- l-""".split())
PLOSIVES = frozenset("p b t d k g t# t2 t[ d[ d#".split())
CONSONANTS = PLOSIVES | frozenset("tS dZ f v T D s z S Z h x C w# z# m n N l r w j".split())
SEPARATOR = "|"            # espeak-ng's separator of two phonemes in [[ ]] input
FINAL_MARKS = (".", "?", "!")
CLAUSE_MARKS = (",",) + FINAL_MARKS  # word-list items that are clause punctuation, not words

Sites = Callable[[Sequence[str]], List[int]]
Rewrite = Callable[[List[str], int, random.Random], None]


@dataclass(frozen=True)
class Rule:
    """One accent feature: ``sites`` lists the token indices where it applies, ``rewrite``
    edits the tokens at one of them (in place); ``change`` says what it does."""

    name: str
    change: str
    rate: float     # probability per eligible site, before ``strength``
    source: str
    sites: Sites
    rewrite: Rewrite


def tokenize(word: str) -> List[str]:
    """Phonemes and stress marks of one word's mnemonics, longest match first; '|' only
    separates. A character no mnemonic starts with becomes a token of its own."""
    tokens, i = [], 0
    while i < len(word):
        for size in range(min(_LONGEST, len(word) - i), 0, -1):
            if word[i:i + size] in INVENTORY:
                tokens.append(word[i:i + size])
                i += size
                break
        else:
            if word[i] != SEPARATOR:
                tokens.append(word[i])
            i += 1
    return tokens


def join_phonemes(tokens: Sequence[str]) -> str:
    """The word's mnemonics with '|' between phonemes (none after a stress mark), so
    espeak-ng reads back exactly these tokens."""
    out = []
    for i, tok in enumerate(tokens):
        out.append(tok)
        if i + 1 < len(tokens) and tok not in STRESS:
            out.append(SEPARATOR)
    return "".join(out)


def _segments(tokens: Sequence[str]) -> List[int]:
    """Indices of the vowels and consonants (not stress marks, pauses or modifiers)."""
    return [i for i, t in enumerate(tokens) if t in VOWELS or t in CONSONANTS]


def _prevocalic(tokens: Sequence[str], i: int) -> bool:
    nxt = [j for j in _segments(tokens) if j > i]
    return bool(nxt) and tokens[nxt[0]] in VOWELS


def _final(tokens: Sequence[str], i: int) -> bool:
    seg = _segments(tokens)
    return bool(seg) and seg[-1] == i


_POSITIONS = {"any": lambda tokens, i: True, "prevocalic": _prevocalic, "final": _final,
              "not prevocalic": lambda tokens, i: not _prevocalic(tokens, i)}


def _pick(options: Tuple[Tuple[str, float], ...], rng: random.Random) -> str:
    if len(options) == 1:  # no draw: a fixed replacement leaves the rng alone
        return options[0][0]
    return rng.choices([p for p, _ in options], [w for _, w in options])[0]


def _substitution(mapping: Dict[str, Tuple[Tuple[str, float], ...]],
                  position: str) -> Tuple[Sites, Rewrite]:
    """Replace a phoneme of ``mapping`` at ``position`` by one of its (phoneme, weight)s."""
    where = _POSITIONS[position]

    def sites(tokens: Sequence[str]) -> List[int]:
        return [i for i, t in enumerate(tokens) if t in mapping and where(tokens, i)]

    def rewrite(tokens: List[str], i: int, rng: random.Random) -> None:
        tokens[i] = _pick(mapping[tokens[i]], rng)
    return sites, rewrite


def _cluster_sites(tokens: Sequence[str]) -> List[int]:
    """The last consonant of a word-final cluster; the l r w j next to the vowel of a
    word-initial cluster (s + plosive onsets are left alone)."""
    seg = _segments(tokens)
    vowels = [j for j in seg if tokens[j] in VOWELS]
    if not vowels:
        return []
    onset = [j for j in seg if j < vowels[0]]
    coda = [j for j in seg if j > vowels[-1]]
    out = []
    if len(onset) >= 2 and tokens[onset[-1]] in ("l", "r", "w", "j"):
        out.append(onset[-1])
    if len(coda) >= 2:
        out.append(coda[-1])
    return out


def _final_plosive(tokens: Sequence[str]) -> List[int]:
    seg = _segments(tokens)
    return [seg[-1]] if seg and tokens[seg[-1]] in PLOSIVES else []


def _delete(tokens: List[str], i: int, rng: random.Random) -> None:
    del tokens[i]


def _add_schwa(tokens: List[str], i: int, rng: random.Random) -> None:
    tokens.insert(i + 1, "@")


_DEVOICED = {"b": "p", "d": "t", "g": "k", "z": "s", "Z": "S", "dZ": "tS"}
_ESTIMATE = "; rate: this project's estimate"
_STUDIO = "Pronunciation Studio, '10 English pronunciation errors by Mandarin speakers'"
_FLEGE = "Flege 1989 (JASA 86): Mandarin has no word-final obstruents"
RULES: Tuple[Rule, ...] = (
    Rule("th_s", "T, t[ -> s (3/4) | f (1/4)", 0.5, "Liang 2014; f: Deterding 2006" + _ESTIMATE,
         *_substitution({p: (("s", 0.75), ("f", 0.25)) for p in ("T", "t[")}, "any")),
    Rule("dh_d", "D -> d (4/5) | z (1/5)", 0.5, _STUDIO + _ESTIMATE,
         *_substitution({"D": (("d", 0.8), ("z", 0.2))}, "any")),
    Rule("v_w", "v before a vowel -> w", 0.4, _STUDIO + _ESTIMATE,
         *_substitution({"v": (("w", 1.0),)}, "prevocalic")),
    Rule("v_f", "v not before a vowel -> f", 0.3, _STUDIO + _ESTIMATE,
         *_substitution({"v": (("f", 1.0),)}, "not prevocalic")),
    Rule("r_l", "r <-> l before a vowel", 0.1, _STUDIO + _ESTIMATE,
         *_substitution({"r": (("l", 1.0),), "l": (("r", 1.0),)}, "prevocalic")),
    Rule("vowel_length", "i: <-> I, u: <-> U", 0.25, "Liang 2014; " + _STUDIO + _ESTIMATE,
         *_substitution({"i:": (("I", 1.0),), "I": (("i:", 1.0),), "u:": (("U", 1.0),),
                         "U": (("u:", 1.0),)}, "any")),
    Rule("final_devoicing", "word-final b d g z Z dZ -> p t k s S tS", 0.3, _FLEGE + _ESTIMATE,
         *_substitution({k: ((v, 1.0),) for k, v in _DEVOICED.items()}, "final")),
    Rule("cluster_reduction", "drop a coda cluster's last consonant / an onset's l r w j", 0.2,
         _STUDIO + " (codas; onsets: project choice)" + _ESTIMATE, _cluster_sites, _delete),
    Rule("final_deletion", "drop a word-final plosive", 0.15, _FLEGE + _ESTIMATE,
         _final_plosive, _delete),
    Rule("final_epenthesis", "add @ after a word-final plosive", 0.15, "Deterding 2006" + _ESTIMATE,
         _final_plosive, _add_schwa),
)


def espeak_words(text: str, voice: str) -> List[str]:
    """The phoneme mnemonics per word that ``espeak-ng -q -x -v voice`` gives for ``text``,
    phonemes separated by '|' (e.g. "the cat, sat." -> ["D|@2", "k|'a|t", ",", "s|'a|t", "."]).

    Words are espeak's: it may fuse unstressed function words ("of the" -> "V|v|D|@2"). A
    clause break in its output becomes the item ","; the text's final . ? or ! is the last
    item. Raises RuntimeError naming the text when espeak-ng fails or prints nothing."""
    cmd = ["espeak-ng", "-q", "-x", f"--sep={SEPARATOR}", "-v", voice, "--stdin"]
    try:
        proc = subprocess.run(cmd, input=" ".join(text.split()), capture_output=True,
                              text=True, check=False)
    except OSError as err:
        raise RuntimeError(f"espeak-ng could not run for text {text!r}: {err}") from err
    clauses = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not clauses:
        raise RuntimeError(f"espeak-ng -x (voice {voice!r}) failed for text {text!r}: "
                           f"exit {proc.returncode}, {proc.stderr.strip() or 'no phonemes'}")
    words: List[str] = []
    for clause in clauses:
        words += clause + [","]
    final = text.rstrip()[-1:]
    words[-1:] = [final] if final in FINAL_MARKS else []
    unknown = {t for w in words if w not in CLAUSE_MARKS for t in tokenize(w)} - INVENTORY
    if unknown:
        logger.warning("espeak-ng gave symbols outside the inventory %s for %r; those words "
                       "stay as they are", sorted(unknown), text)
    return words


def _known(word: str) -> bool:
    return all(t in INVENTORY for t in tokenize(word))


def apply_accent(words: List[str], rng: random.Random, strength: float = 1.0,
                 rules: Sequence[Rule] = RULES) -> Tuple[List[str], Dict[str, int]]:
    """Rewrite ``words`` (``espeak_words`` output): each rule fires at each of its sites
    with probability ``min(1, rate * strength)``. Returns the new words (unchanged words
    as given; clause marks and words with unknown symbols always untouched) and how many
    times each rule fired. Depends only on its arguments and the state of ``rng``."""
    if strength < 0:
        raise ValueError(f"strength must be >= 0, got {strength}")
    counts = {rule.name: 0 for rule in rules}
    out = []
    for word in words:
        if word in CLAUSE_MARKS or not _known(word):
            out.append(word)
            continue
        tokens, changed = tokenize(word), False
        for rule in rules:
            p = min(1.0, rule.rate * strength)
            for i in reversed(rule.sites(tokens)):  # right to left: edits keep indices valid
                if rng.random() < p:
                    rule.rewrite(tokens, i, rng)
                    counts[rule.name] += 1
                    changed = True
        out.append(join_phonemes(tokens) if changed else word)
    return out, counts


def phoneme_input(words: List[str]) -> str:
    """The text to give espeak-ng to speak ``words``: each clause's words inside
    ``[[ ]]``, the clause marks after it ("[[D|@2 k|'a|t]], [[s|'a|t]].")."""
    pieces: List[str] = []
    clause: List[str] = []
    for word in words:
        if word in CLAUSE_MARKS:
            if clause:
                pieces.append("[[" + " ".join(clause) + "]]")
                clause = []
            if pieces:
                pieces[-1] += word
        else:
            clause.append(join_phonemes(tokenize(word)) if _known(word) else word)
    if clause:
        pieces.append("[[" + " ".join(clause) + "]]")
    return " ".join(pieces)

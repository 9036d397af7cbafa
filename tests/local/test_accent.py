"""Mandarin-accent rewriting of espeak-ng phonemes (local/synth_broad/accent.py): each rule's
rate against a binomial bound, its exact rewrites on hand-written words, determinism, and
(with espeak-ng installed) the inventory, the round trip through ``[[ ]]`` and accented audio."""
from __future__ import annotations

import dataclasses
import inspect
import math
import os
import random
import shutil
import subprocess
from typing import Dict, List

import pytest
import soundfile as sf

from local.synth import sentences as small_corpus
from local.synth.voices import ESPEAK_ACCENTS
from local.synth_broad import accent as A
from local.synth_broad.accent import (INVENTORY, RULES, apply_accent, espeak_words, join_phonemes,
                                      phoneme_input, tokenize)

NEEDS_ESPEAK = pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                  reason="espeak-ng is not installed (apt-get install espeak-ng)")
RULE = {rule.name: rule for rule in RULES}

# word (espeak mnemonics, '|' between phonemes) -> eligible sites per rule; hand-counted
SITES: Dict[str, Dict[str, int]] = {
    "th_s": {"T|'I|N|k": 1, "b|'a|T": 1, "t[|r|'i:": 1, "D|I|s": 0},
    "dh_d": {"D|I|s": 1, "m|'V|D|3": 1, "T|'I|N|k": 0},
    "v_w": {"v|'E|r|i": 1, "V|v": 0, "l|'I|v|z": 0},
    "v_f": {"v|'E|r|i": 0, "V|v": 1, "l|'I|v|z": 1},
    "r_l": {"v|'E|r|i": 1, "l|'aI|t": 1, "k|'A@|r|z": 0, "r|'u:|l|z": 1},
    "vowel_length": {"f|'i:|t": 1, "f|'u:|d": 1, "s|'I|t": 1, "g|'U|d": 1, "b|'E|d": 0},
    "final_devoicing": {"k|'A@|z": 1, "f|'u:|d": 1, "b|'I|g": 1, "'E|dZ": 1, "l|'I|v": 0,
                        "d|'O:|g|z|;": 1},
    "cluster_reduction": {"d|'E|s|k": 1, "s|t|r|'i:|t": 1, "s|t|'0|p": 0, "p|l|'eI|s": 1,
                          "'a|s|k|t": 1, "k|'a|t": 0},
    "final_deletion": {"d|'E|s|k": 1, "k|'a|t": 1, "m|'i:|n": 0, "s|'i:": 0},
    "final_epenthesis": {"d|'E|s|k": 1, "b|'E|d": 1, "m|'i:|n": 0},
}
# rule at rate 1: word -> every allowed output (one, unless the rule chooses between two)
EXPECTED: Dict[str, Dict[str, set]] = {
    "th_s": {"T|'I|N|k": {"s|'I|N|k", "f|'I|N|k"}, "t[|r|'i:": {"s|r|'i:", "f|r|'i:"}},
    "dh_d": {"D|I|s": {"d|I|s", "z|I|s"}},
    "v_w": {"v|'E|r|i": {"w|'E|r|i"}, "l|'I|v|z": {"l|'I|v|z"}},
    "v_f": {"V|v": {"V|f"}, "l|'I|v|z": {"l|'I|f|z"}, "v|'E|r|i": {"v|'E|r|i"}},
    "r_l": {"v|'E|r|i": {"v|'E|l|i"}, "r|'u:|l|z": {"l|'u:|l|z"}, "l|'aI|t": {"r|'aI|t"},
            "k|'A@|r|z": {"k|'A@|r|z"}},
    "vowel_length": {"f|'i:|t": {"f|'I|t"}, "f|'u:|d": {"f|'U|d"}, "s|'I|t": {"s|'i:|t"},
                     "g|'U|d": {"g|'u:|d"}},
    "final_devoicing": {"k|'A@|z": {"k|'A@|s"}, "f|'u:|d": {"f|'u:|t"}, "'E|dZ": {"'E|tS"},
                        "d|'O:|g|z|;": {"d|'O:|g|s|;"}},
    "cluster_reduction": {"d|'E|s|k": {"d|'E|s"}, "s|t|r|'i:|t": {"s|t|'i:|t"},
                          "p|l|'eI|s": {"p|'eI|s"}, "'a|s|k|t": {"'a|s|k"},
                          "s|t|'0|p": {"s|t|'0|p"}},
    "final_deletion": {"d|'E|s|k": {"d|'E|s"}, "k|'a|t": {"k|'a"}, "m|'i:|n": {"m|'i:|n"}},
    "final_epenthesis": {"d|'E|s|k": {"d|'E|s|k|@"}, "b|'E|d": {"b|'E|d|@"}},
}
SENTENCES = ["don't look back, something might be gaining on you.",
             "is there anything worth thinking about in the evening?",
             "the very best things in life, they say, are free!"]
# the Speech Accent Archive's elicitation paragraph: most English phonemes in a few lines
STELLA = ("Please call Stella. Ask her to bring these things with her from the store: six spoons "
          "of fresh snow peas, five thick slabs of blue cheese, and maybe a snack for her brother "
          "Bob. We also need a small plastic snake and a big toy frog for the kids. She can scoop "
          "these things into three red bags, and we will go meet her Wednesday at the train station.")
FORTUNES = "/usr/share/games/fortunes/fortunes"


def binomial_ok(k: int, n: int, p: float) -> bool:
    return abs(k - n * p) <= 4 * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("name", sorted(SITES))
def test_sites_match_hand_counts(name):
    for word, n in SITES[name].items():
        assert len(RULE[name].sites(tokenize(word))) == n, word


@pytest.mark.parametrize("name", sorted(SITES))
def test_rule_fires_at_its_rate(name):
    rule = RULE[name]
    words = list(SITES[name]) * 2000
    n_sites = sum(SITES[name].values()) * 2000
    out, counts = apply_accent(words, random.Random(7), rules=(rule,))
    assert set(counts) == {name}
    assert binomial_ok(counts[name], n_sites, rule.rate), (counts[name], n_sites, rule.rate)
    _, half = apply_accent(words, random.Random(8), strength=0.5, rules=(rule,))
    assert binomial_ok(half[name], n_sites, rule.rate / 2), (half[name], n_sites)
    changed = sum(a != b for a, b in zip(words, out))
    assert changed == counts[name]  # one site per word in these lists: one change per firing


@pytest.mark.parametrize("name, phoneme, other, share", [("th_s", "s", "f", 0.75),
                                                         ("dh_d", "d", "z", 0.8)])
def test_choice_between_two_substitutes(name, phoneme, other, share):
    rule = dataclasses.replace(RULE[name], rate=1.0)
    word = "T|'I|N|k" if name == "th_s" else "D|I|s"
    out, _ = apply_accent([word] * 4000, random.Random(3), rules=(rule,))
    firsts = [tokenize(w)[0] for w in out]
    assert set(firsts) == {phoneme, other}
    assert binomial_ok(firsts.count(phoneme), 4000, share)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rate_one_rewrites_every_site_as_specified(name):
    rule = dataclasses.replace(RULE[name], rate=1.0)
    words = list(EXPECTED[name])
    out, counts = apply_accent(words, random.Random(0), rules=(rule,))
    for word, got in zip(words, out):
        assert got in EXPECTED[name][word], (word, got)
    assert counts[name] == sum(SITES[name].get(w, 0) for w in words)


def test_rules_in_order_on_one_word():
    """All rules at rate 1 on "desk": the cluster loses its k, so nothing is final-plosive."""
    everything = tuple(dataclasses.replace(r, rate=1.0) for r in RULES)
    out, counts = apply_accent(["d|'E|s|k"], random.Random(0), rules=everything)
    assert out == ["d|'E|s"]
    assert {k: v for k, v in counts.items() if v} == {"cluster_reduction": 1}


def test_strength_zero_changes_nothing():
    words = [w for table in SITES.values() for w in table] + [",", "."]
    out, counts = apply_accent(words, random.Random(1), strength=0.0)
    assert out == words and set(counts.values()) == {0}
    with pytest.raises(ValueError):
        apply_accent(words, random.Random(1), strength=-0.1)


def test_deterministic_per_seed_and_sees_only_phonemes():
    words = [w for table in SITES.values() for w in table] * 5
    first = apply_accent(words, random.Random(11))
    assert apply_accent(list(words), random.Random(11)) == first
    assert apply_accent(words, random.Random(12)) != first
    assert list(inspect.signature(apply_accent).parameters) == ["words", "rng", "strength", "rules"]


def test_clause_marks_and_unknown_symbols_pass_through():
    words = ["(fr)b|'0|n", ",", "T|'I|N|k", "?"]
    everything = tuple(dataclasses.replace(r, rate=1.0) for r in RULES)
    out, _ = apply_accent(words, random.Random(0), rules=everything)
    assert out[0] == "(fr)b|'0|n" and out[1] == "," and out[3] == "?"
    assert phoneme_input(["(fr)b|'0|n", ",", "D|@2", "k|'a|t", "?"]) == \
        "[[(fr)b|'0|n]], [[D|@2 k|'a|t]]?"


@pytest.mark.parametrize("word, tokens", [
    ("T'INk3", ["T", "'", "I", "N", "k", "3"]),
    ("d'aI|@lEkts", ["d", "'", "aI", "@", "l", "E", "k", "t", "s"]),
    ("d'aI@lEkts", ["d", "'", "aI@", "l", "E", "k", "t", "s"]),  # longest match, like espeak
    ("tS'u:zIN", ["tS", "'", "u:", "z", "I", "N"]),
    ("h@l'oU", ["h", "@", "l", "'", "oU"]),
    ("b'0t#@L", ["b", "'", "0", "t#", "@L"]),
    ("m'oUt#3r-,Ists", ["m", "'", "oU", "t#", "3", "r-", ",", "I", "s", "t", "s"]),
    ("'a:a#:", ["'", "a", ":", "a#", ":"]),
    ("fr'eImw3:k_:", ["f", "r", "'", "eI", "m", "w", "3:", "k", "_:"]),
    ("x(y", ["x", "(", "y"]),  # unknown characters stay, one token each
])
def test_tokenize(word, tokens):
    assert tokenize(word) == tokens
    assert tokenize(join_phonemes(tokens)) == tokens


def _sep_chunks(text: str, voice: str) -> List[str]:
    out = subprocess.run(["espeak-ng", "-q", "-x", "--sep=|", "-v", voice, "--stdin"],
                         input=text, capture_output=True, text=True, check=True).stdout
    return out.split()


@NEEDS_ESPEAK
@pytest.mark.parametrize("voice", ESPEAK_ACCENTS)
def test_inventory_covers_espeak_output(voice):
    """Every phoneme espeak prints for a few hundred words is one token of the inventory,
    and tokenising its '|'-separated words keeps its segmentation."""
    vocab = {w for name in dir(small_corpus) if name.isupper()
             for item in getattr(small_corpus, name) if isinstance(item, str) for w in item.split()}
    text = " ".join(sorted(vocab)) + ". " + STELLA
    if os.path.exists(FORTUNES):
        with open(FORTUNES, encoding="utf-8", errors="replace") as f:
            text += " " + " ".join(f.read().split()[:1500])
    words = _sep_chunks(text, voice)
    assert len(words) > 400
    for word in words:
        for chunk in word.split("|"):
            toks = tokenize(chunk)
            assert all(t in INVENTORY for t in toks), (voice, word, toks)
            phonemes = [t for t in toks if t not in A.STRESS and t != ":" and t[0] != "_"]
            assert len(phonemes) <= 1, (voice, word, chunk, toks)  # one phoneme (+ pauses)


def _duration(text: str, voice: str, path: str) -> float:
    subprocess.run(["espeak-ng", "-v", voice, "-w", path, text], check=True, capture_output=True)
    audio, rate = sf.read(path)
    return len(audio) / rate


@NEEDS_ESPEAK
@pytest.mark.parametrize("voice", ["en-us", "en-gb-scotland"])
@pytest.mark.parametrize("text", SENTENCES)
def test_round_trip_through_phoneme_input(voice, text, tmp_path):
    words = espeak_words(text, voice)
    assert words[-1] == text[-1] and words.count(",") == text.count(",")
    plain = _duration(text, voice, str(tmp_path / "text.wav"))
    again = _duration(phoneme_input(words), voice, str(tmp_path / "phonemes.wav"))
    assert abs(again / plain - 1) <= 0.05, (plain, again)
    if voice == "en-us":  # en-gb-scotland re-applies its allophony to phoneme input (D@ -> DV)
        assert espeak_words(phoneme_input(words), voice) == words


@NEEDS_ESPEAK
def test_accented_sentence_is_different_audio(tmp_path):
    voice, text = "en-us", "the thinker thought this very food was good, and I agree."
    words = espeak_words(text, voice)
    accented, counts = apply_accent(words, random.Random(4))
    assert accented != words and sum(counts.values()) > 0
    paths = [str(tmp_path / "plain.wav"), str(tmp_path / "accented.wav")]
    for path, spoken in zip(paths, (phoneme_input(words), phoneme_input(accented))):
        subprocess.run(["espeak-ng", "-v", voice, "-w", path, spoken], check=True)
    plain, acc = (sf.read(p)[0] for p in paths)
    assert len(acc) > 0.5 * len(plain)
    assert len(acc) != len(plain) or (acc != plain).any()
    rewritten = dataclasses.replace(RULE["th_s"], rate=1.0)
    out, _ = apply_accent(espeak_words("think.", voice), random.Random(0), rules=(rewritten,))
    assert espeak_words(phoneme_input(out), voice) == out  # espeak says the rewritten phonemes


@NEEDS_ESPEAK
def test_homophones_get_the_same_accent():
    """Different transcripts, same phonemes: the same seed gives the same accented speech."""
    first, second = espeak_words("I see the sea.", "en-us"), espeak_words("I sea the see.", "en-us")
    assert first == second
    assert apply_accent(first, random.Random(9)) == apply_accent(second, random.Random(9))


@NEEDS_ESPEAK
def test_espeak_failure_names_the_text():
    with pytest.raises(RuntimeError, match="hello there"):
        espeak_words("hello there", "zz-none")  # no such voice: espeak-ng exits 1
    with pytest.raises(RuntimeError, match="no phonemes"):
        espeak_words("...", "en-us")

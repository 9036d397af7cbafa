"""The broad corpus's text (local/synth_broad/text.py): normalisation rules on hand-made
sentences and files, the missing-package error, and the installed Debian text's size."""
from __future__ import annotations

import os
import re

import pytest

from local.synth_broad import text as T
from local.synth_broad.text import (MissingPackageError, Sentence, check_packages, fortune_paragraphs,
                                    load_sentences, normalise, split_sentences, vocabulary,
                                    wordnet_glosses)

INSTALLED = all(os.path.exists(marker) for _, marker in T.PACKAGE_MARKERS)
NEEDS_PACKAGES = pytest.mark.skipif(
    not INSTALLED, reason="wordnet-base / fortunes / fortunes-min are not installed "
                          "(tools/install.sh installs them as root)")
WORD = r"[A-Z]+(?:'[A-Z]+)*"


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    if not INSTALLED:
        pytest.skip("wordnet-base / fortunes / fortunes-min are not installed "
                    "(tools/install.sh installs them as root)")
    return load_sentences(str(tmp_path_factory.mktemp("text") / "sentences.tsv"))


@pytest.mark.parametrize("raw, expected", [
    ("Don't look back, something might be gaining on you.",
     ("DON'T LOOK BACK SOMETHING MIGHT BE GAINING ON YOU",
      "don't look back, something might be gaining on you.")),
    ("Is it a well-known caf\u00e9 (in Paris)?", ("IS IT A WELL KNOWN CAFE", "is it a well known cafe?")),
    ("\u2018Tis the \u201cseason\u201d \u2014 really!", ("TIS THE SEASON REALLY", "tis the season, really!")),
    ("the children's toys", ("THE CHILDREN'S TOYS", "the children's toys.")),
    ("He was born in 1951.", None),          # digits: dropped, not spelled out
    ("Mr. Smith went home.", None),          # abbreviation
    ("We met e.g. at the station.", None),
    ("J. R. Tolkien wrote it.", None),       # initials
    ("The NASA launch was late.", None),     # acronym
    ("Henry VIII had six wives.", None),     # Roman numeral
    ("It costs $5 & more", None),           # symbols read aloud
    ("Hello.", None),                        # one word
    (" ".join(["word"] * 21), None),         # 21 words
    (" ".join(["word"] * 20), (" ".join(["WORD"] * 20), " ".join(["word"] * 20) + ".")),
    ("\u03b1\u03b2\u03b3 is Greek", None),   # letters outside A-Z
])
def test_normalise(raw, expected):
    assert normalise(raw) == expected


def test_wordnet_gloss_parsing(tmp_path):
    data = tmp_path / "data.noun"
    data.write_text(
        "  1 This software and database is being provided | licence text\n"
        "00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived to have "
        "its own distinct existence; a thing that exists  \n"
        "00002137 03 n 01 x 0 000 | a play by William Shakespeare; \"we saw the play\"; "
        "\"it was a good one\" - Shakespeare  \n")
    assert list(wordnet_glosses(str(data))) == [
        ("wordnet-definition", "that which is perceived to have its own distinct existence"),
        ("wordnet-definition", "a thing that exists"),
        ("wordnet-example", "we saw the play"),
        ("wordnet-example", "it was a good one"),
        # "a play by William Shakespeare" holds a capitalised word after the first: dropped
    ]


def test_fortune_parsing_and_sentence_split(tmp_path):
    f = tmp_path / "wisdom"
    f.write_text("A clash of doctrine is not a disaster.  It is an opportunity.\n"
                 "\t\t-- Someone Famous\n%\nA lifetime isn't long\nenough.\n%\n")
    paragraphs = list(fortune_paragraphs(str(f)))
    assert paragraphs == ["A clash of doctrine is not a disaster.  It is an opportunity.",
                          "A lifetime isn't long enough."]
    assert split_sentences(paragraphs[0]) == ["A clash of doctrine is not a disaster.",
                                              "It is an opportunity."]
    assert split_sentences('He said "Stop." Then he left! Why? no.') == [
        'He said "Stop.', "Then he left!", "Why? no."]


def test_missing_package_names_it_and_the_install_command(tmp_path):
    with pytest.raises(MissingPackageError) as e:
        check_packages(str(tmp_path / "wordnet"), str(tmp_path / "fortunes"))
    msg = str(e.value)
    assert "wordnet-base" in msg and "fortunes-min" in msg and "fortunes (" in msg
    assert "apt-get install -y wordnet-base fortunes-min fortunes" in msg


@NEEDS_PACKAGES
def test_installed_text_size_conventions_and_vocabulary(sentences):
    stats = T.text_statistics(sentences)
    assert stats["vocabulary"] >= 10_000, stats
    assert stats["sentences"] >= 50_000 and set(stats["per_source"]) == {
        "wordnet-example", "wordnet-definition", "fortunes"}
    texts = [s.text for s in sentences]
    assert len(set(texts)) == len(texts)
    for s in sentences:
        assert re.fullmatch(f"{WORD}( {WORD})*", s.text), s
        assert 2 <= len(s.text.split()) <= 20, s
        # the engines read exactly the transcript's words (lower case, with punctuation)
        assert re.sub(r"[,.!?]", "", s.spoken).upper() == s.text, s
    assert len(vocabulary(texts)) == stats["vocabulary"]


def _fake_install(root):
    """A tiny wordnet-base + fortunes installation: one gloss, two fortunes."""
    wordnet, fortunes = root / "wordnet", root / "fortunes"
    wordnet.mkdir()
    fortunes.mkdir()
    for name in T.WORDNET_FILES:
        (wordnet / name).write_text("")
    (wordnet / "data.noun").write_text('00001740 03 n 01 x 0 000 | a small dog; "the dog barked"\n')
    (fortunes / "fortunes").write_text("Fortune favours the bold.\n%\n")
    (fortunes / "fortunes.dat").write_bytes(b"\0" * 8)
    (fortunes / "wisdom").write_text("Look before you leap.\n%\n")
    return str(wordnet), str(fortunes)


def test_cache_is_read_back_and_remade_when_stale(tmp_path):
    wordnet, fortunes = _fake_install(tmp_path)
    expected = [Sentence("wordnet-example", "THE DOG BARKED", "the dog barked."),
                Sentence("wordnet-definition", "A SMALL DOG", "a small dog."),
                Sentence("fortunes", "FORTUNE FAVOURS THE BOLD", "fortune favours the bold."),
                Sentence("fortunes", "LOOK BEFORE YOU LEAP", "look before you leap.")]
    cache = str(tmp_path / "cache" / "sentences.tsv")
    assert load_sentences(cache, wordnet, fortunes) == expected
    with open(cache, encoding="utf-8") as f:
        header = f.readline()
    # a cache with this header is read as it is: a marked line proves no re-extraction
    with open(cache, "w", encoding="utf-8") as f:
        f.write(header + "fortunes\tMARKED LINE\tmarked line.\n")
    assert load_sentences(cache, wordnet, fortunes) == [
        Sentence("fortunes", "MARKED LINE", "marked line.")]
    # the sources changed (another size): extracted again
    with open(os.path.join(fortunes, "wisdom"), "a", encoding="utf-8") as f:
        f.write("Haste makes waste.\n%\n")
    again = load_sentences(cache, wordnet, fortunes)
    assert again == expected + [Sentence("fortunes", "HASTE MAKES WASTE", "haste makes waste.")]


def test_lm_text_is_the_sentences_text_column(tmp_path):
    from local.synth_broad.lm_text import main as lm_text_main
    wordnet, fortunes = _fake_install(tmp_path)
    out = tmp_path / "lm" / "broad.txt"
    lm_text_main([str(out), "--wordnet_dir", wordnet, "--fortune_dir", fortunes])
    assert out.read_text().splitlines() == [s.text for s in load_sentences(
        str(tmp_path / "other.tsv"), wordnet, fortunes)]
    assert (tmp_path / "lm" / "broad.tsv").exists()  # the cache beside it

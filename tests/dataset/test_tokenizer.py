"""Text <-> ids: the tokenizer's decode half against hand-written tables."""
import pytest

from wenet.dataset.tokenizer import Tokenizer, tokens_to_text


def test_tokens_to_text():
    d = {0: "<blank>", 1: "<unk>", 2: "\u2581HEL", 3: "LO", 4: "\u2581WORLD", 5: "\u2581", 6: "<sos/eos>"}
    assert tokens_to_text([2, 3, 4], d) == "HELLO WORLD"
    assert tokens_to_text([5, 2, 3, 5, 4, 6, 2], d, eos=6) == "HELLO WORLD"
    assert tokens_to_text([2, 3, 4], d, raw=True) == "\u2581HELLO\u2581WORLD"
    with pytest.raises(KeyError, match="99"):
        tokens_to_text([2, 99], d)


def test_tokenizer_decode_inverts_encode():
    table = {"<blank>": 0, "<unk>": 1, "\u2581": 2, "a": 3, "b": 4, "c": 5, "<sos/eos>": 6}
    tok = Tokenizer(table)
    ids, missing = tok.encode("ab ca")
    assert missing == [] and ids == [3, 4, 2, 5, 3]
    assert tok.decode(ids) == "ab ca"
    assert tok.decode(ids, raw=True) == "ab\u2581ca"
    assert tok.decode(ids + [6, 3]) == "ab ca"  # stops at the table's <sos/eos>
    assert tok.decode(ids, eos=5) == "ab"
    with pytest.raises(KeyError, match="token id 7 "):
        tok.decode([3, 7])

"""ContextGraph checked against a brute-force definition of the hotword bonus."""
import itertools
import logging
import random

import pytest
import torch

from wenet.dataset.tokenizer import Tokenizer
from wenet.decode.context_graph import ContextGraph

CS = 0.75


def _occurrences(seq, phrases):
    """Summed lengths of every (possibly overlapping) occurrence of a phrase in seq."""
    uniq = {tuple(p) for p in phrases}
    return sum(j - i for i in range(len(seq)) for j in range(i + 1, len(seq) + 1)
               if tuple(seq[i:j]) in uniq)


def _live_match(seq, phrases):
    """Length of the longest suffix of seq that is a prefix of some phrase."""
    prefixes = {tuple(p[:k]) for p in phrases for k in range(len(p) + 1)}
    return max(k for k in range(len(seq) + 1) if tuple(seq[len(seq) - k:]) in prefixes)


def _brute_running(seq, phrases, cs=CS):
    """The bonus held after seq (unfinished match included)."""
    return cs * (_live_match(seq, phrases) + _occurrences(seq, phrases))


def _random_phrases(rng, n, alphabet, max_len):
    return [[rng.choice(alphabet) for _ in range(rng.randint(1, max_len))] for _ in range(n)]


@pytest.mark.parametrize("seed", range(8))
def test_steps_equal_brute_force(seed):
    rng = random.Random(seed)
    # A small alphabet makes overlaps, shared prefixes and fallbacks common.
    phrases = _random_phrases(rng, rng.randint(1, 5), [1, 2, 3], 4)
    graph = ContextGraph(phrases, CS)
    for _ in range(40):
        seq = [rng.choice([1, 2, 3, 4]) for _ in range(rng.randint(0, 10))]
        state, total = 0, 0.0
        for n, tok in enumerate(seq, 1):
            bonus, state = graph.forward_one_step(state, tok)
            total += bonus
            assert total == pytest.approx(_brute_running(seq[:n], phrases), abs=1e-9)
            assert graph.depth[state] == _live_match(seq[:n], phrases)
        final, root = graph.finalize(state)
        assert root == 0
        assert total + final == pytest.approx(CS * _occurrences(seq, phrases), abs=1e-9)
        assert graph.score(seq) == pytest.approx(CS * _occurrences(seq, phrases), abs=1e-9)


def test_hand_computed_steps():
    # "1 2 3" and "2 4": reading 1 2 4 matches 1 2, breaks off at 4 (withdraw 2),
    # falls back to the suffix "2", matches "2 4" (2 units) and completes it (+2).
    graph = ContextGraph([[1, 2, 3], [2, 4]], 1.0)
    state, steps = 0, []
    for tok in [1, 2, 4, 5]:
        bonus, state = graph.forward_one_step(state, tok)
        steps.append(bonus)
    assert steps == [1.0, 1.0, -2.0 + 2.0 + 2.0, -2.0]
    assert graph.finalize(state) == (0.0, 0)
    assert graph.score([1, 2]) == 0.0            # unfinished: nothing kept
    assert graph.score([1, 2, 3]) == 3.0
    assert graph.score([9, 1, 2, 3, 1, 2, 3]) == 6.0


def test_tables_equal_forward_one_step():
    rng = random.Random(3)
    phrases = _random_phrases(rng, 6, [2, 3, 5, 7], 4)
    graph = ContextGraph(phrases, CS)
    V = 9
    column, nxt, bonus, final = graph.tables(V, torch.device("cpu"))
    for s, tok in itertools.product(range(graph.num_states), range(V)):
        b, n = graph.forward_one_step(s, tok)
        assert int(nxt[s, column[tok]]) == n
        assert float(bonus[s, column[tok]]) == pytest.approx(b, abs=1e-6)
    for s in range(graph.num_states):
        assert float(final[s]) == pytest.approx(graph.finalize(s)[0], abs=1e-6)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        graph.tables(5, torch.device("cpu"))


def test_bad_phrases():
    with pytest.raises(ValueError):
        ContextGraph([], 1.0)
    with pytest.raises(ValueError, match="phrase 1 is empty"):
        ContextGraph([[1], []], 1.0)
    with pytest.raises(ValueError, match="out of range"):
        ContextGraph([[1]], 1.0).forward_one_step(5, 1)


def _char_tokenizer():
    table = {"<blank>": 0, "A": 1, "B": 2, "C": 3, "\u2581": 4, "<sos/eos>": 5}
    return Tokenizer(table)


def test_from_file(tmp_path, caplog):
    path = tmp_path / "hotwords.txt"
    path.write_text("AB\nCAX\nA BC\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        graph = ContextGraph.from_file(str(path), _char_tokenizer(), 2.0)
    assert f"{path}:2" in caplog.text and "'X'" in caplog.text  # skipped, named
    assert graph.score([1, 2]) == 4.0
    assert graph.score([1, 4, 2, 3]) == 8.0
    assert graph.score([3, 1]) == 0.0                         # the skipped phrase


@pytest.mark.parametrize("text,match", [("AB\n\nBC\n", ":2: empty"),
                                        ("AB\n   \n", ":2: empty"),
                                        ("XY\n", "no usable context phrase")])
def test_from_file_errors(tmp_path, text, match):
    path = tmp_path / "hotwords.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        ContextGraph.from_file(str(path), _char_tokenizer(), 1.0)

"""Hotword (context) biasing: a phrase list compiled into a prefix tree of units.

The tree is searched like an Aho-Corasick automaton.  A state is a tree node, i.e.
a phrase prefix; state 0 is the root (nothing matched).  After a token sequence
``s`` the state is the node of the longest suffix of ``s`` that is a prefix of some
phrase.  The bonus a sequence has collected is

    context_score * (length of that matched prefix
                     + total length of the complete phrase occurrences in s)

so every unit that extends a match earns ``context_score``; when a partial match
breaks off, the search falls back to the longest suffix that is still a prefix and
the bonus of the units given up is withdrawn (a negative step); a complete phrase
earns its length once more on arrival, a bonus that stays when the match later
ends.  :meth:`ContextGraph.finalize` withdraws the unfinished part at the end of a
hypothesis, so a finished hypothesis keeps exactly ``context_score`` times the
summed lengths of the phrase occurrences it contains (overlapping occurrences each
count).

Searches use :meth:`forward_one_step` per hypothesis and token, or, batched,
:meth:`ContextGraph.tables`: a dense transition table over the units that occur
in some phrase (every other unit sends any state back to the root).
"""
from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Dict, List, Sequence, Tuple

from wenet.utils.file_utils import text_lines

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


class ContextGraph:
    """Phrases (lists of unit ids) compiled into an Aho-Corasick prefix tree."""

    def __init__(self, phrases: List[List[int]], context_score: float) -> None:
        if not phrases:
            raise ValueError("a context graph needs at least one phrase")
        self.context_score = float(context_score)
        self.children: List[Dict[int, int]] = [{}]
        self.depth: List[int] = [0]
        self.is_end: List[bool] = [False]
        for i, phrase in enumerate(phrases):
            if len(phrase) == 0:
                raise ValueError(f"context phrase {i} is empty")
            self._insert([int(t) for t in phrase])
        self.fail: List[int] = [0] * len(self.children)
        # Summed lengths of the complete phrases that end this node's prefix.
        self.output: List[int] = [0] * len(self.children)
        self._link()
        self._goto_cache: Dict[Tuple[int, int], int] = {}
        self._tables: Dict[str, Any] = {}

    @classmethod
    def from_file(cls, path: str, tokenizer: Any, context_score: float) -> "ContextGraph":
        """One phrase per line of ``path``, tokenised with ``tokenizer`` (a
        :class:`wenet.dataset.tokenizer.Tokenizer`).

        An empty line, or one that gives no unit, is an error naming ``path:line``;
        a phrase with pieces that are not in the units dictionary is skipped and
        logged (matching part of it would bias towards a different phrase).
        """
        phrases: List[List[int]] = []
        skipped = 0
        for lineno, line in text_lines(path):
            text = line.strip()
            if not text:
                raise ValueError(f"{path}:{lineno}: empty context phrase")
            ids, missing = tokenizer.encode(text)
            if missing:
                logger.warning("%s:%d: context phrase %r skipped: units %s are not in "
                               "the dictionary", path, lineno, text, missing)
                skipped += 1
                continue
            if not ids:
                raise ValueError(f"{path}:{lineno}: context phrase {text!r} gives no unit")
            phrases.append(ids)
        if not phrases:
            raise ValueError(f"{path}: no usable context phrase ({skipped} skipped)")
        logger.info("context graph from %s: %d phrases, %d skipped, score %g",
                    path, len(phrases), skipped, context_score)
        return cls(phrases, context_score)

    @property
    def num_states(self) -> int:
        return len(self.children)

    def _insert(self, phrase: List[int]) -> None:
        node = 0
        for token in phrase:
            nxt = self.children[node].get(token)
            if nxt is None:
                nxt = len(self.children)
                self.children.append({})
                self.depth.append(self.depth[node] + 1)
                self.is_end.append(False)
                self.children[node][token] = nxt
            node = nxt
        self.is_end[node] = True

    def _link(self) -> None:
        """Failure links (longest proper suffix that is a prefix) and outputs, in
        breadth-first order so that a node's suffixes are done before it."""
        queue = deque(self.children[0].values())
        for node in queue:
            self.output[node] = self.depth[node] if self.is_end[node] else 0
        while queue:
            node = queue.popleft()
            for token, child in self.children[node].items():
                f = self.fail[node]
                while f and token not in self.children[f]:
                    f = self.fail[f]
                self.fail[child] = self.children[f].get(token, 0)
                own = self.depth[child] if self.is_end[child] else 0
                self.output[child] = own + self.output[self.fail[child]]
                queue.append(child)

    def _goto(self, state: int, token: int) -> int:
        key = (state, token)
        nxt = self._goto_cache.get(key)
        if nxt is None:
            s = state
            while s and token not in self.children[s]:
                s = self.fail[s]
            nxt = self.children[s].get(token, 0)
            self._goto_cache[key] = nxt
        return nxt

    def forward_one_step(self, state: int, token: int) -> Tuple[float, int]:
        """(score bonus, next state) for ``token`` read in ``state`` (module docstring)."""
        if not 0 <= state < len(self.children):
            raise ValueError(f"context state {state} out of range [0, {len(self.children)})")
        nxt = self._goto(state, int(token))
        gain = self.depth[nxt] - self.depth[state] + self.output[nxt]
        return self.context_score * gain, nxt

    def finalize(self, state: int) -> Tuple[float, int]:
        """(withdrawal of the unfinished match's bonus, root) at the end of a hypothesis."""
        return -self.context_score * self.depth[state], 0

    def score(self, tokens: Sequence[int]) -> float:
        """The bonus a whole hypothesis keeps: all steps from the root plus finalize."""
        state, total = 0, 0.0
        for t in tokens:
            bonus, state = self.forward_one_step(state, t)
            total += bonus
        return total + self.finalize(state)[0]

    def tables(self, vocab_size: int, device: "torch.device"
               ) -> Tuple["torch.Tensor", "torch.Tensor", "torch.Tensor", "torch.Tensor"]:
        """Dense tensors for batched searches: ``(column [V], next_state [S, A+1],
        bonus [S, A+1], final [S])``.

        ``column[token]`` is the token's column among the ``A`` units that occur in
        some phrase, ``A`` for every other unit (which sends any state to the root);
        ``next_state``/``bonus`` are :meth:`forward_one_step` for every state and
        column, ``final`` is :meth:`finalize`'s bonus per state (float32).
        """
        import torch  # here: the graph itself is pure Python (wenet.runtime has no torch)
        key = f"{vocab_size}:{device}"
        if key not in self._tables:
            alphabet = sorted({t for c in self.children for t in c})
            bad = [t for t in alphabet if not 0 <= t < vocab_size]
            if bad:
                raise ValueError(f"context phrase units {bad} outside the vocabulary "
                                 f"of size {vocab_size}")
            cpu = torch.device("cpu")  # built on the host, then moved to ``device``
            column = torch.full((vocab_size,), len(alphabet), dtype=torch.long, device=cpu)
            column[torch.tensor(alphabet, dtype=torch.long, device=cpu)] = torch.arange(
                len(alphabet), device=cpu)
            S = len(self.children)
            nxt = torch.zeros(S, len(alphabet) + 1, dtype=torch.long, device=cpu)
            bonus = torch.zeros(S, len(alphabet) + 1, dtype=torch.float64, device=cpu)
            for s in range(S):
                for a, t in enumerate(alphabet):
                    bonus[s, a], nxt[s, a] = self.forward_one_step(s, t)
                bonus[s, -1] = -self.context_score * self.depth[s]
            final = torch.tensor([self.finalize(s)[0] for s in range(S)], dtype=torch.float64,
                                 device=cpu)
            self._tables[key] = (column.to(device), nxt.to(device),
                                 bonus.float().to(device), final.float().to(device))
        return self._tables[key]

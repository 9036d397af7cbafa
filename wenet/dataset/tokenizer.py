"""Transcript ↔ token ids, as WeNet 2.x does it, but without the silent ``<unk>``.

Two modes:

- BPE (``bpe_model`` given): CJK characters stay single tokens, every other run
  of text is cut into pieces by the sentencepiece model, and each piece is
  looked up in the symbol table (``units.txt``).
- characters: every character is a token, a space becomes ``▁``.

Unlike WeNet 2.x the text is not upper-cased before BPE: it is encoded as
written, so it must be normalised the way the BPE model's training text was
(stage 0 of the recipe does that). A piece that is not in the symbol table is
reported to the caller, which drops the utterance and counts it; nothing is
mapped to ``<unk>`` behind the user's back.

Decoding (ids → text, :func:`tokens_to_text`, :meth:`Tokenizer.decode`) joins the
pieces into words (``▁`` starts a word) or, raw, concatenates them as WeNet 2.x
prints them; an id missing from the table is an error naming it.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

from wenet.utils.file_utils import read_symbol_table

_CJK = re.compile(r"([\u4e00-\u9fff])")
SPACE = "\u2581"  # sentencepiece's word-boundary mark, also used for spaces in char mode
EOS_SYMBOL = "<sos/eos>"  # units.txt's last entry: sos = eos = vocab_size - 1


def tokens_to_text(tokens: Sequence[int], char_dict: Dict[int, str], eos: Optional[int] = None,
                   raw: bool = False) -> str:
    """Token ids → text.

    Default: BPE pieces joined into words (``▁`` marks a word start, becomes a
    space; spaces collapsed).  ``raw=True`` gives WeNet 2.x's output: pieces
    concatenated with no separator, ``▁`` kept.  Stops at ``eos`` if given.
    An id missing from ``char_dict`` is an error naming it.
    """
    pieces: List[str] = []
    for t in tokens:
        if eos is not None and t == eos:
            break
        if t not in char_dict:
            raise KeyError(f"token id {t} is not in the units dictionary")
        pieces.append(char_dict[t])
    text = "".join(pieces)
    if raw:
        return text
    return " ".join(text.replace(SPACE, " ").split())


class Tokenizer:
    """Transcript ↔ symbol-table ids: ``encode`` and ``decode`` (module docstring)."""

    def __init__(self, symbol_table: Union[str, Dict[str, int]],
                 bpe_model: Optional[str] = None) -> None:
        self.symbol_table = (read_symbol_table(symbol_table)
                             if isinstance(symbol_table, str) else dict(symbol_table))
        self.bpe_model = bpe_model
        self._sp = None  # loaded on first use, so the object pickles into DataLoader workers
        self._id_to_token: Optional[Dict[int, str]] = None  # built on first decode

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_sp"] = None
        return state

    def _processor(self):
        if self._sp is None:
            import sentencepiece as spm
            sp = spm.SentencePieceProcessor()
            if not sp.Load(self.bpe_model):
                raise ValueError(f"cannot load BPE model {self.bpe_model}")
            self._sp = sp
        return self._sp

    def pieces(self, text: str) -> List[str]:
        """The tokens of ``text`` before the symbol-table lookup."""
        text = text.strip()
        if self.bpe_model is None:
            return [SPACE if ch == " " else ch for ch in text]
        sp = self._processor()
        out: List[str] = []
        for part in _CJK.split(text):
            if not part.strip():
                continue
            if _CJK.fullmatch(part):
                out.append(part)
            else:
                out.extend(sp.encode_as_pieces(part))
        return out

    def encode(self, text: str) -> Tuple[List[int], List[str]]:
        """(ids, missing pieces): ids of the pieces found in the table, and those not found."""
        ids: List[int] = []
        missing: List[str] = []
        table = self.symbol_table
        for piece in self.pieces(text):
            idx = table.get(piece)
            if idx is None:
                missing.append(piece)
            else:
                ids.append(idx)
        return ids, missing

    def decode(self, ids: Sequence[int], raw: bool = False, eos: Optional[int] = None) -> str:
        """Ids → text (:func:`tokens_to_text`), stopping at ``eos``: by default the
        table's ``<sos/eos>`` id, if it has one."""
        if self._id_to_token is None:
            self._id_to_token = {i: t for t, i in self.symbol_table.items()}
        if eos is None:
            eos = self.symbol_table.get(EOS_SYMBOL)
        return tokens_to_text(ids, self._id_to_token, eos, raw)

"""Transcript → token ids, as WeNet 2.x does it, but without the silent ``<unk>``.

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
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple, Union

from wenet.utils.file_utils import read_symbol_table

_CJK = re.compile(r"([\u4e00-\u9fff])")
SPACE = "\u2581"  # sentencepiece's word-boundary mark, also used for spaces in char mode


class Tokenizer:
    """Turns a transcript into symbol-table ids (see module docstring for the rules)."""

    def __init__(self, symbol_table: Union[str, Dict[str, int]],
                 bpe_model: Optional[str] = None) -> None:
        self.symbol_table = (read_symbol_table(symbol_table)
                             if isinstance(symbol_table, str) else dict(symbol_table))
        self.bpe_model = bpe_model
        self._sp = None  # loaded on first use, so the object pickles into DataLoader workers

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

"""Fbank batches → token ids and text with an ONNX model directory: the decoding modes of
``wenet.decode.modes`` that an exported model can run, on numpy and onnxruntime.

| mode | graphs | search |
|---|---|---|
| ``ctc_greedy_search`` | encoder, ctc | best path |
| ``ctc_prefix_beam_search`` | encoder, ctc | prefix beam (hotwords or n-gram LM) |
| ``attention_rescoring`` | encoder, ctc, decoder | the prefix beam's n-best rescored |
| ``rnnt_greedy_search`` | encoder, transducer | greedy |
| ``rnnt_beam_search`` | encoder, transducer | modified beam (hotwords) |
| ``rnnt_beam_attn_rescoring`` | encoder, transducer, decoder | the beam's n-best rescored |

Encoding is full-context (``encoder.onnx``, one padded batch), or with ``streaming``
chunk by chunk (``encoder_chunk.onnx``, the export's chunk size and left chunks, each
utterance from zero caches): the streaming model's output as a stream gets it.

``attention`` (autoregressive beam search) is not offered: ``decoder.onnx`` scores whole
hypotheses and has no incremental step with a cache (WeNet's ONNX runtime does not offer
it either). Search settings and their defaults are ``wenet.decode.options.DecodeOptions``'
(tests/runtime/test_cli.py keeps them equal).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from wenet.dataset.tokenizer import Tokenizer
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc_lm import LMFusion
from wenet.decode.hyps import NBest, best_hyps
from wenet.runtime import ctc_search, transducer_search
from wenet.runtime.rescoring import attention_rescoring
from wenet.runtime.session import OnnxModel

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchOptions:
    """The search settings (``DecodeOptions``' fields the runtime uses, same defaults)."""

    beam_size: int = 10
    ctc_weight: float = 0.5          # attention_rescoring: weight of the CTC prefix score
    transducer_weight: float = 0.0   # rnnt_beam_attn_rescoring: weight of the beam score
    reverse_weight: float = 0.0      # rescoring: weight of the right-to-left decoder
    blank_skip_threshold: Optional[float] = 0.999
    max_sym_per_frame: int = 1
    context_graph: Optional[ContextGraph] = None
    rnnt_length_norm: bool = False
    lm_fusion: Optional[LMFusion] = None

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer, got {self.beam_size}")
        if self.context_graph is not None and self.lm_fusion is not None:
            raise ValueError("hotword biasing and an n-gram LM together are not supported: "
                             "give --context_list_path or --lm_path")


class _Batch:
    """One encoded batch and the shared first passes its modes use."""

    def __init__(self, model: OnnxModel, encoder_out: np.ndarray, lens: np.ndarray,
                 options: SearchOptions) -> None:
        self.model, self.encoder_out, self.lens, self.options = model, encoder_out, lens, options
        self._ctc: Optional[np.ndarray] = None

    @property
    def ctc_logprobs(self) -> np.ndarray:
        if self._ctc is None:
            self._ctc = self.model.ctc_logprobs(self.encoder_out)
        return self._ctc

    def ctc_nbest(self) -> List[NBest]:
        o = self.options
        if o.lm_fusion is not None:
            return ctc_search.ctc_lm_prefix_beam_search(
                self.ctc_logprobs, self.lens, o.beam_size, o.lm_fusion,
                blank_skip_threshold=o.blank_skip_threshold)
        return ctc_search.ctc_prefix_beam_search(
            self.ctc_logprobs, self.lens, o.beam_size,
            blank_skip_threshold=o.blank_skip_threshold, context_graph=o.context_graph)

    def transducer_nbest(self) -> List[NBest]:
        o = self.options
        return transducer_search.rnnt_beam_search(
            self.model.transducer(), self.encoder_out, self.lens, o.beam_size,
            o.rnnt_length_norm, o.context_graph)

    def rescored(self, nbests: List[NBest], first_pass_weight: float) -> List[List[int]]:
        m, o = self.model, self.options
        res = attention_rescoring(m.decoder_scores, self.encoder_out, self.lens, nbests,
                                  m.info.sos, m.info.eos, first_pass_weight,
                                  o.reverse_weight, o.context_graph)
        return [hyp for hyp, _ in res]


Search = Callable[[_Batch], List[List[int]]]

# mode -> (graphs it needs beyond the encoder, search)
MODES: Dict[str, Tuple[Tuple[str, ...], Search]] = {
    "ctc_greedy_search": (("ctc",), lambda b: ctc_search.ctc_greedy_search(
        b.ctc_logprobs, b.lens, b.model.info.blank_id)),
    "ctc_prefix_beam_search": (("ctc",), lambda b: best_hyps(b.ctc_nbest())),
    "attention_rescoring": (("ctc", "decoder"), lambda b: b.rescored(
        b.ctc_nbest(), b.options.ctc_weight)),
    "rnnt_greedy_search": (("joiner",), lambda b: transducer_search.rnnt_greedy_search(
        b.model.transducer(), b.encoder_out, b.lens, b.options.max_sym_per_frame)),
    "rnnt_beam_search": (("joiner",), lambda b: best_hyps(b.transducer_nbest())),
    "rnnt_beam_attn_rescoring": (("joiner", "decoder"), lambda b: b.rescored(
        b.transducer_nbest(), b.options.transducer_weight)),
}
UNSUPPORTED = {"attention": "decoder.onnx has no incremental decoding step (use "
                            "attention_rescoring, or recognize.py with the checkpoint)"}


class OnnxRecognizer:
    """An ONNX model directory, its tokenizer and the search settings."""

    def __init__(self, model: OnnxModel, tokenizer: Tokenizer,
                 options: SearchOptions = SearchOptions(), streaming: bool = False) -> None:
        """``streaming``: encode each utterance chunk by chunk with ``encoder_chunk.onnx``
        (the model loaded with ``streaming=True``), as recognize.py --simulate_streaming
        with the export's chunk size and left chunks."""
        if streaming and model.encoder_chunk is None:
            raise ValueError(f"{model.dir}: streaming needs encoder_chunk.onnx (load the "
                             "model with streaming=True)")
        self.model, self.tokenizer, self.options = model, tokenizer, options
        self.streaming = streaming

    def check_mode(self, mode: str) -> None:
        """ValueError naming what ``mode`` needs and this model lacks."""
        if mode in UNSUPPORTED:
            raise ValueError(f"mode {mode} is not available with ONNX: {UNSUPPORTED[mode]}")
        if mode not in MODES:
            raise ValueError(f"unknown decoding mode {mode!r}; known: {list(MODES)}")
        missing = [g for g in MODES[mode][0] if getattr(self.model, g) is None]
        if missing:
            files = {"joiner": "encoder_proj/predictor/joiner.onnx (a transducer)"}
            raise ValueError(f"mode {mode} needs " + ", ".join(
                files.get(g, f"{g}.onnx") for g in missing) + f"; {self.model.dir} has none")

    def decode(self, feats: Sequence[np.ndarray], mode: str) -> List[List[int]]:
        """Token ids of each utterance's fbank (T_i, F), one padded encoder batch."""
        self.check_mode(mode)
        encode = self.model.encode_streaming if self.streaming else self.model.encode
        encoder_out, lens = encode(feats)
        return MODES[mode][1](_Batch(self.model, encoder_out, lens, self.options))

    def text(self, ids: Sequence[int]) -> str:
        """The transcript of token ids (word pieces joined, as transcribe.py prints)."""
        return self.tokenizer.decode(list(ids), eos=self.model.info.eos)


def model_tokenizer(model: OnnxModel) -> Tokenizer:
    """The tokenizer of the model's directory (``units.txt``, and ``bpe.model`` when it is
    there), checked against the model's vocabulary size."""
    bpe = os.path.join(model.dir, "bpe.model")
    tokenizer = Tokenizer(os.path.join(model.dir, "units.txt"),
                          bpe if os.path.isfile(bpe) else None)
    check_vocabulary(model, tokenizer)
    return tokenizer


def check_vocabulary(model: OnnxModel, tokenizer: Tokenizer) -> None:
    """ValueError when units.txt and the model disagree on the vocabulary size."""
    size = max(tokenizer.symbol_table.values()) + 1
    if size != model.info.vocab_size:
        raise ValueError(f"{model.dir}: units.txt has {size} units, the model "
                         f"{model.info.vocab_size}")


def model_options(**kwargs: Any) -> SearchOptions:
    """SearchOptions from keyword arguments (blank_skip_threshold <= 0 disables it)."""
    if kwargs.get("blank_skip_threshold") is not None and kwargs["blank_skip_threshold"] <= 0:
        kwargs["blank_skip_threshold"] = None
    return SearchOptions(**kwargs)

"""The registry of decoding modes and the one decoding entry point, :func:`decode`.

A mode is a function ``search(ctx: BatchContext) -> best token ids per utterance``
registered under its name with :func:`register_mode`; it takes what it needs from
the context (encoder output, model, options, shared results such as the CTC
prefix n-best), so work several modes need is done once per batch.  A new mode is
one registered function here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence

import torch

from wenet.decode.attention import attention_beam_search, attention_rescoring
from wenet.decode.batch_context import BatchContext, ModeResult
from wenet.decode.options import DecodeOptions
from wenet.decode.ctc import ctc_greedy_search
from wenet.decode.hyps import best_hyps
from wenet.decode.transducer import rnnt_greedy_search

Search = Callable[[BatchContext], List[List[int]]]


@dataclass(frozen=True)
class DecodeMode:
    """A registered mode: its search, and whether it needs a transducer model."""

    name: str
    search: Search
    transducer: bool = False


MODES: Dict[str, DecodeMode] = {}


def register_mode(name: str, transducer: bool = False) -> Callable[[Search], Search]:
    """Register ``search`` as mode ``name`` (a decorator)."""
    def add(search: Search) -> Search:
        if name in MODES:
            raise ValueError(f"decoding mode {name!r} is registered twice")
        MODES[name] = DecodeMode(name, search, transducer)
        return search
    return add


@register_mode("ctc_greedy_search")
def _ctc_greedy_search(ctx: BatchContext) -> List[List[int]]:
    return ctc_greedy_search(ctx.ctc_logprobs, ctx.encoder_lens)


@register_mode("ctc_prefix_beam_search")
def _ctc_prefix_beam_search(ctx: BatchContext) -> List[List[int]]:
    return best_hyps(ctx.ctc_nbest)


@register_mode("attention")
def _attention(ctx: BatchContext) -> List[List[int]]:
    m, o = ctx.model, ctx.options
    res = attention_beam_search(m.decoder, ctx.encoder_out, ctx.encoder_mask, o.beam_size,
                                m.sos, m.eos, o.length_penalty)
    return [hyp for hyp, _ in res]


@register_mode("attention_rescoring")
def _attention_rescoring(ctx: BatchContext) -> List[List[int]]:
    m, o = ctx.model, ctx.options
    res = attention_rescoring(m.decoder, ctx.encoder_out, ctx.encoder_mask, ctx.ctc_nbest,
                              m.sos, m.eos, first_pass_weight=o.ctc_weight,
                              reverse_weight=o.reverse_weight, context_graph=o.context_graph)
    return [hyp for hyp, _ in res]


@register_mode("rnnt_greedy_search", transducer=True)
def _rnnt_greedy_search(ctx: BatchContext) -> List[List[int]]:
    result = rnnt_greedy_search(ctx.model, ctx.encoder_out, ctx.encoder_lens,
                                ctx.options.max_sym_per_frame)
    ctx.count("joint_evals", result.joint_evals)  # what multi-blank decoding saves
    return result.hyps


@register_mode("rnnt_beam_search", transducer=True)
def _rnnt_beam_search(ctx: BatchContext) -> List[List[int]]:
    hyps = best_hyps(ctx.transducer_nbest)
    ctx.count("joint_evals", ctx.transducer_stats.get("joint_evals", 0))
    return hyps


@register_mode("rnnt_beam_attn_rescoring", transducer=True)
def _rnnt_beam_attn_rescoring(ctx: BatchContext) -> List[List[int]]:
    m, o = ctx.model, ctx.options
    if m.attention_weight <= 0:
        raise ValueError("rnnt_beam_attn_rescoring needs a model with an attention decoder")
    res = attention_rescoring(m.decoder, ctx.encoder_out, ctx.encoder_mask,
                              ctx.transducer_nbest, m.sos, m.eos,
                              first_pass_weight=o.transducer_weight,
                              reverse_weight=o.reverse_weight, context_graph=o.context_graph)
    return [hyp for hyp, _ in res]


def check_modes(modes: Sequence[str]) -> None:
    """Raise ValueError naming any mode that is not registered."""
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown decoding mode(s) {unknown}; known: {list(MODES)}")


@torch.no_grad()
def decode(model: Any, encoder_out: torch.Tensor, encoder_mask: torch.Tensor,
           modes: Sequence[str], options: DecodeOptions = DecodeOptions()
           ) -> Dict[str, ModeResult]:
    """Decode one encoded batch in every requested mode.

    ``encoder_out`` [B, T, D] and ``encoder_mask`` bool [B, 1, T] come from one
    ``model.encode`` call (chunking and streaming are the encoder's business);
    ``model`` supplies the heads the modes use.  Shared work (CTC log-softmax,
    CTC prefix beam, transducer beam) runs once for all modes.  Returns
    ``{mode: ModeResult(hyps, seconds, counts)}`` in the order asked; transducer
    modes count ``encoder_frames`` (and greedy search ``joint_evals``).
    """
    check_modes(modes)
    ctx = BatchContext(model, encoder_out, encoder_mask, options)
    out: Dict[str, ModeResult] = {}
    for name in modes:
        mode = MODES[name]
        result = ctx.run(mode.search)
        if mode.transducer:
            result.counts["encoder_frames"] = int(ctx.encoder_lens.sum())
        out[name] = result
    return out

"""The searches a stream runs on its encoder chunks, one sentence at a time.

:class:`CtcStreamSearch` (CTC + attention models: U2/U2++, Zipformer): the CTC prefix
beam search carried from chunk to chunk (``CtcPrefixBeamState``, with hotwords by a
context graph, or ``CtcLmPrefixBeamState`` with a word n-gram LM), rescored by the
attention decoder at the end of the sentence as ``attention_rescoring`` does; the
sentence's silence is counted on the CTC blank probabilities.

:class:`TransducerStreamSearch` (transducers): greedy search (``TransducerGreedyState``)
or modified beam search with hotwords (``TransducerBeamState``) carried from chunk to
chunk; the n-best is the search's own (no rescoring); the sentence's silence is the
frames since the best hypothesis took its last label (as sherpa's trailing blanks).

Both give word times from a forced alignment of the winner
(``wenet.alignment.timing.align_and_time``: CTC's, or the transducer lattice's).
"""
from __future__ import annotations

from typing import Any, List, Optional

import torch

from wenet.alignment.timing import FrameGeometry, Timing, align_and_time
from wenet.decode.attention import score_hyps
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc_lm import CtcLmPrefixBeamState
from wenet.decode.hyps import NBest
from wenet.decode.options import DecodeOptions
from wenet.decode.stream_state import CtcPrefixBeamState, EndpointDetector
from wenet.decode.transducer import TransducerBeamState, TransducerGreedyState

TRANSDUCER_SEARCHES = ("beam", "greedy")


def is_transducer_model(model: Any) -> bool:
    """Whether ``model`` (eager, or a ``ScriptedModel``) has the transducer decoding
    interface."""
    return hasattr(model, "forward_joint_step")


class CtcStreamSearch:
    """CTC prefix beam search (with hotwords or an n-gram LM) + attention rescoring."""

    def __init__(self, model: Any, options: DecodeOptions,
                 context_graph: Optional[ContextGraph]) -> None:
        if options.lm_fusion is not None and context_graph is not None:
            raise ValueError("hotword biasing and an n-gram LM together are not supported "
                             "(the server has an LM: send no hotwords)")
        self.model = model
        self.options = options
        self.context_graph = context_graph
        self.sos, self.eos = int(model.sos_symbol()), int(model.eos_symbol())
        if options.lm_fusion is not None:
            self._beam: Any = CtcLmPrefixBeamState(
                options.beam_size, options.lm_fusion,
                blank_skip_threshold=options.blank_skip_threshold)
        else:
            self._beam = CtcPrefixBeamState(options.beam_size,
                                            blank_skip_threshold=options.blank_skip_threshold,
                                            context_graph=context_graph)
        self._encoder_out: List[torch.Tensor] = []
        self._ctc: List[torch.Tensor] = []

    def advance(self, ys: torch.Tensor) -> None:
        """Search the next chunk's encoder output ys (1, T, D)."""
        logprobs = self.model.ctc_activation(ys)[0]
        self._encoder_out.append(ys)
        self._ctc.append(logprobs)
        self._beam.advance(logprobs)

    def update_endpoint(self, endpoint: EndpointDetector) -> None:
        """Count the last chunk's frames (silent: p(blank) above the rules' threshold)."""
        endpoint.update(self._ctc[-1])

    def partial(self) -> NBest:
        return self._beam.partial_nbest()

    def final(self) -> NBest:
        """The sentence's n-best rescored by the attention decoder, best first."""
        nbest = self._beam.nbest()
        if not self._encoder_out or not nbest:
            return []
        return rescore(self.model.decoder, torch.cat(self._encoder_out, dim=1), nbest,
                       self.sos, self.eos, self.options.ctc_weight,
                       self.options.reverse_weight, self.context_graph)

    def timing(self, hyp: List[int], units: List[str], geometry: FrameGeometry,
               duration_s: float) -> Timing:
        """Word times of ``hyp`` by CTC forced alignment; AlignmentError if impossible."""
        logprobs = torch.cat(self._ctc, dim=0)
        return align_and_time(hyp, units, geometry, log_probs=logprobs,
                              duration_s=duration_s)[2]


class TransducerStreamSearch:
    """A transducer's greedy or modified beam search (``search``: "greedy" / "beam")."""

    def __init__(self, model: Any, options: DecodeOptions,
                 context_graph: Optional[ContextGraph], search: str = "beam") -> None:
        if search not in TRANSDUCER_SEARCHES:
            raise ValueError(f"transducer search {search!r}; known: {TRANSDUCER_SEARCHES}")
        if options.lm_fusion is not None:
            raise ValueError("an n-gram LM is fused into CTC searches only, not into a "
                             "transducer's")
        if search == "greedy" and context_graph is not None:
            raise ValueError("hotwords need the transducer beam search (the server runs "
                             "greedy search)")
        self.model = model
        if search == "greedy":
            self._state: Any = TransducerGreedyState(model, options.max_sym_per_frame)
        else:
            self._state = TransducerBeamState(model, options.beam_size, context_graph,
                                              options.rnnt_length_norm)
        self._encoder_out: List[torch.Tensor] = []
        self._received = 0
        self._counted = 0

    def advance(self, ys: torch.Tensor) -> None:
        """Search the next chunk's encoder output ys (1, T, D)."""
        self._encoder_out.append(ys)
        self._received += ys.size(1)
        self._state.advance(self.model.project_encoder(ys)[0])

    def update_endpoint(self, endpoint: EndpointDetector) -> None:
        """Count the chunk's frames; the silence: frames searched since the best
        hypothesis' last label."""
        if isinstance(self._state, TransducerGreedyState):
            searched, last = self._state.frames, self._state.last_label_frame
        else:
            searched = self._state.searched
            best = self._state.partial_nbest()
            last = self._state.label_frame[best[0][0]] if best else -1
        endpoint.advance(self._received - self._counted, searched - 1 - last)
        self._counted = self._received

    def partial(self) -> NBest:
        if isinstance(self._state, TransducerGreedyState):
            return self._state.nbest()
        return self._state.partial_nbest()

    def final(self) -> NBest:
        """The sentence's n-best, best first (the search's scores)."""
        if isinstance(self._state, TransducerGreedyState):
            return self._state.nbest()
        return self._state.finish()

    def timing(self, hyp: List[int], units: List[str], geometry: FrameGeometry,
               duration_s: float) -> Timing:
        """Word times of ``hyp`` on the transducer lattice's best path."""
        encoder_out = torch.cat(self._encoder_out, dim=1)[0]
        return align_and_time(hyp, units, geometry, model=self.model,
                              encoder_out=encoder_out, duration_s=duration_s)[2]


def rescore(decoder: Any, encoder_out: torch.Tensor, nbest: NBest, sos: int, eos: int,
            ctc_weight: float, reverse_weight: float,
            context_graph: Optional[ContextGraph] = None) -> NBest:
    """All hypotheses of a CTC n-best with their attention-rescoring scores, best first
    (the same sum as ``attention_rescoring``, hotword bonus included; ties keep the
    n-best order, so the first is ``attention_rescoring``'s choice)."""
    hyps = [tuple(h) for h, _ in nbest]
    mask = torch.ones(1, 1, encoder_out.size(1), dtype=torch.bool)
    owner = torch.zeros(len(hyps), dtype=torch.long)
    l2r, r2l = score_hyps(decoder, encoder_out, mask, hyps, owner, sos, eos, reverse_weight)
    total = l2r * (1.0 - reverse_weight) + r2l * reverse_weight
    total = total + ctc_weight * torch.tensor([s for _, s in nbest])
    if context_graph is not None:
        total = total + torch.tensor([context_graph.score(h) for h in hyps])
    total = total.tolist()
    order = sorted(range(len(hyps)), key=lambda i: -total[i])
    return [(hyps[i], total[i]) for i in order]



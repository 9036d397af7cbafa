"""The incremental searches of streaming recognition: the CTC prefix beam carried from
chunk to chunk, and the rule-based endpoint detector (the incremental fbank is
``wenet.inference.features.IncrementalFbank``).

Each piece computes exactly what its whole-utterance counterpart computes:

* :class:`CtcPrefixBeamState` runs the frame loop of
  ``wenet.decode.ctc.ctc_prefix_beam_search`` on one utterance, keeping the beam
  between calls, so feeding the frames chunk by chunk gives the same n-best;
* :class:`EndpointDetector` counts trailing CTC blank frames (WeNet's runtime rules), or
  takes a transducer's count of frames without a label.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import torch

from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc import initial_beam, nbest_lists, prefix_step
from wenet.decode.hyps import NEG_INF, Hyp, NBest

CPU = torch.device("cpu")


class CtcPrefixBeamState:
    """CTC prefix beam search of one utterance whose log-probabilities arrive in pieces.

    ``advance`` runs the same per-frame update as ``ctc_prefix_beam_search`` (top-k
    expansion, blank skipping, hotword bonuses with a ``context_graph``), so ``nbest()``
    after all frames equals that function's n-best on the concatenated frames.
    """

    def __init__(self, beam_size: int, blank_id: int = 0,
                 blank_skip_threshold: Optional[float] = 0.999,
                 context_graph: Optional[ContextGraph] = None) -> None:
        self.beam_size = beam_size
        self.blank_id = blank_id
        self.blank_skip_threshold = blank_skip_threshold
        self.context_graph = context_graph
        self._tables = None  # the graph's tables, built for the vocabulary on first use
        self._beam = initial_beam(1, beam_size, CPU, context_graph is not None)
        self._prefixes: List[List[Optional[Hyp]]] = [[()] + [None] * (beam_size - 1)]
        self.frames = 0

    @torch.no_grad()
    def advance(self, logprobs: torch.Tensor) -> None:
        """Feed CTC log-probabilities (T, V) of the next frames."""
        # the beam lives on the CPU (its prefixes are Python lists): bring the frames there
        lp_all = logprobs.float().to(CPU).unsqueeze(0)
        T, V = logprobs.shape
        if self.blank_skip_threshold is not None:
            skip = lp_all[:, :, self.blank_id] > math.log(self.blank_skip_threshold)
        else:
            skip = torch.zeros(1, T, dtype=torch.bool, device=CPU)
        topk_lp, topk_ids = lp_all.topk(min(self.beam_size, V), dim=-1)
        if self.context_graph is not None and self._tables is None:
            self._tables = self.context_graph.tables(V, CPU)
        active = torch.ones(1, dtype=torch.bool, device=CPU)
        beam = self._beam
        for t in range(T):
            total = torch.logaddexp(beam.pb, beam.pnb)
            if bool(skip[0, t]):
                beam = beam._replace(pb=total + lp_all[:, t, self.blank_id].unsqueeze(1),
                                     pnb=torch.full_like(beam.pnb, NEG_INF))
            else:
                beam = prefix_step(beam, total, self._prefixes, topk_lp[:, t],
                                    topk_ids[:, t], active, V, self.blank_id, self._tables)
        self._beam = beam
        self.frames += T

    def nbest(self) -> NBest:
        """The live prefixes with their log scores, best first."""
        return nbest_lists(self._beam, self._prefixes, self._tables)[0]

    def partial_nbest(self) -> NBest:
        """What a stream shows before its end: the n-best as it stands."""
        return self.nbest()

    def best(self) -> List[int]:
        nbest = self.nbest()
        return list(nbest[0][0]) if nbest else []


@dataclass(frozen=True)
class EndpointRules:
    """When a sentence ends in continuous decoding (WeNet runtime's three rules).

    A frame is silence when its CTC blank probability exceeds ``blank_prob``. The
    sentence ends after ``max_leading_silence_ms`` of silence with nothing decoded
    yet (the silence is dropped), after ``trailing_silence_ms`` of silence following
    speech, or when it reaches ``max_sentence_ms``. A fourth rule, ``vad_silence``: with
    ``vad_silence_ms`` > 0 a sentence with something decoded also ends after that much
    silence in the audio itself (the energy VAD, ``wenet/inference/vad.py``; the stream
    measures it and passes it to :meth:`EndpointDetector.reached`).
    """

    blank_prob: float = 0.8
    max_leading_silence_ms: float = 5000.0
    trailing_silence_ms: float = 1000.0
    max_sentence_ms: float = 20000.0
    vad_silence_ms: float = 0.0


class EndpointDetector:
    """Trailing-silence bookkeeping of the current sentence."""

    def __init__(self, rules: EndpointRules, frame_ms: float, blank_id: int = 0) -> None:
        self.rules = rules
        self.frame_ms = frame_ms
        self.blank_id = blank_id
        self.reset()

    def reset(self) -> None:
        self.frames = 0
        self.trailing_silence = 0

    def update(self, logprobs: torch.Tensor) -> None:
        """Count the frames of a chunk's CTC log-probabilities (T, V)."""
        silent = (logprobs[:, self.blank_id] > math.log(self.rules.blank_prob)).tolist()
        for s in silent:
            self.trailing_silence = self.trailing_silence + 1 if s else 0
        self.frames += len(silent)

    def advance(self, frames: int, trailing_silence: int) -> None:
        """Count ``frames`` more frames, the sentence now ending in ``trailing_silence``
        silent ones (a search that knows its silence otherwise: a transducer's frames
        since its best hypothesis' last label)."""
        self.frames += frames
        self.trailing_silence = trailing_silence

    def reached(self, decoded_something: bool, vad_silence_ms: float = 0.0) -> Optional[str]:
        """The rule that ends the sentence now, or None; ``vad_silence_ms``: the audio's
        trailing silence by the VAD (the ``vad_silence`` rule, when enabled)."""
        silence_ms = self.trailing_silence * self.frame_ms
        if self.frames * self.frame_ms >= self.rules.max_sentence_ms:
            return "max_sentence"
        if decoded_something and silence_ms >= self.rules.trailing_silence_ms:
            return "trailing_silence"
        if (decoded_something and self.rules.vad_silence_ms > 0
                and vad_silence_ms >= self.rules.vad_silence_ms):
            return "vad_silence"
        if not decoded_something and silence_ms >= self.rules.max_leading_silence_ms:
            return "leading_silence"
        return None

"""One batch's decoding context: encoder output, options, and the work modes share.

Several modes need the same intermediate results: the CTC log-probabilities
(every CTC mode), the CTC prefix beam n-best (``ctc_prefix_beam_search`` and
``attention_rescoring``), the transducer beam n-best (``rnnt_beam_search`` and
``rnnt_beam_attn_rescoring``).  :class:`BatchContext` computes each on first use
and keeps it for the rest of the batch, so it runs once however many modes use it.

Timing, so that per-mode RTFs stay meaningful: each shared result remembers the
seconds its own computation took (not counting shared results it used in turn),
and :meth:`BatchContext.run` charges a mode its own seconds plus the full time of
every shared result it used, whether computed during that mode or before.  A
mode's seconds are thus what decoding it alone would have cost; shared work is
measured once and counted in each mode that used it (so the modes' seconds do
not add up to the batch's wall time).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, NamedTuple, Set

import torch

from wenet.decode.ctc import ctc_prefix_beam_search
from wenet.decode.ctc_lm import ctc_lm_prefix_beam_search
from wenet.decode.hyps import NBest
from wenet.decode.options import DecodeOptions
from wenet.decode.transducer import rnnt_beam_search

_clock = time.perf_counter  # module-level so that tests can substitute a fake clock


class ModeResult(NamedTuple):
    """One mode's output for a batch."""

    hyps: List[List[int]]    # best token ids per utterance, in batch order
    seconds: float           # search time charged to the mode (module docstring)
    counts: Dict[str, int]   # mode-specific counters (encoder_frames, joint_evals)


def _sync(tensor: torch.Tensor) -> None:
    """Wait for the device, so that wall-clock times cover the work queued on it."""
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)


class BatchContext:
    """A batch's encoder output, the model and options, and memoised shared results.

    ``model`` offers what the requested modes use: ``ctc_logprobs``, ``decoder``,
    ``sos``, ``eos`` and, for transducer modes, the transducer decoding interface.
    """

    def __init__(self, model: Any, encoder_out: torch.Tensor, encoder_mask: torch.Tensor,
                 options: DecodeOptions) -> None:
        self.model = model
        self.encoder_out = encoder_out
        self.encoder_mask = encoder_mask
        self.options = options
        self.encoder_lens = encoder_mask.reshape(encoder_out.size(0), -1).sum(dim=1)
        self.counts: Dict[str, int] = {}  # the running mode's counters
        self.transducer_stats: Dict[str, int] = {}  # joint calls of the transducer beam
        self._values: Dict[str, Any] = {}
        self._seconds: Dict[str, float] = {}   # own time of each shared result
        self._deps: Dict[str, Set[str]] = {}   # shared results each one used
        self._used: Set[str] = set()           # shared results used by the running step
        self._fresh_s = 0.0                    # seconds of shared work computed in it

    def shared(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()``'s value, computed on the first call for ``name`` only."""
        if name not in self._values:
            outer_used, outer_fresh = self._used, self._fresh_s
            self._used, self._fresh_s = set(), 0.0
            start = _clock()
            value = compute()
            _sync(self.encoder_out)
            elapsed = _clock() - start
            self._seconds[name] = elapsed - self._fresh_s
            self._deps[name] = self._used
            self._values[name] = value
            self._used, self._fresh_s = outer_used, outer_fresh + elapsed
        self._used |= {name} | self._deps[name]
        return self._values[name]

    def run(self, search: Callable[["BatchContext"], List[List[int]]]) -> ModeResult:
        """Run one mode's ``search`` and charge it (see the module docstring)."""
        self._used, self._fresh_s, self.counts = set(), 0.0, {}
        start = _clock()
        hyps = search(self)
        _sync(self.encoder_out)
        elapsed = _clock() - start
        seconds = elapsed - self._fresh_s + sum(self._seconds[n] for n in self._used)
        return ModeResult(hyps, seconds, self.counts)

    def count(self, key: str, n: int) -> None:
        """Add ``n`` to the running mode's counter ``key``."""
        self.counts[key] = self.counts.get(key, 0) + n

    @property
    def ctc_logprobs(self) -> torch.Tensor:
        """[B, T, V] CTC log-probabilities."""
        return self.shared("ctc_logprobs", lambda: self.model.ctc_logprobs(self.encoder_out))

    @property
    def ctc_nbest(self) -> List[NBest]:
        """The CTC prefix beam search n-best of every utterance."""
        o = self.options
        if o.lm_fusion is not None:
            if o.context_graph is not None:
                raise ValueError("hotword biasing and an n-gram LM together are not supported: "
                                 "give --context_list_path or --lm_path")
            return self.shared("ctc_nbest", lambda: ctc_lm_prefix_beam_search(
                self.ctc_logprobs, self.encoder_lens, o.beam_size, o.lm_fusion,
                blank_skip_threshold=o.blank_skip_threshold))
        return self.shared("ctc_nbest", lambda: ctc_prefix_beam_search(
            self.ctc_logprobs, self.encoder_lens, o.beam_size,
            blank_skip_threshold=o.blank_skip_threshold, context_graph=o.context_graph))

    @property
    def transducer_nbest(self) -> List[NBest]:
        """The transducer modified beam search n-best of every utterance."""
        return self.shared("transducer_nbest", lambda: rnnt_beam_search(
            self.model, self.encoder_out, self.encoder_lens, self.options.beam_size,
            length_norm=self.options.rnnt_length_norm,
            context_graph=self.options.context_graph, stats=self.transducer_stats))

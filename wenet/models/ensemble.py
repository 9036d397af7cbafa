"""Decoding with several CTC/attention models at once: their posteriors averaged.

:class:`EnsembleModel` wraps K trained models that share one unit set and one encoder
frame rate (say, fine-tuning runs of one recipe with different settings, or a
Conformer and a Zipformer with the same units).  It offers what the decoding modes
use (``encode``, ``ctc_logprobs``, ``decoder``, ``sos``/``eos``,
``subsampling_rate``), so every CTC and attention mode, the n-gram LM fusion and
hotword biasing work on it unchanged:

* ``encode`` runs each model's encoder and returns their outputs side by side,
  ``[B, T, D_1 + ... + D_K]``, with the (common) mask;
* ``ctc_logprobs`` splits that tensor, takes each model's CTC log-probabilities and
  returns the log of their weighted mean probability;
* ``decoder`` does the same with the attention decoders' next-token distributions,
  in the batched rescoring call and in the step-by-step beam search (whose cache
  holds every model's per-layer cache, one list after another).

Averaging probabilities (not log-probabilities) keeps a token likely wherever one
model is sure of it, which suits CTC's peaky, sometimes shifted spikes; with K = 1 the
wrapper gives the wrapped model's scores exactly.  Transducer models are refused: the
transducer searches drive a predictor and joiner per hypothesis, which this wrapper
does not combine.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch


def _log_mean(logps: Sequence[torch.Tensor], log_weights: torch.Tensor) -> torch.Tensor:
    """``log(sum_k w_k * exp(logps[k]))`` elementwise (weights summing to 1)."""
    stacked = torch.stack([lp.float() for lp in logps], dim=0)
    shape = (-1,) + (1,) * (stacked.dim() - 1)
    return torch.logsumexp(stacked + log_weights.to(stacked.device).view(shape), dim=0)


class _EnsembleDecoder(torch.nn.Module):
    """The attention decoders of an ensemble, each reading its own slice of the memory."""

    def __init__(self, owner: "EnsembleModel") -> None:
        super().__init__()
        self._owner = [owner]  # a plain list: not a submodule (no parameter twice)

    @property
    def owner(self) -> "EnsembleModel":
        return self._owner[0]

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor, ys_in_pad: torch.Tensor,
                ys_in_lens: torch.Tensor, r_ys_in_pad: torch.Tensor = torch.empty(0),
                reverse_weight: float = 0.0
                ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """As a decoder's forward, but the returned "logits" are the ensemble's
        log-probabilities (a log-softmax leaves them as they are)."""
        owner = self.owner
        l_parts, r_parts, olens = [], [], None
        for model, mem in zip(owner.models, owner.split(memory)):
            l_x, r_x, olens = model.decoder(mem, memory_mask, ys_in_pad, ys_in_lens,
                                            r_ys_in_pad, reverse_weight)
            l_parts.append(torch.log_softmax(l_x.float(), dim=-1))
            if reverse_weight > 0:
                if r_x.dim() != 3:
                    raise ValueError(f"reverse_weight {reverse_weight} needs right-to-left "
                                     f"decoders; {type(model.decoder).__name__} has none")
                r_parts.append(torch.log_softmax(r_x.float(), dim=-1))
        left = _log_mean(l_parts, owner.log_weights)
        right = (_log_mean(r_parts, owner.log_weights) if r_parts
                 else torch.zeros(0, device=left.device))
        return left, right, olens

    def forward_one_step(self, memory: torch.Tensor, memory_mask: torch.Tensor,
                         tgt: torch.Tensor, tgt_mask: torch.Tensor,
                         cache: Optional[List[torch.Tensor]] = None
                         ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """One beam-search step of every decoder; the cache is their caches concatenated
        (the first step learns each decoder's cache length)."""
        owner = self.owner
        logps, new_cache, sizes = [], [], []
        start = 0
        for k, (model, mem) in enumerate(zip(owner.models, owner.split(memory))):
            own: Optional[List[torch.Tensor]] = None
            if cache is not None:
                n = owner.cache_sizes[k]
                own = list(cache[start:start + n])
                start += n
            logp, c = model.decoder.forward_one_step(mem, memory_mask, tgt, tgt_mask, own)
            logps.append(logp)
            c = [c] if isinstance(c, torch.Tensor) else list(c)
            sizes.append(len(c))
            new_cache += c
        owner.cache_sizes = sizes
        return _log_mean(logps, owner.log_weights), new_cache


class EnsembleModel(torch.nn.Module):
    """K CTC/attention models decoded as one (see the module docstring).

    ``weights`` (default equal) are normalised to sum to 1.  Raises ValueError when
    the models differ in units, frame rate or kind.
    """

    def __init__(self, models: Sequence[torch.nn.Module],
                 weights: Optional[Sequence[float]] = None) -> None:
        super().__init__()
        if not models:
            raise ValueError("an ensemble needs at least one model")
        weights = [1.0] * len(models) if weights is None else list(weights)
        if len(weights) != len(models) or any(not w > 0 for w in weights):
            raise ValueError(f"ensemble weights {weights}: need one positive weight per model "
                             f"({len(models)} models)")
        first = models[0]
        for i, m in enumerate(models):
            if hasattr(m, "predictor") or not hasattr(m, "ctc_logprobs"):
                raise ValueError(f"ensemble model {i}: only CTC/attention models can be "
                                 "ensembled (transducer searches are not combined)")
            if m.vocab_size != first.vocab_size:
                raise ValueError(f"ensemble model {i} has {m.vocab_size} units, model 0 has "
                                 f"{first.vocab_size}: the models must share one units.txt")
            if m.subsampling_rate() != first.subsampling_rate():
                raise ValueError(f"ensemble model {i} subsamples by {m.subsampling_rate()}, "
                                 f"model 0 by {first.subsampling_rate()}: their frames differ")
        self.models = torch.nn.ModuleList(models)
        total = float(sum(weights))
        self.register_buffer("log_weights", torch.tensor([math.log(w / total) for w in weights]),
                             persistent=False)
        self.vocab_size = first.vocab_size
        self.sos, self.eos = first.sos, first.eos
        self.ignore_id = getattr(first, "ignore_id", -1)
        self.dims: List[int] = []
        self.cache_sizes: List[int] = []
        self.decoder = _EnsembleDecoder(self)

    def subsampling_rate(self) -> int:
        return self.models[0].subsampling_rate()

    def right_context(self) -> int:
        return max(m.right_context() for m in self.models)

    def encode(self, speech: torch.Tensor, speech_lengths: torch.Tensor,
               decoding_chunk_size: int = -1, num_decoding_left_chunks: int = -1,
               simulate_streaming: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        """Every model's encoder output side by side ``[B, T, sum D]``, and the mask."""
        outs, mask = [], None
        for i, m in enumerate(self.models):
            out, own_mask = m.encode(speech, speech_lengths, decoding_chunk_size,
                                     num_decoding_left_chunks, simulate_streaming)
            if mask is None:
                mask = own_mask
            elif own_mask.shape != mask.shape or not torch.equal(own_mask, mask):
                raise ValueError(f"ensemble model {i}'s encoder gives {tuple(own_mask.shape)} "
                                 f"frames, model 0's {tuple(mask.shape)}: they must agree")
            outs.append(out)
        self.dims = [o.size(-1) for o in outs]
        return torch.cat(outs, dim=-1), mask

    def split(self, encoder_out: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """``encode``'s output cut back into the models' own encoder outputs."""
        if sum(self.dims) != encoder_out.size(-1):
            raise ValueError(f"encoder output of width {encoder_out.size(-1)} is not this "
                             f"ensemble's ({self.dims}): call encode first")
        return torch.split(encoder_out, self.dims, dim=-1)

    def ctc_logprobs(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """Log of the weighted mean of the models' CTC posteriors, ``[B, T, V]``."""
        parts = [m.ctc_logprobs(x) for m, x in zip(self.models, self.split(encoder_out))]
        return _log_mean(parts, self.log_weights)

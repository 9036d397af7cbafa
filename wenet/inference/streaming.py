"""Streaming recognition of one audio stream: 16-bit PCM in, partial and final results out.

:class:`StreamingRecognizer` is one client's decoder. Audio arrives in pieces of any
length; fbank frames are computed as they become complete
(:class:`~wenet.inference.features.IncrementalFbank`), the encoder runs one chunk of
``chunk_size`` output frames at a time with its attention and convolution caches
(the model's ``forward_encoder_chunk``, present on the eager model and on the
exported TorchScript module alike), and the search continues from chunk to chunk
(``wenet.inference.stream_search``): for CTC + attention models (U2/U2++, Zipformer)
the CTC prefix beam search (with hotwords, or with a word n-gram LM), and at the end of
a sentence the n-best rescored by the attention decoder (the scores
``attention_rescoring`` uses); for transducers greedy or modified beam search (with
hotwords). The winner gets word times from a forced alignment of its tokens.

The chunks are cut exactly as ``StreamingEncoder.forward_chunk_by_chunk`` cuts them
(``recognize.py --simulate_streaming``), by the same ``ChunkWindow``: chunk ``k`` reads
feature frames ``[k * stride, k * stride + window)``, and the last chunks at the end of
the stream read what is left. So, without endpointing, the final result equals
``recognize.py --simulate_streaming`` with the same ``--decoding_chunk_size``,
``--num_decoding_left_chunks``, beam and weights, in mode ``attention_rescoring``
(CTC models), ``rnnt_beam_search`` or ``rnnt_greedy_search`` (transducers).

Only a model trained to run chunk by chunk is streamed (:func:`is_streaming_model`
asks the model: its encoder's ``is_streaming()``, exported in ``final.zip``).

Sentences: with ``continuous`` the :class:`~wenet.decode.stream_state.EndpointRules`
cut the stream into sentences (a leading silence alone is dropped; with
``vad_silence_ms`` > 0 also after that much silence by the energy VAD of
:class:`~wenet.inference.vad.StreamingVad`, measured on the audio up to the end of the
chunk just encoded and counted from the sentence's start at most, so the silence that
ended one sentence does not end the next); each sentence is
decoded from fresh caches, as WeNet's runtime does, and its word times count from the
start of the stream. Silence is CTC blank frames for CTC models, frames without a label
of the best hypothesis for transducers. Without ``continuous`` the stream is one
sentence, ended by :meth:`StreamingRecognizer.finish` or when it reaches
``max_sentence_ms``.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from wenet.dataset.fbank import FeatureConf
from wenet.dataset.tokenizer import Tokenizer
from wenet.alignment.align import AlignmentError
from wenet.alignment.timing import model_geometry
from wenet.decode.options import DecodeOptions
from wenet.decode.context_graph import ContextGraph
from wenet.decode.stream_state import EndpointDetector
from wenet.inference.features import IncrementalFbank
from wenet.inference.stream_search import (CtcStreamSearch, TransducerStreamSearch,
                                           is_transducer_model)
from wenet.inference.vad import StreamingVad
from wenet.utils.chunk_window import ChunkWindow


def is_streaming_model(model: Any, configs: Optional[Dict[str, Any]] = None) -> bool:
    """Whether ``model`` (eager, or a ``ScriptedModel``) was trained to run chunk by chunk:
    its ``is_streaming()`` (the encoder's: U2/U2++ chunk training, a causal Zipformer).
    A ``final.zip`` exported before that method was: ``configs``' encoder_conf says
    (``use_dynamic_chunk``, ``static_chunk_size``, ``causal`` for a Zipformer)."""
    try:
        method = model.is_streaming
    except AttributeError:
        logging.warning("the model does not say whether it streams (exported before "
                        "is_streaming was); going by train.yaml: re-export it (stage 6)")
        configs = configs or {}
        conf = configs.get("encoder_conf") or {}
        if configs.get("encoder") == "zipformer":
            return bool(conf.get("causal"))
        return bool(conf.get("use_dynamic_chunk")) or int(conf.get("static_chunk_size", 0)) > 0
    return bool(method())


class StreamingRecognizer:
    """One audio stream's decoder (not thread-safe: one call at a time)."""

    def __init__(self, model: Any, tokenizer: Tokenizer, feature_conf: FeatureConf,
                 options: DecodeOptions, nbest: int = 1, continuous: bool = False,
                 context_graph: Optional[ContextGraph] = None,
                 transducer_search: str = "beam") -> None:
        """``transducer_search``: "beam" or "greedy" for a transducer model (ignored for
        CTC models); ``context_graph``: hotwords (default ``options.context_graph``)."""
        if options.chunk_size <= 0:
            raise ValueError(f"a stream is encoded chunk by chunk: chunk_size must be > 0, "
                             f"got {options.chunk_size}")
        fixed = getattr(model, "fixed_chunking", None)  # an ONNX model's export-time chunks
        if fixed is not None and (options.chunk_size, options.num_left_chunks) != fixed():
            raise ValueError("this model streams chunks of {} frames with {} left chunks only "
                             "(fixed at its export); asked for {} and {}".format(
                                 *fixed(), options.chunk_size, options.num_left_chunks))
        self.model = model
        self.tokenizer = tokenizer
        self.options = options
        self.nbest = max(1, min(nbest, options.beam_size))
        self.continuous = continuous
        self.context_graph = options.context_graph if context_graph is None else context_graph
        self.transducer = is_transducer_model(model)
        self.transducer_search = transducer_search
        self.fbank = IncrementalFbank(feature_conf)
        self.subsampling = int(model.subsampling_rate())
        self.chunks = ChunkWindow(self.subsampling, int(model.right_context()),
                                  options.chunk_size, options.num_left_chunks)
        self.frame_s = self.subsampling * feature_conf.frame_shift / 1000.0
        # word times: the frames' (offset-corrected, words >= 50 ms; wenet/alignment/timing.py)
        self.geometry = model_geometry(model, feature_conf.frame_shift, feature_conf.frame_length)
        self.eos = int(model.eos_symbol())
        self.id_to_token = {i: t for t, i in tokenizer.symbol_table.items()}
        self.endpoint = EndpointDetector(options.endpoint, self.frame_s * 1000.0)
        # the vad_silence rule: the VAD reads the audio up to the end of each chunk
        self.vad = StreamingVad(self.fbank.sample_rate) \
            if continuous and options.endpoint.vad_silence_ms > 0 else None
        self._vad_pending = np.zeros(0, dtype=np.float32)
        self._vad_sentence_start = 0   # VAD windows before this sentence
        self.samples_in = 0
        self.sentence_start = 0   # encoder frames of the stream before this sentence
        self.ended = False        # non-continuous stream finished (max sentence length)
        self._feats = torch.zeros(0, feature_conf.num_mel_bins)  # from the next chunk on
        self._new_sentence()

    def _new_search(self) -> Any:
        if self.transducer:
            return TransducerStreamSearch(self.model, self.options, self.context_graph,
                                          self.transducer_search)
        return CtcStreamSearch(self.model, self.options, self.context_graph)

    def _new_sentence(self) -> None:
        self._att_cache = torch.zeros(0, 0, 0, 0)
        self._cnn_cache = torch.zeros(0, 0, 0, 0)
        self._offset = 0
        self._search = self._new_search()
        self.endpoint.reset()
        self._last_partial: Optional[str] = None
        if getattr(self, "vad", None) is not None:
            self._vad_sentence_start = self.vad.windows

    @property
    def audio_seconds(self) -> float:
        return self.samples_in / self.fbank.sample_rate

    @torch.no_grad()
    def accept_pcm(self, pcm: bytes) -> List[Dict[str, Any]]:
        """Take 16-bit little-endian mono PCM at 16 kHz (an even number of bytes); returns
        the events it causes: ``partial_result`` when the best text changed, and in
        continuous mode ``final_result`` at each endpoint; ``speech_end`` when a
        non-continuous stream reached ``max_sentence_ms``."""
        if len(pcm) % 2:
            raise ValueError(f"{len(pcm)} bytes are not a whole number of 16-bit samples")
        if self.ended:
            return []
        samples = torch.frombuffer(bytearray(pcm), dtype=torch.int16).float() / 32768.0
        self.samples_in += samples.numel()
        if self.vad is not None:
            self._vad_pending = np.concatenate([self._vad_pending, samples.numpy()])
        self._feats = torch.cat([self._feats, self.fbank.accept(samples)])
        events: List[Dict[str, Any]] = []
        while self._feats.size(0) >= self.chunks.window and not self.ended:
            self._run_chunk(self._feats[:self.chunks.window])
            self._feed_vad(self.fbank.frames_out - self._feats.size(0) + self.chunks.window)
            self._feats = self._feats[self.chunks.stride:]
            events.extend(self._after_chunk())
        return events

    def _feed_vad(self, frames_end: int) -> None:
        """Give the VAD the samples up to the end of feature frame ``frames_end - 1``."""
        if self.vad is None:
            return
        fed = self.samples_in - len(self._vad_pending)
        end = (frames_end - 1) * self.fbank.shift + self.fbank.window
        take = max(0, min(len(self._vad_pending), end - fed))
        self.vad.accept(self._vad_pending[:take])
        self._vad_pending = self._vad_pending[take:]

    def _run_chunk(self, xs: torch.Tensor) -> None:
        ys, self._att_cache, self._cnn_cache = self.model.forward_encoder_chunk(
            xs.unsqueeze(0), self._offset, self.chunks.required_cache_size,
            self._att_cache, self._cnn_cache)
        self._offset += ys.size(1)
        self._search.advance(ys)
        self._search.update_endpoint(self.endpoint)

    def _after_chunk(self) -> List[Dict[str, Any]]:
        partial = self._search.partial()
        best = list(partial[0][0]) if partial else []
        vad_ms = 0.0
        if self.vad is not None:
            windows = min(self.vad.trailing_windows, self.vad.windows - self._vad_sentence_start)
            vad_ms = windows * self.vad.conf.hop_s * 1000.0
        rule = self.endpoint.reached(bool(best), vad_ms)
        if rule is not None and (self.continuous or rule == "max_sentence"):
            logging.debug("endpoint (%s) after %d frames", rule, self.endpoint.frames)
            events = self._end_sentence(final_if_empty=not self.continuous)
            return events + ([] if self.continuous else [{"type": "speech_end"}])
        text = self.tokenizer.decode(best, eos=self.eos)
        if text and text != self._last_partial:
            self._last_partial = text
            return [{"type": "partial_result",
                     "nbest": [{"sentence": self.tokenizer.decode(list(h), eos=self.eos)}
                               for h, _ in partial[:self.nbest]]}]
        return []

    @torch.no_grad()
    def finish(self) -> List[Dict[str, Any]]:
        """The end of the stream: encode what is left as ``forward_chunk_by_chunk`` does,
        give the last sentence's ``final_result`` (also when empty) and ``speech_end``;
        nothing when the stream has ended already."""
        if self.ended:  # speech_end was given already (max_sentence_ms reached)
            return []
        for cur in self.chunks.starts(self._feats.size(0), self.chunks.context):
            self._run_chunk(self._feats[cur:cur + self.chunks.window])
        self._feats = self._feats[:0]
        events = self._end_sentence(final_if_empty=True)
        self.ended = True
        return events + [{"type": "speech_end"}]

    def _end_sentence(self, final_if_empty: bool) -> List[Dict[str, Any]]:
        """Rescore and time the sentence, then start the next one (or end the stream)."""
        result = self.final_result()
        frames = self._offset
        self.sentence_start += frames
        self._new_sentence()
        if not self.continuous:
            self.ended = True
            return [result]
        if not result["nbest"][0]["sentence"] and not final_if_empty:
            return []
        return [result]

    def final_result(self) -> Dict[str, Any]:
        """The current sentence's result: ``final_result`` with its n-best (rescored, for
        CTC models), the best one with word times (seconds from the start of the stream)
        and confidences."""
        ranked = self._search.final() if self._offset else []
        if not ranked:
            return {"type": "final_result", "nbest": [{"sentence": "", "words": []}]}
        out = [{"sentence": self.tokenizer.decode(list(hyp), eos=self.eos),
                "score": round(score, 4)} for hyp, score in ranked[:self.nbest]]
        out[0]["words"] = self._words(list(ranked[0][0]))
        return {"type": "final_result", "nbest": out}

    def _words(self, hyp: List[int]) -> List[Dict[str, Any]]:
        try:
            timing = self._search.timing(hyp, [self.id_to_token[t] for t in hyp],
                                         self.geometry, self._offset * self.frame_s)
        except AlignmentError as e:  # e.g. more tokens than frames: text without times
            logging.warning("no word times for a sentence: %s", e)
            return []
        base = self.sentence_start * self.frame_s
        return [{"word": w.word, "start": round(base + w.start_s, 3),
                 "end": round(base + w.end_s, 3), "confidence": round(w.confidence, 4)}
                for w in timing.words]

"""Transcribe audio with a loaded model directory: the Python API behind ``wenet.load_model``
and ``wenet/bin/transcribe.py``.

Audio goes through the recognition pipeline's own stages
(``wenet.inference.features.feature_batches``: mono downmix, resampling to the model's rate,
both logged; the model's inference fbank; batches padded longest first), so a file gives exactly the features, and the text,
that ``recognize.py`` gives it. Each batch is encoded once and decoded by
:func:`wenet.decode.nbest.decode_nbest` (the registered search of the mode, plus its
n-best and scores). With ``timestamps`` each result also carries per-token and per-word
times and confidences: the forced alignment of the chosen hypothesis, the CTC head's or,
for a transducer, the best path of the hypothesis through the joint's lattice, timed by
``wenet.alignment.timing.align_and_time`` (the one place that makes word times): the
audio's pauses steer the search and the word boundaries (``refine``; None: the frames'
offset-corrected times), no word shorter than ``min_word_s``, tokens inside their words.

Errors, one rule: ``Recognizer.transcribe`` returns a result for every input or raises.
A missing file raises FileNotFoundError (naming every missing one) before anything is
decoded; inputs that are read but give no result (not audio, an empty file, empty or
non-finite audio, a clip shorter than the model's minimum, ``loader.min_input_frames``)
raise :class:`AudioInputError` after the others are decoded: its ``failures`` (key,
source, reason) say why, its ``results`` hold the other inputs' results. A short clip
is refused before the model sees it, so it never changes the other inputs' batches.
``iter_results`` (the streaming form, used by transcribe.py) raises nothing for bad
inputs: it logs them by key and file, skips them and keeps them in ``last_failures``.

Inputs, one rule for keys: a path's key is its file name without extension, spaces
replaced by ``_`` (``wenet.runtime.audio.path_key``); ``keys=`` names them otherwise
(no whitespace). Two inputs with one key are refused before anything is decoded (give
``keys=``), and results come in input order. A wav.scp value that is a Kaldi pipe
(``cmd |``, a shell command) is refused unless the Recognizer has ``allow_pipes=True``
(``wenet.load_model(..., allow_pipes=True)``): audio names may come from other people,
and a pipe runs what it says. transcribe.py allows them in the wav.scp it is given, as
Kaldi does.

Audio longer than ``max_segment_s`` (20 s by default; 0: never) is cut at pauses into
segments decoded as utterances of their own and joined back into one result, times
counted from the start of the recording (``wenet/inference/long_audio.py``).
"""
from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from wenet.dataset.audio_bytes import is_pipe, refuse_pipes
from wenet.dataset.stats import InputFailure, RecordingStats
from wenet.alignment.align import AlignmentError, WordSpan
from wenet.alignment.pauses import RefineConf
from wenet.alignment.timing import MIN_WORD_S, align_and_time, model_geometry
from wenet.decode.options import DecodeOptions
from wenet.decode.context_graph import ContextGraph
from wenet.inference.features import feature_batches
from wenet.inference.loader import LoadedModel, min_input_frames
from wenet.inference.long_audio import SegmentedItems, joined
from wenet.inference.segments import SegmentConf
from wenet.decode.nbest import decode_nbest
from wenet.runtime.audio import path_key, unique_keys

Audio = Union[str, Sequence[str], np.ndarray, torch.Tensor]

PIPES_HINT = "allow_pipes=True (wenet.load_model(..., allow_pipes=True))"
SECONDS_DECIMALS = 3   # JSON output: times in ms
SCORE_DECIMALS = 4     # JSON output: scores and confidences


class AudioInputError(ValueError):
    """Inputs that were read but gave no result; ``failures`` say which and why,
    ``results`` are the results of the other inputs (in input order)."""

    def __init__(self, failures: Sequence[InputFailure], results: Sequence["Result"] = ()
                 ) -> None:
        self.failures = list(failures)
        self.results = list(results)
        shown = "; ".join(str(f) for f in self.failures[:5])
        more = f"; and {len(self.failures) - 5} more" if len(self.failures) > 5 else ""
        super().__init__(f"{len(self.failures)} input(s) gave no result: {shown}{more}")


@dataclass
class Hypothesis:
    """One entry of an n-best list: text, units (pieces and ids) and its log score
    (what the mode ranks by; None where the mode has none, see ``decode/nbest.py``)."""

    text: str
    tokens: List[str]
    token_ids: List[int]
    score: Optional[float]


@dataclass
class TokenTime:
    """An aligned unit: start/end in seconds and its mean posterior (confidence)."""

    token: str
    start: float
    end: float
    confidence: float


@dataclass
class Result:
    """What transcribing one utterance gives: ``text`` is the 1-best (the mode's output),
    ``nbest`` best first; ``tokens``/``words`` are set with ``timestamps``."""

    key: str
    text: str
    nbest: List[Hypothesis]
    duration: float
    tokens: Optional[List[TokenTime]] = None
    words: Optional[List[WordSpan]] = None
    alignment_error: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict (None entries left out; seconds rounded to
        ``SECONDS_DECIMALS``, scores and confidences to ``SCORE_DECIMALS``)."""
        return {k: _rounded(k, v) for k, v in asdict(self).items() if v is not None}


_SECOND_KEYS = frozenset({"duration", "start", "end", "start_s", "end_s"})


def _rounded(key: str, value: Any) -> Any:
    """``value`` of ``key`` with its floats rounded for output (see ``Result.to_dict``)."""
    if isinstance(value, dict):
        return {k: _rounded(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(key, v) for v in value]
    if isinstance(value, float):
        return round(value, SECONDS_DECIMALS if key in _SECOND_KEYS else SCORE_DECIMALS)
    return value


def _tensor_audio(audio: Union[np.ndarray, torch.Tensor]) -> torch.Tensor:
    """An array as float32 (channels, samples) in [-1, 1]: 1-D is mono; 2-D is taken with
    the smaller dimension as channels (soundfile gives (samples, channels)); integer
    samples are scaled by their type's range."""
    wav = torch.as_tensor(np.asarray(audio) if isinstance(audio, np.ndarray) else audio)
    if not wav.is_floating_point():
        wav = wav.float() / float(-torch.iinfo(wav.dtype).min)
    wav = wav.float()
    if wav.dim() == 1:
        wav = wav.unsqueeze(0)
    elif wav.dim() != 2:
        raise ValueError(f"audio array must be 1-D or 2-D, got shape {tuple(wav.shape)}")
    elif wav.size(0) > wav.size(1):
        wav = wav.t()
    return wav.contiguous()


def audio_items(audio: Audio, sample_rate: Optional[int] = None,
                keys: Optional[Sequence[str]] = None) -> List[Tuple[str, Any]]:
    """(key, audio) pairs of what ``transcribe`` accepts: a path (or wav.scp value), a list
    of them (keys: file names without extension, unless given), or one array with its
    ``sample_rate`` (key ``audio``)."""
    if isinstance(audio, (np.ndarray, torch.Tensor)):
        if not sample_rate:
            raise ValueError("an audio array needs its sample_rate")
        return [((keys or ["audio"])[0], (_tensor_audio(audio), int(sample_rate)))]
    specs = [audio] if isinstance(audio, str) else list(audio)
    if keys is None:
        keys = [path_key(s.rstrip("|").strip()) for s in specs]
    if len(keys) != len(specs):
        raise ValueError(f"{len(keys)} keys for {len(specs)} audio inputs")
    for key in keys:
        if key != "_".join(key.split()) or not key:
            raise ValueError(f"key '{key}' has whitespace or is empty: results are written "
                             "as 'key text' and CTM lines, whose fields are separated by spaces")
    items = list(zip(keys, specs))
    unique_keys(items, "give keys=[...] to tell them apart")
    return items


def context_graph_of(phrases: Sequence[str], tokenizer: Any, score: float) -> ContextGraph:
    """The hotword graph of a phrase list, built as ``--context_list_path`` builds it."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as f:
        f.write("".join(p.strip() + "\n" for p in phrases if p.strip()))
        f.flush()
        return ContextGraph.from_file(f.name, tokenizer, score)


@dataclass
class Recognizer:
    """A loaded model directory and the decoding settings (``DecodeOptions`` and the
    encoder's chunking), transcribing in batches of ``batch_size``."""

    loaded: LoadedModel
    # run.sh stage 5's search settings (beam 10, CTC weight 0.5 in attention rescoring)
    options: DecodeOptions = field(default_factory=DecodeOptions)
    batch_size: int = 16
    context_score: float = 3.0       # hotwords given per call (context_list)
    last_stats: Optional[RecordingStats] = None
    last_failures: List[InputFailure] = field(default_factory=list)  # of the last call
    allow_pipes: bool = False        # run wav.scp values 'cmd |' (shell commands) given as audio
    max_segment_s: float = 20.0      # longer audio is cut at pauses (long_audio.py); 0: never
    # word times: pause-steered (None: the frames' times), words at least min_word_s long
    refine: Optional[RefineConf] = field(default_factory=RefineConf)
    min_word_s: float = MIN_WORD_S

    def transcribe(self, audio: Audio, sample_rate: Optional[int] = None,
                   mode: str = "attention_rescoring", nbest: int = 1, timestamps: bool = False,
                   context_list: Optional[Sequence[str]] = None,
                   keys: Optional[Sequence[str]] = None) -> List[Result]:
        """Results for ``audio`` (see :func:`audio_items`), in input order, one per input;
        FileNotFoundError for missing files, :class:`AudioInputError` for inputs that
        give no result (module docstring)."""
        items = audio_items(audio, sample_rate, keys)
        if not self.allow_pipes:
            refuse_pipes(items, PIPES_HINT)
        missing = [spec for _, spec in items if isinstance(spec, str) and _missing_file(spec)]
        if missing:
            raise FileNotFoundError(f"no such audio file: {', '.join(missing)}")
        results = list(self.iter_results(items, mode, nbest, timestamps, context_list))
        if self.last_failures:
            raise AudioInputError(self.last_failures, results)
        return results

    def iter_results(self, items: Iterable[Tuple[str, Any]], mode: str = "attention_rescoring",
                     nbest: int = 1, timestamps: bool = False,
                     context_list: Optional[Sequence[str]] = None) -> Iterator[Result]:
        """Results of ``(key, audio)`` pairs as batches finish, in input order."""
        options = self.options
        if self.loaded.scripted and mode == "attention":
            raise ValueError("mode attention needs the decoder's incremental step, which "
                             "final.zip does not export: load the checkpoint instead")
        if context_list:
            graph = context_graph_of(context_list, self.loaded.tokenizer, self.context_score)
            options = replace(options, context_graph=graph)
        stats = self.last_stats = RecordingStats("transcribe")
        self.last_failures = stats.failures
        order: Dict[str, int] = {}

        def checked(items: Iterable[Tuple[str, Any]]) -> Iterator[Tuple[str, Any]]:
            for key, audio in items:
                if not self.allow_pipes:
                    refuse_pipes([(key, audio)], PIPES_HINT)
                yield key, audio

        def numbered() -> Iterator[Tuple[str, Any]]:
            for key, audio in items:
                order.setdefault(key, len(order))
                yield key, audio
        items = checked(items)
        segmented = None
        if self.max_segment_s > 0:
            segmented = items = SegmentedItems(items, self.segment_conf())

        keep_audio = timestamps and self.refine is not None

        def decoded() -> Iterator[Result]:
            for batch in feature_batches(numbered(), self.loaded.feature_conf, self.batch_size,
                                         stats, min_input_frames(self.loaded.model),
                                         keep_audio):
                results = self.decode_batch(batch, mode, nbest, timestamps, options)
                yield from sorted(results, key=lambda r: order[r.key])
        yield from decoded() if segmented is None else joined(decoded(), segmented)
        stats.log_summary()

    def segment_conf(self) -> SegmentConf:
        """How audio longer than ``max_segment_s`` is cut: ``SegmentConf``'s defaults, with
        the shortest segment and the kept silence scaled down for a small ``max_segment_s``."""
        return SegmentConf.for_max_segment(self.max_segment_s)

    @torch.no_grad()
    def decode_batch(self, batch: dict, mode: str, nbest: int, timestamps: bool,
                     options: DecodeOptions) -> List[Result]:
        """Results of one padded batch of the data pipeline (``keys``, ``feats``,
        ``feats_lengths``), in batch order."""
        lm = self.loaded
        feats = batch["feats"].to(lm.device)
        lens = batch["feats_lengths"].to(lm.device)
        encoder_out, encoder_mask = lm.model.encode(
            feats, lens, options.chunk_size, options.num_left_chunks, options.simulate_streaming)
        best, lists, ctx = decode_nbest(lm.model, encoder_out, encoder_mask, mode, options,
                                        nbest)
        shift_s = lm.feature_conf.frame_shift / 1000.0
        out = []
        for b, key in enumerate(batch["keys"]):
            hyps = [self._hypothesis(list(ids), score) for ids, score in lists[b]]
            result = Result(key, hyps[0].text, hyps, float(batch["feats_lengths"][b]) * shift_s)
            if timestamps:
                audio = batch["audio"][b] if "audio" in batch else None
                self._add_times(result, ctx, b, best[b], audio, batch.get("sample_rate", 0))
            out.append(result)
        return out

    def _hypothesis(self, ids: List[int], score: Optional[float]) -> Hypothesis:
        tok = self.loaded.tokenizer
        eos = self.loaded.model.eos
        text = tok.decode(ids, eos=eos)
        pieces = [tok.decode([i], raw=True, eos=eos) for i in ids]
        return Hypothesis(text, pieces, ids, None if score is None else float(score))

    def _add_times(self, result: Result, ctx: Any, b: int, ids: List[int],
                   audio: Optional[torch.Tensor] = None, rate: int = 0) -> None:
        """Per-token and per-word times of the chosen hypothesis (module docstring)."""
        lm = self.loaded
        frames = int(ctx.encoder_lens[b])
        pieces = result.nbest[0].tokens
        geometry = model_geometry(lm.model, lm.feature_conf.frame_shift,
                                  lm.feature_conf.frame_length)
        if _has_ctc_head(lm.model):
            frames_of = {"log_probs": ctx.ctc_logprobs[b, :frames].float().cpu()}
        else:
            frames_of = {"model": lm.model, "encoder_out": ctx.encoder_out[b, :frames]}
        try:
            _, spans, timing = align_and_time(
                list(ids), pieces, geometry,
                samples=None if audio is None else audio.double().numpy(), rate=rate,
                refine=self.refine, min_word_s=self.min_word_s, duration_s=result.duration,
                **frames_of)
        except AlignmentError as e:
            result.alignment_error = str(e)
            logging.warning("utterance %s: no timestamps: %s", result.key, e)
            return
        result.tokens = [TokenTime(p, a, e, s.score)
                         for (a, e, p), s in zip(timing.tokens, spans)]
        result.words = timing.words


def _missing_file(spec: str) -> bool:
    """Whether a wav.scp value names a file that does not exist (a ``cmd |`` never does)."""
    return not is_pipe(spec) and not os.path.exists(spec.strip())


def _has_ctc_head(model: Any) -> bool:
    """Whether timestamps come from the CTC head: every attention model has one; a
    transducer's times come from its own lattice (the path of its hypothesis)."""
    return not hasattr(model, "forward_joint_step")

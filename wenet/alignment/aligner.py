"""Forced alignment of a data list with a trained model (what ``wenet/bin/alignment.py`` runs).

Utterances come from a data.list (raw JSON lines or tar shards) through the data
pipeline's own readers; features are ``dataset.fbank``'s with the caller's inference
``FeatureConf`` (``LoadedModel.feature_conf``: no dither). Each
batch is encoded once, then every utterance's CTC log-probabilities are aligned to
its transcript (``align.ctc_forced_align``), or with ``method="transducer"`` the
transducer's lattice (``rnnt.transducer_token_spans``); ``timing.time_tokens`` turns the
aligned frames into word and token times. An utterance that cannot be aligned
(unreadable audio, empty transcript, a unit not in the dictionary, too few frames)
becomes a ``Failure`` naming its key and the reason; nothing else stops the run.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Union

import torch
from torch.nn.utils.rnn import pad_sequence

from wenet.dataset.audio import resample, to_mono
from wenet.dataset.fbank import FeatureConf, compute_fbank
from wenet.dataset.sources import raw_samples, shard_samples
from wenet.dataset.stats import PipelineStats
from wenet.dataset.tokenizer import Tokenizer
from wenet.alignment.align import AlignmentError, TokenSpan, WordSpan
from wenet.alignment.pauses import RefineConf
from wenet.alignment.timing import MIN_WORD_S, Interval, align_and_time, model_geometry
from wenet.utils.file_utils import text_lines

logger = logging.getLogger(__name__)
_KEY = re.compile(r"utterance (\S+)")
_SHARD = re.compile(r"shard (\S+)")


@dataclass
class Failure:
    """An utterance left out: its key (or the list line when no key could be read),
    a short reason and the details."""

    key: str
    reason: str
    detail: str = ""


@dataclass
class Utterance:
    """An utterance ready to align: its features and its transcript's ids and units."""

    key: str
    feats: torch.Tensor  # (frames, bins)
    tokens: List[int]
    units: List[str]
    duration_s: float
    wav: Optional[torch.Tensor] = None  # (samples,) mono, kept for boundary refinement
    sample_rate: int = 0


@dataclass
class Alignment:
    """The alignment of one utterance: the frame path (CTC; empty for a transducer), token
    spans in frames, and the times of ``timing.time_tokens``: words, and each token's
    ``(start s, end s, unit)`` inside its word."""

    key: str
    duration_s: float
    path: List[int]
    tokens: List[TokenSpan]
    units: List[str]
    words: List[WordSpan]
    frame_shift_s: float
    token_times: List[Interval]


class _RecordingStats(PipelineStats):
    """PipelineStats that also keeps each skipped utterance as a Failure."""

    def __init__(self, where: str) -> None:
        super().__init__(where, max_warnings=0)  # our own log lines name every failure
        self.failures: List[Failure] = []

    def warn(self, reason: str, message: str) -> None:
        super().warn(reason, message)
        found = _KEY.search(message) or _SHARD.search(message)
        key = (found.group(1) if found else message.split()[0]).rstrip(":")
        self.failures.append(Failure(key, reason.replace("_", " "), message))


def read_data_list(data_list: str, data_type: str = "raw") -> Iterator[Union[dict, Failure]]:
    """Samples (``key``, ``txt``, ``wav``, ``sample_rate``) of a data.list, in list order,
    and a Failure for each utterance or line the readers skipped."""
    if data_type not in ("raw", "shard"):
        raise ValueError(f"data_type must be raw or shard, got {data_type}")
    items = [(f"{data_list}:{n}", line.strip()) for n, line in text_lines(data_list)
             if line.strip()]
    stats = _RecordingStats(data_list)
    reader = raw_samples if data_type == "raw" else shard_samples
    for sample in reader(items, stats):
        yield from stats.failures
        stats.failures.clear()
        yield sample
    yield from stats.failures


class Aligner:
    """A model, its units and features: ``prepare`` a sample, then ``align`` a batch of
    prepared utterances. ``method``: ``ctc`` (the CTC head) or ``transducer`` (the
    transducer's lattice). With ``refine`` given, the audio's pauses steer the search when
    ``refine.pause_penalty`` or ``refine.speech_penalty`` > 0 (``pauses.pause_bias``) and
    word boundaries are moved to them (``pauses.refine_word_spans``); without it the times
    are the frames' (offset-corrected, ``timing.frame_offset_seconds``). No word is
    shorter than ``min_word_s``; token times lie inside their words (``timing``).
    ``decoding_chunk_size``/``num_decoding_left_chunks`` are the encoder's
    (``model.encode``; -1: full context)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer,
                 feature_conf: FeatureConf, device: Union[str, torch.device] = "cpu",
                 refine: Optional[RefineConf] = None, decoding_chunk_size: int = -1,
                 num_decoding_left_chunks: int = -1, method: str = "ctc",
                 min_word_s: float = MIN_WORD_S) -> None:
        if method not in ("ctc", "transducer"):
            raise ValueError(f"method must be ctc or transducer, got {method!r}")
        if method == "ctc" and not has_ctc_head(model):
            raise ValueError("the model has no CTC head: forced alignment with method ctc "
                             "needs one (a transducer: method transducer)")
        if method == "transducer" and not hasattr(model, "forward_joint_step"):
            raise ValueError("method transducer needs a transducer model")
        self.model, self.tokenizer, self.conf = model, tokenizer, feature_conf
        self.refine, self.method, self.min_word_s = refine, method, min_word_s
        # a chunk-trained (U2/U2++) model can encode with a chunk mask: local attention
        self.chunk = (decoding_chunk_size, num_decoding_left_chunks)
        self.device = torch.device(device)
        self.blank_id = tokenizer.symbol_table.get("<blank>", 0)
        self.geometry = model_geometry(model, feature_conf.frame_shift, feature_conf.frame_length)
        self.frame_shift_s = self.geometry.frame_shift_s
        self.id_to_unit = {i: u for u, i in tokenizer.symbol_table.items()}

    def prepare(self, sample: dict) -> Union[Utterance, Failure]:
        """Features and token ids of one sample, or the Failure that stops it."""
        key, txt = sample["key"], sample.get("txt", "")
        if not txt.strip():
            return Failure(key, "empty transcript")
        tokens, missing = self.tokenizer.encode(txt)
        if missing:
            return Failure(key, "unit not in dictionary", " ".join(sorted(set(missing))))
        wav, rate = sample["wav"], int(sample["sample_rate"])
        if wav.size(0) > 1:
            logger.info("utterance %s: %d channels averaged to mono", key, wav.size(0))
            wav = to_mono(wav)
        if self.conf.resample_rate and rate != self.conf.resample_rate:
            logger.info("utterance %s: %d Hz resampled to %d Hz", key, rate, self.conf.resample_rate)
            wav, rate = resample(wav, rate, self.conf.resample_rate), self.conf.resample_rate
        if not bool(torch.isfinite(wav).all()):
            return Failure(key, "non-finite audio", "NaN or infinite samples")
        try:
            feats = compute_fbank(wav, rate, **self.conf.fbank_kwargs())
        except ValueError as e:
            return Failure(key, "too few frames", str(e))
        if feats.size(0) <= self.model.right_context():
            return Failure(key, "too few frames",
                           f"{feats.size(0)} feature frames, the encoder needs "
                           f"{self.model.right_context() + 1} for one output frame")
        return Utterance(key, feats, tokens, [self.id_to_unit[t] for t in tokens],
                         wav.size(1) / rate, wav[0] if self.refine else None, rate)

    @torch.no_grad()
    def encode(self, utts: Sequence[Utterance]) -> List[torch.Tensor]:
        """Encoder output (T', D) of each utterance, one encoder pass for the batch."""
        feats = pad_sequence([u.feats for u in utts], batch_first=True).to(self.device)
        lens = torch.tensor([u.feats.size(0) for u in utts], device=self.device)
        encoder_out, mask = self.model.encode(feats, lens, *self.chunk)
        out_lens = mask.squeeze(1).sum(dim=1).cpu().tolist()
        return [encoder_out[i, : int(n)] for i, n in enumerate(out_lens)]

    @torch.no_grad()
    def log_probs(self, utts: Sequence[Utterance]) -> List[torch.Tensor]:
        """CTC log-probabilities (T', V) of each utterance, one encoder pass for the batch."""
        return [self.model.ctc_logprobs(enc[None]).float().cpu()[0] for enc in self.encode(utts)]

    def align(self, utts: Sequence[Utterance]) -> List[Union[Alignment, Failure]]:
        """The alignment of each utterance, or its Failure (too few frames, ...)."""
        if not utts:
            return []
        if self.method == "transducer":
            return [self.align_encoded(utt, enc) for utt, enc in zip(utts, self.encode(utts))]
        return [self.align_log_probs(utt, logp) for utt, logp in zip(utts, self.log_probs(utts))]

    def align_log_probs(self, utt: Utterance, logp: torch.Tensor) -> Union[Alignment, Failure]:
        """``utt`` aligned on its CTC log-probabilities ``logp`` (T', V) (``log_probs``)."""
        return self._align(utt, log_probs=logp)

    @torch.no_grad()
    def align_encoded(self, utt: Utterance, encoder_out: torch.Tensor
                      ) -> Union[Alignment, Failure]:
        """``utt`` aligned on the transducer's lattice over its encoder output (T', D)."""
        return self._align(utt, model=self.model, encoder_out=encoder_out)

    def _align(self, utt: Utterance, **frames) -> Union[Alignment, Failure]:
        samples = utt.wav.double().numpy() if utt.wav is not None else None
        try:
            path, spans, timing = align_and_time(
                utt.tokens, utt.units, self.geometry, samples=samples, rate=utt.sample_rate,
                refine=self.refine, blank_id=self.blank_id, min_word_s=self.min_word_s,
                duration_s=utt.duration_s, **frames)
        except AlignmentError as e:
            return Failure(utt.key, e.reason, e.detail)
        return Alignment(utt.key, utt.duration_s, path, spans, utt.units, timing.words,
                         self.frame_shift_s, timing.tokens)


def has_ctc_head(model: torch.nn.Module) -> bool:
    """Whether ``model`` has a trained CTC head: every attention model; a transducer only
    when trained with a CTC loss (``ctc_weight`` > 0)."""
    ctc = getattr(model, "ctc", None)
    if ctc is None:
        return False
    if hasattr(model, "forward_joint_step"):  # an exported module keeps its original_name
        return getattr(ctc, "original_name", type(ctc).__name__) != "_MissingCTC"
    return True


def align_data_list(aligner: Aligner, data_list: str, data_type: str = "raw",
                    batch_size: int = 16) -> Iterator[Union[Alignment, Failure]]:
    """Alignments and Failures of every utterance of ``data_list`` in list order, encoded
    ``batch_size`` utterances at a time."""
    pending: List[Union[Utterance, Failure]] = []
    ready = 0
    for item in read_data_list(data_list, data_type):
        prepared = item if isinstance(item, Failure) else aligner.prepare(item)
        pending.append(prepared)
        ready += isinstance(prepared, Utterance)
        if ready >= batch_size:
            yield from _flush(aligner, pending)
            pending, ready = [], 0
    yield from _flush(aligner, pending)


def _flush(aligner: Aligner, pending: List[Union[Utterance, Failure]]
           ) -> Iterator[Union[Alignment, Failure]]:
    """Align the Utterances of ``pending``; everything in its original order."""
    aligned = iter(aligner.align([u for u in pending if isinstance(u, Utterance)]))
    for item in pending:
        yield next(aligned) if isinstance(item, Utterance) else item


def failure_line(failure: Failure) -> str:
    """``key reason: detail`` as the failed file holds it (one line)."""
    detail = " ".join(failure.detail.split())
    return f"{failure.key} {failure.reason}" + (f": {detail}" if detail else "")


def summary(aligned: int, failures: Sequence[Failure]) -> str:
    """The run's one-line count: aligned, failed, failures per reason."""
    reasons: dict = {}
    for f in failures:
        reasons[f.reason] = reasons.get(f.reason, 0) + 1
    parts = ", ".join(f"{r}: {n}" for r, n in sorted(reasons.items()))
    return (f"aligned {aligned} of {aligned + len(failures)} utterances, failed "
            f"{len(failures)}" + (f" ({parts})" if parts else ""))


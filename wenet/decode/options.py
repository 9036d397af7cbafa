"""The search options: :class:`DecodeOptions`, and their command-line face (and ``RefineConf``'s).

Every CLI and bench that searches (recognize, transcribe, serve, the decode benches) or
encodes with chunks (alignment) adds its flags with :func:`add_search_options` and builds
its options with :func:`search_options`, so a flag has one name, one type, one help text
and one default (the dataclass's) wherever it appears. A CLI names the flags it
supports (``BATCH``, ``STREAM``, ``ENCODER`` or its own subset): a flag a CLI would
ignore is not offered there, rather than silently dropped. The one default that differs
by use is the chunk size of a stream (``STREAM_CHUNK_SIZE``): full context (-1) cannot
be streamed. ``add_refine_options`` / ``refine_conf`` do the same for the pause-aware
word boundaries of forced alignment (``wenet/alignment/pauses.py``).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from wenet.alignment.pauses import CTC_PENALTIES, TRANSDUCER_PENALTIES, RefineConf
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc_lm import LMFusion
from wenet.decode.stream_state import EndpointRules
from wenet.transformer.encoder import check_decoding_chunk_size


@dataclass(frozen=True)
class DecodeOptions:
    """Every search setting, with its one default (run.sh stage 5's), for batch decoding
    (``decode``, ``Recognizer``) and streams (``StreamingRecognizer``) alike. The command
    lines get them from one argparse group (below)."""

    beam_size: int = 10
    ctc_weight: float = 0.5          # attention_rescoring: weight of the CTC prefix score
    transducer_weight: float = 0.0   # rnnt_beam_attn_rescoring: weight of the beam score
    reverse_weight: float = 0.0      # rescoring: weight of the right-to-left decoder
    length_penalty: float = 0.0      # attention: length normalisation exponent
    blank_skip_threshold: Optional[float] = 0.999  # CTC prefix search; None disables
    max_sym_per_frame: int = 1       # rnnt_greedy_search: labels per frame at most
    context_graph: Optional[ContextGraph] = None  # hotword biasing (context_graph.py)
    rnnt_length_norm: bool = False   # rnnt_beam_search: rank the n-best by score per token
    lm_fusion: Optional[LMFusion] = None  # word n-gram LM in the CTC prefix search (ctc_lm.py)
    # the encoder: -1 full context, N > 0 chunks of N output frames (a stream needs N > 0)
    chunk_size: int = -1
    num_left_chunks: int = -1        # chunks of attention cache each chunk sees (-1: all)
    simulate_streaming: bool = False  # batch decoding: encode chunk by chunk with caches
    endpoint: EndpointRules = field(default_factory=EndpointRules)  # streams: sentence ends

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer, got {self.beam_size}")
        check_decoding_chunk_size(self.chunk_size)


_DEFAULT = DecodeOptions()
STREAM_CHUNK_SIZE = 16  # encoder frames per chunk of a stream when none is asked for


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not an integer") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"a positive integer is needed, got {number}")
    return number


def _chunk_size(value: str) -> int:
    """-1 or a positive integer (0 is training's random draw)."""
    try:
        size = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not an integer") from None
    try:
        check_decoding_chunk_size(size)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return size


class _Flag(NamedTuple):
    """One command-line option: its names (the first is the ``args`` attribute), the
    ``DecodeOptions`` field it sets (None: it builds an object, see ``search_options``)
    and the rest of ``add_argument``'s keywords."""

    names: Tuple[str, ...]
    field: Optional[str]
    kwargs: Dict[str, Any]

    @property
    def dest(self) -> str:
        return self.names[0].lstrip("-")


def _number(field: str, help: str, type: Callable[[str], Any] = float) -> Dict[str, Any]:
    return {"type": type, "default": getattr(_DEFAULT, field), "help": help}


_FLAGS: Dict[str, _Flag] = {f.dest: f for f in [
    _Flag(("--beam_size",), "beam_size", _number(
        "beam_size", "beam of the CTC prefix, attention and transducer beam searches",
        _positive_int)),
    _Flag(("--ctc_weight",), "ctc_weight", _number(
        "ctc_weight", "attention_rescoring: weight of the CTC prefix score")),
    _Flag(("--reverse_weight",), "reverse_weight", _number(
        "reverse_weight", "rescoring: weight of the right-to-left decoder")),
    _Flag(("--transducer_weight",), "transducer_weight", _number(
        "transducer_weight", "rnnt_beam_attn_rescoring: weight of the transducer beam score")),
    _Flag(("--penalty",), "length_penalty", _number(
        "length_penalty", "attention beam search: length normalisation exponent")),
    _Flag(("--blank_skip_threshold",), "blank_skip_threshold", _number(
        "blank_skip_threshold", "CTC prefix search treats frames with p(blank) above this "
        "as blank; <= 0 disables")),
    _Flag(("--max_sym_per_frame",), "max_sym_per_frame", _number(
        "max_sym_per_frame", "transducer greedy search: most labels emitted on one frame",
        _positive_int)),
    _Flag(("--decoding_chunk_size", "--chunk_size"), "chunk_size", _number(
        "chunk_size", "-1 full context; N > 0 chunks of N encoder output frames (streaming "
        "models; a stream needs N > 0)", _chunk_size)),
    _Flag(("--num_decoding_left_chunks", "--num_left_chunks"), "num_left_chunks", _number(
        "num_left_chunks", "chunks of attention cache each chunk sees, -1: all", int)),
    _Flag(("--simulate_streaming",), "simulate_streaming", {
        "action": "store_true", "help": "encode chunk by chunk with caches (batch size 1)"}),
    # flags that build an object (a context graph, an LM fusion) rather than set a field
    _Flag(("--context_list_path",), None, {"help": (
        "hotwords: one phrase per line, biased in CTC prefix beam search, attention "
        "rescoring and transducer beam search")}),
    _Flag(("--context_score",), None, {"type": float, "default": 3.0, "help": (
        "hotwords: bonus per matched unit (serve.py: for a start message's hotwords "
        "without hotword_score)")}),
    _Flag(("--lm_path",), None, {"help": (
        "word n-gram LM (ARPA, e.g. from tools/train_ngram.py) fused into the CTC prefix "
        "beam search (so also attention rescoring's n-best)")}),
    _Flag(("--lm_weight",), None, {"type": float, "default": 0.5,
                                   "help": "--lm_path: weight of the LM's natural-log score"}),
    _Flag(("--word_bonus",), None, {"type": float, "default": 0.0,
                                    "help": "--lm_path: score added per recognised word"}),
    _Flag(("--lm_open_vocab",), None, {"action": "store_true", "help": (
        "--lm_path: allow words outside the LM's vocabulary (scored as <unk>); by default "
        "only its words can be recognised")}),
]}

ENCODER = ("decoding_chunk_size", "num_decoding_left_chunks")
STREAM = ENCODER + ("beam_size", "ctc_weight", "reverse_weight", "blank_skip_threshold",
                    "max_sym_per_frame", "context_score", "lm_path", "lm_weight",
                    "word_bonus", "lm_open_vocab")
BATCH = tuple(name for name in _FLAGS if name != "simulate_streaming")  # any batch size
ALL = tuple(_FLAGS)
_LM_FLAGS = ("lm_weight", "word_bonus", "lm_open_vocab")


def add_search_options(parser: argparse.ArgumentParser, names: Sequence[str] = ALL,
                       stream: bool = False) -> None:
    """Add the flags ``names`` (``args`` attribute names) as one argparse group; with
    ``stream`` the chunk size and left chunks default to None ("not given": the caller
    takes an ONNX export's fixed values or ``STREAM_CHUNK_SIZE`` and all chunks), so that
    an explicit value, whatever it is, can be told from the default."""
    unknown = [n for n in names if n not in _FLAGS]
    if unknown:
        raise ValueError(f"no search flag {unknown}; known: {list(_FLAGS)}")
    group = parser.add_argument_group("search options")
    for name in names:
        flag = _FLAGS[name]
        kwargs = dict(flag.kwargs)
        if stream and name in ENCODER:
            kwargs["default"] = None
            kwargs["help"] += (f" (default: an ONNX export's own; else {STREAM_CHUNK_SIZE}"
                               if name == "decoding_chunk_size" else
                               " (default: an ONNX export's own; else -1") + ")"
        group.add_argument(*flag.names, dest=flag.dest, **kwargs)


def search_options(args: argparse.Namespace, tokenizer: Any = None) -> DecodeOptions:
    """The ``DecodeOptions`` of parsed arguments (a flag the CLI does not offer keeps the
    dataclass default); ``--context_list_path`` and ``--lm_path`` are read and compiled
    with ``tokenizer``. Conflicting flags are a ValueError that names them."""
    given = vars(args)
    values = {flag.field: given[name] for name, flag in _FLAGS.items()
              if flag.field is not None and name in given}
    if "blank_skip_threshold" in values and values["blank_skip_threshold"] <= 0:
        values["blank_skip_threshold"] = None
    context_list, lm_path = given.get("context_list_path"), given.get("lm_path")
    if context_list and lm_path:
        raise ValueError("hotword biasing and an n-gram LM together are not supported: "
                         "give --context_list_path or --lm_path")
    stray = [f"--{n}" for n in _LM_FLAGS if n in given and given[n] != _FLAGS[n].kwargs.get(
        "default", False)]
    if stray and not lm_path:
        raise ValueError(f"{' '.join(stray)} given without --lm_path")
    if (context_list or lm_path) and tokenizer is None:
        raise ValueError("--context_list_path and --lm_path need the model's tokenizer")
    if context_list:
        values["context_graph"] = ContextGraph.from_file(context_list, tokenizer,
                                                         given["context_score"])
    if lm_path:
        values["lm_fusion"] = LMFusion.from_arpa(lm_path, tokenizer.symbol_table,
                                                 given["lm_weight"], given["word_bonus"],
                                                 not given["lm_open_vocab"])
    return replace(_DEFAULT, **values)


_REFINE_FLAGS = {  # RefineConf field: (flag, help)
    "slack_s": ("--refine_slack", "seconds beyond the spikes a pause may lie"),
    "margin_db": ("--refine_margin_db", "speech threshold above the utterance's noise floor, "
                  "dB"),
    "edge_margin_db": ("--refine_edge_margin_db", "a pause's edges give way to windows this "
                       "far above the floor, dB"),
    "min_pause_s": ("--refine_min_pause", "seconds of non-speech that count as a pause"),
    "min_speech_s": ("--refine_min_speech", "loud blips up to this many seconds inside a "
                     "pause count as pause"),
    "pause_penalty": ("--pause_penalty", "the search's cost per encoder frame of pause spent "
                      "inside a word (0 with --speech_penalty 0: plain CTC Viterbi; default "
                      f"{CTC_PENALTIES[0]:g} for CTC, {TRANSDUCER_PENALTIES[0]:g} for a "
                      "transducer)"),
    "speech_penalty": ("--speech_penalty", "the search's cost per encoder frame of speech "
                       f"outside every word (0: none; default {CTC_PENALTIES[1]:g} for CTC, "
                       f"{TRANSDUCER_PENALTIES[1]:g} for a transducer)"),
}


def add_refine_options(parser: argparse.ArgumentParser) -> None:
    """The flags of ``RefineConf`` (pause-aware word boundaries), its defaults."""
    group = parser.add_argument_group("word boundary refinement (wenet/alignment/pauses.py)")
    for name, (flag, help) in _REFINE_FLAGS.items():
        group.add_argument(flag, type=float, default=getattr(RefineConf, name), help=help)


def refine_conf(args: argparse.Namespace) -> RefineConf:
    """The ``RefineConf`` of arguments parsed with ``add_refine_options``."""
    return RefineConf(**{name: getattr(args, flag.lstrip("-"))
                         for name, (flag, _) in _REFINE_FLAGS.items()})

"""Transcribe audio with an exported ONNX model directory, without torch.

    python -m wenet.runtime --onnx_dir DIR a.wav b.flac
    python -m wenet.runtime --onnx_dir DIR --mode ctc_prefix_beam_search --int8 wav.scp
    python -m wenet.runtime --onnx_dir DIR --context_list_path hotwords.txt --wav_scp wav.scp
    python -m wenet.runtime --onnx_dir DIR --streaming --mode ctc_prefix_beam_search a.wav

Needs only requirements-runtime.txt (numpy, onnxruntime, soundfile; sentencepiece for
hotwords). Inputs and output as transcribe.py: audio files, directories, wav.scp or file
lists, ``-`` for a list on stdin; ``key text`` lines in input order. The mode defaults to
attention_rescoring for CTC/attention models and rnnt_beam_search for transducers; the
search options keep transcribe.py's names and defaults. Audio must be at the model's
sample rate (this runtime does not resample); an input that gives no result (unreadable,
another sample rate, shorter than the model's minimum, a WAV cut short, one whose decoding
fails) is logged with its key, file and reason and left out, the other inputs are decoded
as if it were not there. Audio longer than ``--max_segment_s`` is cut at pauses as
transcribe.py cuts it, so memory does not grow with the file. Kaldi pipes (``key cmd |``
in a wav.scp) run only with ``--allow_pipes`` (``wenet/runtime/transcribe.py``).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import List, Optional, Tuple

from wenet.dataset.stats import EXIT_STATUS_HELP, exit_status
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc_lm import LMFusion
from wenet.runtime.audio import audio_inputs
from wenet.runtime.recognizer import (MODES, UNSUPPORTED, OnnxRecognizer, SearchOptions,
                                      model_options, model_tokenizer)
from wenet.runtime.transcribe import MAX_SEGMENT_S, transcribe
from wenet.runtime.session import OnnxModel
from wenet.utils.file_utils import atomic_open

_D = SearchOptions()


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m wenet.runtime",
                                description=__doc__.split("\n")[0], epilog=EXIT_STATUS_HELP)
    p.add_argument("audio", nargs="*",
                   help="audio files, directories, wav.scp / file lists, or - (list on stdin)")
    p.add_argument("--wav_scp", default=None, help="a wav.scp (or list of audio files)")
    p.add_argument("--onnx_dir", required=True, help="exported ONNX model directory")
    p.add_argument("--mode", default=None, choices=list(MODES) + list(UNSUPPORTED),
                   help="default: attention_rescoring, or rnnt_beam_search for a transducer")
    p.add_argument("--int8", action="store_true", help="use the *.int8.onnx files")
    p.add_argument("--streaming", action="store_true",
                   help="encode chunk by chunk with encoder_chunk.onnx (streaming models; "
                        "the export's chunk size and left chunks), as recognize.py "
                        "--simulate_streaming --decoding_chunk_size C "
                        "--num_decoding_left_chunks L")
    p.add_argument("--num_threads", type=int, default=1, help="threads per onnxruntime session")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--output", default="-", help="output file; - for stdout")
    p.add_argument("--max_segment_s", type=float, default=MAX_SEGMENT_S,
                   help="audio longer than this is cut at pauses (a VAD's utterances) into "
                        "segments of at most this many seconds, decoded apart and joined, "
                        "as transcribe.py cuts it; 0: decode every file whole")
    p.add_argument("--allow_pipes", action="store_true",
                   help="run wav.scp values of the form 'cmd |' (Kaldi pipes: shell "
                        "commands); without it they are refused before decoding")
    p.add_argument("--keep_going", action="store_true",
                   help="exit 0 when some inputs failed but at least one was transcribed")
    g = p.add_argument_group("search options (transcribe.py's)")
    g.add_argument("--beam_size", type=int, default=_D.beam_size)
    g.add_argument("--ctc_weight", type=float, default=_D.ctc_weight)
    g.add_argument("--reverse_weight", type=float, default=_D.reverse_weight)
    g.add_argument("--transducer_weight", type=float, default=_D.transducer_weight)
    g.add_argument("--blank_skip_threshold", type=float, default=_D.blank_skip_threshold,
                   help="<= 0 disables")
    g.add_argument("--max_sym_per_frame", type=int, default=_D.max_sym_per_frame)
    g.add_argument("--context_list_path", "--hotwords", dest="context_list_path",
                   help="hotwords: one phrase per line (needs bpe.model for BPE units)")
    g.add_argument("--context_score", type=float, default=3.0)
    g.add_argument("--lm_path", help="word n-gram LM (ARPA) fused into the CTC prefix search")
    g.add_argument("--lm_weight", type=float, default=0.5)
    g.add_argument("--word_bonus", type=float, default=0.0)
    g.add_argument("--lm_open_vocab", action="store_true")
    return p


def _recognizer(args: argparse.Namespace) -> Tuple[OnnxRecognizer, str]:
    if args.streaming and not os.path.isfile(os.path.join(args.onnx_dir, "encoder_chunk.onnx")):
        raise ValueError(f"--streaming: {args.onnx_dir} has no encoder_chunk.onnx (the export "
                         "writes it for streaming models only)")
    model = OnnxModel(args.onnx_dir, args.int8, args.num_threads, streaming=args.streaming)
    tokenizer = model_tokenizer(model)
    graph = fusion = None
    if args.context_list_path:
        graph = ContextGraph.from_file(args.context_list_path, tokenizer, args.context_score)
    if args.lm_path:
        fusion = LMFusion.from_arpa(args.lm_path, tokenizer.symbol_table, args.lm_weight,
                                    args.word_bonus, not args.lm_open_vocab)
    options = model_options(
        beam_size=args.beam_size, ctc_weight=args.ctc_weight, reverse_weight=args.reverse_weight,
        transducer_weight=args.transducer_weight, blank_skip_threshold=args.blank_skip_threshold,
        max_sym_per_frame=args.max_sym_per_frame, context_graph=graph, lm_fusion=fusion)
    mode = args.mode or ("rnnt_beam_search" if model.info.model_type == "transducer"
                         else "attention_rescoring")
    return OnnxRecognizer(model, tokenizer, options, args.streaming), mode


def run(args: argparse.Namespace) -> Tuple[int, int]:
    """Transcribe the inputs and write the lines; (inputs done, inputs failed)."""
    items = audio_inputs(args.audio + ([args.wav_scp] if args.wav_scp else []))
    if not items:
        raise ValueError("no audio among the inputs")
    recognizer, mode = _recognizer(args)
    failures: List[Tuple[str, str, str]] = []
    done = 0
    sink = contextlib.nullcontext(sys.stdout) if args.output == "-" else atomic_open(args.output)
    with sink as out:
        for key, text in transcribe(recognizer, items, mode, args.batch_size, failures,
                                    args.max_segment_s, args.allow_pipes):
            out.write(f"{key} {text}".rstrip() + "\n")
            out.flush()
            done += 1
    if failures:
        logging.error("%d of %d inputs gave no result:\n%s", len(failures), len(items),
                      "\n".join(f"  {key} ({spec}): {why}" for key, spec, why in failures))
    return done, len(failures)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    try:
        done, failed = run(args)
    except (FileNotFoundError, ValueError) as e:
        logging.error("%s", e)
        return 1
    return exit_status(done, failed, args.keep_going)


if __name__ == "__main__":
    sys.exit(main())

"""Transcribe audio with a trained model directory: no transcript needed.

    python wenet/bin/transcribe.py --model_dir exp/synth_train_zipformer a.wav b.flac
    python wenet/bin/transcribe.py --model_dir DIR --format json --nbest 3 --timestamps wav.scp
    find audio/ -name '*.wav' | python wenet/bin/transcribe.py --model_dir DIR -

The model dir is an exported one (``final.zip`` with ``train.yaml``, ``units.txt`` and
the BPE model beside it, as run.sh stage 6 leaves it) or an experiment dir
(``train.yaml`` + a checkpoint, ``--checkpoint`` or the newest ``avg_*.pt``); see
``wenet/inference/loader.py``. Inputs: audio files, directories (searched for audio
files), ``wav.scp`` or plain lists of files, and ``-`` for such a list on stdin. Any
sample rate and channel count libsndfile reads is resampled and mixed down (logged).

Output (``--output``, default stdout): ``key text`` lines, or with ``--format json`` one
JSON object per utterance: ``key``, ``text``, ``duration``, ``nbest`` (text, tokens,
token_ids, score; best first, the first is the mode's output) and with
``--timestamps`` ``tokens`` and ``words`` (start/end in seconds, confidence). ``--ctm
FILE`` and ``--srt DIR`` (``DIR/<key>.srt``) write the word times (JSON rounds seconds
to 3 decimals, scores to 4). Word times come from ``wenet/alignment/timing.py``: the
forced alignment of the hypothesis, steered by the audio's pauses, word boundaries moved
to them (``--no-refine_boundaries``: the frames' offset-corrected times), no word shorter
than ``--min_word_duration``. Files longer than ``--max_segment_s`` (20 s) are cut at
pauses and read in blocks, so memory does not grow with the file
(``wenet/inference/long_audio.py``); with ``--nbest`` > 1 such a file has its 1-best only.

Keys: a wav.scp's, or a file's name without extension with its spaces replaced by ``_``
(logged); two inputs with one key, or with ``--srt`` a key that names no file in DIR
(``../x``, ``a/b``), are refused before decoding. A wav.scp's Kaldi pipes (``key cmd |``)
run, as in Kaldi: the wav.scp is yours (the Python API and the ONNX runtime ask for
``allow_pipes``).

An input that gives no result (a missing, empty or non-audio file, a clip shorter than
the model's minimum) is logged with its file and the reason and skipped; the other
inputs are decoded as if it were not there. Exit status: 0 when every input was
transcribed, 1 when any input failed or none was transcribed; with ``--keep_going``, 0 as
long as one input was transcribed (``wenet.dataset.stats.exit_status``).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, Iterator, List, Optional, Tuple

import torch
from tqdm import tqdm

from wenet.dataset.audio import AUDIO_FORMATS
from wenet.runtime.audio import audio_inputs
from wenet.dataset.stats import EXIT_STATUS_HELP, InputFailure, exit_status
from wenet.decode import MODES
from wenet.inference.loader import load_model_dir
from wenet.decode.options import BATCH, add_search_options, search_options
from wenet.inference.recognizer import Recognizer, Result
from wenet.alignment.formats import ctm_lines, key_file, srt_text
from wenet.alignment.pauses import RefineConf
from wenet.alignment.timing import MIN_WORD_S
from wenet.utils.file_utils import atomic_open, atomic_write_text


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=EXIT_STATUS_HELP)
    p.add_argument("audio", nargs="+",
                   help="audio files, directories, wav.scp / file lists, or - (list on stdin)")
    p.add_argument("--model_dir", required=True, help="exported or experiment directory")
    p.add_argument("--checkpoint", default=None,
                   help="weights to use instead of final.zip / the newest average")
    p.add_argument("--dict", default=None, help="units.txt when the dir has none")
    p.add_argument("--bpe_model", default=None, help="BPE model when the dir has none")
    p.add_argument("--mode", default="attention_rescoring", choices=list(MODES))
    p.add_argument("--nbest", type=int, default=1, help="hypotheses per utterance (json)")
    p.add_argument("--timestamps", action="store_true",
                   help="per-token and per-word times and confidences")
    p.add_argument("--refine_boundaries", action=argparse.BooleanOptionalAction, default=True,
                   help="word times steered by the audio's pauses (default); "
                        "--no-refine_boundaries: the alignment frames' times")
    p.add_argument("--min_word_duration", type=float, default=MIN_WORD_S,
                   help="seconds; shorter words are widened into the time beside them")
    p.add_argument("--format", default="text", choices=["text", "json"])
    p.add_argument("--output", default="-", help="output file; - for stdout")
    p.add_argument("--ctm", default=None, help="write word times as CTM here")
    p.add_argument("--srt", default=None, help="write DIR/<key>.srt subtitles")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--max_segment_s", type=float, default=20.0,
                   help="audio longer than this is cut at pauses (a VAD's utterances) into "
                        "segments of at most this many seconds, decoded apart and joined "
                        "(times count from the start of the file); 0: decode every file whole")
    p.add_argument("--gpu", type=int, default=-1, help="GPU index, -1 for CPU")
    p.add_argument("--keep_going", action="store_true",
                   help="exit 0 when some inputs failed but at least one was transcribed")
    add_search_options(p, BATCH)
    return p


def _write_result(out: Any, result: Result, fmt: str) -> None:
    if fmt == "json":
        out.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
    else:
        out.write(f"{result.key} {result.text}".rstrip() + "\n")


def _results(args: argparse.Namespace, items: List[Tuple[str, str]],
             failures: List[InputFailure]) -> Iterator[Result]:
    """Results as batches finish; ``failures`` receives the inputs that gave none."""
    device = f"cuda:{args.gpu}" if args.gpu >= 0 else "cpu"
    loaded = load_model_dir(args.model_dir, device, args.checkpoint, units=args.dict,
                            bpe_model=args.bpe_model)
    options = search_options(args, loaded.tokenizer)
    recognizer = Recognizer(loaded, options, args.batch_size, context_score=args.context_score,
                            max_segment_s=args.max_segment_s,
                            refine=RefineConf() if args.refine_boundaries else None,
                            min_word_s=args.min_word_duration, allow_pipes=True)
    with torch.no_grad():
        yield from recognizer.iter_results(items, args.mode, args.nbest,
                                           args.timestamps or bool(args.ctm or args.srt))
    failures.extend(recognizer.last_failures)


def _emit(args: argparse.Namespace, items: List[Tuple[str, str]], out: Any,
          failures: List[InputFailure]) -> List[Result]:
    """Write each result as its batch finishes, with a progress bar on long inputs."""
    results: List[Result] = []
    with tqdm(total=len(items), desc="transcribe", unit="utt", disable=len(items) < 20) as bar:
        for result in _results(args, items, failures):
            _write_result(out, result, args.format)
            out.flush()
            results.append(result)
            bar.update(1)
    return results


def transcribe(args: argparse.Namespace,
               failures: Optional[List[InputFailure]] = None) -> List[Result]:
    """Transcribe the inputs of ``args`` and write the outputs; the results in input order.
    The inputs that gave no result are logged and added to ``failures``."""
    failures = [] if failures is None else failures
    items = audio_inputs(args.audio, suffixes=AUDIO_FORMATS)
    if not items:
        raise ValueError(f"no audio among the inputs: {' '.join(args.audio)}")
    if args.srt:  # before decoding: a key that names no file in DIR is known now
        for key, _ in items:
            try:
                key_file(args.srt, key, ".srt")
            except ValueError as e:
                raise ValueError(f"--srt: {e}") from None
    if args.output == "-":
        results = _emit(args, items, sys.stdout, failures)
    else:
        with atomic_open(args.output) as f:
            results = _emit(args, items, f, failures)
    if args.ctm:
        atomic_write_text(args.ctm, "".join(line + "\n" for r in results
                                            for line in ctm_lines(r.key, r.words or [])))
    if args.srt:
        os.makedirs(args.srt, exist_ok=True)
        for r in results:
            atomic_write_text(key_file(args.srt, r.key, ".srt"), srt_text(r.words or []))
    if failures:
        logging.error("%d of %d inputs gave no result:\n%s", len(failures), len(items),
                      "\n".join(f"  {f}" for f in failures))
    return results


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    failures: List[InputFailure] = []
    try:
        results = transcribe(args, failures)
    except (FileNotFoundError, ValueError) as e:
        logging.error("%s", e)
        return 1
    return exit_status(len(results), len(failures), args.keep_going)


if __name__ == "__main__":
    sys.exit(main())

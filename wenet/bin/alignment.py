"""CTC forced alignment of a data list to its transcripts (WeNet's ``alignment.py``).

Writes, for every utterance that aligns:

- ``--result_file``: one line per word, ``key word start end`` (seconds);
- ``--token_file`` (default ``<result_file>.tokens``): ``key unit start end`` per token;
- ``--ctm``: CTM lines ``key 1 start duration word confidence``;
- ``--textgrid_dir`` (or ``--gen_praat``: ``<result_file's dir>/textgrid``): one Praat
  TextGrid per utterance with tiers ``words`` and ``tokens``.

An utterance that cannot be aligned (unreadable audio, empty transcript, a unit not
in the dictionary, too few frames) is logged and written to ``--failed_file``
(default ``<result_file>.failed``) as ``key reason: detail``, and skipped; the last
log line counts aligned and failed utterances by reason. Exit status: 0 when every
utterance aligned, 1 when any failed or none aligned; with ``--keep_going``, 0 as long
as one aligned (``wenet.dataset.stats.exit_status``).

Word and token times come from ``wenet/alignment/timing.py``, as everywhere else: by
default the audio's pauses steer the search (a token, or the stretch between two tokens of
one word, costs ``--pause_penalty`` per frame of pause, and speech outside every word
costs ``--speech_penalty`` per frame) and word boundaries are then moved to the pauses
found between the words' spikes (``wenet/alignment/pauses.py``; where words are spoken
without a pause the boundary stays where the frames put it). ``--no-refine_boundaries``
gives the frames' times: a word starts at the first frame of its first token and ends
after the last frame of its last token, frame ``f`` at ``f`` x subsampling x frame shift
seconds plus the encoder's offset (``timing.frame_offset_seconds``). Either way no word is
shorter than ``--min_word_duration`` and each token lies inside its word (the TextGrid's
tiers agree).

Audio longer than ``--max_duration_s`` (60 s; 0: no limit) is refused as ``too long``:
the utterance is encoded and aligned in one piece, so memory grows with it (a
5-minute file needs gigabytes). Cut long recordings into utterances first (a
``segments`` file; ``transcribe.py`` finds the pauses, ``wenet/inference/long_audio.py``).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import List, Optional, Union

import torch
from tqdm import tqdm

from wenet.alignment.aligner import (Aligner, Alignment, Failure, Utterance,
                                      align_data_list, failure_line, has_ctc_head, summary)
from wenet.decode.options import (ENCODER, add_refine_options, add_search_options,
                                   refine_conf, search_options)
from wenet.alignment.formats import ctm_lines, textgrid_text
from wenet.alignment.timing import MIN_WORD_S
from wenet.dataset.stats import EXIT_STATUS_HELP, exit_status
from wenet.inference.loader import load_model_dir
from wenet.utils.file_utils import atomic_open, atomic_write_text


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=EXIT_STATUS_HELP)
    p.add_argument("--config", required=True, help="train.yaml of the experiment")
    p.add_argument("--checkpoint", default=None, help="model state_dict")
    p.add_argument("--input_file", "--test_data", dest="input_file", required=True,
                   help="data.list with audio and transcripts")
    p.add_argument("--data_type", default="raw", choices=["raw", "shard"])
    p.add_argument("--dict", required=True, help="units.txt")
    p.add_argument("--bpe_model", default=None, help="sentencepiece model of the units")
    p.add_argument("--result_file", required=True, help="word times: key word start end")
    p.add_argument("--token_file", default=None, help="token times (default <result_file>.tokens)")
    p.add_argument("--ctm", default=None, help="also write word times as CTM")
    p.add_argument("--failed_file", default=None,
                   help="utterances not aligned, with the reason (default <result_file>.failed)")
    p.add_argument("--textgrid_dir", default=None, help="write <key>.TextGrid files here")
    p.add_argument("--gen_praat", action="store_true",
                   help="write TextGrids to --textgrid_dir or <result_file's dir>/textgrid")
    p.add_argument("--refine_boundaries", action=argparse.BooleanOptionalAction, default=True,
                   help="let the audio's pauses steer the search and move word boundaries to "
                        "them (default); --no-refine_boundaries: the frames' times")
    p.add_argument("--method", default="auto", choices=["auto", "ctc", "transducer"],
                   help="the CTC head's alignment or a transducer's lattice; auto: CTC "
                        "where the model has a CTC head")
    p.add_argument("--min_word_duration", type=float, default=MIN_WORD_S,
                   help="seconds; shorter words are widened into the time beside them")
    add_refine_options(p)
    add_search_options(p, ENCODER)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--max_duration_s", type=float, default=60.0,
                   help="refuse longer utterances (memory grows with the utterance); 0: no limit")
    p.add_argument("--gpu", type=int, default=-1, help="GPU index, -1 for CPU")
    p.add_argument("--keep_going", action="store_true",
                   help="exit 0 when some utterances failed but at least one aligned")
    return p


class BoundedAligner(Aligner):
    """An Aligner that refuses utterances longer than ``max_duration_s`` (0: none)."""

    def __init__(self, *args, max_duration_s: float = 0.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.max_duration_s = max_duration_s

    def prepare(self, sample: dict) -> Union[Utterance, Failure]:
        seconds = sample["wav"].size(-1) / float(sample["sample_rate"])
        if self.max_duration_s > 0 and seconds > self.max_duration_s:
            return Failure(sample["key"], "too long",
                           f"{seconds:.1f} s of audio, over --max_duration_s "
                           f"{self.max_duration_s:g}: cut it into utterances first (use "
                           "transcribe.py's segmentation to find the pauses)")
        return super().prepare(sample)


def _textgrid_dir(args: argparse.Namespace) -> Optional[str]:
    if args.textgrid_dir:
        return args.textgrid_dir
    if args.gen_praat:
        return os.path.join(os.path.dirname(os.path.abspath(args.result_file)), "textgrid")
    return None


def _write_alignment(ali: Alignment, outs: dict, textgrid_dir: Optional[str]) -> None:
    """The lines and files of one aligned utterance."""
    for w in ali.words:
        outs["words"].write(f"{ali.key} {w.word} {w.start_s:.3f} {w.end_s:.3f}\n")
    intervals = ali.token_times
    for start, end, unit in intervals:
        outs["tokens"].write(f"{ali.key} {unit} {start:.3f} {end:.3f}\n")
    if "ctm" in outs:
        outs["ctm"].writelines(line + "\n" for line in ctm_lines(ali.key, ali.words))
    if textgrid_dir:
        words = [(w.start_s, w.end_s, w.word) for w in ali.words]
        duration = max([ali.duration_s] + [end for _, end, _ in intervals])
        atomic_write_text(os.path.join(textgrid_dir, f"{ali.key}.TextGrid"),
                          textgrid_text(duration, {"words": words, "tokens": intervals}))


def run(args: argparse.Namespace) -> int:
    """Align ``args.input_file``; write the outputs; the exit status (module docstring)."""
    device = torch.device(f"cuda:{args.gpu}" if args.gpu >= 0 else "cpu")
    loaded = load_model_dir("", device, args.checkpoint, config=args.config, units=args.dict,
                            bpe_model=args.bpe_model)
    refine = refine_conf(args) if args.refine_boundaries else None
    options = search_options(args)
    method = args.method
    if method == "auto":
        method = "ctc" if has_ctc_head(loaded.model) else "transducer"
    try:
        aligner = BoundedAligner(loaded.model, loaded.tokenizer, loaded.feature_conf, device,
                                 refine, options.chunk_size, options.num_left_chunks,
                                 method=method, min_word_s=args.min_word_duration,
                                 max_duration_s=args.max_duration_s)
    except ValueError as e:
        logging.error("%s: %s", args.checkpoint or args.config, e)
        return 1
    paths = {"words": args.result_file, "tokens": args.token_file or args.result_file + ".tokens",
             "failed": args.failed_file or args.result_file + ".failed"}
    if args.ctm:
        paths["ctm"] = args.ctm
    textgrid_dir = _textgrid_dir(args)
    if textgrid_dir:
        os.makedirs(textgrid_dir, exist_ok=True)
    failures: List[Failure]
    aligned, failures = 0, []
    with contextlib.ExitStack() as stack:
        outs = {}
        for name, path in paths.items():
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            outs[name] = stack.enter_context(atomic_open(path))
        with tqdm(desc="align", unit="utt") as bar:
            for item in align_data_list(aligner, args.input_file, args.data_type, args.batch_size):
                bar.update(1)
                if isinstance(item, Failure):
                    failures.append(item)
                    logging.warning("not aligned: %s", failure_line(item))
                    outs["failed"].write(failure_line(item) + "\n")
                else:
                    aligned += 1
                    _write_alignment(item, outs, textgrid_dir)
    logging.info("%s", summary(aligned, failures))
    return exit_status(aligned, len(failures), args.keep_going)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

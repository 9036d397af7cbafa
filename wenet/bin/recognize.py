"""Recognise a data.list with a trained model, in one or several decoding modes.

One encoder pass per batch feeds every requested mode (``wenet.decode.decode``).
``--mode M --result_file F`` writes one file (WeNet 2.x); ``--modes "M1 M2 ..."
--result_dir D`` writes ``D/<mode>/text`` for each (what run.sh stage 5 uses).
Lines are ``key text``. Transcripts are never needed: a data.list line without text (or
with empty or out-of-vocabulary text) decodes like any other, and ``--data_type scp``
reads a wav.scp or a list of audio files. ``--nbest N`` also writes ``<mode>/nbest``
(JSON lines, the N best with scores), ``--timestamps`` ``<mode>/ctm`` (word times);
with ``--result_file F`` these are ``F.nbest`` and ``F.ctm``.

Timing: with ``--result_dir`` each mode gets ``D/<mode>/rtf``, one JSON line with its
RTF = (encoder seconds + that mode's search seconds) / audio seconds, what decoding that
mode alone would cost (``wenet/inference/batch_decoding.py`` says how shared work counts).
Feature extraction and data loading are not counted.

``--ensemble B.pt C.pt ...`` decodes with the ``--checkpoint`` model and these together
(``wenet.models.ensemble``: their CTC and attention-decoder posteriors averaged, each
model read with the ``train.yaml`` beside its checkpoint); the models must share the
units and the features. Transducer modes are not available then.

Utterances that give no result are logged by key with the reason and left out of the
result files: audio the data pipeline cannot use (its per-pass summary counts them) and
utterances shorter than the model's minimum (``loader.min_input_frames``), refused
before the encoder without touching the rest of their batch. Exit status: 0 when every
utterance was decoded, 1 when any failed or none was decoded; with ``--keep_going``, 0 as
long as one was decoded (``wenet.dataset.stats.exit_status``). The pipeline's skips are
counted in this process only with ``--num_workers 0`` (the default; run.sh stage 5's).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import asdict, replace
from typing import Any, Dict, List, Optional

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from wenet.dataset.dataset import Dataset
from wenet.dataset.fbank import FeatureConf
from wenet.dataset.stats import EXIT_STATUS_HELP, REPAIRS, exit_status
from wenet.dataset.tokenizer import Tokenizer
from wenet.decode import MODES, DecodeOptions, check_modes, decode
from wenet.inference.batch_decoding import DecodeTotals, decoding_dataset_conf, load_decoding_model
from wenet.inference.features import min_duration_s
from wenet.inference.loader import min_input_frames
from wenet.decode.options import add_search_options, search_options
from wenet.inference.recognizer import Recognizer
from wenet.alignment.formats import ctm_lines
from wenet.utils.file_utils import atomic_open, read_symbol_table


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=EXIT_STATUS_HELP)
    p.add_argument("--config", required=True, help="train.yaml of the experiment")
    p.add_argument("--test_data", required=True,
                   help="data.list (raw or shard), or with --data_type scp a wav.scp or a "
                        "list of audio files; transcripts are optional (scoring only)")
    p.add_argument("--data_type", default="raw", choices=["raw", "shard", "scp"])
    p.add_argument("--checkpoint", default=None,
                   help="model state_dict; none: random initialisation (benchmarks only)")
    p.add_argument("--dict", required=True, help="units.txt")
    p.add_argument("--bpe_model", default=None, help="sentencepiece model of the units")
    p.add_argument("--gpu", type=int, default=-1, help="GPU index, -1 for CPU")
    p.add_argument("--mode", default="attention_rescoring", choices=list(MODES))
    p.add_argument("--modes", default=None,
                   help="several modes, space-separated (needs --result_dir)")
    p.add_argument("--result_file", default=None, help="output of --mode")
    p.add_argument("--result_dir", default=None, help="RESULT_DIR/<mode>/text per mode")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--raw_output", action="store_true",
                   help="WeNet 2.x raw output: pieces concatenated, no word splitting")
    p.add_argument("--nbest", type=int, default=1,
                   help="> 1: also write <mode>/nbest (JSON lines: n-best with scores)")
    p.add_argument("--timestamps", action="store_true",
                   help="also write <mode>/ctm: word times of the forced alignment's frames "
                        "(wenet/alignment/timing.py without the audio; transcribe.py and "
                        "alignment.py also steer them by the audio's pauses)")
    p.add_argument("--num_workers", type=int, default=0)
    p.add_argument("--keep_going", action="store_true",
                   help="exit 0 when some utterances failed but at least one was decoded")
    p.add_argument("--ensemble", nargs="+", default=None, metavar="CHECKPOINT",
                   help="more models decoded together with --checkpoint, their posteriors "
                        "averaged (each with the train.yaml in its directory)")
    p.add_argument("--ensemble_weights", nargs="+", type=float, default=None,
                   help="one weight per model, --checkpoint's first (default: equal)")
    add_search_options(p)
    return p


def _requested_modes(args: argparse.Namespace) -> List[str]:
    """The modes to decode, after checking the options that go with them."""
    modes = args.modes.split() if args.modes else [args.mode]
    if args.modes and not args.result_dir:
        raise ValueError("--modes needs --result_dir")
    if not args.modes and not (args.result_file or args.result_dir):
        raise ValueError("--mode needs --result_file (or --result_dir)")
    if args.simulate_streaming and args.batch_size != 1:
        raise ValueError("--simulate_streaming decodes one utterance at a time: --batch_size 1")
    check_modes(modes)
    if args.ensemble and any(MODES[m].transducer for m in modes):
        raise ValueError("--ensemble combines CTC/attention models: transducer modes "
                         f"{[m for m in modes if MODES[m].transducer]} are not available")
    return modes


def _sync(device: torch.device) -> None:
    """Wait for the GPU, so that the encoder time covers the work queued on it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _write_extras(recognizer: Optional[Recognizer], batch: dict, options: DecodeOptions,
                  extras: Dict[str, Dict[str, Any]], nbest: int) -> None:
    """``--nbest`` / ``--timestamps``: each mode's n-best (JSON lines) and word times (CTM)
    of the batch, through the Recognizer (which encodes the batch again: these outputs
    are not part of the timing)."""
    if recognizer is None:
        return
    for m, files in extras.items():
        for r in recognizer.decode_batch(batch, m, nbest, "ctm" in files, options):
            if "nbest" in files:
                files["nbest"].write(json.dumps({"key": r.key, "nbest": [
                    asdict(h) for h in r.nbest]}, ensure_ascii=False) + "\n")
            if "ctm" in files:
                files["ctm"].write("".join(line + "\n" for line in ctm_lines(r.key, r.words or [])))


def _without_short(batch: dict, min_frames: int, min_seconds: float,
                   refused: List[str]) -> Optional[dict]:
    """``batch`` without its utterances shorter than ``min_frames`` feature frames (logged
    and added to ``refused``); None when none is left. The rows kept are unchanged: the
    batch is sorted longest first, so its padding stays what it was."""
    keep = [int(n) >= min_frames for n in batch["feats_lengths"]]
    if all(keep):
        return batch
    for key, n, ok in zip(batch["keys"], batch["feats_lengths"], keep):
        if not ok:
            logging.warning("utterance %s: %d feature frames, shorter than the model's minimum "
                            "%d (%.3g s); not decoded", key, int(n), min_frames, min_seconds)
            refused.append(key)
    if not any(keep):
        return None
    rows = torch.tensor([i for i, ok in enumerate(keep) if ok])
    return {name: ([k for k, ok in zip(value, keep) if ok] if name == "keys" else value[rows])
            for name, value in batch.items()}


def _decode_all(args: argparse.Namespace, model: torch.nn.Module, loader: DataLoader,
                tokenizer: Tokenizer, options: DecodeOptions, outs: Dict[str, Any],
                frame_shift_ms: float, device: torch.device,
                recognizer: Optional[Recognizer] = None,
                extras: Optional[Dict[str, Dict[str, Any]]] = None,
                refused: Optional[List[str]] = None,
                feature_conf: Optional[FeatureConf] = None) -> DecodeTotals:
    """Encode each batch once, decode it in every mode, write its lines; sum the times.
    Utterances too short for the model are left out and added to ``refused``."""
    modes = list(outs)
    totals = DecodeTotals(modes)
    refused = [] if refused is None else refused
    min_frames = min_input_frames(model)
    min_seconds = min_duration_s(feature_conf or FeatureConf(), min_frames)
    with tqdm(desc="recognize", unit="utt") as bar:
        for batch in loader:
            bar.update(len(batch["keys"]))
            batch = _without_short(batch, min_frames, min_seconds, refused)
            if batch is None:
                continue
            feats, lens = batch["feats"].to(device), batch["feats_lengths"].to(device)
            start = time.perf_counter()
            with torch.no_grad():
                encoder_out, encoder_mask = model.encode(
                    feats, lens, options.chunk_size, options.num_left_chunks,
                    options.simulate_streaming)
            _sync(device)
            encoder_s = time.perf_counter() - start
            start = time.perf_counter()
            results = decode(model, encoder_out, encoder_mask, modes, options)
            search_s = time.perf_counter() - start
            for m, result in results.items():
                for key, hyp in zip(batch["keys"], result.hyps):
                    text = tokenizer.decode(hyp, raw=args.raw_output, eos=model.eos)
                    outs[m].write(f"{key} {text}".rstrip() + "\n")
            _write_extras(recognizer, batch, options, extras or {}, args.nbest)
            totals.add_batch(results, encoder_s, search_s,
                             float(batch["feats_lengths"].sum()) * frame_shift_ms / 1000.0,
                             len(batch["keys"]))
    return totals


def _pipeline_skips(dataset: Dataset, num_workers: int) -> int:
    """Utterances the data pipeline left out (its last pass in this process)."""
    if num_workers > 0 or dataset.last_stats is None:
        logging.warning("--num_workers %d: utterances the data pipeline skipped are counted in "
                        "the workers' logs, not in the exit status", num_workers)
        return 0
    return sum(n for reason, n in dataset.last_stats.counts.items() if reason not in REPAIRS)


def recognize(args: argparse.Namespace) -> Dict[str, Any]:
    """Decode ``args.test_data`` and write the result files; returns timing figures and
    ``failed``, the utterances that gave no result."""
    modes = _requested_modes(args)
    device = torch.device(f"cuda:{args.gpu}" if args.gpu >= 0 else "cpu")
    loaded = load_decoding_model(args.config, args.checkpoint, device, units=args.dict,
                                 bpe_model=args.bpe_model, ensemble=args.ensemble,
                                 weights=args.ensemble_weights)
    model, configs = loaded.model, loaded.configs
    conf = decoding_dataset_conf(configs.get("dataset_conf", {}), args.batch_size)
    frame_shift_ms = FeatureConf.from_dataset_conf(conf).frame_shift
    tokenizer = Tokenizer(read_symbol_table(args.dict))
    options = search_options(args, tokenizer)
    dataset = Dataset(args.data_type, args.test_data, tokenizer.symbol_table, conf,
                      args.bpe_model, partition=False, training=False, need_text=False)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.num_workers)
    paths = {m: (os.path.join(args.result_dir, m, "text") if args.result_dir
                 else args.result_file) for m in modes}
    recognizer = None
    if args.nbest > 1 or args.timestamps:
        # the data pipeline's batches carry no audio: frame times (offset-corrected)
        recognizer = Recognizer(replace(loaded, tokenizer=tokenizer), options, refine=None)
    with contextlib.ExitStack() as stack:  # every text file appears whole, or not at all
        outs: Dict[str, Any] = {}
        extras: Dict[str, Dict[str, Any]] = {}
        for m, path in paths.items():
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            outs[m] = stack.enter_context(atomic_open(path))
            wanted = (["nbest"] if args.nbest > 1 else []) + (["ctm"] if args.timestamps else [])
            extras[m] = {kind: stack.enter_context(atomic_open(
                os.path.join(args.result_dir, m, kind) if args.result_dir else f"{path}.{kind}"))
                for kind in wanted}
        refused: List[str] = []
        totals = _decode_all(args, model, loader, tokenizer, options, outs, frame_shift_ms,
                             device, recognizer, extras, refused, loaded.feature_conf)
    report = totals.report(args.result_dir)
    report["failed"] = len(refused) + _pipeline_skips(dataset, args.num_workers)
    if report["failed"]:
        logging.error("%d utterance(s) gave no result (see the warnings above)",
                      report["failed"])
    return report


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    report = recognize(args)
    if report["utterances"] == 0:
        logging.error("no utterance of %s was decoded", args.test_data)
    return exit_status(report["utterances"], report["failed"], args.keep_going)


if __name__ == "__main__":
    sys.exit(main())

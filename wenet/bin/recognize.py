"""Recognise a data.list with a trained model, in one or several decoding modes.

One encoder pass per batch feeds every requested mode (``wenet.decode.decode``).
``--mode M --result_file F`` writes one file (WeNet 2.x); ``--modes "M1 M2 ..."
--result_dir D`` writes ``D/<mode>/text`` for each (what run.sh stage 5 uses).
Lines are ``key text``. Transcripts are never needed: a data.list line without text (or
with empty or out-of-vocabulary text) decodes like any other, and ``--data_type scp``
reads a wav.scp or a list of audio files. ``--nbest N`` also writes ``<mode>/nbest``
(JSON lines, the N best with scores), ``--timestamps`` ``<mode>/ctm`` (word times);
with ``--result_file F`` these are ``F.nbest`` and ``F.ctm``.

Timing, per mode: the encoder runs once per batch and counts in full for every
mode, not apportioned. Work several modes share (the CTC log-softmax; the CTC
prefix beam search that ``ctc_prefix_beam_search`` and ``attention_rescoring``
both use; the transducer beam search of ``rnnt_beam_search`` and
``rnnt_beam_attn_rescoring``) runs once per batch, is timed once, and counts in
full in every mode that used it; each mode's own work counts in that mode only:

    RTF(mode) = (encoder seconds + that mode's search seconds) / audio seconds

which is what decoding that mode alone would cost (the modes' search seconds do
not add up to the wall time). With ``--result_dir`` each mode gets ``D/<mode>/rtf``,
one JSON line: ``{"mode", "rtf", "encoder_s", "search_s", "audio_s", "utterances"}``
(``rtf`` null without audio; transducer modes add ``encoder_frames`` and, for
rnnt_greedy_search, ``joint_evals``). Feature extraction and data loading are not
counted.

``--ensemble B.pt C.pt ...`` decodes with the ``--checkpoint`` model and these together
(``wenet.models.ensemble``: their CTC and attention-decoder posteriors averaged, each
model read with the ``train.yaml`` beside its checkpoint); the models must share the
units and the features. Transducer modes are not available then.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import time
from dataclasses import asdict, replace
from typing import Any, Dict, List, Optional

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from wenet.dataset.dataset import Dataset
from wenet.dataset.fbank import FeatureConf
from wenet.dataset.tokenizer import Tokenizer
from wenet.decode import MODES, DecodeOptions, check_modes, decode
from wenet.decode.align import frame_shift_seconds
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc_lm import LMFusion
from wenet.decode.model_dir import LoadedModel
from wenet.decode.recognizer import Recognizer
from wenet.eval.timing_formats import ctm_lines
from wenet.models import load_model
from wenet.models.ensemble import EnsembleModel
from wenet.transformer.encoder import check_decoding_chunk_size
from wenet.utils.file_utils import atomic_open, atomic_write_text, load_yaml, read_symbol_table


def _decoding_chunk_size(value: str) -> int:
    """--decoding_chunk_size: -1 or a positive integer (0 is training's random draw)."""
    try:
        size = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not an integer") from None
    try:
        check_decoding_chunk_size(size)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return size


def add_search_options(p: argparse.ArgumentParser) -> None:
    """The search and encoder options recognize.py and transcribe.py share
    (``decode_options`` turns them into ``DecodeOptions``)."""
    p.add_argument("--beam_size", type=int, default=10)
    p.add_argument("--penalty", type=float, default=0.0,
                   help="attention beam search length normalisation exponent")
    p.add_argument("--ctc_weight", type=float, default=0.0,
                   help="attention_rescoring: weight of the CTC prefix score")
    p.add_argument("--reverse_weight", type=float, default=0.0,
                   help="right-to-left decoder weight in rescoring")
    p.add_argument("--decoding_chunk_size", type=_decoding_chunk_size, default=-1,
                   help="-1 full context; >0 chunk size (output frames) of a streaming model")
    p.add_argument("--num_decoding_left_chunks", type=int, default=-1)
    p.add_argument("--blank_skip_threshold", type=float, default=0.999,
                   help="CTC prefix search treats frames with p(blank) above this as blank; "
                        "<= 0 disables")
    p.add_argument("--max_sym_per_frame", type=int, default=1,
                   help="rnnt_greedy_search: most labels emitted on one frame")
    p.add_argument("--transducer_weight", type=float, default=0.0,
                   help="rnnt_beam_attn_rescoring: weight of the transducer beam score")
    p.add_argument("--context_list_path", default=None,
                   help="hotwords: one phrase per line, biased in CTC prefix beam search, "
                        "attention rescoring and transducer beam search")
    p.add_argument("--context_score", type=float, default=3.0,
                   help="hotwords: bonus per matched unit")
    p.add_argument("--lm_path", default=None,
                   help="word n-gram LM (ARPA, e.g. from tools/train_ngram.py) fused into the "
                        "CTC prefix beam search (so also attention rescoring's n-best)")
    p.add_argument("--lm_weight", type=float, default=0.5,
                   help="--lm_path: weight of the LM's natural-log score")
    p.add_argument("--word_bonus", type=float, default=0.0,
                   help="--lm_path: score added per recognised word")
    p.add_argument("--lm_open_vocab", action="store_true",
                   help="--lm_path: allow words outside the LM's vocabulary (scored as <unk>); "
                        "by default only its words can be recognised")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    add_search_options(p)
    p.add_argument("--raw_output", action="store_true",
                   help="WeNet 2.x raw output: pieces concatenated, no word splitting")
    p.add_argument("--simulate_streaming", action="store_true",
                   help="encode chunk by chunk with caches (batch size 1)")
    p.add_argument("--nbest", type=int, default=1,
                   help="> 1: also write <mode>/nbest (JSON lines: n-best with scores)")
    p.add_argument("--timestamps", action="store_true",
                   help="also write <mode>/ctm: word times from the CTC forced alignment")
    p.add_argument("--num_workers", type=int, default=0)
    p.add_argument("--ensemble", nargs="+", default=None, metavar="CHECKPOINT",
                   help="more models decoded together with --checkpoint, their posteriors "
                        "averaged (each with the train.yaml in its directory)")
    p.add_argument("--ensemble_weights", nargs="+", type=float, default=None,
                   help="one weight per model, --checkpoint's first (default: equal)")
    return p


def decoding_dataset_conf(dataset_conf: dict, batch_size: int) -> dict:
    """The training dataset_conf made fit for decoding: nothing dropped, reordered or augmented."""
    conf = copy.deepcopy(dataset_conf or {})
    conf["filter_conf"] = {"max_length": 1e9, "min_length": 0, "token_max_length": 10 ** 9,
                           "token_min_length": 0, "min_output_input_ratio": 0.0,
                           "max_output_input_ratio": 1e9}
    # one pass: a feature cache would only hold memory
    for key in ("speed_perturb", "vtlp", "spec_aug", "spec_sub", "spec_trim", "shuffle",
                "sort", "cache_features"):
        conf[key] = False
    conf["batch_conf"] = {"batch_type": "static", "batch_size": batch_size}
    return conf


def decode_options(args: argparse.Namespace, tokenizer: Optional[Tokenizer] = None
                   ) -> DecodeOptions:
    """The search settings of the command line (``--blank_skip_threshold`` <= 0: off;
    ``--context_list_path`` compiled with ``tokenizer``)."""
    graph = fusion = None
    if args.context_list_path:
        graph = ContextGraph.from_file(args.context_list_path, tokenizer, args.context_score)
    if args.lm_path:
        fusion = LMFusion.from_arpa(args.lm_path, tokenizer.symbol_table, args.lm_weight,
                                    args.word_bonus, not args.lm_open_vocab)
    return DecodeOptions(context_graph=graph, lm_fusion=fusion,
        beam_size=args.beam_size, ctc_weight=args.ctc_weight,
        transducer_weight=args.transducer_weight, reverse_weight=args.reverse_weight,
        length_penalty=args.penalty, max_sym_per_frame=args.max_sym_per_frame,
        blank_skip_threshold=args.blank_skip_threshold if args.blank_skip_threshold > 0 else None)


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
    if args.ensemble_weights and not args.ensemble:
        raise ValueError("--ensemble_weights needs --ensemble")
    return modes


def _load_models(args: argparse.Namespace, configs: Dict[str, Any], device: torch.device
                 ) -> torch.nn.Module:
    """The ``--checkpoint`` model, or with ``--ensemble`` all the models as one."""
    if args.ensemble and not args.checkpoint:
        raise ValueError("--ensemble needs --checkpoint (the first model)")
    model = load_model(configs, args.checkpoint, device)
    if not args.ensemble:
        return model

    def features(conf: Dict[str, Any]) -> FeatureConf:  # dither is training's business
        return replace(FeatureConf.from_dataset_conf(conf.get("dataset_conf", {})), dither=0.0)

    models = [model]
    for path in args.ensemble:
        config = os.path.join(os.path.dirname(os.path.abspath(path)), "train.yaml")
        if not os.path.isfile(config):
            raise FileNotFoundError(f"--ensemble {path}: no train.yaml beside it ({config})")
        other = load_yaml(config)
        if features(other) != features(configs):
            raise ValueError(f"--ensemble {path}: its features ({features(other)}) differ "
                             f"from --config's ({features(configs)})")
        models.append(load_model(other, path, device))
    weights = args.ensemble_weights
    if weights is not None and len(weights) != len(models):
        raise ValueError(f"--ensemble_weights gives {len(weights)} weights for "
                         f"{len(models)} models")
    logging.info("decoding with an ensemble of %d models (weights %s)", len(models),
                 weights or "equal")
    return EnsembleModel(models, weights).to(device).eval()


class _Totals:
    """What the batches add up to: audio, utterances, encoder and per-mode search time
    (``search_wall_s``: the searches' wall time, shared work once)."""

    def __init__(self, modes: List[str]) -> None:
        self.encoder_s, self.audio_s, self.utterances = 0.0, 0.0, 0
        self.search_wall_s = 0.0
        self.search_s = {m: 0.0 for m in modes}
        self.counts: Dict[str, Dict[str, int]] = {m: {} for m in modes}


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


def _decode_all(args: argparse.Namespace, model: torch.nn.Module, loader: DataLoader,
                tokenizer: Tokenizer, outs: Dict[str, Any], frame_shift_ms: float,
                device: torch.device, recognizer: Optional[Recognizer] = None,
                extras: Optional[Dict[str, Dict[str, Any]]] = None) -> _Totals:
    """Encode each batch once, decode it in every mode, write its lines; sum the times."""
    modes, options = list(outs), decode_options(args, tokenizer)
    totals = _Totals(modes)
    with tqdm(desc="recognize", unit="utt") as bar:
        for batch in loader:
            feats, lens = batch["feats"].to(device), batch["feats_lengths"].to(device)
            start = time.perf_counter()
            with torch.no_grad():
                encoder_out, encoder_mask = model.encode(
                    feats, lens, args.decoding_chunk_size, args.num_decoding_left_chunks,
                    args.simulate_streaming)
            _sync(device)
            totals.encoder_s += time.perf_counter() - start
            start = time.perf_counter()
            results = decode(model, encoder_out, encoder_mask, modes, options)
            totals.search_wall_s += time.perf_counter() - start
            for m, result in results.items():
                totals.search_s[m] += result.seconds
                for key, n in result.counts.items():
                    totals.counts[m][key] = totals.counts[m].get(key, 0) + n
                for key, hyp in zip(batch["keys"], result.hyps):
                    text = tokenizer.decode(hyp, raw=args.raw_output, eos=model.eos)
                    outs[m].write(f"{key} {text}".rstrip() + "\n")
            _write_extras(recognizer, batch, options, extras or {}, args.nbest)
            totals.audio_s += float(batch["feats_lengths"].sum()) * frame_shift_ms / 1000.0
            totals.utterances += len(batch["keys"])
            bar.update(len(batch["keys"]))
    return totals


def _rtf_record(mode: str, encoder_s: float, search_s: float, audio_s: float,
                num_utts: int) -> Dict[str, Any]:
    """The per-mode timing written to ``<mode>/rtf`` (see the module docstring)."""
    rtf = (encoder_s + search_s) / audio_s if audio_s > 0 else None
    return {"mode": mode, "rtf": rtf, "encoder_s": round(encoder_s, 6),
            "search_s": round(search_s, 6), "audio_s": round(audio_s, 6), "utterances": num_utts}


def _report(totals: _Totals, modes: List[str], result_dir: Optional[str]) -> Dict[str, Any]:
    """Log the timing, write ``<mode>/rtf`` under ``result_dir``; the figures as a dict."""
    encoder_s, audio_s = totals.encoder_s, totals.audio_s
    decode_s = encoder_s + totals.search_wall_s
    rtf = decode_s / audio_s if audio_s > 0 else float("nan")
    logging.info("decoded %d utterances (%.1f s of audio) in %.2f s with %s: RTF %.4f "
                 "(encoder %.2f s, once for all modes)", totals.utterances, audio_s, decode_s,
                 " ".join(modes), rtf, encoder_s)
    per_mode = {m: _rtf_record(m, encoder_s, totals.search_s[m], audio_s, totals.utterances)
                for m in modes}
    for m, counts in totals.counts.items():
        per_mode[m].update(counts)
        if "joint_evals" in counts:
            logging.info("%s: %d joint evaluations over %d encoder frames (%.3f per frame)", m,
                         counts["joint_evals"], counts["encoder_frames"],
                         counts["joint_evals"] / max(1, counts["encoder_frames"]))
    for m, rec in per_mode.items():
        logging.info("RTF %-24s %s (encoder %.2f s + search %.2f s over %.1f s of audio)", m,
                     "n/a" if rec["rtf"] is None else f"{rec['rtf']:.4f}", encoder_s,
                     totals.search_s[m], audio_s)
        if result_dir:
            atomic_write_text(os.path.join(result_dir, m, "rtf"),
                              json.dumps(rec, sort_keys=True) + "\n")
    return {"utterances": totals.utterances, "audio_s": audio_s, "decode_s": decode_s,
            "rtf": rtf, "encoder_s": encoder_s, "modes": per_mode}


def recognize(args: argparse.Namespace) -> Dict[str, Any]:
    """Decode ``args.test_data`` and write the result files; returns timing figures."""
    modes = _requested_modes(args)
    configs = load_yaml(args.config)
    device = torch.device(f"cuda:{args.gpu}" if args.gpu >= 0 else "cpu")
    model = _load_models(args, configs, device)
    conf = decoding_dataset_conf(configs.get("dataset_conf", {}), args.batch_size)
    frame_shift_ms = FeatureConf.from_dataset_conf(conf).frame_shift
    tokenizer = Tokenizer(read_symbol_table(args.dict))
    dataset = Dataset(args.data_type, args.test_data, tokenizer.symbol_table, conf,
                      args.bpe_model, partition=False, training=False, need_text=False)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.num_workers)
    paths = {m: (os.path.join(args.result_dir, m, "text") if args.result_dir
                 else args.result_file) for m in modes}
    recognizer = None
    if args.nbest > 1 or args.timestamps:
        feature_conf = FeatureConf.from_dataset_conf(conf)
        recognizer = Recognizer(LoadedModel(
            model, tokenizer, feature_conf, configs, False,
            frame_shift_seconds(model.subsampling_rate(), frame_shift_ms),
            os.path.dirname(args.config), args.checkpoint or "", device),
            decoding_chunk_size=args.decoding_chunk_size,
            num_decoding_left_chunks=args.num_decoding_left_chunks,
            simulate_streaming=args.simulate_streaming)
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
        totals = _decode_all(args, model, loader, tokenizer, outs, frame_shift_ms, device,
                             recognizer, extras)
    return _report(totals, modes, args.result_dir)


def main(argv: Optional[List[str]] = None) -> None:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    recognize(args)


if __name__ == "__main__":
    main()

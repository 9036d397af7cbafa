"""Recognise a data.list with a trained model, in one or several decoding modes.

One encoder pass per batch feeds every requested mode. ``--mode M --result_file F``
writes one file (WeNet 2.x); ``--modes "M1 M2 ..." --result_dir D`` writes
``D/<mode>/text`` for each (what run.sh stage 5 uses). Lines are ``key text``.

Timing, per mode: the encoder runs once per batch and each mode's search is then
timed on its own, as if it were the only mode asked for (the CTC log-softmax, and
for ``attention_rescoring`` the CTC prefix beam search it rescores, count in that
mode's search, so that search may run twice when both CTC-prefix modes are asked).
The encoder time is counted in full for every mode, not apportioned:

    RTF(mode) = (encoder seconds + that mode's search seconds) / audio seconds

which is what decoding that mode alone would cost. With ``--result_dir`` each mode
gets ``D/<mode>/rtf``, one JSON line: ``{"mode", "rtf", "encoder_s", "search_s",
"audio_s", "utterances"}`` (``rtf`` null without audio; transducer modes add
``encoder_frames`` and, for rnnt_greedy_search, ``joint_evals``). Feature extraction and
data loading are not counted.
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import time
from typing import Any, Dict, List, Optional, Tuple

import torch
import yaml
from torch.utils.data import DataLoader
from tqdm import tqdm

from wenet.dataset.dataset import Dataset
from wenet.dataset.fbank import FeatureConf
from wenet.decode.transducer_search import TRANSDUCER_MODES, decode_transducer
from wenet.decode.search import DECODE_MODES, decode_batch, tokens_to_text
from wenet.utils.file_utils import atomic_write_text, read_symbol_table
from wenet.models import init_model


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="train.yaml of the experiment")
    p.add_argument("--test_data", required=True, help="data.list to recognise")
    p.add_argument("--data_type", default="raw", choices=["raw", "shard"])
    p.add_argument("--checkpoint", default=None,
                   help="model state_dict; none: random initialisation (benchmarks only)")
    p.add_argument("--dict", required=True, help="units.txt")
    p.add_argument("--bpe_model", default=None, help="sentencepiece model of the units")
    p.add_argument("--gpu", type=int, default=-1, help="GPU index, -1 for CPU")
    p.add_argument("--mode", default="attention_rescoring",
                   choices=list(DECODE_MODES) + list(TRANSDUCER_MODES))
    p.add_argument("--modes", default=None,
                   help="several modes, space-separated (needs --result_dir)")
    p.add_argument("--result_file", default=None, help="output of --mode")
    p.add_argument("--result_dir", default=None, help="RESULT_DIR/<mode>/text per mode")
    p.add_argument("--beam_size", type=int, default=10)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--penalty", type=float, default=0.0,
                   help="attention beam search length normalisation exponent")
    p.add_argument("--ctc_weight", type=float, default=0.0, help="CTC weight in rescoring")
    p.add_argument("--reverse_weight", type=float, default=0.0,
                   help="right-to-left decoder weight in rescoring")
    p.add_argument("--decoding_chunk_size", type=int, default=-1,
                   help="-1 full context; >0 chunk size of a streaming model")
    p.add_argument("--num_decoding_left_chunks", type=int, default=-1)
    p.add_argument("--simulate_streaming", action="store_true",
                   help="encode chunk by chunk with caches (batch size 1)")
    p.add_argument("--blank_skip_threshold", type=float, default=0.999,
                   help="CTC prefix search treats frames with p(blank) above this as blank; "
                        "<= 0 disables")
    p.add_argument("--max_sym_per_frame", type=int, default=1,
                   help="rnnt_greedy_search: most labels emitted on one frame")
    p.add_argument("--transducer_weight", type=float, default=0.0,
                   help="rnnt_beam_attn_rescoring: weight of the transducer beam score")
    p.add_argument("--raw_output", action="store_true",
                   help="WeNet 2.x raw output: pieces concatenated, no word splitting")
    p.add_argument("--num_workers", type=int, default=0)
    return p


def decoding_dataset_conf(dataset_conf: dict, batch_size: int) -> dict:
    """The training dataset_conf made fit for decoding: nothing dropped, reordered or augmented."""
    conf = copy.deepcopy(dataset_conf or {})
    conf["filter_conf"] = {"max_length": 1e9, "min_length": 0, "token_max_length": 10 ** 9,
                           "token_min_length": 0, "min_output_input_ratio": 0.0,
                           "max_output_input_ratio": 1e9}
    # one pass: a feature cache would only hold memory
    for key in ("speed_perturb", "spec_aug", "spec_sub", "spec_trim", "shuffle", "sort",
                "cache_features"):
        conf[key] = False
    conf["batch_conf"] = {"batch_type": "static", "batch_size": batch_size}
    return conf


def load_model(configs: dict, checkpoint: Optional[str], device: torch.device) -> torch.nn.Module:
    """init_model + the checkpoint's weights (strict), in eval mode on ``device``."""
    model = init_model(configs)
    if checkpoint:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        logging.info("loaded %s", checkpoint)
    else:
        logging.warning("no checkpoint given: decoding with a RANDOMLY INITIALISED model")
    return model.to(device).eval()


class _EncodedModel:
    """Stands in for the model in ``decode_batch`` with an encoder output already computed."""

    def __init__(self, model: torch.nn.Module, encoded: Tuple[torch.Tensor, torch.Tensor]) -> None:
        self._model = model
        self._encoded = encoded

    def encode(self, *args: Any, **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        return self._encoded

    def __getattr__(self, name: str) -> Any:  # ctc_logprobs, decoder, sos, eos
        return getattr(self._model, name)


def _rtf_record(mode: str, encoder_s: float, search_s: float, audio_s: float,
                num_utts: int) -> Dict[str, Any]:
    """The per-mode timing written to ``<mode>/rtf`` (see the module docstring)."""
    rtf = (encoder_s + search_s) / audio_s if audio_s > 0 else None
    return {"mode": mode, "rtf": rtf, "encoder_s": round(encoder_s, 6),
            "search_s": round(search_s, 6), "audio_s": round(audio_s, 6), "utterances": num_utts}


def recognize(args: argparse.Namespace) -> Dict[str, Any]:
    """Decode ``args.test_data`` and write the result files; returns timing figures."""
    modes = args.modes.split() if args.modes else [args.mode]
    if args.modes and not args.result_dir:
        raise ValueError("--modes needs --result_dir")
    if not args.modes and not (args.result_file or args.result_dir):
        raise ValueError("--mode needs --result_file (or --result_dir)")
    if args.simulate_streaming and args.batch_size != 1:
        raise ValueError("--simulate_streaming decodes one utterance at a time: --batch_size 1")
    with open(args.config, "r", encoding="utf-8") as f:
        configs = yaml.safe_load(f)
    device = torch.device(f"cuda:{args.gpu}" if args.gpu >= 0 else "cpu")
    model = load_model(configs, args.checkpoint, device)
    symbols = read_symbol_table(args.dict)
    char_dict = {i: t for t, i in symbols.items()}
    conf = decoding_dataset_conf(configs.get("dataset_conf", {}), args.batch_size)
    frame_shift_ms = FeatureConf.from_dataset_conf(conf).frame_shift
    dataset = Dataset(args.data_type, args.test_data, symbols, conf, args.bpe_model,
                      partition=False, training=False)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.num_workers)

    paths = {m: (os.path.join(args.result_dir, m, "text") if args.result_dir
                 else args.result_file) for m in modes}
    outs = {}
    for m, path in paths.items():
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        outs[m] = open(f"{path}.tmp", "w", encoding="utf-8")
    skip = args.blank_skip_threshold if args.blank_skip_threshold > 0 else None
    encoder_s, audio_s, num_utts = 0.0, 0.0, 0
    search_s = {m: 0.0 for m in modes}
    search_stats: Dict[str, Dict[str, int]] = {m: {} for m in modes if m in TRANSDUCER_MODES}

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    try:
        with tqdm(desc="recognize", unit="utt") as bar:
            for batch in loader:
                feats = batch["feats"].to(device)
                lens = batch["feats_lengths"].to(device)
                start = time.perf_counter()
                with torch.no_grad():
                    encoded = model.encode(feats, lens, args.decoding_chunk_size,
                                           args.num_decoding_left_chunks, args.simulate_streaming)
                sync()
                encoder_s += time.perf_counter() - start
                stand_in = _EncodedModel(model, encoded)
                hyps = {}
                for m in modes:
                    start = time.perf_counter()
                    if m in TRANSDUCER_MODES:
                        hyps[m] = decode_transducer(model, *encoded, m, args.beam_size,
                                                    args.max_sym_per_frame,
                                                    args.transducer_weight, args.reverse_weight,
                                                    search_stats[m])
                    else:
                        hyps[m] = decode_batch(
                            stand_in, feats, lens, [m], args.beam_size, args.ctc_weight,
                            args.reverse_weight, args.penalty, args.decoding_chunk_size,
                            args.num_decoding_left_chunks, args.simulate_streaming, skip)[m]
                    sync()
                    search_s[m] += time.perf_counter() - start
                audio_s += float(batch["feats_lengths"].sum()) * frame_shift_ms / 1000.0
                for m in modes:
                    for key, hyp in zip(batch["keys"], hyps[m]):
                        text = tokens_to_text(hyp, char_dict, model.eos, raw=args.raw_output)
                        outs[m].write(f"{key} {text}".rstrip() + "\n")
                num_utts += len(batch["keys"])
                bar.update(len(batch["keys"]))
    finally:
        for f in outs.values():
            f.close()
    for m, path in paths.items():
        os.replace(f"{path}.tmp", path)
    decode_s = encoder_s + sum(search_s.values())
    rtf = decode_s / audio_s if audio_s > 0 else float("nan")
    logging.info("decoded %d utterances (%.1f s of audio) in %.2f s with %s: RTF %.4f "
                 "(encoder %.2f s, once for all modes)", num_utts, audio_s, decode_s,
                 " ".join(modes), rtf, encoder_s)
    per_mode = {m: _rtf_record(m, encoder_s, search_s[m], audio_s, num_utts) for m in modes}
    for m, counts in search_stats.items():
        per_mode[m].update(counts)
        if "joint_evals" in counts:
            logging.info("%s: %d joint evaluations over %d encoder frames (%.3f per frame)", m,
                         counts["joint_evals"], counts["encoder_frames"],
                         counts["joint_evals"] / max(1, counts["encoder_frames"]))
    for m, rec in per_mode.items():
        logging.info("RTF %-24s %s (encoder %.2f s + search %.2f s over %.1f s of audio)", m,
                     "n/a" if rec["rtf"] is None else f"{rec['rtf']:.4f}", encoder_s,
                     search_s[m], audio_s)
        if args.result_dir:
            atomic_write_text(os.path.join(args.result_dir, m, "rtf"),
                              json.dumps(rec, sort_keys=True) + "\n")
    return {"utterances": num_utts, "audio_s": audio_s, "decode_s": decode_s, "rtf": rtf,
            "encoder_s": encoder_s, "modes": per_mode}


def main(argv: Optional[List[str]] = None) -> None:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    recognize(args)


if __name__ == "__main__":
    main()

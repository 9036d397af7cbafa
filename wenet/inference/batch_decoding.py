"""Decoding a whole data list (recognize.py, the decode benches): the dataset settings
for decoding, the model or ensemble to decode with, and the per-mode timing totals.

Timing, per mode: the encoder runs once per batch and counts in full for every mode;
shared search work is timed once and counts in full in each mode that used it
(``wenet/decode/batch_context.py``); so

    RTF(mode) = (encoder seconds + that mode's search seconds) / audio seconds

is what decoding that mode alone would cost. :meth:`DecodeTotals.report` logs it and
writes ``<mode>/rtf``, one JSON line ``{"mode", "rtf", "encoder_s", "search_s",
"audio_s", "utterances"}`` (``rtf`` null without audio; the modes' counters added).
"""
from __future__ import annotations

import copy
import json
import logging
import os
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence

import torch

from wenet.decode.batch_context import ModeResult
from wenet.inference.loader import LoadedModel, load_model_dir
from wenet.models.ensemble import EnsembleModel
from wenet.utils.file_utils import atomic_write_text


def decoding_dataset_conf(dataset_conf: dict, batch_size: int) -> dict:
    """The training dataset_conf made fit for decoding: nothing dropped, reordered or augmented."""
    conf = copy.deepcopy(dataset_conf or {})
    conf["filter_conf"] = {"max_length": 1e9, "min_length": 0, "token_max_length": 10 ** 9,
                           "token_min_length": 0, "min_output_input_ratio": 0.0,
                           "max_output_input_ratio": 1e9}
    # one pass: a feature cache would only hold memory
    for key in ("speed_perturb", "vtlp", "edge_pad", "spec_aug", "spec_sub", "spec_trim",
                "shuffle", "sort", "cache_features"):
        conf[key] = False
    conf["batch_conf"] = {"batch_type": "static", "batch_size": batch_size}
    return conf


def load_decoding_model(config: str, checkpoint: Optional[str], device: torch.device, *,
                        units: Optional[str] = None, bpe_model: Optional[str] = None,
                        ensemble: Optional[Sequence[str]] = None,
                        weights: Optional[Sequence[float]] = None) -> LoadedModel:
    """The model of ``config`` + ``checkpoint`` (``load_model_dir``), or with ``ensemble``
    (more checkpoints, each read with the ``train.yaml`` beside it) all of them as one
    ``EnsembleModel``; the models must share the features (a difference is a ValueError
    naming the checkpoint)."""
    if ensemble and not checkpoint:
        raise ValueError("--ensemble needs --checkpoint (the first model)")
    if weights and not ensemble:
        raise ValueError("--ensemble_weights needs --ensemble")
    loaded = load_model_dir("", device, checkpoint, config=config, units=units,
                            bpe_model=bpe_model)
    if not ensemble:
        return loaded
    models = [loaded.model]
    for path in ensemble:
        beside = os.path.join(os.path.dirname(os.path.abspath(path)), "train.yaml")
        if not os.path.isfile(beside):
            raise FileNotFoundError(f"--ensemble {path}: no train.yaml beside it ({beside})")
        other = load_model_dir("", device, path, config=beside, need_tokenizer=False)
        if other.feature_conf != loaded.feature_conf:
            raise ValueError(f"--ensemble {path}: its features ({other.feature_conf}) differ "
                             f"from --config's ({loaded.feature_conf})")
        models.append(other.model)
    if weights is not None and len(weights) != len(models):
        raise ValueError(f"--ensemble_weights gives {len(weights)} weights for "
                         f"{len(models)} models")
    logging.info("decoding with an ensemble of %d models (weights %s)", len(models),
                 list(weights) if weights else "equal")
    ensemble_model = EnsembleModel(models, list(weights) if weights else None).to(device).eval()
    return replace(loaded, model=ensemble_model)


def rtf_record(mode: str, encoder_s: float, search_s: float, audio_s: float,
               num_utts: int) -> Dict[str, Any]:
    """The per-mode timing written to ``<mode>/rtf`` (see the module docstring)."""
    rtf = (encoder_s + search_s) / audio_s if audio_s > 0 else None
    return {"mode": mode, "rtf": rtf, "encoder_s": round(encoder_s, 6),
            "search_s": round(search_s, 6), "audio_s": round(audio_s, 6), "utterances": num_utts}


class DecodeTotals:
    """What the batches add up to: audio, utterances, encoder and per-mode search time
    (``search_wall_s``: the searches' wall time, shared work once) and counters."""

    def __init__(self, modes: List[str]) -> None:
        self.modes = list(modes)
        self.encoder_s, self.audio_s, self.utterances = 0.0, 0.0, 0
        self.search_wall_s = 0.0
        self.search_s = {m: 0.0 for m in modes}
        self.counts: Dict[str, Dict[str, int]] = {m: {} for m in modes}

    def add_batch(self, results: Dict[str, ModeResult], encoder_s: float, search_wall_s: float,
                  audio_s: float, utterances: int) -> None:
        """Count one batch: its encoder and search seconds, its modes' results."""
        self.encoder_s += encoder_s
        self.search_wall_s += search_wall_s
        self.audio_s += audio_s
        self.utterances += utterances
        for m, result in results.items():
            self.search_s[m] += result.seconds
            for key, n in result.counts.items():
                self.counts[m][key] = self.counts[m].get(key, 0) + n

    def report(self, result_dir: Optional[str] = None) -> Dict[str, Any]:
        """Log the timing, write ``<mode>/rtf`` under ``result_dir``; the figures as a dict."""
        encoder_s, audio_s = self.encoder_s, self.audio_s
        decode_s = encoder_s + self.search_wall_s
        rtf = decode_s / audio_s if audio_s > 0 else float("nan")
        logging.info("decoded %d utterances (%.1f s of audio) in %.2f s with %s: RTF %.4f "
                     "(encoder %.2f s, once for all modes)", self.utterances, audio_s,
                     decode_s, " ".join(self.modes), rtf, encoder_s)
        per_mode = {m: rtf_record(m, encoder_s, self.search_s[m], audio_s, self.utterances)
                    for m in self.modes}
        for m, counts in self.counts.items():
            per_mode[m].update(counts)
            if "joint_evals" in counts:
                logging.info("%s: %d joint evaluations over %d encoder frames (%.3f per frame)",
                             m, counts["joint_evals"], counts["encoder_frames"],
                             counts["joint_evals"] / max(1, counts["encoder_frames"]))
        for m, rec in per_mode.items():
            logging.info("RTF %-24s %s (encoder %.2f s + search %.2f s over %.1f s of audio)", m,
                         "n/a" if rec["rtf"] is None else f"{rec['rtf']:.4f}", encoder_s,
                         self.search_s[m], audio_s)
            if result_dir:
                atomic_write_text(os.path.join(result_dir, m, "rtf"),
                                  json.dumps(rec, sort_keys=True) + "\n")
        return {"utterances": self.utterances, "audio_s": audio_s, "decode_s": decode_s,
                "rtf": rtf, "encoder_s": encoder_s, "modes": per_mode}

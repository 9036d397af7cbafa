"""A trained model's directory → a model ready to decode, with its tokenizer and features.

Two layouts are accepted:

- an exported dir: ``final.zip`` (TorchScript, stage 6) with ``train.yaml`` (the
  features and the model's configuration), ``units.txt`` and, for BPE units, the
  sentencepiece model beside it (stage 6 copies them there; the CMVN is inside the
  TorchScript model);
- an experiment dir: ``train.yaml`` + a checkpoint: the one named, else the newest
  ``avg_*.pt``, else ``final.pt``, else the newest epoch ``{N}.pt``. The checkpoint
  carries the CMVN statistics.

Units and the BPE model are found by :mod:`wenet.models.paths`' one rule (beside the model,
then where ``train.yaml`` says under the recipe root recorded at training time; never the
working directory; two disagreeing candidates are an error naming both). Files can also
be named (``units``, ``bpe_model``).

A scripted model is wrapped in :class:`ScriptedModel`, which offers what the decoding
modes call on an eager model (``encode``, ``ctc_logprobs``, ``decoder``, ``sos``...),
so ``wenet.decode.decode`` treats both alike.
"""
from __future__ import annotations

import glob
import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch

from wenet.dataset.fbank import FeatureConf
from wenet.dataset.tokenizer import Tokenizer
from wenet.alignment.align import frame_shift_seconds
from wenet.inference.features import inference_feature_conf
from wenet.models import model_from_checkpoint
from wenet.models.config_check import check_model_config
from wenet.models.paths import resolve_bpe, resolve_units
from wenet.train.checkpoint import epoch_checkpoints
from wenet.transformer.encoder import check_decoding_chunk_size
from wenet.utils.file_utils import load_yaml

SCRIPT_NAME = "final.zip"
CONFIG_NAME = "train.yaml"


class ScriptedModel:
    """A TorchScript ASR model (``final.zip``) with the eager model's decoding interface.

    The attention decoder's incremental step (``forward_one_step``) is not part of the
    exported methods, so the ``attention`` mode needs the checkpoint; every other mode
    (CTC, rescoring, transducer) works. ``simulate_streaming`` is not offered here.
    """

    def __init__(self, script: torch.jit.ScriptModule) -> None:
        self.script = script

    def __getattr__(self, name: str) -> Any:  # sos, eos, decoder, transducer methods...
        if name == "script":
            raise AttributeError(name)
        return getattr(self.script, name)

    def encode(self, speech: torch.Tensor, speech_lengths: torch.Tensor,
               decoding_chunk_size: int = -1, num_decoding_left_chunks: int = -1,
               simulate_streaming: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        """Encoder output and mask, as ``ASRModel.encode`` (no simulated streaming)."""
        check_decoding_chunk_size(decoding_chunk_size)
        if simulate_streaming:
            raise ValueError("simulate_streaming needs the eager model (a checkpoint), "
                             "not final.zip")
        return self.script.encoder(speech, speech_lengths, decoding_chunk_size,
                                   num_decoding_left_chunks)

    def ctc_logprobs(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """CTC log-probabilities (B, T', V), the exported ``ctc_activation``."""
        return self.script.ctc_activation(encoder_out)


@dataclass
class LoadedModel:
    """What decoding needs from a model directory.

    ``model``: the eager model, or the TorchScript one wrapped in :class:`ScriptedModel`
    (``scripted`` True; the raw module is ``model.script``), in eval mode;
    ``frame_shift_s``: seconds per encoder output frame (fbank shift x subsampling).
    """

    model: Any
    tokenizer: Optional[Tokenizer]   # None when loaded with need_tokenizer=False
    feature_conf: FeatureConf        # inference features (no dither)
    configs: Dict[str, Any]
    scripted: bool
    frame_shift_s: float
    path: str
    checkpoint: str  # the weights file: final.zip or the checkpoint
    device: torch.device


def min_input_frames(model: Any) -> int:
    """Feature frames the model needs for one encoder output frame, as its encoder says
    (``min_input_frames``: the subsampling front end's right context + 1, or the
    Zipformer front end's context: 9 frames, 0.105 s of audio in the main config); for an
    ensemble, the largest of its models'. Shorter input has no encoder output, so
    recognition refuses it up front (``features.feature_batches``) instead of failing
    inside the encoder. ``model``: an eager model, an ensemble or a :class:`ScriptedModel`
    (TorchScript keeps the method: the encoder's forward calls it)."""
    members = getattr(model, "models", None)
    if members is not None:
        return max(min_input_frames(m) for m in members)
    encoder = getattr(model, "encoder", None)
    if encoder is not None and hasattr(encoder, "min_input_frames"):
        return int(encoder.min_input_frames())
    return int(model.right_context()) + 1


def find_checkpoint(path: str) -> str:
    """The checkpoint an experiment dir decodes with: the newest ``avg_*.pt``, else
    ``final.pt``, else the newest epoch ``{N}.pt``; FileNotFoundError naming the dir."""
    averages = [p for p in glob.glob(os.path.join(path, "avg_*.pt"))
                if os.path.basename(p)[4:-3].isdigit()]
    if averages:
        return max(averages, key=lambda p: (os.path.getmtime(p), p))
    final = os.path.join(path, "final.pt")
    if os.path.isfile(final):
        return final
    epochs = epoch_checkpoints(path)
    if epochs:
        return epochs[-1][1]
    raise FileNotFoundError(f"{path}: no checkpoint (avg_*.pt, final.pt or {{N}}.pt) and no "
                            f"{SCRIPT_NAME}")


def _load_script(path: str, device: str) -> ScriptedModel:
    # TorchScript's default fusion strategy compiles static-shape specialisations first;
    # recognition feeds every batch in a new shape, so it kept recompiling (transcribing
    # the main job's test set 5-50x slower than the eager model, varying from run to run).
    # One dynamic-shape specialisation keeps it steady (bench/transcribe.py). Process-wide.
    with warnings.catch_warnings():  # torch 2.14 deprecates both; WeNet runtimes need them
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.set_fusion_strategy` is "
                                "deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.load` is deprecated",
                                category=FutureWarning)
        torch.jit.set_fusion_strategy([("DYNAMIC", 1)])
        script = torch.jit.load(path, map_location=device)
    return ScriptedModel(script.eval())


def load_model_dir(path: str, device: str | torch.device = "cpu",
                   checkpoint: Optional[str] = None, *, config: Optional[str] = None,
                   units: Optional[str] = None, bpe_model: Optional[str] = None,
                   need_tokenizer: bool = True) -> LoadedModel:
    """Load the model of ``path`` (module docstring): ``final.zip`` when there is one and
    no ``checkpoint`` is named, else ``train.yaml`` + the checkpoint. ``checkpoint`` may
    also name a ``.zip`` (TorchScript) file; ``config`` another yaml than
    ``path/train.yaml`` (``path`` may then be empty: the yaml's dir). Without
    ``need_tokenizer`` (export, ensemble members) no units are looked up and
    ``tokenizer`` is None."""
    if config is not None:
        path = path or os.path.dirname(os.path.abspath(config))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model directory {path} does not exist")
    config_path = config or os.path.join(path, CONFIG_NAME)
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"{path}: no {os.path.basename(config_path)} (the features "
                                "and units of the model are read from it)")
    configs = check_model_config(load_yaml(config_path), config_path)
    tokenizer = None
    if need_tokenizer or units:
        units = units or resolve_units(path, configs)
        bpe_model = bpe_model or resolve_bpe(path, configs, units)
        tokenizer = Tokenizer(units, bpe_model)
    feature_conf = inference_feature_conf(configs, config_path)
    script = os.path.join(path, SCRIPT_NAME)
    if checkpoint is None and config is None and os.path.isfile(script):
        checkpoint = script
    if checkpoint is not None and checkpoint.endswith(".zip"):
        model: Any = _load_script(checkpoint, str(device))
        scripted, rate = True, int(model.script.subsampling_rate())
    else:
        checkpoint = checkpoint or find_checkpoint(path)
        model = model_from_checkpoint(configs, checkpoint, device, config_path)  # + CMVN
        scripted, rate = False, int(model.subsampling_rate())
    logging.info("model %s (%s), units %s%s", checkpoint, "TorchScript" if scripted else
                 "checkpoint", units, f", BPE {bpe_model}" if bpe_model else "")
    return LoadedModel(model=model, tokenizer=tokenizer, feature_conf=feature_conf,
                       configs=configs, scripted=scripted,
                       frame_shift_s=frame_shift_seconds(rate, feature_conf.frame_shift),
                       path=path, checkpoint=checkpoint, device=torch.device(device))

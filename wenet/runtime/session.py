"""An exported ONNX model directory (docs/onnx_format.md) loaded into onnxruntime
sessions: the metadata read once, full-context batched encoding with padding, the CTC
head, the rescoring decoder and the transducer's graphs behind the numpy face the
searches call (``wenet.runtime.transducer_search.TransducerNet``).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnxruntime as ort

from wenet.runtime.fbank import FbankOptions

logger = logging.getLogger(__name__)

FORMAT_VERSION = "1"
_DTYPES = {"float32": np.float32, "int64": np.int64}


def _ints(text: str) -> List[int]:
    return [int(v) for v in text.split(",") if v.strip()]


@dataclass(frozen=True)
class ModelInfo:
    """What ``encoder.onnx``'s metadata says about the model."""

    model_type: str               # ctc_attention | transducer
    vocab_size: int
    blank_id: int
    sos: int
    eos: int
    subsampling_rate: int
    min_input_frames: int         # feature frames one encoder output frame needs
    has_ctc: bool
    has_decoder: bool
    bidirectional_decoder: bool
    features: FbankOptions
    big_blank_ids: Tuple[int, ...] = ()
    big_blank_durations: Tuple[int, ...] = ()
    predictor_states: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (dtype, shape) each

    @classmethod
    def from_metadata(cls, meta: Mapping[str, str], path: str) -> "ModelInfo":
        """Parse the encoder's metadata; a missing key or another format version is a
        ValueError naming ``path``."""
        version = meta.get("wenet_onnx_version")
        if version != FORMAT_VERSION:
            raise ValueError(f"{path}: wenet_onnx_version {version!r}, this runtime reads "
                             f"version {FORMAT_VERSION} (docs/onnx_format.md)")
        try:
            info = cls._parse(meta)
        except KeyError as e:
            raise ValueError(f"{path}: metadata key {e} missing (docs/onnx_format.md)") from None
        return info

    @classmethod
    def _parse(cls, meta: Mapping[str, str]) -> "ModelInfo":
        features = FbankOptions(int(meta["sample_rate"]), int(meta["num_mel_bins"]),
                                float(meta["frame_length"]), float(meta["frame_shift"]))
        # min_input_frames where the exporter writes it (a Zipformer needs fewer frames
        # than right_context + 1), else the subsampling front end's right context + 1
        min_frames = int(meta.get("min_input_frames", int(meta["right_context"]) + 1))
        states: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
        if meta["model_type"] == "transducer":
            dtypes = meta["predictor_state_dtypes"].split(",")
            shapes = meta["predictor_state_shapes"].split(";")
            states = tuple((d, tuple(s.split(","))) for d, s in zip(dtypes, shapes))
        return cls(meta["model_type"], int(meta["vocab_size"]), int(meta["blank_id"]),
                   int(meta["sos_symbol"]), int(meta["eos_symbol"]),
                   int(meta["subsampling_rate"]), min_frames, meta["has_ctc"] == "1",
                   meta["has_decoder"] == "1", meta["is_bidirectional_decoder"] == "1",
                   features, tuple(_ints(meta.get("big_blank_ids", ""))),
                   tuple(_ints(meta.get("big_blank_durations", ""))), states)


def _session(path: str, num_threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = num_threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])


class OnnxModel:
    """The sessions of an ONNX model directory: ``int8`` picks the ``*.int8.onnx`` files;
    ``num_threads`` is each session's intra-op thread count. Files a model does not have
    (``ctc.onnx`` of a transducer trained without CTC...) are None."""

    def __init__(self, onnx_dir: str, int8: bool = False, num_threads: int = 1) -> None:
        if not os.path.isdir(onnx_dir):
            raise FileNotFoundError(f"ONNX model directory {onnx_dir} does not exist")
        self.dir = onnx_dir
        self.int8 = int8
        self.num_threads = num_threads
        self.encoder = self._load("encoder", required=True)
        self.info = ModelInfo.from_metadata(self.encoder.get_modelmeta().custom_metadata_map,
                                            self.path_of("encoder"))
        info = self.info
        self.ctc = self._load("ctc", required=info.has_ctc)
        self.decoder = self._load("decoder", required=info.has_decoder)
        transducer = info.model_type == "transducer"
        self.encoder_proj = self._load("encoder_proj", required=transducer)
        self.predictor = self._load("predictor", required=transducer)
        self.joiner = self._load("joiner", required=transducer)
        logger.info("ONNX model %s (%s%s, %s threads): %s", onnx_dir, info.model_type,
                    ", int8" if int8 else "", num_threads,
                    ", ".join(n for n in ("ctc", "decoder", "joiner") if getattr(self, n)))

    def path_of(self, name: str) -> str:
        """The file of graph ``name`` (``encoder``...) in the precision asked for."""
        return os.path.join(self.dir, f"{name}{'.int8' if self.int8 else ''}.onnx")

    def _load(self, name: str, required: bool) -> Optional[ort.InferenceSession]:
        path = self.path_of(name)
        if not os.path.isfile(path):
            if required:
                raise FileNotFoundError(f"{path} is missing: the model needs it "
                                        "(docs/onnx_format.md)")
            return None
        return _session(path, self.num_threads)

    def encode(self, feats: Sequence[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
        """Fbank of several utterances ((T_i, F) each) → encoder output (B, T', D) and its
        valid lengths (B,), one padded batch through ``encoder.onnx``."""
        lens = np.array([f.shape[0] for f in feats], dtype=np.int64)
        batch = np.zeros((len(feats), int(lens.max()), feats[0].shape[1]), dtype=np.float32)
        for b, f in enumerate(feats):
            batch[b, :f.shape[0]] = f
        out, out_lens = self.encoder.run(["encoder_out", "encoder_out_lens"],
                                         {"feats": batch, "feats_lens": lens})
        return out, out_lens.astype(np.int64)

    def ctc_logprobs(self, encoder_out: np.ndarray) -> np.ndarray:
        """(B, T, V) CTC log-probabilities of ``ctc.onnx``."""
        return self.ctc.run(["probs"], {"hidden": encoder_out})[0]

    def decoder_scores(self, hyps: np.ndarray, hyps_lens: np.ndarray,
                       encoder_out: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """``decoder.onnx``: log-probabilities (M, L, V) of the left-to-right decoder and
        of the right-to-left one (a placeholder when the export has none)."""
        score, r_score = self.decoder.run(["score", "r_score"], {
            "hyps": hyps, "hyps_lens": hyps_lens, "encoder_out": encoder_out})
        return score, r_score

    def transducer(self) -> "TransducerSessions":
        """The transducer graphs behind the searches' numpy face."""
        return TransducerSessions(self)


class TransducerSessions:
    """``encoder_proj.onnx``, ``predictor.onnx`` and ``joiner.onnx`` as a
    ``TransducerNet`` (wenet.runtime.transducer_search)."""

    def __init__(self, model: OnnxModel) -> None:
        info = model.info
        self.model = model
        self.blank_id = info.blank_id
        self.big_blank_ids = list(info.big_blank_ids)
        self.big_blank_durations = list(info.big_blank_durations)
        self.state_names = [f"state_{i}" for i in range(len(info.predictor_states))]
        self.out_names = ["pred_proj"] + [f"r_state_{i}" for i in range(len(self.state_names))]

    def project_encoder(self, encoder_out: np.ndarray) -> np.ndarray:
        return self.model.encoder_proj.run(["enc_proj"], {"encoder_out": encoder_out})[0]

    def predictor_init_state(self, n: int) -> List[np.ndarray]:
        """Zeros for float states (LSTM), blanks for token states (stateless)."""
        states = []
        for dtype, shape in self.model.info.predictor_states:
            dims = [n if d == "N" else int(d) for d in shape]
            fill = self.blank_id if dtype == "int64" else 0
            states.append(np.full(dims, fill, dtype=_DTYPES[dtype]))
        return states

    def predictor_step(self, tokens: np.ndarray, state: List[np.ndarray]
                       ) -> Tuple[np.ndarray, List[np.ndarray]]:
        feed: Dict[str, np.ndarray] = {"tokens": np.asarray(tokens, dtype=np.int64).reshape(-1, 1)}
        feed.update({name: np.ascontiguousarray(s) for name, s in zip(self.state_names, state)})
        pred, *new_state = self.model.predictor.run(self.out_names, feed)
        return pred, new_state

    def joint(self, enc_proj: np.ndarray, pred_proj: np.ndarray) -> np.ndarray:
        return self.model.joiner.run(["logits"], {
            "enc_proj": np.ascontiguousarray(enc_proj, dtype=np.float32),
            "pred_proj": np.ascontiguousarray(pred_proj, dtype=np.float32)})[0]

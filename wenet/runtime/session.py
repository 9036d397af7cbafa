"""An exported ONNX model directory (docs/onnx_format.md) loaded into onnxruntime
sessions: the metadata read once, full-context batched encoding with padding, the
streaming encoder step (``encoder_chunk.onnx``: one chunk with fixed-size caches, and a
whole utterance chunk by chunk as ``recognize.py --simulate_streaming`` encodes it), the
CTC head, the rescoring decoder and the transducer's graphs behind the numpy face the
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
from wenet.utils.chunk_window import ChunkWindow

logger = logging.getLogger(__name__)

FORMAT_VERSION = "1"
_DTYPES = {"float32": np.float32, "int64": np.int64}
# metadata keys every file of one export shares (docs/onnx_format.md); export_id (a hash
# of the weights) is absent from exports made before it was added
ONE_EXPORT_KEYS = ("wenet_onnx_version", "model_type", "vocab_size", "blank_id", "sos_symbol",
                   "eos_symbol", "export_id")


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
    right_context: int            # feature frames the front end looks ahead
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
                   int(meta["subsampling_rate"]), int(meta["right_context"]), min_frames,
                   meta["has_ctc"] == "1",
                   meta["has_decoder"] == "1", meta["is_bidirectional_decoder"] == "1",
                   features, tuple(_ints(meta.get("big_blank_ids", ""))),
                   tuple(_ints(meta.get("big_blank_durations", ""))), states)


def output_frames(input_frames: int, subsampling_rate: int, right_context: int) -> int:
    """Encoder output frames of ``input_frames`` fbank frames through a U2 convolutional
    front end (Conv2dSubsampling 4/6/8: each output frame reads ``right_context + 1``
    frames, consecutive ones ``subsampling_rate`` apart)."""
    return max(0, (input_frames - right_context - 1) // subsampling_rate + 1)


@dataclass(frozen=True)
class ChunkGraph:
    """What ``encoder_chunk.onnx`` fixed at export: its chunk window, its caches' shapes
    and whether it takes an ``att_mask`` (U2 encoders do, the Zipformer does not)."""

    window: ChunkWindow
    att_shape: Tuple[int, ...]
    cnn_shape: Tuple[int, ...]
    has_mask: bool

    @classmethod
    def of(cls, session: ort.InferenceSession, info: "ModelInfo") -> "ChunkGraph":
        meta = session.get_modelmeta().custom_metadata_map
        inputs = {i.name: i for i in session.get_inputs()}
        window = ChunkWindow(info.subsampling_rate, info.right_context,
                             int(meta["chunk_size"]), int(meta["left_chunks"]))
        return cls(window, tuple(int(d) for d in inputs["att_cache"].shape),
                   tuple(int(d) for d in inputs["cnn_cache"].shape), "att_mask" in inputs)


def _session(path: str, num_threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = num_threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])


class OnnxModel:
    """The sessions of an ONNX model directory: ``int8`` picks the ``*.int8.onnx`` files;
    ``num_threads`` is each session's intra-op thread count; ``streaming`` also loads
    ``encoder_chunk.onnx`` (required then). Files a model does not have (``ctc.onnx`` of a
    transducer trained without CTC...) are None."""

    def __init__(self, onnx_dir: str, int8: bool = False, num_threads: int = 1,
                 streaming: bool = False) -> None:
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
        self.encoder_chunk = self._load("encoder_chunk", required=True) if streaming else None
        self.chunks = ChunkGraph.of(self.encoder_chunk, info) if streaming else None
        self._check_one_export()
        logger.info("ONNX model %s (%s%s, %s threads): %s", onnx_dir, info.model_type,
                    ", int8" if int8 else "", num_threads,
                    ", ".join(n for n in ("ctc", "decoder", "joiner") if getattr(self, n)))

    def _check_one_export(self) -> None:
        """ValueError naming the files when a graph's metadata says it belongs to another
        model than ``encoder.onnx`` (another vocabulary, blank, or export: a file copied
        in from another directory)."""
        ref = self.encoder.get_modelmeta().custom_metadata_map
        for name in ("encoder_chunk", "ctc", "decoder", "encoder_proj", "predictor", "joiner"):
            session = getattr(self, name)
            if session is None:
                continue
            meta = session.get_modelmeta().custom_metadata_map
            differ = [f"{k} {meta.get(k)} where it has {ref.get(k)}" for k in ONE_EXPORT_KEYS
                      if meta.get(k) != ref.get(k)]
            if differ:
                raise ValueError(f"{self.path_of(name)} is not of the export of "
                                 f"{self.path_of('encoder')}: {'; '.join(differ)}; the files "
                                 "of a directory must come from one export_onnx.py run")

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

    def init_caches(self) -> Tuple[np.ndarray, np.ndarray]:
        """The zero caches a stream (or a sentence of one) starts from."""
        return (np.zeros(self.chunks.att_shape, dtype=np.float32),
                np.zeros(self.chunks.cnn_shape, dtype=np.float32))

    def encode_chunk(self, chunk: np.ndarray, offset: int, att_cache: np.ndarray,
                     cnn_cache: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One chunk (1, T, F) of raw fbank after ``offset`` output frames ->
        (output (1, T', D), the next att_cache, the next cnn_cache)."""
        feed = {"chunk": np.ascontiguousarray(chunk, dtype=np.float32),
                "offset": np.array([offset], dtype=np.int64),
                "att_cache": att_cache, "cnn_cache": cnn_cache}
        if self.chunks.has_mask:  # False on the cache slots not filled yet
            required = self.chunks.window.required_cache_size
            frames = output_frames(chunk.shape[1], self.info.subsampling_rate,
                                   self.info.right_context)
            mask = np.ones((1, 1, required + frames), dtype=bool)
            mask[:, :, :max(required - offset, 0)] = False
            feed["att_mask"] = mask
        ys, r_att, r_cnn = self.encoder_chunk.run(["output", "r_att_cache", "r_cnn_cache"],
                                                  feed)
        return ys, r_att, r_cnn

    def encode_chunk_by_chunk(self, feats: np.ndarray) -> np.ndarray:
        """One utterance's fbank (T, F) encoded chunk by chunk from zero caches, the
        outputs concatenated (1, T', D): the chunks ``forward_chunk_by_chunk`` reads."""
        window = self.chunks.window
        att, cnn = self.init_caches()
        outputs, offset = [], 0
        for cur in window.starts(feats.shape[0], self.info.min_input_frames):
            ys, att, cnn = self.encode_chunk(feats[None, cur:cur + window.window], offset,
                                             att, cnn)
            outputs.append(ys)
            offset += ys.shape[1]
        return np.concatenate(outputs, axis=1)

    def encode_streaming(self, feats: Sequence[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
        """``encode``'s result with each utterance encoded chunk by chunk (padded batch)."""
        outs = [self.encode_chunk_by_chunk(f)[0] for f in feats]
        lens = np.array([o.shape[0] for o in outs], dtype=np.int64)
        batch = np.zeros((len(outs), int(lens.max()), outs[0].shape[1]), dtype=np.float32)
        for b, o in enumerate(outs):
            batch[b, :o.shape[0]] = o
        return batch, lens

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

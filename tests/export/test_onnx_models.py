"""Every model family's ONNX directory (wenet/bin/export_onnx.py --model_dir ... --int8)
computes in onnxruntime what the eager model computes, on shapes unlike the tracing
examples, and says so in its metadata (docs/onnx_format.md).

Families: tests/device/families.py's tiny configs (U2++ conformer, causal U2++ conformer,
transformer, non-causal and causal Zipformer, conformer transducers with the LSTM
predictor, one multi-blank, a Zipformer transducer with the stateless predictor),
plus a causal Zipformer transducer and a static-chunk conformer; each with a global CMVN (inside the encoder graph),
seeded, its CTC head and joint sharpened so argmaxes are decisive.

Tolerance (float32, absolute, rtol 0): ATOL = 2e-5 on every output. onnxruntime fuses
and reorders the same float32 arithmetic; the largest difference measured over all
families and outputs was 1.4e-6 (the causal conformer's chunk file; encoder outputs,
log-probs and decoder scores <= 9.5e-7, predictor and joiner <= 5e-7), so 2e-5 leaves a
>10x margin, while an export fault (a baked length, a wrong mask, a padded row leaking
in) is ~1e-1 or more.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch

from tests.device.families import FAMILIES
from tests.tiny_experiment import UNITS, merged, write_experiment
from wenet.bin import export_onnx

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

ATOL = 2e-5
CHUNK, LEFT_CHUNKS = 4, 2
FEAT_DIM = 20
CAUSAL_ZIPFORMER_TRANSDUCER = merged(FAMILIES["zipformer_pruned_cr_ctc"],
                                     {"encoder_conf": {"causal": True}})
CONFIGS = {name: FAMILIES[name] for name in (
    "conformer_u2pp", "conformer_u2pp_causal", "transformer", "zipformer", "zipformer_causal",
    "zipformer_pruned_cr_ctc", "transducer_full", "transducer_multi_blank")}
CONFIGS["zipformer_transducer_causal"] = CAUSAL_ZIPFORMER_TRANSDUCER
# trained with one fixed chunk: even its encoder.onnx applies that chunk mask, as eager does
CONFIGS["conformer_static_chunk"] = merged(FAMILIES["conformer_u2pp"], {
    "encoder_conf": {"causal": True, "static_chunk_size": CHUNK}})
STREAMING = {"conformer_u2pp_causal", "conformer_static_chunk", "zipformer_causal",
             "zipformer_transducer_causal"}
# int8 bounds (see test_int8_files_run_and_agree): relative error of the encoder output's
# variation over time, and the share of frames whose first-pass argmax equals float32's
INT8_MAX_CENTERED_ERROR = 0.15
INT8_MIN_AGREEMENT = 0.9
COMMON_KEYS = ("wenet_onnx_version", "model_type", "encoder", "vocab_size", "blank_id",
               "sos_symbol", "eos_symbol")


class Exported:
    """One family's experiment dir, model and exported ONNX dir."""

    def __init__(self, root: Path, name: str):
        config = dict(CONFIGS[name])
        cmvn = root / "global_cmvn"
        g = torch.Generator().manual_seed(3)
        mean, var = torch.randn(FEAT_DIM, generator=g), 0.5 + torch.rand(FEAT_DIM, generator=g)
        cmvn.write_text(json.dumps({"mean_stat": (mean * 100).tolist(),
                                    "var_stat": ((var + mean ** 2) * 100).tolist(),
                                    "frame_num": 100}))
        config["cmvn_file"] = str(cmvn)
        transducer = "predictor" in config or config.get("model") == "transducer"
        sharpening = dict(joint=4.0) if transducer else dict(ctc=4.0)
        if name == "conformer_u2pp":
            (root / "exp").mkdir()
            (root / "exp" / "bpe.model").write_bytes(b"not really sentencepiece")
        self.name = name
        self.exp = root / "exp"
        self.model = write_experiment(self.exp, config, checkpoint="avg_1.pt",
                                      **sharpening).eval()
        self.out = root / "onnx"
        self.logs: List[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: self.logs.append(record.getMessage())  # type: ignore
        root_logger = logging.getLogger()
        level = root_logger.level
        root_logger.addHandler(handler)
        root_logger.setLevel(logging.INFO)
        try:
            export_onnx.main(["--model_dir", str(self.exp), "--output_dir", str(self.out),
                              "--int8", "--chunk_size", str(CHUNK),
                              "--num_decoding_left_chunks", str(LEFT_CHUNKS)])
        finally:
            root_logger.removeHandler(handler)
            root_logger.setLevel(level)
        self.sessions: Dict[str, "ort.InferenceSession"] = {}

    def session(self, name: str) -> "ort.InferenceSession":
        if name not in self.sessions:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            self.sessions[name] = ort.InferenceSession(str(self.out / f"{name}.onnx"), opts)
        return self.sessions[name]

    def metadata(self, name: str) -> Dict[str, str]:
        return {p.key: p.value for p in onnx.load(str(self.out / f"{name}.onnx")).metadata_props}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def exported(request, tmp_path_factory) -> Exported:
    torch.set_num_threads(1)
    return Exported(tmp_path_factory.mktemp(request.param), request.param)


def _feats(lengths: List[int], seed: int = 11) -> Dict[str, np.ndarray]:
    """A padded batch of random features (2 * N(0,1) + 1) of ``lengths``; padding random."""
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(len(lengths), max(lengths), FEAT_DIM, generator=g) * 2.0 + 1.0
    return {"feats": feats.numpy(), "feats_lens": np.array(lengths, np.int64)}


# lengths unlike the tracing example's (2 rows, 8 * min_input_frames + 13 frames): more
# rows, longer and shorter, padded rows, a row of the minimum length
BATCHES = [[150, 97, 64, 23], [41]]


def _eager_encoder(model, batch):
    with torch.no_grad():
        out, mask = model.encoder(torch.from_numpy(batch["feats"]),
                                  torch.from_numpy(batch["feats_lens"]), -1, -1)
    return out.numpy(), mask.squeeze(1).sum(1).numpy()


def _expected_files(e: Exported) -> set:
    model = e.model
    transducer = hasattr(model, "forward_joint_step")
    names = {"encoder"}
    if e.name in STREAMING:
        names.add("encoder_chunk")
    if not transducer or type(model.ctc).__name__ == "CTC":
        names.add("ctc")
    if not transducer or model.attention_weight > 0:
        names.add("decoder")
    if transducer:
        names |= {"encoder_proj", "predictor", "joiner"}
    return names


def test_files_and_metadata(exported):
    e, model = exported, exported.model
    names = _expected_files(e)
    onnx_files = {p.name for p in e.out.iterdir() if p.suffix == ".onnx"}
    assert onnx_files == {f"{n}.onnx" for n in names} | {f"{n}.int8.onnx" for n in names}
    assert (e.out / "units.txt").read_text() == (e.exp / "units.txt").read_text()
    if e.name == "conformer_u2pp":
        assert (e.out / "bpe.model").read_bytes() == b"not really sentencepiece"
    else:
        assert not (e.out / "bpe.model").exists()
    if e.name not in STREAMING:
        assert any("no encoder_chunk.onnx" in m for m in e.logs), e.logs

    transducer = hasattr(model, "forward_joint_step")
    common = {"wenet_onnx_version": "1",
              "model_type": "transducer" if transducer else "ctc_attention",
              "encoder": CONFIGS[e.name].get("encoder", "conformer"),
              "vocab_size": str(len(UNITS)), "blank_id": "0",
              "sos_symbol": str(len(UNITS) - 1), "eos_symbol": str(len(UNITS) - 1)}
    for name in names:
        meta = e.metadata(name)
        assert {k: meta[k] for k in COMMON_KEYS} == common, name
        meta8 = e.metadata(f"{name}.int8")  # the quantiser adds a key of its own
        assert {k: meta8.get(k) for k in meta} == meta, name
    encoder_keys = {
        "output_size": str(model.encoder.output_size()),
        "subsampling_rate": str(model.subsampling_rate()),
        "right_context": str(model.right_context()),
        "min_input_frames": str(model.encoder.min_input_frames()),
        "streaming": str(int(e.name in STREAMING)),
        "has_ctc": str(int("ctc" in names)), "has_decoder": str(int("decoder" in names)),
        "is_bidirectional_decoder": str(int(model.is_bidirectional_decoder())),
        "reverse_weight": f"{model.reverse_weight:g}",
        "sample_rate": "16000", "num_mel_bins": "20", "frame_length": "25",
        "frame_shift": "10"}
    if transducer:
        states = model.predictor_init_state(1)
        encoder_keys.update({
            "join_dim": str(model.joint.enc_proj.out_features),
            "predictor_num_states": str(len(states)),
            "predictor_state_dtypes": ",".join(str(s.dtype)[6:] for s in states),
            "predictor_state_shapes": ";".join(",".join(["N"] + [str(d) for d in s.shape[1:]])
                                               for s in states),
            "big_blank_ids": ",".join(str(i) for i in model.big_blank_ids()),
            "big_blank_durations": ",".join(str(d) for d in model.big_blank_durations())})
    for name in names & {"encoder", "encoder_chunk"}:
        meta = e.metadata(name)
        assert {k: meta[k] for k in encoder_keys} == encoder_keys, name
    if CONFIGS[e.name].get("encoder") == "zipformer":  # fewer than right_context + 1
        assert (encoder_keys["min_input_frames"], encoder_keys["right_context"]) == ("9", "10")
    if e.name == "transducer_multi_blank":
        assert encoder_keys["big_blank_durations"] == "2,3"
        assert encoder_keys["big_blank_ids"] == f"{len(UNITS)},{len(UNITS) + 1}"
    if e.name in STREAMING:
        chunks = model.encoder.chunk_window(CHUNK, LEFT_CHUNKS)
        meta = e.metadata("encoder_chunk")
        assert {k: meta[k] for k in ("chunk_size", "left_chunks", "required_cache_size",
                                     "decoding_window")} == {
            "chunk_size": str(CHUNK), "left_chunks": str(LEFT_CHUNKS),
            "required_cache_size": str(CHUNK * LEFT_CHUNKS),
            "decoding_window": str(chunks.window)}


@pytest.mark.parametrize("lengths", BATCHES)
def test_encoder_matches_eager(exported, lengths):
    batch = _feats(lengths)
    want, want_lens = _eager_encoder(exported.model, batch)
    got, got_lens = exported.session("encoder").run(None, batch)
    assert got_lens.dtype == np.int64 and got_lens.tolist() == want_lens.tolist()
    assert got.shape == want.shape
    for row, n in enumerate(want_lens):
        np.testing.assert_allclose(got[row, :n], want[row, :n], rtol=0, atol=ATOL)


def test_ctc_matches_eager(exported):
    if not (exported.out / "ctc.onnx").exists():
        pytest.skip("no CTC head")
    want_enc, _ = _eager_encoder(exported.model, _feats(BATCHES[0]))
    (got,) = exported.session("ctc").run(None, {"hidden": want_enc})
    with torch.no_grad():
        want = exported.model.ctc_activation(torch.from_numpy(want_enc)).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


def test_decoder_matches_eager(exported):
    if not (exported.out / "decoder.onnx").exists():
        pytest.skip("no attention decoder")
    model = exported.model
    enc, _ = _eager_encoder(model, _feats([83]))
    sos = eos = len(UNITS) - 1
    # more and longer hypotheses than the tracing example's 3 of length 4
    hyps = torch.tensor([[sos, 3, 4, 5, 6, 2, 3], [sos, 2, 6, eos, eos, eos, eos],
                         [sos, eos, eos, eos, eos, eos, eos], [sos, 1, 2, 3, 4, 5, eos],
                         [sos, 6, eos, eos, eos, eos, eos]])
    hyps_lens = torch.tensor([7, 3, 1, 6, 2])
    score, r_score = exported.session("decoder").run(None, {
        "hyps": hyps.numpy(), "hyps_lens": hyps_lens.numpy(), "encoder_out": enc})
    reverse_weight = model.reverse_weight if model.is_bidirectional_decoder() else 0.0
    with torch.no_grad():
        want, r_want = model.forward_attention_decoder(hyps, hyps_lens, torch.from_numpy(enc),
                                                       reverse_weight)
    np.testing.assert_allclose(score, want.numpy(), rtol=0, atol=ATOL)
    np.testing.assert_allclose(r_score, r_want.numpy(), rtol=0, atol=ATOL)
    assert (r_score.ndim == 3) == (reverse_weight > 0)


def test_transducer_graphs_match_eager(exported):
    model = exported.model
    if not hasattr(model, "forward_joint_step"):
        pytest.skip("not a transducer")
    enc, _ = _eager_encoder(model, _feats(BATCHES[0]))
    (enc_proj,) = exported.session("encoder_proj").run(None, {"encoder_out": enc})
    with torch.no_grad():
        want_proj = model.project_encoder(torch.from_numpy(enc))
    np.testing.assert_allclose(enc_proj, want_proj.numpy(), rtol=0, atol=ATOL)

    # several steps of two hypotheses, the states fed back (from the blank start)
    predictor, joiner = exported.session("predictor"), exported.session("joiner")
    num_states = len(model.predictor_init_state(1))
    assert [i.name for i in predictor.get_inputs()] == \
        ["tokens"] + [f"state_{i}" for i in range(num_states)]
    want_state = model.predictor_init_state(2)
    got_state = [s.numpy() for s in want_state]
    for step, tokens in enumerate([[0, 0], [3, 5], [6, 6], [2, 4], [5, 1]]):
        t = torch.tensor(tokens)
        outs = predictor.run(None, {"tokens": t.numpy().reshape(2, 1),
                                    **{f"state_{i}": s for i, s in enumerate(got_state)}})
        with torch.no_grad():
            want_pred, want_state = model.forward_predictor_step(t, want_state)
        np.testing.assert_allclose(outs[0], want_pred.numpy(), rtol=0, atol=ATOL)
        got_state = outs[1:]
        for got_s, want_s in zip(got_state, want_state):
            assert got_s.dtype == want_s.numpy().dtype
            np.testing.assert_allclose(got_s, want_s.numpy(), rtol=0, atol=ATOL)
        frames = enc_proj[:2, step]  # (2, J): frame `step` of the first two utterances
        (logits,) = joiner.run(None, {"enc_proj": frames, "pred_proj": outs[0]})
        with torch.no_grad():
            want_logits = model.forward_joint_step(torch.from_numpy(frames), want_pred)
        assert logits.shape[1] == len(UNITS) + len(model.big_blank_ids())
        np.testing.assert_allclose(logits, want_logits.numpy(), rtol=0, atol=ATOL)


def _run_chunks(session, meta: Dict[str, str], xs: np.ndarray) -> np.ndarray:
    """encoder_chunk.onnx over one utterance (1, T, F) as a runtime drives it: zero
    fixed-size caches, att_mask False on the not yet filled slots (when the graph has
    that input: the Zipformer masks them from the offset)."""
    chunk, required = int(meta["chunk_size"]), int(meta["required_cache_size"])
    rate, context = int(meta["subsampling_rate"]), int(meta["right_context"]) + 1
    window = int(meta["decoding_window"])
    shapes = {i.name: i.shape for i in session.get_inputs()}
    att = np.zeros(shapes["att_cache"], np.float32)  # fixed shapes but the batch-free ones
    cnn = np.zeros(shapes["cnn_cache"], np.float32)
    outs, offset = [], 0
    min_frames = 9 if meta["encoder"] == "zipformer" else context  # the front end's need
    for cur in range(0, xs.shape[1] - min_frames + 1, rate * chunk):
        piece = xs[:, cur:cur + window]
        feed = {"chunk": piece, "offset": np.array([offset], np.int64),
                "att_cache": att, "cnn_cache": cnn}
        if "att_mask" in shapes:
            frames = (piece.shape[1] - context) // rate + 1
            mask = np.ones((1, 1, required + frames), bool)
            mask[:, :, :max(required - offset, 0)] = False
            feed["att_mask"] = mask
        y, att, cnn = session.run(None, feed)
        outs.append(y)
        offset += y.shape[1]
    return np.concatenate(outs, axis=1)


def test_chunk_file_streams_like_eager(exported):
    if exported.name not in STREAMING:
        assert not (exported.out / "encoder_chunk.onnx").exists()
        return
    xs = _feats([150])["feats"]
    with torch.no_grad():
        want, _ = exported.model.encoder.forward_chunk_by_chunk(torch.from_numpy(xs), CHUNK,
                                                                LEFT_CHUNKS)
    got = _run_chunks(exported.session("encoder_chunk"), exported.metadata("encoder_chunk"), xs)
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=ATOL)


def _first_pass_argmax(e: Exported, suffix: str, batch) -> np.ndarray:
    """Per valid frame, the argmax of the CTC log-probs (models with CTC) or of the
    joint's logits after the blank start (transducers without CTC), through the
    ``suffix`` files ('' or '.int8')."""
    enc, lens = e.session(f"encoder{suffix}").run(None, batch)
    if (e.out / "ctc.onnx").exists():
        (scores,) = e.session(f"ctc{suffix}").run(None, {"hidden": enc})
    else:
        (proj,) = e.session(f"encoder_proj{suffix}").run(None, {"encoder_out": enc})
        states = {f"state_{i}": s.expand(proj.shape[0] * proj.shape[1], *s.shape[1:]).numpy()
                  for i, s in enumerate(e.model.predictor_init_state(1))}
        tokens = np.zeros((proj.shape[0] * proj.shape[1], 1), np.int64)
        pred = e.session(f"predictor{suffix}").run(None, {"tokens": tokens, **states})[0]
        (scores,) = e.session(f"joiner{suffix}").run(None, {
            "enc_proj": proj.reshape(-1, proj.shape[-1]), "pred_proj": pred})
        scores = scores.reshape(proj.shape[0], proj.shape[1], -1)
    return np.concatenate([scores[i, :n].argmax(-1) for i, n in enumerate(lens)])


def test_int8_files_run_and_agree(exported):
    """Every *.int8.onnx loads and runs and stays near float32.

    Dynamic int8 quantises each MatMul's weights and activations per tensor: about 1 %
    relative error on these encoders' outputs (the TorchScript int8 test measures the
    same). Two bounds, with the measured values:

    - the encoder output's variation over time (each utterance's output minus its time
      mean, i.e. what tells frames apart) is kept to INT8_MAX_CENTERED_ERROR (0.15)
      relative error: measured 0.8-0.9 % for the conformers and the transformer, 6 %
      for the Zipformers (at random initialisation their output varies over time by
      only ~1 % of its size, so the same absolute noise weighs more); an unrelated
      output is ~100 % or more off;
    - the first-pass argmax (CTC, or the joint after the blank start) agrees with
      float32's on at least INT8_MIN_AGREEMENT (90 %) of the frames: measured 98.7-100 %.
      A frame can flip only where its two best scores are closer than the noise; 90 %
      allows such near-ties and fails an int8 graph that computes something else (an
      unrelated argmax agrees on about 1 frame in 8 units). For the conformers and the
      transformer the path is non-trivial (at least 3 distinct labels); the untrained
      tiny Zipformers put the same label on every frame, which the first bound covers.
    """
    e = exported
    batch = _feats(BATCHES[0])
    enc, lens = e.session("encoder").run(None, batch)
    enc8, lens8 = e.session("encoder.int8").run(None, batch)
    assert lens8.tolist() == lens.tolist()
    for row, n in enumerate(lens):
        ref = enc[row, :n] - enc[row, :n].mean(0)
        got = enc8[row, :n] - enc8[row, :n].mean(0)
        error = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        assert error < INT8_MAX_CENTERED_ERROR, (row, error)
    fp32 = _first_pass_argmax(e, "", batch)
    int8 = _first_pass_argmax(e, ".int8", batch)
    agreement = float((fp32 == int8).mean())
    assert agreement >= INT8_MIN_AGREEMENT, agreement
    if CONFIGS[e.name].get("encoder") != "zipformer":
        assert len(set(fp32.tolist())) >= 3, fp32  # a decisive, non-trivial argmax path
    names = {p.name[:-len(".int8.onnx")] for p in e.out.glob("*.int8.onnx")}
    for name in names - {"encoder", "ctc", "encoder_proj", "predictor", "joiner"}:
        e.session(f"{name}.int8")  # loads (the runs above cover the others)
    if "decoder" in names:
        enc, _ = e.session("encoder").run(None, _feats([83]))
        sos = len(UNITS) - 1
        feed = {"hyps": np.array([[sos, 3, 4, 5]], np.int64),
                "hyps_lens": np.array([4], np.int64), "encoder_out": enc}
        score = e.session("decoder").run(None, feed)[0]
        score8 = e.session("decoder.int8").run(None, feed)[0]
        assert score8.shape == score.shape
        assert float(np.abs(score8 - score).max()) < 0.1 * float(np.abs(score).max())

"""Exported models decode exactly like the eager model.

TorchScript (export_jit.py): a runtime-style decode through the scripted
methods (forward_encoder_chunk, ctc_activation, forward_attention_decoder)
gives the same ctc_greedy_search and attention_rescoring hypotheses as the
eager searches of wenet/decode/ on utterances of several
lengths. ONNX (export_onnx.py): the streaming encoder (encoder_chunk.onnx) run chunk
by chunk in onnxruntime, the CTC head and the rescoring decoder match eager to 1e-4
(every family's files: tests/export/test_onnx_models.py).

The models are small and randomly initialised; the CTC head and the decoder
output layer are scaled up (and blank biased) so that argmaxes and rescoring
choices are decisive rather than near-ties of a near-uniform output.
"""
import json
import os
import warnings

import numpy as np
import pytest
import torch
import yaml

from wenet.bin import export_jit, export_onnx
from wenet.decode import DecodeOptions, decode
from wenet.decode.attention import attention_rescoring
from wenet.decode.ctc import ctc_greedy_search, ctc_prefix_beam_search
from wenet.models import init_model
from tests.export.test_jit import front_end_of  # the hand-counted (rate, right context) per config

from tests.common import CONF_DIR
VOCAB = 24
FEAT_DIM = 80
BEAM = 4
CTC_WEIGHT = 0.5
LENGTHS = [37, 64, 97, 150]  # input frames; 97 ends on a partial chunk
CHUNK = 4  # output frames per chunk for the streaming (U2++) model
LEFT_CHUNKS = 2
RUNTIME_METHODS = ("forward_encoder_chunk", "ctc_activation", "forward_attention_decoder",
                   "subsampling_rate", "right_context", "sos_symbol", "eos_symbol",
                   "is_bidirectional_decoder")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every test here runs tiny models on one thread (see conftest.one_thread)."""


def _make_experiment(root, conf_name, **encoder_extra):
    """A reduced config's model, made decisive, saved as an exp dir (train.yaml + .pt)."""
    with open(os.path.join(CONF_DIR, conf_name), "r", encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg["encoder_conf"].update(output_size=64, linear_units=128, num_blocks=2, **encoder_extra)
    cfg["decoder_conf"].update(linear_units=128, num_blocks=1)
    if "r_num_blocks" in cfg["decoder_conf"]:
        cfg["decoder_conf"]["r_num_blocks"] = 1
    g = torch.Generator().manual_seed(3)
    cmvn_file = os.path.join(root, "global_cmvn")
    frames = 1000
    mean = torch.randn(FEAT_DIM, generator=g)
    var = 0.5 + torch.rand(FEAT_DIM, generator=g)
    with open(cmvn_file, "w", encoding="utf-8") as f:
        json.dump({"mean_stat": (mean * frames).tolist(),
                   "var_stat": ((var + mean ** 2) * frames).tolist(),
                   "frame_num": frames}, f)
    cfg.update(input_dim=FEAT_DIM, output_dim=VOCAB, cmvn_file=cmvn_file)
    torch.manual_seed(0)
    model = init_model(cfg)
    with torch.no_grad():
        model.ctc.ctc_lo.weight.mul_(10.0)
        model.ctc.ctc_lo.bias[0] += 4.0  # blanks between tokens, like a trained model
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):  # eval-mode statistics that matter
                m.running_mean.uniform_(-0.3, 0.3, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
        decoders = [model.decoder] if not hasattr(model.decoder, "right_decoder") else \
            [model.decoder.left_decoder, model.decoder.right_decoder]
        for dec in decoders:
            dec.output_layer.weight.mul_(4.0)
    model.eval()
    config = os.path.join(root, "train.yaml")
    with open(config, "w", encoding="utf-8") as f:
        yaml.safe_dump(cfg, f)
    checkpoint = os.path.join(root, "avg_1.pt")
    torch.save(model.state_dict(), checkpoint)
    units = ["<blank>", "<unk>"] + [f"u{i}" for i in range(2, VOCAB - 1)] + ["<sos/eos>"]
    with open(os.path.join(root, "units.txt"), "w", encoding="utf-8") as f:
        f.writelines(f"{u} {i}\n" for i, u in enumerate(units))
    return config, checkpoint, model


def _test_set():
    """Random feature sequences (T_i, D) of the LENGTHS."""
    g = torch.Generator().manual_seed(7)
    return [torch.randn(n, FEAT_DIM, generator=g) * 2.0 + 1.0 for n in LENGTHS]


# ---------------------------------------------------------------- runtime-style decode

def _runtime_encode(script, xs, chunk_size, left_chunks):
    """Encoder output (1, T', D) and CTC log-probs through the scripted runtime methods:
    the whole utterance at once (chunk_size <= 0) or chunk by chunk with caches."""
    empty = torch.zeros(0, 0, 0, 0)
    if chunk_size <= 0:
        enc, _, _ = script.forward_encoder_chunk(xs, 0, -1, empty, empty)
        return enc, script.ctc_activation(enc)
    subsampling, context = script.subsampling_rate(), script.right_context() + 1
    stride = subsampling * chunk_size
    window = (chunk_size - 1) * subsampling + context
    att_cache, cnn_cache = empty, empty
    offset = 0
    outs, probs = [], []
    for cur in range(0, xs.size(1) - context + 1, stride):
        ys, att_cache, cnn_cache = script.forward_encoder_chunk(
            xs[:, cur:cur + window], offset, chunk_size * left_chunks, att_cache, cnn_cache)
        outs.append(ys)
        probs.append(script.ctc_activation(ys))  # a runtime runs CTC per chunk
        offset += ys.size(1)
    return torch.cat(outs, 1), torch.cat(probs, 1)


def _greedy(logp):
    """Best path of (T, V) log-probs: argmax, merge repeats, drop blank 0."""
    out, prev = [], 0
    for t in logp.argmax(-1).tolist():
        if t != 0 and t != prev:
            out.append(t)
        prev = t
    return out


def _runtime_rescore(script, enc, nbest, reverse_weight):
    """WeNet runtime's attention rescoring: one forward_attention_decoder call for the
    n-best, score = sum of token + eos log-probs per direction, mixed, plus CTC."""
    sos, eos = script.sos_symbol(), script.eos_symbol()
    hyps = [list(h) for h, _ in nbest]
    width = max(len(h) for h in hyps) + 1
    hyps_pad = torch.full((len(hyps), width), eos, dtype=torch.long)
    hyps_pad[:, 0] = sos
    for i, h in enumerate(hyps):
        hyps_pad[i, 1:len(h) + 1] = torch.tensor(h, dtype=torch.long)
    lens = torch.tensor([len(h) + 1 for h in hyps])
    l_logp, r_logp = script.forward_attention_decoder(hyps_pad, lens, enc, reverse_weight)
    best, best_score = None, float("-inf")
    for i, (h, ctc_score) in enumerate(nbest):
        score = sum(float(l_logp[i, j, t]) for j, t in enumerate(h)) + float(l_logp[i, len(h), eos])
        if reverse_weight > 0:
            r = list(reversed(h))
            r_score = sum(float(r_logp[i, j, t]) for j, t in enumerate(r)) \
                + float(r_logp[i, len(h), eos])
            score = score * (1 - reverse_weight) + r_score * reverse_weight
        score += CTC_WEIGHT * ctc_score
        if score > best_score:
            best, best_score = list(h), score
    return best, best_score


# ---------------------------------------------------------------- TorchScript

@pytest.mark.parametrize("conf_name, chunk_size", [("train_conformer.yaml", -1),
                                                   ("train_u2++_conformer.yaml", CHUNK)])
def test_export_jit_decodes_like_eager(tmp_path, conf_name, chunk_size):
    config, checkpoint, model = _make_experiment(str(tmp_path), conf_name)
    out, quant = str(tmp_path / "final.zip"), str(tmp_path / "final_quant.zip")
    with warnings.catch_warnings():
        # stage 6 prints nothing alarming: torch 2.14's deprecations of TorchScript and
        # of torch.ao.quantization are known and silenced inside the export, so any
        # warning at all (DeprecationWarning, FutureWarning, ...) fails the export here
        warnings.simplefilter("error")
        export_jit.main(["--config", config, "--checkpoint", checkpoint, "--output_file", out,
                         "--output_quant_file", quant])
    script = torch.jit.load(out)
    for name in RUNTIME_METHODS:
        assert hasattr(script, name), name
    assert (script.subsampling_rate(), script.right_context()) == front_end_of(conf_name)
    assert script.sos_symbol() == script.eos_symbol() == VOCAB - 1
    assert script.is_bidirectional_decoder() == (conf_name == "train_u2++_conformer.yaml")
    reverse_weight = model.reverse_weight

    utts = _test_set()
    left = LEFT_CHUNKS if chunk_size > 0 else -1
    with torch.no_grad():
        for xs in utts:
            # eager reference, one utterance at a time as a runtime decodes (the
            # non-causal conformer's output depends on batch padding by ~1e-2)
            feats, lens = xs.unsqueeze(0), torch.tensor([xs.size(0)])
            enc, mask = model.encode(feats, lens, chunk_size, left)
            options = DecodeOptions(beam_size=BEAM, ctc_weight=CTC_WEIGHT,
                                    reverse_weight=reverse_weight)
            eager = {m: r.hyps for m, r in decode(
                model, enc, mask, ["ctc_greedy_search", "attention_rescoring"], options).items()}
            nbests = ctc_prefix_beam_search(model.ctc_logprobs(enc), mask.sum((1, 2)), BEAM)
            (_, eager_score), = attention_rescoring(model.decoder, enc, mask, nbests, model.sos,
                                                    model.eos, CTC_WEIGHT, reverse_weight)

            enc_rt, logp_rt = _runtime_encode(script, feats, chunk_size, LEFT_CHUNKS)
            assert enc_rt.size(1) == enc.size(1)
            greedy = _greedy(logp_rt[0])
            assert greedy == eager["ctc_greedy_search"][0]
            assert len(greedy) >= 2  # decisive, non-trivial hypotheses
            nbest = ctc_prefix_beam_search(logp_rt, torch.tensor([logp_rt.size(1)]), BEAM)[0]
            assert len(nbest) == BEAM
            best, score = _runtime_rescore(script, enc_rt, nbest, reverse_weight)
            assert best == eager["attention_rescoring"][0]
            assert abs(score - eager_score) < 1e-4

        # int8: loads and its encoder output stays near the float model's. Dynamic
        # int8 quantises every Linear's weights and activations per tensor, so the
        # relative error (measured 0.8-1.0 % here) is quantisation noise, not an
        # export bug; the 10 % bound is far below the ~140 % of an unrelated output.
        qscript = torch.jit.load(quant)
        for xs in utts:
            ref, _ = _runtime_encode(script, xs.unsqueeze(0), -1, 0)
            q, _ = _runtime_encode(qscript, xs.unsqueeze(0), -1, 0)
            rel = float((q - ref).norm() / ref.norm())
            assert rel < 0.1, rel


# ---------------------------------------------------------------- ONNX

def _onnx_stream(session, xs, meta):
    """Run encoder_chunk.onnx chunk by chunk over one utterance (1, T, D) the way a runtime
    does: fixed-size zero caches, att_mask False on the not-yet-filled slots."""
    chunk_size, required = int(meta["chunk_size"]), int(meta["required_cache_size"])
    subsampling, context = int(meta["subsampling_rate"]), int(meta["right_context"]) + 1
    stride, window = subsampling * chunk_size, int(meta["decoding_window"])
    blocks, head = int(meta["num_blocks"]), int(meta["head"])
    size, kernel = int(meta["output_size"]), int(meta["cnn_module_kernel"])
    att_cache = np.zeros((blocks, head, required, 2 * size // head), np.float32)
    cnn_cache = np.zeros((blocks, 1, size, max(kernel - 1, 0)), np.float32)  # 0: no conv
    offset, outs = 0, []
    for cur in range(0, xs.shape[1] - context + 1, stride):
        chunk = xs[:, cur:cur + window]
        frames = (chunk.shape[1] - context) // subsampling + 1  # output frames of this chunk
        att_mask = np.ones((1, 1, required + frames), dtype=bool)
        att_mask[:, :, :max(required - offset, 0)] = False
        ys, att_cache, cnn_cache = session.run(None, {
            "chunk": chunk, "offset": np.array([offset], np.int64), "att_cache": att_cache,
            "cnn_cache": cnn_cache, "att_mask": att_mask})
        assert att_cache.shape[2] == required and ys.shape[1] == frames
        outs.append(ys)
        offset += ys.shape[1]
    return np.concatenate(outs, axis=1)


# WeNet's values: conv2d (4x) sees 6 frames ahead, conv2d8 (8x) 14.
SUBSAMPLING = {"train_u2++_conformer.yaml": "8", "train_transformer.yaml": "4"}
RIGHT_CONTEXT = {"train_u2++_conformer.yaml": "14", "train_transformer.yaml": "6"}


@pytest.mark.parametrize("conf_name, encoder_extra", [
    ("train_u2++_conformer.yaml", {}),  # relative positions, causal conv, two decoders
    ("train_transformer.yaml", {"use_dynamic_chunk": True}),  # absolute positions, no conv
])
def test_export_onnx_streams_like_eager(tmp_path, conf_name, encoder_extra):
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    config, checkpoint, model = _make_experiment(str(tmp_path), conf_name, **encoder_extra)
    bidirectional = str(int(model.is_bidirectional_decoder()))
    out_dir = tmp_path / "onnx"
    export_onnx.main(["--config", config, "--checkpoint", checkpoint,
                      "--output_dir", str(out_dir), "--chunk_size", str(CHUNK),
                      "--num_decoding_left_chunks", str(LEFT_CHUNKS)])
    meta = {p.key: p.value for p in onnx.load(str(out_dir / "encoder_chunk.onnx")).metadata_props}
    assert {k: meta[k] for k in ("subsampling_rate", "right_context", "sos_symbol",
                                 "eos_symbol", "chunk_size", "left_chunks", "output_size",
                                 "required_cache_size", "is_bidirectional_decoder")} == {
        "subsampling_rate": SUBSAMPLING[conf_name], "right_context": RIGHT_CONTEXT[conf_name], "sos_symbol": str(VOCAB - 1),
        "eos_symbol": str(VOCAB - 1), "chunk_size": str(CHUNK),
        "left_chunks": str(LEFT_CHUNKS), "output_size": "64",
        "required_cache_size": str(CHUNK * LEFT_CHUNKS),
        "is_bidirectional_decoder": bidirectional}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    encoder, ctc, decoder = (ort.InferenceSession(str(out_dir / f"{name}.onnx"), opts)
                             for name in ("encoder_chunk", "ctc", "decoder"))

    with torch.no_grad():
        for xs in _test_set():  # the longest fills and then rolls the 8-frame cache
            ref, _ = model.encoder.forward_chunk_by_chunk(xs.unsqueeze(0), CHUNK, LEFT_CHUNKS)
            got = _onnx_stream(encoder, xs.unsqueeze(0).numpy(), meta)
            assert got.shape == tuple(ref.shape)
            np.testing.assert_allclose(got, ref.numpy(), rtol=0, atol=1e-4)

            ref_logp = model.ctc_activation(ref)
            (logp,) = ctc.run(None, {"hidden": got})
            np.testing.assert_allclose(logp, ref_logp.numpy(), rtol=0, atol=1e-4)
            assert _greedy(torch.from_numpy(logp[0])) == ctc_greedy_search(
                ref_logp, torch.tensor([ref.size(1)]))[0]

        # more hypotheses and longer ones than the export example had (dynamic axes)
        sos = VOCAB - 1
        hyps = torch.tensor([[sos, 3, 4, 5, 6, 7, 8], [sos, 9, 10, 0, 0, 0, 0],
                             [sos, 11, 0, 0, 0, 0, 0], [sos, 1, 2, 3, 4, 5, 0],
                             [sos, 0, 0, 0, 0, 0, 0]])
        hyps_lens = torch.tensor([7, 3, 2, 6, 1])
        score, r_score = decoder.run(None, {"hyps": hyps.numpy(), "hyps_lens": hyps_lens.numpy(),
                                            "encoder_out": ref.numpy()})
        ref_score, ref_r_score = model.forward_attention_decoder(hyps, hyps_lens, ref,
                                                                 model.reverse_weight)
        np.testing.assert_allclose(score, ref_score.numpy(), rtol=0, atol=1e-4)
        # (a placeholder scalar without a right-to-left decoder, in both)
        np.testing.assert_allclose(r_score, ref_r_score.numpy(), rtol=0, atol=1e-4)

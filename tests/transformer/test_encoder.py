"""Encoder: subsampling lengths, streaming equals full forward, CMVN, checkpoint names."""
import json

import numpy as np
import pytest
import torch

from wenet.transformer.cmvn import GlobalCMVN
from wenet.transformer.embedding import PositionalEncoding
from wenet.transformer.encoder import ConformerEncoder, TransformerEncoder
from wenet.transformer.subsampling import (Conv2dSubsampling4, Conv2dSubsampling6,
                                           Conv2dSubsampling8)
from wenet.dataprep.cmvn import load_cmvn
from wenet.models import init_model


@pytest.mark.parametrize("cls,rate,context,formula", [
    (Conv2dSubsampling4, 4, 6, lambda t: ((t - 1) // 2 - 1) // 2),
    (Conv2dSubsampling6, 6, 10, lambda t: ((t - 1) // 2 - 2) // 3),
    (Conv2dSubsampling8, 8, 14, lambda t: (((t - 1) // 2 - 1) // 2 - 1) // 2),
])
def test_subsampling_lengths_follow_formula(cls, rate, context, formula):
    sub = cls(20, 8, 0.0, PositionalEncoding(8, 0.0)).eval()
    assert sub.subsampling_rate == rate and sub.right_context == context
    for t in (context + 1, context + 2, 31, 64, 97):
        x = torch.randn(1, t, 20)
        y, pos, mask = sub(x, torch.ones(1, 1, t, dtype=torch.bool))
        assert y.shape == (1, formula(t), 8), t
        assert mask.shape == (1, 1, formula(t)) and pos.shape == (1, formula(t), 8)
    # one output frame needs exactly right_context + 1 input frames
    assert formula(context + 1) == 1 and formula(context) == 0
    # the mask of a padded utterance counts exactly its own output frames
    x = torch.randn(2, 97, 20)
    lens = torch.tensor([97, 50])
    mask = torch.arange(97).unsqueeze(0) < lens.unsqueeze(1)
    _, _, out_mask = sub(x, mask.unsqueeze(1))
    assert out_mask.squeeze(1).sum(1).tolist() == [formula(97), formula(50)]


def _conformer(pos_enc, norm):
    torch.manual_seed(0)
    enc = ConformerEncoder(20, output_size=32, attention_heads=4, linear_units=48,
                           num_blocks=2, pos_enc_layer_type=pos_enc, cnn_module_kernel=5,
                           causal=True, cnn_module_norm=norm, use_dynamic_chunk=True)
    # non-trivial batch-norm statistics so the eval-mode affine is exercised
    for m in enc.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return enc.eval()


@pytest.mark.parametrize("pos_enc,norm", [("rel_pos", "layer_norm"), ("abs_pos", "batch_norm")])
@pytest.mark.parametrize("left_chunks", [-1, 2])
def test_chunk_by_chunk_equals_full_forward_under_chunk_mask(pos_enc, norm, left_chunks):
    enc = _conformer(pos_enc, norm)
    x = torch.randn(1, 87, 20, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, full_mask = enc(x, torch.tensor([87]), 4, left_chunks)
        stream, stream_mask = enc.forward_chunk_by_chunk(x, 4, left_chunks)
    assert full.shape == stream.shape == (1, ((87 - 1) // 2 - 1) // 2, 32)
    assert torch.allclose(stream, full, atol=1e-5)
    assert torch.equal(full_mask, stream_mask)


def test_chunk_by_chunk_transformer_and_cache_sizes():
    torch.manual_seed(0)
    enc = TransformerEncoder(20, output_size=32, attention_heads=4, linear_units=48,
                             num_blocks=2, static_chunk_size=4).eval()
    x = torch.randn(1, 70, 20, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full, _ = enc(x, torch.tensor([70]), 0, 1)
        stream, _ = enc.forward_chunk_by_chunk(x, 4, 1)
        # a first chunk of 4 outputs, keeping 4 frames (1 left chunk) of cache
        ys, att_cache, cnn_cache = enc.forward_chunk(x[:, :19], 0, 4)
    assert torch.allclose(stream, full, atol=1e-5)
    assert ys.shape == (1, 4, 32)
    assert att_cache.shape == (2, 4, 4, 2 * 8)
    assert cnn_cache.numel() == 0


@pytest.mark.parametrize("pos_enc", ["rel_pos", "abs_pos"])
def test_chunk_step_with_fixed_size_cache_equals_growing_cache(pos_enc):
    """The step the ONNX export traces: a cache always R frames long, zeros in the
    slots not yet filled and att_mask False there, gives forward_chunk's output
    and, once the cache has filled, forward_chunk's cache."""
    enc = _conformer(pos_enc, "batch_norm")
    chunk, left = 4, 2
    required = chunk * left
    window = (chunk - 1) * 4 + 7
    x = torch.randn(1, 120, 20, generator=torch.Generator().manual_seed(3))
    att = torch.zeros(0, 0, 0, 0)
    cnn = torch.zeros(0, 0, 0, 0)
    fixed_att = torch.zeros(2, 4, required, 2 * 8)
    fixed_cnn = torch.zeros(2, 1, 32, 4)  # kernel 5, causal: 4 frames
    offset = 0
    with torch.no_grad():
        for start in range(0, 120 - 7 + 1, 4 * chunk):
            xs = x[:, start:start + window]
            ys, att, cnn = enc.forward_chunk(xs, offset, required, att, cnn)
            mask = torch.ones(1, 1, required + ys.size(1), dtype=torch.bool)
            mask[:, :, :max(required - offset, 0)] = False
            got, fixed_att, fixed_cnn = enc.chunk_step(
                xs, torch.tensor([offset]), required, fixed_att, fixed_cnn, mask)
            assert fixed_att.shape == (2, 4, required, 16)
            assert torch.allclose(got, ys, atol=1e-5), start
            assert torch.allclose(fixed_cnn, cnn, atol=1e-6)
            if offset + ys.size(1) >= required:
                assert torch.allclose(fixed_att, att, atol=1e-5)
            offset += ys.size(1)
    assert offset > required  # the cache filled and then rolled


def test_positional_rows_at_tensor_positions():
    pe = PositionalEncoding(8, 0.0)
    assert torch.equal(pe.rows_at(torch.arange(3, 8)), pe.position_encoding(3, 5))
    # an unfilled cache slot (negative position) reads row 0
    got = pe.rows_at(torch.tensor([-2, -1, 0, 9]))
    assert torch.equal(got[0], pe.pe[0, [0, 0, 0, 9]])


def test_forward_chunk_rejects_positions_past_the_table():
    enc = _conformer("rel_pos", "layer_norm")
    with pytest.raises(ValueError, match="positional table of 5000"):
        enc.forward_chunk(torch.randn(1, 19, 20), 4998, 8)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        enc.forward_chunk(torch.randn(1, 19, 20), -1, 8)


def test_full_context_differs_from_chunked_so_the_mask_matters():
    enc = _conformer("rel_pos", "layer_norm")
    x = torch.randn(1, 87, 20, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, _ = enc(x, torch.tensor([87]), -1, -1)
        chunked, _ = enc(x, torch.tensor([87]), 4, -1)
    # under the chunk mask a frame no longer sees later chunks, so outputs change
    assert not torch.allclose(full, chunked, atol=1e-3)


def test_global_cmvn_applies_mean_and_istd():
    mean = torch.tensor([1.0, -2.0, 0.5])
    istd = torch.tensor([2.0, 0.5, 4.0])
    x = torch.tensor([[[3.0, 0.0, 1.0], [1.0, -2.0, 0.25]]])
    expected = torch.tensor([[[4.0, 1.0, 2.0], [0.0, 0.0, -1.0]]])
    assert torch.allclose(GlobalCMVN(mean, istd)(x), expected)
    assert torch.allclose(GlobalCMVN(mean, istd, norm_var=False)(x), x - mean)


def _tiny_config(**over):
    cfg = {
        "input_dim": 20, "output_dim": 11, "cmvn_file": None,
        "encoder": "conformer",
        "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 24,
                         "num_blocks": 1, "cnn_module_kernel": 3},
        "decoder": "bitransformer",
        "decoder_conf": {"attention_heads": 2, "linear_units": 24, "num_blocks": 1,
                         "r_num_blocks": 1},
        "model_conf": {"ctc_weight": 0.3, "reverse_weight": 0.3},
    }
    cfg.update(over)
    return cfg


def test_init_model_loads_cmvn_into_encoder_buffers(tmp_path):
    feats = np.random.default_rng(0).normal(2.0, 3.0, size=(7, 20))
    path = tmp_path / "global_cmvn"
    path.write_text(json.dumps({"mean_stat": feats.sum(0).tolist(),
                                "var_stat": (feats ** 2).sum(0).tolist(),
                                "frame_num": 7}))
    model = init_model(_tiny_config(cmvn_file=str(path)))
    mean, istd = load_cmvn(str(path))
    sd = model.state_dict()
    assert torch.allclose(sd["encoder.global_cmvn.mean"], torch.tensor(feats.mean(0)).float())
    assert torch.allclose(sd["encoder.global_cmvn.istd"], torch.from_numpy(istd))
    assert torch.allclose(sd["encoder.global_cmvn.istd"],
                          torch.tensor(1.0 / feats.std(0)).float(), rtol=1e-5)


def test_state_dict_uses_wenet_names():
    keys = set(init_model(_tiny_config()).state_dict())
    for name in ("encoder.embed.conv.0.weight", "encoder.embed.out.0.weight",
                 "encoder.encoders.0.self_attn.linear_q.weight",
                 "encoder.encoders.0.self_attn.linear_pos.weight",
                 "encoder.encoders.0.self_attn.pos_bias_u",
                 "encoder.encoders.0.self_attn.pos_bias_v",
                 "encoder.encoders.0.feed_forward_macaron.w_1.weight",
                 "encoder.encoders.0.conv_module.depthwise_conv.weight",
                 "encoder.encoders.0.conv_module.norm.running_mean",
                 "encoder.encoders.0.norm_final.weight", "encoder.after_norm.weight",
                 "decoder.left_decoder.embed.0.weight",
                 "decoder.left_decoder.decoders.0.src_attn.linear_k.weight",
                 "decoder.right_decoder.output_layer.weight", "ctc.ctc_lo.weight"):
        assert name in keys, name
    # the positional table is rebuilt, not stored
    assert not any(k.endswith(".pe") for k in keys)


def test_init_model_rejects_unknown_option():
    cfg = _tiny_config()
    cfg["encoder_conf"] = dict(cfg["encoder_conf"], num_block=3)
    with pytest.raises(ValueError, match="num_block"):
        init_model(cfg)


def test_too_short_input_is_a_clear_error():
    enc = TransformerEncoder(20, output_size=16, attention_heads=2, linear_units=16,
                             num_blocks=1)
    with pytest.raises(ValueError, match="6 frames is shorter than the 7"):
        enc(torch.randn(1, 6, 20), torch.tensor([6]))


def test_decoding_refuses_the_training_chunk_draw():
    """ASRModel.encode, the decoding entry, takes -1 (full context) or a positive chunk
    size; 0 (training's random draw, which made decoding random) and -2 are errors."""
    conf = _tiny_config()
    conf["encoder_conf"] = dict(conf["encoder_conf"], use_dynamic_chunk=True)
    torch.manual_seed(0)
    model = init_model(conf).eval()
    x = torch.randn(2, 60, 20, generator=torch.Generator().manual_seed(1))
    lens = torch.tensor([60, 45])
    with torch.no_grad():
        for bad in (0, -2):
            with pytest.raises(ValueError, match=f"decoding_chunk_size must be -1 .* got {bad}"):
                model.encode(x, lens, bad)
        for size in (-1, 4):
            first, _ = model.encode(x, lens, size)
            torch.manual_seed(123)  # no random draw: the output depends on nothing else
            assert torch.equal(model.encode(x, lens, size)[0], first)
        # training keeps its draw: the loss path (forward with chunk size 0) still varies
        outs = []
        for seed in range(4):
            torch.manual_seed(seed)
            outs.append(model.encoder(x, lens)[0])
        assert any(not torch.equal(outs[0], o) for o in outs[1:])


FRONT_END_PARAMS = {  # input_dim 20, output_size 16: WeNet's names and shapes
    "linear": {"out.0.weight": (16, 20), "out.0.bias": (16,), "out.1.weight": (16,),
               "out.1.bias": (16,)},
    "conv2d": {"conv.0.weight": (16, 1, 3, 3), "conv.2.weight": (16, 16, 3, 3),
               "out.0.weight": (16, 16 * 4)},
    "conv2d6": {"conv.0.weight": (16, 1, 3, 3), "conv.2.weight": (16, 16, 5, 5),
                "linear.weight": (16, 16 * 2)},
    "conv2d8": {"conv.0.weight": (16, 1, 3, 3), "conv.2.weight": (16, 16, 3, 3),
                "conv.4.weight": (16, 16, 3, 3), "linear.weight": (16, 16 * 1)},
}


@pytest.mark.parametrize("input_layer", sorted(FRONT_END_PARAMS))
@pytest.mark.parametrize("encoder", ["transformer", "conformer"])
def test_checkpoint_names_of_front_ends_and_layers(input_layer, encoder):
    """The names and shapes a WeNet checkpoint has, so checkpoints load strictly."""
    conf = _tiny_config(encoder=encoder)
    conf["encoder_conf"] = dict(conf["encoder_conf"], input_layer=input_layer)
    if encoder == "transformer":
        del conf["encoder_conf"]["cnn_module_kernel"]
    shapes = {k: tuple(v.shape) for k, v in init_model(conf).state_dict().items()}
    embed = {k[len("encoder.embed."):]: v for k, v in shapes.items()
             if k.startswith("encoder.embed.") and k.endswith(("weight", "bias"))}
    expected = FRONT_END_PARAMS[input_layer]
    assert {k: embed[k] for k in expected} == expected
    assert len(embed) == 2 * sum(k.endswith("weight") for k in expected)  # nothing else
    layer = {k[len("encoder.encoders.0."):] for k in shapes if k.startswith("encoder.encoders.0.")}
    norms = {k.split(".")[0] for k in layer if k.startswith("norm")}
    assert norms == ({"norm1", "norm2"} if encoder == "transformer" else
                     {"norm_ff", "norm_mha", "norm_ff_macaron", "norm_conv", "norm_final"})


def test_encoder_options_are_those_of_its_class():
    """Each encoder accepts the shared options and its own, and nothing of the other."""
    conf = _tiny_config(encoder="transformer")
    with pytest.raises(ValueError, match="cnn_module_kernel"):
        init_model(conf)
    del conf["encoder_conf"]["cnn_module_kernel"]
    conf["encoder_conf"].update(num_blocks=2, activation_type="swish", normalize_before=False)
    model = init_model(conf)
    assert len(model.encoder.encoders) == 2 and not model.encoder.normalize_before

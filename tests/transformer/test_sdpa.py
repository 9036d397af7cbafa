"""SDPA attention (wenet/transformer/attention.py) against the explicit softmax path
WeNet 2.x computes, forward and backward, float32, within 1e-5 relative.

The explicit path is kept here as the reference, not in the library
(``explicit_attention``; tests/train/test_step_equivalence.py puts it into a whole model).
"""
import math

import pytest
import torch

from tests.numerics import rel_err
from wenet.transformer.attention import MultiHeadedAttention, RelPositionMultiHeadedAttention

RTOL = 1e-5


def explicit_attention(att, query, key, value, mask=torch.ones((0, 0, 0), dtype=torch.bool),
                       pos_emb=torch.empty(0), cache=torch.zeros((0, 0, 0, 0))):
    """Drop-in for the ``forward`` of both attention classes (no cache), the explicit way:
    scores (q + u)·k / sqrt(d_k) + (q + v)·p / sqrt(d_k) (plain attention: q·k / sqrt(d_k)),
    masked keys at -inf, softmax, masked weights 0 (a row with no allowed key gives 0),
    weights times values, linear_out."""
    b, h, d_k = query.size(0), att.h, att.d_k
    q = att.linear_q(query).view(b, -1, h, d_k).transpose(1, 2)  # (B, H, T1, d_k)
    k = att.linear_k(key).view(b, -1, h, d_k).transpose(1, 2)
    v = att.linear_v(value).view(b, -1, h, d_k).transpose(1, 2)
    if isinstance(att, RelPositionMultiHeadedAttention):
        p = att.linear_pos(pos_emb).view(pos_emb.size(0), -1, h, d_k).transpose(1, 2)
        matrix_ac = torch.matmul(q + att.pos_bias_u.unsqueeze(1), k.transpose(-2, -1))
        matrix_bd = torch.matmul(q + att.pos_bias_v.unsqueeze(1), p.transpose(-2, -1))
        scores = (matrix_ac + matrix_bd) / math.sqrt(d_k)
    else:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    if mask.size(2) > 0:
        masked = ~mask.unsqueeze(1)[:, :, :, :k.size(2)]  # (B, 1, T1|1, T2)
        attn = torch.softmax(scores.masked_fill(masked, -float("inf")), dim=-1)
        attn = attn.masked_fill(masked, 0.0)
    else:
        attn = torch.softmax(scores, dim=-1)
    x = torch.matmul(attn, v).transpose(1, 2).reshape(b, -1, h * d_k)
    return att.linear_out(x), torch.empty(0)


# Biases whose gradient is exactly zero: the key projection's shifts all scores of a
# query by one constant, which softmax ignores; the conv module's depthwise bias is
# removed again by its BatchNorm (training mode).
ZERO_GRAD_BIASES = ("linear_k.bias", "depthwise_conv.bias")


def assert_grads_equal(grads, ref_grads) -> None:
    """Each gradient within RTOL of the reference's; for ZERO_GRAD_BIASES both paths must
    give rounding noise only, small against the gradient of the matching weight."""
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        if name.endswith(ZERO_GRAD_BIASES):
            scale = ref_grads[name[:-len("bias")] + "weight"].norm()
            assert grads[name].norm() < RTOL * scale and ref_grads[name].norm() < RTOL * scale, name
        else:
            assert rel_err(grads[name], ref_grads[name]) < RTOL, name


def _masks(b: int, t: int, lengths, chunk: int = 0) -> torch.Tensor:
    pad = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    if chunk <= 0:
        return pad.unsqueeze(1)  # (B, 1, T)
    pos = torch.arange(t)
    chunk_mask = (pos[None, :] // chunk) <= (pos[:, None] // chunk)  # (T, T)
    return pad.unsqueeze(1) & chunk_mask.unsqueeze(0)  # (B, T, T): padded rows see nothing


def _forward_and_grads(att, inputs, reference: bool = False):
    att.zero_grad()
    leaves = [x.detach().clone().requires_grad_() for x in inputs["tensors"]]
    forward = (lambda *a: explicit_attention(att, *a)) if reference else att
    out, _ = forward(*leaves[:3], inputs["mask"], *leaves[3:])
    out.backward(inputs["grad_out"])
    grads = {n: p.grad.clone() for n, p in att.named_parameters()}
    grads.update({f"input{i}": x.grad.clone() for i, x in enumerate(leaves)})
    return out.detach(), grads


@pytest.mark.parametrize("rel_pos", [False, True])
@pytest.mark.parametrize("mask_kind", ["padding", "chunk", "none"])
def test_sdpa_equals_explicit_softmax_forward_and_backward(rel_pos, mask_kind, one_thread):
    torch.manual_seed(0)
    b, t, d, heads = 3, 23, 32, 4
    cls = RelPositionMultiHeadedAttention if rel_pos else MultiHeadedAttention
    att = cls(heads, d, 0.0).train()
    x = torch.randn(b, t, d)
    tensors = [x, x, x] + ([torch.randn(1, t, d)] if rel_pos else [])
    mask = {"padding": _masks(b, t, [t, 17, 9]), "chunk": _masks(b, t, [t, 17, 9], chunk=4),
            "none": torch.ones((0, 0, 0), dtype=torch.bool)}[mask_kind]
    inputs = {"tensors": tensors, "mask": mask, "grad_out": torch.randn(b, t, d)}
    out, grads = _forward_and_grads(att, inputs)
    ref_out, ref_grads = _forward_and_grads(att, inputs, reference=True)
    assert rel_err(out, ref_out) < RTOL
    assert_grads_equal(grads, ref_grads)


def test_sdpa_cross_attention_with_decoder_masks(one_thread):
    """The decoder's two uses: causal self-attention over (B, L, L) and source attention
    over encoder frames with a (B, 1, T) padding mask."""
    torch.manual_seed(1)
    b, l, t, d = 3, 7, 19, 16
    att = MultiHeadedAttention(4, d, 0.0)
    tgt, mem = torch.randn(b, l, d), torch.randn(b, t, d)
    causal = torch.tril(torch.ones(l, l, dtype=torch.bool)).unsqueeze(0) \
        & _masks(b, l, [l, 5, 2])  # padded target positions see no key beyond the length
    for tensors, mask in (([tgt, tgt, tgt], causal), ([tgt, mem, mem], _masks(b, t, [t, 11, 4]))):
        inputs = {"tensors": tensors, "mask": mask, "grad_out": torch.randn(b, l, d)}
        out, grads = _forward_and_grads(att, inputs)
        ref_out, ref_grads = _forward_and_grads(att, inputs, reference=True)
        assert rel_err(out, ref_out) < RTOL
        assert_grads_equal(grads, ref_grads)

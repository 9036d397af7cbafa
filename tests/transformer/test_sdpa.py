"""SDPA attention (wenet/transformer/attention.py) against the explicit softmax path
WeNet 2.x computes, forward and backward, float32, within 1e-5 relative.

The explicit path is kept here as the reference, not in the library: scores
q·k^T / sqrt(d_k) plus the relative-position term, masked keys at -inf, softmax,
rows without any allowed key set to 0, weights times values, then linear_out.
"""
import math

import pytest
import torch

from wenet.transformer.attention import MultiHeadedAttention, RelPositionMultiHeadedAttention

RTOL = 1e-5


def explicit_attend(att, q, k, v, mask, bias):
    """Drop-in for ``MultiHeadedAttention._attend`` computed the explicit way."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(att.d_k)
    if bias.numel() > 0:
        scores = scores + bias
    if mask.size(2) > 0:
        masked = ~mask.unsqueeze(1)[:, :, :, :k.size(2)]  # (B, 1, T1|1, T2)
        attn = torch.softmax(scores.masked_fill(masked, -float("inf")), dim=-1)
        attn = attn.masked_fill(masked, 0.0)  # rows with no allowed key: all 0
    else:
        attn = torch.softmax(scores, dim=-1)
    x = torch.matmul(attn, v)
    return att.linear_out(x.transpose(1, 2).reshape(q.size(0), -1, att.h * att.d_k))


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def assert_grads_equal(grads, ref_grads) -> None:
    """Each gradient within RTOL of the reference's. The key projection's bias gets an
    exactly zero gradient (it shifts a query's scores by one constant, which softmax
    ignores): both paths must give rounding noise only, small against the key weights'."""
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        if name.endswith("linear_k.bias"):
            scale = ref_grads[name.replace("bias", "weight")].norm()
            assert grads[name].norm() < RTOL * scale and ref_grads[name].norm() < RTOL * scale
        else:
            assert rel_err(grads[name], ref_grads[name]) < RTOL, name


def _masks(b: int, t: int, lengths, chunk: int = 0) -> torch.Tensor:
    pad = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    if chunk <= 0:
        return pad.unsqueeze(1)  # (B, 1, T)
    pos = torch.arange(t)
    chunk_mask = (pos[None, :] // chunk) <= (pos[:, None] // chunk)  # (T, T)
    return pad.unsqueeze(1) & chunk_mask.unsqueeze(0)  # (B, T, T): padded rows see nothing


def _forward_and_grads(att, inputs, attend=None):
    att.zero_grad()
    leaves = [x.detach().clone().requires_grad_() for x in inputs["tensors"]]
    if attend is not None:
        att._attend = attend.__get__(att)
    try:
        out, _ = att(*leaves[:3], inputs["mask"], *leaves[3:])
    finally:
        att.__dict__.pop("_attend", None)
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
    ref_out, ref_grads = _forward_and_grads(att, inputs, explicit_attend)
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
        ref_out, ref_grads = _forward_and_grads(att, inputs, explicit_attend)
        assert rel_err(out, ref_out) < RTOL
        assert_grads_equal(grads, ref_grads)

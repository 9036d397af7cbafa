"""Attention layers against a direct loop computation of WeNet's formulas."""
import math

import torch

from wenet.transformer.attention import MultiHeadedAttention, RelPositionMultiHeadedAttention


def _heads(linear, x, h, d_k):
    b, t, _ = x.shape
    return linear(x).view(b, t, h, d_k)  # (B, T, H, d_k)


def _reference(att, query, key, value, mask, pos_emb=None):
    """Loop over batch, head, query and key; masked softmax zeroing masked keys
    (a row with no allowed key gives 0), then linear_out."""
    h, d_k = att.h, att.d_k
    q = _heads(att.linear_q, query, h, d_k)
    k = _heads(att.linear_k, key, h, d_k)
    v = _heads(att.linear_v, value, h, d_k)
    if pos_emb is not None:
        p = _heads(att.linear_pos, pos_emb, h, d_k)[0]  # (T2, H, d_k)
    b_sz, t1, t2 = q.size(0), q.size(1), k.size(1)
    ctx = torch.zeros(b_sz, t1, h, d_k, dtype=torch.float64)
    for b in range(b_sz):
        for hh in range(h):
            for i in range(t1):
                m = mask[b, 0 if mask.size(1) == 1 else i]
                scores = []
                for j in range(t2):
                    if pos_emb is None:
                        s = torch.dot(q[b, i, hh], k[b, j, hh])
                    else:
                        s = (torch.dot(q[b, i, hh] + att.pos_bias_u[hh], k[b, j, hh])
                             + torch.dot(q[b, i, hh] + att.pos_bias_v[hh], p[j, hh]))
                    scores.append(float(s) / math.sqrt(d_k))
                allowed = [j for j in range(t2) if bool(m[j])]
                if not allowed:
                    continue
                mx = max(scores[j] for j in allowed)
                w = {j: math.exp(scores[j] - mx) for j in allowed}
                z = sum(w.values())
                for j in allowed:
                    ctx[b, i, hh] += (w[j] / z) * v[b, j, hh].double()
    return att.linear_out(ctx.reshape(b_sz, t1, h * d_k).float())


def _inputs(seed=0, b=2, t=5, d=8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, d, generator=g)
    pos = torch.randn(1, t, d, generator=g)
    return x, pos


def test_rel_position_attention_matches_loop_with_padding_and_chunk_mask():
    torch.manual_seed(0)
    att = RelPositionMultiHeadedAttention(2, 8, 0.0).eval()
    x, pos = _inputs()
    # utterance 0: full length 5 with a causal mask; utterance 1: length 3 and
    # its padded rows 3, 4 see keys 3, 4 only (fully masked rows)
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    mask = torch.stack([causal, causal & torch.tensor([True, True, True, False, False])])
    mask[1, 3:, :] = False
    with torch.no_grad():
        out, cache = att(x, x, x, mask, pos)
        ref = _reference(att, x, x, x, mask, pos)
    assert torch.allclose(out, ref, atol=1e-5)
    # padded rows get zero context: out = bias of linear_out
    assert torch.allclose(out[1, 3], att.linear_out.bias, atol=1e-6)
    assert cache.shape == (2, 2, 5, 8)


def test_rel_position_attention_broadcast_pad_mask():
    torch.manual_seed(1)
    att = RelPositionMultiHeadedAttention(4, 16, 0.0).eval()
    x, pos = _inputs(seed=3, b=2, t=6, d=16)
    mask = torch.tensor([[[True] * 6], [[True] * 4 + [False] * 2]])  # (B, 1, T)
    with torch.no_grad():
        out, _ = att(x, x, x, mask, pos)
        ref = _reference(att, x, x, x, mask, pos)
    assert torch.allclose(out, ref, atol=1e-5)


def test_plain_attention_matches_loop_and_cross_attention_lengths():
    torch.manual_seed(2)
    att = MultiHeadedAttention(2, 8, 0.0).eval()
    g = torch.Generator().manual_seed(5)
    query = torch.randn(2, 3, 8, generator=g)
    memory = torch.randn(2, 7, 8, generator=g)
    mask = torch.tensor([[[True] * 7], [[True] * 5 + [False] * 2]])
    with torch.no_grad():
        out, _ = att(query, memory, memory, mask)
        ref = _reference(att, query, memory, memory, mask)
    assert torch.allclose(out, ref, atol=1e-5)


def test_attention_cache_equals_attending_to_the_whole_sequence():
    """Keys/values of earlier frames given as cache give the same output for
    the new frames as running over all frames (rel-pos over absolute positions)."""
    torch.manual_seed(3)
    att = RelPositionMultiHeadedAttention(2, 8, 0.0).eval()
    x, pos = _inputs(seed=7, b=1, t=6)
    full_mask = torch.ones(1, 6, 6, dtype=torch.bool)
    with torch.no_grad():
        full, full_cache = att(x, x, x, full_mask, pos)
        _, cache = att(x[:, :4], x[:, :4], x[:, :4], torch.ones(1, 4, 4, dtype=torch.bool),
                       pos[:, :4])
        tail, new_cache = att(x[:, 4:], x[:, 4:], x[:, 4:], torch.ones((0, 0, 0), dtype=torch.bool),
                              pos, cache)
    assert torch.allclose(tail, full[:, 4:], atol=1e-6)
    assert torch.allclose(new_cache, full_cache, atol=1e-6)


def test_attention_gradients_finite_with_fully_masked_rows():
    att = RelPositionMultiHeadedAttention(2, 8, 0.0)
    x, pos = _inputs(seed=9)
    x.requires_grad_(True)
    mask = torch.ones(2, 5, 5, dtype=torch.bool)
    mask[1, 2:, :] = False
    out, _ = att(x, x, x, mask, pos)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.isfinite(att.pos_bias_u.grad).all()

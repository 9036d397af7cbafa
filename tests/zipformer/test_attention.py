"""Zipformer attention against brute force: relative positions, weights with separate
query/position heads, masks, the modules that share the weights, and caches."""
import math

import torch

from wenet.zipformer.attention import (CompactRelPositionalEncoding, NonlinAttention,
                                       RelPositionMultiheadAttentionWeights, SelfAttention,
                                       relative_index, relative_scores,
                                       relative_scores_reversed)

D = torch.zeros((), dtype=torch.float64)  # the dtype the encodings are made in


def _compact_pe(r: float, dim: int) -> list:
    c = math.sqrt(dim)
    comp = c * math.copysign(1.0, r) * math.log(1 + abs(r) / c) if r != 0 else 0.0
    angle = math.atan(comp / (dim / (2 * math.pi)))
    row = []
    for f in range(1, dim // 2 + 1):
        row += [math.cos(angle * f), math.sin(angle * f)]
    row[-1] = 1.0
    return row


def test_positional_rows_follow_the_formula_and_the_relative_offset_only():
    pe = CompactRelPositionalEncoding(8).double()
    rows = pe(3, 5, D)  # relative positions -2 .. 4
    assert rows.shape == (7, 8)
    for i, r in enumerate(range(-2, 5)):
        assert torch.allclose(rows[i], torch.tensor(_compact_pe(r, 8), dtype=torch.float64))
    # the row of an offset does not depend on the lengths it was asked with
    longer = pe(6, 10, D)  # -5 .. 9
    assert torch.allclose(longer[5 - 2:5 + 5], rows)


def test_attention_weights_equal_brute_force_with_mask_and_cache():
    torch.manual_seed(0)
    dim, pos_dim, heads, dq, dp = 12, 8, 2, 4, 3
    attn = RelPositionMultiheadAttentionWeights(dim, pos_dim, heads, dq, dp).double().eval()
    b, tq, n = 2, 4, 3
    tk = n + tq
    x = torch.randn(b, tq, dim, dtype=torch.float64)
    cache = torch.randn(b, n, heads * dq, dtype=torch.float64)
    mask = torch.rand(b, tq, tk) > 0.3
    mask[:, :, -1] = True
    pe = CompactRelPositionalEncoding(pos_dim).double()
    weights, keys = attn(x, pe(tq, tk, D), mask, cache)
    proj = attn.in_proj(x)
    q, k_new, p = proj[..., :8], proj[..., 8:16], proj[..., 16:]
    assert torch.equal(keys, torch.cat([cache, k_new], dim=1))
    for bb in range(b):
        for h in range(heads):
            for i in range(tq):
                scores = []
                for j in range(tk):
                    rel = (n + i) - j
                    pos = attn.linear_pos(pe.encode(torch.tensor([float(rel)],
                                                                 dtype=torch.float64)))[0]
                    s = (q[bb, i, h * dq:(h + 1) * dq] @ keys[bb, j, h * dq:(h + 1) * dq]
                         / math.sqrt(dq)
                         + p[bb, i, h * dp:(h + 1) * dp] @ pos[h * dp:(h + 1) * dp]
                         / math.sqrt(dp))
                    scores.append(s if mask[bb, i, j] else torch.tensor(-math.inf))
                want = torch.softmax(torch.stack(scores), dim=0)
                assert torch.allclose(weights[bb, h, i], want, atol=1e-12)


def test_self_and_nonlin_attention_use_the_given_weights():
    torch.manual_seed(0)
    b, tq, n, dim = 1, 3, 2, 6
    weights = torch.softmax(torch.randn(b, 2, tq, n + tq, dtype=torch.float64), dim=-1)
    x = torch.randn(b, tq, dim, dtype=torch.float64)
    sa = SelfAttention(dim, 2, 5).double()
    cache = torch.randn(b, n, 10, dtype=torch.float64)
    out, values = sa(x, weights, cache)
    v = torch.cat([cache, sa.in_proj(x)], dim=1)
    heads = [weights[0, h] @ v[0, :, h * 5:(h + 1) * 5] for h in range(2)]
    assert torch.allclose(out[0], sa.out_proj(torch.cat(heads, dim=1)))
    assert torch.equal(values, v)
    na = NonlinAttention(dim, 4).double()
    nl_cache = torch.randn(b, n, 4, dtype=torch.float64)
    out, values = na(x, weights[:, 0], nl_cache)
    s, vv, y = na.in_proj(x)[0].split(4, dim=-1)
    vals = torch.cat([nl_cache[0], torch.tanh(s) * vv], dim=0)
    assert torch.allclose(out[0], na.out_proj((weights[0, 0] @ vals) * y))
    assert torch.allclose(values[0], vals)


def test_strided_relative_scores_equal_the_gather_in_value_and_gradient():
    """Training reads the position scores through a strided view of scores against the
    rows in reverse order; the exports gather them by index. Same values, same gradients,
    with and without cached keys (Tk > Tq)."""
    torch.manual_seed(0)
    for tq, tk in ((1, 1), (5, 5), (4, 9), (7, 10)):
        width = tq + tk - 1
        scores = torch.randn(2, 3, tq, width, dtype=torch.float64, requires_grad=True)
        reversed_scores = scores.detach().flip(-1).requires_grad_(True)
        by_gather = relative_scores(scores, tk)
        by_view = relative_scores_reversed(reversed_scores, tk)
        index = relative_index(tq, tk, scores.device)
        for i in range(tq):  # brute force: query i, key k reads row i - k + tk - 1
            for k in range(tk):
                assert torch.equal(by_gather[:, :, i, k], scores[:, :, i, int(index[i, k])])
        assert torch.equal(by_view, by_gather)
        upstream = torch.randn(by_gather.shape, dtype=torch.float64)
        by_gather.backward(upstream)
        by_view.backward(upstream)
        assert torch.equal(reversed_scores.grad.flip(-1), scores.grad)

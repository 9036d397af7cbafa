"""Our RNN-T loss against an exhaustive sum over alignments and against torchaudio."""
import pytest
import torch
import torchaudio.functional as taf

from tests.numerics import assert_near_float64, rounding_bound
from wenet.transducer.rnnt_loss import rnnt_loss

BLANK = 0


def _alignments(T, U, big):
    """Every path from (0, 0) to (T, U) as a list of (t, u, kind); kind: 'label', 'blank',
    or the index of a big blank in ``big`` (its duration big[i]).  Big blanks must land
    on or before T, and a path must end exactly at (T, U)."""
    def walk(t, u):
        if (t, u) == (T, U):
            yield []
            return
        if t < T and u < U:
            for rest in walk(t, u + 1):
                yield [(t, u, "label")] + rest
        if t < T:
            for rest in walk(t + 1, u):
                yield [(t, u, "blank")] + rest
        for i, d in enumerate(big):
            if t + d <= T:
                for rest in walk(t + d, u):
                    yield [(t, u, i)] + rest
    return list(walk(0, 0))


def _brute_force_logp(lp, y, big_ids=(), durations=(), label_scale=None):
    """log P(y|x) of one utterance: log-sum over all alignments of the summed log-probs.

    ``label_scale`` (1 + lambda) makes the gradient wrt every label log-prob
    (1 + lambda) times larger without changing the value: FastEmit by definition.
    """
    T, U = lp.size(0), len(y)
    scores = []
    for path in _alignments(T, U, durations):
        s = lp.new_zeros(())
        for t, u, kind in path:
            if kind == "label":
                term = lp[t, u, y[u]]
                if label_scale is not None:
                    term = term + (label_scale - 1.0) * (term - term.detach())
            elif kind == "blank":
                term = lp[t, u, BLANK]
            else:
                term = lp[t, u, big_ids[kind]]
            s = s + term
        scores.append(s)
    return torch.logsumexp(torch.stack(scores), dim=0)


def _random_batch(B, T, U, V, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, U + 1, V, generator=g, dtype=torch.float64).to(dtype)
    targets = torch.randint(1, V, (B, U), generator=g, dtype=torch.int32)
    t_lens = torch.randint(1, T + 1, (B,), generator=g, dtype=torch.int32)
    u_lens = torch.randint(0, U + 1, (B,), generator=g, dtype=torch.int32)
    t_lens[0], u_lens[0] = T, U  # one utterance fills the padded shape
    for b in range(B):
        targets[b, u_lens[b]:] = 0  # torchaudio wants valid ids in the padding
    return logits, targets, t_lens, u_lens


def _grad(fn, logits, *args, **kw):
    x = logits.detach().clone().requires_grad_()
    loss = fn(x, *args, **kw)
    (g,) = torch.autograd.grad(loss.sum(), x)
    return loss.detach(), g


@pytest.mark.parametrize("T,U,V", [(1, 0, 2), (1, 2, 3), (3, 1, 2), (4, 3, 3), (2, 3, 3),
                                   (4, 0, 3), (3, 2, 3)])
def test_equals_exhaustive_sum(T, U, V):
    logits, targets, _, _ = _random_batch(1, T, U, V, seed=T * 10 + U, dtype=torch.float64)
    lp = torch.log_softmax(logits[0], dim=-1)
    want = -_brute_force_logp(lp, targets[0].tolist())
    got = rnnt_loss(logits, targets, torch.tensor([T]), torch.tensor([U]), reduction="none")
    assert got.item() == pytest.approx(want.item(), abs=1e-10)
    got32 = rnnt_loss(logits.float(), targets, torch.tensor([T]), torch.tensor([U]))
    assert got32.item() == pytest.approx(want.item(), abs=1e-5)


def _textbook_logp(lp, y):
    """log P(y|x) by the plain recursion of Graves (2012), one node at a time (float64)."""
    T, U = lp.size(0), len(y)
    alpha = {(0, 0): lp.new_zeros(())}
    for t in range(T):
        for u in range(U + 1):
            if (t, u) == (0, 0):
                continue
            terms = []
            if t > 0:
                terms.append(alpha[t - 1, u] + lp[t - 1, u, BLANK])
            if u > 0:
                terms.append(alpha[t, u - 1] + lp[t, u - 1, y[u - 1]])
            alpha[t, u] = torch.logsumexp(torch.stack(terms), dim=0)
    return alpha[T - 1, U] + lp[T - 1, U, BLANK]


# torchaudio computes in float32 only. It and ours in float32 must each lie within
# float32's bound (tests/numerics.py) of ours in float64: a log-softmax over V, then
# T + U lattice steps; neither is held to the other's rounding, which moves with the CPU.
@pytest.mark.parametrize("B,T,U,V,seed", [(1, 5, 3, 4, 0), (3, 7, 4, 6, 1), (4, 12, 6, 9, 2),
                                          (2, 10, 1, 30, 3), (5, 9, 8, 5, 4), (3, 6, 3, 50, 5)])
def test_equals_torchaudio_loss_and_gradients(B, T, U, V, seed):
    logits, targets, t_lens, u_lens = _random_batch(B, T, U, V, seed)
    bound = rounding_bound(torch.float32, V, depth=1 + T + U)
    for reduction in ("none", "mean", "sum"):
        want, want_g = _grad(rnnt_loss, logits.double(), targets, t_lens, u_lens, blank=BLANK,
                             reduction=reduction)
        for impl in (taf.rnnt_loss, rnnt_loss):
            got, got_g = _grad(impl, logits, targets, t_lens, u_lens, blank=BLANK,
                               reduction=reduction)
            assert_near_float64(got, want, bound, f"{impl.__module__} {reduction} loss")
            assert_near_float64(got_g, want_g, bound, f"{impl.__module__} {reduction} gradient")
    # padding gets no gradient
    for b in range(B):
        assert got_g[b, t_lens[b]:].abs().max().item() == 0 if t_lens[b] < T else True
        assert got_g[b, :, u_lens[b] + 1:].abs().max().item() == 0 if u_lens[b] < U else True


def test_long_utterances_equal_float64_textbook_recursion():
    """Longer lattices (|log P| ~ 100-200), where float32 torchaudio itself is off by ~3e-5
    from the exact value: ours in float32 stays within 1e-5 of a float64 reference."""
    logits, targets, t_lens, u_lens = _random_batch(3, 30, 10, 50, seed=5)
    got, got_g = _grad(rnnt_loss, logits, targets, t_lens, u_lens, reduction="none")
    x = logits.double().requires_grad_()
    want = torch.stack([-_textbook_logp(torch.log_softmax(x[b, :t_lens[b]], -1),
                                        targets[b, :u_lens[b]].tolist()) for b in range(3)])
    (want_g,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(got_g.double(), want_g, rtol=0, atol=1e-5)


def test_unfused_and_clamped_equal_torchaudio():
    logits, targets, t_lens, u_lens = _random_batch(3, 8, 4, 6, seed=7)
    lp = torch.log_softmax(logits, dim=-1)
    for clamp in (-1.0, 0.05):
        kw = dict(blank=BLANK, clamp=clamp, fused_log_softmax=False)
        want, want_g = _grad(taf.rnnt_loss, lp, targets, t_lens, u_lens, **kw)
        got, got_g = _grad(rnnt_loss, lp, targets, t_lens, u_lens, **kw)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_g, want_g, rtol=0, atol=1e-5)


def test_clamp_bounds_gradient():
    logits, targets, t_lens, u_lens = _random_batch(3, 10, 5, 7, seed=8)
    logits = logits * 4  # peaky: large unclamped gradients
    kw = dict(reduction="sum")  # clamping acts per utterance, before the reduction
    _, free = _grad(rnnt_loss, logits, targets, t_lens, u_lens, **kw)
    assert free.abs().max() > 0.3
    _, clamped = _grad(rnnt_loss, logits, targets, t_lens, u_lens, clamp=0.1, **kw)
    _, ta = _grad(taf.rnnt_loss, logits, targets, t_lens, u_lens, blank=BLANK, clamp=0.1, **kw)
    assert clamped.abs().max() <= 0.1 + 1e-7
    torch.testing.assert_close(clamped, free.clamp(-0.1, 0.1), rtol=0, atol=1e-6)
    torch.testing.assert_close(clamped, ta, rtol=0, atol=1e-5)


@pytest.mark.parametrize("lam", [0.0, 0.01, 0.5])
def test_fastemit_matches_definition(lam):
    """Loss unchanged; gradient = label-emission log-prob gradients scaled by (1 + lambda),
    chained through the log-softmax (checked against the exhaustive sum)."""
    T, U, V = 4, 2, 3
    logits, targets, _, _ = _random_batch(1, T, U, V, seed=11, dtype=torch.float64)
    x = logits.detach().clone().requires_grad_()
    want = -_brute_force_logp(torch.log_softmax(x[0], -1), targets[0].tolist(),
                              label_scale=1.0 + lam)
    (want_g,) = torch.autograd.grad(want, x)
    got, got_g = _grad(rnnt_loss, logits, targets, torch.tensor([T]), torch.tensor([U]),
                       fastemit_lambda=lam)
    assert got.item() == pytest.approx(want.item(), abs=1e-10)
    torch.testing.assert_close(got_g, want_g, rtol=0, atol=1e-10)
    if lam > 0:
        _, plain_g = _grad(rnnt_loss, logits, targets, torch.tensor([T]), torch.tensor([U]))
        assert (got_g - plain_g).abs().max() > 1e-4


def test_fastemit_unfused_scales_torchaudio_label_gradients():
    """With log-probs as input (no softmax chain) FastEmit is exactly torchaudio's gradient with
    the label entries times (1 + lambda) and everything else unchanged.  (torchaudio 2.11's
    Python API has no fastemit_lambda, so this is where the two are comparable.)"""
    lam = 0.3
    logits, targets, t_lens, u_lens = _random_batch(3, 7, 4, 6, seed=12)
    lp = torch.log_softmax(logits, dim=-1)
    _, ta_g = _grad(taf.rnnt_loss, lp, targets, t_lens, u_lens, blank=BLANK,
                    fused_log_softmax=False)
    _, got_g = _grad(rnnt_loss, lp, targets, t_lens, u_lens, fused_log_softmax=False,
                     fastemit_lambda=lam)
    is_label = torch.zeros_like(lp, dtype=torch.bool)
    for b in range(3):
        for u in range(int(u_lens[b])):
            is_label[b, :, u, targets[b, u]] = True
    want = torch.where(is_label, ta_g * (1 + lam), ta_g)
    torch.testing.assert_close(got_g, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("T,U,durations", [(4, 2, (2,)), (5, 1, (2, 3)), (4, 3, (2, 4)),
                                           (3, 0, (2, 3)), (6, 2, (2, 4))])
def test_multiblank_equals_exhaustive_sum(T, U, durations):
    V = 3 + len(durations)  # blank, two labels, then the big blanks
    big_ids = tuple(range(3, V))
    logits, _, _, _ = _random_batch(1, T, U, V, seed=T + 7 * U, dtype=torch.float64)
    targets = torch.randint(1, 3, (1, U), generator=torch.Generator().manual_seed(U))
    x = logits.detach().clone().requires_grad_()
    want = -_brute_force_logp(torch.log_softmax(x[0], -1), targets[0].tolist(), big_ids,
                              durations)
    (want_g,) = torch.autograd.grad(want, x)
    got, got_g = _grad(rnnt_loss, logits, targets, torch.tensor([T]), torch.tensor([U]),
                       big_blank_ids=big_ids, big_blank_durations=durations)
    assert got.item() == pytest.approx(want.item(), abs=1e-10)
    torch.testing.assert_close(got_g, want_g, rtol=0, atol=1e-10)


def test_multiblank_batch_padding_and_fastemit():
    """Per-utterance losses in a padded batch equal each utterance alone (big blanks must
    stop at each utterance's own last frame), also with FastEmit."""
    durations, big_ids = (2, 3), (5, 6)
    logits, targets, t_lens, u_lens = _random_batch(4, 9, 4, 7, seed=13, dtype=torch.float64)
    targets = targets.clamp(max=4)
    kw = dict(big_blank_ids=big_ids, big_blank_durations=durations, fastemit_lambda=0.2)
    batch, batch_g = _grad(rnnt_loss, logits, targets, t_lens, u_lens, reduction="none", **kw)
    for b in range(4):
        T, U = int(t_lens[b]), int(u_lens[b])
        one, one_g = _grad(rnnt_loss, logits[b:b + 1, :T, :U + 1], targets[b:b + 1, :U],
                           t_lens[b:b + 1], u_lens[b:b + 1], reduction="none", **kw)
        assert batch[b].item() == pytest.approx(one.item(), abs=1e-10)
        torch.testing.assert_close(batch_g[b, :T, :U + 1], one_g[0], rtol=0, atol=1e-10)

"""Pruned RNN-T loss against the full loss (ours, torchaudio) and brute-force alignment sums."""
import copy

import pytest
import torch
import torchaudio.functional as taf

from tests.numerics import assert_near_float64, rounding_bound
from tests.transducer.test_rnnt_loss import _alignments
from wenet.transducer.joint import TransducerJoint
from wenet.transducer.pruned_loss import (pruned_rnnt_loss, pruning_bounds, simple_rnnt_loss,
                                          warmup_scales)
from wenet.transducer.rnnt_loss import rnnt_loss


def _case(B, T, U, V, seed, big=0, dtype=torch.float32, J=12):
    """Projected joint inputs, a joint network and a padded batch of targets/lengths."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    joint = TransducerJoint(V + big, 8, 8, join_dim=J).to(dtype)
    with torch.no_grad():
        joint.out.weight.mul_(3.0)
    enc = torch.randn(B, T, J, generator=g, dtype=dtype)
    pred = torch.randn(B, U + 1, J, generator=g, dtype=dtype)
    targets = torch.randint(1, V, (B, U), generator=g, dtype=torch.int32)
    t_lens = torch.randint(max(1, U // 2), T + 1, (B,), generator=g, dtype=torch.int32)
    u_lens = torch.randint(0, U + 1, (B,), generator=g, dtype=torch.int32)
    t_lens[0], u_lens[0] = T, U
    for b in range(B):
        targets[b, u_lens[b]:] = 0
    return joint, enc, pred, targets, t_lens, u_lens


def _grads(loss, *xs):
    return torch.autograd.grad(loss, xs)


def _simple_inputs(B, T, U, V, seed, big=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed + 1000)
    return (torch.randn(B, T, V + big, generator=g, dtype=dtype),
            torch.randn(B, U + 1, V + big, generator=g, dtype=dtype))


@pytest.mark.parametrize("B,T,U,V,seed", [(3, 9, 4, 6, 0), (4, 12, 6, 20, 1), (2, 5, 1, 7, 2)])
def test_full_range_equals_full_loss_ours_and_torchaudio(B, T, U, V, seed):
    joint, enc, pred, targets, t_lens, u_lens = _case(B, T, U, V, seed)
    am, lm = _simple_inputs(B, T, U, V, seed)
    _, (leave, label) = simple_rnnt_loss(am, lm, targets, t_lens, u_lens, lm_scale=0.25)
    starts = pruning_bounds(leave, label, t_lens, u_lens, prune_range=U + 1 + seed)
    assert starts.abs().sum() == 0
    e, p = enc.clone().requires_grad_(), pred.clone().requires_grad_()
    got = pruned_rnnt_loss(joint, e, p, targets, starts, U + 1 + seed, t_lens, u_lens,
                           reduction="none")
    got_g = _grads(got.sum(), e, p, joint.out.weight)
    # every float32 result within float32's bound of the full loss in float64: a joint
    # layer, a log-softmax, then T + U lattice steps; the longest sum is the joint
    # weight's gradient, over all B x T x (U + 1) lattice nodes
    bound = rounding_bound(torch.float32, B * T * (U + 1), depth=2 + T + U)
    joint64 = copy.deepcopy(joint).double()
    e64, p64 = enc.double().requires_grad_(), pred.double().requires_grad_()
    want = rnnt_loss(joint64(e64.unsqueeze(2), p64.unsqueeze(1)), targets, t_lens, u_lens,
                     blank=0, reduction="none")
    want_g = _grads(want.sum(), e64, p64, joint64.out.weight)
    assert_near_float64(got, want, bound, "pruned loss")
    for a, b, what in zip(got_g, want_g, ("enc", "pred", "joint")):
        assert_near_float64(a, b, bound, f"pruned gradient wrt {what}")
    e2, p2 = enc.clone().requires_grad_(), pred.clone().requires_grad_()  # independent check
    ta = taf.rnnt_loss(joint(e2.unsqueeze(2), p2.unsqueeze(1)), targets, t_lens, u_lens,
                       blank=0, reduction="none")
    assert_near_float64(ta, want, bound, "torchaudio loss")
    ta_g = _grads(ta.sum(), e2, p2, joint.out.weight)
    for a, b, what in zip(ta_g, want_g, ("enc", "pred", "joint")):
        assert_near_float64(a, b, bound, f"torchaudio gradient wrt {what}")


def test_full_range_multiblank_fastemit_equals_ours():
    B, T, U, V = 3, 10, 4, 6
    durations, big_ids = (2, 3), (6, 7)
    joint, enc, pred, targets, t_lens, u_lens = _case(B, T, U, V, 3, big=2, dtype=torch.float64)
    kw = dict(big_blank_ids=big_ids, big_blank_durations=durations, fastemit_lambda=0.3,
              reduction="sum")
    e, p = enc.clone().requires_grad_(), pred.clone().requires_grad_()
    starts = torch.zeros(B, T, dtype=torch.long)
    got = pruned_rnnt_loss(joint, e, p, targets, starts, U + 1, t_lens, u_lens, **kw)
    got_g = _grads(got, e, p)
    e2, p2 = enc.clone().requires_grad_(), pred.clone().requires_grad_()
    want = rnnt_loss(joint(e2.unsqueeze(2), p2.unsqueeze(1)), targets, t_lens, u_lens, **kw)
    want_g = _grads(want, e2, p2)
    assert got.item() == pytest.approx(want.item(), abs=1e-9)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9)


def _smoothed_logprobs(am, lm, u_len, lm_scale, am_scale):
    """Per-node (T, U+1, V) smoothed log-probs of one utterance, written plainly."""
    joint = torch.log_softmax(am.unsqueeze(1) + lm.unsqueeze(0), -1)
    lm_only = torch.log_softmax(lm, -1).unsqueeze(0).expand_as(joint)
    unigram = torch.softmax(lm[:u_len + 1], -1).mean(0)
    am_only = torch.log_softmax(am + unigram.log(), -1).unsqueeze(1).expand_as(joint)
    return (1 - lm_scale - am_scale) * joint + lm_scale * lm_only + am_scale * am_only


@pytest.mark.parametrize("T,U,scales,durations", [(3, 2, (0.0, 0.0), ()),
                                                  (3, 2, (0.25, 0.1), ()),
                                                  (4, 1, (0.3, 0.2), ()),
                                                  (4, 2, (0.25, 0.0), (2,))])
def test_simple_loss_equals_brute_force_over_alignments(T, U, scales, durations):
    V = 4
    big_ids = tuple(range(V, V + len(durations)))
    am, lm = _simple_inputs(1, T, U, V, seed=T + U, big=len(durations), dtype=torch.float64)
    targets = torch.randint(1, V, (1, U), generator=torch.Generator().manual_seed(U))
    am.requires_grad_()
    lm.requires_grad_()
    lp = _smoothed_logprobs(am[0], lm[0], U, *scales)
    y = targets[0].tolist()
    paths = []
    for path in _alignments(T, U, durations):
        s = lp.new_zeros(())
        for t, u, kind in path:
            k = y[u] if kind == "label" else 0 if kind == "blank" else big_ids[kind]
            s = s + lp[t, u, k]
        paths.append(s)
    want = -torch.logsumexp(torch.stack(paths), 0)
    want_g = _grads(want, am, lm)
    got, _ = simple_rnnt_loss(am, lm, targets, torch.tensor([T]), torch.tensor([U]),
                              lm_scale=scales[0], am_scale=scales[1], big_blank_ids=big_ids,
                              big_blank_durations=durations)
    got_g = _grads(got, am, lm)
    assert got.item() == pytest.approx(want.item(), abs=1e-10)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def _trained_pair(B, T, U, V, seed):
    """A case where the simple loss and the joint agree roughly (as after training):
    the simple logits are the joint's own log-probs at each node's diagonal, noise added."""
    joint, enc, pred, targets, t_lens, u_lens = _case(B, T, U, V, seed)
    with torch.no_grad():
        lp = torch.log_softmax(joint(enc.unsqueeze(2), pred.unsqueeze(1)), -1)  # (B,T,U+1,V)
    return joint, enc, pred, targets, t_lens, u_lens, lp.mean(2), lp.mean(1)


def test_bounds_are_monotone_and_in_range_and_the_loss_approaches_full():
    B, T, U, V = 4, 24, 10, 12
    joint, enc, pred, targets, t_lens, u_lens, am, lm = _trained_pair(B, T, U, V, seed=5)
    full = rnnt_loss(joint(enc.unsqueeze(2), pred.unsqueeze(1)), targets, t_lens, u_lens,
                     reduction="none").detach()
    _, (leave, label) = simple_rnnt_loss(am, lm, targets, t_lens, u_lens, lm_scale=0.25)
    gaps = []
    for R in (2, 3, 4, 6, 8, U + 1):
        s = pruning_bounds(leave, label, t_lens, u_lens, R)
        for b in range(B):
            n, u_b = int(t_lens[b]), int(u_lens[b])
            sb = s[b, :n]
            assert sb[0] == 0
            assert (sb[1:] >= sb[:-1]).all() and (sb[1:] - sb[:-1] <= R - 1).all()
            assert sb.min() >= 0 and sb.max() <= max(u_b + 1 - min(R, U + 1), 0)
            assert sb[-1] + min(R, U + 1) - 1 >= u_b  # the final blank leaves (T-1, U)
        pruned = pruned_rnnt_loss(joint, enc, pred, targets, s, R, t_lens, u_lens,
                                  reduction="none").detach()
        assert (pruned >= full - 1e-4).all()  # a subset of the paths
        gaps.append(float((pruned - full).sum()))
    assert all(a >= b - 1e-4 for a, b in zip(gaps, gaps[1:])), gaps
    assert gaps[-1] == pytest.approx(0.0, abs=1e-4) and gaps[0] > gaps[-1]
    assert gaps[2] < 0.05 * float(full.sum())  # prune_range 4 already keeps most mass


def test_bounds_of_crafted_occupations():
    """One dominant path: each window starts where its mass is; constraints repair the rest."""
    T, U, R = 6, 5, 2
    leave = torch.zeros(1, T, U + 1)
    label = torch.zeros(1, T, U + 1)
    for t, u in enumerate([0, 0, 4, 2, 5, 5]):  # 4 at t=2 is a jump of 4 > R-1
        leave[0, t, u] = 1.0
    s = pruning_bounds(leave, label, torch.tensor([T]), torch.tensor([U]), R)
    # by hand: best windows (first of ties) start at [0, 0, 3, 1, 4], the last frame's is
    # U + 1 - R = 4; non-decreasing -> [0, 0, 1, 1, 4, 4]; steps of at most R - 1 = 1,
    # raised from the end -> [0, 1, 2, 3, 4, 4]
    want = torch.tensor([[0, 1, 2, 3, 4, 4]])
    assert torch.equal(s, want)


def test_warmup_scales_follow_icefall_schedule():
    assert warmup_scales(0, 0.5, 100) == (1.0, 0.1)
    assert warmup_scales(50, 0.5, 100) == pytest.approx((0.75, 0.55))
    assert warmup_scales(100, 0.5, 100) == (0.5, 1.0)
    assert warmup_scales(10 ** 6, 0.3, 100) == (0.3, 1.0)
    assert warmup_scales(5, 0.3, 0) == (0.3, 1.0)


def test_model_pruned_loss_blend_and_options():
    from tests.transducer.test_transducer_model import _batch, _config
    from wenet.models import init_model
    torch.manual_seed(0)
    full = init_model(_config())
    pruned = init_model(_config(transducer_loss="pruned", prune_range=6, lm_scale=0.25,
                                simple_loss_scale=0.5, prune_warmup_steps=100))
    missing, unexpected = pruned.load_state_dict(full.state_dict(), strict=False)
    assert sorted(missing) == ["simple_am_proj.bias", "simple_am_proj.weight",
                               "simple_lm_proj.bias", "simple_lm_proj.weight"]
    assert not unexpected
    batch = _batch()  # U = 5 < prune_range: the pruned loss is the full loss
    want = full(*batch)["loss_rnnt"]
    for step, (s, p) in [(0, (1.0, 0.1)), (50, (0.75, 0.55)), (500, (0.5, 1.0))]:
        pruned.set_training_step(step)
        out = pruned(*batch)
        assert out["loss_pruned"].item() == pytest.approx(want.item(), abs=1e-5)
        blend = s * out["loss_simple"] + p * out["loss_pruned"]
        assert out["loss_rnnt"].item() == pytest.approx(blend.item(), rel=1e-6)
    out["loss"].backward()
    assert pruned.simple_am_proj.weight.grad.abs().sum() > 0
    assert pruned.joint.out.weight.grad.abs().sum() > 0
    opt = torch.optim.Adam(pruned.parameters(), lr=3e-3)
    first = None
    for _ in range(8):
        opt.zero_grad()
        loss = pruned(*batch)["loss"]
        first = loss.item() if first is None else first
        loss.backward()
        opt.step()
    assert pruned(*batch)["loss"].item() < 0.8 * first
    mb = init_model(_config(transducer_loss="pruned", prune_range=2, fastemit_lambda=0.01,
                            big_blank_durations=[2, 3]))
    assert torch.isfinite(mb(*batch)["loss"])
    for bad, match in [(dict(rnnt_loss_impl="torchaudio"), "rnnt_loss_impl"),
                       (dict(rnnt_clamp=0.5), "rnnt_clamp"), (dict(prune_range=1), "prune_range"),
                       (dict(lm_scale=0.8, am_scale=0.3), "lm_scale")]:
        with pytest.raises(ValueError, match=match):
            init_model(_config(transducer_loss="pruned", **bad))
    with pytest.raises(ValueError, match="transducer_loss"):
        init_model(_config(transducer_loss="prunned"))


@pytest.mark.parametrize("full,pruned", [
    ("train_conformer_rnnt.yaml", "train_conformer_rnnt_pruned.yaml"),
    ("train_conformer_rnnt_speechocean762.yaml", "train_conformer_rnnt_pruned_speechocean762.yaml")])
def test_pruned_configs_differ_from_full_ones_by_the_loss_only(full, pruned):
    import os
    from tests.common import CONF_DIR
    from wenet.models import init_model
    from wenet.utils.file_utils import load_yaml
    a, b = (load_yaml(os.path.join(CONF_DIR, name)) for name in (full, pruned))
    extra = {k: b["model_conf"].pop(k) for k in list(b["model_conf"]) if k not in a["model_conf"]}
    assert extra["transducer_loss"] == "pruned" and a == b
    b["model_conf"].update(extra)
    model = init_model(dict(b, input_dim=80, output_dim=50, cmvn_file=None))
    loss = model.losses["transducer"]
    assert loss.transducer_loss == "pruned" and loss.prune_range == extra["prune_range"]


def test_executor_tells_the_model_its_update_count(tmp_path):
    """The warm-up follows the executor's update count (restored on resume with the state)."""
    from tests.train.test_guards import _batches, _executor
    ex = _executor(tmp_path, accum_grad=2, log_interval=100)
    seen = []
    ex.module.set_training_step = seen.append
    ex.train_epoch(_batches([(2, 60, 3)] * 5))
    assert seen == [0, 0, 1, 1, 2] and ex.state.step == 2

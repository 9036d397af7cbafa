"""CR-CTC (wenet/transformer/cr_ctc.py, the cr_ctc loss of model_conf.cr_ctc): the loss against a
hand computation on a tiny batch, a zero consistency term for equal views, and the time
masks against their stated rule."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.numerics import rounding_bound
from wenet.models import init_model
from wenet.transformer import cr_ctc
from wenet.transformer.losses import LossInputs

VOCAB = 7
CONFIG = {
    "input_dim": 20, "output_dim": VOCAB, "cmvn_file": None,
    "encoder": "conformer",
    "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 32,
                     "num_blocks": 1, "dropout_rate": 0.0, "positional_dropout_rate": 0.0,
                     "attention_dropout_rate": 0.0, "input_layer": "conv2d",
                     "pos_enc_layer_type": "rel_pos", "cnn_module_kernel": 3},
    "decoder": "transformer",
    "decoder_conf": {"attention_heads": 2, "linear_units": 32, "num_blocks": 1,
                     "dropout_rate": 0.0, "positional_dropout_rate": 0.0,
                     "self_attention_dropout_rate": 0.0, "src_attention_dropout_rate": 0.0},
}


def _model(ratio: float, ctc_weight: float = 0.4, scale: float = 0.3):
    torch.manual_seed(0)
    conf = dict(CONFIG, model_conf={"ctc_weight": ctc_weight, "lsm_weight": 0.1, "cr_ctc": True,
                                    "cr_loss_scale": scale, "time_mask_ratio": ratio})
    return init_model(conf).double().train()


def _batch():
    g = torch.Generator().manual_seed(3)
    speech = torch.randn(2, 40, 20, generator=g, dtype=torch.float64)
    lengths = torch.tensor([40, 29])
    speech[1, 29:] = 0.0
    text = torch.tensor([[2, 3, 3, 4], [5, 2, -1, -1]])
    return speech, lengths, text, torch.tensor([4, 2])


def _hand_kl(log_p, log_q, frames):
    """sum over frames t < frames, tokens v of p (log p - log q), written out."""
    total = 0.0
    for t in range(frames):
        for v in range(log_p.size(1)):
            lp, lq = log_p[t, v].item(), log_q[t, v].item()
            total += math.exp(lp) * (lp - lq)
    return total


@torch.no_grad()
def _reference(model, view_a, view_b, lengths, text, text_lengths):
    """CTC (F.ctc_loss per view), attention loss per view, and the KL terms by hand."""
    both = torch.cat([view_a, view_b])
    enc, mask = model.encoder(both, lengths.repeat(2))  # one batch, as the model (BatchNorm)
    enc_lens = mask.squeeze(1).sum(1)
    log_probs = model.ctc.log_softmax(enc)
    ctc_views, att_views = [], []
    for half in (slice(0, 2), slice(2, 4)):
        lp = model.ctc.ctc_lo(enc[half]).log_softmax(-1)  # float64, as the model's head
        ctc_views.append(F.ctc_loss(lp.transpose(0, 1), text, enc_lens[half], text_lengths,
                                    reduction="sum") / 2)
        inputs = LossInputs(model, enc[half], mask[half], enc_lens[half], text, text_lengths)
        att_views.append(model.losses["attention"].compute(inputs)["loss_att"])
    kl = 0.0
    for b in range(2):
        frames = int(enc_lens[b])
        kl += _hand_kl(log_probs[2 + b], log_probs[b], frames)   # KL(p_b || p_a)
        kl += _hand_kl(log_probs[b], log_probs[2 + b], frames)   # KL(p_a || p_b)
    loss_cr = 0.5 * kl / 2
    loss_ctc = (ctc_views[0] + ctc_views[1]) / 2
    loss_att = (att_views[0] + att_views[1]) / 2
    return loss_ctc, loss_att, loss_cr


def test_loss_equals_hand_computation(monkeypatch):
    """Two fixed masked views (the masking replaced by known spans): CTC per view with
    F.ctc_loss, the attention loss per view, the two KL terms by hand."""
    model = _model(ratio=2.5)
    speech, lengths, text, text_lengths = _batch()
    view_a, view_b = speech.clone(), speech.clone()
    view_a[0, 5:12] = 0.0
    view_b[0, 20:26] = 0.0
    view_b[1, 2:9] = 0.0
    views = iter([view_a, view_b])
    monkeypatch.setattr(cr_ctc, "time_mask", lambda feats, lens, ratio: next(views))
    out = model(speech, lengths, text, text_lengths)

    loss_ctc, loss_att, loss_cr = _reference(model, view_a, view_b, lengths, text, text_lengths)
    # float64 throughout; the heads see 2 rows here, 4 in the model (other kernel
    # blocking): a decoder block and the heads' sums over 40 frames x VOCAB, depth 4
    rel = rounding_bound(torch.float64, 40 * VOCAB, depth=4)
    assert out["loss_ctc"].item() == pytest.approx(float(loss_ctc), rel=rel)
    assert out["loss_att"].item() == pytest.approx(float(loss_att), rel=rel)
    assert out["loss_cr"].item() == pytest.approx(loss_cr, rel=rel)
    assert loss_cr > 1e-4  # different views: a real consistency term
    expected = 0.4 * loss_ctc + 0.6 * loss_att + 0.3 * loss_cr
    assert out["loss"].item() == pytest.approx(float(expected), rel=rel)


def test_consistency_is_zero_for_equal_views():
    model = _model(ratio=0.0)
    out = model(*_batch())
    assert out["loss_cr"].item() == pytest.approx(0.0, abs=1e-12)
    loss = out["loss"]
    loss.backward()  # and its gradient does not push anywhere either
    plain = _model(ratio=0.0)
    plain.losses["cr_ctc"].weight = 0.0  # still two views, no consistency term
    plain(*_batch())["loss"].backward()
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        if p.grad is not None:
            assert torch.allclose(p.grad, q.grad, rtol=1e-9, atol=1e-12), name


def test_eval_sees_the_batch_once():
    model = _model(ratio=2.5).eval()
    out = model(*_batch())
    assert out["loss_cr"] is None
    del model.losses["cr_ctc"]
    assert model(*_batch())["loss"].item() == out["loss"].item()


@pytest.mark.parametrize("ratio", [1.0, 2.5])
def test_time_masks_follow_the_rule(ratio):
    torch.manual_seed(1)
    lengths = torch.tensor([1000, 700, 120, 9])
    feats = torch.rand(4, 1000, 3, dtype=torch.float64) + 1.0  # no zeros of its own
    a = cr_ctc.time_mask(feats, lengths, ratio)
    b = cr_ctc.time_mask(feats, lengths, ratio)
    assert not torch.equal(a, b)
    for masked in (a, b):
        for i, n in enumerate(lengths.tolist()):
            zero = (masked[i] == 0).all(dim=1)
            kept = ~zero
            assert torch.equal(masked[i][kept], feats[i][kept])  # other frames untouched
            assert not zero[n:].any()                            # padding untouched
            budget = 0.15 * ratio * n
            num = min(math.ceil(10 * ratio), math.ceil(budget / 100))
            width = min(100, math.floor(budget / num))
            assert int(zero.sum()) <= num * max(width - 1, 0)
            spans = int((zero[1:] & ~zero[:-1]).sum() + zero[0])
            assert spans <= num
    assert (a[0] == 0).all(dim=1).sum() > 0
    assert torch.equal(cr_ctc.time_mask(feats, lengths, 0.0), feats)


def test_options_are_checked():
    with pytest.raises(ValueError, match="cr_ctc"):
        init_model(dict(CONFIG, model_conf={"ctc_weight": 0.0, "cr_ctc": True}))

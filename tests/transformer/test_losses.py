"""Losses and the ASRModel's loss composition against hand computations."""
import logging
import math

import pytest
import torch
import torch.nn.functional as F

from tests.numerics import assert_near_float64, rounding_bound
from wenet.transformer.ctc import CTC
from wenet.transformer.label_smoothing_loss import LabelSmoothingLoss
from wenet.utils.common import add_sos_eos, reverse_pad_list
from wenet.models import init_model


def test_label_smoothing_loss_hand_computation():
    g = torch.Generator().manual_seed(0)
    v, smoothing = 5, 0.2
    x = torch.randn(2, 3, v, generator=g)
    target = torch.tensor([[1, 4, -1], [0, 2, 3]])
    total = 0.0
    for b in range(2):
        for t in range(3):
            if target[b, t] == -1:
                continue
            logp = torch.log_softmax(x[b, t].double(), 0)
            for c in range(v):
                q = 1 - smoothing if c == target[b, t] else smoothing / (v - 1)
                total += q * (math.log(q) - float(logp[c]))
    # 5 tokens x v classes summed after a log-softmax (depth 2), in either dtype; a
    # float64 model keeps float64 (the loss upcasts low precision, never downcasts)
    for dtype in (torch.float32, torch.float64):
        bound = rounding_bound(dtype, 5 * v, depth=2)
        for norm, denom in ((False, 2), (True, 5)):
            loss = LabelSmoothingLoss(v, -1, smoothing, normalize_length=norm)(x.to(dtype), target)
            assert loss.dtype == dtype
            assert_near_float64(loss, torch.tensor(total / denom, dtype=torch.float64), bound)


def test_label_smoothing_zero_is_cross_entropy():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 6, generator=g)
    target = torch.tensor([[1, 2, 3, -1], [5, 0, -1, -1]])
    loss = LabelSmoothingLoss(6, -1, 0.0, normalize_length=True)(x, target)
    ce = F.cross_entropy(x.view(-1, 6), target.view(-1), ignore_index=-1)
    assert torch.allclose(loss, ce, atol=1e-6)


def test_ctc_loss_equals_torch_ctc_loss_on_same_log_probs():
    torch.manual_seed(0)
    ctc = CTC(7, 8)
    hs = torch.randn(3, 12, 8)
    hlens = torch.tensor([12, 10, 7])
    ys = torch.tensor([[1, 2, 3, 2], [4, 4, -1, -1], [6, -1, -1, -1]])
    ylens = torch.tensor([4, 2, 1])
    loss = ctc(hs, hlens, ys, ylens)
    logp = ctc.log_softmax(hs).transpose(0, 1)
    ref = F.ctc_loss(logp, ys, hlens, ylens, blank=0, reduction="sum") / 3
    assert torch.allclose(loss, ref, atol=1e-5)
    loss64 = ctc.double()(hs.double(), hlens, ys, ylens)  # a float64 model stays float64
    ref64 = F.ctc_loss(ctc.log_softmax(hs.double()).transpose(0, 1), ys, hlens, ylens,
                       blank=0, reduction="sum") / 3
    assert loss64.dtype == torch.float64
    assert_near_float64(loss64, ref64, rounding_bound(torch.float64, 12 * 8, depth=2))


def test_losses_take_float32_log_softmax_under_bf16_autocast():
    """Under autocast the logits are bf16; both losses must equal the float32 formula on
    those same logits (log_softmax in bf16 would lose ~0.4 % of every log-probability)."""
    torch.manual_seed(3)
    ctc = CTC(7, 8)
    hs = torch.randn(2, 9, 8)
    hlens, ys, ylens = torch.tensor([9, 6]), torch.tensor([[1, 2, 3], [4, -1, -1]]), torch.tensor([3, 1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = ctc.ctc_lo(hs)
        loss = ctc(hs, hlens, ys, ylens)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    logp = logits.float().log_softmax(2).transpose(0, 1)
    ref = F.ctc_loss(logp, ys, hlens, ylens, blank=0, reduction="sum") / 2
    assert torch.allclose(loss, ref, atol=1e-5)
    x = torch.randn(2, 3, 7).to(torch.bfloat16)
    target = torch.tensor([[1, 4, -1], [0, 2, 3]])
    ls = LabelSmoothingLoss(7, -1, 0.1, normalize_length=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = ls(x, target)
    assert got.dtype == torch.float32
    assert torch.allclose(got, ls(x.float(), target), atol=1e-6)


def test_ctc_counts_impossible_alignments(caplog):
    ctc = CTC(5, 4)
    ys = torch.tensor([[1, 1, 2], [1, 2, 3]])
    ylens = torch.tensor([3, 3])
    # [1, 1, 2] needs a blank between the repeated 1s: 4 frames
    assert CTC.min_frames(ys, ylens).tolist() == [4, 3]
    with caplog.at_level(logging.WARNING):
        loss = ctc(torch.randn(2, 3, 4), torch.tensor([3, 3]), ys, ylens)
    assert torch.isfinite(loss)
    assert "1 of 2 utterances" in caplog.text


def test_add_sos_eos_and_reverse_pad_list_hand_written():
    ys = torch.tensor([[3, 4, 5], [6, -1, -1]])
    ys_in, ys_out = add_sos_eos(ys, 9, 9, -1)
    assert ys_in.tolist() == [[9, 3, 4, 5], [9, 6, 9, 9]]
    assert ys_out.tolist() == [[3, 4, 5, 9], [6, 9, -1, -1]]
    assert reverse_pad_list(ys, torch.tensor([3, 1]), -1.0).tolist() == [[5, 4, 3], [6, -1, -1]]


def _model(ctc_weight, reverse_weight, decoder="bitransformer"):
    torch.manual_seed(0)
    cfg = {
        "input_dim": 20, "output_dim": 10, "cmvn_file": None, "encoder": "conformer",
        "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 24,
                         "num_blocks": 1, "cnn_module_kernel": 3},
        "decoder": decoder,
        "decoder_conf": {"attention_heads": 2, "linear_units": 24, "num_blocks": 1},
        "model_conf": {"ctc_weight": ctc_weight, "reverse_weight": reverse_weight,
                       "lsm_weight": 0.1},
    }
    if decoder == "bitransformer":
        cfg["decoder_conf"]["r_num_blocks"] = 1
    return init_model(cfg).eval()


def _batch():
    g = torch.Generator().manual_seed(3)
    speech = torch.randn(2, 40, 20, generator=g)
    speech_lens = torch.tensor([40, 31])
    text = torch.tensor([[1, 2, 3, 4], [5, 6, -1, -1]])
    text_lens = torch.tensor([4, 2])
    return speech, speech_lens, text, text_lens


def test_asr_model_loss_is_weighted_sum_of_parts():
    model = _model(0.3, 0.4)
    speech, speech_lens, text, text_lens = _batch()
    with torch.no_grad():
        out = model(speech, speech_lens, text, text_lens)
        enc, mask = model.encoder(speech, speech_lens)
        ctc = model.ctc(enc, mask.squeeze(1).sum(1), text, text_lens)
        eos = 9
        ys_in = torch.tensor([[eos, 1, 2, 3, 4], [eos, 5, 6, eos, eos]])
        ys_out = torch.tensor([[1, 2, 3, 4, eos], [5, 6, eos, -1, -1]])
        r_in = torch.tensor([[eos, 4, 3, 2, 1], [eos, 6, 5, eos, eos]])
        r_out = torch.tensor([[4, 3, 2, 1, eos], [6, 5, eos, -1, -1]])
        lens = torch.tensor([5, 3])
        l_x, _, _ = model.decoder.left_decoder(enc, mask, ys_in, lens)
        r_x, _, _ = model.decoder.right_decoder(enc, mask, r_in, lens)
        crit = LabelSmoothingLoss(10, -1, 0.1)
        att = 0.6 * crit(l_x, ys_out) + 0.4 * crit(r_x, r_out)
    assert torch.allclose(out["loss_ctc"], ctc, atol=1e-6)
    assert torch.allclose(out["loss_att"], att, atol=1e-5)
    assert torch.allclose(out["loss"], 0.3 * ctc + 0.7 * att, atol=1e-5)


@pytest.mark.parametrize("ctc_weight,missing", [(0.0, "loss_ctc"), (1.0, "loss_att")])
def test_zero_weight_terms_are_skipped(ctc_weight, missing):
    model = _model(ctc_weight, 0.0, decoder="transformer")
    out = model(*_batch())
    assert out[missing] is None
    present = "loss_att" if missing == "loss_ctc" else "loss_ctc"
    assert torch.equal(out["loss"], out[present])


def test_right_to_left_decoder_input_is_reversed_target(monkeypatch):
    model = _model(0.3, 0.3)
    seen = {}
    right = model.decoder.right_decoder
    original = right.forward

    def spy(memory, memory_mask, ys_in_pad, ys_in_lens, *args):
        seen["ys"] = ys_in_pad.clone()
        seen["lens"] = ys_in_lens.clone()
        return original(memory, memory_mask, ys_in_pad, ys_in_lens, *args)

    monkeypatch.setattr(right, "forward", spy)
    model(*_batch())
    assert seen["ys"].tolist() == [[9, 4, 3, 2, 1], [9, 6, 5, 9, 9]]
    assert seen["lens"].tolist() == [5, 3]


def test_forward_attention_decoder_reverses_hypotheses():
    model = _model(0.3, 0.3)
    enc = torch.randn(1, 6, 16)
    hyps = torch.tensor([[9, 1, 2, 3], [9, 4, 5, 0]])
    lens = torch.tensor([4, 3])
    with torch.no_grad():
        l_out, r_out = model.forward_attention_decoder(hyps, lens, enc, 0.5)
        mask = torch.ones(2, 1, 6, dtype=torch.bool)
        l_ref, _, _ = model.decoder.left_decoder(enc.repeat(2, 1, 1), mask, hyps, lens)
        r_ref, _, _ = model.decoder.right_decoder(
            enc.repeat(2, 1, 1), mask, torch.tensor([[9, 3, 2, 1], [9, 5, 4, 9]]), lens)
    assert torch.allclose(l_out, torch.log_softmax(l_ref, -1), atol=1e-6)
    assert torch.allclose(r_out, torch.log_softmax(r_ref, -1), atol=1e-6)


def test_forward_one_step_matches_teacher_forced_decoder():
    """Step-by-step decoding with the layer cache gives, at each step, the
    log-softmax of the full teacher-forced pass at that position."""
    model = _model(0.3, 0.0, decoder="transformer")
    dec = model.decoder
    memory = torch.randn(2, 7, 16)
    memory_mask = torch.tensor([[[True] * 7], [[True] * 5 + [False] * 2]])
    ys = torch.tensor([[9, 1, 2, 3], [9, 4, 5, 6]])
    with torch.no_grad():
        full, _, _ = dec(memory, memory_mask, ys, torch.tensor([4, 4]))
        full = torch.log_softmax(full, -1)
        cache = None
        for i in range(1, 5):
            tgt_mask = torch.tril(torch.ones(i, i, dtype=torch.bool)).unsqueeze(0).repeat(2, 1, 1)
            logp, cache = dec.forward_one_step(memory, memory_mask, ys[:, :i], tgt_mask, cache)
            assert torch.allclose(logp, full[:, i - 1], atol=1e-5), i

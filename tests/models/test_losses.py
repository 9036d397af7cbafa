"""The loss registry (wenet/models/losses.py): each model kind's loss dict and gradients
equal the loss functions called by hand; a ``losses`` section and the older ``model_conf``
keys build the same model; every config in conf/ keeps its losses; a toy loss registered
here trains by naming it in a config, with no change to the model classes."""
from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.nn.functional as F

from tests.common import CONF_DIR
from tests.zipformer.test_encoder import TINY
from wenet.models import LOSSES, init_model
from wenet.transducer.pruned_loss import (pruned_rnnt_loss, pruning_bounds, simple_rnnt_loss,
                                          warmup_scales)
from wenet.transducer.rnnt_loss import rnnt_loss
from wenet.transformer.label_smoothing_loss import LabelSmoothingLoss
from wenet.transformer.losses import Loss, LossInputs
from wenet.utils.file_utils import load_yaml

VOCAB = 7
SOS = VOCAB - 1
NO_DROPOUT = {"dropout_rate": 0.0, "positional_dropout_rate": 0.0}
ENCODERS = {
    "conformer": {"output_size": 16, "attention_heads": 2, "linear_units": 16, "num_blocks": 1,
                  "cnn_module_kernel": 3, "attention_dropout_rate": 0.0, **NO_DROPOUT},
    "transformer": {"output_size": 16, "attention_heads": 2, "linear_units": 16,
                    "num_blocks": 1, "attention_dropout_rate": 0.0, **NO_DROPOUT},
    "zipformer": {**TINY, "causal": False},
}


def _config(encoder: str, model_conf: dict, transducer: bool = False) -> dict:
    conf = {"encoder": encoder, "encoder_conf": ENCODERS[encoder], "decoder": "bitransformer",
            "decoder_conf": {"attention_heads": 2, "linear_units": 16, "num_blocks": 1,
                             "r_num_blocks": 1, "self_attention_dropout_rate": 0.0,
                             "src_attention_dropout_rate": 0.0, **NO_DROPOUT},
            "model_conf": model_conf, "input_dim": 20, "output_dim": VOCAB, "cmvn_file": None}
    if transducer:
        conf.update(model="transducer", predictor="stateless",
                    predictor_conf={"embed_size": 12, "context_size": 2},
                    joint_conf={"join_dim": 16})
    return conf


def _build(conf: dict, dtype=torch.float64) -> torch.nn.Module:
    torch.manual_seed(0)
    return init_model(copy.deepcopy(conf)).to(dtype).eval()


def _batch(dtype=torch.float64):
    g = torch.Generator().manual_seed(3)
    speech = torch.randn(3, 60, 20, generator=g).to(dtype)
    text = torch.tensor([[1, 2, 3, 4, 2], [5, 5, 2, -1, -1], [3, 1, 4, 2, -1]])
    return speech, torch.tensor([60, 47, 38]), text, torch.tensor([5, 3, 4])


def _decoder_targets(text, lengths):
    """Left-to-right and right-to-left decoder inputs (sos + tokens, eos padded) and
    outputs (tokens + eos, -1 padded), written out token by token."""
    L = text.size(1) + 1
    ins, outs, r_ins, r_outs = [], [], [], []
    for row, n in zip(text.tolist(), lengths.tolist()):
        tokens = row[:n]
        for seq, i_list, o_list in ((tokens, ins, outs), (tokens[::-1], r_ins, r_outs)):
            i_list.append([SOS] + seq + [SOS] * (L - 1 - n))
            o_list.append(seq + [SOS] + [-1] * (L - 1 - n))
    return tuple(torch.tensor(x) for x in (ins, outs, r_ins, r_outs))


def _attention_by_hand(model, enc, mask, text, lengths, lsm, reverse_weight):
    ys_in, ys_out, r_in, r_out = _decoder_targets(text, lengths)
    left, right, _ = model.decoder(enc, mask, ys_in, lengths + 1, r_in, reverse_weight)
    crit = LabelSmoothingLoss(VOCAB, -1, lsm)
    att = crit(left, ys_out)
    if reverse_weight > 0:
        att = att * (1 - reverse_weight) + crit(right, r_out) * reverse_weight
    return att


def _ctc_by_hand(model, enc, enc_lens, text, lengths):
    logits = model.ctc.ctc_lo(enc)
    if logits.dtype != torch.float64:  # the CTC head's rule: at least float32
        logits = logits.float()
    logp = logits.log_softmax(-1).transpose(0, 1)
    return F.ctc_loss(logp, text, enc_lens, lengths, reduction="sum",
                      zero_infinity=True) / text.size(0)


def _asr_by_hand(model, batch, ctc_weight, lsm, reverse_weight):
    speech, speech_lens, text, lengths = batch
    enc, mask = model.encoder(speech, speech_lens)
    att = _attention_by_hand(model, enc, mask, text, lengths, lsm, reverse_weight)
    ctc = _ctc_by_hand(model, enc, mask.squeeze(1).sum(1), text, lengths)
    return {"loss": ctc_weight * ctc + (1 - ctc_weight) * att, "loss_ctc": ctc, "loss_att": att}


def _transducer_by_hand(model, batch, conf, step=0):
    """transducer_weight * RNN-T (full, or the pruned blend) + ctc + attention."""
    speech, speech_lens, text, lengths = batch
    enc, mask = model.encoder(speech, speech_lens)
    enc_lens = mask.squeeze(1).sum(1)
    U, T = int(lengths.max()), int(enc_lens.max())
    ys = text[:, :U].clamp(min=0)  # padding -1 -> blank 0
    pred = model.predictor(torch.cat([torch.zeros_like(ys[:, :1]), ys], dim=1))
    j, e = model.joint, enc[:, :T]
    big = dict(big_blank_ids=model.big_blank_ids(), big_blank_durations=model.big_blank_durations(),
               fastemit_lambda=conf.get("fastemit_lambda", 0.0))
    out = {}
    if conf.get("transducer_loss") == "pruned":
        simple, (leave, label) = simple_rnnt_loss(
            model.simple_am_proj(e), model.simple_lm_proj(pred), ys, enc_lens, lengths,
            blank=0, lm_scale=conf["lm_scale"], am_scale=conf["am_scale"], **big)
        starts = pruning_bounds(leave, label, enc_lens, lengths, conf["prune_range"])
        pruned = pruned_rnnt_loss(j, j.project_encoder(e), j.project_predictor(pred), ys,
                                  starts, conf["prune_range"], enc_lens, lengths, blank=0, **big)
        s, p = warmup_scales(step, conf["simple_loss_scale"], conf["prune_warmup_steps"])
        out.update(loss_rnnt=s * simple + p * pruned, loss_simple=simple, loss_pruned=pruned)
    else:
        logits = j(j.project_encoder(e).unsqueeze(2), j.project_predictor(pred).unsqueeze(1))
        out["loss_rnnt"] = rnnt_loss(logits, ys, enc_lens, lengths, blank=0, reduction="mean",
                                     **big)
    out["loss"] = conf.get("transducer_weight", 1.0) * out["loss_rnnt"]
    if conf.get("ctc_weight", 0.0) > 0:
        out["loss_ctc"] = _ctc_by_hand(model, enc, enc_lens, text, lengths)
        out["loss"] = out["loss"] + conf["ctc_weight"] * out["loss_ctc"]
    if conf.get("attention_weight", 0.0) > 0:
        out["loss_att"] = _attention_by_hand(model, enc, mask, text, lengths,
                                             conf.get("lsm_weight", 0.0),
                                             conf.get("reverse_weight", 0.0))
        out["loss"] = out["loss"] + conf["attention_weight"] * out["loss_att"]
    return out


def _assert_same_values_and_gradients(model, got, want):
    for key, value in want.items():
        assert torch.equal(got[key], value), (key, got[key], value)
    grads = torch.autograd.grad(got["loss"], list(model.parameters()), allow_unused=True)
    ref = torch.autograd.grad(want["loss"], list(model.parameters()), allow_unused=True)
    for (name, _), g, r in zip(model.named_parameters(), grads, ref):
        assert (g is None) == (r is None), name
        assert g is None or torch.equal(g, r), name


ASR_CASES = [(enc, conf) for enc in ENCODERS for conf in (
    {"ctc_weight": 0.3, "lsm_weight": 0.1, "reverse_weight": 0.3},
    {"ctc_weight": 0.0, "lsm_weight": 0.1}, {"ctc_weight": 1.0})]


@pytest.mark.parametrize("encoder,model_conf", ASR_CASES)
def test_asr_losses_equal_the_loss_functions_by_hand(encoder, model_conf):
    model = _build(_config(encoder, model_conf))
    batch = _batch()
    out = model(*batch)
    w = model_conf["ctc_weight"]
    want = _asr_by_hand(model, batch, w, model_conf.get("lsm_weight", 0.0),
                        model_conf.get("reverse_weight", 0.0))
    assert set(out) == {"loss", "loss_att", "th_accuracy", "loss_ctc"}
    if w == 1.0:
        assert out["loss_att"] is None and out["th_accuracy"] is None
        want = {"loss": want["loss_ctc"], "loss_ctc": want["loss_ctc"]}
    if w == 0.0:
        assert out["loss_ctc"] is None
        want = {"loss": want["loss_att"], "loss_att": want["loss_att"]}
    _assert_same_values_and_gradients(model, out, want)


TRANSDUCER_CASES = [
    ({"transducer_weight": 0.6, "ctc_weight": 0.3, "attention_weight": 0.1,
      "reverse_weight": 0.2, "lsm_weight": 0.1}, torch.float64),
    ({"big_blank_durations": [2, 3], "fastemit_lambda": 0.01, "ctc_weight": 0.2},
     torch.float64),
    ({"transducer_loss": "pruned", "prune_range": 3, "lm_scale": 0.25, "am_scale": 0.1,
      "simple_loss_scale": 0.5, "prune_warmup_steps": 10, "big_blank_durations": [2],
      "attention_weight": 0.1}, torch.float32),  # the pruned lattice is float32
]


@pytest.mark.parametrize("model_conf,dtype", TRANSDUCER_CASES)
def test_transducer_losses_equal_the_loss_functions_by_hand(model_conf, dtype):
    model = _build(_config("conformer", model_conf, transducer=True), dtype)
    model.set_training_step(4)
    batch = _batch(dtype)
    out = model(*batch)
    want = _transducer_by_hand(model, batch, model_conf, step=4)
    keys = {"loss", "loss_rnnt", "loss_ctc", "loss_att", "th_accuracy"}
    if model_conf.get("transducer_loss") == "pruned":
        keys |= {"loss_simple", "loss_pruned"}
    assert set(out) == keys
    computed = set(want) | ({"th_accuracy"} if "loss_att" in want else set())
    assert {k for k in keys if out[k] is None} == keys - computed
    _assert_same_values_and_gradients(model, out, want)


def _section(model_conf: dict, transducer: bool) -> tuple:
    """The same losses as a ``losses`` section: (losses, model_conf left)."""
    att = {k: model_conf[k] for k in ("lsm_weight", "reverse_weight") if k in model_conf}
    if not transducer:
        w = model_conf["ctc_weight"]
        losses = {"attention": {"weight": 1 - w, **att}, "ctc": {"weight": w}}
        if model_conf.get("cr_ctc"):
            losses["cr_ctc"] = {"weight": model_conf["cr_loss_scale"],
                                "time_mask_ratio": model_conf["time_mask_ratio"]}
        return losses, {}
    rnnt = {k: v for k, v in model_conf.items() if k in (
        "fastemit_lambda", "transducer_loss", "prune_range", "lm_scale", "am_scale",
        "simple_loss_scale", "prune_warmup_steps")}
    losses = {"transducer": {"weight": model_conf.get("transducer_weight", 1.0), **rnnt},
              "ctc": {"weight": model_conf.get("ctc_weight", 0.0)},
              "attention": {"weight": model_conf.get("attention_weight", 0.0), **att}}
    left = {k: model_conf[k] for k in ("big_blank_durations",) if k in model_conf}
    return losses, left


@pytest.mark.parametrize("model_conf,transducer", [
    (ASR_CASES[0][1], False),
    ({"ctc_weight": 0.4, "lsm_weight": 0.1, "cr_ctc": True, "cr_loss_scale": 0.3,
      "time_mask_ratio": 2.5}, False)] + [(conf, True) for conf, _ in TRANSDUCER_CASES])
def test_a_losses_section_builds_the_same_model_as_model_conf(model_conf, transducer):
    """Same parameters, same state_dict keys, bitwise the same training-mode loss dict."""
    legacy = _config("conformer", model_conf, transducer)
    losses, left = _section(model_conf, transducer)
    section = dict(_config("conformer", left, transducer), losses=losses)
    dtype = torch.float32
    a, b = _build(legacy, dtype).train(), _build(section, dtype).train()
    assert list(a.state_dict()) == list(b.state_dict())
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name
    outs = []
    for model in (a, b):
        torch.manual_seed(5)  # CR-CTC's masks, the dynamic chunk draw
        outs.append(model(*_batch(dtype)))
    assert list(outs[0]) == list(outs[1])
    for key, value in outs[0].items():
        assert (value is None and outs[1][key] is None) or torch.equal(value, outs[1][key]), key


def _heads_keys(model) -> list:
    """The state_dict keys the model's heads give under their own names."""
    names = ["encoder", "decoder", "ctc", "predictor", "joint", "simple_am_proj",
             "simple_lm_proj"]
    return sorted(f"{n}.{k}" for n in names if hasattr(model, n)
                  for k in getattr(model, n).state_dict())


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(CONF_DIR) if f.endswith(".yaml")))
def test_every_config_keeps_its_losses_and_state_dict_keys(name):
    """Each conf/ file builds; its model_conf maps onto the registry as the older model
    read it; the losses add no state_dict key (checkpoints load strictly)."""
    configs = load_yaml(os.path.join(CONF_DIR, name))
    configs.update(input_dim=80, output_dim=50, cmvn_file=None)
    model = init_model(configs)
    mc = configs.get("model_conf") or {}
    weights = {n: loss.weight for n, loss in model.losses.items()}
    if "predictor" in configs or configs.get("model") == "transducer":
        assert weights == {"transducer": mc.get("transducer_weight", 1.0),
                           "ctc": mc.get("ctc_weight", 0.0),
                           "attention": mc.get("attention_weight", 0.0)}
        assert model.losses["transducer"].transducer_loss == mc.get("transducer_loss", "full")
    else:
        w = mc.get("ctc_weight", 0.5)
        want = {"attention": 1 - w, "ctc": w}
        if mc.get("cr_ctc"):
            want["cr_ctc"] = mc.get("cr_loss_scale", 0.2)
        assert weights == want
    att = model.losses["attention"]
    assert (att.lsm_weight, att.reverse_weight, att.length_normalized_loss) == (
        mc.get("lsm_weight", 0.0), mc.get("reverse_weight", 0.0),
        mc.get("length_normalized_loss", False))
    assert model.reverse_weight == mc.get("reverse_weight", 0.0)
    assert sorted(model.state_dict()) == _heads_keys(model)


def test_unknown_and_misplaced_options_are_errors_naming_them():
    with pytest.raises(ValueError, match=r"model_conf: unknown option\(s\) \['ctc_wieght'\]"):
        init_model(_config("conformer", {"ctc_wieght": 0.3}))
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['transducer_weight'\] for ASRModel"):
        init_model(_config("conformer", {"transducer_weight": 0.3}))
    with pytest.raises(ValueError, match=r"\['ctc_weight'\] are loss options"):
        init_model(dict(_config("conformer", {"ctc_weight": 0.3}), losses={"ctc": {}}))
    with pytest.raises(ValueError, match=r"losses.attention: unknown option\(s\) \['lsm'\]"):
        init_model(dict(_config("conformer", {}), losses={"attention": {"lsm": 0.1}}))
    with pytest.raises(ValueError, match="unknown loss 'ctcc'"):
        init_model(dict(_config("conformer", {}), losses={"ctcc": {}}))
    with pytest.raises(ValueError, match="ctc_weight must be in"):
        init_model(_config("conformer", {"ctc_weight": 1.5}))


class ToyLoss(Loss):
    """A loss this test registers: ``scale`` times the mean square distance of the valid
    encoder outputs from ``target`` + a learnt offset (a parameter of the loss itself,
    ``losses.toy.offset``)."""

    key = "loss_toy"

    def __init__(self, weight: float = 1.0, scale: float = 1.0, target: float = 0.0):
        super().__init__(weight)
        self.scale, self.target = scale, target
        self.offset = torch.nn.Parameter(torch.zeros(()))

    def compute(self, inputs: LossInputs):
        valid = inputs.encoder_mask.squeeze(1).unsqueeze(2)
        err = (inputs.encoder_out - self.target - self.offset).masked_fill(~valid, 0.0)
        return {self.key: self.scale * err.pow(2).sum() / (valid.sum() * err.size(2))}


def test_a_registered_toy_loss_trains_by_naming_it_in_a_config(monkeypatch):
    monkeypatch.setitem(LOSSES, "toy", ToyLoss)
    conf = dict(_config("conformer", {}), losses={"ctc": {"weight": 0.5},
                                                  "toy": {"weight": 2.0, "scale": 3.0,
                                                          "target": 2.0}})
    model = _build(conf, torch.float32).train()
    assert "losses.toy.offset" in model.state_dict()
    batch = _batch(torch.float32)
    out = model(*batch)
    assert set(out) == {"loss", "loss_ctc", "loss_toy"}
    enc, mask = model.encoder(*batch[:2])
    frames = mask.squeeze(1).sum()
    toy = 3.0 * sum(((enc[b, :n] - 2.0) ** 2).sum()
                    for b, n in enumerate(mask.squeeze(1).sum(1).tolist())) / (frames * 16)
    ctc = _ctc_by_hand(model, enc, mask.squeeze(1).sum(1), batch[2], batch[3])
    assert out["loss_toy"].item() == pytest.approx(toy.item(), rel=1e-5)
    assert out["loss"].item() == pytest.approx((0.5 * ctc + 2.0 * toy).item(), rel=1e-5)
    out["loss"].backward()
    mean = (enc.detach() * mask.squeeze(1).unsqueeze(2)).sum() / (frames * 16)
    # d loss / d offset = weight 2 * scale 3 * -2 * mean(enc - target - offset), offset 0
    assert model.losses["toy"].offset.grad.item() == pytest.approx(-12.0 * (mean.item() - 2.0),
                                                                   rel=1e-5)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    first = None
    for _ in range(30):
        opt.zero_grad()
        out = model(*batch)
        first = first if first is not None else out["loss_toy"].item()
        out["loss"].backward()
        opt.step()
    assert model(*batch)["loss_toy"].item() < 0.5 * first

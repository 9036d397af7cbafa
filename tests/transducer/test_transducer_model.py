"""TransducerModel: loss composition, heads, loss implementations, predictors, TorchScript."""
import copy

import pytest
import torch

from wenet.decode.transducer import rnnt_greedy_search
from wenet.models import init_model

VOCAB = 7


def _config(**model_conf):
    return {"encoder": "conformer",
            "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 16,
                             "num_blocks": 1, "cnn_module_kernel": 3, "dropout_rate": 0.0,
                             "positional_dropout_rate": 0.0},
            "decoder": "transformer",
            "decoder_conf": {"attention_heads": 2, "linear_units": 16, "num_blocks": 1,
                             "dropout_rate": 0.0, "positional_dropout_rate": 0.0},
            "model": "transducer", "predictor": "stateless",
            "predictor_conf": {"embed_size": 12, "context_size": 2},
            "joint_conf": {"join_dim": 16},
            "model_conf": model_conf, "input_dim": 10, "output_dim": VOCAB, "cmvn_file": None}


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    speech = torch.randn(3, 40, 10, generator=g)
    speech_lens = torch.tensor([40, 31, 25])
    text = torch.randint(1, VOCAB - 1, (3, 5), generator=g)
    text_lens = torch.tensor([5, 3, 4])
    for b in range(3):
        text[b, text_lens[b]:] = -1
    return speech, speech_lens, text, text_lens


def test_loss_is_the_weighted_sum_and_unneeded_heads_are_not_built():
    torch.manual_seed(0)
    full = init_model(_config(transducer_weight=0.6, ctc_weight=0.3, attention_weight=0.1))
    out = full(*_batch())
    want = 0.6 * out["loss_rnnt"] + 0.3 * out["loss_ctc"] + 0.1 * out["loss_att"]
    assert out["loss"].item() == pytest.approx(want.item(), rel=1e-6)
    assert set(out) == {"loss", "loss_att", "loss_ctc", "loss_rnnt", "th_accuracy"}
    torch.manual_seed(0)
    bare = init_model(_config())
    names = [n for n, _ in bare.named_parameters()]
    assert not any(n.startswith(("ctc.", "decoder.")) for n in names)
    out = bare(*_batch())
    assert out["loss_ctc"] is None and out["loss_att"] is None
    assert out["loss"].item() == pytest.approx(out["loss_rnnt"].item())
    with pytest.raises(RuntimeError, match="no CTC head"):
        bare.ctc_logprobs(torch.zeros(1, 2, 16))


def test_ours_equals_torchaudio_inside_the_model_and_training_reduces_loss():
    torch.manual_seed(0)
    ours = init_model(_config(ctc_weight=0.2, attention_weight=0.2))
    ta = init_model(_config(ctc_weight=0.2, attention_weight=0.2, rnnt_loss_impl="torchaudio"))
    ta.load_state_dict(ours.state_dict())
    batch = _batch()
    lo, lt = ours(*batch)["loss"], ta(*batch)["loss"]
    lo.backward()
    lt.backward()
    assert lo.item() == pytest.approx(lt.item(), abs=1e-5)
    for (name, p), q in zip(ours.named_parameters(), ta.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert ours.predictor.embed.weight.grad.abs().sum() > 0
    # a few optimiser steps on the batch, as the training loop does them
    opt = torch.optim.Adam(ours.parameters(), lr=3e-3)
    first = None
    for _ in range(8):
        opt.zero_grad()
        loss = ours(*batch)["loss"]
        first = loss.item() if first is None else first
        loss.backward()
        opt.step()
    assert ours(*batch)["loss"].item() < 0.8 * first


def test_fastemit_and_multiblank_options_reach_the_loss():
    torch.manual_seed(0)
    plain = init_model(_config())
    fe = init_model(_config(fastemit_lambda=0.5))
    fe.load_state_dict(plain.state_dict())
    batch = _batch(1)
    a, b = plain(*batch)["loss"], fe(*batch)["loss"]
    assert a.item() == pytest.approx(b.item(), abs=1e-6)  # FastEmit changes gradients only
    a.backward()
    b.backward()
    assert (plain.joint.out.weight.grad - fe.joint.out.weight.grad).abs().max() > 1e-4
    mb = init_model(_config(big_blank_durations=[2, 4]))
    assert mb.joint.out.out_features == VOCAB + 2 and mb.big_blank_ids() == [VOCAB, VOCAB + 1]
    assert torch.isfinite(mb(*batch)["loss"])
    with pytest.raises(ValueError, match="torchaudio"):
        init_model(_config(rnnt_loss_impl="torchaudio", fastemit_lambda=0.1))


@pytest.mark.parametrize("predictor,conf", [
    ("stateless", {"embed_size": 8, "context_size": 3}),
    ("stateless", {"embed_size": 8, "context_size": 1}),
    ("lstm", {"embed_size": 8, "hidden_size": 8, "num_layers": 2, "output_size": 8,
              "dropout": 0.0})])
def test_predictor_steps_equal_teacher_forced_forward(predictor, conf):
    cfg = _config()
    cfg["predictor"], cfg["predictor_conf"] = predictor, conf
    torch.manual_seed(0)
    model = init_model(cfg).eval()
    ys_in = torch.tensor([[0, 3, 1, 4, 4], [0, 2, 5, 1, 3]])
    full = model.predictor(ys_in)
    state = model.predictor.init_state(2, torch.device("cpu"))
    for j in range(ys_in.size(1)):
        out, state = model.predictor.forward_step(ys_in[:, j], state)
        torch.testing.assert_close(out, full[:, j], rtol=0, atol=1e-6)


def test_torchscript_greedy_equals_eager(tmp_path):
    """Encoder via the exported forward_encoder_chunk, then greedy search through the
    exported predictor/joint step methods: same hypotheses as the eager model."""
    torch.manual_seed(0)
    model = init_model(_config(ctc_weight=0.3, attention_weight=0.2)).eval()
    with torch.no_grad():
        model.joint.out.weight.mul_(4.0)
        model.joint.out.bias[0] -= 2.0  # fewer blanks: hypotheses with labels
    script = torch.jit.script(copy.deepcopy(model))
    script.save(str(tmp_path / "final.zip"))
    script = torch.jit.load(str(tmp_path / "final.zip")).eval()
    speech, lens, _, _ = _batch(2)
    emitted = 0
    for b in range(3):
        x = speech[b:b + 1, :lens[b]]
        enc, mask = model.encode(x, lens[b:b + 1])
        eager = rnnt_greedy_search(model, enc, mask.sum((1, 2)), 2)
        s_enc, _, _ = script.forward_encoder_chunk(x, 0, -1, torch.zeros(0, 0, 0, 0),
                                                   torch.zeros(0, 0, 0, 0))
        torch.testing.assert_close(s_enc, enc, rtol=1e-4, atol=1e-4)
        scripted = rnnt_greedy_search(script, s_enc, torch.tensor([s_enc.size(1)]), 2)
        assert scripted.hyps == eager.hyps
        emitted += len(eager.hyps[0])
    assert emitted > 3
    assert script.sos_symbol() == VOCAB - 1 and script.big_blank_durations() == []
    assert script.ctc_activation(s_enc).shape[-1] == VOCAB

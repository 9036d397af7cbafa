"""A whole training step of the issue-19 model (WeNet 2.2.1's small conformer,
conf/bench_wenet_small_conformer.yaml) equals the explicit reference computation:
loss and every gradient of a train-mode step with the library's attention (SDPA,
relative-position term folded into the dot product) against the same model whose
attention layers compute the explicit masked softmax (tests/transformer/test_sdpa.py),
and the optimizer's update against a plain for-loop Adam; float32, within 1e-5 relative.
"""
import os

import torch

from tests.common import CONF_DIR
from tests.transformer.test_sdpa import RTOL, ZERO_GRAD_BIASES, explicit_attention, rel_err
from wenet.models import init_model
from wenet.train.optim import build_optimizer
from wenet.transformer.attention import MultiHeadedAttention, RelPositionMultiHeadedAttention
from wenet.utils.file_utils import load_yaml

VOCAB = 40


def _model() -> torch.nn.Module:
    configs = load_yaml(os.path.join(CONF_DIR, "bench_wenet_small_conformer.yaml"))
    configs.update(input_dim=80, output_dim=VOCAB, cmvn_file=None)
    torch.manual_seed(0)
    return init_model(configs).train()


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([161, 150, 97, 64])  # padding in every utterance but the first
    feats = torch.randn(4, 161, 80, generator=g)
    tlen = torch.tensor([9, 7, 5, 3])
    target = torch.full((4, 9), -1, dtype=torch.long)
    for b in range(4):
        target[b, :tlen[b]] = torch.randint(2, VOCAB - 1, (int(tlen[b]),), generator=g)
    return feats, lengths, target, tlen


def _step(model, batch, seed: int):
    """Loss and gradients of one train-mode step (dropout on, drawn from ``seed``)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = model(*batch)["loss"]
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _global_rel_err(grads, ref_grads) -> float:
    """Relative error of the whole gradient (all parameters as one vector), in float64."""
    diff = torch.cat([(grads[n].double() - ref_grads[n].double()).flatten() for n in ref_grads])
    ref = torch.cat([ref_grads[n].double().flatten() for n in ref_grads])
    return float(diff.norm() / ref.norm())


def test_train_step_equals_explicit_attention_reference(monkeypatch, one_thread):
    """Loss and the whole gradient within 1e-5 relative of the explicit float32 path.

    Six blocks of float32 backward put single tensors at the rounding floor (the explicit
    path itself is ~1e-5 away from its float64 evaluation), so per tensor the library's
    gradient is asked to be no farther from the float64 explicit gradient than the
    explicit float32 one is (up to 1e-6), and the whole gradient closer."""
    model, batch = _model(), _batch()
    loss, grads = _step(model, batch, seed=3)
    for cls in (MultiHeadedAttention, RelPositionMultiHeadedAttention):
        monkeypatch.setattr(cls, "forward", explicit_attention)
    ref_loss, ref_grads = _step(model, batch, seed=3)
    assert sum(1 for n in grads if "self_attn" in n) > 0 and grads.keys() == ref_grads.keys()
    assert torch.isfinite(ref_loss) and rel_err(loss, ref_loss) < RTOL
    assert _global_rel_err(grads, ref_grads) < RTOL
    f64_loss, f64_grads = _step(model.double(), (batch[0].double(),) + batch[1:], seed=3)
    assert rel_err(loss.double(), f64_loss) < RTOL
    assert _global_rel_err(grads, f64_grads) <= _global_rel_err(ref_grads, f64_grads)
    for n in grads:
        if not n.endswith(ZERO_GRAD_BIASES):
            assert (rel_err(grads[n].double(), f64_grads[n])
                    <= rel_err(ref_grads[n].double(), f64_grads[n]) + 1e-6), n


def test_optimizer_update_equals_loop_adam(one_thread):
    """build_optimizer's Adam (fused kernel) against torch's per-tensor loop, 3 updates."""
    model = _model()
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    _, grads = _step(model, _batch(), seed=1)
    updates = []
    for make in (lambda ps: build_optimizer(ps, "adam", {"lr": 0.002}),
                 lambda ps: torch.optim.Adam(ps, lr=0.002, foreach=False, fused=False)):
        params = {n: torch.nn.Parameter(t.clone()) for n, t in start.items()}
        opt = make(list(params.values()))
        for k in range(3):
            for n, p in params.items():
                p.grad = grads[n] * (1.0 + 0.5 * k)
            opt.step()
        updates.append({n: (p.detach() - start[n]) for n, p in params.items()})
    for n in start:
        assert rel_err(updates[0][n], updates[1][n]) < RTOL, n

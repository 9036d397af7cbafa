"""A whole training step of the issue-19 model (WeNet 2.2.1's small conformer,
conf/bench_wenet_small_conformer.yaml) equals the explicit reference computation:
loss and every gradient of a train-mode step with the library's attention (SDPA,
relative-position term folded into the dot product) against the same model whose
attention layers compute the explicit masked softmax (tests/transformer/test_sdpa.py),
both evaluated in float64 and in float32; and the optimizer's update against a plain
for-loop Adam in float64.

float32 results are held to a bound stated from the model's size (tests/numerics.py),
never to another float32 path's rounding error, so the test does not depend on which
kernels the CPU runs.
"""
import math
import os

import pytest
import torch

from tests.common import CONF_DIR
from tests.numerics import assert_near_float64, rounding_bound
from tests.transformer.test_sdpa import ZERO_GRAD_BIASES, explicit_attention
from wenet.models import init_model
from wenet.train.optim import build_optimizer
from wenet.transformer.attention import MultiHeadedAttention, RelPositionMultiHeadedAttention
from wenet.utils.file_utils import load_yaml

VOCAB = 40


def _configs() -> dict:
    configs = load_yaml(os.path.join(CONF_DIR, "bench_wenet_small_conformer.yaml"))
    configs.update(input_dim=80, output_dim=VOCAB, cmvn_file=None)
    return configs


def _model() -> torch.nn.Module:
    configs = _configs()
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


def _flat(grads) -> torch.Tensor:
    """All gradients as one vector (the whole gradient), in a fixed order."""
    return torch.cat([grads[n].flatten() for n in sorted(grads)])


def _bound(dtype: torch.dtype, tensors: int = 1) -> float:
    """The model's rounding bound: its longest dot product inside a block is the
    feed-forward layer's (linear_units terms), and a gradient passes every encoder and
    decoder block (k = 1: LayerNorm before each block keeps them well conditioned).
    Asking each of ``tensors`` tensors to keep within it takes the largest of that many
    errors: a tail whose probability falls like exp(-k**2 / 2) needs k = sqrt(2 ln m)
    to cover m draws (the union bound), about 3.4 for the model's ~300 tensors."""
    configs = _configs()
    depth = configs["encoder_conf"]["num_blocks"] + configs["decoder_conf"]["num_blocks"]
    k = max(1.0, math.sqrt(2.0 * math.log(tensors)))
    return rounding_bound(dtype, configs["encoder_conf"]["linear_units"], depth, k)


def step_error_ratios(model, batch) -> dict:
    """Loss and gradients of the library's attention and of the explicit one, in float32
    and float64; asserts each float32 result within the float32 bound of the explicit
    float64 evaluation, and the two float64 evaluations within the float64 bound of each
    other. Returns the largest ratio error / bound of each kind (for the report)."""
    paths = {}
    for dtype in (torch.float32, torch.float64):
        model.to(dtype)
        cast = (batch[0].to(dtype),) + batch[1:]
        paths["lib", dtype] = _step(model, cast, seed=3)
        with pytest.MonkeyPatch.context() as mp:
            for cls in (MultiHeadedAttention, RelPositionMultiHeadedAttention):
                mp.setattr(cls, "forward", explicit_attention)
            paths["ref", dtype] = _step(model, cast, seed=3)
    model.float()
    ref_loss, ref_grads = paths["ref", torch.float64]
    assert torch.isfinite(ref_loss) and sum(1 for n in ref_grads if "self_attn" in n) > 0
    ratios = {}
    for (kind, dtype), (loss, grads) in paths.items():
        if (kind, dtype) == ("ref", torch.float64):
            continue
        assert grads.keys() == ref_grads.keys()
        bound, tag = _bound(dtype), f"{kind} {dtype}"
        ratios[tag + " loss"] = assert_near_float64(loss, ref_loss, bound, f"{tag} loss")
        ratios[tag + " gradient"] = assert_near_float64(
            _flat(grads), _flat(ref_grads), bound, f"{tag} whole gradient")
        worst, bound = 0.0, _bound(dtype, tensors=len(grads))
        for n in grads:
            if n.endswith(ZERO_GRAD_BIASES):  # exactly zero: rounding noise only, on the scale
                scale = ref_grads[n[:-len("bias")] + "weight"].norm()  # of the weight's gradient
                assert float(grads[n].double().norm()) <= bound * float(scale), (tag, n)
            else:
                worst = max(worst, assert_near_float64(grads[n], ref_grads[n], bound, f"{tag} {n}"))
        ratios[tag + " worst tensor"] = worst
    return ratios


def test_train_step_equals_explicit_attention_reference(one_thread):
    """The library's loss and gradients (float32 and float64) and the explicit path's
    float32 ones, each within its dtype's bound of the explicit float64 evaluation:
    the loss, the whole gradient as one vector, and each parameter tensor (the largest
    of ~300 errors, so with the union bound's factor). The float64 comparison catches any error of
    the library's attention above ~1e-13; the float32 ones show that float32 rounding on
    this CPU stays inside the bound (test_step_equivalence's margin, quoted in issue 32)."""
    step_error_ratios(_model(), _batch())


def test_optimizer_update_equals_loop_adam(one_thread):
    """build_optimizer's Adam (fused kernel) and torch's per-tensor loop, 3 float32
    updates, each within the float32 bound of the loop's float64 updates. The update is
    read as new minus old parameters, each rounded to its own ulp: that subtraction
    amplifies float32 rounding by ||parameter|| / ||update|| (its condition number), the
    k of each tensor's bound; n = 1 (elementwise), depth = the 3 steps."""
    model = _model()
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    _, grads = _step(model, _batch(), seed=1)
    updates = []
    for dtype, make in ((torch.float32, lambda ps: build_optimizer(ps, "adam", {"lr": 0.002})),
                        (torch.float32, lambda ps: torch.optim.Adam(ps, lr=0.002, foreach=False,
                                                                    fused=False)),
                        (torch.float64, lambda ps: torch.optim.Adam(ps, lr=0.002, foreach=False,
                                                                    fused=False))):
        params = {n: torch.nn.Parameter(t.clone().to(dtype)) for n, t in start.items()}
        opt = make(list(params.values()))
        for k in range(3):
            for n, p in params.items():
                p.grad = (grads[n] * (1.0 + 0.5 * k)).to(dtype)
            opt.step()
        updates.append({n: (p.detach().double() - start[n].double()) for n, p in params.items()})
    *float32_updates, exact = updates
    for n in start:
        cond = 1.0 + float(start[n].double().norm() / exact[n].norm())
        for update in float32_updates:
            assert_near_float64(update[n], exact[n], rounding_bound(torch.float32, 1, 3, cond), n)

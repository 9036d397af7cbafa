"""The second half of the guard: the model's modules moved to the ``meta`` device with
their inputs, so that a tensor made with an explicit ``device="cpu"`` (which the
default-device guard lets through) meets a meta tensor and raises. Whatever runs
without data-dependent Python control flow runs this way: every family's encoder
(training, with its random chunk; full context; chunked), attention decoder (both
directions), predictor and joint. Outputs must be meta tensors of exactly the shapes and dtypes of the CPU run
(their values are checked by the default-device guard in test_forward_loss.py)."""
from __future__ import annotations

from typing import Any, Callable, List

import pytest
import torch

from tests.device.families import FAMILIES, batch, build
from tests.device.guard import META


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread (see conftest.one_thread)."""


def _same_on_meta(model: torch.nn.Module, run: Callable[[torch.nn.Module, Any], Any],
                  inputs: List[torch.Tensor]) -> None:
    """``run(model, inputs)`` on the CPU and with model and inputs on meta: the same
    output shapes and dtypes, every output on meta. Leaves ``model`` on meta."""
    def flat(out):
        return [x for x in torch.utils._pytree.tree_flatten(out)[0] if isinstance(x, torch.Tensor)]
    torch.manual_seed(4)
    ref = flat(run(model, inputs))
    model.to(META)
    torch.manual_seed(4)
    got = flat(run(model, [x.to(META) for x in inputs]))
    assert [(x.device, x.shape, x.dtype) for x in got] == \
        [(META, x.shape, x.dtype) for x in ref]


def _decoder_inputs(model):
    g = torch.Generator().manual_seed(2)
    enc = torch.randn(3, 10, model.encoder.output_size(), generator=g)
    mask = torch.arange(10).view(1, 1, 10) < torch.tensor([10, 7, 5]).view(3, 1, 1)
    ys = torch.tensor([[7, 3, 4, 5], [7, 6, 7, 7], [7, 2, 5, 7]])
    return [enc, mask, ys, torch.tensor([4, 2, 3])]


def _joint(m, x):
    pred = m.joint.project_predictor(m.predictor(x[1]))
    return m.joint(m.joint.project_encoder(x[0]).unsqueeze(2), pred.unsqueeze(1))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_modules_on_meta(family):
    feats, lens, _, _ = batch()
    for mode, chunk in (("train", 0), ("eval", -1), ("eval", 8)):
        _same_on_meta(build(family).train(mode == "train"),
                      lambda m, x: m.encoder(x[0], x[1], chunk, -1), [feats, lens])
    model = build(family)
    enc, mask, ys, ys_lens = _decoder_inputs(model)
    if "attention" in model.losses and model.losses["attention"].active:
        _same_on_meta(model, lambda m, x: m.decoder(*x, x[2].flip(1), 0.3),
                      [enc, mask, ys, ys_lens])
    if hasattr(model, "joint"):
        _same_on_meta(build(family), _joint, [enc, ys.clamp(max=5)])

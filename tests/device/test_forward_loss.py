"""Every model family's forward, losses and gradients under the device guard
(tests/device/guard.py) equal the unguarded run exactly, in training and in eval mode:
no tensor of forward, loss or backward is made on a default device instead of the
input's, in float32 and in bf16 autocast. The families together use every loss of the
registry."""
from __future__ import annotations

from typing import Dict, Tuple

import pytest
import torch

from tests.device.families import FAMILIES, batch, build
from tests.device.guard import assert_identical, meta_default
from wenet.models import LOSSES
from wenet.train.device import autocast_for


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread (see conftest.one_thread)."""


def _train_step(model: torch.nn.Module, inputs, seed: int
                ) -> Tuple[Dict, Dict[str, torch.Tensor]]:
    """The output dict of one forward from RNG state ``seed`` and the gradients of its loss."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model(*inputs)
    out["loss"].backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return out, grads


def test_the_families_use_every_registered_loss():
    used = {name for family in FAMILIES for name in build(family).losses}
    assert used == set(LOSSES)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_training_forward_and_backward_make_no_tensor_off_the_inputs_device(family):
    model = build(family).train()
    if hasattr(model, "set_training_step"):
        model.set_training_step(4)  # the pruned loss half-way through its warm-up
    inputs = batch()  # made on the CPU, outside the guard
    ref = _train_step(model, inputs, seed=5)
    assert ref[1], "no gradient reached the parameters"
    with meta_default():
        guarded = _train_step(model, inputs, seed=5)
    assert_identical(ref, guarded, family)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_eval_forward_makes_no_tensor_off_the_inputs_device(family):
    model = build(family).eval()
    inputs = batch()
    with torch.no_grad():
        torch.manual_seed(5)  # a dynamic-chunk model draws its chunk in eval mode too
        ref = model(*inputs)
        torch.manual_seed(5)
        with meta_default():
            guarded = model(*inputs)
    assert_identical(ref, guarded, family)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_bf16_autocast_training_makes_no_tensor_off_the_inputs_device(family):
    """The same in bf16 autocast (train.py --use_amp bf16, what a GPU trains in), whose
    float32 islands (CTC, the transducer lattices) are entered by device type."""
    model = build(family).train()
    inputs = batch()
    with autocast_for(torch.device("cpu"), torch.bfloat16):
        ref = _train_step(model, inputs, seed=6)
        with meta_default():
            guarded = _train_step(model, inputs, seed=6)
    assert_identical(ref, guarded, family)

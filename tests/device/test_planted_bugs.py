"""The guard catches the bug it is for: a ``torch.zeros(n)`` without ``device=`` planted
in a loss or a search is invisible on the CPU (same outputs as without it) and raises
under the guard, in the CTC loss, the full and the pruned transducer loss, the CTC
search and the transducer search."""
from __future__ import annotations

import functools
from typing import Callable

import pytest
import torch

import wenet.decode.modes
import wenet.transducer.losses
from tests.device.families import batch, build
from tests.device.guard import assert_identical, meta_default
from tests.device.test_decode_modes import OPTIONS
from wenet.decode import decode
from wenet.transformer.ctc import CTC

WRONG_DEVICE = "Tensor on device meta is not on the expected device cpu"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread (see conftest.one_thread)."""


def planted(fn: Callable, lengths_at: int) -> Callable:
    """``fn`` whose positional argument ``lengths_at`` (a length vector) first gets
    ``torch.zeros(n)`` added: the device bug, made without ``device=``."""
    @functools.wraps(fn)
    def buggy(*args, **kwargs):
        args = list(args)
        lengths = args[lengths_at]
        args[lengths_at] = lengths + torch.zeros(lengths.size(0), dtype=lengths.dtype)
        return fn(*args, **kwargs)
    return buggy


def _loss(family: str):
    model = build(family).train()
    inputs = batch()

    def run():
        torch.manual_seed(3)
        return model(*inputs)
    return run


def _search(family: str, mode: str):
    model = build(family).eval()
    feats, lens, _, _ = batch()

    def run():
        with torch.no_grad():
            enc, mask = model.encode(feats, lens)
            return decode(model, enc, mask, [mode], OPTIONS)[mode].hyps
    return run


CASES = {  # what to plant the bug in, and a run that reaches it
    "ctc_loss": (CTC, "forward", 2, lambda: _loss("conformer_u2pp")),
    "full_transducer_loss": (wenet.transducer.losses, "rnnt_loss", 2,
                             lambda: _loss("transducer_multi_blank")),
    "pruned_transducer_loss": (wenet.transducer.losses, "pruned_rnnt_loss", 6,
                               lambda: _loss("transducer_pruned")),
    "ctc_search": (wenet.decode.modes, "ctc_greedy_search", 1,
                   lambda: _search("conformer_u2pp", "ctc_greedy_search")),
    "transducer_search": (wenet.decode.modes, "rnnt_greedy_search", 2,
                          lambda: _search("transducer_full", "rnnt_greedy_search")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_planted_default_device_tensor_raises_under_the_guard(monkeypatch, case):
    owner, name, lengths_at, make_run = CASES[case]
    run = make_run()
    with meta_default():
        clean = run()  # without the bug the guarded run passes ...
    monkeypatch.setattr(owner, name, planted(getattr(owner, name), lengths_at))
    assert_identical(clean, run())  # ... the bug does not show on the CPU ...
    with pytest.raises(RuntimeError, match=WRONG_DEVICE):
        with meta_default():  # ... and the guard finds it
            run()

"""bench/train_step.py --counts (bench/step_profile.py): the arithmetic and operator
count of a training step, checked on a model whose figures are known by hand (issue 34's
evidence that the Zipformer's cost is in its number of operators)."""
from typing import Dict

import torch

from bench import step_profile


class _Linear(torch.nn.Module):
    """feats (B, T, 4) -> linear to 3 -> sum: one addmm forward, one mm backward (the
    features need no gradient)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, feats, feats_lengths, target, target_lengths) -> Dict[str, torch.Tensor]:
        return {"loss": self.proj(feats).sum()}


def _batch(b: int, t: int) -> Dict[str, torch.Tensor]:
    return {"feats": torch.randn(b, t, 4), "feats_lengths": torch.full((b,), t),
            "target": torch.zeros(b, 1, dtype=torch.long), "target_lengths": torch.ones(b, dtype=torch.long)}


def test_counts_match_hand_computed_figures():
    model = _Linear()
    gflop, ops, products = step_profile.step_counts(model, [_batch(2, 5), _batch(2, 5)], 0)
    rows = 2 * 5
    # forward addmm (rows x 4) @ (4 x 3) and backward mm for the weight: 2 * rows * 4 * 3 each
    assert round(gflop * 1e9, 6) == 2 * (2 * rows * 4 * 3)
    assert products == 2
    assert ops >= products
    assert all(p.grad is None for p in model.parameters())  # gradients cleared after counting


def test_counts_set_the_schedules_position():
    seen = []

    class Scheduled(_Linear):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = type("E", (), {"set_batch_count": lambda _self, n: seen.append(n)})()

    step_profile.step_counts(Scheduled(), [_batch(1, 3)], 700)
    assert seen == [700]

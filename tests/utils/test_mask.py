"""Masks against hand-written and brute-force references."""
import torch

from wenet.utils.mask import (add_optional_chunk_mask, make_pad_mask, subsequent_chunk_mask,
                              subsequent_mask)


def _chunk_reference(size, chunk, left):
    ref = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        start = 0 if left < 0 else max((i // chunk - left) * chunk, 0)
        end = min((i // chunk + 1) * chunk, size)
        for j in range(start, end):
            ref[i, j] = True
    return ref


def test_make_pad_mask_hand_written():
    got = make_pad_mask(torch.tensor([5, 3, 2]))
    expected = torch.tensor([[0, 0, 0, 0, 0], [0, 0, 0, 1, 1], [0, 0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(got, expected)
    assert make_pad_mask(torch.tensor([2]), max_len=4).tolist() == [[False, False, True, True]]


def test_subsequent_mask_hand_written():
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(subsequent_mask(3), expected)


def test_subsequent_chunk_mask_hand_written():
    expected_all = torch.tensor([
        [1, 1, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(subsequent_chunk_mask(5, 2), expected_all)
    expected_left1 = torch.tensor([
        [1, 1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 1],
        [0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(subsequent_chunk_mask(6, 2, 1), expected_left1)


def test_subsequent_chunk_mask_brute_force():
    for size in (1, 7, 13):
        for chunk in (1, 3, 4, 20):
            for left in (-1, 0, 1, 2):
                assert torch.equal(subsequent_chunk_mask(size, chunk, left),
                                   _chunk_reference(size, chunk, left)), (size, chunk, left)


def _pad(lengths, t):
    return ~make_pad_mask(torch.tensor(lengths), t).unsqueeze(1)


def test_add_optional_chunk_mask_deterministic_paths():
    xs = torch.zeros(2, 10, 4)
    masks = _pad([10, 7], 10)
    # no chunking at all: the padding mask unchanged
    assert torch.equal(add_optional_chunk_mask(xs, masks, False, False, 0, 0, -1), masks)
    # static chunk 3 with 1 left chunk
    got = add_optional_chunk_mask(xs, masks, False, False, 0, 3, 1)
    assert torch.equal(got, masks & _chunk_reference(10, 3, 1).unsqueeze(0))
    # dynamic model decoded with chunk 4 and 2 left chunks
    got = add_optional_chunk_mask(xs, masks, True, False, 4, 0, 2)
    assert torch.equal(got, masks & _chunk_reference(10, 4, 2).unsqueeze(0))
    # dynamic model decoded with full context
    got = add_optional_chunk_mask(xs, masks, True, False, -1, 0, -1)
    assert torch.equal(got, masks & torch.ones(1, 10, 10, dtype=torch.bool))


def test_add_optional_chunk_mask_dynamic_draws_as_wenet():
    """Training (chunk 0): draw c in [1, T); c > T // 2 → full context, else
    chunk c % 25 + 1, and with dynamic left chunks a draw in [0, (T-1)//chunk)."""
    t = 60
    xs = torch.zeros(1, t, 4)
    masks = _pad([t], t)
    seen_full = seen_chunk = 0
    for seed in range(40):
        for dyn_left in (False, True):
            torch.manual_seed(seed)
            got = add_optional_chunk_mask(xs, masks, True, dyn_left, 0, 0, -1)
            torch.manual_seed(seed)
            draw = int(torch.randint(1, t, (1,)))
            if draw > t // 2:
                ref = torch.ones(t, t, dtype=torch.bool)
                seen_full += 1
            else:
                chunk = draw % 25 + 1
                left = -1
                if dyn_left:
                    left = int(torch.randint(0, (t - 1) // chunk, (1,)))
                ref = _chunk_reference(t, chunk, left)
                seen_chunk += 1
            assert torch.equal(got[0], ref), seed
    assert seen_full > 0 and seen_chunk > 0

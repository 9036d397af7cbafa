"""Attention masks: padding, causal, and U2 chunk masks (True = may attend)."""
from __future__ import annotations

import torch


def make_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    """(B,) lengths → (B, max_len) bool, True at padded positions.

    ``max_len`` 0 means ``lengths.max()``.
    """
    batch_size = lengths.size(0)
    max_len = max_len if max_len > 0 else int(lengths.max().item())
    seq_range = torch.arange(0, max_len, dtype=torch.int64, device=lengths.device)
    seq_range_expand = seq_range.unsqueeze(0).expand(batch_size, max_len)
    return seq_range_expand >= lengths.unsqueeze(-1)


def make_non_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    """(B,) lengths → (B, max_len) bool, True at real frames."""
    return ~make_pad_mask(lengths, max_len)


def subsequent_mask(size: int,
                    device: torch.device = torch.device("cpu")) -> torch.Tensor:
    """(size, size) lower-triangular bool mask: position i sees 0..i."""
    arange = torch.arange(size, device=device)
    return arange.unsqueeze(0) <= arange.unsqueeze(1)


def subsequent_chunk_mask(size: int, chunk_size: int, num_left_chunks: int = -1,
                          device: torch.device = torch.device("cpu")) -> torch.Tensor:
    """(size, size) bool mask for chunk-wise attention.

    Frame i (in chunk i // chunk_size) sees every frame of its own chunk and of
    the ``num_left_chunks`` chunks before it (all previous chunks when < 0).
    """
    chunk_idx = torch.arange(size, device=device) // chunk_size
    query = chunk_idx.unsqueeze(1)
    key = chunk_idx.unsqueeze(0)
    mask = key <= query
    if num_left_chunks >= 0:
        mask = mask & (key >= query - num_left_chunks)
    return mask


def add_optional_chunk_mask(xs: torch.Tensor, masks: torch.Tensor,
                            use_dynamic_chunk: bool, use_dynamic_left_chunk: bool,
                            decoding_chunk_size: int, static_chunk_size: int,
                            num_decoding_left_chunks: int) -> torch.Tensor:
    """Combine the padding mask (B, 1, T) with a chunk mask as U2 training/decoding does.

    With ``use_dynamic_chunk``: decoding_chunk_size < 0 means full context,
    > 0 a fixed chunk with ``num_decoding_left_chunks``, and 0 (training) draws
    a chunk size: full context when the draw from [1, T) exceeds T // 2
    (about half the time), else uniform in 1..25; with ``use_dynamic_left_chunk``
    the number of left chunks is drawn too. Without it, ``static_chunk_size`` > 0
    gives a fixed chunk mask, otherwise the padding mask is returned as is.
    Returns (B, T, T), or ``masks`` itself when no chunking applies.
    """
    if use_dynamic_chunk:
        max_len = xs.size(1)
        if decoding_chunk_size < 0:
            chunk_size = max_len
            num_left_chunks = -1
        elif decoding_chunk_size > 0:
            chunk_size = decoding_chunk_size
            num_left_chunks = num_decoding_left_chunks
        else:
            chunk_size = max_len
            num_left_chunks = -1
            if max_len > 1:
                # host-side draws from the CPU generator, on any device: no device sync
                draw = int(torch.randint(1, max_len, (1,), device="cpu").item())
                if draw <= max_len // 2:
                    chunk_size = draw % 25 + 1
                    if use_dynamic_left_chunk:
                        max_left_chunks = (max_len - 1) // chunk_size
                        if max_left_chunks > 0:
                            num_left_chunks = int(
                                torch.randint(0, max_left_chunks, (1,), device="cpu").item())
        chunk_masks = subsequent_chunk_mask(xs.size(1), chunk_size, num_left_chunks,
                                            xs.device)
        return masks & chunk_masks.unsqueeze(0)
    if static_chunk_size > 0:
        chunk_masks = subsequent_chunk_mask(xs.size(1), static_chunk_size,
                                            num_decoding_left_chunks, xs.device)
        return masks & chunk_masks.unsqueeze(0)
    return masks


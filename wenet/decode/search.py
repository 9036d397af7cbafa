"""Compatibility names for code written before the decode room was split (kept until
tests/export/test_onnx.py imports from the new modules); new code imports from
``wenet.decode`` (entry point), ``wenet.decode.ctc`` and ``wenet.decode.attention``."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from wenet.decode.attention import attention_beam_search, attention_rescoring
from wenet.decode.context import DecodeOptions
from wenet.decode.ctc import ctc_greedy_search, ctc_prefix_beam_search
from wenet.decode.modes import decode

__all__ = ["attention_beam_search", "attention_rescoring", "ctc_greedy_search",
           "ctc_prefix_beam_search", "decode_batch"]


def decode_batch(model, feats: torch.Tensor, feats_lengths: torch.Tensor, modes: Sequence[str],
                 beam_size: int = 10, ctc_weight: float = 0.0, reverse_weight: float = 0.0,
                 length_penalty: float = 0.0, decoding_chunk_size: int = -1,
                 num_decoding_left_chunks: int = -1, simulate_streaming: bool = False,
                 blank_skip_threshold: Optional[float] = 0.999) -> Dict[str, List[List[int]]]:
    """Deprecated: ``model.encode`` then :func:`wenet.decode.decode`; hypotheses only."""
    with torch.no_grad():
        encoder_out, encoder_mask = model.encode(feats, feats_lengths, decoding_chunk_size,
                                                 num_decoding_left_chunks, simulate_streaming)
    options = DecodeOptions(beam_size=beam_size, ctc_weight=ctc_weight,
                            reverse_weight=reverse_weight, length_penalty=length_penalty,
                            blank_skip_threshold=blank_skip_threshold)
    results = decode(model, encoder_out, encoder_mask, modes, options)
    return {mode: result.hyps for mode, result in results.items()}

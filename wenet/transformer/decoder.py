"""Attention decoders: left-to-right Transformer and the U2++ bidirectional pair."""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from wenet.transformer.attention import MultiHeadedAttention
from wenet.transformer.decoder_layer import DecoderLayer
from wenet.transformer.embedding import PositionalEncoding
from wenet.transformer.positionwise_feed_forward import PositionwiseFeedForward
from wenet.utils.mask import make_pad_mask, subsequent_mask


class TransformerDecoder(torch.nn.Module):
    """Token embedding + absolute PE → decoder blocks → LayerNorm → output projection."""

    def __init__(self, vocab_size: int, encoder_output_size: int, attention_heads: int = 4,
                 linear_units: int = 2048, num_blocks: int = 6, dropout_rate: float = 0.1,
                 positional_dropout_rate: float = 0.1, self_attention_dropout_rate: float = 0.0,
                 src_attention_dropout_rate: float = 0.0, input_layer: str = "embed",
                 use_output_layer: bool = True, normalize_before: bool = True):
        super().__init__()
        if input_layer != "embed":
            raise ValueError(f"decoder input_layer must be 'embed', got '{input_layer}'")
        attention_dim = encoder_output_size
        self.embed = torch.nn.Sequential(
            torch.nn.Embedding(vocab_size, attention_dim),
            PositionalEncoding(attention_dim, positional_dropout_rate),
        )
        self.normalize_before = normalize_before
        self.after_norm = torch.nn.LayerNorm(attention_dim, eps=1e-5)
        self.use_output_layer = use_output_layer
        self.output_layer = torch.nn.Linear(attention_dim, vocab_size)
        self.num_blocks = num_blocks
        self.decoders = torch.nn.ModuleList([
            DecoderLayer(
                attention_dim,
                MultiHeadedAttention(attention_heads, attention_dim, self_attention_dropout_rate),
                MultiHeadedAttention(attention_heads, attention_dim, src_attention_dropout_rate),
                PositionwiseFeedForward(attention_dim, linear_units, dropout_rate),
                dropout_rate, normalize_before)
            for _ in range(num_blocks)
        ])

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor,
                ys_in_pad: torch.Tensor, ys_in_lens: torch.Tensor,
                r_ys_in_pad: torch.Tensor = torch.empty(0), reverse_weight: float = 0.0
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Teacher-forced pass.

        memory (B, T, D), memory_mask (B, 1, T), ys_in_pad (B, L) starting with
        sos, ys_in_lens (B,). Returns (logits (B, L, V) before log-softmax,
        tensor(0.) in place of the right-to-left output, olens). The last two
        arguments exist so both decoder kinds share one signature.
        """
        maxlen = ys_in_pad.size(1)
        tgt_mask = ~make_pad_mask(ys_in_lens, maxlen).unsqueeze(1)  # (B, 1, L)
        tgt_mask = tgt_mask & subsequent_mask(maxlen, tgt_mask.device).unsqueeze(0)
        x, _ = self.embed(ys_in_pad)
        for layer in self.decoders:
            x, tgt_mask, memory, memory_mask = layer(x, tgt_mask, memory, memory_mask)
        if self.normalize_before:
            x = self.after_norm(x)
        if self.use_output_layer:
            x = self.output_layer(x)
        olens = tgt_mask.sum(1)
        return x, torch.tensor(0.0, device=x.device), olens  # no right-to-left output

    def forward_one_step(self, memory: torch.Tensor, memory_mask: torch.Tensor,
                         tgt: torch.Tensor, tgt_mask: torch.Tensor,
                         cache: Optional[List[torch.Tensor]] = None
                         ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """One search step: tgt (B, L) prefixes, tgt_mask (B, L, L), cache: per-layer
        outputs for the first L-1 positions (None on the first step).

        Returns (log-probabilities (B, V) for the next token, new per-layer cache).
        """
        x, _ = self.embed(tgt)
        new_cache: List[torch.Tensor] = []
        for i, layer in enumerate(self.decoders):
            c: Optional[torch.Tensor] = None if cache is None else cache[i]
            x, tgt_mask, memory, memory_mask = layer(x, tgt_mask, memory, memory_mask, cache=c)
            new_cache.append(x)
        if self.normalize_before:
            y = self.after_norm(x[:, -1])
        else:
            y = x[:, -1]
        if self.use_output_layer:
            y = torch.log_softmax(self.output_layer(y), dim=-1)
        return y, new_cache


class BiTransformerDecoder(torch.nn.Module):
    """U2++: a left-to-right decoder and a right-to-left one (``r_num_blocks`` blocks)
    over the same encoder output; the right one sees the reversed target."""

    def __init__(self, vocab_size: int, encoder_output_size: int, attention_heads: int = 4,
                 linear_units: int = 2048, num_blocks: int = 6, r_num_blocks: int = 0,
                 dropout_rate: float = 0.1, positional_dropout_rate: float = 0.1,
                 self_attention_dropout_rate: float = 0.0, src_attention_dropout_rate: float = 0.0,
                 input_layer: str = "embed", use_output_layer: bool = True,
                 normalize_before: bool = True):
        super().__init__()
        self.left_decoder = TransformerDecoder(
            vocab_size, encoder_output_size, attention_heads, linear_units, num_blocks,
            dropout_rate, positional_dropout_rate, self_attention_dropout_rate,
            src_attention_dropout_rate, input_layer, use_output_layer, normalize_before)
        self.right_decoder = TransformerDecoder(
            vocab_size, encoder_output_size, attention_heads, linear_units, r_num_blocks,
            dropout_rate, positional_dropout_rate, self_attention_dropout_rate,
            src_attention_dropout_rate, input_layer, use_output_layer, normalize_before)

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor,
                ys_in_pad: torch.Tensor, ys_in_lens: torch.Tensor,
                r_ys_in_pad: torch.Tensor = torch.empty(0), reverse_weight: float = 0.0
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As TransformerDecoder.forward; ``r_ys_in_pad`` is sos + the reversed
        target. The right decoder runs only when reverse_weight > 0, otherwise
        its output is tensor(0.). Returns (l_logits, r_logits, olens)."""
        l_x, _, olens = self.left_decoder(memory, memory_mask, ys_in_pad, ys_in_lens)
        r_x = torch.tensor(0.0, device=l_x.device)
        if reverse_weight > 0.0:
            r_x, _, olens = self.right_decoder(memory, memory_mask, r_ys_in_pad, ys_in_lens)
        return l_x, r_x, olens

    def forward_one_step(self, memory: torch.Tensor, memory_mask: torch.Tensor,
                         tgt: torch.Tensor, tgt_mask: torch.Tensor,
                         cache: Optional[List[torch.Tensor]] = None
                         ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Step search with the left-to-right decoder (see TransformerDecoder)."""
        return self.left_decoder.forward_one_step(memory, memory_mask, tgt, tgt_mask, cache)

"""Transformer and Conformer encoders with U2 chunk masks and chunk-by-chunk streaming."""
from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, List, Optional, Tuple

import torch

from wenet.transformer.attention import MultiHeadedAttention, RelPositionMultiHeadedAttention
from wenet.transformer.cmvn import GlobalCMVN
from wenet.transformer.convolution import ConvolutionModule
from wenet.transformer.embedding import PositionalEncoding, RelPositionalEncoding
from wenet.transformer.encoder_layer import ConformerEncoderLayer, TransformerEncoderLayer
from wenet.transformer.positionwise_feed_forward import PositionwiseFeedForward
from wenet.transformer.streaming_encoder import StreamingEncoder
from wenet.transformer.subsampling import SUBSAMPLING_CLASSES
from wenet.utils.common import get_activation
from wenet.utils.mask import add_optional_chunk_mask, make_pad_mask

POS_ENC_CLASSES = {"abs_pos": PositionalEncoding, "rel_pos": RelPositionalEncoding}


def _attention_class(pos_enc_layer_type: str,
                     selfattention_layer_type: Optional[str]) -> type:
    """WeNet picks the attention from the positional encoding (rel_pos → rel_selfattn,
    else selfattn); an explicit selfattention_layer_type that disagrees is logged."""
    if pos_enc_layer_type not in POS_ENC_CLASSES:
        raise ValueError(f"unknown pos_enc_layer_type '{pos_enc_layer_type}' "
                         f"(one of {sorted(POS_ENC_CLASSES)})")
    wanted = "rel_selfattn" if pos_enc_layer_type == "rel_pos" else "selfattn"
    if selfattention_layer_type is None:
        selfattention_layer_type = wanted
    if selfattention_layer_type not in ("selfattn", "rel_selfattn"):
        raise ValueError(f"unknown selfattention_layer_type '{selfattention_layer_type}' "
                         "(selfattn or rel_selfattn)")
    if selfattention_layer_type != wanted:
        logging.warning("selfattention_layer_type %s does not match pos_enc_layer_type %s; "
                        "using %s as WeNet does", selfattention_layer_type,
                        pos_enc_layer_type, wanted)
    if wanted == "rel_selfattn":
        return RelPositionMultiHeadedAttention
    return MultiHeadedAttention


def _last_frames(cache: torch.Tensor, keep: int) -> torch.Tensor:
    """The last ``keep`` frames (dim 2) of an attention cache: all when keep < 0,
    none when 0. A negative slice, so a traced graph keeps it dynamic."""
    if keep < 0:
        return cache
    if keep == 0:
        return cache[:, :, :0]
    return cache[:, :, -keep:]


def check_decoding_chunk_size(decoding_chunk_size: int) -> None:
    """Refuse a chunk size that decoding cannot use: -1 is full context, > 0 a chunk
    of that many output frames. 0 is what training passes to draw a random chunk
    size per batch (``use_dynamic_chunk``), so at inference it would make the output
    random; below -1 means nothing."""
    if decoding_chunk_size == -1 or decoding_chunk_size > 0:
        return
    raise ValueError(f"decoding_chunk_size must be -1 (full context) or a positive chunk "
                     f"size in output frames, got {decoding_chunk_size}"
                     + (" (0 draws a random chunk size per batch, as only training does)"
                        if decoding_chunk_size == 0 else ""))


class BaseEncoder(StreamingEncoder):
    """CMVN → subsampling + positional encoding → encoder blocks → final LayerNorm.

    Chunk options (U2): ``static_chunk_size`` > 0 trains/decodes with a fixed
    chunk; ``use_dynamic_chunk`` draws a chunk size per batch in training;
    ``use_dynamic_left_chunk`` also draws how many left chunks are visible.
    """

    def __init__(self, input_size: int, output_size: int = 256, attention_heads: int = 4,
                 linear_units: int = 2048, num_blocks: int = 6, dropout_rate: float = 0.1,
                 positional_dropout_rate: float = 0.1, attention_dropout_rate: float = 0.0,
                 input_layer: str = "conv2d", pos_enc_layer_type: str = "abs_pos",
                 normalize_before: bool = True, static_chunk_size: int = 0,
                 use_dynamic_chunk: bool = False, global_cmvn: Optional[GlobalCMVN] = None,
                 use_dynamic_left_chunk: bool = False, subsampling_channels: int = 0,
                 selfattention_layer_type: Optional[str] = None, activation_type: str = "relu"):
        super().__init__()
        if input_layer not in SUBSAMPLING_CLASSES:
            raise ValueError(f"unknown input_layer '{input_layer}' "
                             f"(one of {sorted(SUBSAMPLING_CLASSES)})")
        if pos_enc_layer_type not in POS_ENC_CLASSES:
            raise ValueError(f"unknown pos_enc_layer_type '{pos_enc_layer_type}' "
                             f"(one of {sorted(POS_ENC_CLASSES)})")
        self._output_size = output_size
        self.global_cmvn = global_cmvn
        self.embed = SUBSAMPLING_CLASSES[input_layer](
            input_size, output_size, dropout_rate,
            POS_ENC_CLASSES[pos_enc_layer_type](output_size, positional_dropout_rate),
            channels=subsampling_channels)
        self.normalize_before = normalize_before
        self.after_norm = torch.nn.LayerNorm(output_size, eps=1e-5)
        self.static_chunk_size = static_chunk_size
        self.use_dynamic_chunk = use_dynamic_chunk
        self.use_dynamic_left_chunk = use_dynamic_left_chunk
        attn_class = _attention_class(pos_enc_layer_type, selfattention_layer_type)

        def feed_forward() -> PositionwiseFeedForward:
            return PositionwiseFeedForward(output_size, linear_units, dropout_rate,
                                           get_activation(activation_type))

        self.encoders = torch.nn.ModuleList([
            self._make_block(attn_class(attention_heads, output_size, attention_dropout_rate),
                             feed_forward, activation_type, dropout_rate)
            for _ in range(num_blocks)
        ])

    def _make_block(self, attention: torch.nn.Module,
                    feed_forward: Callable[[], PositionwiseFeedForward],
                    activation_type: str, dropout_rate: float) -> torch.nn.Module:
        """One encoder block around ``attention``; ``feed_forward()`` makes a new FFN."""
        raise NotImplementedError

    def output_size(self) -> int:
        """Dimension of the encoder output."""
        return self._output_size

    def forward(self, xs: torch.Tensor, xs_lens: torch.Tensor,
                decoding_chunk_size: int = 0, num_decoding_left_chunks: int = -1
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Full-utterance forward: xs (B, T, D_in), xs_lens (B,) → (out (B, T', D), mask (B, 1, T')).

        ``decoding_chunk_size``: 0 = the training mask (a random chunk size per
        batch with use_dynamic_chunk: the loss path, in training and CV alike),
        < 0 full context, > 0 that chunk size with ``num_decoding_left_chunks``
        (only with use_dynamic_chunk; static_chunk_size otherwise rules).
        Decoding refuses 0 (``check_decoding_chunk_size``, called by ASRModel.encode).
        """
        self.check_input_frames(xs.size(1))
        masks = ~make_pad_mask(xs_lens, xs.size(1)).unsqueeze(1)  # (B, 1, T)
        if self.global_cmvn is not None:
            xs = self.global_cmvn(xs)
        xs, pos_emb, masks = self.embed(xs, masks)
        mask_pad = masks
        chunk_masks = add_optional_chunk_mask(xs, masks, self.use_dynamic_chunk,
                                              self.use_dynamic_left_chunk,
                                              decoding_chunk_size, self.static_chunk_size,
                                              num_decoding_left_chunks)
        for layer in self.encoders:
            xs, chunk_masks, _, _ = layer(xs, chunk_masks, pos_emb, mask_pad)
        if self.normalize_before:
            xs = self.after_norm(xs)
        return xs, masks

    def chunk_step(self, xs: torch.Tensor, offset: torch.Tensor, required_cache_size: int,
                   att_cache: torch.Tensor, cnn_cache: torch.Tensor,
                   att_mask: torch.Tensor = torch.ones((0, 0, 0), dtype=torch.bool)
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The streaming step (``StreamingEncoder.chunk_step``) of the U2 encoders.

        xs (1, T_in, D_in) holds the chunk's input frames with the subsampling's right
        context; att_cache (blocks, H, cache_t, 2*d_k), cnn_cache (blocks, 1, D, k-1)
        (empty on the first chunk). Positions and slices that depend on ``offset`` or
        the chunk length are tensor operations, so a traced graph keeps them dynamic.
        att_mask (1, 1, cache_t + T'): False on keys to ignore, e.g. the not yet
        filled slots of a fixed-size cache, whose positions (< 0) read PE row 0;
        empty: every key counts.
        """
        if self.global_cmvn is not None:
            xs = self.global_cmvn(xs)
        xs = self.embed.project(xs)
        cache_t = att_cache.size(2)
        # output positions of the keys: cache_t cached frames, then this chunk's
        positions = torch.arange(-cache_t, xs.size(1), device=xs.device) + offset
        pos_enc = self.embed.pos_enc
        pe_rows = pos_enc.rows_at(positions)
        xs, _ = pos_enc.add_encoding(xs, pe_rows[:, cache_t:])
        pos_emb = pos_enc.dropout(pe_rows)
        r_att_cache: List[torch.Tensor] = []
        r_cnn_cache: List[torch.Tensor] = []
        for i, layer in enumerate(self.encoders):
            layer_att_cache = att_cache[i:i + 1] if att_cache.size(0) > 0 else att_cache
            layer_cnn_cache = cnn_cache[i] if cnn_cache.size(0) > 0 else cnn_cache
            xs, _, new_att_cache, new_cnn_cache = layer(
                xs, att_mask, pos_emb, att_cache=layer_att_cache, cnn_cache=layer_cnn_cache)
            r_att_cache.append(_last_frames(new_att_cache, required_cache_size))
            r_cnn_cache.append(new_cnn_cache.unsqueeze(0))
        if self.normalize_before:
            xs = self.after_norm(xs)
        return xs, torch.cat(r_att_cache, dim=0), torch.cat(r_cnn_cache, dim=0)

    def is_streaming(self) -> bool:
        """Trained with a fixed chunk (static_chunk_size) or drawn ones (use_dynamic_chunk)."""
        return self.static_chunk_size > 0 or self.use_dynamic_chunk

    @torch.jit.unused
    def check_streaming_chunk(self, decoding_chunk_size: int) -> None:
        super().check_streaming_chunk(decoding_chunk_size)
        if not self.is_streaming():
            raise ValueError("chunk-by-chunk decoding needs a model trained with "
                             "static_chunk_size or use_dynamic_chunk")

    @torch.jit.unused
    def streaming_cache_shapes(self, required_cache_size: int
                               ) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        """att_cache (blocks, heads, required_cache_size, 2 * d_k): each block's keys and
        values side by side; cnn_cache (blocks, 1, D, causal_conv_frames())."""
        if required_cache_size <= 0:
            raise ValueError(f"required_cache_size must be > 0, got {required_cache_size}")
        attn = self.encoders[0].self_attn
        num_blocks = len(self.encoders)
        return ((num_blocks, attn.h, required_cache_size, 2 * attn.d_k),
                (num_blocks, 1, self._output_size, self.causal_conv_frames()))

    @torch.jit.unused
    def causal_conv_frames(self) -> int:
        conv = getattr(self.encoders[0], "conv_module", None)
        return int(conv.lorder) if conv is not None else 0


def _with_base_options(init: Callable[..., None]) -> Callable[..., None]:
    """For a subclass ``__init__(self, input_size, <own options>, **options)`` that hands
    ``options`` to ``BaseEncoder.__init__``: the signature that ``inspect.signature`` and
    ``help()`` report, and the model factory checks a config against, lists the base
    options too (keyword-only, after the subclass's own, whose defaults win)."""
    own = inspect.signature(init)
    params = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    params += [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for name, p in inspect.signature(BaseEncoder.__init__).parameters.items()
               if name not in own.parameters]
    init.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    return init


class TransformerEncoder(BaseEncoder):
    """Stack of Transformer blocks (self-attention + FFN)."""

    @_with_base_options
    def __init__(self, input_size: int, pos_enc_layer_type: str = "abs_pos",
                 activation_type: str = "relu", **options: Any):
        super().__init__(input_size, pos_enc_layer_type=pos_enc_layer_type,
                         activation_type=activation_type, **options)

    def _make_block(self, attention: torch.nn.Module,
                    feed_forward: Callable[[], PositionwiseFeedForward],
                    activation_type: str, dropout_rate: float) -> torch.nn.Module:
        return TransformerEncoderLayer(self._output_size, attention, feed_forward(),
                                       dropout_rate, self.normalize_before)


class ConformerEncoder(BaseEncoder):
    """Stack of Conformer blocks (macaron FFN, self-attention, convolution module)."""

    @_with_base_options
    def __init__(self, input_size: int, pos_enc_layer_type: str = "rel_pos",
                 activation_type: str = "swish", macaron_style: bool = True,
                 use_cnn_module: bool = True, cnn_module_kernel: int = 15,
                 causal: bool = False, cnn_module_norm: str = "batch_norm", **options: Any):
        # read by _make_block while BaseEncoder.__init__ builds the blocks
        self.macaron_style = macaron_style
        self.use_cnn_module = use_cnn_module
        self.cnn_module_kernel = cnn_module_kernel
        self.causal = causal
        self.cnn_module_norm = cnn_module_norm
        super().__init__(input_size, pos_enc_layer_type=pos_enc_layer_type,
                         activation_type=activation_type, **options)

    def _make_block(self, attention: torch.nn.Module,
                    feed_forward: Callable[[], PositionwiseFeedForward],
                    activation_type: str, dropout_rate: float) -> torch.nn.Module:
        size = self._output_size
        ffn = feed_forward()
        macaron = feed_forward() if self.macaron_style else None
        conv = ConvolutionModule(size, self.cnn_module_kernel, get_activation(activation_type),
                                 self.cnn_module_norm, self.causal) if self.use_cnn_module else None
        return ConformerEncoderLayer(size, attention, ffn, macaron, conv, dropout_rate,
                                     self.normalize_before)

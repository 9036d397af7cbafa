"""The encoder interface every encoder declares, and the one chunk-by-chunk loop.

:class:`StreamingEncoder` is what the model, the exports (TorchScript, ONNX) and the
streaming decoder rely on: ``output_size()``, ``subsampling_rate()``,
``right_context()``, ``forward(xs, xs_lens, decoding_chunk_size,
num_decoding_left_chunks)`` for whole utterances, and for streaming ``chunk_step``
(one chunk with its caches; each encoder its own), ``forward_chunk`` (its int-offset
entry) and ``forward_chunk_by_chunk`` (the simulation of a stream, written once here).

:class:`ChunkWindow` (``wenet.utils.chunk_window``, torch-free so that the ONNX runtime
shares it) is the one place the chunk arithmetic lives: how many input
frames a chunk of ``chunk_size`` output frames reads, how far the next chunk starts,
and how many output frames of attention cache ``num_left_chunks`` keep.

The cache layout. A stream carries two tensors, ``att_cache`` and ``cnn_cache``, both
empty (shape (0, 0, 0, 0)) before the first chunk; ``chunk_step`` returns their next
values. What their dimensions mean is the encoder's own (its ``chunk_step`` and
``streaming_cache_shapes`` say); callers only pass them back, or allocate them at
``streaming_cache_shapes(required_cache_size)`` for a fixed-size-cache runtime (ONNX).
"""
from __future__ import annotations

import abc
from typing import List, Tuple

import torch

from wenet.utils.chunk_window import ChunkWindow


def _chunk_offset(xs: torch.Tensor, offset: int) -> torch.Tensor:
    """``forward_chunk``'s ``offset`` as the int64 tensor (1,) that ``chunk_step`` takes;
    ValueError unless ``xs`` holds one utterance and ``offset`` >= 0."""
    if xs.size(0) != 1:
        raise ValueError(f"forward_chunk handles one utterance, got batch {xs.size(0)}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    return torch.full((1,), offset, dtype=torch.long, device=xs.device)


class StreamingEncoder(torch.nn.Module, abc.ABC):
    """An encoder that runs on whole utterances and chunk by chunk with caches.

    An encoder implements ``output_size``, ``forward``, ``chunk_step``,
    ``is_streaming``, ``streaming_cache_shapes`` and ``causal_conv_frames``, and has an
    ``embed`` (its front end) with int attributes ``subsampling_rate`` and
    ``right_context`` for the whole encoder. It extends ``check_streaming_chunk`` and
    ``min_input_frames`` where its own rules differ.
    """

    @abc.abstractmethod
    def output_size(self) -> int:
        """Dimension of the encoder output."""

    @abc.abstractmethod
    def forward(self, xs: torch.Tensor, xs_lens: torch.Tensor, decoding_chunk_size: int = 0,
                num_decoding_left_chunks: int = -1) -> Tuple[torch.Tensor, torch.Tensor]:
        """xs (B, T, D_in), xs_lens (B,) -> (out (B, T', D), mask (B, 1, T')).
        ``decoding_chunk_size``: 0 the training choice, < 0 full context, > 0 that
        chunk size in output frames with ``num_decoding_left_chunks``."""

    @abc.abstractmethod
    def chunk_step(self, xs: torch.Tensor, offset: torch.Tensor, required_cache_size: int,
                   att_cache: torch.Tensor, cnn_cache: torch.Tensor,
                   att_mask: torch.Tensor = torch.ones((0, 0, 0), dtype=torch.bool)
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk xs (1, T_in, D_in) after ``offset`` (int64 (1,)) output frames, given
        the caches; keeps ``required_cache_size`` output frames of attention cache
        (< 0 all, 0 none). Returns (ys (1, T', D), att_cache, cnn_cache). Written with
        tensor operations on the offset and lengths, so a traced graph (ONNX) stays
        dynamic; ``att_mask`` (1, 1, cache + T') False on cache slots to ignore."""

    @abc.abstractmethod
    def is_streaming(self) -> bool:
        """Whether the encoder was trained to run chunk by chunk (its chunked output
        then matches its chunk-masked full forward)."""

    @abc.abstractmethod
    def streaming_cache_shapes(self, required_cache_size: int
                               ) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        """Shapes of (att_cache, cnn_cache) holding ``required_cache_size`` (> 0) output
        frames of left context: what a fixed-size-cache runtime allocates."""

    @abc.abstractmethod
    def causal_conv_frames(self) -> int:
        """Input frames the causal convolutions keep from earlier chunks (kernel - 1),
        0 when they are not causal or there are none: no convolution cache then."""

    def subsampling_rate(self) -> int:
        """Input frames per output frame."""
        return self.embed.subsampling_rate

    def right_context(self) -> int:
        """Input frames the front end reads past those of an output frame's position."""
        return self.embed.right_context

    def min_input_frames(self) -> int:
        """Input frames one output frame needs (shorter input has no output)."""
        return self.embed.right_context + 1

    def check_input_frames(self, num_frames: int) -> None:
        """ValueError when ``num_frames`` input frames give no output frame."""
        if num_frames < self.min_input_frames():
            raise ValueError(f"input of {num_frames} frames is shorter than the "
                             f"{self.min_input_frames()} frames one output frame needs")

    @torch.jit.unused
    def chunk_window(self, decoding_chunk_size: int,
                     num_decoding_left_chunks: int = -1) -> ChunkWindow:
        """The chunks this encoder reads for ``decoding_chunk_size`` output frames."""
        return ChunkWindow(self.subsampling_rate(), self.right_context(), decoding_chunk_size,
                           num_decoding_left_chunks)

    @torch.jit.unused
    def check_streaming_chunk(self, decoding_chunk_size: int) -> None:
        """ValueError unless this encoder can run chunk by chunk with chunks of
        ``decoding_chunk_size`` output frames (encoders add their own rules)."""
        if decoding_chunk_size <= 0:
            raise ValueError(f"chunk-by-chunk decoding needs decoding_chunk_size > 0, "
                             f"got {decoding_chunk_size}")

    def forward_chunk(self, xs: torch.Tensor, offset: int, required_cache_size: int,
                      att_cache: torch.Tensor = torch.zeros(0, 0, 0, 0),
                      cnn_cache: torch.Tensor = torch.zeros(0, 0, 0, 0)
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encode one chunk of a single utterance given the caches of the previous chunks
        (empty on the first): ``chunk_step`` with ``offset`` (output frames produced so
        far) an int. The runtimes call this (``forward_encoder_chunk``)."""
        return self.chunk_step(xs, _chunk_offset(xs, offset), required_cache_size, att_cache,
                               cnn_cache)

    @torch.jit.unused
    def forward_chunk_by_chunk(self, xs: torch.Tensor, decoding_chunk_size: int,
                               num_decoding_left_chunks: int = -1
                               ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Simulate streaming on one utterance (1, T, D_in): feed chunks of
        ``decoding_chunk_size`` output frames with caches, concatenate the outputs.

        Equals ``forward`` with the same chunk size and left chunks when the encoder
        is streaming (causal convolutions, chunk-trained). Returns (ys (1, T', D),
        all-True mask (1, 1, T')).
        """
        self.check_streaming_chunk(decoding_chunk_size)
        chunks = self.chunk_window(decoding_chunk_size, num_decoding_left_chunks)
        num_frames = xs.size(1)
        att_cache = torch.zeros((0, 0, 0, 0), device=xs.device)
        cnn_cache = torch.zeros((0, 0, 0, 0), device=xs.device)
        outputs: List[torch.Tensor] = []
        offset = 0
        for cur in chunks.starts(num_frames, self.min_input_frames()):
            ys, att_cache, cnn_cache = self.forward_chunk(
                xs[:, cur:cur + chunks.window], offset, chunks.required_cache_size,
                att_cache, cnn_cache)
            outputs.append(ys)
            offset += ys.size(1)
        if not outputs:
            raise ValueError(f"utterance of {num_frames} frames is shorter than the "
                             f"{self.min_input_frames()} frames one output frame needs")
        ys = torch.cat(outputs, 1)
        masks = torch.ones((1, 1, ys.size(1)), device=ys.device, dtype=torch.bool)
        return ys, masks

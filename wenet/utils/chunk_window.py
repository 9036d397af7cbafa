"""The chunk arithmetic of streaming encoders, with no torch: the eager and TorchScript
models (``wenet.transformer.streaming_encoder``), the streaming server and the ONNX
runtime cut a stream into chunks by this one rule."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkWindow:
    """How a stream of input frames is cut into chunks of ``chunk_size`` output frames.

    The subsampling reads ``right_context + 1`` input frames for its first output frame
    and ``subsampling_rate`` more for each further one, so a chunk reads ``window``
    frames, and consecutive chunks start ``stride`` frames apart (their windows overlap
    by the right context). ``required_cache_size`` output frames of attention cache are
    kept between chunks: ``chunk_size * num_left_chunks``, negative meaning all.
    """

    subsampling_rate: int
    right_context: int
    chunk_size: int              # output frames per chunk, > 0
    num_left_chunks: int = -1    # chunks of attention cache kept; < 0 all

    def __post_init__(self) -> None:
        if self.chunk_size <= 0:
            raise ValueError(f"chunk_size must be > 0 output frames, got {self.chunk_size}")

    @property
    def context(self) -> int:
        """Input frames of the first output frame."""
        return self.right_context + 1

    @property
    def stride(self) -> int:
        """Input frames between the starts of two consecutive chunks."""
        return self.subsampling_rate * self.chunk_size

    @property
    def window(self) -> int:
        """Input frames one chunk reads."""
        return (self.chunk_size - 1) * self.subsampling_rate + self.context

    @property
    def required_cache_size(self) -> int:
        """Output frames of attention cache kept for the next chunk (< 0: all)."""
        return self.chunk_size * self.num_left_chunks

    def starts(self, num_frames: int, min_frames: int) -> range:
        """Start frames of the chunks of an utterance of ``num_frames`` frames: every
        stride while at least ``min_frames`` frames (one output frame's worth) are left;
        the last chunks read what is left."""
        return range(0, num_frames - min_frames + 1, self.stride)

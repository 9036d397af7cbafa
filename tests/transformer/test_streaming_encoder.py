"""The streaming base: every registered encoder is a complete StreamingEncoder, and the one
chunk-window formula gives the sizes counted by hand and read by the real front ends."""
import pytest
import torch

from wenet.models import ENCODERS
from wenet.transformer.encoder import ConformerEncoder, TransformerEncoder
from wenet.transformer.streaming_encoder import ChunkWindow, StreamingEncoder
from wenet.zipformer.encoder import ZipformerEncoder

ZIP_TINY = dict(downsampling_factor=[1, 2], num_encoder_layers=1, encoder_dim=[16, 24],
                encoder_unmasked_dim=[12, 16], feedforward_dim=32, num_heads=2,
                query_head_dim=4, value_head_dim=3, pos_head_dim=2, pos_dim=8,
                cnn_module_kernel=[5, 3], frontend_channels=[2, 4, 8], chunk_size=[4, -1],
                left_context_frames=[8, -1])


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models on one thread (see conftest.one_thread)."""


def _conformer(input_layer="conv2d", causal=True):
    torch.manual_seed(0)
    return ConformerEncoder(20, output_size=32, attention_heads=4, linear_units=48,
                            num_blocks=2, cnn_module_kernel=5, causal=causal,
                            input_layer=input_layer, use_dynamic_chunk=True).eval()


def test_every_registered_encoder_implements_the_interface():
    for name, cls in ENCODERS.items():
        assert issubclass(cls, StreamingEncoder), name
        assert not cls.__abstractmethods__, (name, cls.__abstractmethods__)
    encoders = [_conformer(), TransformerEncoder(20, output_size=16, attention_heads=2,
                                                 linear_units=16, num_blocks=1),
                ZipformerEncoder(20, causal=True, **ZIP_TINY)]
    for enc in encoders:
        assert isinstance(enc, StreamingEncoder)
    # (subsampling_rate, right_context, input frames of one output frame), by hand
    assert [(e.subsampling_rate(), e.right_context(), e.min_input_frames())
            for e in encoders] == [(4, 6, 7), (4, 6, 7), (4, 10, 9)]


@pytest.mark.parametrize("rate,right,chunk,left,stride,window,required", [
    (4, 6, 16, 4, 64, 67, 64),    # conv2d: 15 * 4 + 7 frames for 16 outputs
    (6, 10, 4, 2, 24, 29, 8),     # conv2d6: 3 * 6 + 11
    (8, 14, 1, -1, 8, 15, -1),    # conv2d8, one output per chunk, all left context
    (4, 10, 8, 0, 32, 39, 0),     # the Zipformer's front end, no cache kept
])
def test_chunk_window_by_hand(rate, right, chunk, left, stride, window, required):
    w = ChunkWindow(rate, right, chunk, left)
    assert (w.context, w.stride, w.window, w.required_cache_size) == (
        right + 1, stride, window, required)


def test_chunk_starts_stop_when_no_output_frame_is_left():
    w = ChunkWindow(4, 6, 4)  # stride 16, window 19
    assert list(w.starts(40, 7)) == [0, 16, 32]   # 8 frames left at 32: one output
    assert list(w.starts(38, 7)) == [0, 16]       # 6 left at 32: none
    assert list(w.starts(6, 7)) == []
    with pytest.raises(ValueError, match="chunk_size must be > 0"):
        ChunkWindow(4, 6, 0)


@pytest.mark.parametrize("input_layer,chunk", [("conv2d", 4), ("conv2d6", 3), ("conv2d8", 2)])
def test_window_is_what_a_chunk_of_outputs_reads(input_layer, chunk):
    """A chunk of exactly ``window`` input frames gives ``chunk`` output frames, one frame
    fewer gives chunk - 1: the formula matches the real front ends."""
    enc = _conformer(input_layer)
    w = enc.chunk_window(chunk, 2)
    x = torch.randn(1, w.window, 20, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert enc.forward_chunk(x, 0, w.required_cache_size)[0].size(1) == chunk
        assert enc.forward_chunk(x[:, :-1], 0, w.required_cache_size)[0].size(1) == chunk - 1


def test_cache_shapes_are_those_forward_chunk_returns():
    enc = _conformer()
    w = enc.chunk_window(4, 2)
    att_shape, cnn_shape = enc.streaming_cache_shapes(w.required_cache_size)
    # 2 blocks, 4 heads, 8 cached frames, keys and values of d_k 8; kernel 5 keeps 4 frames
    assert (att_shape, cnn_shape) == ((2, 4, 8, 16), (2, 1, 32, 4))
    assert enc.causal_conv_frames() == 4 and _conformer(causal=False).causal_conv_frames() == 0
    x = torch.randn(1, 200, 20, generator=torch.Generator().manual_seed(2))
    att, cnn = torch.zeros(0, 0, 0, 0), torch.zeros(0, 0, 0, 0)
    offset = 0
    with torch.no_grad():
        for cur in list(w.starts(x.size(1), enc.min_input_frames()))[:3]:
            ys, att, cnn = enc.forward_chunk(x[:, cur:cur + w.window], offset,
                                             w.required_cache_size, att, cnn)
            offset += ys.size(1)
    assert (tuple(att.shape), tuple(cnn.shape)) == (att_shape, cnn_shape)


def test_zipformer_reads_nine_frames_for_its_last_output():
    """The Zipformer's output frame needs 9 input frames, fewer than right_context + 1:
    the loop of forward_chunk_by_chunk starts a last chunk on 9 remaining frames."""
    enc = ZipformerEncoder(20, causal=True, **ZIP_TINY).eval()
    w = enc.chunk_window(2)
    num = 2 * w.stride + 9  # two chunks, then 9 frames
    x = torch.randn(1, num, 20, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full, _ = enc(x, torch.tensor([num]), 2, -1)
        streamed, _ = enc.forward_chunk_by_chunk(x, 2)
    assert full.size(1) == streamed.size(1) == 2 * 2 + 1
    assert (streamed - full).abs().max().item() < 1e-5
    with pytest.raises(ValueError, match="8 frames is shorter than the 9"):
        enc(x[:, :8], torch.tensor([8]))

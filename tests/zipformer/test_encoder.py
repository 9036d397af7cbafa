"""ZipformerEncoder: frame rates of the front end, stacks and output; padding never
changes valid outputs; causal chunk-by-chunk streaming equals the chunk-masked full
forward; fixed-size caches (as ONNX feeds them) equal growing ones."""
import pytest
import torch

from wenet.zipformer.encoder import ZipformerEncoder
from wenet.zipformer.frontend import ZipformerFrontEnd
from wenet.zipformer.stack import SimpleDownsample, SimpleUpsample, full_dim_output

TINY = dict(downsampling_factor=[1, 2, 4, 2], num_encoder_layers=[1, 1, 2, 1],
            encoder_dim=[16, 24, 32, 24], encoder_unmasked_dim=[12, 16, 16, 16],
            feedforward_dim=[32, 48, 64, 48], num_heads=[2, 2, 4, 2], query_head_dim=4,
            value_head_dim=3, pos_head_dim=2, pos_dim=8, cnn_module_kernel=[5, 3, 3, 5],
            frontend_channels=[2, 4, 8], chunk_size=[8, 16, -1],
            left_context_frames=[16, -1])


def tiny_encoder(causal: bool, seed: int = 0, **over) -> ZipformerEncoder:
    torch.manual_seed(seed)
    return ZipformerEncoder(20, causal=causal, **{**TINY, **over}).eval()


def test_front_end_makes_50_hz_frames():
    fe = ZipformerFrontEnd(20, 8).eval()
    assert (fe.subsampling_rate, fe.right_context) == (4, 10)
    for t in (9, 10, 11, 40, 57):
        assert fe(torch.randn(1, t, 20)).shape == (1, (t - 7) // 2, 8)
    # output frame j reads input frames 2j .. 2j + 8 only
    x = torch.randn(1, 40, 20)
    y = fe(x)
    x2 = x.clone()
    x2[:, 2 * 5 + 9:] += 1.0
    assert torch.equal(fe(x2)[:, :6], y[:, :6]) and not torch.equal(fe(x2)[:, 6], y[:, 6])
    relu = ZipformerFrontEnd(20, 8, activation="relu")
    assert sum(isinstance(m, torch.nn.ReLU) for m in relu.conv) == 3
    with pytest.raises(ValueError, match="frontend_activation"):
        ZipformerFrontEnd(20, 8, activation="gelu")


def test_downsample_repeats_each_utterances_last_frame_and_upsample_repeats():
    down = SimpleDownsample(3)
    with torch.no_grad():
        down.bias.copy_(torch.tensor([0.5, -1.0, 2.0]))
    w = torch.softmax(down.bias.detach(), 0)
    x = torch.randn(2, 7, 4)
    lengths = torch.tensor([7, 4])
    y = down(x, lengths)
    assert y.shape == (2, 3, 4)
    for b, n in enumerate(lengths.tolist()):
        frames = [x[b, min(t, n - 1)] for t in range(9)]
        for g in range(3):
            want = sum(w[k] * frames[3 * g + k] for k in range(3))
            assert torch.allclose(y[b, g], want, atol=1e-6)
    up = SimpleUpsample(3)(y, 7)
    assert up.shape == (2, 7, 4) and torch.equal(up[:, 6], y[:, 2]) and torch.equal(up[:, 3], y[:, 1])


def test_full_dim_output_takes_extra_channels_from_the_latest_wider_stack():
    a, b, c = torch.full((1, 2, 4), 1.0), torch.full((1, 2, 6), 2.0), torch.full((1, 2, 3), 3.0)
    out = full_dim_output([a, b, c])
    assert out[0, 0].tolist() == [3, 3, 3, 2, 2, 2]


@pytest.mark.parametrize("causal", [False, True])
def test_frame_rates_of_every_stack_and_the_output(causal, one_thread):
    enc = tiny_encoder(causal)
    seen = {}
    for i, stack in enumerate(enc.stacks):
        stack.layers[0].register_forward_hook(
            lambda m, inp, out, i=i: seen.__setitem__(i, inp[0].shape[1]))
    for t in (9, 23, 61, 100):
        out, mask = enc(torch.randn(1, t, 20), torch.tensor([t]), -1)
        t50 = (t - 7) // 2
        assert out.shape == (1, -(-t50 // 2), 32) and mask.shape == (1, 1, out.size(1))
        assert seen == {i: -(-t50 // d) for i, d in enumerate(TINY["downsampling_factor"])}
    assert enc.output_size() == 32
    with pytest.raises(ValueError, match="shorter"):
        enc(torch.randn(1, 8, 20), torch.tensor([8]))


@pytest.mark.parametrize("causal,chunk", [(False, -1), (True, -1), (True, 4), (True, 2)])
def test_padding_never_changes_valid_outputs(causal, chunk, one_thread):
    enc = tiny_encoder(causal)
    lengths = [83, 60, 31, 12]
    x = torch.randn(len(lengths), max(lengths), 20)
    with torch.no_grad():
        out, mask = enc(x, torch.tensor(lengths), chunk, 1)
        for b, n in enumerate(lengths):
            alone, alone_mask = enc(x[b:b + 1, :n], torch.tensor([n]), chunk, 1)
            valid = alone.size(1)
            assert int(mask[b].sum()) == valid == int(alone_mask.sum())
            assert torch.allclose(out[b, :valid], alone[0], atol=1e-5), (b, n)


@pytest.mark.parametrize("chunk,left", [(2, -1), (2, 1), (4, 2), (4, 0), (6, 1)])
def test_causal_chunk_by_chunk_equals_chunk_masked_forward(chunk, left, one_thread):
    enc = tiny_encoder(True, seed=1)
    for t in (140, 97, 9):
        x = torch.randn(1, t, 20)
        with torch.no_grad():
            full, _ = enc(x, torch.tensor([t]), chunk, left)
            streamed, _ = enc.forward_chunk_by_chunk(x, chunk, left)
        assert streamed.shape == full.shape
        assert (streamed - full).abs().max().item() < 1e-5, (t, chunk, left)


def test_streaming_differs_from_full_context_and_needs_whole_groups(one_thread):
    enc = tiny_encoder(True)
    x = torch.randn(1, 120, 20)
    with torch.no_grad():
        full, _ = enc(x, torch.tensor([120]), -1)
        streamed, _ = enc.forward_chunk_by_chunk(x, 2, -1)
    assert (streamed - full).abs().max().item() > 1e-3  # the chunk mask does change it
    with pytest.raises(ValueError, match="multiple of 2"):
        enc.forward_chunk_by_chunk(x, 3)
    with pytest.raises(ValueError, match="causal"):
        tiny_encoder(False).forward_chunk_by_chunk(x, 2)


def test_fixed_size_cache_equals_growing_cache(one_thread):
    """The ONNX export feeds caches of a fixed size, zero before they fill: the slots
    before the utterance start are masked from the offset."""
    enc = tiny_encoder(True, seed=2)
    chunk, left = 2, 2
    required = chunk * left
    x = torch.randn(1, 4 * chunk * 6 + 7, 20)
    with torch.no_grad():
        want, _ = enc.forward_chunk_by_chunk(x, chunk, left)
        att, cnn = enc.streaming_cache_shapes(required)
        att, cnn = torch.zeros(att), torch.zeros(cnn)
        outs = []
        for i in range(6):
            window = x[:, 4 * chunk * i:4 * chunk * (i + 1) + 7]
            offset = torch.tensor([chunk * i])
            y, att, cnn = enc.chunk_step(window, offset, required, att, cnn)
            assert tuple(att.shape) == enc.streaming_cache_shapes(required)[0]
            outs.append(y)
    assert (torch.cat(outs, 1) - want).abs().max().item() < 1e-5


def test_training_draws_chunks_from_the_configured_lists(one_thread):
    enc = tiny_encoder(True).train()
    draws = {enc._chunk_choice(0, -1) for _ in range(200)}
    assert draws == {(8, 2), (8, -1), (16, 1), (16, -1), (-1, -1)}
    assert tiny_encoder(False)._chunk_choice(0, -1) == (-1, -1)
    with pytest.raises(ValueError, match="chunk_size"):
        tiny_encoder(True, chunk_size=[6])

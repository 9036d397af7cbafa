"""A Zipformer ASR model (CTC + attention decoder) built by the factory: it learns a tiny
batch, its schedules follow the batch count, and its TorchScript export (the runtime
methods, streaming included) computes what the eager model does."""
import pytest
import torch

from wenet.export.jit import script_model
from wenet.models import init_model
from tests.zipformer.test_encoder import TINY


def tiny_config(causal: bool, **encoder_over) -> dict:
    return {"input_dim": 20, "output_dim": 12, "encoder": "zipformer",
            "encoder_conf": {**TINY, "causal": causal, "schedule_scale": 0.001,
                             **encoder_over},
            "decoder": "transformer",
            "decoder_conf": {"attention_heads": 2, "linear_units": 32, "num_blocks": 1},
            "model_conf": {"ctc_weight": 0.3}}


def _batch():
    torch.manual_seed(3)
    feats = torch.randn(3, 60, 20)
    lengths = torch.tensor([60, 51, 40])
    text = torch.tensor([[1, 2, 3, 4], [5, 6, 7, -1], [8, 9, -1, -1]])
    return feats, lengths, text, torch.tensor([4, 3, 2])


@pytest.mark.parametrize("use_balancers,sparse", [(False, False), (True, False), (True, True)])
def test_zipformer_model_learns_a_tiny_batch(use_balancers, sparse, one_thread):
    torch.manual_seed(0)
    model = init_model(tiny_config(True, use_balancers=use_balancers, sparse_balancers=sparse))
    optim = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch = _batch()
    losses = []
    model.train()
    for step in range(30):
        model.encoder.set_batch_count(step)
        out = model(*batch)
        assert out["loss_ctc"] is not None and out["loss_att"] is not None
        optim.zero_grad()
        out["loss"].backward()
        optim.step()
        losses.append(float(out["loss"].detach()))
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, losses


def test_set_batch_count_moves_the_schedules():
    model = init_model(tiny_config(False))
    layer = model.encoder.stacks[0].layers[0]
    assert layer.ff1.dropout_p == pytest.approx(0.3)
    assert layer.attention_skip_rate == pytest.approx(0.2)
    model.encoder.set_batch_count(10)  # schedule_scale 0.001: batch 10 is icefall's 10000
    assert layer.ff1.dropout_p == pytest.approx(0.3 + (0.1 - 0.3) * 10 / 20)
    assert layer.attention_skip_rate == pytest.approx(0.05 - 0.05 * 6 / 12)
    model.encoder.set_batch_count(10 ** 6)
    assert layer.ff1.dropout_p == pytest.approx(0.1) and layer.conv_skip_rate == 0.0


def test_sparse_balancers_follow_icefall_probabilities():
    layer = init_model(tiny_config(False, use_balancers=True)).encoder.stacks[0].layers[0]
    assert layer.ff1.balancer.prob == 1.0 and layer.whiten.current_prob() == 1.0
    model = init_model(tiny_config(False, use_balancers=True, sparse_balancers=True))
    layer = model.encoder.stacks[0].layers[0]
    balancers = [layer.ff1.balancer, layer.ff2.balancer, layer.ff3.balancer,
                 layer.conv1.balancer, layer.conv2.balancer, layer.balancer]
    assert all(b.prob == pytest.approx(0.5) for b in balancers)
    model.encoder.set_batch_count(4)  # schedule_scale 0.001: icefall's batch 4000
    assert all(b.prob == pytest.approx(0.5 - 0.375 / 2) for b in balancers)
    model.encoder.set_batch_count(10 ** 6)
    assert all(b.prob == pytest.approx(0.125) for b in balancers)
    for w in (layer.whiten, layer.attn_weights.whiten_keys):
        assert (w.min_prob, w.max_prob) == (0.025, 0.25)


def test_skip_masks_drop_modules_per_utterance_at_their_rates():
    model = init_model(tiny_config(False))
    layer = model.encoder.stacks[0].layers[0].train()
    x = torch.zeros(4000, 1, 8)
    layer.attention_skip_rate, layer.conv_skip_rate, layer.ff_skip_rate = 0.5, 0.2, 0.0
    torch.manual_seed(0)
    keep = layer._keep_masks(x)
    assert keep.shape == (7, 4000, 1, 1)
    dropped = 1.0 - keep.flatten(1).mean(dim=1)  # per module: nl, sa1, conv1, ff2, sa2, conv2, ff3
    want = torch.tensor([0.5, 0.5, 0.2, 0.0, 0.5, 0.2, 0.0])
    assert torch.allclose(dropped, want, atol=0.03), dropped
    y, z = torch.randn(4000, 3, 8), torch.randn(4000, 3, 8)
    assert torch.equal(layer._add(y, z, keep, 2), y + z * keep[2])
    layer.attention_skip_rate = layer.conv_skip_rate = 0.0
    assert layer._keep_masks(x) is None
    layer.attention_skip_rate = 0.5
    assert layer.eval()._keep_masks(x) is None


def test_torchscript_equals_eager(one_thread):
    torch.manual_seed(0)
    model = init_model(tiny_config(True)).eval()
    script = script_model(model)
    feats, lengths, text, text_lengths = _batch()
    with torch.no_grad():
        assert torch.equal(script.encoder(feats, lengths, -1)[0],
                           model.encoder(feats, lengths, -1)[0])
        assert script.subsampling_rate() == 4 and script.right_context() == 10
        x = feats[:1, :4 * 4 + 7]
        want = model.forward_encoder_chunk(x, 0, 8)
        got = script.forward_encoder_chunk(x, 0, 8)
        for _ in range(3):  # a few chunks, the caches fed back
            for a, b in zip(want, got):
                assert torch.equal(a, b)
            off = want[0].size(1)
            want = model.forward_encoder_chunk(x, off, 8, want[1], want[2])
            got = script.forward_encoder_chunk(x, off, 8, got[1], got[2])
        enc_out = model.encoder(feats[:1], lengths[:1], -1)[0]
        hyps = torch.tensor([[11, 1, 2, 3], [11, 4, 5, 0]])
        hyps_lens = torch.tensor([4, 3])
        for a, b in zip(model.forward_attention_decoder(hyps, hyps_lens, enc_out),
                        script.forward_attention_decoder(hyps, hyps_lens, enc_out)):
            assert torch.equal(a, b)


def test_simulate_streaming_encode_equals_chunk_masked_encode(one_thread):
    """ASRModel.encode(simulate_streaming=True), what recognize.py --simulate_streaming
    runs, gives the chunk-masked full forward's output for a causal Zipformer."""
    torch.manual_seed(0)
    model = init_model(tiny_config(True)).eval()
    feats, lengths, _, _ = _batch()
    with torch.no_grad():
        for chunk, left in ((2, -1), (4, 1)):
            masked, _ = model.encode(feats[:1], lengths[:1], chunk, left)
            streamed, mask = model.encode(feats[:1], lengths[:1], chunk, left,
                                          simulate_streaming=True)
            assert streamed.shape == masked.shape and bool(mask.all())
            assert (streamed - masked).abs().max().item() < 1e-5


def test_every_parameter_gets_a_gradient(one_thread):
    """DDP without find_unused_parameters needs every parameter in each step's graph."""
    torch.manual_seed(0)
    model = init_model(tiny_config(True, downsampling_factor=[1, 2, 4, 2])).train()
    model(*_batch())["loss"].backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []

"""TorchScript: every shipped config scripts, and the runtime methods equal eager mode."""
import os

import pytest
import torch
import yaml

from wenet.models import init_model

from tests.common import CONF_DIR
VOCAB = {"train_conformer_swbd.yaml": 2000}
# (subsampling_rate, right_context) of each front end, by hand: 3x3 stride-2 convolutions
# (and a 5x5 stride-3 one for 6x) each see (kernel - 1) x (product of earlier strides) more frames
FRONT_END = {"conv2d": (4, 2 + 2 * 2), "conv2d6": (6, 2 + 4 * 2), "conv2d8": (8, 2 + 2 * 2 + 2 * 4)}


def front_end_of(name):
    """(subsampling_rate, right_context) that the shipped config ``name`` must give."""
    with open(os.path.join(CONF_DIR, name), "r", encoding="utf-8") as f:
        return FRONT_END[yaml.safe_load(f)["encoder_conf"]["input_layer"]]


def _load(name):
    with open(os.path.join(CONF_DIR, name), "r", encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg.update(input_dim=80, output_dim=VOCAB.get(name, 40), cmvn_file=None)
    # fewer blocks keep the test quick; every module kind of the config stays
    cfg["encoder_conf"]["num_blocks"] = 2
    cfg["decoder_conf"]["num_blocks"] = 1
    torch.manual_seed(0)
    model = init_model(cfg).eval()
    # non-trivial batch-norm statistics so eval mode matters
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.uniform_(-0.3, 0.3)
            m.running_var.uniform_(0.5, 1.5)
    return model


def _close(a, b):
    assert a.shape == b.shape
    assert torch.allclose(a, b, rtol=0.0, atol=1e-6), (a - b).abs().max()


@pytest.mark.parametrize("name", ["train_conformer.yaml", "train_u2++_conformer.yaml",
                                  "train_transformer.yaml", "train_conformer_swbd.yaml"])
def test_script_runtime_methods_equal_eager(name):
    model = _load(name)
    rate, context = front_end_of(name)
    scripted = torch.jit.script(model).eval()
    assert scripted.subsampling_rate() == model.subsampling_rate() == rate
    assert scripted.right_context() == model.right_context() == context
    assert scripted.sos_symbol() == scripted.eos_symbol() == model.vocab_size - 1
    assert scripted.is_bidirectional_decoder() == (model.reverse_weight > 0)

    g = torch.Generator().manual_seed(1)
    chunk_frames = (16 - 1) * 4 + 7  # 16 output frames per chunk
    xs = torch.randn(1, 2 * chunk_frames, 80, generator=g)
    with torch.no_grad():
        eager_out = []
        script_out = []
        for outs, fn in ((eager_out, model.forward_encoder_chunk),
                         (script_out, scripted.forward_encoder_chunk)):
            att = torch.zeros(0, 0, 0, 0)
            cnn = torch.zeros(0, 0, 0, 0)
            offset = 0
            for start in (0, 64):
                ys, att, cnn = fn(xs[:, start:start + chunk_frames], offset, 32, att, cnn)
                outs.append((ys, att, cnn))
                offset += ys.size(1)
        for (ye, ae, ce), (ys, as_, cs) in zip(eager_out, script_out):
            _close(ye, ys)
            _close(ae, as_)
            assert torch.equal(ce, cs) if ce.numel() == 0 else torch.allclose(ce, cs, atol=1e-6)
        enc = torch.cat([o[0] for o in eager_out], dim=1)
        _close(model.ctc_activation(enc), scripted.ctc_activation(enc))
        sos = model.sos
        hyps = torch.tensor([[sos, 3, 4, 5], [sos, 6, 7, 0]])
        lens = torch.tensor([4, 3])
        le, re = model.forward_attention_decoder(hyps, lens, enc, 0.3)
        ls, rs = scripted.forward_attention_decoder(hyps, lens, enc, 0.3)
        _close(le, ls)
        if model.is_bidirectional_decoder():
            _close(re, rs)


def test_export_silences_only_the_known_deprecations(monkeypatch):
    """The export hides torch's deprecation of what it calls (TorchScript, dynamic int8)
    and nothing else; without quantize_dynamic the int8 export says what is missing."""
    import warnings

    from wenet.export import jit

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with jit._known_deprecations_silenced():
            warnings.warn("`torch.jit.script` is deprecated. Please switch", FutureWarning)
            warnings.warn("torch.ao.quantization is deprecated and will be removed",
                          DeprecationWarning)
            with pytest.raises(DeprecationWarning, match="another API"):
                warnings.warn("another API is deprecated", DeprecationWarning)
            with pytest.raises(FutureWarning, match="torch.jit.trace"):
                warnings.warn("`torch.jit.trace` is deprecated", FutureWarning)
    monkeypatch.delattr(torch.ao.quantization, "quantize_dynamic")
    with pytest.raises(RuntimeError, match="quantize_dynamic.*--output_quant_file"):
        jit.quantize_model(torch.nn.Linear(2, 2))

"""Training-loop guards: each fires on a crafted fault and names the culprit."""
from __future__ import annotations

import contextlib
import logging

import pytest
import torch

from tests.train import testlib as T
from wenet.models import init_model
from wenet.train.executor import Executor
from wenet.train.guards import (Diagnostics, DiagnosticsDone, NonFiniteError, attach_inf_check,
                                batch_advice, scan_largest_batches)
from wenet.train.config import TrainConf, TrainingError
from wenet.train.distributed import DistInfo
from wenet.train.scheduler import WarmupLR

CONFIGS = dict(T.TINY_CONFIG, input_dim=40, output_dim=len(T.LETTERS) + 3, cmvn_file=None)


def _executor(tmp_path, scaler=None, **conf_overrides):
    torch.manual_seed(0)
    model = init_model(CONFIGS)
    conf = TrainConf.from_configs(dict(CONFIGS, **conf_overrides))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    return Executor(model, opt, WarmupLR(opt, 5), conf, torch.device("cpu"), DistInfo(),
                    str(tmp_path), scaler=scaler)


def _batches(sizes, seed=0):
    """Batches of (utterances, frames, tokens)."""
    g = torch.Generator().manual_seed(seed)
    return [{"keys": [f"b{i}u{j}" for j in range(B)], "feats": torch.randn(B, F, 40, generator=g),
             "feats_lengths": torch.full((B,), F), "target": torch.randint(2, 7, (B, U), generator=g),
             "target_lengths": torch.full((B,), U)} for i, (B, F, U) in enumerate(sizes)]


def _inputs(batch):
    return batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"]


# ------------------------------------------------------------------------------ inf_check

@contextlib.contextmanager
def _removed(handles):
    """Remove the hooks afterwards: some modules are shared between models (a default
    argument's ReLU), so hooks left behind would watch later tests' models."""
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def test_inf_check_names_the_module_whose_forward_output_is_inf():
    torch.manual_seed(0)
    model = init_model(CONFIGS).train()
    culprit = "encoder.encoders.0.feed_forward.w_2"
    dict(model.named_modules())[culprit].register_forward_hook(lambda m, i, o: o * float("inf"))
    handles = attach_inf_check(model)
    with _removed(handles), pytest.raises(NonFiniteError, match=rf"output 0 of module '{culprit}' \(Linear\) is "
                                             r"not finite .*inputs were finite"):
        model(*_inputs(_batches([(2, 60, 3)])[0]))


class _InfBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("inf")


class _BadGrad(torch.nn.Module):
    """Identity forward, a non-finite gradient in backward."""

    def forward(self, x):
        return _InfBackward.apply(x)


def test_inf_check_names_the_module_whose_backward_makes_inf():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), _BadGrad(),
                                torch.nn.Linear(8, 1))
    handles = attach_inf_check(model)
    loss = model(torch.randn(3, 4)).pow(2).sum()
    assert torch.isfinite(loss)
    with _removed(handles), pytest.raises(NonFiniteError, match=r"backward of module '2' \(_BadGrad\): the "
                                             r"gradient of its input 0 is not finite"):
        loss.backward()


def test_inf_check_is_silent_on_a_healthy_model():
    torch.manual_seed(0)
    model = init_model(CONFIGS).train()
    with _removed(attach_inf_check(model)):
        model(*_inputs(_batches([(2, 60, 3)])[0]))["loss"].backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


# --------------------------------------------------------------------------- diagnostics

def test_diagnostics_statistics_equal_direct_computation():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 1))
    diag = Diagnostics(model, num_batches=2)  # a model of its own: no shared modules
    xs = [torch.randn(5, 4), torch.randn(3, 4)]
    for x in xs:
        model(x).sum().backward()
        done = diag.after_batch()
    assert done
    lines = {line.split(":")[0]: line for line in diag.report()}
    with torch.no_grad():
        h = torch.cat([model[0](x) for x in xs])
    want = f"abs-mean {h.abs().mean():.3e} rms {h.pow(2).mean().sqrt():.3e} max {h.abs().max():.3e}"
    assert f"output {want} |" in lines["module 0"]
    # the gradient of the first layer's output: d(sum)/dh = relu'(h) * w2, summed over batches
    g = ((h > 0).float() * model[2].weight).abs()
    assert f"grad abs-mean {g.mean():.3e}" in lines["module 0"]
    w = model[0].weight
    assert (f"value abs-mean {w.abs().mean():.3e} rms {w.pow(2).mean().sqrt():.3e} max "
            f"{w.abs().max():.3e} | grad abs-mean {w.grad.abs().mean():.3e}") in lines[
                "param 0.weight (6, 4)"]


def test_print_diagnostics_stops_the_executor_after_n_batches(tmp_path):
    ex = _executor(tmp_path, accum_grad=1, log_interval=100)

    class Args:
        inf_check, print_diagnostics, scan_oom, oom_memory_cap_mb = False, 3, False, None
        model_dir = str(tmp_path)

    from wenet.train.guards import TrainingGuards
    ex.guards = TrainingGuards(Args, CONFIGS, ex.module)
    with pytest.raises(DiagnosticsDone):
        ex.train_epoch(_batches([(2, 60, 3)] * 5))
    assert ex.state.batches_done == 3
    text = (tmp_path / "diagnostics.txt").read_text()
    assert text.startswith("diagnostics over 3 batch(es)")
    assert "module encoder.encoders.0.feed_forward.w_1:" in text
    assert "param decoder.left_decoder.output_layer.weight" in text


def test_train_py_print_diagnostics_exits_0(tmp_path):
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=12)
    config = T.write_config(str(tmp_path / "conf.yaml"))
    proc = T.run_train(T.train_args(corpus, config, str(tmp_path / "exp"),
                                    ["--print_diagnostics", "2", "--inf_check"]))
    assert proc.returncode == 0
    assert (tmp_path / "exp" / "diagnostics.txt").read_text().startswith("diagnostics over 2")
    assert not (tmp_path / "exp" / "0.pt").exists()  # it stopped before an epoch ended


# ------------------------------------------------------------------------------ scan_oom

def test_scan_finds_the_largest_batches_and_refuses_one_over_the_cap(tmp_path):
    sizes = [(2, 60, 3), (4, 120, 2), (2, 50, 9), (3, 40, 4)]  # most frames: 1, tokens: 2
    ex = _executor(tmp_path)
    needed = scan_largest_batches(ex, _batches(sizes), None, "advice")
    assert set(needed) == {"frames", "tokens"}
    assert needed["frames"] > needed["tokens"] > 0  # 480 padded frames against 100
    advice = batch_advice({"dataset_conf": {"batch_conf": {"batch_type": "dynamic",
                                                           "max_frames_in_batch": 8000},
                                            "filter_conf": {"max_length": 3000}}})
    cap = (needed["frames"] + needed["tokens"]) / 2
    with pytest.raises(TrainingError, match=r"most frames \(480 padded; feats \(4, 120, 40\).*"
                                            r"b1u0.*more than the cap.*max_frames_in_batch "
                                            r"\(now 8000\)"):
        scan_largest_batches(ex, _batches(sizes), cap, advice)
    assert all(p.grad is None for p in ex.model.parameters())


def test_scan_leaves_training_unchanged(tmp_path):
    """RNG states restored and gradients dropped: training after a scan is bit-identical."""
    batches = _batches([(2, 60, 3), (3, 80, 4), (2, 70, 2)])
    plain = _executor(tmp_path / "a", accum_grad=1, log_interval=100)
    torch.manual_seed(5)
    plain.train_epoch(batches)
    scanned = _executor(tmp_path / "b", accum_grad=1, log_interval=100)
    torch.manual_seed(5)
    scan_largest_batches(scanned, batches, None, "advice")
    scanned.train_epoch(batches)
    T.assert_same_state(plain.model.state_dict(), scanned.model.state_dict())


# ------------------------------------------------------------------------- fp16 guard

def _overflow_after(ex, batches_ok):
    """Gradients turn inf for every batch after the first ``batches_ok``."""
    count = [0]
    real = ex.model.forward

    def forward(*args):
        count[0] += 1
        out = real(*args)
        if count[0] > batches_ok:
            out = dict(out, loss=_InfBackward.apply(out["loss"]))
        return out

    ex.model.forward = forward


def test_grad_scale_collapse_warns_then_stops(tmp_path, caplog):
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0, growth_interval=1000)
    ex = _executor(tmp_path, scaler=scaler, accum_grad=1, log_interval=100,
                   grad_scale_warn=0.01, grad_scale_min=1e-4, max_bad_steps=1000)
    _overflow_after(ex, 2)
    caplog.set_level(logging.WARNING)
    with pytest.raises(TrainingError, match=r"fp16 grad scale collapsed to 6.1e-05 .* at step "
                                            r"2, 14 update\(s\) skipped"):
        ex.train_epoch(_batches([(2, 60, 3)] * 30))
    # 1/2^14 < 1e-4 after 14 overflows; warned from 1/2^7 < 0.01 on
    assert ex.state.scaler_skips == 14 and ex.state.step == 2
    assert caplog.text.count("fp16 grad scale fell to") == 7  # at 1/2^7 .. 1/2^13


def test_fp16_skips_are_counted_in_the_epoch_summary(tmp_path, caplog):
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=1000)
    ex = _executor(tmp_path, scaler=scaler, accum_grad=1, log_interval=100, max_bad_steps=1000)
    _overflow_after(ex, 3)
    caplog.set_level(logging.INFO)
    ex.train_epoch(_batches([(2, 60, 3)] * 6))
    assert (ex.state.step, ex.state.scaler_skips) == (3, 3)
    assert "0 OOM, 3 fp16 overflow" in caplog.text
    assert "fp16 grad scale fell" not in caplog.text  # 0.5 is above the warning threshold

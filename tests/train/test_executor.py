"""Training pieces in-process: schedules, model average, atomic checkpoints, config overrides,
and the executor's handling of non-finite losses and out-of-memory batches."""
from __future__ import annotations

import logging
import math
import os

import pytest
import torch
import yaml

from wenet.models import init_model
from wenet.train import checkpoint as ckpt
from wenet.train.checkpoint_manager import CheckpointManager
from wenet.train.config import TrainConf, override_config
from wenet.train.distributed import DistInfo
from wenet.train.executor import Executor
from wenet.train.model_average import ModelAverager
from wenet.train.scheduler import WarmupCosineLR, WarmupLR, build_scheduler

from tests.train import testlib as T


def _lrs(scheduler_factory, n: int, lr: float = 0.01):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = scheduler_factory(opt)
    out = []
    for _ in range(n):  # the lr used by updates 1..n
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_warmuplr_peaks_at_warmup_steps_with_lr():
    lrs = _lrs(lambda o: WarmupLR(o, warmup_steps=4), 16)
    # hand-computed: lr * 4^0.5 * min(n^-0.5, n * 4^-1.5)
    assert lrs[0] == pytest.approx(0.01 * 2 * 1 / 8)        # n=1
    assert lrs[1] == pytest.approx(0.01 * 2 * 2 / 8)        # n=2
    assert lrs[3] == pytest.approx(0.01)                     # n=4: the peak, exactly lr
    assert lrs[15] == pytest.approx(0.01 * 2 / 4)           # n=16: 2 * 16^-0.5
    assert max(lrs) == lrs[3]


def test_warmupcosine_hand_computed_and_state_dict_round_trip():
    lrs = _lrs(lambda o: build_scheduler(o, "warmupcosine", {"warmup_steps": 2, "max_steps": 6,
                                                             "min_lr": 0.001}), 8)
    expected = [0.005, 0.01] + [0.001 + 0.009 * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in (1, 2, 3, 4)] + [0.001, 0.001]
    assert lrs == pytest.approx(expected)
    # a restored scheduler continues with the same rates
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    sched = WarmupCosineLR(opt, max_steps=6, warmup_steps=2, min_lr=0.001)
    for _ in range(3):
        opt.step()
        sched.step()
    opt2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    sched2 = WarmupCosineLR(opt2, max_steps=6, warmup_steps=2, min_lr=0.001)
    sched2.load_state_dict(sched.state_dict())
    for o, sc in ((opt, sched), (opt2, sched2)):
        o.step()
        sc.step()
    assert opt.param_groups[0]["lr"] == opt2.param_groups[0]["lr"] == pytest.approx(expected[4])
    with pytest.raises(ValueError, match="unknown scheduler"):
        build_scheduler(opt, "noam2", {})


def test_model_average_is_mean_of_period_snapshots():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    avg = ModelAverager(model.state_dict(), period=2)
    snapshots = []
    for step in range(1, 9):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        model(torch.randn(4, 3))  # moves BatchNorm statistics and its integer counter
        if avg.maybe_update(model.state_dict(), step):
            snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
    assert len(snapshots) == 4  # steps 2, 4, 6, 8
    out = avg.export()
    for key, value in model.state_dict().items():
        if value.is_floating_point():
            mean = sum(s[key].double() for s in snapshots) / 4
            assert out[key].dtype == value.dtype
            assert torch.allclose(avg.avg[key], mean, rtol=0, atol=1e-12)
        else:
            assert torch.equal(out[key], value)  # counters: current value
    restored = ModelAverager(model.state_dict(), period=2)
    restored.load_state_dict(avg.state_dict())
    T.assert_same_state(restored.avg, avg.avg)


def test_save_checkpoint_puts_the_resume_state_in_place_last(tmp_path, monkeypatch):
    """The resume state marks a checkpoint complete: it must be the last file renamed into
    place (a kill between two renames then leaves an incomplete, ignored checkpoint)."""
    placed = []
    real_replace = os.replace

    def recording_replace(src, dst):
        real_replace(src, dst)
        placed.append(os.path.basename(dst))

    monkeypatch.setattr(os, "replace", recording_replace)
    ckpt.save_checkpoint(str(tmp_path / "3"), {"w": torch.zeros(2)}, {"epoch": 3, "step": 9},
                         avg_state={"w": torch.ones(2)}, resume_state={"step": 9, "epoch": 3})
    assert sorted(placed) == ["3.avg.pt", "3.pt", "3.resume.pt", "3.yaml"]
    assert placed[-1] == "3.resume.pt"


def _dying_save_of(suffix: str):
    """A torch.save that writes half of a ``*suffix`` file, then fails like a full disk."""
    real_save = torch.save

    def dying_save(obj, f, *a, **k):
        real_save(obj, f, *a, **k)
        target = (f if isinstance(f, str) else f.name).rsplit(".tmp.", 1)[0]
        if target.endswith(suffix) and not target.endswith(".resume.pt"):
            if not isinstance(f, str):
                f.truncate(10)
            raise OSError("No space left on device")

    return dying_save


def test_atomic_save_failure_keeps_previous_checkpoint(tmp_path, monkeypatch):
    base = str(tmp_path / "step_2")
    old = {"w": torch.arange(4.0)}
    ckpt.save_checkpoint(base, old, {"epoch": 0, "step": 2}, resume_state={"step": 2, "epoch": 0})
    assert CheckpointManager(str(tmp_path), DistInfo()).latest() == base

    # the model file fails: nothing of the checkpoint may count, its resume state included
    monkeypatch.setattr(torch, "save", _dying_save_of(".pt"))
    with pytest.raises(OSError):
        ckpt.save_checkpoint(base, {"w": torch.zeros(4)}, {"epoch": 0, "step": 2})
    with pytest.raises(OSError):
        ckpt.save_checkpoint(str(tmp_path / "step_4"), {"w": torch.zeros(4)}, {"step": 4},
                             resume_state={"step": 4, "epoch": 0})
    monkeypatch.undo()
    T.assert_same_state(T.load_state(base + ".pt"), old)
    assert sorted(os.listdir(tmp_path)) == ["step_2.pt", "step_2.resume.pt", "step_2.yaml"]
    assert CheckpointManager(str(tmp_path), DistInfo()).latest() == base

    # a model file written but the process killed before the resume state: still ignored
    ckpt.atomic_torch_save({"w": torch.ones(4)}, str(tmp_path / "step_6.pt"))
    assert CheckpointManager(str(tmp_path), DistInfo()).latest() == base
    # pruning keeps the newest and removes every file of the older ones
    ckpt.save_checkpoint(str(tmp_path / "step_8"), old, {"step": 8}, resume_state={"step": 8, "epoch": 0},
                         write_yaml=False)
    CheckpointManager(str(tmp_path), DistInfo(), keep_step_checkpoints=1).prune_step_checkpoints()
    assert sorted(os.listdir(tmp_path)) == ["step_8.pt", "step_8.resume.pt"]


def test_override_config():
    conf = {"optim_conf": {"lr": 0.001}, "max_epoch": 10, "dataset_conf": {"batch_conf": {"batch_size": 8}}}
    new = override_config(conf, ["optim_conf.lr 0.004", "max_epoch 1",
                                 "dataset_conf.batch_conf.batch_size 2", "save_interval 50"])
    assert new == {"optim_conf": {"lr": 0.004}, "max_epoch": 1, "save_interval": 50,
                   "dataset_conf": {"batch_conf": {"batch_size": 2}}}
    assert conf["max_epoch"] == 10  # the input is not modified
    with pytest.raises(ValueError, match="'nope' is not a section"):
        override_config(conf, ["nope.lr 1"])
    with pytest.raises(ValueError, match="key.sub value"):
        override_config(conf, ["max_epoch"])


# ----------------------------------------------------------------- executor faults

def _tiny_executor(tmp_path, **conf_overrides):
    configs = dict(T.TINY_CONFIG, input_dim=40, output_dim=len(T.LETTERS) + 3, cmvn_file=None)
    torch.manual_seed(0)
    model = init_model(configs)
    conf = TrainConf.from_configs(dict(configs, **conf_overrides))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    return Executor(model, opt, WarmupLR(opt, 5), conf, torch.device("cpu"), DistInfo(),
                    str(tmp_path))


def _batches(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        feats = torch.randn(2, 60, 40, generator=g)
        target = torch.randint(2, 7, (2, 3), generator=g)
        out.append({"keys": [f"u{i}a", f"u{i}b"], "feats": feats,
                    "feats_lengths": torch.tensor([60, 50]), "target": target,
                    "target_lengths": torch.tensor([3, 2])})
    return out


def test_nonfinite_loss_skipped_then_stop_with_dump(tmp_path, monkeypatch):
    ex = _tiny_executor(tmp_path, accum_grad=1, max_bad_steps=20, log_interval=100)
    real_forward = type(ex.model).forward
    poisoned = set()

    def forward(self, speech, *args):
        out = real_forward(self, speech, *args)
        if int(speech[0, 0, 0].mul(1e6)) in poisoned:
            out = dict(out, loss=out["loss"] * float("nan"))
        return out

    monkeypatch.setattr(type(ex.model), "forward", forward)
    batches = _batches(4)
    poisoned.add(int(batches[1]["feats"][0, 0, 0].mul(1e6)))
    ex.train_epoch(batches)
    assert (ex.state.step, ex.state.skipped_nonfinite, ex.state.consecutive_bad) == (3, 1, 0)
    assert all(torch.isfinite(p).all() for p in ex.model.parameters())

    # 20 bad batches in a row: stop, with the last batch and the model dumped
    bad = _batches(25, seed=1)
    for b in bad:
        poisoned.add(int(b["feats"][0, 0, 0].mul(1e6)))
    with pytest.raises(RuntimeError, match="20 consecutive non-finite"):
        ex.train_epoch(bad)
    assert ex.state.skipped_nonfinite == 21
    dumped = torch.load(tmp_path / "bad_batch" / "batch.rank0.pt", weights_only=True)
    assert dumped["keys"] == bad[19]["keys"] and torch.equal(dumped["feats"], bad[19]["feats"])
    T.assert_same_state(torch.load(tmp_path / "bad_batch" / "model.pt", weights_only=True),
                        ex.model.state_dict())
    info = yaml.safe_load((tmp_path / "bad_batch" / "info.yaml").read_text())
    assert info["consecutive_bad"] == 20 and info["keys"] == bad[19]["keys"]


def test_oom_batch_skipped_and_logged(tmp_path, monkeypatch, caplog):
    ex = _tiny_executor(tmp_path, accum_grad=2, log_interval=100)
    real_forward = type(ex.model).forward
    calls = []

    def forward(self, speech, *args):
        calls.append(speech.shape)
        if len(calls) == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return real_forward(self, speech, *args)

    monkeypatch.setattr(type(ex.model), "forward", forward)
    caplog.set_level(logging.WARNING)
    ex.train_epoch(_batches(5))
    # batch 2 skipped: batches 1+3 and 4+5 make two updates
    assert (ex.state.skipped_oom, ex.state.step, ex.state.batches_done) == (1, 2, 5)
    assert "out of memory in forward of a batch with feats (2, 60, 40)" in caplog.text


def test_init_weights_copy_matching_tensors_only(tmp_path):
    """Transfer init: same-name same-shape tensors are copied exactly, the unit-dependent
    output layers (another vocabulary size) and excluded names keep their own values."""
    base = dict(T.TINY_CONFIG, input_dim=40, cmvn_file=None)
    torch.manual_seed(0)
    source = init_model(dict(base, output_dim=8))
    torch.manual_seed(1)
    target = init_model(dict(base, output_dim=11))
    before = {k: v.clone() for k, v in target.state_dict().items()}
    path = str(tmp_path / "src.pt")
    torch.save({f"module.{k}": v for k, v in source.state_dict().items()}, path)  # as DDP saves
    copied, skipped = ckpt.load_init_weights(target, path, exclude=r"^decoder\.right_decoder\.")
    src, after = source.state_dict(), target.state_dict()
    skipped_names = {s.split(" ")[0] for s in skipped}
    assert set(copied) | skipped_names == set(after) and not set(copied) & skipped_names
    for name in after:
        differs_in_shape = src[name].shape != after[name].shape
        excluded = name.startswith("decoder.right_decoder.")
        if differs_in_shape or excluded:
            assert name in skipped_names
            assert torch.equal(after[name], before[name])
        else:
            assert name in copied
            assert torch.equal(after[name], src[name])
    assert {"ctc.ctc_lo.weight", "decoder.left_decoder.output_layer.weight"} <= skipped_names
    assert any(s.endswith("(excluded)") for s in skipped)
    assert any(n.startswith("encoder.encoders.") for n in copied)
    torch.save({"unrelated": torch.zeros(3)}, path)
    with pytest.raises(ValueError, match="no tensor matches"):
        ckpt.load_init_weights(target, path)


@pytest.mark.parametrize("avx512_bf16,amx,want", [(True, False, torch.bfloat16),
                                                  (False, True, torch.bfloat16),
                                                  (False, False, None)])
def test_use_amp_auto_is_bf16_only_where_the_cpu_has_it(monkeypatch, avx512_bf16, amx, want):
    from wenet.train.device import amp_dtype_for
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    cpu = torch.device("cpu")
    assert amp_dtype_for("auto", cpu) is want
    # explicit choices do not depend on the hardware
    assert amp_dtype_for("bf16", cpu) is torch.bfloat16
    assert amp_dtype_for("fp16", cpu) is torch.float16
    assert amp_dtype_for("none", cpu) is None
    with pytest.raises(ValueError, match="use_amp"):
        amp_dtype_for("fp8", cpu)



def test_epoch_yaml_records_mean_train_loss_per_utterance(tmp_path):
    batches = []
    for b, value in zip((1, 2, 3), (4.0, 1.0, 2.0)):
        batches.append({"keys": [f"k{i}" for i in range(b)], "feats": torch.full((b, 5, 4), value),
                        "feats_lengths": torch.full((b,), 5), "target": torch.zeros(b, 1, dtype=torch.long),
                        "target_lengths": torch.ones(b, dtype=torch.long)})
    model = T.ConstantLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ex = Executor(model, opt, WarmupLR(opt, 2), TrainConf(max_epoch=2, accum_grad=1, log_interval=100),
                  torch.device("cpu"), DistInfo(), str(tmp_path), train_set=T.ListSet())
    ex.fit(lambda epoch: batches, lambda: batches[:1])
    for n in (0, 1):
        info = yaml.safe_load((tmp_path / f"{n}.yaml").read_text())
        # per utterance: (1*4 + 2*1 + 3*2) / 6 = 2; not the per-batch mean (7/3)
        assert info["train_loss"] == pytest.approx(2.0) and info["cv_loss"] == pytest.approx(4.0)

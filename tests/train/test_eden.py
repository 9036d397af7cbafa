"""Eden (wenet/train/scheduler.py) against its formula, through a save/resume, and in the loop:
the executor tells it the epoch, and a run with ScaledAdam + Eden resumes bit for bit.
Also the ScaledAdam/Eden recipe configs: they build, at icefall's sizes where they claim so."""
from __future__ import annotations

import io
import os

import pytest
import torch

from wenet.models import init_model
from wenet.models.factory import architecture_differences
from wenet.train.config import TrainConf
from wenet.train.distributed import DistInfo
from wenet.train.executor import Executor
from wenet.train.optim import build_optimizer
from wenet.train.scheduler import build_scheduler
from wenet.utils.file_utils import load_yaml

from tests.common import CONF_DIR
from tests.train import testlib as T

CONF = {"lr_batches": 50, "lr_epochs": 1.5, "warmup_batches": 20, "warmup_start": 0.3}
BASE_LR = 0.045


def formula(batch: int, epoch: int) -> float:
    """The rate written out by hand from the issue's definition."""
    warm = 1.0 if batch >= 20 else 0.3 + 0.7 * batch / 20
    return (BASE_LR * ((batch ** 2 + 50 ** 2) / 50 ** 2) ** -0.25
            * ((epoch ** 2 + 1.5 ** 2) / 1.5 ** 2) ** -0.25 * warm)


def _scheduler(lr: float = BASE_LR):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=lr)
    return opt, build_scheduler(opt, "eden", dict(CONF))


def _advance(opt, sched, to_batch: int) -> None:
    while sched.last_epoch < to_batch:
        opt.step()
        sched.step()


@pytest.mark.parametrize("batch,epoch", [(0, 0), (7, 0), (20, 0), (35, 1), (200, 2), (1000, 7)])
def test_rate_equals_formula(batch, epoch):
    opt, sched = _scheduler()
    _advance(opt, sched, batch)
    sched.set_epoch(epoch)
    assert opt.param_groups[0]["lr"] == pytest.approx(formula(batch, epoch), rel=1e-12)
    assert sched.get_last_lr()[0] == opt.param_groups[0]["lr"]
    opt.step()
    sched.step()  # the epoch holds until the next set_epoch
    assert opt.param_groups[0]["lr"] == pytest.approx(formula(batch + 1, epoch), rel=1e-12)


def test_state_survives_save_and_resume():
    opt, sched = _scheduler()
    _advance(opt, sched, 30)
    sched.set_epoch(3)
    buffer = io.BytesIO()
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    opt2, sched2 = _scheduler(lr=0.5)  # a different base, overwritten by the restore
    opt2.load_state_dict(saved["optimizer"])
    sched2.load_state_dict(saved["scheduler"])
    assert (sched2.last_epoch, sched2.epoch) == (30, 3)
    assert opt2.param_groups[0]["lr"] == pytest.approx(formula(30, 3), rel=1e-12)
    _advance(opt2, sched2, 45)
    assert opt2.param_groups[0]["lr"] == pytest.approx(formula(45, 3), rel=1e-12)


def test_bad_options_are_named():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    with pytest.raises(ValueError, match="eden"):
        build_scheduler(opt, "eden", {"lr_batches": 0})
    with pytest.raises(ValueError, match="eden"):
        build_scheduler(opt, "eden", {"lr_steps": 10})


# ------------------------------------------------------------------- in the loop
def _executor(tmp_path, seed: int, grad_clip: float = 5.0) -> Executor:
    configs = dict(T.TINY_CONFIG, input_dim=40, output_dim=len(T.LETTERS) + 3, cmvn_file=None)
    torch.manual_seed(seed)
    model = init_model(configs)
    opt = build_optimizer(model.parameters(), "scaled_adam",
                          {"lr": BASE_LR, "clipping_update_period": 3})
    return Executor(model, opt, build_scheduler(opt, "eden", dict(CONF)),
                    TrainConf(accum_grad=1, log_interval=100, grad_clip=grad_clip, max_epoch=2,
                              keep_last_k=2),
                    torch.device("cpu"), DistInfo(), str(tmp_path))


def _batches(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [{"keys": [f"u{seed}_{i}"], "feats": torch.randn(2, 60, 40, generator=g),
             "feats_lengths": torch.tensor([60, 45]),
             "target": torch.randint(2, 7, (2, 3), generator=g),
             "target_lengths": torch.tensor([3, 2])} for i in range(n)]


def test_fit_sets_the_epoch_and_resume_continues_bitwise(tmp_path):
    ex = _executor(tmp_path / "a", seed=0)
    (tmp_path / "a").mkdir()
    ex.train_set = T.ListSet()
    ex.fit(lambda epoch: _batches(3, seed=epoch), lambda: _batches(1, seed=9))
    assert ex.scheduler.epoch == 1 and ex.state.step == 6
    assert ex.lr == pytest.approx(formula(6, 1), rel=1e-12)

    ref = _executor(tmp_path / "b", seed=1)
    ref.train_epoch(_batches(4, seed=1))
    base = str(tmp_path / "step_4")
    ref.checkpoints.save(ref, base)
    ref.scheduler.set_epoch(1)
    ref.train_epoch(_batches(4, seed=2))
    other = _executor(tmp_path / "b", seed=5)
    other.checkpoints.restore(other, base)
    other.scheduler.set_epoch(1)
    other.train_epoch(_batches(4, seed=2))
    T.assert_same_state(other.model.state_dict(), ref.model.state_dict())
    assert other.lr == ref.lr == pytest.approx(formula(8, 1), rel=1e-12)


def test_executor_leaves_clipping_to_scaled_adam(tmp_path):
    """A tiny grad_clip would shrink every update; with ScaledAdam the executor must not
    clip, so the run equals one with grad_clip off."""
    runs = []
    for clip in (1e-6, 0.0):
        ex = _executor(tmp_path, seed=0, grad_clip=clip)
        ex.train_epoch(_batches(3, seed=1))
        runs.append(ex.model.state_dict())
    T.assert_same_state(runs[0], runs[1])


# ------------------------------------------------------------ the recipe configs
ICEFALL_PARAMS = {"small": 23.2e6, "medium": 65.5e6}  # icefall's LibriSpeech Zipformer tables


def _built(name: str, vocab: int):
    configs = load_yaml(os.path.join(CONF_DIR, name))
    configs.update(input_dim=80, output_dim=vocab, cmvn_file=None)
    model = init_model(configs)
    opt = build_optimizer(model.parameters(), configs["optim"], configs["optim_conf"])
    build_scheduler(opt, configs["scheduler"], configs["scheduler_conf"])
    return model


@pytest.mark.parametrize("size", ["small", "medium"])
def test_librispeech_configs_have_icefall_sizes(size):
    """Within 3 % of icefall's published count (our CTC head and the pruned loss's own
    projections come on top of its transducer)."""
    model = _built(f"train_zipformer_librispeech_{size}.yaml", 500)
    count = sum(p.numel() for p in model.parameters())
    assert abs(count / ICEFALL_PARAMS[size] - 1) < 0.03, count


@pytest.mark.parametrize("name", ["train_zipformer_speechocean762.yaml",
                                  "train_zipformer_synth_broad.yaml"])
def test_zipformer_recipes_can_start_from_the_builtin_one(name):
    """--init_checkpoint of the main job's Zipformer needs the same encoder shapes and the
    same function: with the main encoder's weights loaded, ours computes exactly its
    output (eval mode; a SwooshR front end beside the main job's ReLU one did not)."""
    ours_model, main_model = _built(name, 500), _built("train_zipformer.yaml", 128)
    ours, main = ours_model.encoder.state_dict(), main_model.encoder.state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in main.items()}
    assert architecture_differences(load_yaml(os.path.join(CONF_DIR, name)),
                                    load_yaml(os.path.join(CONF_DIR, "train_zipformer.yaml"))) == []
    _assert_same_encoder_function(ours_model.encoder, main_model.encoder)
    _built("train_conformer_scaled_adam.yaml", 128)


def _assert_same_encoder_function(encoder: torch.nn.Module, source: torch.nn.Module) -> None:
    """``encoder`` with ``source``'s weights computes ``source``'s output exactly."""
    encoder.load_state_dict(source.state_dict())
    encoder.eval(), source.eval()
    torch.manual_seed(0)
    feats, lens = torch.randn(2, 120, 80), torch.tensor([120, 97])
    with torch.no_grad():
        got, want = encoder(feats, lens), source(feats, lens)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_speechocean762_zipformer_takes_every_tensor_of_the_broad_one():
    """With --units_from the broad corpus's units, every tensor (output layers included)
    of the broad pretraining model has its place in the speechocean762 model."""
    broad_model = _built("train_zipformer_synth_broad.yaml", 500)
    ours_model = _built("train_zipformer_speechocean762.yaml", 500)
    broad, ours = broad_model.state_dict(), ours_model.state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in broad.items()}
    _assert_same_encoder_function(ours_model.encoder, broad_model.encoder)


def test_cli_run_with_scaled_adam_eden_cr_ctc_resumes_exactly(tmp_path):
    """train.py end to end with a tiny Zipformer, ScaledAdam, Eden and CR-CTC: one epoch, a
    restart that continues to the second (from the checkpoint files: ScaledAdam's clipping
    statistics, Eden's epoch, the RNG that draws the CR-CTC masks), equals two epochs in
    one go, bit for bit."""
    corpus = T.make_corpus(str(tmp_path / "data"))
    config = T.write_config(
        str(tmp_path / "train.yaml"), encoder="zipformer",
        encoder_conf={"downsampling_factor": [2, 4], "num_encoder_layers": 1,
                      "encoder_dim": [32, 48], "encoder_unmasked_dim": [32, 32],
                      "feedforward_dim": [64, 96], "num_heads": 2, "cnn_module_kernel": 3,
                      "frontend_channels": [4, 4, 8], "schedule_scale": 0.001},
        decoder="transformer", decoder_conf={"attention_heads": 2, "linear_units": 64,
                                             "num_blocks": 1},
        model_conf={"ctc_weight": 0.5, "cr_ctc": True, "time_mask_ratio": 2.5},
        accum_grad=1, optim="scaled_adam",
        optim_conf={"lr": 0.045, "clipping_update_period": 3},
        scheduler="eden", scheduler_conf={"lr_batches": 10, "lr_epochs": 1, "warmup_batches": 3})
    whole, split = str(tmp_path / "whole"), str(tmp_path / "split")
    T.run_train(T.train_args(corpus, config, whole), timeout=300)
    T.run_train(T.train_args(corpus, config, split, ["--override_config", "max_epoch 1"]),
                timeout=300)
    resumed = T.run_train(T.train_args(corpus, config, split), timeout=300)
    log = resumed.stdout + resumed.stderr
    assert "resumed from" in log and "epoch 0: starting" not in log, log[-2000:]
    T.assert_same_state(T.load_state(os.path.join(split, "1.pt")),
                        T.load_state(os.path.join(whole, "1.pt")))
    infos = load_yaml(os.path.join(whole, "1.yaml"))
    assert infos["lr"] == pytest.approx(BASE_LR * eden_ratio(infos["step"], 1), rel=1e-9)


def eden_ratio(batch: int, epoch: int) -> float:
    """Eden's factor for lr_batches 10, lr_epochs 1, warm-up done (the CLI test's settings)."""
    return ((batch ** 2 + 100) / 100) ** -0.25 * ((epoch ** 2 + 1) / 1) ** -0.25

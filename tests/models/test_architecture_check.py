"""--init_checkpoint's architecture check: ``architecture_differences`` says two configs
build different functions exactly when a model of one, given the other's weights,
computes another output; train.py refuses such a start unless told to allow it."""
from __future__ import annotations

import copy
import logging
import os
from typing import Any, Dict

import pytest
import torch
import yaml

from wenet.models import init_model
from wenet.models.factory import architecture_differences
from wenet.train.checkpoint import check_init_architecture

ZIPFORMER = {
    "encoder": "zipformer",
    "encoder_conf": {"downsampling_factor": [2, 4], "num_encoder_layers": 1,
                     "encoder_dim": [32, 48], "encoder_unmasked_dim": [32, 32],
                     "feedforward_dim": [64, 96], "num_heads": 2, "cnn_module_kernel": 3,
                     "frontend_channels": [4, 4, 8], "schedule_scale": 0.001},
    "decoder": "transformer",
    "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1},
    "model_conf": {"ctc_weight": 0.5},
    "input_dim": 40, "output_dim": 10, "cmvn_file": None,
}


def _variant(**encoder_conf: Any) -> Dict[str, Any]:
    configs = copy.deepcopy(ZIPFORMER)
    configs["encoder_conf"].update(encoder_conf)
    return configs


# (variant, whether it computes another function than ZIPFORMER)
VARIANTS = [
    (_variant(dropout_rate=0.3), False),                     # regularisation only
    (_variant(schedule_scale=0.5, use_balancers=True, sparse_balancers=True), False),
    (_variant(num_heads=[2, 2]), False),                     # per-stack list of the same value
    (_variant(frontend_activation="swoosh_r"), False),       # the default, spelled out
    (_variant(frontend_activation="relu"), True),
    (_variant(causal=True), True),
]


def _encoder_output(configs: Dict[str, Any], state: Dict[str, torch.Tensor]) -> torch.Tensor:
    model = init_model(configs)
    model.load_state_dict(state)
    model.eval()
    torch.manual_seed(3)
    feats, lens = torch.randn(2, 90, 40), torch.tensor([90, 64])
    with torch.no_grad():
        return model.encoder(feats, lens)[0]


@pytest.mark.parametrize("configs,differs", VARIANTS)
def test_differences_are_those_that_change_the_function(configs, differs):
    """Reference: the same weights in both models, the same input; outputs equal exactly
    when no difference is reported (and the list is symmetric in which side is which)."""
    torch.manual_seed(0)
    state = init_model(ZIPFORMER).state_dict()
    same = torch.equal(_encoder_output(configs, state), _encoder_output(ZIPFORMER, state))
    assert same is not differs
    assert bool(architecture_differences(configs, ZIPFORMER)) is differs
    assert bool(architecture_differences(ZIPFORMER, configs)) is differs


def test_difference_lines_name_the_option_and_both_values():
    lines = architecture_differences(_variant(frontend_activation="relu"), ZIPFORMER)
    assert lines == ["encoder_conf.frontend_activation: relu here, swoosh_r there"]
    conformer = dict(ZIPFORMER, encoder="conformer", encoder_conf={"output_size": 32})
    assert architecture_differences(conformer, ZIPFORMER) == [
        "encoder: conformer here, zipformer there"]
    other_decoder = copy.deepcopy(ZIPFORMER)
    other_decoder["decoder_conf"]["normalize_before"] = False
    assert architecture_differences(other_decoder, ZIPFORMER) == [
        "decoder_conf.normalize_before: False here, True there"]


def _checkpoint_with_yaml(tmp_path, configs: Dict[str, Any]) -> str:
    exp = tmp_path / "exp"
    exp.mkdir()
    path = str(exp / "avg_2.pt")
    torch.save(init_model(configs).state_dict(), path)
    with open(exp / "train.yaml", "w") as f:
        yaml.safe_dump(configs, f)
    return path


def test_a_start_from_another_function_is_refused_unless_allowed(tmp_path, caplog):
    """The case that cost an evening: a SwooshR-front-end model started from the main
    job's ReLU-front-end checkpoint; every tensor matched by name and shape."""
    path = _checkpoint_with_yaml(tmp_path, _variant(frontend_activation="relu"))
    with pytest.raises(ValueError) as err:
        check_init_architecture(ZIPFORMER, path)
    message = str(err.value)
    assert path in message and os.path.join(os.path.dirname(path), "train.yaml") in message
    assert "encoder_conf.frontend_activation: swoosh_r here, relu there" in message
    assert "--init_allow_mismatch" in message
    caplog.set_level(logging.WARNING)
    assert check_init_architecture(ZIPFORMER, path, allow_mismatch=True) == [
        "encoder_conf.frontend_activation: swoosh_r here, relu there"]
    assert "allowed by --init_allow_mismatch" in caplog.text
    # the same function with other regularisation starts without a word
    assert check_init_architecture(_variant(frontend_activation="relu", dropout_rate=0.2),
                                   path) == []


def test_no_train_yaml_beside_the_checkpoint_is_not_checked(tmp_path, caplog):
    path = str(tmp_path / "bare.pt")
    torch.save(init_model(ZIPFORMER).state_dict(), path)
    caplog.set_level(logging.INFO)
    assert check_init_architecture(_variant(causal=True), path) == []
    assert "no train.yaml beside" in caplog.text

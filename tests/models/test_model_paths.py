"""The one rule for files a train.yaml names (wenet.models.paths): the model dir, then the
recipe root recorded at training time, never the working directory; disagreeing candidates
are an error naming both. Every load here runs from a decoy working directory laid out like a
recipe whose files conflict with the model's."""
import json
import os
import shutil

import numpy as np
import pytest
import torch
import yaml

from tests.tiny_experiment import UNITS, tiny_config
from wenet.inference.loader import load_model_dir
from wenet.models import init_model
from wenet.models.paths import resolve_bpe, resolve_cmvn, resolve_units
from wenet.train.config import train_yaml_configs

DIM = 20
CONFIG = {k: v for k, v in tiny_config().items()
          if k not in ("input_dim", "output_dim", "cmvn_file")}  # as the training yaml has it
CMVN_REL = "raw_wav/train/global_cmvn"
UNITS_REL = "data/lang_char/train_char_units.txt"


def _write_cmvn(path, dim, scale):
    path.parent.mkdir(parents=True, exist_ok=True)
    mean, std = scale * np.linspace(-1, 1, dim), scale * np.linspace(1, 2, dim)
    path.write_text(json.dumps({"mean_stat": list(mean * 10),
                                "var_stat": list((std ** 2 + mean ** 2) * 10), "frame_num": 10}))


def _write_units(path, units):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)))


@pytest.fixture
def decoy_cwd(tmp_path, monkeypatch):
    """A working directory holding another recipe's files under the same relative paths:
    an 80-dim CMVN and a units file of the model's size in another order."""
    decoy = tmp_path / "decoy"
    _write_cmvn(decoy / CMVN_REL, 80, 3.0)
    _write_units(decoy / UNITS_REL, UNITS[:2] + UNITS[2:-1][::-1] + UNITS[-1:])
    (decoy / "data/lang_char/train_char.model").write_bytes(b"decoy sentencepiece")
    monkeypatch.chdir(decoy)
    return decoy


def _experiment(recipe, recorded=True):
    """A recipe with its CMVN and units, and exp/x trained there (train.yaml as train.py
    writes it; ``recorded`` False: as written before recipe_root was recorded)."""
    _write_cmvn(recipe / CMVN_REL, DIM, 1.0)
    _write_units(recipe / UNITS_REL, UNITS)
    exp = recipe / "exp" / "x"
    exp.mkdir(parents=True)
    if recorded:
        configs = train_yaml_configs(CONFIG, DIM, len(UNITS), CMVN_REL, UNITS_REL, None)
        configs["recipe_root"] = str(recipe)  # as if train.py had run there
    else:
        configs = dict(CONFIG, input_dim=DIM, output_dim=len(UNITS), cmvn_file=CMVN_REL)
    (exp / "train.yaml").write_text(yaml.safe_dump(configs))
    torch.manual_seed(0)
    model = init_model(dict(configs, cmvn_file=str(recipe / CMVN_REL)))
    torch.save(model.state_dict(), exp / "avg_3.pt")
    return exp, model


def _assert_same_weights(loaded, model):
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name


@pytest.mark.parametrize("recorded", [True, False], ids=["recipe_root", "legacy_train_yaml"])
def test_model_dir_loads_its_own_files_from_a_decoy_working_directory(tmp_path, decoy_cwd,
                                                                      recorded):
    exp, model = _experiment(tmp_path / "recipe", recorded)
    loaded = load_model_dir(str(exp))
    assert loaded.tokenizer.symbol_table == {u: i for i, u in enumerate(UNITS)}
    assert os.path.samefile(resolve_units(str(exp), loaded.configs),
                            tmp_path / "recipe" / UNITS_REL)
    _assert_same_weights(loaded.model, model)
    assert os.path.samefile(resolve_cmvn(str(exp), loaded.configs), tmp_path / "recipe" / CMVN_REL)


def test_train_yaml_loader_takes_the_checkpoints_cmvn(tmp_path, decoy_cwd):
    """recognize.py / export's path: the relative cmvn_file names the decoy's 80-dim file
    in the working directory; the checkpoint's own statistics are used instead."""
    exp, model = _experiment(tmp_path / "recipe")
    loaded = load_model_dir("", "cpu", str(exp / "avg_3.pt"), config=str(exp / "train.yaml"),
                            need_tokenizer=False).model
    _assert_same_weights(loaded, model)
    assert torch.equal(loaded.encoder.global_cmvn.mean, model.encoder.global_cmvn.mean)


def test_the_rule_finds_the_recipes_cmvn_for_a_model_built_afresh(tmp_path, decoy_cwd):
    exp, model = _experiment(tmp_path / "recipe")
    configs = yaml.safe_load((exp / "train.yaml").read_text())
    fresh = init_model(dict(configs, cmvn_file=resolve_cmvn(str(exp), configs)))
    assert torch.equal(fresh.encoder.global_cmvn.mean, model.encoder.global_cmvn.mean)
    assert torch.equal(fresh.encoder.global_cmvn.istd, model.encoder.global_cmvn.istd)


def test_a_checkpoint_without_cmvn_for_a_config_with_one_is_refused(tmp_path, decoy_cwd):
    exp, model = _experiment(tmp_path / "recipe")
    state = {k: v for k, v in model.state_dict().items() if "global_cmvn" not in k}
    torch.save(state, exp / "bare.pt")
    with pytest.raises(ValueError, match="bare.pt: no CMVN buffers"):
        load_model_dir(str(exp), "cpu", str(exp / "bare.pt"))


def test_recorded_root_wins_over_the_dirs_ancestors_and_copies_travel(tmp_path, decoy_cwd):
    recipe = tmp_path / "recipe"
    exp, _ = _experiment(recipe)
    moved = tmp_path / "elsewhere" / "exp" / "x"  # ancestors hold another recipe's units
    shutil.copytree(exp, moved)
    _write_units(tmp_path / "elsewhere" / UNITS_REL, UNITS[::-1])
    configs = yaml.safe_load((moved / "train.yaml").read_text())
    assert os.path.samefile(resolve_units(str(moved), configs), recipe / UNITS_REL)
    shutil.rmtree(recipe)  # the recipe is gone (another machine): the dir's copies serve
    with pytest.raises(FileNotFoundError, match="no units.txt"):
        resolve_units(str(moved), configs)
    _write_units(moved / "units.txt", UNITS)
    assert resolve_units(str(moved), configs) == str(moved / "units.txt")


def test_disagreeing_candidates_name_both_files(tmp_path, decoy_cwd):
    recipe = tmp_path / "recipe"
    exp, _ = _experiment(recipe)
    configs = dict(yaml.safe_load((exp / "train.yaml").read_text()), bpe_model="bpe/x.model")
    shutil.copy(recipe / UNITS_REL, exp / "units.txt")  # stage 6's copy: they agree
    assert resolve_units(str(exp), configs) == str(exp / "units.txt")
    _write_units(exp / "units.txt", UNITS[:2] + UNITS[2:-1][::-1] + UNITS[-1:])
    with pytest.raises(ValueError) as err:
        resolve_units(str(exp), configs)
    assert str(exp / "units.txt") in str(err.value) and str(recipe / UNITS_REL) in str(err.value)
    _write_cmvn(exp / "global_cmvn", DIM, 2.0)
    with pytest.raises(ValueError) as err:
        resolve_cmvn(str(exp), configs)
    assert str(exp / "global_cmvn") in str(err.value) and str(recipe / CMVN_REL) in str(err.value)
    (exp / "bpe.model").write_bytes(b"one")
    (recipe / "bpe").mkdir()
    (recipe / "bpe/x.model").write_bytes(b"two")
    with pytest.raises(ValueError) as err:
        resolve_bpe(str(exp), configs, str(exp / "units.txt"))
    assert str(exp / "bpe.model") in str(err.value) and str(recipe / "bpe/x.model") in str(err.value)
    (recipe / "bpe/x.model").write_bytes(b"one")
    assert resolve_bpe(str(exp), configs, str(exp / "units.txt")) == str(exp / "bpe.model")


def test_units_of_another_size_than_the_model_are_refused(tmp_path, decoy_cwd):
    exp, _ = _experiment(tmp_path / "recipe")
    configs = yaml.safe_load((exp / "train.yaml").read_text())
    _write_units(tmp_path / "recipe" / UNITS_REL, UNITS + ["e"])
    with pytest.raises(ValueError, match="has 9 units but the model's output_dim is 8"):
        resolve_units(str(exp), configs)


def test_train_yaml_records_the_recipe_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    configs = train_yaml_configs(CONFIG, DIM, len(UNITS), CMVN_REL, UNITS_REL, "x.model")
    assert configs["recipe_root"] == str(tmp_path) and os.path.isabs(configs["recipe_root"])
    assert (configs["cmvn_file"], configs["symbol_table"], configs["bpe_model"]) == \
        (CMVN_REL, UNITS_REL, "x.model")
    assert configs["input_dim"] == DIM and configs["output_dim"] == len(UNITS)

"""A model dir's train.yaml is checked when it is read (issue 57): a wrong type is an
error naming the file and the key, and a checkpoint that does not fit the model the
yaml describes is one short error that says why (not 268 lines of size mismatches)."""
import pytest
import yaml

from tests.tiny_experiment import tiny_config, write_experiment
from wenet.inference.loader import load_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    write_experiment(d, tiny_config())
    return d


def _with_yaml(model_dir, tmp_path, change):
    configs = yaml.safe_load((model_dir / "train.yaml").read_text())
    change(configs)
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(configs))
    (tmp_path / "units.txt").write_text((model_dir / "units.txt").read_text())
    return tmp_path / "train.yaml"


@pytest.mark.parametrize("key, value, says", [
    ("output_dim", "128x", "output_dim must be a positive integer (the number of units), "
                           "got '128x'"),
    ("output_dim", True, "output_dim must be a positive integer (the number of units), "
                         "got True"),
    ("input_dim", -80, "input_dim must be a positive integer (the feature dimension), got -80"),
    ("input_dim", None, "input_dim is missing (the feature dimension)"),
    ("encoder_conf", [32], "encoder_conf must be a mapping of options, got [32]"),
    ("decoder_conf", "big", "decoder_conf must be a mapping of options, got 'big'"),
    ("encoder", "conformr", "encoder must be one of ['conformer', "),
])
def test_a_bad_key_is_an_error_naming_the_file_and_the_key(model_dir, tmp_path, key, value,
                                                           says):
    def change(configs):
        if value is None:
            del configs[key]
        else:
            configs[key] = value
    path = _with_yaml(model_dir, tmp_path, change)
    with pytest.raises(ValueError) as err:
        load_model_dir(str(tmp_path), checkpoint=str(model_dir / "model.pt"))
    assert str(err.value).startswith(f"{path}: {says}")


def test_a_yaml_without_encoder_conf_is_one_short_error(model_dir, tmp_path):
    """The encoder then gets its defaults (256 wide, 12 blocks) and none of the checkpoint's
    encoder tensors fit: say so in a few lines, naming the file and the missing key."""
    path = _with_yaml(model_dir, tmp_path, lambda c: c.pop("encoder_conf"))
    with pytest.raises(ValueError) as err:
        load_model_dir(str(tmp_path), checkpoint=str(model_dir / "model.pt"))
    message = str(err.value)
    assert message.startswith(f"{model_dir / 'model.pt'} does not fit the model {path} "
                              "describes: ")
    assert f"{path} has no encoder_conf" in message
    assert len(message.splitlines()) == 1 and len(message) < 800

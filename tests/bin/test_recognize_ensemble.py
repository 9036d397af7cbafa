"""recognize.py --ensemble: the models beside each checkpoint's train.yaml decoded as one."""
from dataclasses import replace
import shutil

import pytest
import torch
import yaml

from tests.tiny_experiment import tiny_config, write_data_list, write_experiment, write_tones
from wenet.bin import recognize
from wenet.bin.recognize import main as recognize_main
from wenet.inference.loader import load_model_dir
from wenet.models.ensemble import EnsembleModel

MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("ens")
    keys = [f"u{i}" for i in range(4)]
    write_tones(d, keys, [0.6, 0.3, 0.45, 0.7])
    write_data_list(d / "data.list", d, keys)
    config = tiny_config({"dataset_conf": {"resample_conf": None}})
    write_experiment(d / "a", config, ctc=8.0, eos=1.0)
    # b: the same model (a copy in its own experiment dir); c: other weights
    shutil.copytree(d / "a", d / "b")
    state = torch.load(d / "a" / "model.pt", weights_only=True)
    g = torch.Generator().manual_seed(5)
    torch.save({k: v + 0.3 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
                for k, v in state.items()}, d / "c.pt")
    shutil.copy(d / "a" / "train.yaml", d / "train.yaml")
    return d


def _run(d, out, *extra):
    recognize_main(["--config", str(d / "a" / "train.yaml"), "--test_data", str(d / "data.list"),
                    "--data_type", "raw", "--checkpoint", str(d / "a" / "model.pt"),
                    "--dict", str(d / "a" / "units.txt"), "--beam_size", "4",
                    "--ctc_weight", "0.5", "--reverse_weight", "0.3", "--modes", " ".join(MODES),
                    "--result_dir", str(out), *extra])
    return {m: (out / m / "text").read_text() for m in MODES}


def test_an_ensemble_of_copies_writes_what_the_model_writes(setup, tmp_path):
    single = _run(setup, tmp_path / "one")
    assert any(len(line.split()) > 1 for text in single.values() for line in text.splitlines())
    assert _run(setup, tmp_path / "two", "--ensemble", str(setup / "b" / "model.pt")) == single


def test_the_ensemble_decodes_as_the_wrapper_of_its_models(setup, tmp_path, monkeypatch):
    """--ensemble c.pt (read with the train.yaml beside it) with weights 1 and 3 gives the
    hypotheses of EnsembleModel over the two models decoded through recognize itself."""
    got = _run(setup, tmp_path / "cli", "--ensemble", str(setup / "c.pt"),
               "--ensemble_weights", "1", "3")
    a = load_model_dir("", "cpu", str(setup / "a" / "model.pt"),
                       config=str(setup / "a" / "train.yaml"), need_tokenizer=False)
    c = load_model_dir("", "cpu", str(setup / "c.pt"), config=str(setup / "train.yaml"),
                       need_tokenizer=False)
    wrapped = EnsembleModel([a.model, c.model], [1.0, 3.0]).eval()
    single = _run(setup, tmp_path / "single")
    monkeypatch.setattr(recognize, "load_decoding_model",
                        lambda *args, **kwargs: replace(a, model=wrapped))
    assert got == _run(setup, tmp_path / "api")
    assert got != single  # c changes the result


def test_bad_ensembles_are_refused(setup, tmp_path):
    d = setup
    with pytest.raises(ValueError, match="transducer modes"):
        recognize_main(["--config", str(d / "a" / "train.yaml"), "--test_data",
                        str(d / "data.list"), "--checkpoint", str(d / "a" / "model.pt"),
                        "--dict", str(d / "a" / "units.txt"), "--mode", "rnnt_greedy_search",
                        "--result_file", str(tmp_path / "t"), "--ensemble", str(d / "c.pt")])
    with pytest.raises(ValueError, match="2 models"):
        _run(d, tmp_path / "w", "--ensemble", str(d / "c.pt"), "--ensemble_weights", "1")
    with pytest.raises(ValueError, match="needs --ensemble"):
        _run(d, tmp_path / "w2", "--ensemble_weights", "1")
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy(d / "c.pt", lonely / "c.pt")
    with pytest.raises(FileNotFoundError, match="no train.yaml"):
        _run(d, tmp_path / "n", "--ensemble", str(lonely / "c.pt"))
    other = tmp_path / "other"
    other.mkdir()
    config = yaml.safe_load((d / "train.yaml").read_text())
    config["dataset_conf"]["fbank_conf"]["frame_shift"] = 20
    (other / "train.yaml").write_text(yaml.safe_dump(config))
    shutil.copy(d / "c.pt", other / "c.pt")
    with pytest.raises(ValueError, match="features"):
        _run(d, tmp_path / "f", "--ensemble", str(other / "c.pt"))
    with pytest.raises(ValueError, match="needs --checkpoint"):
        recognize_main(["--config", str(d / "a" / "train.yaml"), "--test_data",
                        str(d / "data.list"), "--dict", str(d / "a" / "units.txt"),
                        "--result_file", str(tmp_path / "t"), "--ensemble", str(d / "c.pt")])


def test_training_dither_does_not_count_as_other_features(setup, tmp_path):
    """Decoding never dithers, so a partner trained with another dither is welcome."""
    d = setup
    other = tmp_path / "dither"
    other.mkdir()
    config = yaml.safe_load((d / "train.yaml").read_text())
    config["dataset_conf"]["fbank_conf"]["dither"] = 0.1
    (other / "train.yaml").write_text(yaml.safe_dump(config))
    shutil.copy(d / "a" / "model.pt", other / "model.pt")
    assert _run(d, tmp_path / "o", "--ensemble", str(other / "model.pt")) == \
        _run(d, tmp_path / "s")

"""recognize.py end to end on a tiny random model: batching must not change any hypothesis."""
from unittest.mock import Mock

import pytest
import torch
import yaml

from tests.tiny_experiment import UNITS, tiny_config, write_data_list, write_experiment, write_tones
from wenet.bin.recognize import main as recognize_main
from wenet.decode import batch_context
from wenet.models import init_model

MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("recog")
    keys = [f"u{i}" for i in range(5)]
    write_tones(d, keys, [0.6, 0.3, 0.45, 0.7, 0.35])
    write_data_list(d / "data.list", d, keys)
    config = tiny_config({"dataset_conf": {"resample_conf": None, "shuffle": True, "sort": True}})
    write_experiment(d, config, ctc=8.0, eos=1.0)  # eos: fewer immediate ends
    return d


def _run(d, out, batch_size, *extra):
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(d / "data.list"),
                    "--data_type", "raw", "--checkpoint", str(d / "model.pt"),
                    "--dict", str(d / "units.txt"), "--beam_size", "4",
                    "--batch_size", str(batch_size), "--ctc_weight", "0.5",
                    "--reverse_weight", "0.3", "--penalty", "0.5", *extra,
                    "--result_dir" if "--modes" in extra else "--result_file", str(out)])


def _read(path):
    return path.read_text().splitlines()


def test_batch_size_does_not_change_hypotheses(setup, tmp_path):
    d = setup
    _run(d, tmp_path / "b1", 1, "--modes", " ".join(MODES))
    _run(d, tmp_path / "b4", 4, "--modes", " ".join(MODES))
    non_empty = 0
    for mode in MODES:
        one = _read(tmp_path / "b1" / mode / "text")
        # batch 1 keeps the list order; larger batches are padded longest first
        assert [line.split()[0] for line in one] == [f"u{i}" for i in range(5)]
        assert sorted(_read(tmp_path / "b4" / mode / "text")) == one, mode
        non_empty += sum(len(line.split()) > 1 for line in one)
    assert non_empty > 0  # the comparison is not between empty outputs


def test_prefix_search_once_per_batch_and_each_mode_as_if_alone(setup, tmp_path, monkeypatch):
    """Both CTC-prefix modes share one prefix beam search per batch, and each one's text
    equals what asking for that mode alone writes."""
    d = setup
    prefix_search = Mock(wraps=batch_context.ctc_prefix_beam_search)
    monkeypatch.setattr(batch_context, "ctc_prefix_beam_search", prefix_search)
    pair = ["ctc_prefix_beam_search", "attention_rescoring"]
    _run(d, tmp_path / "pair", 2, "--modes", " ".join(pair))
    assert prefix_search.call_count == 3  # 5 utterances in batches of 2
    for mode in pair:
        _run(d, tmp_path / f"{mode}.txt", 2, "--mode", mode)
        assert _read(tmp_path / f"{mode}.txt") == _read(tmp_path / "pair" / mode / "text")
    assert prefix_search.call_count == 3 * 3
    texts = [_read(tmp_path / "pair" / mode / "text") for mode in pair]
    assert texts[0] != texts[1]  # rescoring changed hypotheses: the modes are told apart


def test_single_mode_file_and_raw_output(setup, tmp_path):
    d = setup
    _run(d, tmp_path / "multi", 2, "--modes", "ctc_greedy_search")
    _run(d, tmp_path / "single.txt", 2, "--mode", "ctc_greedy_search")
    assert _read(tmp_path / "single.txt") == _read(tmp_path / "multi" / "ctc_greedy_search" / "text")
    _run(d, tmp_path / "raw.txt", 2, "--mode", "ctc_greedy_search", "--raw_output")
    pieces = 0
    for words, raw in zip(_read(tmp_path / "single.txt"), _read(tmp_path / "raw.txt")):
        key, _, text = raw.partition(" ")
        assert " " not in text  # pieces concatenated
        pieces += text.count("\u2581")
        assert words.split() == [key] + text.replace("\u2581", " ").split()
    assert pieces > 0  # word boundaries were exercised


def test_greedy_output_matches_direct_model_call(setup, tmp_path):
    """The file's greedy text equals argmax-collapse of the model's own CTC output."""
    from wenet.dataset.dataset import Dataset
    from wenet.inference.batch_decoding import decoding_dataset_conf
    d = setup
    _run(d, tmp_path / "g.txt", 3, "--mode", "ctc_greedy_search")
    config = yaml.safe_load((d / "train.yaml").read_text())
    model = init_model(config)
    model.load_state_dict(torch.load(d / "model.pt", weights_only=True))
    model.eval()
    ds = Dataset("raw", str(d / "data.list"), str(d / "units.txt"),
                 decoding_dataset_conf(config["dataset_conf"], 1), training=False, partition=False)
    expected = []
    with torch.no_grad():
        for batch in ds:
            enc, mask = model.encode(batch["feats"], batch["feats_lengths"])
            best = model.ctc_logprobs(enc)[0, : int(mask.sum())].argmax(-1).tolist()
            toks = [t for i, t in enumerate(best) if t != 0 and (i == 0 or t != best[i - 1])]
            text = "".join(UNITS[t] for t in toks).replace("\u2581", " ")
            expected.append(" ".join([batch["keys"][0]] + text.split()))
    assert sorted(_read(tmp_path / "g.txt")) == expected


@pytest.mark.parametrize("size", ["0", "-2"])
def test_non_positive_chunk_size_is_refused_naming_the_option(setup, tmp_path, capsys, size):
    """--decoding_chunk_size 0 is training's random chunk draw (and -2 means nothing):
    refused where the option is parsed, before any model is loaded or file written."""
    with pytest.raises(SystemExit) as exit_info:
        _run(setup, tmp_path / "out.txt", 2, "--mode", "ctc_greedy_search",
             "--decoding_chunk_size", size)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--decoding_chunk_size" in err and "-1 (full context)" in err and f"got {size}" in err
    assert not (tmp_path / "out.txt").exists()

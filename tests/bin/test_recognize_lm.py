"""recognize.py with a word n-gram LM (--lm_path): weighted 0 over an open vocabulary it
changes nothing; restricted to its vocabulary it outputs only the LM's words; and its
output is the fused search's best hypothesis."""
import pytest

from tests.tiny_experiment import (read_hyps, tiny_config, write_data_list, write_experiment,
                                   write_tones)
from wenet.bin.recognize import main as recognize_main
from wenet.lm.ngram import train_kneser_ney

MODES = ["ctc_prefix_beam_search", "attention_rescoring"]
CONFIG = tiny_config({"decoder": "transformer", "decoder_conf": {"r_num_blocks": None},
                      "model_conf": {"reverse_weight": None},
                      "dataset_conf": {"resample_conf": None}})
KEYS = [f"u{i}" for i in range(5)]
LM_WORDS = {"ab", "ca", "bb", "dc"}  # not "d", which the model says without an LM


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("lm")
    write_tones(d, KEYS, [0.6, 0.3, 0.45, 0.7, 0.5], seed=3)
    write_experiment(d, CONFIG, ctc=8.0)
    lm = train_kneser_ney([s.split() for s in ["ab dc", "ca ab", "bb dc ab", "dc ca"]], 2)
    lm.write_arpa(str(d / "lm.arpa"))
    write_data_list(d / "data.list", d, KEYS)
    return d


def _recognize(d, out, *extra):
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(d / "data.list"),
                    "--data_type", "raw", "--checkpoint", str(d / "model.pt"),
                    "--dict", str(d / "units.txt"), "--beam_size", "4", "--batch_size", "2",
                    "--ctc_weight", "0.5", "--modes", " ".join(MODES),
                    "--result_dir", str(out), *extra])
    return {m: read_hyps(out / m / "text") for m in MODES}


def test_weight_zero_open_vocabulary_changes_nothing(setup, tmp_path):
    plain = _recognize(setup, tmp_path / "plain")
    fused = _recognize(setup, tmp_path / "lm0", "--lm_path", str(setup / "lm.arpa"),
                       "--lm_weight", "0", "--lm_open_vocab")
    assert fused == plain
    assert any(plain["ctc_prefix_beam_search"].values())  # not a vacuous comparison


def test_restricted_output_is_made_of_lm_words(setup, tmp_path):
    plain = _recognize(setup, tmp_path / "plain")
    fused = _recognize(setup, tmp_path / "lm", "--lm_path", str(setup / "lm.arpa"),
                       "--lm_weight", "0.5", "--word_bonus", "1.0")
    for m in MODES:
        words = [w for text in fused[m].values() for w in text.split()]
        assert words and set(words) <= LM_WORDS, (m, fused[m])
    # the random model spells other strings without the LM: the constraint did the work
    plain_words = {w for text in plain["ctc_prefix_beam_search"].values() for w in text.split()}
    assert plain_words - LM_WORDS


def test_hotwords_and_lm_together_are_refused(setup, tmp_path):
    ctx = tmp_path / "hot.txt"
    ctx.write_text("ab\n")
    with pytest.raises(ValueError, match="hotword biasing and an n-gram LM"):
        _recognize(setup, tmp_path / "both", "--lm_path", str(setup / "lm.arpa"),
                   "--context_list_path", str(ctx))

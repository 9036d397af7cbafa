"""One set of search flags: every CLI and bench offers its search flags exactly as the one
argparse group defines them (names, type, help, default), those defaults are
``DecodeOptions()``'s, and arguments -> ``search_options`` -> ``DecodeOptions`` keeps
every value (``RefineConf`` likewise)."""
import argparse

import pytest

from bench import alignment_accuracy, context_biasing, serve_load
from bench import decode as bench_decode
from bench import transcribe as bench_transcribe
from tests.tiny_experiment import UNITS
from wenet.bin import alignment, recognize, serve, transcribe
from wenet.dataset.tokenizer import Tokenizer
from wenet.decode.options import DecodeOptions
from wenet.lm.ngram import train_kneser_ney
from wenet.decode.options import (ALL, BATCH, ENCODER, STREAM, STREAM_CHUNK_SIZE,
                                  add_refine_options, add_search_options, refine_conf,
                                  search_options)
from wenet.alignment.pauses import RefineConf

# each CLI's parser and the search flags it offers (the rest would be ignored there)
CLIS = {
    "recognize": (recognize.get_parser, set(ALL)),
    "transcribe": (transcribe.get_parser, set(BATCH)),
    "serve": (serve.get_parser, set(STREAM)),
    "alignment": (alignment.get_parser, set(ENCODER)),
    "bench/decode": (bench_decode.get_parser, {"beam_size", "ctc_weight"}),
    "bench/transcribe": (bench_transcribe.get_parser, {"beam_size", "ctc_weight"}),
    "bench/context_biasing": (context_biasing.get_parser,
                              {"beam_size", "ctc_weight", "context_score"}),
    "bench/alignment_accuracy": (alignment_accuracy.get_parser, set(ENCODER)),
    "bench/serve_load": (serve_load.get_parser, {"decoding_chunk_size"}),
}
STREAMING_CLIS = {"serve", "bench/serve_load"}  # a stream needs a chunk size > 0
ENCODER_FLAGS = ("decoding_chunk_size", "num_decoding_left_chunks")  # the chunking flags


def _reference(refine: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    if refine:
        add_refine_options(p)
    else:
        add_search_options(p, ALL)
    return p


def _described(action: argparse.Action) -> tuple:
    return (type(action), tuple(action.option_strings), action.dest, action.type,
            action.help, action.nargs, action.const, action.default)


def _flags_of(parser: argparse.ArgumentParser, reference: argparse.ArgumentParser) -> dict:
    """The parser's actions that answer to any of the reference's option strings."""
    names = {s for a in reference._actions for s in a.option_strings} - {"-h", "--help"}
    return {a.dest: a for a in parser._actions if set(a.option_strings) & names}


@pytest.mark.parametrize("cli", list(CLIS))
def test_every_cli_offers_the_one_definition_of_its_search_flags(cli):
    get_parser, expected = CLIS[cli]
    reference = {a.dest: a for a in _reference()._actions}
    ours = _flags_of(get_parser(), _reference())
    assert set(ours) == expected
    for dest, action in ours.items():
        want = _described(reference[dest])
        if cli in STREAMING_CLIS and dest in ENCODER_FLAGS:
            # not given (None): an ONNX export's own chunking, else STREAM_CHUNK_SIZE (16) and
            # all left chunks, so that a value given explicitly can be checked against an export
            assert action.default is None and STREAM_CHUNK_SIZE == 16
            assert action.help == want[4] + (
                f" (default: an ONNX export's own; else {STREAM_CHUNK_SIZE})"
                if dest == "decoding_chunk_size" else " (default: an ONNX export's own; else -1)")
            want = want[:4] + (action.help,) + want[5:-1] + (None,)
        assert _described(action) == want, (cli, dest)


def test_shared_flags_have_one_default_everywhere():
    """E.g. --ctc_weight is 0.5 in recognize.py (it was 0.0), transcribe.py, serve.py and
    the benches; --context_score 3.0 (bench/context_biasing.py had 2.0)."""
    defaults = {}
    for cli, (get_parser, _) in CLIS.items():
        for dest, action in _flags_of(get_parser(), _reference()).items():
            if not (cli in STREAMING_CLIS and dest in ENCODER_FLAGS):
                defaults.setdefault(dest, set()).add(action.default)
    assert all(len(values) == 1 for values in defaults.values()), defaults
    assert defaults["ctc_weight"] == {0.5} and defaults["context_score"] == {3.0}
    assert defaults["beam_size"] == {10} and defaults["decoding_chunk_size"] == {-1}


@pytest.mark.parametrize("cli", ["alignment", "bench/alignment_accuracy"])
def test_refine_flags_have_one_definition(cli):
    reference = {a.dest: a for a in _reference(refine=True)._actions}
    ours = _flags_of(CLIS[cli][0](), _reference(refine=True))
    assert len(ours) == 7
    for dest, action in ours.items():
        assert _described(action) == _described(reference[dest]), (cli, dest)


def test_defaults_are_the_dataclass_defaults():
    assert search_options(_reference().parse_args([])) == DecodeOptions()
    assert refine_conf(_reference(refine=True).parse_args([])) == RefineConf()
    assert DecodeOptions().ctc_weight == 0.5 and DecodeOptions().chunk_size == -1


def test_args_round_trip_to_options():
    args = _reference().parse_args([
        "--beam_size", "3", "--ctc_weight", "0.25", "--reverse_weight", "0.4",
        "--transducer_weight", "0.7", "--penalty", "0.6", "--blank_skip_threshold", "0.9",
        "--max_sym_per_frame", "2", "--decoding_chunk_size", "8",
        "--num_decoding_left_chunks", "2", "--simulate_streaming"])
    assert search_options(args) == DecodeOptions(
        beam_size=3, ctc_weight=0.25, reverse_weight=0.4, transducer_weight=0.7,
        length_penalty=0.6, blank_skip_threshold=0.9, max_sym_per_frame=2, chunk_size=8,
        num_left_chunks=2, simulate_streaming=True)
    # serve.py's names of the chunk flags, and a blank skip threshold <= 0: off
    args = _reference().parse_args(["--chunk_size", "4", "--num_left_chunks", "1",
                                    "--blank_skip_threshold", "0"])
    assert search_options(args) == DecodeOptions(chunk_size=4, num_left_chunks=1,
                                                 blank_skip_threshold=None)


def test_a_cli_without_a_flag_gets_the_default():
    p = argparse.ArgumentParser()
    add_search_options(p, ENCODER)
    assert search_options(p.parse_args(["--decoding_chunk_size", "4"])) == \
        DecodeOptions(chunk_size=4)


def test_hotwords_and_lm_are_compiled_with_the_flags(tmp_path):
    tokenizer = Tokenizer({u: i for i, u in enumerate(UNITS)})
    (tmp_path / "hot.txt").write_text("ab\nc\n")
    args = _reference().parse_args(["--context_list_path", str(tmp_path / "hot.txt"),
                                    "--context_score", "2.5"])
    graph = search_options(args, tokenizer).context_graph
    assert graph.context_score == 2.5
    assert graph.score(tokenizer.encode("ab")[0]) == 2.5 * 2  # per matched unit
    lm = train_kneser_ney([["ab", "dc"], ["ca", "ab"]], 2)
    lm.write_arpa(str(tmp_path / "lm.arpa"))
    args = _reference().parse_args(["--lm_path", str(tmp_path / "lm.arpa"), "--lm_weight",
                                    "0.3", "--word_bonus", "1.5", "--lm_open_vocab"])
    fusion = search_options(args, tokenizer).lm_fusion
    assert (fusion.weight, fusion.word_bonus, fusion.restrict_vocab) == (0.3, 1.5, False)
    assert fusion.lm.vocab >= {"ab", "dc", "ca"}


@pytest.mark.parametrize("argv,message", [
    (["--lm_path", "lm.arpa", "--context_list_path", "hot.txt"],
     "hotword biasing and an n-gram LM together are not supported"),
    (["--lm_weight", "0.3"], "--lm_weight given without --lm_path"),
    (["--word_bonus", "1", "--lm_open_vocab"], "--word_bonus --lm_open_vocab given without"),
])
def test_conflicting_flags_are_refused(argv, message):
    with pytest.raises(ValueError, match=message):
        search_options(_reference().parse_args(argv))


@pytest.mark.parametrize("argv,message", [
    (["--beam_size", "0"], "argument --beam_size: a positive integer is needed, got 0"),
    (["--decoding_chunk_size", "0"], "0 draws a random chunk size per batch"),
    (["--chunk_size", "-2"], "must be -1 (full context) or a positive chunk size"),
    (["--ctc_weight", "x"], "argument --ctc_weight: invalid float value"),
])
def test_bad_values_fail_with_the_flag_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        _reference().parse_args(argv)
    assert message in capsys.readouterr().err


def test_unknown_flag_names_and_options_are_refused():
    with pytest.raises(ValueError, match="no search flag \\['beam'\\]"):
        add_search_options(argparse.ArgumentParser(), ["beam"])
    with pytest.raises(ValueError, match="beam_size must be a positive integer"):
        DecodeOptions(beam_size=0)
    with pytest.raises(ValueError, match="decoding_chunk_size must be -1"):
        DecodeOptions(chunk_size=0)


def test_refine_args_round_trip():
    args = _reference(refine=True).parse_args([
        "--refine_slack", "0.1", "--refine_margin_db", "8", "--refine_edge_margin_db", "2",
        "--refine_min_pause", "0.07", "--refine_min_speech", "0.02", "--pause_penalty", "12",
        "--speech_penalty", "4"])
    assert refine_conf(args) == RefineConf(slack_s=0.1, margin_db=8.0, edge_margin_db=2.0,
                                           min_pause_s=0.07, min_speech_s=0.02,
                                           pause_penalty=12.0, speech_penalty=4.0)

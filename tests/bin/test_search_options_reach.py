"""The search flags of recognize.py, transcribe.py, alignment.py and serve.py reach the
searches and the encoder unchanged: each CLI is run with values that differ from every
default, and the calls the searches receive are recorded."""
from types import SimpleNamespace

import pytest

from tests.tiny_experiment import tiny_config, write_data_list, write_experiment, write_tones
from wenet.bin import alignment, recognize, serve, transcribe
from wenet.decode import batch_context, modes
from wenet.decode.options import DecodeOptions
from wenet.alignment.pauses import RefineConf
from wenet.decode.stream_state import EndpointRules
from wenet.transformer.asr_model import ASRModel

KEYS = ["u0", "u1"]
SEARCH_FLAGS = ["--beam_size", "3", "--ctc_weight", "0.25", "--reverse_weight", "0.4",
                "--blank_skip_threshold", "0.9", "--decoding_chunk_size", "4",
                "--num_decoding_left_chunks", "1"]
# what those flags must arrive as
BEAM_CALL = {"beam_size": 3, "blank_skip_threshold": 0.9}
RESCORE_CALL = {"first_pass_weight": 0.25, "reverse_weight": 0.4}


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    d = tmp_path_factory.mktemp("reach")
    write_tones(d, KEYS, [0.5, 0.4])
    write_data_list(d / "data.list", d, KEYS, txt_of=lambda key: "ab")
    write_experiment(d, tiny_config({"dataset_conf": {"resample_conf": None},
                                     "encoder_conf": {"causal": True, "use_dynamic_chunk": True}}),
                     ctc=8.0)
    return d


@pytest.fixture
def calls(monkeypatch):
    """Record the arguments of the encoder, the CTC prefix beam search and the rescoring."""
    seen = {"encode": [], "beam": [], "rescore": []}

    def recorder(name, real, keep):
        def call(*args, **kwargs):
            seen[name].append(keep(args, kwargs))
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(ASRModel, "encode", recorder(
        "encode", ASRModel.encode, lambda a, k: tuple(a[3:]) + tuple(k.values())))
    monkeypatch.setattr(batch_context, "ctc_prefix_beam_search", recorder(
        "beam", batch_context.ctc_prefix_beam_search,
        lambda a, k: {"beam_size": a[2], "blank_skip_threshold": k["blank_skip_threshold"]}))
    monkeypatch.setattr(modes, "attention_rescoring", recorder(
        "rescore", modes.attention_rescoring,
        lambda a, k: {n: k[n] for n in ("first_pass_weight", "reverse_weight")}))
    return seen


def _check(calls, simulate_streaming):
    assert calls["encode"] and all(c == (4, 1, simulate_streaming) for c in calls["encode"])
    assert calls["beam"] and all(c == BEAM_CALL for c in calls["beam"])
    assert calls["rescore"] and all(c == RESCORE_CALL for c in calls["rescore"])


def test_recognize_flags_reach_the_searches(exp, tmp_path, calls):
    recognize.main(["--config", str(exp / "train.yaml"), "--test_data", str(exp / "data.list"),
                    "--checkpoint", str(exp / "model.pt"), "--dict", str(exp / "units.txt"),
                    "--batch_size", "1", "--simulate_streaming", *SEARCH_FLAGS,
                    "--mode", "attention_rescoring", "--result_file", str(tmp_path / "text")])
    _check(calls, True)


def test_transcribe_flags_reach_the_searches(exp, tmp_path, calls):
    assert transcribe.main(["--model_dir", str(exp), "--checkpoint", str(exp / "model.pt"),
                            *SEARCH_FLAGS, "--output", str(tmp_path / "text"),
                            str(exp / "u0.wav")]) == 0
    _check(calls, False)


def test_alignment_flags_reach_the_aligner(exp, tmp_path, monkeypatch):
    aligners = []
    monkeypatch.setattr(alignment, "align_data_list",
                        lambda aligner, *a: aligners.append(aligner) or iter(()))
    alignment.main(["--config", str(exp / "train.yaml"), "--checkpoint", str(exp / "model.pt"),
                    "--input_file", str(exp / "data.list"), "--dict", str(exp / "units.txt"),
                    "--result_file", str(tmp_path / "words.txt"), "--chunk_size", "4",
                    "--num_left_chunks", "1", "--refine_boundaries", "--pause_penalty", "7"])
    [aligner] = aligners
    assert aligner.chunk == (4, 1) and aligner.refine == RefineConf(pause_penalty=7.0)


def test_serve_flags_reach_every_stream(monkeypatch):
    monkeypatch.setattr(serve, "load_streaming_model", lambda *a: SimpleNamespace(
        model="model", tokenizer="tokenizer", feature_conf="features"))
    streams = []
    monkeypatch.setattr("wenet.serve.server.StreamingRecognizer",
                        lambda *a, **k: streams.append(a[3]))
    server = serve.build_server(serve.get_parser().parse_args(
        ["--model_dir", "m", "--chunk_size", "8", "--num_left_chunks", "2", "--beam_size", "3",
         "--ctc_weight", "0.25", "--reverse_weight", "0.4", "--blank_skip_threshold", "0",
         "--context_score", "2", "--endpoint_silence_ms", "700"]))
    rules = EndpointRules(trailing_silence_ms=700.0)
    assert server.options == DecodeOptions(chunk_size=8, num_left_chunks=2, beam_size=3,
                                           ctc_weight=0.25, reverse_weight=0.4,
                                           blank_skip_threshold=None, endpoint=rules)
    assert server.hotword_score == 2.0
    for chunk in (None, 4):  # a start message may ask for another chunk size
        server._new_recognizer(SimpleNamespace(chunk_size=chunk, nbest=1, hotwords=None,
                                               continuous_decoding=False, hotword_score=None))
    assert streams == [server.options, DecodeOptions(
        chunk_size=4, num_left_chunks=2, beam_size=3, ctc_weight=0.25, reverse_weight=0.4,
        blank_skip_threshold=None, endpoint=rules)]
    server.executor.shutdown()


def test_serve_defaults_are_unchanged(monkeypatch):
    monkeypatch.setattr(serve, "load_streaming_model", lambda *a: SimpleNamespace(tokenizer=None))
    server = serve.build_server(serve.get_parser().parse_args(["--model_dir", "m"]))
    assert server.options == DecodeOptions(chunk_size=16, ctc_weight=0.5)
    server.executor.shutdown()
    with pytest.raises(ValueError, match="a stream is encoded chunk by chunk: --chunk_size "
                                         "must be > 0, got -1"):
        serve.build_server(serve.get_parser().parse_args(["--model_dir", "m",
                                                          "--decoding_chunk_size", "-1"]))

"""serve.py's search options reach the streams: --lm_path (a CTC model's streams decode as
StreamingRecognizer with that LM fusion, itself equal to recognize.py --lm_path,
test_streaming.py), --transducer_search greedy, and the combinations refused: an LM with a
transducer (at start-up), hotwords with an LM server or with greedy transducer search (a
failed message)."""
import asyncio
import json

import numpy as np
import pytest

from tests.serve.server_thread import ServerThread
from tests.serve.test_server import _exchange
from tests.serve.test_streaming import stream_text
from wenet.bin.serve import build_server, get_parser, main
from wenet.decode.ctc_lm import LMFusion
from wenet.decode.options import DecodeOptions
from wenet.lm.ngram import train_kneser_ney
from wenet.serve.client import read_pcm16, stream_audio
from wenet.serve.loading import load_streaming_model


def _args(model_dir, *extra):
    return get_parser().parse_args(["--model_dir", str(model_dir), "--port", "0",
                                    "--chunk_size", "4", "--num_workers", "1",
                                    "--beam_size", "5", *extra])


PLAIN = DecodeOptions(chunk_size=4, beam_size=5)


@pytest.fixture(scope="module")
def arpa(u2pp_dir, tmp_path_factory):
    """A bigram LM that knows only shortened words of the U2++ model's plain results
    (each without its last or first letter), so that with its vocabulary only they change."""
    loaded = load_streaming_model(str(u2pp_dir))
    words = {w for i in range(3) for w in stream_text(
        loaded, read_pcm16(str(u2pp_dir / f"u{i}.wav")), PLAIN,
        np.random.default_rng(i))[0].split()}
    vocab = sorted({v for w in words if len(w) > 1 for v in (w[:-1], w[1:])})
    path = tmp_path_factory.mktemp("lm") / "lm.arpa"
    train_kneser_ney([vocab[i:] + vocab[:i] for i in range(len(vocab))], order=2).write_arpa(
        str(path))
    return path


def test_lm_path_reaches_the_streams(u2pp_dir, arpa, one_thread):
    flags = ["--lm_path", str(arpa), "--lm_weight", "0.8", "--word_bonus", "0.5"]
    server = build_server(_args(u2pp_dir, *flags))
    fusion = server.options.lm_fusion
    assert (fusion.weight, fusion.word_bonus, fusion.restrict_vocab) == (0.8, 0.5, True)
    loaded = load_streaming_model(str(u2pp_dir))
    with_lm = DecodeOptions(chunk_size=4, beam_size=5, lm_fusion=LMFusion.from_arpa(
        str(arpa), loaded.tokenizer.symbol_table, 0.8, 0.5))
    changed = 0
    with ServerThread(server) as srv:
        for i in range(3):
            pcm = read_pcm16(str(u2pp_dir / f"u{i}.wav"))
            direct = stream_text(loaded, pcm, with_lm, np.random.default_rng(i))[0]
            assert asyncio.run(stream_audio(srv.url, pcm)).text == direct
            changed += direct != stream_text(loaded, pcm, PLAIN, np.random.default_rng(i))[0]
        answers, code = asyncio.run(_exchange(srv.url, json.dumps(
            {"signal": "start", "hotwords": ["ab"]})))
        assert "hotword biasing and an n-gram LM together" in answers[-1]["message"]
        assert code == 1008
    assert changed  # the LM changed some result


def test_transducer_greedy_search(transducer_dir, one_thread):
    server = build_server(_args(transducer_dir, "--transducer_search", "greedy"))
    loaded = server.loaded
    with ServerThread(server) as srv:
        for i in range(2):
            pcm = read_pcm16(str(transducer_dir / f"u{i}.wav"))
            direct = stream_text(loaded, pcm, PLAIN, np.random.default_rng(i),
                                 transducer_search="greedy")[0]
            assert direct and asyncio.run(stream_audio(srv.url, pcm)).text == direct
        answers, code = asyncio.run(_exchange(srv.url, json.dumps(
            {"signal": "start", "hotwords": ["dd"]})))
        assert "hotwords need the transducer beam search" in answers[-1]["message"]


def test_lm_with_a_transducer_is_refused(transducer_dir, arpa, capsys):
    assert main(["--model_dir", str(transducer_dir), "--port", "0", "--lm_path",
                 str(arpa)]) == 1
    assert "this model is a transducer" in capsys.readouterr().err

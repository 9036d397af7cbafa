"""``serve.py --onnx_dir``: the server streaming from an exported ONNX directory, for each
served kind of tiny model (U2++, causal Zipformer, transducer). A stream's final text
equals recognize.py --simulate_streaming's with the export's chunk size and left chunks
(attention_rescoring, rnnt_beam_search, rnnt_greedy_search; with hotwords too), over
the WebSocket as well; the export's chunking is enforced (flags, start messages) and a
non-streaming export is refused with the reason."""
import asyncio
import json

import pytest

from tests.serve.conftest import CHUNK, kind_of, write_model_dir
from tests.serve.server_thread import ServerThread
from tests.serve.test_server import _exchange
from tests.serve.test_streaming import _check_streams, _recognize
from wenet.bin.serve import build_server, get_parser
from wenet.bin.serve import main as serve_main
from wenet.decode.context_graph import ContextGraph
from wenet.decode.options import STREAM_CHUNK_SIZE, DecodeOptions
from wenet.inference.loader import load_model_dir
from wenet.serve.client import read_pcm16, stream_audio
from wenet.serve.loading import NotServableError, load_onnx_streaming_model
from wenet.runtime.session import output_frames

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

LEFT = 2  # left chunks of the export (fixed-size caches)


def _export(model_dir, out, chunk=CHUNK, left=LEFT):
    from wenet.export.onnx import copy_units, export_onnx_models
    loaded = load_model_dir(str(model_dir), checkpoint=str(model_dir / "model.pt"))
    export_onnx_models(loaded.model, loaded.configs, str(out), chunk, left)
    copy_units(str(out), str(model_dir / "units.txt"), None)
    return out


@pytest.fixture(scope="module")
def onnx_dir(model_dir, tmp_path_factory):
    return _export(model_dir, tmp_path_factory.mktemp("onnx") / kind_of(model_dir))


def _options(**changes):
    return DecodeOptions(**{**dict(chunk_size=CHUNK, num_left_chunks=LEFT, beam_size=5,
                                   ctc_weight=0.5, reverse_weight=0.3), **changes})


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_onnx_stream_equals_simulate_streaming(model_dir, onnx_dir, tmp_path, one_thread,
                                               search):
    """ONNX streams give the checkpoint's recognize.py --simulate_streaming text with the
    same chunk size and left chunks (the fixed-size caches hold exactly those)."""
    kind = kind_of(model_dir)
    if search == "greedy" and kind != "transducer":
        pytest.skip("greedy search of a transducer")
    mode = "rnnt_greedy_search" if search == "greedy" else None
    ref = _recognize(model_dir, tmp_path / "text", model_dir / "model.pt", CHUNK, LEFT,
                     mode=mode)
    served = load_onnx_streaming_model(str(onnx_dir))
    assert served.model.fixed_chunking() == (CHUNK, LEFT)
    _check_streams(model_dir, served, ref, _options(), 5, transducer_search=search)


def test_onnx_stream_with_hotwords(model_dir, onnx_dir, tmp_path, one_thread):
    """Hotwords on an ONNX stream: recognize.py's text with the same context list."""
    plain = _recognize(model_dir, tmp_path / "plain", model_dir / "model.pt", CHUNK, LEFT)
    words = sorted({w[i:i + 2] for text in plain.values() for w in text.split()
                    for i in (0, 3) if len(w) >= i + 2 and "<" not in w[i:i + 2]})
    (tmp_path / "hot.txt").write_text("\n".join(words[:3]) + "\n")
    ref = _recognize(model_dir, tmp_path / "text", model_dir / "model.pt", CHUNK, LEFT,
                     "--context_list_path", str(tmp_path / "hot.txt"), "--context_score", "4")
    assert ref != plain
    served = load_onnx_streaming_model(str(onnx_dir))
    graph = ContextGraph.from_file(str(tmp_path / "hot.txt"), served.tokenizer, 4.0)
    _check_streams(model_dir, served, ref, _options(), 6, context_graph=graph)


def _args(*argv):
    return get_parser().parse_args([*argv, "--port", "0", "--beam_size", "5",
                                    "--ctc_weight", "0.5", "--reverse_weight", "0.3"])


def test_onnx_server_over_websocket(model_dir, onnx_dir, tmp_path, one_thread):
    """serve.py --onnx_dir takes the export's chunking by default; the WebSocket results
    are recognize.py's; a start message asking another chunk size is refused."""
    ref = _recognize(model_dir, tmp_path / "text", model_dir / "model.pt", CHUNK, LEFT)
    server = build_server(_args("--onnx_dir", str(onnx_dir)))
    assert (server.options.chunk_size, server.options.num_left_chunks) == (CHUNK, LEFT)
    with ServerThread(server) as srv:
        for key, text in ref.items():
            pcm = read_pcm16(str(model_dir / f"{key}.wav"))
            res = asyncio.run(stream_audio(srv.url, pcm, chunk_ms=90))
            assert res.text == text, key
        answers, code = asyncio.run(_exchange(
            srv.url, json.dumps({"signal": "start", "chunk_size": CHUNK * 2})))
        assert answers[-1]["status"] == "failed" and code == 1008
        assert '"chunk_size"' in answers[-1]["message"]
        answers, code = asyncio.run(_exchange(
            srv.url, json.dumps({"signal": "start", "chunk_size": CHUNK // 2})))
        assert answers[-1]["status"] == "failed" and code == 1008
        assert "fixed at its export" in answers[-1]["message"]
        # the export's own chunk size, asked for explicitly, is served
        res = asyncio.run(stream_audio(srv.url, read_pcm16(str(model_dir / "u0.wav")),
                                       start={"chunk_size": CHUNK}))
        assert res.text == ref["u0"]


def test_onnx_server_flags(model_dir, onnx_dir, tmp_path, capsys):
    """Chunk flags that contradict the export, --checkpoint or --int8 in the wrong place,
    and an export without encoder_chunk.onnx are refused with the reason."""
    if kind_of(model_dir) != "u2pp":
        pytest.skip("flag handling: the U2++ model is enough")
    with pytest.raises(ValueError, match=f"chunk_size {CHUNK} and left_chunks {LEFT}"):
        build_server(_args("--onnx_dir", str(onnx_dir), "--chunk_size", str(CHUNK * 2)))
    with pytest.raises(ValueError, match="num_left_chunks 5"):
        build_server(_args("--onnx_dir", str(onnx_dir), "--num_left_chunks", "5"))
    # a value that happens to be the model-dir default is as explicit as any other
    # (issue 57: --chunk_size 16 served the export's 4 without a word)
    with pytest.raises(ValueError, match=f"chunk_size {STREAM_CHUNK_SIZE} needs another export"):
        build_server(_args("--onnx_dir", str(onnx_dir), "--chunk_size", str(STREAM_CHUNK_SIZE)))
    with pytest.raises(ValueError, match="num_left_chunks -1 needs another export"):
        build_server(_args("--onnx_dir", str(onnx_dir), "--num_left_chunks", "-1"))
    with pytest.raises(ValueError, match="--checkpoint goes with --model_dir"):
        build_server(_args("--onnx_dir", str(onnx_dir), "--checkpoint", "x.pt"))
    with pytest.raises(ValueError, match="--int8 goes with --onnx_dir"):
        build_server(_args("--model_dir", str(model_dir), "--int8"))
    full = write_model_dir(tmp_path / "full", streaming=False, kind=kind_of(model_dir))
    _export(full, tmp_path / "full_onnx")
    with pytest.raises(NotServableError, match="no encoder_chunk.onnx"):
        load_onnx_streaming_model(str(tmp_path / "full_onnx"))
    assert serve_main(["--onnx_dir", str(tmp_path / "full_onnx"), "--port", "0"]) == 1
    assert "not a streaming model" in capsys.readouterr().err


@pytest.mark.parametrize("rate,right", [(4, 6), (6, 10), (8, 14)])
def test_output_frames_of_the_conv_front_ends(rate, right):
    """output_frames equals the Conv2dSubsampling stacks' own arithmetic (kernel 3 stride 2
    convolutions, then kernel 5 stride 3 for 6x, or a third kernel 3 stride 2 for 8x)."""
    for t in range(1, 200):
        n = (t - 3) // 2 + 1
        if rate == 4:
            n = (n - 3) // 2 + 1
        elif rate == 6:
            n = (n - 5) // 3 + 1
        else:
            n = ((n - 3) // 2 + 1 - 3) // 2 + 1
        assert output_frames(t, rate, right) == max(n, 0), t


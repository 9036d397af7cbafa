"""The WebSocket server end to end on each served kind of tiny streaming model (U2++,
causal Zipformer, transducer; the limits, the page and the tools on the U2++ only):
results equal the StreamingRecognizer's (itself equal to recognize.py
--simulate_streaming, test_streaming.py), interleaved clients equal each alone, every
bad client gets its documented answer and the server then still serves a correct
stream, nothing of a session survives it, continuous decoding cuts sentences at
silence."""
import asyncio
import gc
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
import torch
from websockets.asyncio.client import connect

from tests.serve.conftest import CHUNK, kind_of
from tests.serve.server_thread import ServerThread
from tests.serve.test_streaming import stream_text
from wenet.dataset.audio import load_audio, resample, to_mono
from wenet.decode.context_graph import ContextGraph
from wenet.decode.stream_state import EndpointRules
from wenet.decode.options import DecodeOptions
from wenet.inference.stream_search import is_transducer_model
from wenet.inference.streaming import StreamingRecognizer
from wenet.serve.client import read_pcm16, stream_audio
from wenet.serve.loading import load_streaming_model
from wenet.serve.server import RecognitionServer, ServerConfig

OPTIONS = DecodeOptions(chunk_size=CHUNK, beam_size=5, ctc_weight=0.5, reverse_weight=0.3,
                        endpoint=EndpointRules(max_sentence_ms=4000.0))
CONFIG = ServerConfig(host="127.0.0.1", port=0, max_clients=3, max_message_bytes=64000,
                      idle_timeout_s=3.0, max_session_s=600.0)


@pytest.fixture(scope="module")
def loaded(model_dir):
    return load_streaming_model(str(model_dir), str(model_dir / "model.pt"))


@pytest.fixture(scope="module")
def expected(model_dir, loaded):
    """Each test utterance's text decoded directly (no server)."""
    out = {}
    for i in range(3):
        pcm = read_pcm16(str(model_dir / f"u{i}.wav"))
        out[i] = (pcm, stream_text(loaded, pcm, OPTIONS, np.random.default_rng(i))[0])
    assert all(text for _, text in out.values())
    return out


def _u2pp_only(model_dir):
    """Tests of the server itself (limits, page, tools) run on the U2++ model only."""
    if kind_of(model_dir) != "u2pp":
        pytest.skip("a test of the server, not of the model: run on the U2++ model")


def _serve(loaded, **changes):
    return ServerThread(RecognitionServer(loaded, OPTIONS, replace(CONFIG, **changes)))


def _idle(srv, timeout_s=5.0):
    """Wait until the server has no client (a closing handler finishes just after the
    client returns); True when it has none."""
    deadline = time.monotonic() + timeout_s
    while srv.server.clients and time.monotonic() < deadline:
        time.sleep(0.02)
    return srv.server.clients == 0


def _session_objects():
    gc.collect()
    return [o for o in gc.get_objects() if type(o) is StreamingRecognizer]


def test_stream_alone_and_interleaved(loaded, expected, one_thread):
    with _serve(loaded) as srv:
        for pcm, text in expected.values():
            res = asyncio.run(stream_audio(srv.url, pcm, chunk_ms=70))
            assert res.text == text
            assert res.messages[-1] == {"status": "ok", "type": "speech_end"}

        async def together():  # small messages, so the two streams interleave chunk by chunk
            return await asyncio.gather(*(stream_audio(srv.url, expected[i][0], chunk_ms=20)
                                          for i in (0, 1)))
        both = asyncio.run(together())
        assert [r.text for r in both] == [expected[0][1], expected[1][1]]
        assert all(r.first("partial_result") is not None for r in both)
        # hotwords of the start message: as decoding with their context graph
        pcm = expected[0][0]
        graph = ContextGraph([loaded.tokenizer.encode("bf")[0]], 5.0)
        direct = stream_text(loaded, pcm, OPTIONS, np.random.default_rng(0), context_graph=graph)
        res = asyncio.run(stream_audio(srv.url, pcm, start={"hotwords": ["bf"],
                                                            "hotword_score": 5.0}))
        assert res.text == direct[0]
    assert _session_objects() == []


async def _exchange(url, *messages, wait_s=10.0):
    """Send the messages; return (JSON answers, close code) once the server closes."""
    answers = []
    async with connect(url, max_size=None) as ws:
        for m in messages:
            try:
                await ws.send(m)
            except Exception:  # the server may have closed already
                break
        try:
            while True:
                answers.append(json.loads(await asyncio.wait_for(ws.recv(), wait_s)))
        except Exception:
            pass
        return answers, ws.close_code


START = json.dumps({"signal": "start", "nbest": 1})
BAD_CLIENTS = [  # (what the client sends, part of the error message, close code)
    (["{not json"], "malformed JSON", 1008),
    (['["start"]'], 'JSON object with a "signal"', 1008),
    ([b"\x00\x01" * 100], "binary audio before the start signal", 1008),
    ([START, b"\x00" * 101], "101 bytes", 1008),
    ([json.dumps({"signal": "start", "sample_rate": 8000})], "sample_rate 8000", 1003),
    ([json.dumps({"signal": "start", "nbest": 0})], '"nbest" must be an integer', 1008),
    ([json.dumps({"signal": "start", "chunk_size": 10 ** 6})], '"chunk_size"', 1008),
    ([json.dumps({"signal": "end"})], "end signal without a running stream", 1008),
    ([START, START], "start signal while a stream is running", 1008),
    ([json.dumps({"signal": "pause"})], "unknown signal 'pause'", 1008),
    ([json.dumps({"signal": "start", "hotwords": ["xyz"]})], "units the model does not know",
     1008),
    ([json.dumps({"signal": "start", "hotwords": "ab"})], '"hotwords" must be a list', 1008),
    ([START], "idle timeout", 1008),  # then nothing for idle_timeout_s
]


def test_bad_clients_get_their_answer_and_the_server_goes_on(loaded, expected, one_thread):
    with _serve(loaded) as srv:
        for messages, error, code in BAD_CLIENTS:
            answers, close_code = asyncio.run(_exchange(srv.url, *messages))
            errors = [a for a in answers if a["status"] == "failed"]
            assert len(errors) == 1 and error in errors[0]["message"], (messages, answers)
            assert close_code == code, messages
        # an oversized message: websockets closes with 1009 (message too big)
        answers, close_code = asyncio.run(_exchange(srv.url, START, b"\x00" * 64002))
        assert close_code == 1009
        pcm, text = expected[0]
        assert asyncio.run(stream_audio(srv.url, pcm)).text == text
        assert _idle(srv)
    assert _session_objects() == []


def test_limits(model_dir, loaded, expected, one_thread):
    _u2pp_only(model_dir)
    pcm, text = expected[1]
    with _serve(loaded, max_session_s=1.0) as srv:
        began = time.monotonic()
        res = asyncio.run(stream_audio(srv.url, pcm))
        assert "longer than 1 s of audio" in res.messages[-1]["message"] and res.close_code == 1008
        # the audio sent before the client read the error must not stall the close: with
        # the server's queue full, it used to wait out the 10 s close timeout
        assert time.monotonic() - began < 5.0
        assert _idle(srv, timeout_s=0.5)
    with _serve(loaded, max_clients=2) as srv:
        async def crowd():
            async with connect(srv.url) as a, connect(srv.url) as b:
                await a.send(START)
                await b.send(START)
                await a.recv()
                await b.recv()
                answers, code = await _exchange(srv.url, START)
                return answers, code, srv.server.clients
        answers, code, clients = asyncio.run(crowd())
        assert clients == 2 and code == 1013
        assert "server busy: 2 clients at most" in answers[0]["message"]
        assert asyncio.run(stream_audio(srv.url, pcm)).text == text


def test_client_vanishing_mid_stream(loaded, expected, one_thread):
    pcm, text = expected[2]
    with _serve(loaded) as srv:
        async def vanish():
            ws = await connect(srv.url)
            await ws.send(START)
            await ws.recv()
            for pos in range(0, len(pcm) // 2, 3200):
                await ws.send(pcm[pos:pos + 3200])
            ws.transport.abort()  # no close handshake, no end signal
            for _ in range(100):
                if srv.server.clients == 0:
                    break
                await asyncio.sleep(0.05)
            return srv.server.clients
        for _ in range(3):
            assert asyncio.run(vanish()) == 0
        assert asyncio.run(stream_audio(srv.url, pcm)).text == text
    assert _session_objects() == []


def test_minutes_of_silence(loaded, expected, one_thread):
    """Two minutes of silence. The random model does not take silence for blanks, so
    here it is the longest-sentence rule (4 s) that bounds what a session keeps:
    continuous, a final result at least every 4 s of audio; not continuous, the stream
    ends after 4 s (final result, speech_end) and the rest of the audio is ignored.
    Either way the session ends cleanly and a real stream works afterwards (the
    silence rules themselves: test_streaming.py::test_endpoint_rules)."""
    silence = b"\x00\x00" * (16000 * 120)
    with _serve(loaded) as srv:
        res = asyncio.run(stream_audio(srv.url, silence, chunk_ms=1000,
                                       start={"continuous_decoding": True}))
        finals = [t for m, t in zip(res.messages, res.times) if m["type"] == "final_result"]
        assert len(finals) >= 120 // 4 - 1
        assert res.messages[-1]["type"] == "speech_end"
        res = asyncio.run(stream_audio(srv.url, silence[:16000 * 2 * 10], chunk_ms=1000))
        kinds = [m["type"] for m in res.messages if m["type"] != "partial_result"]
        assert kinds == ["final_result", "speech_end"]
        final = next(m for m in res.messages if m["type"] == "final_result")
        assert all(w["end"] <= 4.1 for w in final["nbest"][0]["words"])  # cut at 4 s
        pcm, text = expected[0]
        assert asyncio.run(stream_audio(srv.url, pcm)).text == text
        assert _idle(srv)
    assert _session_objects() == []


MARK = 1e4  # SilenceAwareTransducer: the first value of a silent frame's encoder output


class SilenceAwareModel:
    """The random model, but its CTC says blank (p = 1) on output frames whose input
    frames are all digital silence (fbank log(eps) everywhere), as a trained model
    would; per thread, since the server's workers share the model."""

    def __init__(self, model):
        self.model = model
        self.local = threading.local()

    def __getattr__(self, name):
        return getattr(self.model, name)

    def _silent_frames(self, xs, num_frames):
        sub, context = self.model.subsampling_rate(), self.model.right_context() + 1
        quiet = xs[0].max(dim=1).values < -15.0
        return torch.tensor([bool(quiet[j * sub:j * sub + context].all())
                             for j in range(num_frames)])

    def forward_encoder_chunk(self, xs, offset, required_cache_size, att_cache, cnn_cache):
        ys, att_cache, cnn_cache = self.model.forward_encoder_chunk(
            xs, offset, required_cache_size, att_cache, cnn_cache)
        self.local.silent = self._silent_frames(xs, ys.size(1))
        return ys, att_cache, cnn_cache

    def ctc_activation(self, ys):
        logprobs = self.model.ctc_activation(ys).clone()
        blank = torch.full_like(logprobs[0, 0], -1e4)
        blank[0] = 0.0
        logprobs[0, self.local.silent] = blank
        return logprobs


class SilenceAwareTransducer(SilenceAwareModel):
    """The same for a transducer: its joint says blank on silent frames. The encoder
    output of a silent frame is marked (its first value MARK), its projection made NaN,
    and the joint answers blank wherever its encoder input is NaN (in the search and in
    the lattice of the word times alike)."""

    def forward_encoder_chunk(self, xs, offset, required_cache_size, att_cache, cnn_cache):
        ys, att_cache, cnn_cache = self.model.forward_encoder_chunk(
            xs, offset, required_cache_size, att_cache, cnn_cache)
        ys = ys.clone()
        ys[0, self._silent_frames(xs, ys.size(1)), 0] = MARK
        return ys, att_cache, cnn_cache

    def project_encoder(self, encoder_out):
        proj = self.model.project_encoder(encoder_out)
        return proj.masked_fill((encoder_out[..., 0] == MARK).unsqueeze(-1), float("nan"))

    def forward_joint_step(self, enc_proj, pred_proj):
        logits = self.model.forward_joint_step(enc_proj, pred_proj)
        blank = torch.full_like(logits[0], -1e4)
        blank[self.model.blank_symbol()] = 0.0
        return torch.where(enc_proj.isnan().any(-1, keepdim=True), blank, logits)


def test_continuous_sentences(model_dir, loaded, one_thread):
    """Two utterances, 2 s of silence after each: two final results (the silence after
    speech ends each sentence), the second's words after the first's audio and silence;
    a stream of silence alone gives no sentence at all (leading silence dropped)."""
    aware = SilenceAwareTransducer if is_transducer_model(loaded.model) else SilenceAwareModel
    quiet = SimpleNamespace(**{**vars(loaded), "model": aware(loaded.model)})
    a, b = (read_pcm16(str(model_dir / f"u{i}.wav")) for i in (0, 1))
    gap = b"\x00\x00" * (16000 * 2)
    with ServerThread(RecognitionServer(quiet, OPTIONS, CONFIG)) as srv:
        res = asyncio.run(stream_audio(srv.url, a + gap + b + gap,
                                       start={"continuous_decoding": True}))
        # a, then silence, as one sentence (the end of a is then encoded as in the
        # continuous stream, not as the end of a stream)
        alone = asyncio.run(stream_audio(srv.url, a + gap)).text
        nothing = asyncio.run(stream_audio(srv.url, gap * 6, start={"continuous_decoding": True}))
    finals = [m["nbest"][0] for m in res.messages if m["type"] == "final_result"]
    assert len(finals) == 3 and finals[2]["sentence"] == ""  # the last: the end signal's
    assert finals[0]["sentence"] == alone and finals[1]["sentence"]
    assert finals[1]["words"][0]["start"] >= len(a + gap) / 32000 - 0.2
    assert [m["type"] for m in nothing.messages] == ["final_result", "speech_end"]
    assert nothing.text == ""


def test_health_and_page(model_dir, loaded):
    _u2pp_only(model_dir)
    with _serve(loaded) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        with urllib.request.urlopen(base + "/healthz") as r:
            health = json.loads(r.read())
        assert health == {"status": "ok", "clients": 0, "max_clients": CONFIG.max_clients}
        with urllib.request.urlopen(base + "/") as page:
            assert page.headers["Content-Type"].startswith("text/html")
            assert b"getUserMedia" in page.read()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/nothing")
        e.value.close()  # an open response holds its connection, and the server's shutdown waits for it
        assert e.value.code == 404


def test_serve_cli_refuses_a_non_streaming_model(model_dir, tmp_path, capsys):
    from tests.serve.conftest import write_model_dir
    from wenet.bin.serve import main
    d = write_model_dir(tmp_path / "full", streaming=False, kind=kind_of(model_dir))
    assert main(["--model_dir", str(d), "--port", "0"]) == 1
    assert "not a streaming model" in capsys.readouterr().err


def test_client_audio_is_16k_mono_pcm(model_dir, tmp_path):
    _u2pp_only(model_dir)
    """16-bit 16 kHz mono comes through sample for sample; other audio is mixed down and
    resampled as training's pipeline does (same samples as wenet.dataset.audio)."""
    pcm, _ = sf.read(model_dir / "u0.wav", dtype="int16")
    assert read_pcm16(str(model_dir / "u0.wav")) == pcm.tobytes()
    stereo = np.stack([pcm, pcm // 2], axis=1)
    sf.write(tmp_path / "a.wav", stereo[::2], 8000, subtype="PCM_16")
    got = np.frombuffer(read_pcm16(str(tmp_path / "a.wav")), dtype="<i2")
    ref = resample(to_mono(load_audio(str(tmp_path / "a.wav"))[0]), 8000, 16000)[0].numpy()
    assert np.array_equal(got, np.clip(np.round(ref * 32768), -32768, 32767).astype(np.int16))


def test_ws_client_tool(model_dir, loaded, expected, one_thread):
    """tools/ws_client.py prints ``file text`` per final result, the server's text."""
    _u2pp_only(model_dir)
    import os
    import subprocess
    import sys
    from tests.common import REPO, TOOLS_DIR
    wav = str(model_dir / "u2.wav")
    env = {**os.environ, "PYTHONPATH": REPO}
    with _serve(loaded) as srv:
        run = subprocess.run([sys.executable, os.path.join(TOOLS_DIR, "ws_client.py"),
                              "--url", srv.url, "--realtime", "--chunk_ms", "200", wav],
                             capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout == f"{wav} {expected[2][1]}\n"
        scp = model_dir / "wav.scp"
        scp.write_text("".join(f"k{i} {model_dir / f'u{i}.wav'}\n" for i in range(3)))
        run = subprocess.run([sys.executable, os.path.join(TOOLS_DIR, "ws_client.py"),
                              "--url", srv.url, "--wav_scp", str(scp)],
                             capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout == "".join(f"k{i} {expected[i][1]}\n" for i in range(3))
        down = subprocess.run([sys.executable, os.path.join(TOOLS_DIR, "ws_client.py"),
                               "--url", "ws://127.0.0.1:1", wav], capture_output=True,
                              text=True, env=env, timeout=60)
    assert down.returncode == 1 and "cannot reach ws://127.0.0.1:1" in down.stderr

"""The server's safe defaults (issue 35): it listens on the loopback interface unless told
otherwise, and a start message with a key the protocol does not know is refused, as
docs/server.md, "Limits", says (a failed message naming the key, then close 1008)."""
import asyncio
import json

import pytest
from websockets.asyncio.client import connect

from tests.serve.server_thread import ServerThread
from tests.serve.test_server import _exchange
from wenet.bin.serve import build_server, get_parser
from wenet.serve.client import read_pcm16, stream_audio
from wenet.serve.protocol import START_KEYS


def _listening_addresses(port):
    """The IPv4 addresses with a socket listening on ``port``, read from the kernel's
    table (/proc/net/tcp: hex address:port, state 0A = LISTEN)."""
    found = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def _server(u2pp_dir, *extra):
    args = get_parser().parse_args(["--model_dir", str(u2pp_dir), "--checkpoint",
                                    str(u2pp_dir / "model.pt"), "--port", "0",
                                    "--chunk_size", "4", "--num_workers", "1", *extra])
    return ServerThread(build_server(args))


@pytest.mark.parametrize("extra, address", [([], "127.0.0.1"),
                                            (["--host", "0.0.0.0"], "0.0.0.0")])
def test_listens_on_loopback_unless_told(u2pp_dir, extra, address):
    with _server(u2pp_dir, *extra) as srv:
        assert _listening_addresses(srv.port) == {address}


def test_unknown_start_keys_are_refused(u2pp_dir, one_thread):
    with _server(u2pp_dir) as srv:
        answers, code = asyncio.run(_exchange(srv.url, json.dumps({"signal": "start",
                                                                   "foo": 1})))
        assert answers == [{"status": "failed", "message":
                            "unknown keys in the start message: foo (known: nbest, "
                            "continuous_decoding, sample_rate, chunk_size, hotwords, "
                            "hotword_score)"}]
        assert code == 1008
        # a misspelt known key is one of them; every documented key is still taken
        answers, code = asyncio.run(_exchange(srv.url, json.dumps(
            {"signal": "start", "n_best": 2, "nbest": 1})))
        assert "unknown keys in the start message: n_best " in answers[0]["message"]
        start = {"nbest": 2, "continuous_decoding": False, "sample_rate": 16000,
                 "chunk_size": 4, "hotwords": ["ab"], "hotword_score": 1.0}
        assert sorted(["signal", *start]) == sorted(START_KEYS)
        pcm = read_pcm16(str(u2pp_dir / "u0.wav"))
        result = asyncio.run(stream_audio(srv.url, pcm, start=start))
        assert result.messages[-1] == {"status": "ok", "type": "speech_end"}
        assert result.text



async def _until_speech_end(url, *messages):
    """Send the messages; the answers up to speech_end (or an error)."""
    answers = []
    async with connect(url, max_size=None) as ws:
        for m in messages:
            await ws.send(m)
        while not answers or answers[-1].get("type") not in ("speech_end", None):
            answers.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
    return answers


def test_an_empty_audio_message_is_zero_samples(u2pp_dir, one_thread):
    """Any whole number of samples per message, zero included: the stream's result is the
    same with empty messages between the audio (it was a failed message in numpy's
    words, "both buffer length (0) and count (-1) must not be 0")."""
    pcm = read_pcm16(str(u2pp_dir / "u2.wav"))
    start = json.dumps({"signal": "start", "nbest": 1})
    end = json.dumps({"signal": "end"})
    half = len(pcm) // 4 * 2
    with _server(u2pp_dir) as srv:
        plain = asyncio.run(_until_speech_end(srv.url, start, pcm, end))
        padded = asyncio.run(_until_speech_end(srv.url, start, b"", pcm[:half], b"",
                                               pcm[half:], b"", end))
        empty = asyncio.run(_until_speech_end(srv.url, start, b"", end))
    assert plain[-1] == {"status": "ok", "type": "speech_end"}
    assert [a for a in padded if a.get("type") != "partial_result"] == \
        [a for a in plain if a.get("type") != "partial_result"]
    assert empty[-1] == {"status": "ok", "type": "speech_end"}
    assert all(a["status"] == "ok" for a in empty)

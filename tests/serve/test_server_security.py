"""The server against hostile clients and pages (issue 57): non-finite numbers in a start
message, a foreign web page's WebSocket handshake (Origin allow-list), and clients that
trickle audio to hold a slot (wall-clock session limit, minimum audio rate)."""
import asyncio
import base64
import json
import os
import socket

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from bench.serve_slowloris import attack, trickle
from tests.serve.test_safe_defaults import _server
from tests.serve.test_server import START, _exchange, _idle
from wenet.serve.client import read_pcm16, stream_audio


@pytest.mark.parametrize("text", ['{"signal": "start", "hotword_score": NaN}',
                                  '{"signal": "start", "hotword_score": Infinity}',
                                  '{"signal": "start", "hotword_score": -Infinity}',
                                  '{"signal": "start", "hotword_score": 1e999}',
                                  '{"signal": "start", "hotword_score": 1%s}' % ("0" * 400)])
def test_non_finite_numbers_in_a_start_message_are_refused(u2pp_dir, one_thread, text):
    """Python's JSON reader takes NaN, Infinity and overflowing literals, which JSON has
    not; a NaN hotword score made every hypothesis NaN and the transcript empty."""
    with _server(u2pp_dir) as srv:
        answers, code = asyncio.run(_exchange(srv.url, text, b"\x00\x00" * 1600,
                                              json.dumps({"signal": "end"})))
    assert code == 1008
    assert answers[-1]["status"] == "failed"
    assert "not a finite number" in answers[-1]["message"]
    assert not any(a.get("type") == "server_ready" for a in answers)


def _browser_handshake(port, origin, host=None):
    """A WebSocket upgrade as Chromium sends it from a page at ``origin`` (the headers of
    a real ``new WebSocket(...)``), on a plain socket; the status line and headers back."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET / HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Connection: Upgrade",
             "Pragma: no-cache", "Cache-Control: no-cache",
             "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like "
             "Gecko) Chrome/131.0.0.0 Safari/537.36", "Upgrade: websocket",
             f"Origin: {origin}", "Sec-WebSocket-Version: 13",
             "Accept-Encoding: gzip, deflate, br, zstd", "Accept-Language: en-US,en;q=0.9",
             f"Sec-WebSocket-Key: {key}",
             "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = s.recv(4096)
            if not data:
                break
            answer += data
    return answer.split(b"\r\n\r\n")[0].decode()


async def _speech_end(url, pcm, **connect_args):
    """Stream ``pcm`` with ``connect_args`` for the handshake; the last answer."""
    async with connect(url, max_size=None, proxy=None, **connect_args) as ws:
        await ws.send(START)
        await ws.send(pcm)
        await ws.send(json.dumps({"signal": "end"}))
        answers = []
        while not answers or answers[-1].get("type") not in ("speech_end", None):
            answers.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
    return answers


def test_a_foreign_web_page_is_refused_scripts_and_the_own_page_are_served(u2pp_dir, one_thread):
    """Any web page a user visits could open ws://127.0.0.1:PORT and stream the user's
    audio through the server: a browser's handshake from another origin gets HTTP 403;
    a script (no Origin header) and the server's own page (Origin = Host) are served."""
    pcm = read_pcm16(str(u2pp_dir / "u0.wav"))
    with _server(u2pp_dir) as srv:
        for origin in ("http://evil.example", "null", f"http://127.0.0.1:{srv.port + 1}",
                       f"http://localhost:{srv.port}"):
            head = _browser_handshake(srv.port, origin)
            assert head.startswith("HTTP/1.1 403 "), (origin, head)
            with pytest.raises(InvalidStatus, match="403"):
                asyncio.run(_speech_end(srv.url, pcm, origin=origin))
        assert _browser_handshake(srv.port, f"http://127.0.0.1:{srv.port}").startswith(
            "HTTP/1.1 101 ")  # same origin: the page at http://127.0.0.1:PORT/
        assert _browser_handshake(srv.port, f"http://LocalHost:{srv.port}",
                                  host=f"localhost:{srv.port}").startswith("HTTP/1.1 101 ")
        script = asyncio.run(_speech_end(srv.url, pcm))  # websockets sends no Origin
        page = asyncio.run(_speech_end(srv.url, pcm, origin=f"http://127.0.0.1:{srv.port}"))
        assert script[-1] == page[-1] == {"status": "ok", "type": "speech_end"}
        assert [a for a in script if a["type"] == "final_result"] == \
            [a for a in page if a["type"] == "final_result"] != []
        assert srv.server.refused_origins == 8


def test_allowed_origins_open_the_server_to_named_pages(u2pp_dir, one_thread):
    pcm = read_pcm16(str(u2pp_dir / "u0.wav"))
    with _server(u2pp_dir, "--allowed_origins", "https://app.example",
                 "http://tools.example:8080") as srv:
        assert _browser_handshake(srv.port, "https://app.example").startswith("HTTP/1.1 101 ")
        assert _browser_handshake(srv.port, "http://tools.example:8080").startswith(
            "HTTP/1.1 101 ")
        assert _browser_handshake(srv.port, "http://evil.example").startswith("HTTP/1.1 403 ")
        assert _browser_handshake(srv.port, "https://app.example:444").startswith(
            "HTTP/1.1 403 ")
    with _server(u2pp_dir, "--allowed_origins", "*") as srv:
        answers = asyncio.run(_speech_end(srv.url, pcm, origin="http://evil.example"))
        assert answers[-1] == {"status": "ok", "type": "speech_end"}
    with pytest.raises(ValueError, match="--allowed_origins: 'app.example/x' is not"):
        _server(u2pp_dir, "--allowed_origins", "app.example/x")


WINDOW_S = 2.0


def test_two_slowloris_clients_cannot_lock_out_a_real_one(u2pp_dir, one_thread):
    """Two clients that each send 2 bytes every 0.5 s hold both slots of a
    --max_clients 2 server; each is closed (1008) after one --rate_window_s with too
    little audio, and a real client retrying on 1013 is then served, its text that of a
    server with no trickling clients, within the window plus a margin."""
    pcm = read_pcm16(str(u2pp_dir / "u0.wav"))
    with _server(u2pp_dir, "--max_clients", "2", "--min_audio_rate", "0.5",
                 "--rate_window_s", str(WINDOW_S), "--idle_timeout_s", "60") as srv:
        alone = asyncio.run(stream_audio(srv.url, pcm)).text
        assert alone and _idle(srv)

        (waited, refusals, result), loris = asyncio.run(
            attack(srv.url, pcm, 2, 0.5, 30, lambda: srv.server.clients))
    print(f"\nslowloris x2 vs --max_clients 2, --min_audio_rate 0.5 --rate_window_s "
          f"{WINDOW_S:g}: trickling clients closed after "
          f"{', '.join(f'{took:.2f}' for took, *_ in loris)} s; the real client was refused "
          f"{refusals} times and had its result {waited:.2f} s after its first try")
    for took, message, code, reason in loris:
        assert code == 1008 and "--min_audio_rate 0.5 over --rate_window_s 2" in reason
        assert message["status"] == "failed" and message["message"].startswith(
            "too little audio: 0.00 s in the last 2 s, at least 1 s needed")
        assert WINDOW_S <= took < WINDOW_S + 1.5
    assert refusals >= 1  # it was locked out until the window ended
    assert result.text == alone
    assert waited < WINDOW_S + 3.0


def test_real_time_clients_pass_the_rate_and_the_wall_clock_ends_any_connection(
        u2pp_dir, one_thread):
    """A stream sent in real time (1 s of audio per second) passes a 0.5 rate over 0.5 s
    windows with the text of a fast stream; a connection streaming in real time for ever
    is closed after --max_connection_s all the same."""
    pcm = read_pcm16(str(u2pp_dir / "u1.wav"))
    with _server(u2pp_dir, "--min_audio_rate", "0.5", "--rate_window_s", "0.5",
                 "--max_connection_s", "4") as srv:
        fast = asyncio.run(stream_audio(srv.url, pcm))
        paced = asyncio.run(stream_audio(srv.url, pcm, chunk_ms=100, realtime=True))
        assert paced.messages[-1] == {"status": "ok", "type": "speech_end"}
        assert paced.text == fast.text != ""
        took, message, code, reason = asyncio.run(trickle(srv.url, 0.1, 30, 3200))
    assert code == 1008 and "(--max_connection_s)" in reason
    assert message["message"].startswith("connection open for 4 s, the most is 4 s")
    assert 4.0 <= took < 5.5


@pytest.mark.parametrize("flag, value, says", [("--min_audio_rate", "-1", ">= 0, got -1"),
                                               ("--rate_window_s", "0", "> 0, got 0"),
                                               ("--max_connection_s", "nan", "> 0, got nan")])
def test_bad_limits_are_refused_at_start(u2pp_dir, flag, value, says):
    with pytest.raises(ValueError, match=f"{flag} must be {says}"):
        _server(u2pp_dir, flag, value)

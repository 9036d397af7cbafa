"""The streaming recognition server: WebSocket sessions, the page, the health check.

One asyncio event loop accepts connections (``websockets``); the model work of every
session (features, encoder chunks, searches, rescoring) runs in a thread pool, so a
slow or large client never blocks the loop or the other clients. A session handles
one message at a time: it reads the next message only after the previous one is
decoded, so a client that sends faster than real time is slowed down by TCP flow
control instead of piling audio up in memory (at most ``max_queue`` messages of at
most ``max_message_bytes`` each wait in the connection's buffer).

HTTP on the same port: ``GET /healthz`` answers JSON ``{"status": "ok", "clients",
"max_clients"}``; ``GET /`` the browser page (static/index.html); a WebSocket upgrade
on any path starts a session (protocol: :mod:`wenet.serve.protocol`) unless it comes
from a web page of another origin (HTTP 403, :mod:`wenet.serve.origins`).

Every client mistake gets ``{"status": "failed", "message"}`` and a close (see
:class:`ServerConfig` for the limits; a client that holds a slot without sending audio
at a minimum rate, or longer than a wall-clock limit, is closed too:
:mod:`wenet.serve.limits`); a client that vanishes mid-stream just ends its session. Sessions keep nothing once they end: the recognizer belongs to the
handler's frame only.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import http
import json
import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, List, Optional, Tuple

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from wenet.decode.options import DecodeOptions
from wenet.decode.context_graph import ContextGraph
from wenet.inference.streaming import StreamingRecognizer
from wenet.serve.limits import ConnectionLimits, check_limits
from wenet.serve.origins import origin_allowed
from wenet.serve.protocol import (CLOSE_INTERNAL, CLOSE_NORMAL, CLOSE_TRY_AGAIN, ProtocolError,
                                  StartRequest, failed, ok, parse_json, parse_start)

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static", "index.html")


@dataclass(frozen=True)
class ServerConfig:
    """Where to listen and the limits of every connection."""

    host: str = "127.0.0.1"            # this machine only; "0.0.0.0": every interface
    port: int = 10086
    max_clients: int = 16
    num_workers: int = 2               # threads running model work
    max_message_bytes: int = 1 << 18   # larger messages: closed with 1009 by websockets
    max_queue: int = 8                 # messages waiting in a connection's buffer
    max_session_s: float = 3600.0      # audio seconds per stream
    idle_timeout_s: float = 60.0       # seconds without any message
    # slot holders (wenet/serve/limits.py): audio seconds per second waited for the client,
    # over windows of rate_window_s (0: no minimum); wall-clock seconds per connection
    min_audio_rate: float = 0.5
    rate_window_s: float = 30.0
    max_connection_s: float = 7200.0

    def __post_init__(self) -> None:
        check_limits(self.min_audio_rate, self.rate_window_s, self.max_connection_s)
    max_nbest: int = 10
    max_chunk_size: int = 64
    allowed_origins: Tuple[str, ...] = ()  # pages besides the own one (wenet/serve/origins.py)


class RecognitionServer:
    """Serves ``loaded`` (model, tokenizer, feature_conf) with ``options`` per stream."""

    def __init__(self, loaded: Any, options: DecodeOptions, config: ServerConfig,
                 hotword_score: float = 3.0, transducer_search: str = "beam") -> None:
        self.loaded = loaded
        self.hotword_score = hotword_score
        self.transducer_search = transducer_search  # "beam" or "greedy", transducers only
        self.options = options
        self.config = config
        self.clients = 0
        self.sessions_served = 0
        self.refused_origins = 0  # handshakes refused by the Origin allow-list
        self.executor = concurrent.futures.ThreadPoolExecutor(
            config.num_workers, thread_name_prefix="decode")
        with open(PAGE, "rb") as f:
            self.page = f.read()

    # ------------------------------------------------------------------ HTTP

    def process_request(self, connection: ServerConnection, request: Request
                        ) -> Optional[Response]:
        """Plain HTTP: the health check and the page; None lets a WebSocket handshake on."""
        if request.headers.get("Upgrade", "").lower() == "websocket":
            origin = request.headers.get("Origin")
            if origin_allowed(origin, request.headers.get("Host"), self.config.allowed_origins):
                return None
            self.refused_origins += 1
            logging.info("refused a WebSocket handshake from %s: Origin %r is not allowed",
                         connection.remote_address, origin)
            return _response(http.HTTPStatus.FORBIDDEN, "text/plain", (
                f"Origin {origin} may not open sessions here: only this server's own page "
                "and non-browser clients (serve.py --allowed_origins opens it to other "
                "pages)\n").encode())
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            body = json.dumps({"status": "ok", "clients": self.clients,
                               "max_clients": self.config.max_clients}).encode() + b"\n"
            return _response(http.HTTPStatus.OK, "application/json", body)
        if path in ("/", "/index.html"):
            return _response(http.HTTPStatus.OK, "text/html; charset=utf-8", self.page)
        return _response(http.HTTPStatus.NOT_FOUND, "text/plain", b"not found\n")

    # ------------------------------------------------------------- sessions

    async def handler(self, ws: ServerConnection) -> None:
        """One connection: refused when full, else streams until the client leaves."""
        if self.clients >= self.config.max_clients:
            await _refuse(ws, f"server busy: {self.config.max_clients} clients at most "
                              "(--max_clients); try again later", CLOSE_TRY_AGAIN)
            return
        self.clients += 1
        try:
            await self._session(ws)
        except ProtocolError as e:
            logging.info("client %s: %s", ws.remote_address, e.message)
            await _refuse(ws, e.message, e.close_code)
        except ConnectionClosed:
            logging.info("client %s left", ws.remote_address)
        except Exception:  # a server fault: this session ends, the server goes on
            logging.exception("session of %s failed", ws.remote_address)
            await _refuse(ws, "internal server error", CLOSE_INTERNAL)
        finally:
            self.clients -= 1
            self.sessions_served += 1

    async def _session(self, ws: ServerConnection) -> None:
        """Read messages until the client closes; ProtocolError on any mistake."""
        c = self.config
        recognizer: Optional[StreamingRecognizer] = None
        limits = ConnectionLimits(c.min_audio_rate, c.rate_window_s, c.max_connection_s)
        last_message = time.monotonic()
        while True:
            waiting = time.monotonic()
            idle_left = c.idle_timeout_s - (waiting - last_message)
            try:
                message = await asyncio.wait_for(ws.recv(), limits.timeout(idle_left))
            except asyncio.TimeoutError:  # a limit is due: idle, rate window or wall clock
                limits.waited(time.monotonic() - waiting)
                if time.monotonic() - last_message >= c.idle_timeout_s:
                    raise ProtocolError(f"no message for {c.idle_timeout_s:g} s "
                                        "(idle timeout)") from None
                limits.check()
                continue
            except ConnectionClosed as e:
                if e.rcvd is not None and e.rcvd.code == 1009:
                    logging.info("client %s: message over %d bytes", ws.remote_address,
                                 c.max_message_bytes)
                return
            last_message = time.monotonic()
            limits.waited(last_message - waiting)
            if isinstance(message, str):
                recognizer = await self._on_text(ws, parse_json(message), recognizer)
            else:
                limits.audio(len(message))
                recognizer = await self._on_audio(ws, message, recognizer)
            limits.check()

    async def _on_text(self, ws: ServerConnection, msg: dict,
                       recognizer: Optional[StreamingRecognizer]
                       ) -> Optional[StreamingRecognizer]:
        signal = msg["signal"]
        if signal == "start":
            if recognizer is not None:
                raise ProtocolError("start signal while a stream is running (send end first)")
            start = parse_start(msg, self.config.max_nbest, self.config.max_chunk_size)
            recognizer = await self._run(self._new_recognizer, start)
            await ws.send(ok({"type": "server_ready"}))
            return recognizer
        if signal == "end":
            if recognizer is None:
                raise ProtocolError("end signal without a running stream (send start first)")
            await self._send_all(ws, await self._run(recognizer.finish))
            return None
        raise ProtocolError(f'unknown signal {signal!r} (expected "start" or "end")')

    async def _on_audio(self, ws: ServerConnection, data: bytes,
                        recognizer: Optional[StreamingRecognizer]
                        ) -> Optional[StreamingRecognizer]:
        if recognizer is None:
            raise ProtocolError("binary audio before the start signal")
        if len(data) % 2:
            raise ProtocolError(f"binary message of {len(data)} bytes: audio must be 16-bit "
                                "samples (an even number of bytes)")
        if not data:  # zero samples: nothing to do (torch.frombuffer refuses empty buffers)
            return recognizer
        seconds = recognizer.audio_seconds + len(data) / 2 / 16000
        if seconds > self.config.max_session_s:
            raise ProtocolError(f"stream longer than {self.config.max_session_s:g} s of audio "
                                "(--max_session_s)")
        # after a speech_end of its own (max sentence length) the recognizer ignores
        # audio until the client's end signal
        await self._send_all(ws, await self._run(recognizer.accept_pcm, bytes(data)))
        return recognizer

    def _new_recognizer(self, start: StartRequest) -> StreamingRecognizer:
        options = self.options
        if start.chunk_size is not None:
            options = replace(options, chunk_size=start.chunk_size)
        return StreamingRecognizer(self.loaded.model, self.loaded.tokenizer,
                                   self.loaded.feature_conf, options, nbest=start.nbest,
                                   continuous=start.continuous_decoding,
                                   context_graph=self._context_graph(start),
                                   transducer_search=self.transducer_search)

    def _context_graph(self, start: StartRequest) -> Optional[ContextGraph]:
        """The start message's hotwords as a context graph (None without hotwords)."""
        if not start.hotwords:
            return None
        phrases, unknown = [], []
        for phrase in start.hotwords:
            ids, missing = self.loaded.tokenizer.encode(phrase)
            if missing or not ids:
                unknown.append(phrase)
            phrases.append(ids)
        if unknown:
            raise ProtocolError(f"hotwords with units the model does not know: {unknown}")
        score = self.hotword_score if start.hotword_score is None else start.hotword_score
        return ContextGraph(phrases, score)

    async def _run(self, fn, *args) -> Any:
        """``fn(*args)`` in the thread pool; a ValueError from the model work is the client's."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.executor, fn, *args)
        except ValueError as e:
            raise ProtocolError(str(e)) from None

    @staticmethod
    async def _send_all(ws: ServerConnection, events: List[dict]) -> None:
        for event in events:
            await ws.send(ok(event))

    # ---------------------------------------------------------------- running

    async def serve_forever(self, on_ready: Optional[Callable[[int], None]] = None) -> None:
        """Listen until cancelled; ``on_ready(port)`` once listening (port 0: a free one)."""
        c = self.config
        async with serve(self.handler, c.host, c.port, process_request=self.process_request,
                         max_size=c.max_message_bytes, max_queue=c.max_queue,
                         ping_interval=20, ping_timeout=20) as server:
            port = server.sockets[0].getsockname()[1]
            logging.info("listening on ws://%s:%d (page: http://%s:%d/)", c.host, port,
                         c.host, port)
            if on_ready is not None:
                on_ready(port)
            await asyncio.Future()


def _response(status: http.HTTPStatus, content_type: str, body: bytes) -> Response:
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))),
                       ("Cache-Control", "no-store")])
    return Response(status.value, status.phrase, headers, body)


async def _refuse(ws: ServerConnection, message: str, code: int) -> None:
    """Send an error and close; nothing to do if the client is already gone.

    Audio the client sent before it read the error still fills the connection's queue
    (``max_queue`` messages), and with the queue full the connection reads nothing more,
    not even the client's answer to the close: the close would wait out its timeout
    (10 s) with the session counted. So what is queued is read and dropped meanwhile."""
    drain = asyncio.create_task(_discard_incoming(ws))
    try:
        await ws.send(failed(message))
        await ws.close(code, message[:120])
    except ConnectionClosed:
        pass
    finally:
        drain.cancel()


async def _discard_incoming(ws: ServerConnection) -> None:
    """Read and drop messages until the connection closes."""
    try:
        while True:
            await ws.recv()
    except Exception:  # closed (or being read elsewhere): nothing left to drop here
        pass


__all__ = ["CLOSE_NORMAL", "RecognitionServer", "ServerConfig"]

#!/usr/bin/env python3
"""Slowloris against the streaming server: do trickling clients lock real ones out?

    python bench/serve_slowloris.py --model_dir exp/<run> --wav some.wav \
        [--loris 2] [--every_s 45] [--server_args "--rate_window_s 30"]

Starts ``wenet/bin/serve.py`` (bench/serve_load.py's ``start_server``) on a loopback
port with ``--max_clients`` equal to ``--loris``; that many clients each start a stream
and then send 2 bytes of audio every ``--every_s`` seconds, filling every slot. A real
client then streams ``--wav`` (as fast as the server takes it), retrying every 0.1 s
while the server answers 1013 (full). Prints when and how each trickling client was
closed, how many times the real client was refused, and how long after its first try
it had its final result (the server's limits: --min_audio_rate over --rate_window_s,
--max_connection_s; wenet/serve/limits.py).
"""
import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from typing import Any, Dict, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from websockets.asyncio.client import ClientConnection, connect  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from wenet.serve.client import StreamResult, read_pcm16, stream_audio  # noqa: E402

START = json.dumps({"signal": "start", "nbest": 1})


async def _first_failure(ws: ClientConnection) -> Dict[str, Any]:
    """The first answer that is not a partial result."""
    while True:
        message = json.loads(await ws.recv())
        if message.get("type") != "partial_result":
            return message


async def trickle(url: str, every_s: float, give_up_s: float, pcm_bytes: int = 2
                  ) -> Tuple[float, Dict[str, Any], int, str]:
    """A client that starts a stream, then sends ``pcm_bytes`` every ``every_s`` seconds
    until the server closes it (or ``give_up_s``); (seconds until the server's error
    message, the message, close code, close reason)."""
    t0 = time.monotonic()
    async with connect(url, proxy=None) as ws:
        await ws.send(START)
        ready = json.loads(await ws.recv())
        if ready.get("type") != "server_ready":
            raise RuntimeError(f"the trickling client was not served: {ready}")
        answer = asyncio.create_task(_first_failure(ws))
        while not answer.done() and time.monotonic() - t0 < give_up_s:
            try:
                await ws.send(b"\x00" * pcm_bytes)
            except ConnectionClosed:
                break
            await asyncio.wait([answer], timeout=every_s)
        message = await asyncio.wait_for(answer, 10)
        took = time.monotonic() - t0
        with contextlib.suppress(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
    return took, message, ws.close_code, ws.close_reason


async def served_when_a_slot_frees(url: str, pcm: bytes, retry_s: float = 0.1
                                   ) -> Tuple[float, int, StreamResult]:
    """A real client retried while the server answers 1013 (full); (seconds from the
    first try until speech_end, refusals, its result)."""
    t0, refusals = time.monotonic(), 0
    while True:
        try:
            result = await stream_audio(url, pcm, chunk_ms=100)
        except ConnectionClosed as e:  # refused before the start message was read
            if e.rcvd is None or e.rcvd.code != 1013:
                raise
        else:
            if result.messages and result.messages[-1].get("type") == "speech_end":
                return time.monotonic() - t0, refusals, result
            if "server busy" not in result.messages[-1].get("message", ""):
                raise RuntimeError(f"the real client was refused: {result.messages[-1]}")
        refusals += 1
        await asyncio.sleep(retry_s)


async def attack(url: str, pcm: bytes, loris: int, every_s: float, give_up_s: float,
                 clients_now) -> Tuple[Tuple[float, int, StreamResult], list]:
    """``loris`` trickling clients fill the server (``clients_now()`` says how many it
    holds), then a real client tries; (its figures, each trickling client's)."""
    tasks = [asyncio.create_task(trickle(url, every_s, give_up_s)) for _ in range(loris)]
    while clients_now() < loris:
        await asyncio.sleep(0.01)
    real = await served_when_a_slot_frees(url, pcm)
    return real, await asyncio.gather(*tasks)


def main() -> None:
    from bench.serve_load import start_server
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--wav", required=True, help="the real client's audio")
    p.add_argument("--loris", type=int, default=2, help="trickling clients (= --max_clients)")
    p.add_argument("--every_s", type=float, default=45.0, help="seconds between their 2 bytes")
    p.add_argument("--give_up_s", type=float, default=600.0)
    p.add_argument("--server_args", default="", help="more serve.py options, one string")
    args = p.parse_args()
    server_args = argparse.Namespace(onnx_dir=None, int8=False, model_dir=args.model_dir,
                                     checkpoint=args.checkpoint, decoding_chunk_size=None,
                                     clients=[args.loris], num_workers=1,
                                     server_args=args.server_args)
    pcm = read_pcm16(args.wav)
    server, port = start_server(server_args)
    url = f"ws://127.0.0.1:{port}/"

    def clients_now() -> int:
        import urllib.request
        return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())[
            "clients"]
    try:
        alone = asyncio.run(stream_audio(url, pcm)).text
        (waited, refusals, result), loris = asyncio.run(
            attack(url, pcm, args.loris, args.every_s, args.give_up_s, clients_now))
    finally:
        server.terminate()
        server.wait(30)
    print(f"# serve.py --max_clients {args.loris} {args.server_args}; {args.loris} clients "
          f"sending 2 bytes every {args.every_s:g} s")
    for i, (took, message, code, reason) in enumerate(loris):
        print(f"trickling client {i}: closed {code} after {took:.2f} s: {message.get('message')}")
    print(f"real client: refused {refusals} times (1013), final result {waited:.2f} s after "
          f"its first try; text {'equals' if result.text == alone else 'DIFFERS from'} "
          "the text of a stream with no trickling clients")


if __name__ == "__main__":
    main()

"""A streaming client of the recognition server: what tools/ws_client.py, the load bench and
the tests use to send audio and collect the answers with their arrival times."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from wenet.dataset.audio import load_audio, resample, to_mono
from wenet.serve.protocol import SAMPLE_RATE


@dataclass
class StreamResult:
    """Every message the server sent, with its arrival time (seconds after the first
    audio byte was sent), and when the end signal went out."""

    messages: List[Dict[str, Any]] = field(default_factory=list)
    times: List[float] = field(default_factory=list)
    end_sent: Optional[float] = None
    close_code: Optional[int] = None

    @property
    def text(self) -> str:
        """The final results' best sentences, joined."""
        return " ".join(m["nbest"][0]["sentence"] for m in self.messages
                        if m.get("type") == "final_result" and m["nbest"][0]["sentence"])

    def first(self, kind: str) -> Optional[float]:
        """Arrival time of the first message of ``kind`` (a partial with text for partials)."""
        for m, t in zip(self.messages, self.times):
            if m.get("type") == kind and (kind != "partial_result" or m["nbest"][0]["sentence"]):
                return t
        return None

    def last(self, kind: str) -> Optional[float]:
        found = [t for m, t in zip(self.messages, self.times) if m.get("type") == kind]
        return found[-1] if found else None


def read_pcm16(path: str) -> bytes:
    """Audio that libsndfile reads (any rate, any channels) as 16 kHz mono 16-bit PCM bytes:
    mixed down and resampled as the training pipeline does (``wenet.dataset.audio``), with
    a log line; 16-bit 16 kHz mono audio comes through sample for sample."""
    wav, rate = load_audio(path)
    if wav.shape[0] != 1 or rate != SAMPLE_RATE:
        logging.info("%s: %d Hz, %d channel(s) -> %d Hz mono", path, rate, wav.shape[0],
                     SAMPLE_RATE)
        wav = resample(to_mono(wav), rate, SAMPLE_RATE)
    pcm = np.clip(np.round(wav[0].numpy() * 32768.0), -32768, 32767).astype("<i2")
    return pcm.tobytes()


async def stream_audio(url: str, pcm: bytes, chunk_ms: float = 100.0, realtime: bool = False,
                       start: Optional[Dict[str, Any]] = None,
                       on_message: Optional[Callable[[Dict[str, Any]], None]] = None,
                       timeout_s: float = 120.0) -> StreamResult:
    """Stream ``pcm`` (16-bit, 16 kHz) to the server at ``url`` in ``chunk_ms`` messages,
    paced in real time or as fast as possible; wait for ``speech_end`` (or an error/close).
    """
    result = StreamResult()
    step = int(SAMPLE_RATE * chunk_ms / 1000) * 2
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"signal": "start", "nbest": 1, "continuous_decoding": False,
                                  **(start or {})}))
        ready = json.loads(await asyncio.wait_for(ws.recv(), timeout_s))
        if ready.get("type") != "server_ready":
            result.messages.append(ready)
            result.times.append(0.0)
            return result
        t0 = time.perf_counter()
        receiver = asyncio.create_task(_receive(ws, result, t0, on_message))
        try:
            for i, pos in enumerate(range(0, len(pcm), step)):
                if realtime:  # send chunk i when its audio would have been spoken
                    await asyncio.sleep(max(0.0, t0 + i * chunk_ms / 1000 - time.perf_counter()))
                await ws.send(pcm[pos:pos + step])
            result.end_sent = time.perf_counter() - t0
            await ws.send(json.dumps({"signal": "end"}))
        except ConnectionClosed:
            pass
        await asyncio.wait_for(receiver, timeout_s)
    result.close_code = ws.close_code  # known once the closing handshake is over
    return result


async def _receive(ws, result: StreamResult, t0: float,
                   on_message: Optional[Callable[[Dict[str, Any]], None]]) -> None:
    try:
        async for text in ws:
            msg = json.loads(text)
            result.messages.append(msg)
            result.times.append(time.perf_counter() - t0)
            if on_message is not None:
                on_message(msg)
            if msg.get("type") == "speech_end" or msg.get("status") != "ok":
                return
    except ConnectionClosed:
        return

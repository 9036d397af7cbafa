"""The WebSocket protocol of the recognition server (WeNet runtime's, plus a few keys).

Client to server:

* text ``{"signal": "start", "nbest": N, "continuous_decoding": bool}``, optionally
  with ``"sample_rate": 16000`` (any other rate is refused), ``"chunk_size": C``
  (encoder frames per chunk, 1 .. ``max_chunk_size``), ``"hotwords": [phrase, ...]``
  and ``"hotword_score": s``;
* binary messages of 16-bit little-endian mono PCM at 16 kHz, any whole number of
  samples per message;
* text ``{"signal": "end"}``: no more audio for this stream.

A start message with any other key (``START_KEYS``) is refused, naming the key: a
misspelt option must not be silently ignored; so is any message holding a number that is
not finite (``NaN``, ``Infinity``, ``1e999``).

Server to client, text JSON: ``{"status": "ok", "type": "server_ready"}`` after a
start; ``{"status": "ok", "type": "partial_result", "nbest": [{"sentence": ...}]}``
while audio arrives; ``{"status": "ok", "type": "final_result", "nbest": [{"sentence",
"score", "words": [{"word", "start", "end", "confidence"}]}, {"sentence", "score"}, ...]}``
per sentence (times in seconds from the start of the stream); ``{"status": "ok",
"type": "speech_end"}`` when the stream is over (a new start may follow on the same
connection); ``{"status": "failed", "message": ...}`` on any error, followed by a
close. Unlike WeNet's runtime, ``nbest`` is a JSON list, not a string holding one.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

SAMPLE_RATE = 16000

# WebSocket close codes used with an error message
CLOSE_NORMAL = 1000
CLOSE_UNSUPPORTED = 1003       # audio in a form the server does not take
CLOSE_POLICY = 1008            # protocol violated or a limit exceeded
CLOSE_INTERNAL = 1011          # a fault of the server
CLOSE_TRY_AGAIN = 1013         # server full (max_clients)


# every key a start message may hold
START_KEYS = ("signal", "nbest", "continuous_decoding", "sample_rate", "chunk_size",
              "hotwords", "hotword_score")


class ProtocolError(Exception):
    """A client mistake: the message goes to the client, then the connection closes."""

    def __init__(self, message: str, close_code: int = CLOSE_POLICY) -> None:
        super().__init__(message)
        self.message = message
        self.close_code = close_code


@dataclass(frozen=True)
class StartRequest:
    """What a start message asks for."""

    nbest: int = 1
    continuous_decoding: bool = False
    chunk_size: Optional[int] = None
    hotwords: List[str] = field(default_factory=list)
    hotword_score: Optional[float] = None


def _non_finite(literal: str) -> float:
    raise ProtocolError(f"{literal} is not a finite number (JSON has no NaN or Infinity)")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ProtocolError(f"{literal} is not a finite number (out of the double range)")
    return value


def parse_json(text: str) -> Dict[str, Any]:
    """A text message as a JSON object with a ``signal``; ProtocolError otherwise, also for
    a number that is not finite (``NaN``, ``Infinity``, which Python's reader would take,
    or a literal beyond the double range): a NaN score empties every hypothesis."""
    try:
        msg = json.loads(text, parse_constant=_non_finite, parse_float=_finite_float)
    except ValueError as e:
        raise ProtocolError(f"malformed JSON message ({e.msg} at character {e.pos})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("signal"), str):
        raise ProtocolError('a text message must be a JSON object with a "signal" '
                            '("start" or "end")')
    return msg


def _int_in(msg: Dict[str, Any], key: str, low: int, high: int, default: Any) -> Any:
    value = msg.get(key, default)
    if value is default:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f'"{key}" must be an integer in [{low}, {high}], got {value!r}')
    return value


def parse_start(msg: Dict[str, Any], max_nbest: int, max_chunk_size: int) -> StartRequest:
    """Check a start message; ProtocolError naming the bad (or unknown) key."""
    unknown = [key for key in msg if key not in START_KEYS]
    if unknown:
        raise ProtocolError(f"unknown keys in the start message: {', '.join(map(str, unknown))} "
                            f"(known: {', '.join(START_KEYS[1:])})")
    rate = msg.get("sample_rate", SAMPLE_RATE)
    if rate != SAMPLE_RATE:
        raise ProtocolError(f"sample_rate {rate!r} is not supported: send 16-bit mono PCM at "
                            f"{SAMPLE_RATE} Hz (resample on the client)", CLOSE_UNSUPPORTED)
    continuous = msg.get("continuous_decoding", False)
    if not isinstance(continuous, bool):
        raise ProtocolError(f'"continuous_decoding" must be true or false, got {continuous!r}')
    hotwords = msg.get("hotwords", [])
    if not isinstance(hotwords, list) or not all(isinstance(h, str) for h in hotwords):
        raise ProtocolError('"hotwords" must be a list of strings')
    score = msg.get("hotword_score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
        raise ProtocolError(f'"hotword_score" must be a number, got {score!r}')
    if isinstance(score, int) and abs(score) > 1e300:  # float() would overflow
        raise ProtocolError('"hotword_score" is not a finite number (out of the double range)')
    return StartRequest(nbest=_int_in(msg, "nbest", 1, max_nbest, 1),
                        continuous_decoding=continuous,
                        chunk_size=_int_in(msg, "chunk_size", 1, max_chunk_size, None),
                        hotwords=[h for h in hotwords if h.strip()],
                        hotword_score=None if score is None else float(score))


def ok(event: Dict[str, Any]) -> str:
    """A success message: ``{"status": "ok", **event}``."""
    return json.dumps({"status": "ok", **event}, ensure_ascii=False)


def failed(message: str) -> str:
    """An error message."""
    return json.dumps({"status": "failed", "message": message}, ensure_ascii=False)

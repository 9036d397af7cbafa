"""How long a connection may hold one of the server's ``max_clients`` slots (issue 57).

A slot is held by the connection, not by its audio: a client that sends a couple of
bytes now and then passes an idle timeout (any message resets it) and never reaches an
audio-seconds limit, so two such clients lock a ``--max_clients 2`` server for ever
("slowloris"). Two limits close that:

* **minimum audio rate**: over every window of ``rate_window_s`` seconds spent waiting for
  the client, it must send at least ``min_audio_rate × rate_window_s`` seconds of audio.
  Only time spent waiting for the client counts (the server's own decoding time does
  not), so a client streaming in real time sends 1 s of audio per second counted and
  passes any rate up to 1; a file sent faster than real time passes easily;
* **wall clock**: a connection stays open at most ``max_connection_s`` seconds in all,
  whatever it sends (a client may then reconnect; it cannot keep a slot without end).

Either one closes the connection with 1008 and a reason naming the option.
"""
from __future__ import annotations

import math
import time
from typing import Callable

from wenet.serve.protocol import SAMPLE_RATE, ProtocolError

_BYTES_PER_SECOND = 2 * SAMPLE_RATE  # 16-bit mono PCM


def check_limits(min_audio_rate: float, rate_window_s: float, max_connection_s: float) -> None:
    """ValueError naming the option when a limit is out of range."""
    for name, value, low in (("--min_audio_rate", min_audio_rate, 0.0),
                             ("--rate_window_s", rate_window_s, None),
                             ("--max_connection_s", max_connection_s, None)):
        if not math.isfinite(value) or (value < low if low is not None else value <= 0):
            raise ValueError(f"{name} must be {'>= 0' if low is not None else '> 0'}, "
                             f"got {value:g}")


class ConnectionLimits:
    """The clock of one connection: call :meth:`waited` after each wait for a message,
    :meth:`audio` per audio message, :meth:`check` after both; :meth:`timeout` is how long
    the next wait may last before a limit has to be checked."""

    def __init__(self, min_audio_rate: float, rate_window_s: float, max_connection_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        check_limits(min_audio_rate, rate_window_s, max_connection_s)
        self.min_audio_rate = min_audio_rate
        self.rate_window_s = rate_window_s
        self.max_connection_s = max_connection_s
        self.clock = clock
        self.opened = clock()
        self.window_waited = 0.0   # seconds waited for the client in the current window
        self.window_audio = 0.0    # audio seconds received in the current window

    def timeout(self, idle_timeout_s: float) -> float:
        """Seconds the next wait for a message may last before a limit is due."""
        left = [idle_timeout_s, self.max_connection_s - (self.clock() - self.opened)]
        if self.min_audio_rate > 0:
            left.append(self.rate_window_s - self.window_waited)
        return max(0.0, min(left))

    def waited(self, seconds: float) -> None:
        self.window_waited += seconds

    def audio(self, num_bytes: int) -> None:
        self.window_audio += num_bytes / _BYTES_PER_SECOND

    def check(self) -> None:
        """ProtocolError when the connection is too old or the window just ended with too
        little audio; else a full window starts a new one."""
        age = self.clock() - self.opened
        if age >= self.max_connection_s:
            raise ProtocolError(f"connection open for {age:.0f} s, the most is "
                                f"{self.max_connection_s:g} s (--max_connection_s); reconnect "
                                "to go on")
        if self.window_waited < self.rate_window_s:
            return
        needed = self.min_audio_rate * self.rate_window_s
        if self.window_audio < needed:
            raise ProtocolError(
                f"too little audio: {self.window_audio:.2f} s in the last "
                f"{self.window_waited:.0f} s, at least {needed:g} s needed (--min_audio_rate "
                f"{self.min_audio_rate:g} over --rate_window_s {self.rate_window_s:g})")
        self.window_waited = self.window_audio = 0.0


"""The server against hostile clients and pages (issue 57): non-finite numbers in a start
message, a foreign web page's WebSocket handshake (Origin allow-list), and clients that
trickle audio to hold a slot (wall-clock session limit, minimum audio rate)."""
import asyncio
import json

import pytest

from tests.serve.test_safe_defaults import _server
from tests.serve.test_server import _exchange


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

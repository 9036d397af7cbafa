"""The browser page in headless Chromium against a running server: a WAV file chosen in
the page is streamed and the page shows the transcript the server gives a Python client
for the same file, with partial results on the way. Fails (never skips) when Chromium
cannot run here, saying why."""
import asyncio
import time

import pytest

from tests.serve.chromium import Browser, ChromiumError
from tests.serve.server_thread import ServerThread
from tests.serve.test_server import CONFIG, OPTIONS
from wenet.serve.client import read_pcm16, stream_audio
from wenet.serve.loading import load_streaming_model
from wenet.serve.server import RecognitionServer


def _wait_done(browser, timeout_s=60.0):
    state = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = browser.evaluate(
            "({status: document.getElementById('status').textContent,"
            " text: document.getElementById('final').textContent,"
            " partials: Number(document.getElementById('partial').dataset.updates || 0)})")
        if state["status"] == "done" or state["status"].startswith(("error", "cannot")):
            return state
        time.sleep(0.2)
    raise AssertionError(f"the page did not finish in {timeout_s} s: {state}")


def test_page_shows_the_transcript_of_a_file(u2pp_dir, tmp_path, one_thread):
    loaded = load_streaming_model(str(u2pp_dir), str(u2pp_dir / "model.pt"))
    wav = str(u2pp_dir / "u1.wav")
    with ServerThread(RecognitionServer(loaded, OPTIONS, CONFIG)) as srv:
        expected = asyncio.run(stream_audio(srv.url, read_pcm16(wav))).text
        assert expected
        url = f"http://127.0.0.1:{srv.port}/"
        try:
            browser = Browser(url, str(tmp_path / "profile"))
        except ChromiumError as e:
            pytest.fail(f"the browser test needs a working headless Chromium: {e}")
        try:
            browser.wait_for("document.readyState === 'complete' && "
                             "document.getElementById('file') !== null")
            browser.evaluate("document.getElementById('continuous').checked = false")
            browser.upload("#file", wav)
            state = _wait_done(browser)
        finally:
            browser.close()
    assert state["status"] == "done", state
    assert state["text"] == expected
    assert state["partials"] >= 1

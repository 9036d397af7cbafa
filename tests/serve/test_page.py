"""The browser page in headless Chromium against a running server: a WAV file chosen in
the page is streamed and the page shows the transcript the server gives a Python client
for the same file, with partial results on the way; a page of another origin cannot open
a session (issue 57). Fails (never skips) when Chromium cannot run here, saying why."""
import asyncio
import http.server
import threading
import time
from dataclasses import replace

import pytest

from tests.serve.chromium import Browser, ChromiumError
from tests.serve.server_thread import ServerThread
from tests.serve.test_server import CONFIG, OPTIONS
from wenet.serve.client import read_pcm16, stream_audio
from wenet.serve.loading import load_streaming_model
from wenet.serve.origins import parse_allowed_origins
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


class _ForeignSite:
    """Another origin on this machine (http://127.0.0.1:<other port>/): a page with a
    script, as any web site the user visits could serve."""

    def __init__(self) -> None:
        page = b"<!doctype html><title>elsewhere</title><p>another site</p>"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the http.server name)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _wait_loaded(browser, title, timeout_s=30.0):
    """Until the page titled ``title`` has loaded (the first evaluations may land in the
    blank page Chromium starts with, whose context the navigation destroys)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if browser.evaluate(f"document.readyState === 'complete' && "
                                f"document.title === '{title}'"):
                return
        except ChromiumError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the page {title!r} did not load in {timeout_s} s")
        time.sleep(0.1)


_OPEN_SOCKET = """new Promise(resolve => {{
  const ws = new WebSocket("ws://127.0.0.1:{port}/");
  ws.onopen = () => {{ ws.close(); resolve("open"); }};
  ws.onerror = () => resolve("error");
}})"""


def test_a_foreign_page_in_chromium_cannot_open_a_session(u2pp_dir, tmp_path, one_thread):
    """A page of another origin opens ws://127.0.0.1:PORT/ in a real browser: refused by
    a default server (the browser sees the handshake fail), opened by one whose
    --allowed_origins names that origin."""
    loaded = load_streaming_model(str(u2pp_dir), str(u2pp_dir / "model.pt"))
    site = _ForeignSite()
    origin = site.url.rstrip("/")
    allowing = replace(CONFIG, allowed_origins=parse_allowed_origins([origin]))
    try:
        with ServerThread(RecognitionServer(loaded, OPTIONS, CONFIG)) as closed, \
                ServerThread(RecognitionServer(loaded, OPTIONS, allowing)) as opened:
            try:
                browser = Browser(site.url, str(tmp_path / "profile"))
            except ChromiumError as e:
                pytest.fail(f"the browser test needs a working headless Chromium: {e}")
            try:
                _wait_loaded(browser, "elsewhere")
                refused = browser.evaluate(_OPEN_SOCKET.format(port=closed.port))
                allowed = browser.evaluate(_OPEN_SOCKET.format(port=opened.port))
            finally:
                browser.close()
            assert (refused, allowed) == ("error", "open")
            assert (closed.server.refused_origins, opened.server.refused_origins) == (1, 0)
            assert closed.server.sessions_served == 0
    finally:
        site.close()

"""Headless Chromium driven over the Chrome DevTools Protocol (its WebSocket), for the
browser test of the server's page. Needs Debian's ``chromium`` (tools/install.sh)."""
import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request

from websockets.sync.client import connect

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0"]


class ChromiumError(RuntimeError):
    pass


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise ChromiumError("chromium is not installed: run tools/install.sh as root (it installs "
                        "the Debian packages the tests need) or apt-get install chromium")


class Browser:
    """One headless Chromium showing ``url``; ``evaluate`` runs JavaScript in the page."""

    def __init__(self, url: str, profile_dir: str, timeout_s: float = 30.0) -> None:
        self.proc = subprocess.Popen([chromium_binary(), *FLAGS, f"--user-data-dir={profile_dir}",
                                      url], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.ws = None
        self._stack = contextlib.ExitStack()
        self._id = 0
        port_file = os.path.join(profile_dir, "DevToolsActivePort")
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] \
                    if self.proc.poll() is not None else "(still running)"
                self.close()
                raise ChromiumError(f"chromium did not start its DevTools endpoint: {err}")
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        page = self._page_target(port, url, deadline)
        self.ws = self._stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))

    @staticmethod
    def _page_target(port: int, url: str, deadline: float) -> dict:
        while True:
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list").read())
            pages = [t for t in targets if t.get("type") == "page" and t["url"].startswith(url)]
            if pages:
                return pages[0]
            if time.monotonic() > deadline:
                raise ChromiumError(f"no page for {url} among {targets}")
            time.sleep(0.1)

    def call(self, method: str, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise ChromiumError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise ChromiumError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0) -> None:
        """Until ``expression`` is true in the page (e.g. it has loaded)."""
        deadline = time.monotonic() + timeout_s
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise ChromiumError(f"{expression} still false after {timeout_s} s")
            time.sleep(0.1)

    def upload(self, selector: str, path: str) -> None:
        """Choose ``path`` in the page's file input (fires its change event)."""
        root = self.call("DOM.getDocument")["root"]["nodeId"]
        node = self.call("DOM.querySelector", nodeId=root, selector=selector)["nodeId"]
        self.call("DOM.setFileInputFiles", files=[path], nodeId=node)

    def close(self) -> None:
        self._stack.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

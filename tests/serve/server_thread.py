"""A RecognitionServer running in a thread of its own (its own event loop), for tests."""
import asyncio
import threading

from wenet.serve.server import RecognitionServer


class ServerThread:
    def __init__(self, server: RecognitionServer) -> None:
        self.server = server
        self.port = None
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._task = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self.server.serve_forever(self._on_ready))
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass

    def _on_ready(self, port: int) -> None:
        self.port = port
        self._ready.set()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def __enter__(self) -> "ServerThread":
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the server did not start within 30 s")
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(30)
        self.server.executor.shutdown(wait=True)

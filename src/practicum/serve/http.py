"""Run the API with uvicorn: in the foreground (`practicum serve`) or on a background thread.

with ServerThread(build_app(served), port=0) as url:    # "http://127.0.0.1:PORT/v1"
    OpenAI(base_url=url, api_key="none").chat.completions.create(...)
ServerThread(app, uds="/path/endpoint.sock")           # a Unix socket instead (mode 0666)
"""

from __future__ import annotations

import os
import socket
import threading
import time


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn serving `app` on a daemon thread until the block ends (port 0: a free one)."""

    def __init__(
        self,
        app,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        uds: str | None = None,
    ):
        import uvicorn

        self.uds = uds
        self.host, self.port = host, (0 if uds else port or free_port(host))
        where = {"uds": uds} if uds else {"host": host, "port": self.port}
        self.server = uvicorn.Server(
            uvicorn.Config(app, **where, log_level=log_level, access_log=False)
        )
        self.thread = threading.Thread(target=self.server.run, name="practicum-serve", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                where = self.uds or f"{self.host}:{self.port}"
                raise RuntimeError(f"the server did not start on {where}")
            time.sleep(0.02)
        if self.uds:  # connecting needs write permission; the folder decides who can reach it
            os.chmod(self.uds, 0o666)
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

"""Serving the API with uvicorn: in the foreground (`qtg api`) or in a thread
of a process that does something else (the demo, the tests)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from qtg_runner.api.app import ApiConfig, create_app
from qtg_runner.ports import free_port


def uvicorn_config(
    config: ApiConfig,
    host: str,
    port: int,
    *,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    log_level: str = "info",
) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(config),
        host=host,
        port=port,
        log_level=log_level,
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
        server_header=False,
        proxy_headers=False,
        access_log=log_level == "debug",
    )


@dataclass
class Running:
    server: uvicorn.Server
    thread: threading.Thread
    url: str

    def stop(self, timeout: float = 10) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)


def serve_in_thread(
    config: ApiConfig, host: str = "127.0.0.1", port: int = 0, *, timeout: float = 20
) -> Running:
    """Start the API on ``host``:``port`` (0: a free port) in a daemon thread;
    return once it accepts connections."""
    port = port or free_port(host)
    server = uvicorn.Server(uvicorn_config(config, host, port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="qtg-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the API did not start on {host}:{port}")
        time.sleep(0.02)
    return Running(server, thread, f"http://{host}:{port}")

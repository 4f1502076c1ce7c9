"""Helpers for tests that start `dagster dev` as a real process on loopback."""

from __future__ import annotations

import pathlib
import socket
import subprocess
import time

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_webserver(port: int, process: subprocess.Popen, log: pathlib.Path, timeout_s: float = 180) -> None:
    """Until the webserver answers /server_info; fails with the log's tail if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"dagster dev did not answer within {timeout_s:.0f} s"
        try:
            if requests.get(f"http://127.0.0.1:{port}/server_info", timeout=2).ok:
                return
        except requests.ConnectionError:
            pass
        time.sleep(1)

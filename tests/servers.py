"""Real servers on loopback for the tests: `dagster dev` as a process, a PostgreSQL server of its own, and an
incoming-webhook receiver (what Slack or Teams would be to the alert sensors)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import threading
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


PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"


def postgres_bin() -> pathlib.Path:
    """Debian's PostgreSQL server binaries (scripts/install.sh installs them where missing)."""
    found = sorted(pathlib.Path("/").glob(PG_BIN_GLOB.lstrip("/")))
    for folder in reversed(found):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    raise RuntimeError(f"no PostgreSQL server under {PG_BIN_GLOB}: run scripts/install.sh as root "
                       "(it installs Debian's postgresql package), or install initdb/pg_ctl/postgres there")


class PostgresServer:
    """A real PostgreSQL server on 127.0.0.1 (a free port) in its own temp dir, password authentication over TCP.

    initdb refuses to run as root: as root the server runs as the `postgres` system user (Debian's package makes
    it), in a folder outside pytest's root-only temp tree.
    """

    user = "dagster"
    password = "dagster-test-password"

    def __init__(self):
        self.bin = postgres_bin()
        self.port = free_port()
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="batch-assets-pg-"))
        self.data = self.root / "data"
        self.as_postgres = os.geteuid() == 0

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        command = [str(a) for a in args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)

    def __enter__(self) -> PostgresServer:
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
            shutil.chown(pwfile, "postgres")
        self._run(self.bin / "initdb", "-D", self.data, "-U", self.user, "--pwfile", pwfile, "--auth-local=trust",
                  "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8")
        self._run(self.bin / "pg_ctl", "-D", self.data, "-l", self.root / "server.log", "-w", "-t", "60", "start",
                  "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200 "
                        "-c fsync=off")
        return self

    def create_database(self, name: str) -> str:
        import psycopg2

        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                                      dbname="postgres")
        try:
            connection.autocommit = True  # CREATE DATABASE cannot run inside a transaction
            with connection.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            connection.close()
        return name

    def __exit__(self, *exc) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self._run(self.bin / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


class WebhookReceiver:
    """An HTTP server on loopback that records each POSTed JSON body; `answers` (status codes) are given to the
    first posts, in order, then 200. While `hanging` is set, a post is accepted and never answered (the webhook of
    a chat tool in trouble): it is held until `hanging` is cleared, then dropped unrecorded (its sender gave up)."""

    def __init__(self, answers: list[int] | None = None):
        self.bodies: list[dict] = []
        self.answers = list(answers or [])
        self.hanging, self.held, self.closing = threading.Event(), 0, False
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if receiver.hanging.is_set():
                    receiver.held += 1
                    while receiver.hanging.is_set() and not receiver.closing:
                        time.sleep(0.05)
                    self.close_connection = True
                    return
                status = receiver.answers.pop(0) if receiver.answers else 200
                if status == 200:
                    receiver.bodies.append(json.loads(body))
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T000/B000/secret-token"

    def texts(self) -> list[str]:
        return [body["text"] for body in self.bodies]

    def __enter__(self) -> WebhookReceiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing = True
        self.server.shutdown()
        self.server.server_close()

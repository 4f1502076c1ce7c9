"""A real S3 API on loopback for the tests: moto in server mode, optionally behind a fault-injecting proxy.

The proxy forwards every request unchanged to moto (headers, Range requests and their 206 answers, HEAD's
Content-Length), except object GETs whose key contains a marker: `flaky` fails the first `flaky_failures`
GETs of each such key with a 500 InternalError, `broken` always fails; and writes (PUT, POST, DELETE) to a
bucket in `read_only_buckets`, or to a key under one of `read_only_prefixes` ("bucket/prefix/"), which get
403 AccessDenied as an IAM policy would answer. Listing and HEAD
requests are never faulted. `before_get`, when set, is called with each object GET's key before the GET is
forwarded (a test replaces the object there: another writer landing between a reader's requests). The next
`refuse_next` requests have their connections closed unanswered: a storage outage (counted in requests, not
seconds, so that a loaded machine's slower retries meet the same outage). With
`opaque_etags`, every ETag the client sees (headers and listings) is 32 hex digits that are not the MD5 of the bytes,
as SSE-KMS and SSE-C objects' are, and `If-Match` is mapped back. This exercises the real s3fs/botocore stack and
our own retries over real HTTP.
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import http.client
import http.server
import logging
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable

from moto.server import ThreadedMotoServer

from batch_assets.storage.resource import StorageResource

ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>injected by the test proxy</Message></Error>"
)
_ETAG_XML = re.compile(r"<ETag>(&quot;|&#34;|\")([0-9a-fA-F-]+)(&quot;|&#34;|\")</ETag>")
DENIED_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied (read-only bucket, injected by the test proxy)</Message></Error>"
)


class FaultProxy:
    def __init__(self, upstream_port: int, flaky_failures: int = 2):
        self.upstream_port = upstream_port
        self.flaky_failures = flaky_failures
        self.read_only_buckets: set[str] = set()
        self.read_only_prefixes: set[str] = set()
        self.ignore_if_none_match = False  # a store that does not honour conditional writes (drops If-None-Match)
        self.denied = 0
        self.before_get: Callable[[str], object] | None = None
        self.refuse_next = 0
        self.refused = 0
        self.opaque_etags = False
        self.real_etags: dict[str, str] = {}  # an opaque ETag -> moto's
        self.failures: collections.Counter = collections.Counter()
        self.served: list[tuple[float, str, str, int]] = []  # (unix time, method, path, body bytes) of each answer
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _should_fail(self) -> bool:
                if self.command != "GET":
                    return False
                path = urllib.parse.urlparse(self.path).path
                if "broken" in path:
                    with proxy.lock:
                        proxy.failures[path] += 1
                    return True
                if "flaky" in path:
                    with proxy.lock:
                        if proxy.failures[path] < proxy.flaky_failures:
                            proxy.failures[path] += 1
                            return True
                return False

            def _key(self) -> str:
                """The request's "bucket/key"."""
                return urllib.parse.unquote(urllib.parse.urlparse(self.path).path.lstrip("/"))

            def _denied(self) -> bool:
                key = self._key()
                return self.command in ("PUT", "POST", "DELETE") and (
                    key.split("/")[0] in proxy.read_only_buckets
                    or any(key.startswith(p) for p in proxy.read_only_prefixes))

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if self._denied():
                    with proxy.lock:
                        proxy.denied += 1
                    self._answer(403, DENIED_BODY)
                    return
                if self._should_fail():
                    self._answer(500, ERROR_BODY)
                    return
                if self.command == "GET" and proxy.before_get is not None:
                    proxy.before_get(self._key())
                with proxy.lock:
                    refuse = proxy.refuse_next > 0
                    proxy.refuse_next, proxy.refused = proxy.refuse_next - refuse, proxy.refused + refuse
                if refuse:  # an outage: the connection is dropped, nothing answered
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                dropped = {"host"} | ({"if-none-match"} if proxy.ignore_if_none_match else set())
                headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
                if proxy.opaque_etags and "If-Match" in headers:
                    opaque = headers["If-Match"].strip('"')
                    headers["If-Match"] = f'"{proxy.real_etags.get(opaque, opaque)}"'

                headers["Host"] = f"127.0.0.1:{proxy.upstream_port}"
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                if proxy.opaque_etags:
                    data = _ETAG_XML.sub(lambda m: f"<ETag>{m[1]}{proxy.opaque(m[2])}{m[3]}</ETag>", data.decode(
                        "utf-8", "surrogateescape")).encode("utf-8", "surrogateescape") if b"<ETag>" in data else data
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() == "etag" and proxy.opaque_etags:
                        value = f'"{proxy.opaque(value.strip(chr(34)))}"'
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                # HEAD has no body: its Content-Length is the object's size, passed through as moto sent it
                size = response.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", size)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                upstream.close()
                with proxy.lock:
                    proxy.served.append((time.time(), self.command, self.path.split("?")[0],
                                         0 if self.command == "HEAD" else len(data)))

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        # a short poll: stop() returns within it (the default 0.5 s was most of a test's S3 set-up)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def opaque(self, etag: str) -> str:
        """An ETag that is not the MD5 of the bytes, as SSE-KMS's: 32 hex digits (remembered for `If-Match`)."""
        opaque = hashlib.sha256(f"kms:{etag}".encode()).hexdigest()[:32]
        self.real_etags[opaque] = etag
        return opaque

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class S3Server:
    """moto on 127.0.0.1 (a free port), plus a fault proxy of this server's own in front of it.

    moto's state is per process whatever its servers (a bucket per test), so one moto server is started on first
    use and kept for the process (the test session): each `S3Server` costs a fresh proxy, not a server start."""

    _moto: ThreadedMotoServer | None = None

    def __init__(self, flaky_failures: int = 2):
        self.flaky_failures = flaky_failures

    @classmethod
    def _shared_moto(cls) -> ThreadedMotoServer:
        if cls._moto is None:
            logging.getLogger("werkzeug").setLevel(logging.WARNING)
            moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            moto.start()
            atexit.register(moto.stop)
            cls._moto = moto
        return cls._moto

    def __enter__(self) -> S3Server:
        self.moto = self._shared_moto()
        self.port = self.moto._server.server_port  # the port the OS gave us
        self.proxy = FaultProxy(self.port, self.flaky_failures)
        self.proxy.start()
        return self

    def __exit__(self, *exc) -> None:
        self.proxy.stop()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def faulty_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}"

    def storage(self, bucket: str, faulty: bool = False, source: str | None = None) -> StorageResource:
        """Output storage `s3://{bucket}/out` (and the audio under `s3://{bucket}/{source}`, when given), direct or
        through the fault proxy (moto's state is shared by every server of the process: a bucket per test). Built
        whole: a Dagster run builds its resources from their config, so a `model_copy` of one is not what it runs."""
        audio = {"source_url": f"s3://{bucket}/{source}"} if source else {}
        return StorageResource(storage_url=f"s3://{bucket}/out", s3_region="us-east-1", s3_access_key_id="testing",
                               s3_secret_access_key="testing",
                               s3_endpoint_url=self.faulty_endpoint if faulty else self.endpoint, **audio)

    def bucket(self, name: str, versioning: str | None = None):
        """A new bucket, keeping versions when `versioning` is given ("Enabled"; "Suspended" is set by a test after
        it wrote what it wanted versioned), and the client that made it."""
        client = self.client()
        client.create_bucket(Bucket=name)
        if versioning:
            client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return client

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

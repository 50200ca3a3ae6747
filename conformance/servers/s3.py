"""A local S3 server for tests: moto's ``ThreadedMotoServer`` on 127.0.0.1.

moto serves real HTTP on a free loopback port, from a thread of this process,
so the S3 adapter talks to it exactly as it would to AWS. Its data is global
to the process: isolate tests by bucket (`create_bucket` with a unique
name) or by prefix. It answers roughly 100 requests a second, so keep test
volumes small.

moto stores whatever part of a body arrives when a client drops the connection
mid-request, and does not check the body's checksum; AWS discards such a
request. The server here wraps moto in a small WSGI layer that answers
``400 IncompleteBody`` to a body shorter than its ``Content-Length`` and
``400 BadDigest`` to one that fails its ``Content-MD5`` or
``x-amz-checksum-crc32``, so that an upload is whole-or-absent as on AWS.

moto is also not safe for concurrent writes of one key: its answer to a put
can read the buffer of the object that a concurrent put just replaced and
closed (HTTP 500, ``I/O operation on closed file``), which AWS never does. The
same layer therefore lets moto handle one request at a time, once that
request's body has fully arrived, so a slow upload holds up no other request.

werkzeug's server, under moto, closes the connection after every response (it
cannot tell where an unread body ends, so it never reads a next request); a
client then opens a TCP connection per request, which AWS does not make it do.
Here every body is read whole before moto sees the request, so the connection
is kept open for the next one, as AWS and SeaweedFS keep it, except after a
body that did not fully arrive.

Usage::

    with s3_server() as endpoint_url:
        create_bucket(endpoint_url, "ckk-test")
        async with S3Storage("ckk-test", **storage_options(endpoint_url)) as storage:
            ...
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import subprocess
import sys
import tempfile
import threading
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import free_port, started, stop, unavailable

__all__ = [
    "ACCESS_KEY_ID",
    "REGION",
    "SECRET_ACCESS_KEY",
    "boto3_client",
    "create_bucket",
    "moto_auth_server",
    "s3_server",
    "serving",
    "storage_options",
    "unique_bucket_name",
]

ACCESS_KEY_ID = "checkpointkit-test"
"""Any credentials work with moto (it does not check them unless told to)."""
SECRET_ACCESS_KEY = "checkpointkit-test-secret"
REGION = "us-east-1"


_INCOMPLETE = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>IncompleteBody</Code>'
    b"<Message>You did not provide the number of bytes specified by the Content-Length "
    b"HTTP header</Message></Error>"
)
_BAD_DIGEST = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>BadDigest</Code>'
    b"<Message>The checksum you specified did not match what we received</Message></Error>"
)

_WHOLE = "checkpointkit.body_read_whole"
"""Set in a request's WSGI environ once its body has been read to its end (or it has none):
the connection can then carry the next request."""


def _digest_ok(environ: dict[str, Any], body: bytes) -> bool:
    md5 = environ.get("HTTP_CONTENT_MD5")
    if md5 and base64.b64encode(hashlib.md5(body).digest()).decode() != md5:
        return False
    crc = environ.get("HTTP_X_AMZ_CHECKSUM_CRC32")
    return not crc or base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode() == crc


def _refuse(start_response: Any, body: bytes) -> list[bytes]:
    start_response(
        "400 Bad Request",
        [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
    )
    return [body]


class _WholeBodies:
    """WSGI middleware: refuse a body shorter than its Content-Length or failing its checksum.

    Bodies are read whole before moto sees the request, and moto handles one
    request at a time (see the module's notes).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        text = environ.get("CONTENT_LENGTH") or ""
        stream = environ["wsgi.input"]
        if environ.get("wsgi.input_terminated"):
            environ["wsgi.input"] = io.BytesIO(stream.read())
        elif text.isdigit() and int(text) > 0:
            length = int(text)
            chunks: list[bytes] = []
            got = 0
            while got < length:
                chunk = stream.read(min(length - got, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            if got < length:
                return _refuse(start_response, _INCOMPLETE)
            body = b"".join(chunks)
            if not _digest_ok(environ, body):
                environ[_WHOLE] = True
                return _refuse(start_response, _BAD_DIGEST)
            environ["wsgi.input"] = io.BytesIO(body)
        environ[_WHOLE] = True
        with self.lock:
            result = self.app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()


class _Undrained:
    """The request's stream as werkzeug's handler reads it after the response: nothing more
    once the body was read whole (what follows is the connection's next request)."""

    def __init__(self, stream: Any, environ: dict[str, Any]) -> None:
        self.stream, self.environ = stream, environ

    def read(self, size: int = -1) -> bytes:
        if self.environ.get(_WHOLE):
            return b""
        data: bytes = self.stream.read(size)
        return data


def _moto_server() -> Any:
    """A ``ThreadedMotoServer`` on 127.0.0.1:0 whose app refuses truncated bodies."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from moto.server import ThreadedMotoServer
    from werkzeug.serving import make_server

    class S3Only(DomainDispatcherApplication):
        """Every request to moto's S3 app: moto's own dispatcher finds the service of each
        request by listing its package directory (about 180 ``stat`` calls a request, a
        third of the server's time per request)."""

        def get_application(self, environ: dict[str, Any]) -> Any:
            with self.lock:
                app = self.app_instances.get("s3")
                if app is None:
                    app = self.app_instances["s3"] = self.create_app("s3")
                return app

    class KeepAlive(MotoRequestHandler):
        """werkzeug's handler, which closes the connection after every response, keeping
        it open when the request's body was read to its end (`_WholeBodies`): no
        ``Connection: close`` header then, and no draining of the socket after the
        response (werkzeug reads and drops whatever arrives within 10 ms: the next
        request, on a kept connection)."""

        # The reply goes out in several writes (status and headers, then the body); on a
        # kept connection Nagle's algorithm holds the last of them until the client's
        # delayed acknowledgement, some 40 ms a request.
        disable_nagle_algorithm = True

        def make_environ(self) -> dict[str, Any]:
            environ = super().make_environ()  # its wsgi.input is the socket's own stream
            self.rfile = _Undrained(self.rfile, environ)  # type: ignore[assignment]
            return environ

        def run_wsgi(self) -> None:
            stream = self.rfile
            try:
                super().run_wsgi()
            finally:
                self.rfile = stream  # the next request line is read from it
                self.environ = {}  # an error answered before the next request's environ

        def send_header(self, keyword: str, value: str) -> None:
            whole = getattr(self, "environ", {}).get(_WHOLE, False)
            if whole and keyword.lower() == "connection" and value.lower() == "close":
                return
            super().send_header(keyword, value)

    class WholeBodyMotoServer(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = _WholeBodies(S3Only(create_backend_app))
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=KeepAlive
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    return WholeBodyMotoServer(ip_address="127.0.0.1", port=0, verbose=False)


@contextmanager
def s3_server() -> Iterator[str]:
    """Run moto's S3 server on 127.0.0.1 and a free port; yield its endpoint URL.

    The server stops, and its listening socket is closed, when the block ends.
    Requests whose body is shorter than their ``Content-Length`` (a client
    that dropped the connection mid-upload) are refused, as AWS does.
    When moto (``moto[server]``) is not installed, the test is skipped (or
    fails where backends are required): see
    `checkpointkit.conformance.servers.unavailable`.
    """
    try:
        server = _moto_server()
    except ImportError as exc:  # pragma: no cover - depends on the environment
        unavailable(f"moto's server is not installed ({exc}); pip install 'moto[server]'")
    with serving(server) as endpoint_url:
        yield endpoint_url


@contextmanager
def serving(server: Any) -> Iterator[str]:
    """Start a moto ``ThreadedMotoServer`` (``server``); yield its endpoint URL; then stop
    it and close its listening socket. `s3_server` serves the test server with it; a
    benchmark can serve moto's own."""
    # One log line per request otherwise; moto's own warnings stay visible.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        inner = getattr(server, "_server", None)
        if inner is not None:  # stop() shuts the loop down but leaves the socket open
            inner.server_close()


@contextmanager
def moto_auth_server() -> Iterator[str]:
    """Run a moto server that checks credentials, in a subprocess; yield its endpoint URL.

    With ``INITIAL_NO_AUTH_ACTION_COUNT=0`` moto authenticates every request
    against its (empty) IAM, so any access key is rejected with
    ``InvalidAccessKeyId``: the server for wrong-credential tests. It runs in
    its own process because moto reads that setting once per process.
    """
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        unavailable(f"moto's server is not installed ({exc}); pip install 'moto[server]'")
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    for _attempt in range(3):  # a free port can be taken by someone else before moto binds it
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            if started(proc, port):
                yield f"http://127.0.0.1:{port}"
                return
        finally:
            stop(proc)
    unavailable(
        f"moto's server did not start in 3 attempts (last exit status {proc.returncode}, "
        f"port {port})"
    )


def storage_options(endpoint_url: str) -> dict[str, Any]:
    """Keyword arguments that point an ``S3Storage`` at the local server."""
    return {
        "endpoint_url": endpoint_url,
        "region": REGION,
        "access_key_id": ACCESS_KEY_ID,
        "secret_access_key": SECRET_ACCESS_KEY,
    }


def unique_bucket_name(stem: str = "ckk") -> str:
    """A fresh, valid bucket name (lowercase, at most 63 characters)."""
    return f"{stem[:40].lower()}-{uuid.uuid4().hex[:16]}"


def boto3_client(endpoint_url: str) -> Any:
    """A plain (synchronous) boto3 S3 client of the server at ``endpoint_url``, with the test
    credentials; close it when done."""
    import boto3  # type: ignore[import-untyped]

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY,
    )


def create_bucket(endpoint_url: str, bucket: str) -> None:
    """Create ``bucket`` on the server at ``endpoint_url`` (synchronously, with boto3)."""
    client = boto3_client(endpoint_url)
    try:
        client.create_bucket(Bucket=bucket)
    finally:
        client.close()


def moto_descriptor(target: str) -> bool:
    """Whether an open descriptor (its ``readlink`` target) is one moto's server keeps.

    moto stores a large object in a ``SpooledTemporaryFile``, which becomes an
    unnamed temporary file (``/tmp/#123 (deleted)``) held as long as the
    object: the server's, not the client's. And werkzeug, which serves moto's
    requests in threads of this process, opens a selector (an ``eventpoll``) at the
    end of each request to drain what the client sent; when the client reset the
    connection, the read there raises before ``selector.close()``, and the selector
    waits for the garbage collector. Give it to `foreign_descriptors`.
    """
    tmp = tempfile.gettempdir().rstrip("/")
    if target == "anon_inode:[eventpoll]":
        return True
    return target.startswith(f"{tmp}/#") and target.endswith(" (deleted)")

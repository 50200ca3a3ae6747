"""The test S3 servers act as AWS does where tests rely on it.

The first test runs on both servers; the others check the small WSGI layer
around moto (SeaweedFS refuses such unsigned requests before reading them).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import socket
import statistics
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from checkpointkit.adapters.s3 import S3Storage


def _address(endpoint: str) -> tuple[str, int]:
    parts = urlsplit(endpoint)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


async def test_server_takes_concurrent_overwrites_of_one_key(
    make_s3: Callable[..., S3Storage],
) -> None:
    """moto alone answers some of these with HTTP 500: its reply reads a replaced, closed buffer."""
    async with make_s3() as storage:
        for _ in range(5):
            values = [f"{i:03d}".encode() * 1000 for i in range(10)]
            versions = await asyncio.gather(*(storage.put("one", v) for v in values))
            assert len(set(versions)) == len(values)
            assert (await storage.get("one")).data in values


@pytest.mark.parametrize("s3_server_name", ["moto"])  # the layer around moto
def test_server_refuses_a_body_shorter_than_its_length(s3_endpoint: str, s3_bucket: str) -> None:
    host, port = _address(s3_endpoint)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(
            f"PUT /{s3_bucket}/short HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Length: 100\r\n\r\n".encode()
            + b"x" * 10
        )
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"IncompleteBody" in reply
    # the rest of the body may still come: the connection carries no next request
    assert b"\r\nConnection: close\r\n" in reply.split(b"\r\n\r\n")[0] + b"\r\n"
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("HEAD", f"/{s3_bucket}/short")
        assert conn.getresponse().status == 404
    finally:
        conn.close()


@pytest.mark.parametrize("s3_server_name", ["moto"])
def test_server_refuses_a_body_that_fails_its_content_md5(s3_endpoint: str, s3_bucket: str) -> None:
    host, port = _address(s3_endpoint)
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("PUT", f"/{s3_bucket}/corrupt", body=b"data", headers={"Content-MD5": wrong})
        response = conn.getresponse()
        body = response.read()
        assert response.status == 400
        assert b"BadDigest" in body
        conn.request("HEAD", f"/{s3_bucket}/corrupt")
        assert conn.getresponse().status == 404
    finally:
        conn.close()


@pytest.mark.parametrize("s3_server_name", ["moto"])  # the layer around moto
def test_server_keeps_the_connection_for_the_next_request(s3_endpoint: str, s3_bucket: str) -> None:
    """As AWS does: werkzeug's server alone closes it after every response, and drops what
    arrives within 10 ms of a response (the next request, on a kept connection)."""
    host, port = _address(s3_endpoint)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("PUT", f"/{s3_bucket}/kept", body=b"x" * 10)
        first = conn.getresponse()
        first.read()
        assert first.status == 200 and not first.will_close, first.headers
        sock = conn.sock
        for i in range(3):  # each sent the moment the previous answer is read
            conn.request("PUT", f"/{s3_bucket}/kept{i}", body=b"y" * i)
            again = conn.getresponse()
            assert (again.status, again.read()) == (200, b"")
        assert conn.sock is sock, "the client had to open another connection"
    finally:
        conn.close()


@pytest.mark.parametrize("s3_server_name", ["moto"])  # the layer around moto
def test_server_answers_on_a_kept_connection_without_waiting_for_an_acknowledgement(
    s3_endpoint: str, s3_bucket: str
) -> None:
    """A reply with a body goes out in two writes (headers, then body). With Nagle's
    algorithm on, a kept connection holds the second until the client's delayed
    acknowledgement: at least 40 ms a request on Linux (``TCP_DELACK_MIN``), about 1 ms
    here without it."""
    host, port = _address(s3_endpoint)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    took: list[float] = []
    try:
        for _ in range(21):
            start = time.perf_counter()
            conn.request("GET", f"/{s3_bucket}?list-type=2&max-keys=1")
            reply = conn.getresponse()
            assert reply.status == 200 and reply.read(), reply.headers
            took.append(time.perf_counter() - start)
    finally:
        conn.close()
    assert statistics.median(took) < 0.025, took

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

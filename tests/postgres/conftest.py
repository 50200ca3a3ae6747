"""Fixtures of the PostgreSQL adapter's tests: a real server per test worker, started once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from checkpointkit.conformance.servers.postgres import PostgresServer, postgres_server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server on a free loopback port for this worker's session."""
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def pg_url(pg_server: PostgresServer) -> str:
    """``postgresql://checkpointkit:...@127.0.0.1:PORT/postgres`` of :func:`pg_server`."""
    return pg_server.url


@pytest.fixture(scope="session")
def pg_icu_url(pg_server: PostgresServer) -> str:
    """A database of :func:`pg_server` whose default collation is ICU's ``en-US`` (``B``
    after ``ab``, ``a-b`` after ``a b``): keys that took it would list out of byte order."""
    return pg_server.database("icu", icu_locale="en-US")

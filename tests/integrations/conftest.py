"""Fixtures of the integration tests: one fresh storage location per test, on every backend.

A :class:`Location` names a place (a URL and adapter options) that no other
test uses; opening it twice gives two storages on the same data, which is how
the tests stand in for a second process resuming a run. Network backends run
as real local servers, started once per session by the launchers in
``checkpointkit.conformance.servers``.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from checkpointkit import Storage, open_storage
from checkpointkit.conformance.servers import unavailable

BACKENDS = [
    "memory",
    "file",
    "sqlite",
    "redis",
    "postgres",
    "s3",
    "azure",
    "late",
    "latereply",
]
"""``late`` and ``latereply`` are memory with writes whose outcome is unknown: cancelled and
timed-out writes land later, or replies come late (``checkpointkit.conformance.late``)."""
_ADAPTERS = {"redis": "redis", "postgres": "postgres", "s3": "s3", "azure": "azure"}


@dataclass
class Location:
    """A storage location of one test: open it as often as needed."""

    backend: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)
    wrap: Callable[[Storage], Storage] | None = None

    def open(self) -> Storage:
        """A new storage object on this location (use it with ``async with``)."""
        storage = open_storage(self.url, **self.options)
        return storage if self.wrap is None else self.wrap(storage)


def _fresh() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def _require_adapter(backend: str) -> None:
    module = _ADAPTERS.get(backend)
    if module is None:
        return
    try:
        importlib.import_module(f"checkpointkit.adapters.{module}")
    except ImportError as exc:
        unavailable(f"the {backend} adapter cannot be imported: {exc}")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a valkey-server for the whole session."""
    from checkpointkit.conformance.servers.redis import valkey_standalone

    with valkey_standalone() as url:
        yield url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """``postgresql://...@127.0.0.1:PORT/postgres`` of a PostgreSQL server for the session."""
    from checkpointkit.conformance.servers.postgres import postgres_server

    with postgres_server() as server:
        yield server.url


@pytest.fixture(scope="session")
def s3_server() -> Iterator[tuple[str, str]]:
    """``(endpoint_url, bucket)`` of moto's S3 server for the whole session."""
    from checkpointkit.conformance.servers.s3 import create_bucket, s3_server, unique_bucket_name

    with s3_server() as endpoint:
        bucket = unique_bucket_name("integrations")
        create_bucket(endpoint, bucket)
        yield endpoint, bucket


@pytest.fixture(scope="session")
def azure_server() -> Iterator[str]:
    """The connection string of an Azurite blob server for the whole session."""
    from checkpointkit.conformance.servers.azure import azurite_server

    with azurite_server() as connection_string:
        yield connection_string


def make_location(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A fresh location on ``backend`` (starting its server if needed)."""
    _require_adapter(backend)
    name = _fresh()
    if backend == "memory":
        return Location(backend, f"memory://{name}")
    if backend in ("late", "latereply"):
        from checkpointkit.conformance.late import LateLanding, LateReply

        seed = sum(name.encode())
        if backend == "late":
            return Location(
                backend,
                f"memory://{name}",
                wrap=lambda s: LateLanding(s, seed=seed, max_delay=0.05),
            )
        return Location(
            backend, f"memory://{name}", wrap=lambda s: LateReply(s, seed=seed, max_delay=0.005)
        )
    if backend == "file":
        return Location(backend, f"file://{tmp_path / name}")
    if backend == "sqlite":
        return Location(backend, f"sqlite:///{tmp_path / name}.db")
    if backend == "redis":
        url = request.getfixturevalue("redis_server")
        return Location(backend, url, {"prefix": name, "timeout": 10})
    if backend == "postgres":
        return Location(backend, request.getfixturevalue("postgres_url"), {"prefix": name})
    if backend == "s3":
        from checkpointkit.conformance.servers.s3 import storage_options

        endpoint, bucket = request.getfixturevalue("s3_server")
        return Location(backend, f"s3://{bucket}/{name}", storage_options(endpoint))
    if backend == "azure":
        connection_string = request.getfixturevalue("azure_server")
        return Location(
            backend,
            f"az://{name}?create=true",
            {"connection_string": connection_string},
        )
    raise AssertionError(f"unknown backend {backend!r}")


@pytest.fixture(params=BACKENDS)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A fresh location, once per backend."""
    return make_location(str(request.param), request, tmp_path)


@pytest.fixture(params=["memory", "file", "sqlite"])
def local_location(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A fresh location on the in-process backends (for the finer-grained tests)."""
    return make_location(str(request.param), request, tmp_path)


@pytest.fixture
def location_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Location]:
    """Make more fresh locations on a backend within one test."""
    return lambda backend: make_location(backend, request, tmp_path)

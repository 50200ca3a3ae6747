"""Targets for the savers and storages people use, as ``scripts/ecosystem-results`` runs them.

Each row of ``docs/ecosystem-conformance.md`` is a `Row`: a name and a
context manager giving its `EcosystemTarget` (starting the server it
needs). The factories here are importable (``langgraph:checkpointkit.
conformance.ecosystems.known:sqlite_saver``), so that the SIGKILL test's
subprocess can open the same data; a row that needs a server passes its
address to the subprocess in an environment variable.

Holds (how the cancellation group makes a backend stop answering):

- ``AsyncSqliteSaver``: another connection holds the database's write lock
  (``BEGIN IMMEDIATE``), as a second process writing would;
- ``AsyncPostgresSaver``: the stalling TCP proxy between the saver and the
  server;
- checkpointkit's saver and storage: every write of the storage under them
  waits (a gate on the checkpointkit storage);
- agent-framework's ``FileCheckpointStorage``: none (its writes run in a worker
  thread on a local disk); the held-backend tests are skipped, with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...registry import open_storage
from ...storage import GetResult, PutMode, Storage
from ..styles import StorageWrapper
from .coverage import DEFAULT_MAX_LENGTH
from .target import EcosystemTarget

__all__ = [
    "BACKENDS",
    "ROWS",
    "Row",
    "checkpointkit_saver",
    "checkpointkit_storage",
    "file_storage",
    "postgres_saver",
    "sqlite_saver",
]

BACKENDS = ("memory", "file", "sqlite", "redis", "s3", "azure", "postgres")
"""The checkpointkit backends the results cover."""

_ENV = {
    "redis": "CHECKPOINTKIT_ECO_REDIS_URL",
    "s3": "CHECKPOINTKIT_ECO_S3_ENDPOINT",
    "azure": "CHECKPOINTKIT_ECO_AZURE_CONNECTION_STRING",
    "postgres": "CHECKPOINTKIT_ECO_POSTGRES_URL",
    "backend": "CHECKPOINTKIT_ECO_BACKEND",
}


def _base() -> Path:
    """Where the file and SQLite rows keep their data (one folder per location)."""
    base = Path(os.environ.get("CHECKPOINTKIT_ECO_ROOT", tempfile.gettempdir())) / "ck-eco"
    base.mkdir(parents=True, exist_ok=True)
    return base


# -- LangGraph's own savers ------------------------------------------------------------------
def _sqlite_path(location: str | None) -> str:
    return str(_base() / f"{location or 'default'}.sqlite")


@asynccontextmanager
async def sqlite_saver(*, location: str | None = None) -> AsyncIterator[Any]:
    """LangGraph's ``AsyncSqliteSaver`` on a database file per location."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(_sqlite_path(location)) as saver:
        await saver.setup()
        yield saver


sqlite_saver.checkpointkit_durable = True  # type: ignore[attr-defined]


@asynccontextmanager
async def _sqlite_hold(location: str | None) -> AsyncIterator[None]:
    """Another connection takes the database's write lock until the context exits."""
    conn = await asyncio.to_thread(
        sqlite3.connect, _sqlite_path(location), isolation_level=None, check_same_thread=False
    )
    try:
        await asyncio.to_thread(conn.execute, "BEGIN IMMEDIATE")
        try:
            yield
        finally:
            await asyncio.to_thread(conn.execute, "ROLLBACK")
    finally:
        await asyncio.to_thread(conn.close)


@asynccontextmanager
async def postgres_saver(
    *, location: str | None = None, endpoint: tuple[str, int] | None = None
) -> AsyncIterator[Any]:
    """LangGraph's ``AsyncPostgresSaver``, in a schema per location of the server that
    ``$CHECKPOINTKIT_ECO_POSTGRES_URL`` names (through ``endpoint`` if given)."""
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row

    url = os.environ[_ENV["postgres"]]
    if endpoint is not None:
        host_port = url.rsplit("@", 1)[1].split("/", 1)[0]
        url = url.replace(f"@{host_port}/", f"@{endpoint[0]}:{endpoint[1]}/")
    schema = (location or "public").replace("-", "_")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        await admin.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    conn = await psycopg.AsyncConnection.connect(
        url,
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={schema}",
    )
    async with conn:
        saver = AsyncPostgresSaver(conn)
        await saver.setup()
        yield saver


postgres_saver.checkpointkit_durable = True  # type: ignore[attr-defined]


# -- agent-framework's own storages --------------------------------------------------------------
def file_storage(*, location: str | None = None) -> Any:
    """agent-framework's ``FileCheckpointStorage`` in a folder per location."""
    from agent_framework import FileCheckpointStorage

    return FileCheckpointStorage(_base() / f"af-{location or 'default'}")


file_storage.checkpointkit_durable = True  # type: ignore[attr-defined]


# -- checkpointkit's saver and storage on a backend ------------------------------------------------
_GATES: dict[str, asyncio.Event] = {}


class _Gated(StorageWrapper):
    """Every call waits while the location's gate is closed (the checkpointkit rows' hold):
    writes and reads, so that a saver's or storage's reads can be cancelled while held."""

    def __init__(self, inner: Storage, location: str | None) -> None:
        super().__init__(inner)
        self.location = location
        self.__dict__["capabilities"] = inner.capabilities

    async def _wait(self) -> None:
        gate = _GATES.get(self.location or "")
        while gate is not None and not gate.is_set():
            await gate.wait()
            gate = _GATES.get(self.location or "")

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        await self._wait()
        return await super().put(key, data, mode=mode)

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        await self._wait()
        return await super().delete(key, if_match=if_match)

    async def get(self, key: str) -> GetResult:
        await self._wait()
        return await super().get(key)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        return self._listed(super().list(prefix, start_after=start_after, limit=limit))

    async def _listed(self, keys: AsyncIterator[str]) -> AsyncIterator[str]:
        try:
            await self._wait()
            async for key in keys:
                yield key
        finally:
            close = getattr(keys, "aclose", None)
            if close is not None:
                await close()


@asynccontextmanager
async def _gate_hold(location: str | None) -> AsyncIterator[None]:
    gate = asyncio.Event()
    _GATES[location or ""] = gate
    try:
        yield
    finally:
        del _GATES[location or ""]
        gate.set()


def _storage(backend: str, location: str) -> Storage:
    """A checkpointkit storage on ``backend`` for ``location`` (the servers from ``$...``)."""
    if backend == "memory":
        return open_storage(f"memory://{location}")
    if backend == "file":
        return open_storage((_base() / f"ck-{location}").as_uri() + "?create=true")
    if backend == "sqlite":
        return open_storage(f"sqlite:///{_base() / f'ck-{location}.db'}")
    if backend == "redis":
        return open_storage(os.environ[_ENV["redis"]], prefix=location, timeout=10)
    if backend == "s3":
        from ..servers.s3 import storage_options

        endpoint = os.environ[_ENV["s3"]]
        return open_storage(f"s3://ck-eco/{location}", **storage_options(endpoint))
    if backend == "azure":
        return open_storage(
            f"az://{location}?create=true", connection_string=os.environ[_ENV["azure"]]
        )
    if backend == "postgres":
        return open_storage(os.environ[_ENV["postgres"]], prefix=location)
    raise ValueError(f"unknown backend {backend!r}")


def checkpointkit_saver(*, location: str | None = None) -> Any:
    """checkpointkit's LangGraph saver on the backend that ``$CHECKPOINTKIT_ECO_BACKEND`` names."""
    from ...integrations.langgraph import CheckpointkitSaver
    from ..target import new_location

    where = location or new_location()
    saver = CheckpointkitSaver(_Gated(_storage(os.environ[_ENV["backend"]], where), location))
    saver._owns_storage = True
    return saver


def checkpointkit_storage(*, location: str | None = None) -> Any:
    """checkpointkit's agent-framework storage on ``$CHECKPOINTKIT_ECO_BACKEND``."""
    from ...integrations.agent_framework import CheckpointkitCheckpointStorage
    from ..target import new_location

    where = location or new_location()
    storage = CheckpointkitCheckpointStorage(
        _Gated(_storage(os.environ[_ENV["backend"]], where), location)
    )
    storage._owns_storage = True
    return storage


# -- rows ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One row of the results: what it tests and how to open it."""

    id: str
    title: str
    ecosystem: str
    open: Callable[[], AbstractContextManager[EcosystemTarget]]
    third_party: bool = True


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_KNOWN = "checkpointkit.conformance.ecosystems.known"


@contextlib.contextmanager
def _simple(
    ecosystem: str, factory: Any, spec: str, name: str, **kw: Any
) -> Iterator[EcosystemTarget]:
    yield EcosystemTarget(ecosystem, factory, name=name, spec=spec, **kw)  # type: ignore[arg-type]


@contextlib.contextmanager
def _postgres_row() -> Iterator[EcosystemTarget]:
    from ..servers.postgres import postgres_server

    with postgres_server() as server, _env(**{_ENV["postgres"]: server.url}):
        host, port = "127.0.0.1", server.port
        yield EcosystemTarget(
            "langgraph",
            postgres_saver,
            name="AsyncPostgresSaver (PostgreSQL server)",
            spec=f"{_KNOWN}:postgres_saver",
            upstream=(host, port),
        )


@contextlib.contextmanager
def _backend_servers(backend: str) -> Iterator[dict[str, str]]:
    if backend == "redis":
        from ..servers.redis import valkey_standalone

        with valkey_standalone() as url:
            yield {_ENV["redis"]: url}
    elif backend == "s3":
        from ..servers.s3 import create_bucket, s3_server

        with s3_server() as endpoint:
            create_bucket(endpoint, "ck-eco")
            yield {_ENV["s3"]: endpoint}
    elif backend == "azure":
        from ..servers.azure import azurite_server

        with azurite_server() as connection_string:
            yield {_ENV["azure"]: connection_string}
    elif backend == "postgres":
        from ..servers.postgres import postgres_server

        with postgres_server() as server:
            yield {_ENV["postgres"]: server.url}
    else:
        yield {}


MAX_LENGTHS = {"s3": 129, "azure": 513}
"""The ``lengths`` sweep's longest thread or workflow on the slow test servers: moto answers
about 100 requests a second, and the saver's sweep at the default 1,025 ran past its 300 s
on it (Azurite: 210 s); 129 still passes pages of 10, 100 and 101 items, 513 those too."""


def _checkpointkit_row(
    ecosystem: str, backend: str
) -> Callable[[], AbstractContextManager[EcosystemTarget]]:
    factory = checkpointkit_saver if ecosystem == "langgraph" else checkpointkit_storage
    what = "CheckpointkitSaver" if ecosystem == "langgraph" else "CheckpointkitCheckpointStorage"

    @contextlib.contextmanager
    def row() -> Iterator[EcosystemTarget]:
        with _backend_servers(backend) as env, _env(**env, **{_ENV["backend"]: backend}):
            yield EcosystemTarget(
                ecosystem,  # type: ignore[arg-type]
                factory,
                name=f"{what} ({backend})",
                spec=f"{_KNOWN}:{factory.__name__}",
                durable=backend != "memory",
                hold=_gate_hold,
                max_length=MAX_LENGTHS.get(backend, DEFAULT_MAX_LENGTH),
            )

    return row


ROWS: tuple[Row, ...] = (
    Row(
        "langgraph-inmemory",
        "LangGraph `InMemorySaver`",
        "langgraph",
        lambda: _simple(
            "langgraph",
            _import("langgraph.checkpoint.memory", "InMemorySaver"),
            "langgraph.checkpoint.memory:InMemorySaver",
            "InMemorySaver",
        ),
    ),
    Row(
        "langgraph-sqlite",
        "LangGraph `AsyncSqliteSaver`",
        "langgraph",
        lambda: _simple(
            "langgraph",
            sqlite_saver,
            f"{_KNOWN}:sqlite_saver",
            "AsyncSqliteSaver",
            hold=_sqlite_hold,
        ),
    ),
    Row(
        "langgraph-postgres",
        "LangGraph `AsyncPostgresSaver` (PostgreSQL server)",
        "langgraph",
        _postgres_row,
    ),
    *(
        Row(
            f"checkpointkit-saver-{b}",
            f"checkpointkit `CheckpointkitSaver` on `{b}`",
            "langgraph",
            _checkpointkit_row("langgraph", b),
            third_party=False,
        )
        for b in BACKENDS
    ),
    Row(
        "agent-framework-inmemory",
        "agent-framework `InMemoryCheckpointStorage`",
        "agent-framework",
        lambda: _simple(
            "agent-framework",
            _import("agent_framework", "InMemoryCheckpointStorage"),
            "agent_framework:InMemoryCheckpointStorage",
            "InMemoryCheckpointStorage",
        ),
    ),
    Row(
        "agent-framework-file",
        "agent-framework `FileCheckpointStorage`",
        "agent-framework",
        lambda: _simple(
            "agent-framework", file_storage, f"{_KNOWN}:file_storage", "FileCheckpointStorage"
        ),
    ),
    *(
        Row(
            f"checkpointkit-storage-{b}",
            f"checkpointkit `CheckpointkitCheckpointStorage` on `{b}`",
            "agent-framework",
            _checkpointkit_row("agent-framework", b),
            third_party=False,
        )
        for b in BACKENDS
    ),
)
"""Every row of ``docs/ecosystem-conformance.md``, in its order."""


def _import(module: str, name: str) -> Any:
    import importlib

    return getattr(importlib.import_module(module), name)

"""A checkpointkit storage adapter on SQLite, through aiosqlite.

Open it by URL once the package is installed (it registers the ``aiosqlite``
scheme in the ``checkpointkit.adapters`` entry-point group)::

    storage = checkpointkit.open_storage("aiosqlite:///var/lib/app/checkpoints.db")

or directly: ``SQLiteStorage("checkpoints.db", table="checkpoints")``.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import uuid
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, unquote

import aiosqlite
from checkpointkit import (
    Capabilities,
    ConfigurationError,
    GetResult,
    IfMatch,
    NotFound,
    PreconditionFailed,
    PutMode,
    StorageBase,
    StorageClosed,
    StorageUnavailable,
)
from checkpointkit.storage import ListPage

__all__ = ["SQLiteStorage"]

T = TypeVar("T")
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class SQLiteStorage(StorageBase):
    """Keys and bytes in one SQLite table ``(key TEXT PRIMARY KEY, data BLOB, version TEXT)``.

    Every operation is one SQL statement, so every operation is atomic, and
    SQLite's locking makes the file safe to share between processes.

    Args:
        path: the database file (created if missing).
        table: the table to use (created if missing).
        busy_timeout: seconds to wait for another process's write lock.

    Raises:
        ConfigurationError: the table name is not a plain identifier.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        conditional_put=True,
        conditional_delete=True,
        durable=True,
        shared=True,
        ttl=False,
        settles_cancelled_writes=True,  # _finish waits for a cancelled statement
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table: str = "checkpointkit",
        busy_timeout: float = 5.0,
    ) -> None:
        if not _TABLE.fullmatch(table):
            raise ConfigurationError(f"SQLite table name {table!r} must be a plain identifier")
        self.path = os.fspath(path)
        self.table = table
        self.busy_timeout = busy_timeout
        self._db: aiosqlite.Connection | None = None
        self._opening: asyncio.Task[aiosqlite.Connection] | None = None
        t = f'"{table}"'
        self._sql_of = {
            "schema": f"CREATE TABLE IF NOT EXISTS {t} "
            "(key TEXT PRIMARY KEY, data BLOB NOT NULL, version TEXT NOT NULL) WITHOUT ROWID",
            # A write returns one row per row it changed (RETURNING: SQLite 3.35 or newer).
            "overwrite": f"INSERT INTO {t} VALUES (?1, ?2, ?3) "
            "ON CONFLICT(key) DO UPDATE SET data = ?2, version = ?3 RETURNING 1",
            "create": f"INSERT INTO {t} VALUES (?1, ?2, ?3) "
            "ON CONFLICT(key) DO NOTHING RETURNING 1",
            "if-match": f"UPDATE {t} SET data = ?2, version = ?3 "
            "WHERE key = ?1 AND version = ?4 RETURNING 1",
            "get": f"SELECT data, version FROM {t} WHERE key = ?1",
            "delete": f"DELETE FROM {t} WHERE key = ?1 RETURNING 1",
            "delete-if-match": f"DELETE FROM {t} WHERE key = ?1 AND version = ?2 RETURNING 1",
            "version": f"SELECT version FROM {t} WHERE key = ?1",
            "list-from": f"SELECT key FROM {t} WHERE key >= ?1 ORDER BY key LIMIT ?2",
            "list-after": f"SELECT key FROM {t} WHERE key > ?1 ORDER BY key LIMIT ?2",
        }

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteStorage:
        """``aiosqlite:///absolute/path.db`` or ``aiosqlite://./relative.db``, with ``?table=NAME``.

        Raises:
            ConfigurationError: not an aiosqlite URL, no path, or an unknown parameter.
        """
        scheme, sep, rest = url.partition("://")
        if scheme.lower() != "aiosqlite" or not sep:
            raise ConfigurationError(f"not an aiosqlite URL: {url!r}")
        path, _, query = rest.partition("?")
        if not path:
            raise ConfigurationError(f"aiosqlite URL {url!r} names no database file")
        params: dict[str, Any] = {}
        for name, value in parse_qsl(query, keep_blank_values=True):
            if name != "table":
                raise ConfigurationError(f"unknown aiosqlite URL parameter {name!r}; known: table")
            params["table"] = value
        return cls(unquote(path), **{**params, **options})

    def __repr__(self) -> str:
        return f"SQLiteStorage({self.path!r}, table={self.table!r})"

    # -- one connection, opened on first use ---------------------------------------------
    async def _connection(self) -> aiosqlite.Connection:
        if self._db is None:
            if self._closed:  # an operation that began before aclose(): open nothing new
                raise StorageClosed(f"{self!r} is closed")
            opening = self._opening
            if opening is None or (opening.done() and not _opened(opening)):
                # the first call, or the opening before it failed: open again (an opening
                # kept once it failed would fail every call after, for good)
                opening = self._opening = asyncio.ensure_future(self._open())
            try:
                db = await _finish(opening)
            except aiosqlite.Error as exc:  # the database is locked past busy_timeout...
                raise StorageUnavailable(f"SQLite could not open {self.path!r}: {exc}") from exc
            if self._closed:  # aclose() ran meanwhile and closes this connection
                raise StorageClosed(f"{self!r} is closed")
            self._db = db
        return self._db

    async def _open(self) -> aiosqlite.Connection:
        db = await aiosqlite.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.busy_timeout
        try:
            while True:
                try:
                    # Switching to WAL can fail at once while other connections are busy,
                    # whatever the timeout: retry until busy_timeout. Once the database is
                    # set up, opening it only reads (no write lock to wait for).
                    await db.execute("PRAGMA journal_mode=WAL")
                    async with db.execute(
                        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (self.table,),
                    ) as cursor:
                        exists = await cursor.fetchone() is not None
                    if not exists:
                        await db.execute(self._sql_of["schema"])
                    break
                except aiosqlite.OperationalError as exc:
                    if "locked" not in str(exc) or loop.time() >= deadline:
                        raise
                    await asyncio.sleep(0.01)
            # From here on no busy wait inside SQLite (it cannot be cancelled): _sql retries.
            await db.execute("PRAGMA busy_timeout = 0")
        except BaseException:
            await db.close()
            raise
        return db

    async def _sql(self, name: str, *args: Any) -> list[Any]:
        """Run the statement ``name``; return its rows (a write's: one per row changed).

        While another connection holds the write lock, retry (a busy statement
        changed nothing) until ``busy_timeout``, sleeping in the event loop,
        where a cancellation lands at once.
        """
        db = await self._connection()

        async def run() -> list[Any]:
            # In one call to aiosqlite's thread: a SELECT read in two calls would let another
            # task's write on this connection run in between, and SQLite may then return a
            # row twice or not at all (found by the conformance suite's model group).
            return list(await db.execute_fetchall(self._sql_of[name], args))

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                return await _finish(asyncio.ensure_future(run()))
            except (aiosqlite.Error, ValueError) as exc:  # ValueError: connection closed
                if self._closed:  # aclose() closed the connection under this statement
                    raise StorageClosed(f"{self!r} was closed during {name}") from exc
                busy = isinstance(exc, aiosqlite.OperationalError) and "locked" in str(exc)
                if not busy or loop.time() >= deadline:
                    raise StorageUnavailable(
                        f"SQLite failed on {self.path!r} ({name}): {exc}"
                    ) from exc
            await asyncio.sleep(pause)
            if self._closed:
                raise StorageClosed(f"{self!r} was closed during {name}")
            pause = min(pause * 2, 0.02)

    # -- what StorageBase asks of an adapter -------------------------------------------
    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        version = uuid.uuid4().hex  # a new version on every write, also after a re-create
        if isinstance(mode, IfMatch):
            changed = await self._sql("if-match", key, data, version, mode.version)
            if not changed:
                raise PreconditionFailed(f"key {key!r} is missing or not at version {mode.version}")
        else:
            changed = await self._sql(mode, key, data, version)
            if not changed:
                raise PreconditionFailed(f"key {key!r} already exists (create-only put)")
        return version

    async def _get(self, key: str) -> GetResult:
        rows = await self._sql("get", key)
        if not rows:
            raise NotFound(f"key {key!r} not found")
        return GetResult(bytes(rows[0][0]), rows[0][1])

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if if_match is None:
            return bool(await self._sql("delete", key))
        if await self._sql("delete-if-match", key, if_match):
            return True
        rows = await self._sql("version", key)
        if rows:
            raise PreconditionFailed(f"key {key!r} is at version {rows[0][0]}, not {if_match}")
        return False

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after
        if after is not None and after >= prefix:
            rows = await self._sql("list-after", after, limit)
        else:
            rows = await self._sql("list-from", prefix, limit)
        keys = [row[0] for row in rows]
        inside = [k for k in keys if k.startswith(prefix)]  # keys of a prefix are contiguous
        more = len(inside) == limit
        return ListPage(inside, inside[-1] if more else None)

    async def _aclose(self) -> None:
        opening, self._opening = self._opening, None
        self._db = None
        if opening is None:
            return
        try:
            db = await _finish(opening)
        except Exception:  # it never opened: nothing to close
            return
        await _finish(asyncio.ensure_future(db.close()))
        # aiosqlite's close() is answered by its worker thread just before that thread
        # ends: wait for the end, so that nothing of the storage runs once aclose() returns
        thread = getattr(db, "_thread", None)  # aiosqlite 0.20+: no public join
        if isinstance(thread, threading.Thread):
            await asyncio.to_thread(thread.join)


def _opened(task: asyncio.Future[Any]) -> bool:
    """Whether ``task``, done, gave a connection (it was neither cancelled nor failed)."""
    return not task.cancelled() and task.exception() is None


async def _finish(task: asyncio.Future[T]) -> T:
    """Await ``task``; if the caller is cancelled, let the task finish first, then re-raise.

    aiosqlite runs each statement in its own thread: once queued, a statement
    runs even if its caller is cancelled. Waiting for it keeps the promise
    that a cancelled put has fully happened or not at all, and never lands
    later. Statements are short and never wait for a lock (``busy_timeout``
    is 0 once the connection is set up), so the wait is brief.
    """
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                continue  # cancelled again: keep waiting, the statement is running
            except BaseException:
                break
        if not task.cancelled():
            task.exception()  # retrieved: the caller's cancellation wins over it
        raise

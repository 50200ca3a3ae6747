"""An adapter on ``sqlite3`` over a one-thread executor, the way a backend author writes a
first SQL adapter, and the SQL mistakes such authors make, one per subclass.

:class:`SqliteKV` is correct: one table of (key, value, version), versions from a
counter row that only grows, every conditional write one statement in one
transaction, a listing by key range (``k > ? AND k >= ?`` with the prefix checked in
Python), and a cancelled call that waits for its statement (a few milliseconds)
before it re-raises, so nothing lands later. Two storages at one location share the
database file.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

from checkpointkit.errors import NotFound, PreconditionFailed, StorageUnavailable
from checkpointkit.storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v BLOB NOT NULL, ver TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY CHECK (id = 0), n INTEGER NOT NULL);
INSERT OR IGNORE INTO counter VALUES (0, 0);
"""


class SqliteKV(StorageBase):
    """Correct: see the module documentation."""

    capabilities: ClassVar[Capabilities] = Capabilities(settles_cancelled_writes=True)
    schema: ClassVar[str] = _SCHEMA

    def __init__(self, path: str) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="sqlite-kv")
        self._conn: sqlite3.Connection | None = None

    # -- plumbing -------------------------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=10, isolation_level=None, check_same_thread=False
            )
            conn.executescript(self.schema)
            self._conn = conn
        return self._conn

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        future = asyncio.get_running_loop().run_in_executor(self._pool, lambda: fn(self._db()))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await self._settle(future)
            raise

    async def _settle(self, future: asyncio.Future[Any]) -> None:
        """Wait for the statement of a cancelled call (it takes milliseconds)."""
        while not future.done():
            try:
                await asyncio.wait({future})
            except asyncio.CancelledError:
                continue
        if not future.cancelled():
            future.exception()  # the caller was cancelled: its statement's error is nobody's

    def _write(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    def _next_version(self, conn: sqlite3.Connection, key: str) -> int:
        conn.execute("UPDATE counter SET n = n + 1")
        return int(conn.execute("SELECT n FROM counter").fetchone()[0])

    def _version_matches(self) -> str:
        """The SQL test of a stored version against the caller's (a text parameter)."""
        return "ver = ?"

    async def _aclose(self) -> None:
        def close() -> None:
            if self._conn is not None:
                self._conn.close()

        job = asyncio.get_running_loop().run_in_executor(self._pool, close)
        try:
            await asyncio.shield(job)  # cancelled while queued, the job would never run
        finally:
            self._pool.shutdown(wait=True)  # also when cancelled: the thread ends here

    # -- the protocol ------------------------------------------------------------------------------
    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        def put(conn: sqlite3.Connection) -> str:
            return self._write(conn, lambda c: self._put_sql(c, key, data, mode))

        return await self._run(put)

    def _put_sql(self, conn: sqlite3.Connection, key: str, data: bytes, mode: PutMode) -> str:
        row = conn.execute("SELECT ver FROM kv WHERE k = ?", (key,)).fetchone()
        if mode == "create" and row is not None:
            raise PreconditionFailed(f"key {key!r} already exists")
        if isinstance(mode, IfMatch):
            test = self._version_matches()
            if (
                conn.execute(
                    f"SELECT 1 FROM kv WHERE k = ? AND {test}", (key, mode.version)
                ).fetchone()
                is None
            ):
                raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
        version = self._next_version(conn, key)
        conn.execute("INSERT OR REPLACE INTO kv (k, v, ver) VALUES (?, ?, ?)", (key, data, version))
        return self._stored_version(conn, key, version)

    def _stored_version(self, conn: sqlite3.Connection, key: str, version: int) -> str:
        return str(version)

    async def _get(self, key: str) -> GetResult:
        def get(conn: sqlite3.Connection) -> tuple[bytes, Any] | None:
            return conn.execute(  # type: ignore[no-any-return]
                f"SELECT v, {self._version_column()} FROM kv WHERE k = ?", (key,)
            ).fetchone()

        row = await self._run(get)
        if row is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(bytes(row[0]), str(row[1]))

    def _version_column(self) -> str:
        return "ver"

    async def _delete(self, key: str, if_match: str | None) -> bool:
        def delete(c: sqlite3.Connection) -> bool:
            if c.execute("SELECT 1 FROM kv WHERE k = ?", (key,)).fetchone() is None:
                return False
            if if_match is not None:
                test = self._version_matches()
                if not c.execute(
                    f"DELETE FROM kv WHERE k = ? AND {test}", (key, if_match)
                ).rowcount:
                    raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
                return True
            return c.execute("DELETE FROM kv WHERE k = ?", (key,)).rowcount > 0

        return await self._run(lambda conn: self._write(conn, delete))

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after

        def page(conn: sqlite3.Connection) -> ListPage:
            return self._page_sql(conn, prefix, after, cursor, limit)

        return await self._run(page)

    def _page_sql(
        self, conn: sqlite3.Connection, prefix: str, after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        rows = conn.execute(
            "SELECT k FROM kv WHERE k >= ? AND (? IS NULL OR k > ?) ORDER BY k LIMIT ?",
            (prefix, after, after, limit),
        ).fetchall()
        keys = [r[0] for r in rows]
        page = [k for k in keys if k.startswith(prefix)]
        return ListPage(page, page[-1] if len(page) == limit else None)


SQLITE_VARIABLES = 32766
"""SQLite's limit on the host parameters of one statement as SQLite builds it (since 3.32;
999 before): Debian's build raises it to 250,000, so `InListKV` sets it back."""


class InListKV(SqliteKV):
    """Correct: ``delete_many`` deletes with ``k IN (?, ?, ...)``, at most
    `SQLITE_VARIABLES` keys a statement, all in one transaction."""

    def _db(self) -> sqlite3.Connection:
        conn = super()._db()
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, SQLITE_VARIABLES)
        return conn

    def _statements(self, keys: list[str]) -> list[list[str]]:
        return [keys[i : i + SQLITE_VARIABLES] for i in range(0, len(keys), SQLITE_VARIABLES)]

    async def _delete_many(self, keys: list[str]) -> int:
        def delete(conn: sqlite3.Connection) -> int:
            existed = 0
            for part in self._statements(keys):
                marks = ", ".join("?" * len(part))
                existed += conn.execute(f"DELETE FROM kv WHERE k IN ({marks})", part).rowcount
            return existed

        return await self._run(lambda conn: self._write(conn, delete))


class InListOverTheLimit(InListKV):
    """Bug: ``delete_many`` puts every key in one ``IN (?, ?, ...)`` list: above SQLite's
    32,766 host parameters the statement fails (``too many SQL variables``)."""

    def _statements(self, keys: list[str]) -> list[list[str]]:
        return [keys]


class LikePrefix(SqliteKV):
    """Bug: the prefix is matched with ``LIKE prefix || '%'``: ``_`` and ``%`` in a prefix are
    wildcards, and LIKE ignores ASCII case."""

    def _page_sql(
        self, conn: sqlite3.Connection, prefix: str, after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        rows = conn.execute(
            "SELECT k FROM kv WHERE k LIKE ? || '%' AND (? IS NULL OR k > ?) ORDER BY k LIMIT ?",
            (prefix, after, after, limit),
        ).fetchall()
        page = [r[0] for r in rows]
        return ListPage(page, page[-1] if len(page) == limit else None)


class NocaseKeys(SqliteKV):
    """Bug: the key column is ``COLLATE NOCASE`` (for "friendlier" lookups): 'A/b' is 'a/b'."""

    schema: ClassVar[str] = _SCHEMA.replace(
        "k TEXT PRIMARY KEY", "k TEXT PRIMARY KEY COLLATE NOCASE"
    )


class RowidVersion(SqliteKV):
    """Bug: the version is the row's rowid: a re-created key gets the rowid the deleted row
    had when it was the last one, so a version comes back."""

    schema: ClassVar[str] = _SCHEMA.replace(
        "k TEXT PRIMARY KEY, v BLOB NOT NULL, ver TEXT NOT NULL",
        "k TEXT UNIQUE, v BLOB NOT NULL, ver TEXT NOT NULL",
    )

    def _stored_version(self, conn: sqlite3.Connection, key: str, version: int) -> str:
        return str(conn.execute("SELECT rowid FROM kv WHERE k = ?", (key,)).fetchone()[0])

    def _version_column(self) -> str:
        return "rowid"

    def _version_matches(self) -> str:
        return "rowid = ?"


class CastsVersion(SqliteKV):
    """Bug: versions are compared as integers (``ver = CAST(? AS INTEGER)``): '+7', ' 7' and
    '07' all match version 7."""

    def _version_matches(self) -> str:
        return "ver = CAST(? AS INTEGER)"


class CreateSelectsThenInserts(SqliteKV):
    """Bug: create-only is a SELECT in one call and an INSERT OR REPLACE in another."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if mode == "create":
            exists = await self._run(
                lambda c: c.execute("SELECT 1 FROM kv WHERE k = ?", (key,)).fetchone() is not None
            )
            if exists:
                raise PreconditionFailed(f"key {key!r} already exists")
            mode = "overwrite"
        return await super()._put(key, data, mode)


class WalSqliteKV(SqliteKV):
    """Correct: :class:`SqliteKV` with the database in WAL mode (readers never wait for a
    writer: they read the last commit)."""

    def _db(self) -> sqlite3.Connection:
        fresh = self._conn is None
        conn = super()._db()
        if fresh:
            conn.execute("PRAGMA journal_mode=WAL")
        return conn


class OverwriteDeletesThenInserts(WalSqliteKV):
    """Bug: an overwrite is a DELETE and then an INSERT, each committed on its own ("a
    replace is a delete and an insert anyway"): another client's read between the two finds
    the key missing."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if mode != "overwrite":
            return await super()._put(key, data, mode)

        def replace(conn: sqlite3.Connection) -> str:
            conn.execute("DELETE FROM kv WHERE k = ?", (key,))
            return self._write(conn, lambda c: self._put_sql(c, key, data, mode))

        return await self._run(replace)


class ListsInOneSnapshot(WalSqliteKV):
    """Bug: a listing reads all its pages in one read transaction on a connection of its own
    (one snapshot for the whole listing), which it ends after its last page: a listing
    stopped by its limit, or left unfinished, never ends it, and every later listing reads
    that old snapshot."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._reader: sqlite3.Connection | None = None

    def _page_sql(
        self, conn: sqlite3.Connection, prefix: str, after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        if self._reader is None:
            self._reader = sqlite3.connect(
                self.path, timeout=10, isolation_level=None, check_same_thread=False
            )
        reader = self._reader
        if not reader.in_transaction:
            reader.execute("BEGIN")
            reader.execute("SELECT 1 FROM kv LIMIT 1").fetchall()  # the snapshot starts here
        page = super()._page_sql(reader, prefix, after, cursor, limit)
        if page.cursor is None:
            reader.execute("COMMIT")
        return page

    async def _aclose(self) -> None:
        reader = self._reader
        if reader is not None:
            await asyncio.get_running_loop().run_in_executor(self._pool, reader.close)
        await super()._aclose()


class GetReadsTwice(SqliteKV):
    """Bug: get reads the bytes and then the version in two statements, each in a
    transaction of its own: another client's write between them pairs one write's bytes
    with the next one's version (an if-match on that version then overwrites bytes that the
    caller never read)."""

    async def _get(self, key: str) -> GetResult:
        data = await self._run(
            lambda c: c.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        )
        version = await self._run(
            lambda c: c.execute("SELECT ver FROM kv WHERE k = ?", (key,)).fetchone()
        )
        if data is None or version is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(bytes(data[0]), str(version[0]))


class LandsAfterCancel(SqliteKV):
    """Bug: a cancelled call re-raises at once; its statement still runs in the executor
    and commits later (plain ``run_in_executor``), though it declares
    ``settles_cancelled_writes``."""

    async def _settle(self, future: asyncio.Future[Any]) -> None:
        return


class SlowSqliteKV(SqliteKV):
    """Correct twin of :class:`SlowLandsAfterCancel`: every statement takes 20 ms (a busy
    disk), and a cancelled call still waits for its statement before it re-raises."""

    def _db(self) -> sqlite3.Connection:
        threading.Event().wait(0.02)
        return super()._db()


class SlowLandsAfterCancel(SlowSqliteKV):
    """Bug: as :class:`LandsAfterCancel`, on a disk where a statement takes 20 ms."""

    async def _settle(self, future: asyncio.Future[Any]) -> None:
        return


class LeaksConnection(SqliteKV):
    """Bug: aclose() stops the executor but never closes the connection (a file descriptor)."""

    async def _aclose(self) -> None:
        kept.append(self._conn)
        await asyncio.to_thread(self._pool.shutdown, True)


kept: list[Any] = []
"""Where :class:`LeaksConnection` keeps its connections (referenced, so nothing warns)."""


def close_kept() -> None:
    """Close what :class:`LeaksConnection` kept, once a test has seen the leak."""
    while kept:
        conn = kept.pop()
        if conn is not None:
            conn.close()


class LeavesCheckpointer(SqliteKV):
    """Bug: the first write starts a background checkpointer thread (``PRAGMA
    wal_checkpoint`` every 50 ms) that aclose() never stops."""

    def _db(self) -> sqlite3.Connection:
        fresh = self._conn is None
        conn = super()._db()
        if fresh:
            stop = threading.Event()
            thread = threading.Thread(
                target=_checkpoint_loop, args=(self.path, stop), name="sqlite-kv-checkpointer"
            )
            _CHECKPOINTERS.append((thread, stop))
            thread.start()
        return conn


_CHECKPOINTERS: list[tuple[threading.Thread, threading.Event]] = []


def _checkpoint_loop(path: str, stop: threading.Event) -> None:
    while not stop.wait(0.05):
        try:
            conn = sqlite3.connect(path, timeout=1)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                conn.close()
        except sqlite3.Error:
            pass


def stop_checkpointers() -> None:
    """Stop the threads :class:`LeavesCheckpointer` left running, once a test has seen them."""
    while _CHECKPOINTERS:
        thread, stop = _CHECKPOINTERS.pop()
        stop.set()
        thread.join()


def sqlite_target(cls: type[SqliteKV] = SqliteKV) -> Any:
    """A conformance target of ``cls``: one database file per location, in a temporary folder."""
    from checkpointkit.conformance import Target, new_location

    base = tempfile.mkdtemp(prefix="ckc-sqlite-kv-")

    async def factory(*, location: str | None = None) -> AsyncIterator[SqliteKV]:
        path = os.path.join(base, f"{location or new_location()}.db")
        async with cls(path) as storage:
            yield storage

    def cleanup() -> None:
        import shutil

        shutil.rmtree(base, ignore_errors=True)

    return Target(factory, name=cls.__name__, cleanup=cleanup, settle_window=0.3)


class OverwriteUpdatesThenInserts(SqliteKV):
    """Bug: an overwrite as an UPDATE, then, when it updated nothing, an INSERT, each its
    own transaction (the idiom before upserts): two clients overwriting a missing key both
    update nothing and both insert; the second insert fails on the first's row
    (``UNIQUE constraint failed``), reported as StorageUnavailable. Conditional puts are
    one transaction, and right."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if mode != "overwrite":
            return await super()._put(key, data, mode)

        def update(conn: sqlite3.Connection) -> str | None:
            version = self._next_version(conn, key)
            done = conn.execute("UPDATE kv SET v = ?, ver = ? WHERE k = ?", (data, version, key))
            return str(version) if done.rowcount else None

        def insert(conn: sqlite3.Connection) -> str:
            version = self._next_version(conn, key)
            conn.execute("INSERT INTO kv (k, v, ver) VALUES (?, ?, ?)", (key, data, version))
            return str(version)

        updated = await self._run(lambda c: self._write(c, update))
        if updated is not None:
            return updated
        try:
            return await self._run(lambda c: self._write(c, insert))
        except sqlite3.IntegrityError as exc:
            raise StorageUnavailable(f"put of {key!r} failed: {exc}") from exc


class ListBoundsByTheNextCharacter(SqliteKV):
    """Bug: a listing bounded above by the prefix with its last character incremented
    (``k >= prefix AND k < prefix[:-1] + chr(ord(prefix[-1]) + 1)``): after U+D7FF that
    is a lone surrogate, which no encoder takes, and after U+10FFFF there is no character:
    such a prefix's listing raises instead of listing."""

    def _page_sql(
        self, conn: sqlite3.Connection, prefix: str, after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        if not prefix:
            return super()._page_sql(conn, prefix, after, cursor, limit)
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        rows = conn.execute(
            "SELECT k FROM kv WHERE k >= ? AND k < ? AND (? IS NULL OR k > ?) ORDER BY k LIMIT ?",
            (prefix, upper, after, after, limit),
        ).fetchall()
        keys = [r[0] for r in rows]
        return ListPage(keys, keys[-1] if len(keys) == limit else None)

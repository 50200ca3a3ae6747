"""The SQLite adapter: every key in one database file, with group commit.

Layout (see ``docs/adapters/sqlite.md``): one table ``checkpointkit_kv (key
TEXT NOT NULL UNIQUE, version INTEGER, data BLOB)``. Its unique index keeps the
keys in one B-tree in ascending (UTF-8 byte, hence code point) order, and a
listing page is one range scan of that index alone: O(log N + limit). The rows
themselves sit in a rowid table, where SQLite reads a large value two to four
times faster than in a ``WITHOUT ROWID`` table and writes it one and a half to
three times faster (``benchmarks/sqlite_layout.py``). A second table
``checkpointkit_meta`` holds the version counter.

Writes go through one writer thread per storage object. It takes every put
and delete queued while the previous commit was running, applies each with
its own condition (create, if-match, delete if-match) inside one transaction,
commits once (one ``fsync`` of the write-ahead log for the whole batch, with
``synchronous=FULL``), and then answers each caller with its own result. A
failed condition fails only its own operation: conditions are checked by the
statement itself (``ON CONFLICT DO NOTHING``, ``WHERE version = ?``), so
nothing has to be rolled back.

Reads run on their own connections and never wait for the writer (in WAL mode
a reader sees the last commit). A read of a small value, or a listing page, is
done right in the event loop's thread on that thread's own connection: it is
a B-tree lookup in cached pages, about ten times cheaper than a trip to a
thread and back. A value larger than `INLINE_BYTES`, or a read that
would have to wait for a lock (``SQLITE_BUSY`` during another process's log
recovery), goes to a small thread pool instead.

Versions come from a counter stored in the database and raised in the same
transaction as the write, so a version never comes back: not after an
overwrite with the same bytes, not after a delete and a re-create, not after
a restart, and not across processes sharing the file (each transaction reads
the counter under SQLite's write lock).
"""

from __future__ import annotations

import asyncio
import collections
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Final, TypeVar
from urllib.parse import parse_qsl, quote, unquote

from ..errors import (
    ConfigurationError,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageUnavailable,
)
from ..storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase
from ..versions import decimal_version

__all__ = ["SQLiteStorage"]

T = TypeVar("T")

TABLE: Final = "checkpointkit_kv"
META: Final = "checkpointkit_meta"

MAX_BATCH_OPS: Final = 2000
"""Most operations committed in one transaction."""

MAX_BATCH_BYTES: Final = 32 << 20
"""Most bytes of data committed in one transaction (more waits for the next one)."""

INLINE_BYTES: Final = 256 << 10
"""Largest value read in the event loop's thread; larger ones are read in a worker thread."""

INLINE_BUSY_MS: Final = 20
"""Most milliseconds an inline read waits for a lock before it goes to a worker thread."""

CHECKPOINT_BYTES: Final = 4 << 20
"""Log bytes after which the writer copies the log into the database file.

Small enough that the log soon starts over at its beginning: a commit that
overwrites blocks the log file already has is synced about twice as fast as
one that makes the file longer (``benchmarks/sqlite_layout.py``)."""

RESTART_WAIT: Final = 0.2
"""Most seconds the writer waits for other connections when it starts the log over.

A checkpoint that copies the log into the database cannot start it over while
another process's connection is still reading or writing the log's end; with
writers in several processes that is almost always so, and a passive
checkpoint never lets the log start over (4 writer processes grew it past 300
MiB in 15 s: ``benchmarks/sqlite_wal_growth.py``). The writer therefore asks for
a ``RESTART`` checkpoint, which waits up to this long for them (other writers
wait for it meanwhile, as for any commit), and tries again 2 MiB later if they
did not let go in time."""

LOG_LIMIT: Final = 2 * CHECKPOINT_BYTES
"""Bytes the log file is cut back to when it starts over (``journal_size_limit``)."""

PAGE: Final = 4096
"""SQLite's page size: the log holds whole pages (a 1 KiB value's commit adds three to five)."""

_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} "
    "(key TEXT NOT NULL UNIQUE, version INTEGER NOT NULL, data BLOB NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {META} "
    "(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID",
    f"INSERT OR IGNORE INTO {META} VALUES ('version', 0)",
)
_OVERWRITE = (
    f"INSERT INTO {TABLE} (key, version, data) VALUES (?1, ?2, ?3) "
    "ON CONFLICT (key) DO UPDATE SET version = excluded.version, data = excluded.data"
)
_CREATE = f"INSERT INTO {TABLE} (key, version, data) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING"
_IF_MATCH = f"UPDATE {TABLE} SET version = ?2, data = ?3 WHERE key = ?1 AND version = ?4"
_DELETE = f"DELETE FROM {TABLE} WHERE key = ?1"
_DELETE_IF = f"DELETE FROM {TABLE} WHERE key = ?1 AND version = ?2"
_VERSION = f"SELECT version FROM {TABLE} WHERE key = ?1"
_GET = f"SELECT version, data FROM {TABLE} WHERE key = ?1"
_GET_SMALL = (
    f"SELECT version, length(data), CASE WHEN length(data) <= {INLINE_BYTES} THEN data END "
    f"FROM {TABLE} WHERE key = ?1"
)
_LIST_FROM = f"SELECT key FROM {TABLE} WHERE key >= ?1 ORDER BY key LIMIT ?2"
_LIST_AFTER = f"SELECT key FROM {TABLE} WHERE key > ?1 ORDER BY key LIMIT ?2"
_COUNTER = f"SELECT value FROM {META} WHERE name = 'version'"
_SET_COUNTER = f"UPDATE {META} SET value = ?1 WHERE name = 'version'"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_PARAMS = {
    "fsync": bool,
    "create": bool,
    "busy_timeout": float,
    "threads": int,
    "read_only": bool,
}

# Operation states, changed only under the storage's lock.
_QUEUED, _CANCELLED, _TAKEN, _DONE = range(4)


class _Op:
    """One queued write: what to do, and how to answer its caller."""

    __slots__ = (
        "cond",
        "data",
        "error",
        "future",
        "key",
        "kind",
        "loop",
        "result",
        "settled",
        "state",
    )

    def __init__(
        self,
        kind: str,
        key: Any,
        data: bytes,
        cond: str | None,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
    ) -> None:
        self.kind = kind  # "overwrite", "create", "if-match", "delete", "delete-many"
        self.key = key  # a key, or a list of keys for "delete-many"
        self.data = data
        self.cond = cond  # the if-match version of a put or delete
        self.loop = loop
        self.future = future
        self.state = _QUEUED
        self.result: Any = None
        self.error: BaseException | None = None
        self.settled: asyncio.Future[None] | None = None  # set by a cancelled caller


class SQLiteStorage(StorageBase):
    """Keys in one SQLite database file, durable, shared safely by many processes.

    The database is in WAL mode. With ``fsync=True`` (the default) every
    commit syncs the log (``synchronous=FULL``): a put or delete that has
    returned survives a power loss, like the file adapter's. Concurrent
    writes of this object share one commit (group commit); other processes
    may write the same file, each waiting at most ``busy_timeout`` for
    SQLite's write lock.

    Args:
        path: the database file (created if missing, with its parent
            directories if ``create``).
        fsync: sync the log on every commit. ``False`` (``synchronous=NORMAL``)
            survives a crash of the process but may lose the last commits on
            a power loss.
        create: create the database file and its parent directories if
            missing, and checkpointkit's tables in an existing database
            that lacks them. With ``False`` nothing is created or changed
            but the keys: a missing file is an error, and so is a file that
            is not a checkpointkit store (an empty file, another
            application's database); its journal mode is left as it is.
        read_only: open every connection read-only (SQLite's ``mode=ro``;
            implies ``create=False``): the file is never written, and a write
            fails with ``StorageUnavailable``. A database on a read-only file
            system, or in a directory this process cannot write (where SQLite
            cannot make the ``-shm`` file), is opened ``immutable=1``, which
            SQLite reads without any lock: only safe while nobody writes it.
        busy_timeout: seconds to wait for another process's write lock before
            the operation fails with ``StorageUnavailable``.
        threads: reader threads (each with its own connection).

    Raises:
        ConfigurationError: the path is a directory, is not a SQLite
            database, cannot be created, or is missing and ``create`` is
            False; or is not a checkpointkit store and ``create`` is False;
            or an option is out of range.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        conditional_put=True,
        conditional_delete=True,
        durable=True,
        shared=True,
        ttl=False,
        settles_cancelled_writes=True,
        indexed_list=True,
        local=True,
    )

    cancel_grace: ClassVar[float] = 30.0
    """Seconds a cancelled write that is already being committed is waited for."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = True,
        create: bool = True,
        busy_timeout: float = 5.0,
        threads: int = 2,
        read_only: bool = False,
    ) -> None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ConfigurationError(f"threads must be a positive int, not {threads!r}")
        if (
            not isinstance(busy_timeout, int | float)
            or isinstance(busy_timeout, bool)
            or not 0 <= busy_timeout <= 3600
        ):
            raise ConfigurationError(
                f"busy_timeout must be a number of seconds from 0 to 3600, not {busy_timeout!r}"
            )
        raw = os.fspath(path)
        if not isinstance(raw, str) or not raw or raw == ":memory:" or raw.startswith("file:"):
            raise ConfigurationError(
                f"SQLite storage path {raw!r} must name a database file "
                "(for storage in memory, use memory://)"
            )
        self.path = os.path.abspath(os.path.expanduser(raw))
        self.fsync = bool(fsync)
        self.busy_timeout = float(busy_timeout)
        self.threads = threads
        self.read_only = bool(read_only)
        self._uri = _prepare(
            self.path,
            create=bool(create) and not self.read_only,
            read_only=self.read_only,
            busy_timeout=self.busy_timeout,
        )

        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: collections.deque[_Op] = collections.deque()
        self._stopping = False
        self._writer: threading.Thread | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._pid = os.getpid()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteStorage:
        """Open ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or a plain path.

        URLs read as SQLAlchemy reads them: after ``sqlite:///`` comes the
        path, so ``sqlite:///app.db`` is ``app.db`` in the working directory
        and ``sqlite:////var/lib/app.db`` (four slashes) is ``/var/lib/app.db``.
        Query parameters ``fsync`` and ``create`` (true/false),
        ``busy_timeout`` (seconds) and ``threads`` (an int) set the options;
        keyword ``options`` override them.

        Raises:
            ConfigurationError: not a sqlite URL, no path, a host
                (``sqlite://app.db``), a relative path that exists only as an
                absolute one (the earlier, non-SQLAlchemy reading), or an
                unknown or malformed parameter.
        """
        unknown = set(options) - set(_PARAMS)
        if unknown:
            raise ConfigurationError(
                f"unknown sqlite storage option(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(_PARAMS))}"
            )
        if "://" not in url:
            return cls(url, **options)
        scheme, sep, rest = url.partition("://")
        if scheme.lower() != "sqlite" or not sep:
            raise ConfigurationError(f"not a sqlite URL: {url!r}")
        rest, _, query = rest.partition("?")
        path = _url_path(url, unquote(rest))
        params: dict[str, Any] = {}
        for name, value in parse_qsl(query, keep_blank_values=True):
            kind = _PARAMS.get(name)
            if kind is None:
                raise ConfigurationError(
                    f"unknown sqlite URL parameter {name!r}; known: {', '.join(sorted(_PARAMS))}"
                )
            params[name] = _parse(url, name, value, kind)
        params.update(options)
        return cls(path, **params)

    def __repr__(self) -> str:
        return f"SQLiteStorage(path={self.path!r}, fsync={self.fsync})"

    # -- threads and connections ----------------------------------------------------------
    def _connect(self, *, writer: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._uri,
            uri=True,
            timeout=self.busy_timeout,
            isolation_level=None,  # transactions are explicit
            check_same_thread=False,
            cached_statements=32,
        )
        try:
            if writer:
                conn.execute(f"PRAGMA synchronous={'FULL' if self.fsync else 'NORMAL'}")
                conn.execute("PRAGMA wal_autocheckpoint=0")  # the writer checkpoints itself
                conn.execute(f"PRAGMA journal_size_limit={LOG_LIMIT}")
                if sys.platform == "darwin":  # fsync does not reach the platter there
                    conn.execute("PRAGMA fullfsync=1")
                    conn.execute("PRAGMA checkpoint_fullfsync=1")
            else:
                conn.execute("PRAGMA query_only=1")
        except BaseException:
            conn.close()
            raise
        with self._lock:
            self._connections.append(conn)
        return conn

    def _check_fork(self) -> None:
        if self._pid != os.getpid():  # forked: the threads and connections are the parent's
            with self._lock:
                if self._pid != os.getpid():
                    self._pid = os.getpid()
                    self._lock = threading.Lock()
                    self._wake = threading.Condition(self._lock)
                    self._queue = collections.deque()
                    self._writer = None
                    self._readers = None
                    self._local = threading.local()
                    self._connections = []

    def _reader_pool(self) -> ThreadPoolExecutor:
        pool = self._readers
        if pool is None:
            self._check_fork()
            with self._lock:
                if self._readers is None:
                    self._readers = ThreadPoolExecutor(
                        self.threads, thread_name_prefix="checkpointkit-sqlite-read"
                    )
                pool = self._readers
        return pool

    async def _read(self, what: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._reader_pool(), self._read_sync, fn)
        except sqlite3.Error as exc:
            raise self._unavailable(f"read {what}", exc) from exc

    def _read_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect(writer=False)
        return fn(conn)

    def _read_inline(self, what: str, fn: Callable[[sqlite3.Connection], T]) -> T | None:
        """Run ``fn`` in this (the event loop's) thread; None if it would wait for a lock."""
        conn: sqlite3.Connection | None = getattr(self._local, "inline", None)
        if conn is None:
            self._check_fork()
            try:
                conn = self._connect(writer=False)
                conn.execute(f"PRAGMA busy_timeout={INLINE_BUSY_MS}")
            except sqlite3.Error as exc:
                raise self._unavailable(f"read {what}", exc) from exc
            self._local.inline = conn
        try:
            return fn(conn)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED"):
                return None  # the caller reads in a worker thread, which may wait
            raise self._unavailable(f"read {what}", exc) from exc
        except sqlite3.Error as exc:
            raise self._unavailable(f"read {what}", exc) from exc

    def _unavailable(self, what: str, exc: BaseException) -> StorageUnavailable:
        code = getattr(exc, "sqlite_errorname", None)
        detail = f"{exc} ({code})" if code else str(exc)
        if code in ("SQLITE_BUSY", "SQLITE_LOCKED") or "locked" in str(exc):
            detail += (
                f": another connection held the database's write lock for more than "
                f"busy_timeout={self.busy_timeout:g} s"
            )
        elif code in ("SQLITE_READONLY", "SQLITE_CANTOPEN") and _read_only_fs(self.path):
            detail += ": the database is on a read-only file system"
        error = StorageUnavailable(f"SQLite storage {self.path!r} could not {what}: {detail}")
        error.__cause__ = exc  # also when it is raised later, for every caller of a batch
        return error

    # -- the protocol -------------------------------------------------------------------------
    def _may_match(self, version: str) -> bool:
        # Refused here, it never reaches the shared transaction of the group commit.
        return decimal_version(version) is not None

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if isinstance(mode, IfMatch):
            return str(await self._write("if-match", key, data, mode.version))
        return str(await self._write(mode, key, data, None))

    async def _get(self, key: str) -> GetResult:
        what = f"key {key!r}"
        found = self._read_inline(what, lambda c: (c.execute(_GET_SMALL, (key,)).fetchone(),))
        if found is not None:  # None: a lock was in the way
            small = found[0]
            if small is None:
                raise NotFound(f"key {key!r} not found")
            if small[2] is not None:
                return GetResult(small[2], str(small[0]))
        row = await self._read(what, lambda c: c.execute(_GET, (key,)).fetchone())
        if row is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(row[1], str(row[0]))

    async def check_integrity(self, *, limit: int = 100) -> list[str]:
        """The problems ``PRAGMA integrity_check`` finds in the database file, [] if none.

        It reads every page (seconds per GiB): B-trees, the key index against
        the rows (an index entry damaged in place makes its key read as
        missing, with no error on the read), free pages. A problem that stops
        the check itself (a page that is not a page) is one line too. See
        `checkpointkit.storage.IntegrityChecked`.

        Args:
            limit: the most problems to list.

        Raises:
            StorageClosed: the storage is closed.
            StorageUnavailable: the database could not be opened at all.
        """
        self._check_open()

        def check(conn: sqlite3.Connection) -> list[str]:
            try:
                rows = conn.execute(f"PRAGMA integrity_check({int(limit)})").fetchall()
            except sqlite3.DatabaseError as exc:
                code = getattr(exc, "sqlite_errorname", "") or "error"
                return [f"the check itself stopped: {exc} ({code})"]
            lines = [str(row[0]) for row in rows]
            return [] if lines == ["ok"] else lines

        return await self._read("check its integrity", check)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        return bool(await self._write("delete", key, b"", if_match))

    async def _delete_many(self, keys: list[str]) -> int:
        return int(await self._write("delete-many", keys, b"", None))

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after
        if after is not None and after >= prefix:
            sql, bound = _LIST_AFTER, after
        else:
            sql, bound = _LIST_FROM, prefix

        def page(conn: sqlite3.Connection) -> list[str]:
            return [row[0] for row in conn.execute(sql, (bound, limit))]

        what = f"the keys under prefix {prefix!r}"
        keys = self._read_inline(what, page)
        if keys is None:
            keys = await self._read(what, page)
        inside = [k for k in keys if k.startswith(prefix)]  # a prefix's keys are contiguous
        more = len(keys) == limit and len(inside) == limit
        return ListPage(inside, inside[-1] if more else None)

    async def _aclose(self) -> None:
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
            writer, readers = self._writer, self._readers
            self._writer = self._readers = None
        if writer is None and readers is None and not self._connections:
            return

        def finish() -> None:
            if writer is not None:
                writer.join()  # every queued write is answered first
            if readers is not None:
                readers.shutdown(wait=True)
            with self._lock:
                connections, self._connections = self._connections, []
            for conn in connections:
                conn.close()

        loop = asyncio.get_running_loop()
        # Shielded: if aclose is cancelled, the shutdown still completes in the background.
        await asyncio.shield(loop.run_in_executor(None, finish))

    # -- writes: the caller's side --------------------------------------------------------
    async def _write(self, kind: str, key: Any, data: bytes, cond: str | None) -> Any:
        loop = asyncio.get_running_loop()
        op = _Op(kind, key, data, cond, loop, loop.create_future())
        self._check_fork()
        with self._lock:
            if self._stopping:
                self._check_open()
            self._queue.append(op)
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_loop, name="checkpointkit-sqlite-write", daemon=True
                )
                self._writer.start()
            else:
                self._wake.notify()
        try:
            return await op.future
        except asyncio.CancelledError:
            with self._lock:
                if op.state == _QUEUED:
                    op.state = _CANCELLED  # the writer drops it: it never lands
                    raise
                if op.state == _DONE:
                    raise  # committed or failed already: nothing can land later
                op.settled = loop.create_future()  # it is in the committing batch: wait
            await _wait_settled(op.settled, self.cancel_grace)
            raise

    # -- writes: the writer thread ------------------------------------------------------------
    def _write_loop(self) -> None:
        conn: sqlite3.Connection | None = None
        logged = 0  # bytes written to the log since the last checkpoint
        try:
            while True:
                with self._lock:
                    while not self._queue and not self._stopping:
                        self._wake.wait()
                    if not self._queue:
                        return  # stopping, and every write was answered
                    batch = self._take()
                if conn is None:
                    try:
                        conn = self._connect(writer=True)
                    except sqlite3.Error as exc:
                        self._fail(batch, self._unavailable("open the database", exc))
                        continue
                try:
                    logged += self._commit(conn, batch)
                except Exception as exc:  # a bug must not leave callers waiting forever
                    _rollback(conn)
                    error = OutcomeUnknown(
                        f"SQLite storage {self.path!r} failed while committing: {exc!r}"
                    )
                    error.__cause__ = exc
                    self._fail([op for op in batch if op.state != _DONE], error, taken=True)
                if logged >= CHECKPOINT_BYTES:
                    logged = 0 if self._restart_log(conn) else CHECKPOINT_BYTES // 2
        finally:
            if conn is not None:
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass

    def _restart_log(self, conn: sqlite3.Connection) -> bool:
        """Copy the log into the database and start it over; whether that was done."""
        try:
            conn.execute(f"PRAGMA busy_timeout={int(RESTART_WAIT * 1000)}")
            try:
                busy, _, _ = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            finally:
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        except sqlite3.Error:
            return False  # another process is checkpointing: the next try catches up
        return not busy

    def _take(self) -> list[_Op]:
        """Pop the next batch (holding the lock); cancelled operations are dropped."""
        batch: list[_Op] = []
        size = 0
        queue = self._queue
        while queue and len(batch) < MAX_BATCH_OPS:
            op = queue[0]
            if op.state == _CANCELLED:
                queue.popleft()
                continue
            if batch and size + len(op.data) > MAX_BATCH_BYTES:
                break
            queue.popleft()
            batch.append(op)
            size += len(op.data)
        return batch

    def _commit(self, conn: sqlite3.Connection, batch: list[_Op]) -> int:
        """Apply ``batch`` in one transaction and answer every operation; return bytes written."""
        try:
            conn.execute("BEGIN IMMEDIATE")  # takes the write lock (waits busy_timeout)
        except sqlite3.Error as exc:
            self._fail(batch, self._unavailable("begin a write", exc))
            return 0
        with self._lock:  # from here on, a cancelled caller waits for the outcome
            live = [op for op in batch if op.state != _CANCELLED]
            for op in live:
                op.state = _TAKEN
        written = 0
        try:
            (counter,) = conn.execute(_COUNTER).fetchone()
            start = counter
            for op in live:
                try:
                    counter = self._apply(conn, op, counter)
                except sqlite3.Error as exc:
                    if not conn.in_transaction:
                        raise  # the whole transaction was rolled back
                    op.error = self._unavailable(f"write key {op.key!r}", exc)
                else:
                    written += _logged(op.data)
            if counter != start:
                conn.execute(_SET_COUNTER, (counter,))
        except sqlite3.Error as exc:
            _rollback(conn)
            self._fail(live, self._unavailable("write", exc), taken=True)
            return 0
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            error = OutcomeUnknown(
                f"{self._unavailable('commit', exc)}; the writes may or may not have landed"
            )
            error.__cause__ = exc
            self._fail(live, error, taken=True)
            return 0
        self._answer(live)
        return written + 3 * PAGE  # the counter's page, page 1 and a parent of the leaves

    def _apply(self, conn: sqlite3.Connection, op: _Op, counter: int) -> int:
        """Run one operation's statement; set its result or error; return the counter."""
        kind = op.kind
        if kind == "delete-many":
            op.result = conn.executemany(_DELETE, [(k,) for k in op.key]).rowcount
            return counter
        if kind == "delete":
            if op.cond is None:
                op.result = conn.execute(_DELETE, (op.key,)).rowcount > 0
                return counter
            version = _as_version(op.cond)
            if version is not None and conn.execute(_DELETE_IF, (op.key, version)).rowcount:
                op.result = True
                return counter
            row = conn.execute(_VERSION, (op.key,)).fetchone()
            if row is None:
                op.result = False
            else:
                op.error = PreconditionFailed(
                    f"key {op.key!r} is at version {row[0]}, not {op.cond} (if-match delete)"
                )
            return counter
        counter += 1
        if kind == "overwrite":
            conn.execute(_OVERWRITE, (op.key, counter, op.data))
        elif kind == "create":
            if not conn.execute(_CREATE, (op.key, counter, op.data)).rowcount:
                op.error = PreconditionFailed(f"key {op.key!r} already exists (create-only put)")
                return counter - 1
        else:
            version = _as_version(op.cond)
            if (
                version is None
                or not conn.execute(_IF_MATCH, (op.key, counter, op.data, version)).rowcount
            ):
                row = conn.execute(_VERSION, (op.key,)).fetchone()
                op.error = PreconditionFailed(
                    f"key {op.key!r} does not exist (if-match {op.cond})"
                    if row is None
                    else f"key {op.key!r} is at version {row[0]}, not {op.cond} (if-match put)"
                )
                return counter - 1
        op.result = counter
        return counter

    def _fail(self, ops: list[_Op], error: BaseException, *, taken: bool = False) -> None:
        for op in ops:
            op.error = error
            op.result = None
        self._answer(ops if taken else [op for op in ops if op.state != _CANCELLED])

    def _answer(self, ops: list[_Op]) -> None:
        """Mark ``ops`` done and resolve their futures, one loop callback per event loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Op]] = {}
        with self._lock:
            for op in ops:
                op.state = _DONE
                by_loop.setdefault(op.loop, []).append(op)
        for loop, group in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, group)
            except RuntimeError:
                pass  # that event loop is closed: nobody is waiting


def _logged(data: bytes) -> int:
    """About how many bytes of log a write of ``data`` adds: its leaves and overflow pages.

    The row's leaf and the key's index leaf, and an overflow page for every
    4 KiB of a value that does not fit in its leaf. Counting a little high only
    makes the writer checkpoint a little early.
    """
    return (2 + len(data) // (PAGE - 4)) * PAGE


def _resolve(ops: list[_Op]) -> None:
    """In the caller's event loop: hand every operation its own result."""
    for op in ops:
        fut = op.future
        if not fut.done():
            if op.error is not None:
                fut.set_exception(op.error)
            else:
                fut.set_result(op.result)
        settled = op.settled
        if settled is not None and not settled.done():
            settled.set_result(None)
    # An error's traceback would keep the op alive; the batch is short-lived anyway.


async def _wait_settled(settled: asyncio.Future[None], grace: float) -> None:
    """Wait up to ``grace`` seconds for a committing write, through repeated cancellations."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while not settled.done():
        left = deadline - loop.time()
        if left <= 0:
            return
        try:
            await asyncio.wait({settled}, timeout=left)
        except asyncio.CancelledError:
            continue  # cancelled again: the write is still being committed


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _as_version(text: str | None) -> int | None:
    """The stored form of a version string; None if it cannot be one of ours."""
    return None if text is None else decimal_version(text)


def _url_path(url: str, rest: str) -> str:
    """The database path of a ``sqlite://`` URL (``rest``: what follows ``://``, unquoted).

    SQLAlchemy's reading: ``sqlite:///x.db`` is relative, ``sqlite:////x.db``
    absolute. checkpointkit used to read ``sqlite:///x.db`` as ``/x.db`` and
    ``sqlite://x.db`` meant ``x.db``: the second form is refused (it names a
    host), and the first is refused where it would silently open a new, empty
    database beside the one that the old reading named.
    """
    if not rest.startswith("/"):
        host = rest.split("/", 1)[0]
        if not host:
            raise ConfigurationError(
                f"sqlite URL {url!r} names no database file; use sqlite:///relative/path.db "
                "or sqlite:////absolute/path.db"
            )
        raise ConfigurationError(
            f"sqlite URL {url!r} names a host ({host!r}), which SQLite has none of; "
            f"use sqlite:///{rest} for the relative path {rest!r}, or four slashes "
            f"(sqlite:////{rest}) for the absolute /{rest}"
        )
    path = rest[1:]
    if not path:
        raise ConfigurationError(
            f"sqlite URL {url!r} names no database file; use sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    if not path.startswith(("/", "~", "./", "../")):  # ./ and ../ say "relative" outright
        _refuse_old_absolute(url, path)
    return path


def _refuse_old_absolute(url: str, path: str) -> None:
    """Refuse ``sqlite:///x/y.db`` when only ``/x/y.db`` exists (the earlier reading)."""
    if os.path.exists(path):
        return
    absolute = "/" + path
    here = os.path.dirname(path)
    old_exists = os.path.exists(absolute) or (
        bool(here) and not os.path.isdir(here) and os.path.isdir(os.path.dirname(absolute))
    )
    if old_exists:
        there = "exists" if os.path.exists(absolute) else "is in an existing folder"
        raise ConfigurationError(
            f"sqlite URL {url!r} names the relative path {path!r} (as SQLAlchemy reads "
            f"sqlite:///), which does not exist in {os.getcwd()!r}, while {absolute!r} "
            f"{there}; for the absolute path write four slashes: sqlite:///{absolute}; "
            f"for the relative one, sqlite:///./{path}"
        )


def _prepare(path: str, *, create: bool, read_only: bool, busy_timeout: float) -> str:
    """Check the path and the database; create it and its tables if ``create``.

    Returns the URI that every connection of the storage opens. Safe when
    several processes open (and create) the same new database at once: the
    folder is made with ``exist_ok``, and a lock that SQLite refuses at once
    (switching to WAL, creating the tables) is tried again until
    ``busy_timeout``.
    """
    if os.path.isdir(path):
        raise ConfigurationError(
            f"SQLite storage path {path!r} is a directory; name a database file inside it "
            f"(such as {os.path.join(path, 'checkpoints.db')!r})"
        )
    uri = "file:" + quote(path) + ("?mode=ro" if read_only else "?mode=rw")
    if not os.path.exists(path):
        if not create:
            raise ConfigurationError(
                f"SQLite database {path!r} does not exist, and "
                + ("read_only=True" if read_only else "create=False")
                + ": check the path, or create the store first (sqlite://...?create=true)"
            )
        parent = os.path.dirname(path)
        try:
            os.makedirs(parent, exist_ok=True)  # another process may be making it too
        except FileExistsError:
            pass  # a file of that name: reported just below
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create the directory of SQLite database {path!r}: {exc.strerror}"
                + (" (a read-only file system)" if _read_only_fs(parent) else "")
            ) from exc
        if not os.path.isdir(parent):
            raise ConfigurationError(
                f"cannot create SQLite database {path!r}: {parent!r} is not a directory"
            )
        uri = "file:" + quote(path) + "?mode=rwc"
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            return _check_database(path, uri, create=create, read_only=read_only)
        except sqlite3.Error as exc:
            if not _busy(exc):
                raise _unusable(path, exc) from exc
            if time.monotonic() < deadline:
                time.sleep(0.005)  # refused at once (no busy wait for this lock): again
                continue
            raise ConfigurationError(
                f"SQLite database {path!r} stayed locked by another connection for more "
                f"than busy_timeout={busy_timeout:g} s while checking its tables"
            ) from exc


def _busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is a lock held by another connection (any BUSY or LOCKED code)."""
    code = str(getattr(exc, "sqlite_errorname", ""))
    return code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in str(exc)


def _unusable(path: str, exc: sqlite3.Error) -> ConfigurationError:
    code = getattr(exc, "sqlite_errorname", "")
    why = ""
    if code == "SQLITE_NOTADB":
        why = " (it is some other kind of file)"
    elif code in ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_READONLY_DBMOVED"):
        if _read_only_fs(path):
            why = " (it is on a read-only file system: open it with read_only=True)"
        elif not os.access(path, os.W_OK):
            why = " (the file is not writable: open it with read_only=True)"
    return ConfigurationError(f"cannot use {path!r} as a SQLite database: {exc}{why}")


def _check_database(path: str, uri: str, *, create: bool, read_only: bool) -> str:
    """One try of `_prepare` once the file exists or may be created; return the URI."""
    if not create and os.path.getsize(path) == 0:
        raise ConfigurationError(
            f"{path!r} is an empty file (0 bytes), not a checkpointkit store: check the path"
        )
    conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        conn.close()
        where = os.path.dirname(path)
        if not read_only or not (_read_only_fs(path) or not os.access(where, os.W_OK)):
            raise
        # A read-only copy: SQLite cannot make the -shm file next to it, so it reads the
        # file immutable (no locks, and the -wal is not read: copy a checkpointed file).
        uri = "file:" + quote(path) + "?mode=ro&immutable=1"
        conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
    try:
        if create:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ConfigurationError(
                    f"SQLite database {path!r} cannot use WAL mode (it stays in {mode!r} mode): "
                    "is it on a network file system?"
                )
            if _needs_schema(conn):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if _needs_schema(conn):  # still, now that this connection holds the lock
                        _make_schema(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
            return uri
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if TABLE not in tables or META not in tables:
            others = sorted(t for t in tables if not t.startswith("sqlite_"))
            raise ConfigurationError(
                f"{path!r} is a SQLite database but not a checkpointkit store (it has no "
                f"{TABLE} table; its tables: {', '.join(others) if others else 'none'}); "
                "nothing was changed"
            )
        return uri
    finally:
        conn.close()


def _read_only_fs(path: str) -> bool:
    """Whether the file system holding ``path`` (or its nearest existing parent) is read-only."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        return bool(os.statvfs(path or ".").f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _needs_schema(conn: sqlite3.Connection) -> bool:
    """Whether a table is missing, or the key table is the old ``WITHOUT ROWID`` one."""
    rows = dict(
        conn.execute("SELECT name, sql FROM sqlite_master WHERE name IN (?, ?)", (TABLE, META))
    )
    return len(rows) < 2 or "WITHOUT ROWID" in str(rows[TABLE]).upper()


def _make_schema(conn: sqlite3.Connection) -> None:
    """Create the tables (in the caller's transaction); move the rows of an old key table.

    Databases made with the first layout keep their keys in a ``WITHOUT ROWID``
    table; its rows, versions included, move to the new table in this same
    transaction, and the counter stays, so no version comes back.
    """
    old = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)
    ).fetchone()
    if old is not None and "WITHOUT ROWID" in str(old[0]).upper():
        conn.execute(f"ALTER TABLE {TABLE} RENAME TO {TABLE}_old")
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(
            f"INSERT INTO {TABLE} (key, version, data) SELECT key, version, data FROM {TABLE}_old"
        )
        conn.execute(f"DROP TABLE {TABLE}_old")
        return
    for statement in _SCHEMA:
        conn.execute(statement)


def _parse(url: str, name: str, value: str, kind: type) -> Any:
    if kind is bool:
        low = value.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigurationError(f"sqlite URL parameter {name}={value!r} must be true or false")
    try:
        return kind(value)
    except ValueError:
        what = "an int" if kind is int else "a number"
        raise ConfigurationError(f"sqlite URL parameter {name}={value!r} is not {what}") from None

"""The PostgreSQL adapter: ``postgres://`` and ``postgresql://`` on asyncpg.

Layout (see ``docs/adapters/postgres.md``): one table per storage name
(``table``, by default ``checkpointkit``), shared by every ``prefix`` (a
namespace: keys of two prefixes never meet)::

    checkpointkit (ns text COLLATE "C", key text COLLATE "C", version bigint,
                   expires timestamptz, data bytea, PRIMARY KEY (ns, key))
    checkpointkit_version   sequence: every write's version
    checkpointkit_meta      (name, value): the layout's version ("schema" -> 1)

The primary key's B-tree keeps each namespace's keys in byte order (``COLLATE
"C"`` compares UTF-8 bytes, which is code point order), so a listing page is
one index range scan: O(log N + limit). ``data`` is stored without
compression (``STORAGE EXTERNAL``): the envelopes are compressed already.

Every operation is one statement, so each write is its own transaction and
its condition is decided by the row it locks: create-only is ``INSERT ... ON
CONFLICT DO UPDATE ... WHERE <the row has expired>``, if-match an ``UPDATE ...
WHERE version = $v``, a conditional delete a ``DELETE ... WHERE version = $v``
beside a read of the row in the same statement, ``delete_many`` one ``DELETE
... WHERE key = ANY($keys)``. Versions come from a sequence: they never repeat,
also across a delete and a re-create.

Settling cancelled writes: every write statement ends with a deadline fence,
``RETURNING ..., <the server's clock, or an error past $deadline>`` (`fence`),
evaluated after the row is written and just before the statement commits.
Past the deadline (in the server's clock) the fence raises, and the
statement, hence its transaction, is rolled back. A
cancelled write drops its connection and waits, holding nothing, until the
server has surely passed the deadline (within ``cancel_grace``); only then
does it raise ``CancelledError``. A write that merely arrived late (a loaded
server) is sent again with a new deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar, Final, NoReturn, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import (
    ConfigurationError,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageClosed,
    StorageUnavailable,
)
from ..storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase
from ..urls import redact_url
from ..versions import decimal_version
from ._deadline import DRIFT, MARGIN, ServerClock, settle
from ._inflight import Background
from ._pool import Pool, PoolClosed
from ._timeouts import SharedTimeout

try:
    import asyncpg
    from asyncpg import exceptions as pgexc
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        f"the postgres adapter needs the 'asyncpg' package ({_exc}); "
        'install it with: pip install "checkpointkit[postgres]"'
    ) from _exc

__all__ = ["PostgresStorage"]

T = TypeVar("T")

_CLOSE_GRACE = 0.25
"""Seconds `PostgresStorage.aclose` gives the server to answer the goodbye of each idle
connection (all at once) before it terminates the connection: a server that is stopped or
cut off never answers, and closing has nothing else to ask it."""

SCHEMA_VERSION: Final = 1
"""The layout this module writes; a table marked with a newer one is refused."""

CANCEL_GRACE: Final = 0.25
"""Default ``cancel_grace``: seconds within which a cancelled write raises CancelledError,
having made sure that it can no longer land."""

LATE: Final = "checkpointkit: a write ran after its deadline"
"""What the fence's error says when a write ran past its deadline (nothing written); it is
PostgreSQL's ``invalid_text_representation`` (SQLSTATE `LATE_SQLSTATE`) of this text."""

LATE_SQLSTATE: Final = "22P02"


def fence(deadline: str) -> str:
    """The deadline fence: an SQL expression whose value is the server's clock (seconds since
    the epoch, ``float8``) before ``deadline`` (an SQL ``float8`` expression), and which raises
    `LATE` (an ``invalid_text_representation`` error) from then on.

    Plain SQL, not a PL/pgSQL function (as it first was): timed op by op
    (``benchmarks/postgres_statements.py``), the function cost 10 to 18 µs more per
    write. The error is a cast of text naming the fence to ``float8``, which PostgreSQL
    evaluates only in that branch: the text holds ``clock_timestamp()``, so the planner
    cannot fold it into a constant.
    """
    now = "date_part('epoch', clock_timestamp())"
    return (
        f"CASE WHEN {now} < {deadline} THEN {now} "
        f"ELSE ('{LATE} at ' || clock_timestamp())::float8 END"
    )


def _is_late(exc: BaseException) -> bool:
    """Whether ``exc`` is the fence's error: the write ran past its deadline, nothing written."""
    return getattr(exc, "sqlstate", None) == LATE_SQLSTATE and LATE in str(exc)


INLINE_MAX: Final = 256 * 1024
"""Values up to this size are written in one fenced statement; bigger ones in a transaction
whose COMMIT alone is fenced (their transfer may take longer than ``cancel_grace``)."""

_NEVER: Final = 1e300
"""The deadline of a statement whose transaction's COMMIT is fenced instead."""

ATTEMPTS: Final = 8
"""Times a write is sent again, with a new deadline, when it ran past its deadline."""

IDLE_LIFETIME: Final = 60.0
"""Seconds after which a pooled connection that nobody used is closed."""

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
_PARAMS: Final = {
    "prefix": str,
    "table": str,
    "schema": str,
    "ttl": float,
    "timeout": float,
    "connect_timeout": float,
    "cancel_grace": float,
    "pool_size": int,
}
"""The URL parameters the adapter reads; the others below go to the driver."""
_DRIVER_PARAMS: Final = frozenset(
    {
        "host", "port", "user", "password", "passfile", "dbname", "database",
        "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslcrl",
        "ssl_min_protocol_version", "ssl_max_protocol_version", "sslnegotiation",
        "target_session_attrs", "krbsrvname", "gsslib", "service", "servicefile",
        "application_name",
    }
)  # fmt: skip
"""libpq's connection parameters that asyncpg reads from a URL (any other would become a
server setting there; here it is a ConfigurationError)."""


class _Sql:
    """The statements of one table (identifiers checked and quoted once)."""

    def __init__(self, schema: str | None, table: str) -> None:
        def name(suffix: str = "") -> str:
            qualified = f'"{table}{suffix}"'
            return f'"{schema}".{qualified}' if schema else qualified

        t, seq, meta = name(), name("_version"), name("_meta")
        self.table, self.meta = t, meta
        live = "(r.expires IS NULL OR r.expires > clock_timestamp())"
        expires = "clock_timestamp() + $4::float8 * interval '1 second'"
        self.schema = (
            f'CREATE TABLE IF NOT EXISTS {t} (ns text COLLATE "C" NOT NULL, '
            'key text COLLATE "C" NOT NULL, version bigint NOT NULL, expires timestamptz, '
            "data bytea NOT NULL, PRIMARY KEY (ns, key))",
            f"ALTER TABLE {t} ALTER COLUMN data SET STORAGE EXTERNAL",
            f'CREATE INDEX IF NOT EXISTS "{table}_expires" ON {t} (expires) '
            "WHERE expires IS NOT NULL",
            f"CREATE SEQUENCE IF NOT EXISTS {seq}",
            f"CREATE TABLE IF NOT EXISTS {meta} (name text PRIMARY KEY, value integer NOT NULL)",
            f"INSERT INTO {meta} VALUES ('schema', {SCHEMA_VERSION}) ON CONFLICT DO NOTHING",
        )
        self.schema_version = f"SELECT value FROM {meta} WHERE name = 'schema'"
        upsert = (
            f"INSERT INTO {t} AS r (ns, key, version, expires, data) "
            f"VALUES ($1, $2, nextval('{seq}'), {expires}, $3) ON CONFLICT (ns, key) DO UPDATE "
            "SET version = excluded.version, expires = excluded.expires, data = excluded.data"
        )
        # The deadline is always the last parameter; the fence's result (the server's
        # clock) the last column. $1 ns, $2 key, $3 data, $4 ttl seconds (or NULL).
        self.overwrite = f"{upsert} RETURNING r.version, {fence('$5')}"
        self.create = (
            f"{upsert} WHERE r.expires IS NOT NULL AND r.expires <= clock_timestamp() "
            f"RETURNING r.version, {fence('$5')}"
        )
        # ... $5 the if-match version
        self.if_match = (
            f"UPDATE {t} AS r SET version = nextval('{seq}'), expires = {expires}, data = $3 "
            f"WHERE r.ns = $1 AND r.key = $2 AND r.version = $5 AND {live} "
            f"RETURNING r.version, {fence('$6')}"
        )
        # $1 ns, $2 key (, $3 the if-match version)
        self.delete = (
            f"DELETE FROM {t} AS r WHERE r.ns = $1 AND r.key = $2 RETURNING {live}, {fence('$3')}"
        )
        self.delete_if = (
            f"WITH cur AS (SELECT r.version FROM {t} AS r WHERE r.ns = $1 AND r.key = $2 "
            f"AND {live}), del AS (DELETE FROM {t} AS r WHERE r.ns = $1 AND r.key = $2 "
            f"AND r.version = $3 AND {live} RETURNING {fence('$4')} AS now) "
            "SELECT (SELECT count(*) FROM del), (SELECT version FROM cur), "
            "(SELECT max(now) FROM del)"
        )
        # $1 ns, $2 keys, $3 deadline
        self.delete_many = (
            f"DELETE FROM {t} AS r WHERE r.ns = $1 AND r.key = ANY($2::text[]) "
            f"RETURNING {live}, {fence('$3')}"
        )
        self.get = (
            f"SELECT r.version, r.data FROM {t} AS r WHERE r.ns = $1 AND r.key = $2 AND {live}"
        )
        page = f"SELECT r.key FROM {t} AS r WHERE r.ns = $1 AND r.key %s $2 AND {live} "
        self.list_from = page % ">=" + "ORDER BY r.key LIMIT $3"
        self.list_after = page % ">" + "ORDER BY r.key LIMIT $3"
        self.purge = f"DELETE FROM {t} WHERE expires <= clock_timestamp()"
        self.delete_namespace = f"DELETE FROM {t} WHERE ns = $1"
        self.clock = "SELECT extract(epoch FROM clock_timestamp())::float8"


def _identifier(kind: str, value: object) -> str:
    if not isinstance(value, str) or not _IDENT.fullmatch(value):
        raise ConfigurationError(
            f"postgres option {kind} must be a plain SQL name (a letter or _, then letters, "
            f"digits or _, at most 48), not {value!r}"
        )
    return value


def _seconds(kind: str, value: object, *, low: float, high: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not low <= value <= high
        or value != value
    ):
        raise ConfigurationError(
            f"postgres option {kind} must be a number of seconds from {low:g} to {high:g}, "
            f"not {value!r}"
        )
    return float(value)


class PostgresStorage(StorageBase):
    """A storage in one PostgreSQL table, through a pool of asyncpg connections.

    Open it with `from_url`
    (``postgresql://user:password@host:5432/db?prefix=wf``) or construct it
    with a libpq connection URL. What the URL leaves out (host, user,
    password, TLS) asyncpg takes from libpq's environment variables
    (``PGHOST``, ``PGUSER``, ``PGPASSWORD``, ``PGPASSFILE``, ``PGSSLMODE``,
    ``PGSSLROOTCERT``...) and ``~/.pgpass``. The password is never shown: not in
    ``repr``, not in errors.

    The table, its sequence and meta table are created on
    first use if missing (``CREATE ... IF NOT EXISTS`` under an advisory lock,
    so concurrent first uses agree); a table whose layout is newer than this
    version of checkpointkit is refused.

    Args:
        dsn: a ``postgresql://`` URL with libpq's parameters (``sslmode``,
            ``sslrootcert``...), or None to use the environment only.
        prefix: the namespace of this storage's keys in the table.
        table: the table's name (its sequence and meta table are named after it).
        schema: the PostgreSQL schema of the table (default: the search path's).
        ttl: seconds after which a written key expires (None: never). Each
            write of a key starts its time again; an expired key is absent
            for every operation, and its row is removed by the next write of
            the key, a delete, or `purge_expired` (also run when the
            storage opens).
        timeout: seconds one statement may take before it fails
            (``OutcomeUnknown`` for a write, after it has settled).
        connect_timeout: seconds to open a connection (default: ``timeout``,
            at most 10).
        cancel_grace: seconds within which a cancelled write raises
            ``CancelledError`` after making sure that it cannot land.
        pool_size: most connections open at once (operations beyond it wait).
        endpoint: ``(host, port)`` to connect to instead of the URL's (a proxy
            in tests); the URL's host is still used for TLS host checks.

    Raises:
        ConfigurationError: an option is out of range, or a name is not a
            plain SQL identifier.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        conditional_put=True,
        conditional_delete=True,
        durable=True,
        shared=True,
        ttl=True,
        settles_cancelled_writes=True,
        indexed_list=True,
    )

    def __init__(
        self,
        dsn: str | None = None,
        *,
        prefix: str = "",
        table: str = "checkpointkit",
        schema: str | None = None,
        ttl: float | None = None,
        timeout: float = 10.0,
        connect_timeout: float | None = None,
        cancel_grace: float = CANCEL_GRACE,
        pool_size: int = 10,
        endpoint: tuple[str, int] | None = None,
    ) -> None:
        self._closed = False
        if dsn is not None and not (
            isinstance(dsn, str) and dsn.split("://", 1)[0].lower() in ("postgres", "postgresql")
        ):
            raise ConfigurationError(
                "postgres dsn must be a postgres:// or postgresql:// URL, not "
                f"{redact_url(dsn) if isinstance(dsn, str) else dsn!r}"
            )
        if not isinstance(prefix, str) or "\x00" in prefix or len(prefix.encode()) > 255:
            raise ConfigurationError(
                f"postgres option prefix must be a str of at most 255 bytes without NUL, "
                f"not {prefix!r}"
            )
        self.prefix = prefix
        self.table = _identifier("table", table)
        self.schema = None if schema is None else _identifier("schema", schema)
        self.ttl = None if ttl is None else _seconds("ttl", ttl, low=0.001, high=10 * 365 * 86400)
        self.timeout = _seconds("timeout", timeout, low=0.01, high=3600)
        self._timeouts = SharedTimeout(self.timeout)  # each operation's, one timer for all
        self._abandoned = Background()  # connects left to finish (see `_connect`), for aclose
        self.connect_timeout = (
            min(self.timeout, 10.0)
            if connect_timeout is None
            else _seconds("connect_timeout", connect_timeout, low=0.01, high=3600)
        )
        self.cancel_grace = _seconds("cancel_grace", cancel_grace, low=0.01, high=60)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ConfigurationError(
                f"postgres option pool_size must be an int >= 1, not {pool_size!r}"
            )
        self.pool_size = pool_size
        if endpoint is not None:
            host, port = endpoint
            endpoint = (str(host), int(port))
        self._endpoint = endpoint
        self._dsn = dsn
        self._where = redact_url(dsn) if dsn else "postgresql:// (from the environment)"
        self._sql = _Sql(self.schema, self.table)
        self._pool: Pool[asyncpg.Connection] | None = None
        self._opening: asyncio.Lock | None = None
        self._clock = ServerClock()
        # the clock estimate is measured again when its drift allowance reaches grace/8
        self._refresh = self.cancel_grace / (8 * DRIFT)
        self._window = (self.cancel_grace - MARGIN) * (1 - DRIFT)
        self._window_min = self.cancel_grace / 4

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStorage:
        """Open ``postgres://`` or ``postgresql://[user[:password]@]host[:port]/database?...``.

        The parameters ``prefix``, ``table``, ``schema``, ``ttl``, ``timeout``,
        ``connect_timeout``, ``cancel_grace`` and ``pool_size`` set the options
        of the same names; libpq's connection parameters (``sslmode``,
        ``sslrootcert``, ``sslcert``, ``sslkey``, ``target_session_attrs``,
        ``application_name``...) go to the driver. Keyword ``options``
        override the URL's.

        Raises:
            ConfigurationError: not a postgres URL, or an unknown or malformed
                parameter.
        """
        if not isinstance(url, str) or url.split("://", 1)[0].lower() not in (
            "postgres",
            "postgresql",
        ):
            raise ConfigurationError(f"not a postgres URL: {redact_url(str(url))!r}")
        parts = urlsplit(url)
        params: dict[str, Any] = {}
        driver: list[tuple[str, str]] = []
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            kind = _PARAMS.get(name)
            if kind is None:
                if name not in _DRIVER_PARAMS:
                    raise ConfigurationError(
                        f"unknown postgres URL parameter {name!r} in {redact_url(url)!r}; known: "
                        f"{', '.join(sorted(_PARAMS))}, and libpq's "
                        f"{', '.join(sorted(_DRIVER_PARAMS))}"
                    )
                driver.append((name, value))
                continue
            try:
                params[name] = kind(value) if kind is not str else value
            except ValueError:
                raise ConfigurationError(
                    f"postgres URL parameter {name}={value!r} is not a valid {kind.__name__}"
                ) from None
        params.update(options)
        dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(driver), ""))
        return cls(dsn, **params)

    def __repr__(self) -> str:
        return (
            f"PostgresStorage({self._where!r}, table={self.table!r}, prefix={self.prefix!r}, "
            f"ttl={self.ttl!r})"
        )

    # -- connections, schema and clock ------------------------------------------------
    async def _ready(self) -> Pool[asyncpg.Connection]:
        pool = self._pool
        if pool is not None:
            return pool
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                self._check_open()
                self._pool = await self._open()
            return self._pool

    async def _open(self) -> Pool[asyncpg.Connection]:
        pool = Pool(self._connect, size=self.pool_size, idle_lifetime=IDLE_LIFETIME)
        try:
            await self._ensure_schema(pool)
        except BaseException:
            pool.terminate()
            raise
        return pool

    async def _connect(self) -> asyncpg.Connection:
        """A new connection, its clock reading taken (the pool's ``connect``)."""
        kwargs: dict[str, Any] = {}
        if self._endpoint is not None:
            kwargs["host"], kwargs["port"] = self._endpoint
        plain = _plain_loopback(self._dsn, self._endpoint)
        if plain:
            # No sslmode chosen, and the server is on this machine: no TLS (libpq's
            # default "prefer" asks the server first, a round trip per connection).
            kwargs["ssl"] = False
        connecting = asyncpg.connect(
            self._dsn,
            timeout=self.connect_timeout,
            command_timeout=None,
            server_settings={"application_name": "checkpointkit"},
            **kwargs,
        )
        if plain:
            conn: asyncpg.Connection = await connecting
        else:
            conn = await self._connect_to_the_end(connecting)
        try:
            await self._measure_clock(conn)
        except BaseException:
            conn.terminate()
            raise
        return conn

    async def _ensure_schema(self, pool: Pool[asyncpg.Connection]) -> None:
        sql = self._sql
        with _translate_errors("create", f"the table {sql.table}", self._where), self._timeouts():
            conn = await pool.acquire(self.connect_timeout)
            try:
                try:
                    found = await conn.fetchval(sql.schema_version)
                except pgexc.UndefinedTableError:
                    found = None
                if found is None:
                    async with conn.transaction():
                        await conn.execute(
                            "SELECT pg_advisory_xact_lock(hashtext($1))",
                            f"checkpointkit:{sql.table}",
                        )
                        for statement in sql.schema:
                            await conn.execute(statement)
                    found = await conn.fetchval(sql.schema_version)
                if found is not None and found > SCHEMA_VERSION:
                    raise ConfigurationError(
                        f"the table {sql.table} has layout version {found}, newer than "
                        f"this checkpointkit's ({SCHEMA_VERSION}): upgrade checkpointkit"
                    )
                if self.ttl is not None:
                    await conn.execute(sql.purge)
            except BaseException:
                pool.discard(conn)
                raise
            pool.release(conn)

    async def _measure_clock(self, conn: asyncpg.Connection) -> None:
        """Narrow the server clock's estimate with three readings (each new connection)."""
        loop = asyncio.get_running_loop()
        for _ in range(3):
            sent = loop.time()
            server = await conn.fetchval(self._sql.clock)
            self._clock.add(float(server), sent, loop.time())

    async def purge_expired(self) -> int:
        """Delete the rows of every namespace of the table whose ttl has passed; return how many.

        Expired keys are absent for every operation already; this only frees
        their space.

        Raises:
            StorageClosed: the storage was closed.
            StorageUnavailable: the server failed.
        """
        self._check_open()
        status = await self._call("purge", "expired keys", lambda c: c.execute(self._sql.purge))
        return int(str(status).rsplit(" ", 1)[-1])

    async def delete_namespace(self) -> int:
        """Delete every key of this storage's ``prefix`` in one statement; return how many rows.

        Not fenced like a write (see the module docstring): a cancelled call may
        still take effect.

        Raises:
            StorageClosed: the storage was closed.
            StorageUnavailable: the server failed.
        """
        self._check_open()
        status = await self._call(
            "delete",
            f"the namespace {self.prefix!r}",
            lambda c: c.execute(self._sql.delete_namespace, self.prefix),
        )
        return int(str(status).rsplit(" ", 1)[-1])

    # -- one statement, with what cancellation and failures leave ----------------------
    async def _call(self, op: str, what: str, run: Callable[[Any], Awaitable[T]]) -> T:
        """Run a read (or a statement without a deadline) on a pooled connection."""
        pool = self._pool
        if pool is None:
            pool = await self._ready()
        conn = pool.take()  # an idle connection, without awaiting
        if conn is None:
            conn = await self._acquire(pool, op, what)
        try:
            with self._timeouts():
                result = await run(conn)
        except BaseException as exc:
            self._discard(conn)  # no stale reply for the next user of the connection
            if isinstance(exc, _DRIVER_ERRORS):
                if self._closed and _lost(exc):  # aclose() cut it (a cancelled one)
                    raise StorageClosed(
                        f"postgres storage {self._where} could not {op} {what}: the storage "
                        "was closed while it ran"
                    ) from exc
                _fail(op, what, self._where, exc, written=False)
            raise
        pool.release(conn)
        return result

    async def _write(self, op: str, what: str, sql: str, *args: Any, size: int = 0) -> list[Any]:
        """Run a write statement whose last parameter is its deadline; see the module docstring.

        A write of more than `INLINE_MAX` bytes (``size``), or one that ran
        past its deadline once, runs in a transaction instead, whose ``COMMIT``
        alone carries the deadline: see `_write_staged`.
        """
        pool = await self._ready()
        loop = asyncio.get_running_loop()
        staged = size > INLINE_MAX
        for _ in range(ATTEMPTS):
            conn = pool.take()
            if conn is None:
                conn = await self._acquire(pool, op, what)
            if loop.time() - self._clock.at > self._refresh:
                try:
                    await self._measure_clock(conn)
                except BaseException as exc:
                    self._discard(conn)
                    with _translate_errors(op, what, self._where):
                        raise exc
            if staged:
                rows = await self._write_staged(conn, op, what, sql, args)
            else:
                rows = await self._write_inline(conn, op, what, sql, args)
            if rows is None:  # it ran past its deadline: nothing was written
                staged = True  # (a late statement is small when only its COMMIT is fenced)
                continue
            return rows
        raise StorageUnavailable(
            f"postgres storage {self._where} could not {op} {what}: the server ran the "
            f"statement after its deadline {ATTEMPTS} times (each time nothing was written); "
            f"the server is too slow for cancel_grace={self.cancel_grace:g}"
        )

    async def _write_inline(
        self, conn: Any, op: str, what: str, sql: str, args: tuple[Any, ...]
    ) -> list[Any] | None:
        """One round trip: the statement, fenced by its deadline; None if it ran late."""
        loop = asyncio.get_running_loop()
        sent = loop.time()
        deadline, until = self._clock.deadline(sent, self._window, self._window_min)
        try:
            with self._timeouts():
                rows: list[Any] = await conn.fetch(sql, *args, deadline)
        except pgexc.PostgresError as exc:
            if isinstance(exc, pgexc.PostgresConnectionError):  # lost: the outcome is open
                await self._settle_failed(conn, until, exc, op, what)
            self._release(conn)  # the server answered an error: the statement did nothing
            if _is_late(exc):
                return None
            with _translate_errors(op, what, self._where):
                raise
        except BaseException as exc:  # cancelled, timed out, connection lost
            await self._settle_failed(conn, until, exc, op, what)
        self._release(conn)
        if rows and rows[-1][-1] is not None:
            self._clock.add(float(rows[-1][-1]), sent, loop.time())
        return rows

    async def _write_staged(
        self, conn: Any, op: str, what: str, sql: str, args: tuple[Any, ...]
    ) -> list[Any] | None:
        """``BEGIN``, the statement unfenced, then the fence and ``COMMIT`` in one message.

        Until that last message is sent, a cancelled or failed write cannot
        land: a transaction whose ``COMMIT`` never arrives is rolled back when
        its connection drops (terminated here at once). So a big value's
        transfer, however long, is not under the deadline; only the small
        ``COMMIT`` message is. Returns None if the commit ran past its deadline.
        """
        try:
            with self._timeouts():
                await conn.execute("BEGIN")
                rows: list[Any] = await conn.fetch(sql, *args, _NEVER)
                if not rows:  # a condition failed: nothing to commit
                    await conn.execute("ROLLBACK")
        except BaseException as exc:
            self._discard(conn)  # no COMMIT was sent: the transaction is rolled back
            if isinstance(exc, asyncio.CancelledError):
                raise
            with _translate_errors(op, what, self._where):  # StorageUnavailable: not written
                raise
        if not rows:
            self._release(conn)
            return rows
        loop = asyncio.get_running_loop()
        deadline, until = self._clock.deadline(loop.time(), self._window, self._window_min)
        try:
            with self._timeouts():
                await conn.execute(f"SELECT {fence(f'{deadline!r}::float8')}; COMMIT")
        except pgexc.PostgresError as exc:
            if isinstance(exc, pgexc.PostgresConnectionError):
                await self._settle_failed(conn, until, exc, op, what)
            self._discard(conn)  # the transaction failed: rolled back with the connection
            if _is_late(exc):
                return None
            with _translate_errors(op, what, self._where):
                raise
        except BaseException as exc:
            await self._settle_failed(conn, until, exc, op, what)
        self._release(conn)
        return rows

    async def _acquire(self, pool: Pool[asyncpg.Connection], op: str, what: str) -> Any:
        """A pooled connection; ``StorageClosed`` if the storage was closed meanwhile."""
        with _translate_errors(op, what, self._where):
            try:
                return await pool.acquire(self.connect_timeout)
            except PoolClosed:
                raise StorageClosed("PostgresStorage is closed") from None

    def _release(self, conn: Any) -> None:
        """Give back a connection ready for its next statement (terminated if closed since)."""
        self._pool_in_use().release(conn)

    def _discard(self, conn: Any) -> None:
        """Terminate a connection whose state is unknown, and free its place in the pool."""
        self._pool_in_use().discard(conn)

    def _pool_in_use(self) -> Pool[asyncpg.Connection]:
        """The pool every connection in use came from: opened once, never reset (``aclose``
        keeps it, so that a connection given back after it is terminated there)."""
        pool = self._pool
        assert pool is not None, "a connection comes from an open pool"
        return pool

    async def _settle_failed(
        self, conn: Any, until: float, exc: BaseException, op: str, what: str
    ) -> NoReturn:
        """A write's statement was sent and no answer came: drop it, wait it out, raise.

        The connection is terminated (no stale reply for a later operation, and a
        server that has not read the statement yet never will on it), then the
        write waits, holding nothing, until the local time ``until``, when the
        server has surely passed the statement's deadline. A cancellation is
        raised again after the wait (a second one during it is kept, not
        dropped); a timeout or a lost connection becomes ``OutcomeUnknown``.
        """
        self._discard(conn)
        cancelled_meanwhile = await settle(until + MARGIN)
        if isinstance(exc, asyncio.CancelledError):
            raise exc
        if cancelled_meanwhile:
            raise asyncio.CancelledError() from exc
        with _translate_errors(op, what, self._where, written=True):
            raise exc

    # -- the protocol -------------------------------------------------------------------
    def _may_match(self, version: str) -> bool:
        return decimal_version(version) is not None

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        sql = self._sql
        what = f"key {key!r}"
        if isinstance(mode, IfMatch):
            rows = await self._write(
                "put",
                what,
                sql.if_match,
                self.prefix,
                key,
                data,
                self.ttl,
                int(mode.version),
                size=len(data),
            )
            if not rows:
                raise PreconditionFailed(
                    f"key {key!r} is not at version {mode.version!r} (missing or changed)"
                )
        else:
            statement = sql.create if mode == "create" else sql.overwrite
            rows = await self._write(
                "put", what, statement, self.prefix, key, data, self.ttl, size=len(data)
            )
            if not rows:
                raise PreconditionFailed(f"key {key!r} exists (create-only put)")
        return str(rows[0][0])

    async def _get(self, key: str) -> GetResult:
        row = await self._call(
            "get", f"key {key!r}", lambda c: c.fetchrow(self._sql.get, self.prefix, key)
        )
        if row is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(bytes(row[1]), str(row[0]))

    async def _delete(self, key: str, if_match: str | None) -> bool:
        what = f"key {key!r}"
        if if_match is None:
            rows = await self._write("delete", what, self._sql.delete, self.prefix, key)
            return any(row[0] for row in rows)
        expected = int(if_match)
        for _ in range(ATTEMPTS):
            rows = await self._write(
                "delete", what, self._sql.delete_if, self.prefix, key, expected
            )
            deleted, current = rows[0][0], rows[0][1]
            if deleted:
                return True
            if current is None:
                return False
            if current != expected:
                raise PreconditionFailed(
                    f"key {key!r} is at another version than {if_match!r} (conditional delete)"
                )
            # The statement's snapshot saw the expected version, but a concurrent write
            # changed or deleted the row before the delete could lock it: ask again.
        raise StorageUnavailable(
            f"postgres storage {self._where} could not delete {what}: it changed under "
            f"{ATTEMPTS} conditional deletes in a row"
        )

    async def _delete_many(self, keys: list[str]) -> int:
        if not keys:
            return 0
        rows = await self._write(
            "delete", f"{len(keys)} keys", self._sql.delete_many, self.prefix, keys
        )
        return sum(1 for row in rows if row[0])

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after
        sql = self._sql
        if after is not None and after >= prefix:
            statement, bound = sql.list_after, after
        else:
            statement, bound = sql.list_from, prefix
        rows = await self._call(
            "list",
            f"the keys under prefix {prefix!r}",
            lambda c: c.fetch(statement, self.prefix, bound, limit),
        )
        keys = [row[0] for row in rows]
        inside = [k for k in keys if k.startswith(prefix)]  # a prefix's keys are contiguous
        more = len(keys) == limit and len(inside) == limit
        return ListPage(inside, inside[-1] if more else None)

    async def _connect_to_the_end(
        self, connecting: Awaitable[asyncpg.Connection]
    ) -> asyncpg.Connection:
        """Await a connect that may negotiate TLS; if cancelled, let it end on its own.

        asyncpg (0.32) asks the server for TLS (``SSLRequest``) through a protocol
        whose future holds the answer. A connect cancelled just as its TCP connection
        is made closes that connection before anything awaits the future, which then
        holds a ``ConnectionError`` nobody retrieves: the event loop reports "Future
        exception was never retrieved" (``TLSUpgradeProto`` in asyncpg's
        ``connect_utils.py``). So a cancelled connect is not cancelled: the caller's
        ``CancelledError`` is raised at once, and the connect goes on in the
        background, within ``connect_timeout``, its connection terminated when it
        comes; ``aclose()`` waits for it. Without TLS (``ssl=False``) asyncpg's own
        protocol handles a cancelled connect, and it is cancelled as any call.
        """
        task = asyncio.ensure_future(connecting)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._abandoned.spawn(_terminate_when_open(task))
            raise

    async def _aclose(self) -> None:
        await self._abandoned.wait(self.connect_timeout + 1.0)
        if self._opening is not None:
            async with self._opening:  # a pool being opened now is closed too
                pass
        pool = self._pool  # kept: connections still in use are given back to it
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(_CLOSE_GRACE), timeout=self.timeout)
        except TimeoutError:
            pool.terminate()  # in use past the adapter's timeout: cut; nothing to report
        except BaseException:
            pool.terminate()
            raise
        finally:
            self._timeouts.close()  # every operation has given its connection back


async def _terminate_when_open(task: asyncio.Future[asyncpg.Connection]) -> None:
    """Wait for an abandoned connect; terminate the connection it opens, if any."""
    try:
        conn = await task
    except BaseException:  # failed or cancelled: nothing was opened
        return
    conn.terminate()


def _plain_loopback(dsn: str | None, endpoint: tuple[str, int] | None) -> bool:
    """Whether neither the URL nor ``PGSSLMODE`` chose an sslmode, and the host is loopback."""
    if os.environ.get("PGSSLMODE"):
        return False
    parts = urlsplit(dsn or "postgresql://")
    if any(name == "sslmode" for name, _ in parse_qsl(parts.query)):
        return False
    host = endpoint[0] if endpoint is not None else parts.hostname or os.environ.get("PGHOST")
    return host in ("127.0.0.1", "::1", "localhost")


_DRIVER_ERRORS: Final = (
    pgexc.PostgresError,
    pgexc.InterfaceError,
    pgexc.InternalClientError,
    TimeoutError,
    OSError,
)
"""What `_translate_errors` turns into checkpointkit's errors."""


@contextlib.contextmanager
def _translate_errors(op: str, what: str, where: str, *, written: bool = False) -> Iterator[None]:
    """Turn asyncpg's and the network's errors into checkpointkit's, the driver's chained.

    Args:
        op: the operation, in the message ("put", "get", "connect"...).
        what: what it was about ("key 'a/b'").
        where: the redacted URL.
        written: a write's statement was sent and its answer did not come (a
            timeout, a lost connection): ``OutcomeUnknown`` instead of
            ``StorageUnavailable``.

    Raises:
        OutcomeUnknown: see ``written``.
        StorageUnavailable: every other error of the driver, the server or the
            network (server errors carry their SQLSTATE).
    """
    try:
        yield
    except _DRIVER_ERRORS as exc:
        _fail(op, what, where, exc, written=written and _lost(exc))


def _lost(exc: BaseException) -> bool:
    """Whether a driver error (one of `_DRIVER_ERRORS`) says the connection was lost or cut
    (a timeout, a network error, ``aclose()`` terminating it), not that the server
    answered with an error."""
    return not isinstance(exc, pgexc.PostgresError) or isinstance(
        exc, pgexc.PostgresConnectionError
    )


def _fail(op: str, what: str, where: str, exc: BaseException, *, written: bool) -> NoReturn:
    reason = _reason(exc)
    message = f"postgres storage {where} could not {op} {what}: {reason}"
    if written:
        raise OutcomeUnknown(
            message + " (the write may have happened; it can no longer happen later)"
        ) from exc
    raise StorageUnavailable(message) from exc


def _reason(exc: BaseException) -> str:
    """What went wrong, in words, from a driver or network error (no credentials in it)."""
    if isinstance(exc, pgexc.InvalidPasswordError | pgexc.InvalidAuthorizationSpecificationError):
        return f"authentication failed ({type(exc).__name__}: {exc})"
    if isinstance(exc, pgexc.InvalidCatalogNameError):
        return f"the database does not exist ({exc})"
    if isinstance(exc, pgexc.TooManyConnectionsError):
        return f"the server has no free connection ({exc})"
    if isinstance(exc, pgexc.InsufficientPrivilegeError):
        return f"permission denied ({exc})"
    if isinstance(exc, pgexc.ReadOnlySQLTransactionError):
        return f"the server is read-only (a standby?) ({exc})"
    if isinstance(exc, pgexc.DiskFullError | pgexc.InsufficientResourcesError):
        return f"the server is out of resources ({exc})"
    if isinstance(exc, pgexc.QueryCanceledError):
        return f"the statement was cancelled by the server ({exc})"
    if isinstance(exc, pgexc.CannotConnectNowError):
        return f"the server is starting up or shutting down ({exc})"
    if isinstance(exc, pgexc.PostgresConnectionError | pgexc.ConnectionDoesNotExistError):
        return f"the connection was lost ({type(exc).__name__}: {exc})"
    if isinstance(exc, TimeoutError):
        return "no answer in time (timeout)"
    if isinstance(exc, OSError):
        return f"the server could not be reached ({type(exc).__name__}: {exc})"
    sqlstate = getattr(exc, "sqlstate", None)
    code = f" [SQLSTATE {sqlstate}]" if sqlstate else ""
    return f"{type(exc).__name__}: {exc}{code}"

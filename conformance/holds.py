"""Holds: what makes a target's backend stop answering until the suite releases it.

The held-backend tests (`held`) start an
operation while the backend is held, check that it is stuck there, cancel it,
and then check the promises of the protocol: ``CancelledError`` within the
cancel bound, nothing of the operation landing after the release (where the
adapter declares ``settles_cancelled_writes``, watched through a second
client), and the next call getting its own answer. That needs a way to make
the backend stop answering, which depends on the backend, so the target
supplies it as a `Hold` (``Target(factory, hold=...)``):

- `ProxyHold`: the loopback stall proxy
  (`StallProxy`) between a network
  client and its server stops forwarding (S3, Azure Blob, Redis, any adapter
  whose factory accepts ``endpoint``);
- `PausedProcess`: ``SIGSTOP`` of a server process that the tests
  started themselves (a ``valkey-server``), ``SIGCONT`` to release;
- `HeldLock`: any lock or transaction the adapter waits for, taken and
  released by two callables (``LOCK TABLES``, ``CLIENT PAUSE``, an adapter's
  own lock, a paused worker thread);
- `SQLiteLock`: a write transaction (``BEGIN IMMEDIATE``) on a second
  connection to the adapter's database file;
- `FileLock`: the file adapter's own cross-process ``flock``;
- `MemoryPause`: the in-memory adapter's pause
  (`pause`): its operations
  never yield, so nothing else can hold one; paused, each waits before it
  touches the data, as a request waits for a server that stopped answering;
- `LargeValue`: no hold at all, only a value large enough that writing
  it takes a while (the fallback for an adapter the suite knows nothing about;
  when the put is not caught in flight the tests say "not exercised").

Each hold says which operations it holds (`Hold.operations`): a lock
taken by writers holds ``put``, ``delete`` and ``delete_many`` but not reads
that never take it. A held-backend test of an operation that the target's hold
does not hold, or of a target that supplies no hold, is reported as *not
exercised*, with the reason: never as a pass, never as a quiet skip.

A hold may also decide which client the test uses (`Hold.client`): the
stall proxy needs a storage opened through it. Holds are copied per test, so
one may keep per-test state on ``self``.
"""

from __future__ import annotations

import asyncio
import fcntl
import inspect
import os
import signal
import sqlite3
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .proxy import StallProxy
    from .target import Target

__all__ = [
    "ALL_OPERATIONS",
    "WRITES",
    "FileLock",
    "HeldLock",
    "Hold",
    "LargeValue",
    "MemoryPause",
    "Operation",
    "PausedProcess",
    "ProxyHold",
    "SQLiteLock",
    "default_hold",
]

Operation = Literal["put", "delete", "delete_many", "get", "list"]
"""An operation a held-backend test runs while the backend is held."""

ALL_OPERATIONS: tuple[Operation, ...] = ("put", "delete", "delete_many", "get", "list")
"""Every operation with a held-backend test."""

WRITES: frozenset[Operation] = frozenset({"put", "delete", "delete_many"})
"""The writes: what a writers' lock holds."""


class Hold:
    """Makes the backend stop answering until released; the base holds nothing.

    Subclasses override `held` (and `operations`); the others have
    defaults that fit most holds.

    Attributes:
        name: what holds the backend, for messages (``"a held file lock"``).
        operations: the operations that wait while the backend is held.
        hold_for: seconds the suite waits after starting an operation before it
            checks that the operation is held (still running).
        stops_backend: the backend does not answer at all inside `held` (False for
            `LargeValue`, which only makes one put take a while).
    """

    name: str = "nothing"
    operations: frozenset[Operation] = frozenset()
    hold_for: float = 0.05
    stops_backend: bool = True

    def holds(self, operation: Operation) -> bool:
        """Whether ``operation`` waits while the backend is held."""
        return operation in self.operations

    def value(self) -> bytes:
        """The value a held put writes (64 KiB by default)."""
        return b"n" * (64 * 1024)

    async def prepare(self, storage: Any, key: str) -> None:
        """Called once before `held`, with the test's storage (timing may be set here)."""

    @asynccontextmanager
    async def client(
        self, target: Target | None, storage: Any, location: str | None
    ) -> AsyncIterator[Any]:
        """The storage whose operations the hold stops: by default the test's own ``storage``.

        Args:
            target: the suite's target (None when a test class gives only ``storage``).
            storage: the test's storage (opened at ``location``).
            location: where the test's data is (None when the target cannot reopen it).
        """
        yield storage

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Inside this context the backend of ``storage`` does not answer.

        ``storage`` is the adapter's own object (under the suite's wrappers);
        ``key`` the key the held operation works on. Leaving the context lets
        the backend go on: that is when a cancelled write that was not settled
        would land.
        """
        yield

    async def caught(self, task: asyncio.Future[Any]) -> bool:
        """Wait until ``task`` (an operation just started) is held; False if it finished."""
        await asyncio.wait({task}, timeout=self.hold_for)
        return not task.done()


class LargeValue(Hold):
    """No hold: a value so large that the backend takes a while to take it.

    `prepare` times two puts of the value (the faster counts), and the
    suite then cancels the put a third of that time after it started: in the
    middle of the write, whatever the backend's speed. It holds only puts, and
    only when the backend is slow enough.

    Args:
        size: bytes of the value (default 32 MiB).
    """

    operations: frozenset[Operation] = frozenset({"put"})
    stops_backend = False

    def __init__(self, size: int = 32 * 1024 * 1024) -> None:
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"LargeValue size must be a positive int, not {size!r}")
        self.size = size
        self.name = f"a {size / (1024 * 1024):g} MiB value"
        self.hold_for = 0.02
        self._value: bytes | None = None

    def value(self) -> bytes:
        """``size`` bytes that no compression shortens much (a repeated random block)."""
        if self._value is None:
            block = os.urandom(64 * 1024)
            self._value = (block * (self.size // len(block) + 1))[: self.size]
        return self._value

    async def prepare(self, storage: Any, key: str) -> None:
        """Time two puts of the value (to a scratch key, deleted after); keep the faster.

        The first put can pay costs the held put does not (a new file, a cold
        cache, a growing log): timed alone, a third of it can outlast the whole
        held put, which then finishes before it is cancelled.
        """
        scratch = f"{key}-timing"
        took = float("inf")
        for _ in range(2):
            start = time.monotonic()
            await storage.put(scratch, self.value())
            took = min(took, time.monotonic() - start)
        await storage.delete(scratch)
        self.hold_for = min(max(took / 3, 0.005), 1.0)


class HeldLock(Hold):
    """A lock or transaction of the backend, held from outside the storage under test.

    Args:
        begin: takes the lock (sync or async; a sync one runs in a thread).
        end: releases it (sync or async).
        name: what it is, for messages (``"a write transaction on a second connection"``).
        operations: the operations that wait for the lock (default: the writes).
    """

    def __init__(
        self,
        begin: Callable[[], Any] | Callable[[], Awaitable[Any]],
        end: Callable[[], Any] | Callable[[], Awaitable[Any]],
        *,
        name: str = "a held lock",
        operations: Collection[Operation] = WRITES,
    ) -> None:
        self._begin = begin
        self._end = end
        self.name = name
        self.operations = _operations(operations)

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Take the lock, yield, release it."""
        await _call(self._begin)
        try:
            yield
        finally:
            await _call(self._end)


class SQLiteLock(Hold):
    """A write transaction on a second connection to the adapter's database file.

    ``BEGIN IMMEDIATE`` takes SQLite's write lock; the adapter's writer waits
    for it (up to its ``busy_timeout``). Readers of a database in WAL mode
    never wait for a writer, so only the writes are held.

    Args:
        path: the database file; None reads it from the storage's ``path``.
    """

    name = "a write transaction on a second connection to the database"
    operations: frozenset[Operation] = WRITES

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else os.fspath(path)

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Hold ``BEGIN IMMEDIATE`` on a connection of the suite's own; roll back on exit."""
        path = self.path if self.path is not None else os.fspath(storage.path)

        def begin() -> sqlite3.Connection:
            conn = sqlite3.connect(
                path, timeout=10.0, isolation_level=None, check_same_thread=False
            )
            try:
                conn.execute("BEGIN IMMEDIATE")
            except BaseException:
                conn.close()
                raise
            return conn

        conn = await asyncio.to_thread(begin)
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()


class FileLock(Hold):
    """The file adapter's ``flock`` of the key's directory, held by the suite.

    A put (every mode), a delete and a delete_many take that lock right before
    their commit; holding it from another open file description makes the
    worker thread wait there, so the cancellation lands while the write is
    half done. Reads never take it.
    """

    name = "the file adapter's directory lock, held by the suite"
    operations: frozenset[Operation] = WRITES

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Hold the lock stripe that a write of ``key`` on ``storage`` takes."""
        from ..adapters import file as file_adapter

        # The adapter's own mapping: one of LOCK_STRIPES lock files per directory.
        rel_dir = storage._map(key).rel_dir
        stripe = zlib.crc32(rel_dir.encode()) % file_adapter.LOCK_STRIPES
        lock_dir = os.path.join(storage.root, file_adapter.LOCK_DIR)
        os.makedirs(lock_dir, exist_ok=True)
        fd = os.open(os.path.join(lock_dir, f"{stripe:02d}"), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


class MemoryPause(Hold):
    """The in-memory adapter's own pause: every operation waits until it is released.

    `MemoryStorage` never yields, so no
    lock, proxy or stopped process can catch one of its operations in flight;
    its `pause` makes each
    operation wait, before it touches the data, until the pause ends.
    """

    name = "the memory adapter's pause"
    operations: frozenset[Operation] = frozenset(ALL_OPERATIONS)

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Pause ``storage``'s data; resume on exit."""
        resume = storage.pause()
        try:
            yield
        finally:
            resume()


class PausedProcess(Hold):
    """``SIGSTOP`` of a server process that the tests started; ``SIGCONT`` releases it.

    Every request waits, reads included. Use it only on a process of your
    own: a stopped server stops answering every client of it.

    Args:
        pid: the server's process id (or a callable giving it).
        name: for messages.
    """

    operations: frozenset[Operation] = frozenset(ALL_OPERATIONS)

    def __init__(self, pid: int | Callable[[], int], *, name: str = "") -> None:
        self._pid = pid
        self.name = name or "the server process, stopped with SIGSTOP"

    @property
    def pid(self) -> int:
        """The process id to stop."""
        return self._pid() if callable(self._pid) else self._pid

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Stop the process; continue it on exit."""
        pid = self.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


class ProxyHold(Hold):
    """The loopback stall proxy between the client and its server stops forwarding.

    The test's client is opened through a fresh
    `StallProxy` (the target's factory
    must accept ``endpoint`` and the target must name its ``upstream``); the
    hold stops forwarding requests. Every operation waits, reads included,
    and the operation is known to be held once the proxy holds its bytes.
    """

    name = "the stall proxy, not forwarding requests"
    operations: frozenset[Operation] = frozenset(ALL_OPERATIONS)

    def __init__(self) -> None:
        self._proxy: StallProxy | None = None

    @asynccontextmanager
    async def client(
        self, target: Target | None, storage: Any, location: str | None
    ) -> AsyncIterator[Any]:
        """A second storage at ``location``, opened through a new stall proxy.

        Raises:
            ValueError: the target has no upstream server or takes no endpoint.
        """
        from .proxy import StallProxy

        if target is None or not target.proxyable or target.upstream is None:
            raise ValueError(
                "ProxyHold needs a target whose factory accepts 'endpoint' and that names "
                "its server in Target.upstream"
            )
        async with (
            StallProxy(target.upstream) as proxy,
            target.open(endpoint=proxy.address, location=location) as proxied,
        ):
            self._proxy = proxy
            try:
                yield proxied
            finally:
                self._proxy = None

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Stop forwarding requests; forward again on exit.

        Raises:
            RuntimeError: the test's client was not opened by `client`.
        """
        proxy = self._proxy
        if proxy is None:
            raise RuntimeError("ProxyHold.held needs the client that ProxyHold.client opened")
        proxy.stall("request", partial=True)
        try:
            yield
        finally:
            proxy.resume()

    async def caught(self, task: asyncio.Future[Any]) -> bool:
        """Wait until the proxy holds bytes of ``task``'s request (10 s at most)."""
        proxy = self._proxy
        assert proxy is not None
        return await proxy.holding(task, 10)


def _operations(operations: Collection[Operation]) -> frozenset[Operation]:
    ops = frozenset(operations)
    unknown = ops - set(ALL_OPERATIONS)
    if unknown:
        raise ValueError(
            f"a hold holds some of {', '.join(ALL_OPERATIONS)}, not {', '.join(sorted(unknown))}"
        )
    return ops


async def _call(fn: Callable[[], Any]) -> None:
    if inspect.iscoroutinefunction(fn):
        await fn()
        return
    result = await asyncio.to_thread(fn)
    if inspect.isawaitable(result):
        await result


def default_hold(raw: Any) -> Hold:
    """The hold of a built-in adapter object ``raw``; `LargeValue` for any other.

    The suite uses it when the target supplies no hold, and the test class
    does not override the ``backend_stall`` fixture.
    """
    from ..adapters.file import FileStorage
    from ..adapters.memory import MemoryStorage
    from ..adapters.sqlite import SQLiteStorage

    if isinstance(raw, FileStorage):
        return FileLock()
    if isinstance(raw, SQLiteStorage):
        return SQLiteLock()
    if type(raw) is MemoryStorage:  # a subclass may have changed how it works
        return MemoryPause()
    return LargeValue()

"""Outages: what makes a target's backend fail until the suite restores it.

Every operation of the protocol may raise ``StorageUnavailable`` when its
backend failed or did not answer after the adapter's retries, with the
backend's own error chained (clause ``error.unavailable``). The backend-down
tests (`UnavailableTests`) check that
promise: they take the backend down with the target's `Outage`, call each
operation, and expect ``StorageUnavailable`` (an ``OutcomeUnknown`` for a
write is one) within a bound, never a raw socket or driver error, never a
hang, never an answer made up while nothing could be asked; once the backend
is back, the same client answers again and nothing stored before was lost.

How a backend goes down depends on the backend, so the target supplies it
(``Target(factory, outage=...)``), as it supplies a `Hold`:

- `ProxyOutage`: the loopback stall proxy
  (`StallProxy`) between a network
  client and its server resets every connection and every new one, as a
  server that crashed does (S3, Azure Blob, Redis, PostgreSQL, any adapter
  whose factory accepts ``endpoint``); with an `ErrorAnswer`, it
  stays up instead and answers every HTTP request with that error, a 503 by
  default, as a server that is overloaded does (every proxyable target is
  tried with it: one whose requests are not HTTP/1.1 has that test reported
  as not exercised);
- `SQLiteOutage`: another connection holds the database's write lock for
  longer than the client's ``busy_timeout`` (writes only: a reader of a
  database in WAL mode never waits for a writer);
- `FileOutage`: the storage's root directory is moved away and a plain
  file put in its place, as an unmounted or vanished disk (only for a root
  that the suite made itself: it never moves a directory it was given);
- `NoBackend`: an in-process storage (`MemoryStorage`) has no backend that
  can fail; its backend-down cells are unreachable.

Each outage says which operations fail during it (`Outage.operations`), and
whether it can start partway through a call (`Outage.partway`: the stall proxy
lets the server answer one request and resets everything at the next, which
cuts a ``delete_many`` sent in several requests between two of them). A
target that supplies none gets its backend-down tests reported as *not
exercised*, with the reason: never as a pass, never as a quiet skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from .holds import ALL_OPERATIONS, WRITES, Operation

if TYPE_CHECKING:
    from .proxy import ErrorAnswer, StallProxy
    from .target import Target

__all__ = [
    "FileOutage",
    "NoBackend",
    "Outage",
    "ProxyOutage",
    "SQLiteOutage",
    "default_outage",
]


class Outage:
    """Makes the backend fail until restored; the base fails nothing.

    Subclasses override `down` (and `operations`, `client`).

    Attributes:
        name: what takes the backend down, for messages.
        operations: the operations that fail while the backend is down.
        can_fail: False for a storage with no backend that can fail (`NoBackend`):
            its backend-down cells are then unreachable, not unexercised.
        partway: the outage can start partway through a call (`down_partway`).
    """

    name: str = "nothing"
    operations: frozenset[Operation] = frozenset()
    can_fail: bool = True
    partway: bool = False

    def fails(self, operation: Operation) -> bool:
        """Whether ``operation`` fails while the backend is down."""
        return operation in self.operations

    @asynccontextmanager
    async def client(
        self, target: Target | None, storage: Any, location: str | None
    ) -> AsyncIterator[Any]:
        """The storage whose backend goes down: by default the test's own ``storage``.

        Args:
            target: the suite's target (None when a test class gives only ``storage``).
            storage: the test's storage (opened at ``location``).
            location: where the test's data is (None when the target cannot reopen it).
        """
        yield storage

    @asynccontextmanager
    async def down(self, storage: Any) -> AsyncIterator[None]:
        """Inside this context the backend of ``storage`` fails.

        ``storage`` is the adapter's own object (under the suite's wrappers).
        Leaving the context restores the backend as it was, with its data.
        """
        yield

    @asynccontextmanager
    async def down_partway(self, storage: Any) -> AsyncIterator[Callable[[], bool]]:
        """Inside this context the backend of ``storage`` answers what it was asked until
        it has answered once, then goes down at the next request: partway through a call
        that sends several (a ``delete_many`` in batches). Yields whether it went down.
        Only where `partway` is true; leaving the context restores the backend.

        Raises:
            NotImplementedError: the outage cannot start partway through a call.
        """
        raise NotImplementedError(f"{self.name} cannot start partway through a call")
        yield lambda: False  # pragma: no cover


class NoBackend(Outage):
    """An in-process storage: there is no backend that could fail, so nothing to test."""

    name = "no backend (the storage keeps its data in the process)"
    can_fail = False


class ProxyOutage(Outage):
    """The stall proxy between the client and its server resets every connection.

    The test's client is opened through a fresh
    `StallProxy` (the target's factory
    must accept ``endpoint`` and the target must name its ``upstream``). Down,
    the proxy resets the client's connections and every new one as soon as it
    is accepted: what a client sees of a server that crashed and restarts. With
    ``answer``, it resets the client's connections, then answers every request on
    a new one with that error (HTTP, Redis or PostgreSQL): a server that is up and
    fails.

    Args:
        answer: the answer to every request while down; None resets instead.

    Attributes:
        answered: requests the proxy answered with ``answer`` during the last `down`.
        unrecognized: connections it reset during the last `down` because they did not
            start with an HTTP/1.1 request, a Redis command or a PostgreSQL startup.
    """

    name = "the stall proxy, resetting every connection"
    operations: frozenset[Operation] = frozenset(ALL_OPERATIONS)
    partway = True

    def __init__(self, answer: ErrorAnswer | None = None) -> None:
        self._proxy: StallProxy | None = None
        self.answer = answer
        self.answered = self.unrecognized = 0
        if answer is not None:
            self.name = (
                f"the stall proxy answering every request with an error (HTTP {answer.status}"
                f" {answer.reason}, Redis -{answer.resp.split()[0]},"
                f" PostgreSQL {answer.sqlstate})"
            )
            self.partway = False

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
                "ProxyOutage needs a target whose factory accepts 'endpoint' and that names "
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
    async def down(self, storage: Any) -> AsyncIterator[None]:
        """Reset every connection, and every new one, until the context ends.

        Raises:
            RuntimeError: the test's client was not opened by `client`.
        """
        proxy = self._proxy
        if proxy is None:
            raise RuntimeError("ProxyOutage.down needs the client that ProxyOutage.client opened")
        if self.answer is None:
            await proxy.refuse()
        else:
            await proxy.answer(self.answer)
            await _meet_the_reset(storage)
            proxy.answered = proxy.unrecognized = 0
        try:
            yield
        finally:
            self.answered, self.unrecognized = proxy.answered, proxy.unrecognized
            proxy.accept()

    @asynccontextmanager
    async def down_partway(self, storage: Any) -> AsyncIterator[Callable[[], bool]]:
        """Forward until the server answered once; reset every connection at the next
        request and refuse new ones until the context ends
        (`StallProxy.refuse_after_an_answer`).

        Raises:
            RuntimeError: the test's client was not opened by `client`.
        """
        proxy = self._proxy
        if proxy is None:
            raise RuntimeError(
                "ProxyOutage.down_partway needs the client that ProxyOutage.client opened"
            )
        proxy.refuse_after_an_answer()
        try:
            yield lambda: proxy.tripped
        finally:
            proxy.accept()


RECONNECT_KEY = "checkpointkit-conformance-reconnect"
"""The key a throwaway read asks for once an answering outage began (`_meet_the_reset`)."""


_MEET_THE_RESET = 0.5
"""Seconds the throwaway read of `_meet_the_reset` may take: its first request meets the
reset at once; a client's retries after that (with their backoff) are not needed."""


async def _meet_the_reset(storage: Any) -> None:
    """One read, whatever it answers or raises, cut off after `_MEET_THE_RESET` seconds: a
    client that keeps its connection finds it reset there, so that the call under test
    goes on a new connection, which the proxy answers (a client that reconnects only on
    its next call would otherwise never reach the answer)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(_MEET_THE_RESET):
            await storage.get(RECONNECT_KEY)


class SQLiteOutage(Outage):
    """Another connection holds the database's write lock past the client's busy timeout.

    For checkpointkit's own `SQLiteStorage`, the test's client is a second
    storage on the same file, under the same key prefixes, that waits
    ``busy_timeout`` seconds (0.25 by default) for the lock. Any other adapter
    on a SQLite file (with a ``path`` attribute) is its own client: it must give
    up within the suite's bound (30 s) and raise ``StorageUnavailable``, so
    give its factory a short busy timeout. Readers of a database in WAL mode
    never wait for a writer, so reads do not fail.

    Args:
        busy_timeout: the second client's ``busy_timeout``, in seconds.
    """

    name = "a write lock held past busy_timeout by a second connection"
    operations: frozenset[Operation] = WRITES

    def __init__(self, busy_timeout: float = 0.25) -> None:
        self.busy_timeout = busy_timeout

    @asynccontextmanager
    async def client(
        self, target: Target | None, storage: Any, location: str | None
    ) -> AsyncIterator[Any]:
        """A second storage on the database of ``storage``, with a short ``busy_timeout``."""
        from ..adapters.sqlite import SQLiteStorage
        from .target import PrefixedStorage

        prefix, raw = _prefix_and_raw(storage)
        if not isinstance(raw, SQLiteStorage):
            yield storage  # another adapter: its own busy timeout applies
            return
        second = SQLiteStorage(
            raw.path, busy_timeout=self.busy_timeout, create=False, fsync=raw.fsync
        )
        client: Any = PrefixedStorage(second, prefix) if prefix else second
        async with client:
            yield _probed(target, storage, client)

    @asynccontextmanager
    async def down(self, storage: Any) -> AsyncIterator[None]:
        """Hold ``BEGIN IMMEDIATE`` on a connection of the suite's own; roll back on exit."""
        path = os.fspath(storage.path)

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


class FileOutage(Outage):
    """The storage's root directory moves away and a plain file takes its place.

    Every path under the root then fails with ``ENOTDIR``, as on a disk that
    vanished. On exit the file is removed and the directory moved back, with
    everything in it. Use it only on a root that the tests made themselves.
    """

    name = "the root directory moved away, a plain file in its place"
    operations: frozenset[Operation] = frozenset(ALL_OPERATIONS)

    @asynccontextmanager
    async def down(self, storage: Any) -> AsyncIterator[None]:
        """Move ``storage.root`` aside and put a file there; put it back on exit."""
        root = os.fspath(storage.root)
        aside = await asyncio.to_thread(_move_aside, root)
        try:
            yield
        finally:
            await asyncio.to_thread(_put_back, root, aside)


def _move_aside(root: str) -> str:
    """Move the directory ``root`` aside, put a plain file in its place; return where it went."""
    aside = f"{root}.down-{uuid.uuid4().hex[:8]}"
    os.rename(root, aside)
    try:
        with open(root, "wb") as f:
            f.write(b"the storage's root is down for a test\n")
    except BaseException:
        os.rename(aside, root)
        raise
    return aside


def _put_back(root: str, aside: str) -> None:
    """Undo `_move_aside`."""
    if os.path.isdir(root):  # something made the directory again: drop what it wrote
        shutil.rmtree(root)
    elif os.path.lexists(root):
        os.unlink(root)
    os.rename(aside, root)


def _prefix_and_raw(storage: Any) -> tuple[str, Any]:
    """The key prefix that the suite's wrappers add, and the adapter's own object."""
    from .target import PrefixedStorage

    prefix = ""
    while hasattr(storage, "inner"):
        if isinstance(storage, PrefixedStorage):
            prefix += storage.prefix
        storage = storage.inner
    return prefix, storage


def _probed(target: Target | None, storage: Any, client: Any) -> Any:
    """``client`` recorded under the coverage of the probe that wraps ``storage``, if any."""
    from .coverage import CoverageProbe, Reach

    probe = storage
    while not isinstance(probe, CoverageProbe) and hasattr(probe, "inner"):
        probe = probe.inner
    if target is None or not isinstance(probe, CoverageProbe):
        return client
    snapshot = probe._rec.snapshot(probe._name)
    if snapshot is None or not isinstance(snapshot[0], Reach):
        return client
    return CoverageProbe(client, probe._name, snapshot[0], holds_key=probe._holds, into=probe._rec)


def default_outage(raw: Any) -> Outage | None:
    """The outage of a built-in adapter object ``raw`` (None for any other).

    `SQLiteOutage` for a `SQLiteStorage`, `NoBackend` for a `MemoryStorage`.
    None for a `FileStorage`: the suite does not move a directory it may have
    been given (a target whose root the tests made gives ``outage=FileOutage()``).
    """
    from ..adapters.memory import MemoryStorage
    from ..adapters.sqlite import SQLiteStorage

    if isinstance(raw, SQLiteStorage):
        return SQLiteOutage()
    if type(raw) is MemoryStorage:
        return NoBackend()
    return None

"""Holding an operation inside a backend that has no TCP endpoint to stall.

The loopback stall proxy (:mod:`~checkpointkit.conformance.proxy`) holds a
network adapter's request mid-flight. An adapter without a TCP endpoint (a
file, an embedded database, a thread-wrapped client) needs another way to keep
a put inside the backend long enough to cancel it there. A :class:`Stall`
gives the value to write and a context inside which a put of it is held:

- :class:`LargeValue`: a value large enough that writing it takes a while
  (the default for an adapter the suite knows nothing about);
- :class:`FileLock`: the file adapter's own cross-process ``flock`` on the
  key's directory, held from another open file description, so the put
  blocks right before its commit;
- :class:`HeldLock`: any lock or transaction the adapter waits for, taken
  and released by two callables (``BEGIN IMMEDIATE`` on a second SQLite
  connection, ``LOCK TABLES``, a Redis ``CLIENT PAUSE``...).

A backend picks one by overriding the ``backend_stall`` fixture::

    @pytest.fixture
    def backend_stall(self, storage):
        return HeldLock(begin=lock_db, end=unlock_db, name="a write transaction")
"""

from __future__ import annotations

import asyncio
import fcntl
import inspect
import os
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["FileLock", "HeldLock", "LargeValue", "Stall", "default_stall"]


class Stall:
    """How to hold a put inside the backend; the base holds nothing.

    Attributes:
        name: what holds the put, for messages (``"a held file lock"``).
        hold_for: seconds the suite lets the put run before checking that it
            is held (still running) and cancelling it.
    """

    name: str = "nothing"
    hold_for: float = 0.05

    def value(self) -> bytes:
        """The value to put (64 KiB by default)."""
        return b"n" * (64 * 1024)

    async def prepare(self, storage: Any, key: str) -> None:
        """Called once before :meth:`held`, with the suite's storage (timing may be set here)."""

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Inside this context, a put of ``key`` on ``storage`` is held in the backend.

        ``storage`` is the adapter's own object (under the suite's wrappers).

        Leaving it lets the backend go on: that is when a cancelled write that
        was not settled would land.
        """
        yield


class LargeValue(Stall):
    """A value so large that the backend takes a while to take it.

    :meth:`prepare` times two puts of the value (the faster counts), and the suite then cancels
    the held put a third of that time after it started: in the middle of the
    write, whatever the backend's speed.

    Args:
        size: bytes of the value (default 32 MiB).
    """

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


class HeldLock(Stall):
    """A lock or transaction of the backend, held from outside the storage under test.

    Args:
        begin: takes the lock (sync or async; a sync one runs in a thread).
        end: releases it (sync or async).
        name: what it is, for messages (``"a write transaction on a second connection"``).
    """

    def __init__(
        self,
        begin: Callable[[], Any] | Callable[[], Awaitable[Any]],
        end: Callable[[], Any] | Callable[[], Awaitable[Any]],
        *,
        name: str = "a held lock",
    ) -> None:
        self._begin = begin
        self._end = end
        self.name = name

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Take the lock, yield, release it."""
        await _call(self._begin)
        try:
            yield
        finally:
            await _call(self._end)


async def _call(fn: Callable[[], Any]) -> None:
    if inspect.iscoroutinefunction(fn):
        await fn()
        return
    result = await asyncio.to_thread(fn)
    if inspect.isawaitable(result):
        await result


class FileLock(Stall):
    """The file adapter's ``flock`` of the key's directory, held by the suite.

    A put (every mode) takes that lock right before its commit; holding it
    from another open file description makes the put's worker thread wait
    there, so the cancellation lands while the write is half done.
    """

    name = "the file adapter's directory lock, held by the suite"

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        """Hold the lock stripe that a put of ``key`` on ``storage`` takes."""
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


def default_stall(raw: Any) -> Stall:
    """The stall the suite uses for the adapter object ``raw`` unless told otherwise."""
    from ..adapters.file import FileStorage

    if isinstance(raw, FileStorage):
        return FileLock()
    return LargeValue()

"""A connection pool that hands out and takes back an idle connection without awaiting.

The PostgreSQL adapter's pool. asyncpg's own ``Pool`` spends three event-loop
iterations on an acquire and a release that do no I/O at all (the release runs
in a new task under ``asyncio.shield``, inside a timeout, with a reset hook and
an inactivity timer armed again each time): on a loopback server that is about
as much time as the statement itself. Here an idle connection is taken from a
list and given back to it (or straight to the longest waiter) synchronously;
only opening a connection, or waiting for one when all ``size`` are in use,
awaits.

The connections are duck-typed (``is_closed()``, ``terminate()`` and
``close(timeout=...)``, as asyncpg's ``Connection`` has), so the pool is tested
without a server. Connections idle for ``idle_lifetime`` seconds are closed by
one timer (no task). A connection whose state is unknown (a statement cancelled
or failed mid-way) is never given back: its user calls `Pool.discard`, which
terminates it and frees its slot for a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["Pool", "PoolClosed"]


class _Connection(Protocol):
    def is_closed(self) -> bool: ...

    def terminate(self) -> None: ...

    async def close(self, *, timeout: float | None = None) -> None: ...


C = TypeVar("C", bound=_Connection)


class PoolClosed(Exception):
    """The pool was closed (before or while waiting for a connection)."""


class Pool(Generic[C]):
    """At most ``size`` connections opened by ``connect``, handed out one user at a time.

    Args:
        connect: opens one connection (and prepares it); a failure is raised to
            the `acquire` that asked for it.
        size: most connections open (or being opened) at once.
        idle_lifetime: seconds after which a connection nobody used is closed.
    """

    def __init__(
        self, connect: Callable[[], Awaitable[C]], *, size: int, idle_lifetime: float
    ) -> None:
        self._connect = connect
        self._size = size
        self._lifetime = idle_lifetime
        self._idle: list[tuple[C, float]] = []  # (connection, when released), oldest first
        self._in_use: set[C] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[C | None]] = deque()
        self._closed = False
        self._sweep: asyncio.TimerHandle | None = None
        self._drained: asyncio.Future[None] | None = None

    @property
    def closed(self) -> bool:
        """Whether `close` or `terminate` was called."""
        return self._closed

    def __len__(self) -> int:
        """Connections open or being opened."""
        return len(self._idle) + len(self._in_use) + self._opening

    async def acquire(self, timeout: float) -> C:
        """A connection for the caller alone until it calls `release` or `discard`.

        The most recently released idle connection if there is one (no await);
        else a new one if fewer than ``size`` are open; else the first one
        released, in the order the callers came.

        Raises:
            PoolClosed: the pool was closed, before or during the wait.
            TimeoutError: no connection within ``timeout`` seconds (opening
                included).
            Exception: what ``connect`` raised.
        """
        conn = self._take_idle()
        if conn is not None:
            return conn
        async with asyncio.timeout(timeout):
            return await self._acquire_waiting()

    def take(self) -> C | None:
        """An idle connection for the caller alone, or None (none idle, or the pool closed)."""
        return None if self._closed else self._take_idle()

    def _take_idle(self) -> C | None:
        if self._closed:
            raise PoolClosed("the pool is closed")
        while self._idle:
            conn = self._idle.pop()[0]
            if conn.is_closed():  # lost while idle (the server went away)
                continue
            self._in_use.add(conn)
            return conn
        return None

    async def _acquire_waiting(self) -> C:
        loop = asyncio.get_running_loop()
        while True:
            conn = self._take_idle()
            if conn is not None:
                return conn
            if len(self) < self._size:
                return await self._open()
            waiter: asyncio.Future[C | None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                got = await waiter
            except BaseException:
                if not waiter.done() or waiter.cancelled() or waiter.exception() is not None:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                else:  # handed a connection or a slot just as the caller gave up: pass it on
                    handed = waiter.result()
                    if handed is None:
                        self._wake_one()
                    else:
                        self.release(handed)
                raise
            if got is not None:
                return got  # handed over by release(), already counted in use
            # None: a slot was freed (a connection discarded): open one, or wait again

    async def _open(self) -> C:
        self._opening += 1
        try:
            conn = await self._connect()
        except BaseException:
            self._opening -= 1
            self._wake_one()  # the slot is free again
            self._check_drained()
            raise
        self._opening -= 1
        if self._closed:
            conn.terminate()
            self._check_drained()
            raise PoolClosed("the pool was closed while a connection was being opened")
        self._in_use.add(conn)
        return conn

    def release(self, conn: C) -> None:
        """Give back a connection that is ready for its next statement (no await)."""
        if conn not in self._in_use:
            return
        if self._closed or conn.is_closed():
            self.discard(conn)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)  # stays in use: the waiter has it now
                return
        self._in_use.remove(conn)
        loop = asyncio.get_running_loop()
        self._idle.append((conn, loop.time()))
        if self._sweep is None:
            self._sweep = loop.call_at(self._idle[0][1] + self._lifetime, self._expire)

    def discard(self, conn: C) -> None:
        """Terminate a connection whose state is unknown and free its slot (no await)."""
        conn.terminate()
        if conn in self._in_use:
            self._in_use.remove(conn)
            self._wake_one()
            self._check_drained()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _expire(self) -> None:
        self._sweep = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self._lifetime
        expired = 0
        while expired < len(self._idle) and self._idle[expired][1] <= cutoff:
            expired += 1
        old, self._idle = self._idle[:expired], self._idle[expired:]
        for conn, _ in old:
            conn.terminate()
        if self._idle and not self._closed:
            self._sweep = loop.call_at(self._idle[0][1] + self._lifetime, self._expire)

    def _check_drained(self) -> None:
        drained = self._drained
        if drained is not None and not drained.done() and not self._in_use and not self._opening:
            drained.set_result(None)

    def _shut(self) -> list[C]:
        """Refuse new users, fail the waiters; return the idle connections (now detached)."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(PoolClosed("the pool is closed"))
        idle = [conn for conn, _ in self._idle]
        self._idle = []
        return idle

    async def close(self, timeout: float) -> None:
        """Close the idle connections, then wait until every one in use has come back.

        Each idle connection is closed gracefully (the server told), all at once, within
        ``timeout`` seconds; one whose server does not answer by then is terminated (a
        server that is stopped or cut off never answers a goodbye). A connection given
        back after this is terminated. The caller bounds the wait for the ones in use
        (``asyncio.wait_for``) and calls `terminate` if it runs out.
        """
        idle = self._shut()
        try:
            await asyncio.gather(
                *(conn.close(timeout=timeout) for conn in idle), return_exceptions=True
            )
        finally:
            for conn in idle:
                if not conn.is_closed():
                    conn.terminate()
        if self._in_use or self._opening:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    def terminate(self) -> None:
        """Close every connection now, in use or not (no await)."""
        for conn in self._shut():
            conn.terminate()
        for conn in list(self._in_use):
            conn.terminate()
        self._in_use.clear()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

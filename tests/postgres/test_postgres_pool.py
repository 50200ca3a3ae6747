"""The PostgreSQL adapter's connection pool (``adapters/_pool.py``), with fake connections."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from checkpointkit.adapters._pool import Pool, PoolClosed


class FakeConnection:
    def __init__(self, number: int) -> None:
        self.number = number
        self.state = "open"  # "open", "closed" (gracefully) or "terminated"

    def is_closed(self) -> bool:
        return self.state != "open"

    def terminate(self) -> None:
        self.state = "terminated"

    async def close(self, *, timeout: float | None = None) -> None:
        self.state = "closed"

    def __repr__(self) -> str:
        return f"FakeConnection({self.number}, {self.state})"


class Opener:
    """The pool's ``connect``: numbered fake connections; fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.opened: list[FakeConnection] = []
        self.numbers = itertools.count()
        self.failing: BaseException | None = None
        self.gate: asyncio.Event | None = None  # when set: each connect waits for it

    async def __call__(self) -> FakeConnection:
        if self.gate is not None:
            await self.gate.wait()
        if self.failing is not None:
            raise self.failing
        conn = FakeConnection(next(self.numbers))
        self.opened.append(conn)
        return conn


def pool_of(size: int, lifetime: float = 60.0) -> tuple[Pool[FakeConnection], Opener]:
    opener = Opener()
    return Pool(opener, size=size, idle_lifetime=lifetime), opener


async def settle_loop() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_an_idle_connection_is_handed_out_and_taken_back_without_suspending() -> None:
    pool, opener = pool_of(2)
    first = await pool.acquire(1)
    pool.release(first)
    step = pool.acquire(1).__await__()
    with pytest.raises(StopIteration) as done:  # completes on its first step: no await
        step.send(None)
    assert done.value.value is first
    assert len(opener.opened) == 1


async def test_the_most_recently_released_connection_is_handed_out_first() -> None:
    pool, _ = pool_of(2)
    a, b = await pool.acquire(1), await pool.acquire(1)
    pool.release(a)
    pool.release(b)
    assert await pool.acquire(1) is b


async def test_no_more_than_size_connections_are_opened() -> None:
    pool, opener = pool_of(3)
    held = [await pool.acquire(1) for _ in range(3)]
    with pytest.raises(TimeoutError):
        await pool.acquire(0.05)
    assert len(opener.opened) == 3 == len(pool)
    for conn in held:
        pool.release(conn)


async def test_a_released_connection_goes_to_the_longest_waiter() -> None:
    pool, opener = pool_of(1)
    conn = await pool.acquire(1)
    first = asyncio.create_task(pool.acquire(1))
    await settle_loop()
    second = asyncio.create_task(pool.acquire(1))
    await settle_loop()
    pool.release(conn)
    assert await first is conn
    assert not second.done()
    pool.release(conn)
    assert await second is conn
    assert len(opener.opened) == 1


async def test_a_waiter_cancelled_after_the_handoff_passes_the_connection_on() -> None:
    pool, opener = pool_of(1)
    conn = await pool.acquire(1)
    cancelled = asyncio.create_task(pool.acquire(1))
    await settle_loop()
    other = asyncio.create_task(pool.acquire(1))
    await settle_loop()
    pool.release(conn)  # handed to ``cancelled``, which is cancelled before it resumes
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert await asyncio.wait_for(other, 1) is conn
    assert len(opener.opened) == 1


async def test_a_discarded_connection_is_terminated_and_frees_its_slot_for_a_waiter() -> None:
    pool, opener = pool_of(1)
    conn = await pool.acquire(1)
    waiter = asyncio.create_task(pool.acquire(1))
    await settle_loop()
    pool.discard(conn)
    assert conn.state == "terminated"
    fresh = await asyncio.wait_for(waiter, 1)
    assert fresh is not conn and fresh.state == "open"
    assert len(opener.opened) == 2 and len(pool) == 1


async def test_a_connection_lost_while_idle_is_not_handed_out() -> None:
    pool, _ = pool_of(1)
    conn = await pool.acquire(1)
    pool.release(conn)
    conn.state = "terminated"  # the server went away
    fresh = await pool.acquire(1)
    assert fresh is not conn and fresh.state == "open"


async def test_a_failed_connect_is_raised_and_frees_its_slot() -> None:
    pool, opener = pool_of(1)
    opener.failing = OSError("refused")
    with pytest.raises(OSError, match="refused"):
        await pool.acquire(1)
    assert len(pool) == 0
    opener.failing = None
    assert (await pool.acquire(1)).state == "open"


async def test_a_connect_cancelled_by_the_timeout_frees_its_slot() -> None:
    pool, opener = pool_of(1)
    opener.gate = asyncio.Event()
    with pytest.raises(TimeoutError):
        await pool.acquire(0.05)
    assert len(pool) == 0
    opener.gate.set()
    assert (await pool.acquire(1)).state == "open"


async def test_idle_connections_are_terminated_after_the_idle_lifetime() -> None:
    pool, _ = pool_of(2, lifetime=0.05)
    a, b = await pool.acquire(1), await pool.acquire(1)
    pool.release(a)
    await asyncio.sleep(0.03)
    pool.release(b)
    await asyncio.sleep(0.04)  # a has been idle 0.07 s, b 0.04 s
    assert (a.state, b.state) == ("terminated", "open")
    await asyncio.sleep(0.05)
    assert b.state == "terminated" and len(pool) == 0
    await pool.close(1)


async def test_close_closes_idle_connections_and_fails_waiters_and_later_acquires() -> None:
    pool, _ = pool_of(1)
    conn = await pool.acquire(1)
    waiter = asyncio.create_task(pool.acquire(1))
    await settle_loop()
    closing = asyncio.create_task(pool.close(1))
    await settle_loop()
    with pytest.raises(PoolClosed):
        await waiter
    assert not closing.done()  # a connection is still in use
    pool.release(conn)  # given back after close: terminated
    await asyncio.wait_for(closing, 1)
    assert conn.state == "terminated" and len(pool) == 0
    with pytest.raises(PoolClosed):
        await pool.acquire(1)


async def test_close_closes_idle_connections_gracefully() -> None:
    pool, _ = pool_of(2)
    a, b = await pool.acquire(1), await pool.acquire(1)
    pool.release(a)
    pool.release(b)
    await pool.close(1)
    assert (a.state, b.state) == ("closed", "closed")


class SilentServerConnection(FakeConnection):
    """A connection whose server never answers: its graceful close waits out the timeout
    (then aborts, as asyncpg's does). ``closing`` counts the closes under way at once."""

    closing = 0
    peak = 0

    async def close(self, *, timeout: float | None = None) -> None:
        cls = SilentServerConnection
        cls.closing += 1
        cls.peak = max(cls.peak, cls.closing)
        try:
            await asyncio.sleep(timeout if timeout is not None else 3600)
        finally:
            cls.closing -= 1
            self.state = "terminated"
        raise TimeoutError


async def test_close_terminates_an_idle_connection_whose_server_does_not_answer() -> None:
    """Every idle connection is told goodbye at once, each within the timeout: two whose
    server never answers wait out one timeout together, not one each, and end terminated;
    the close does not raise."""
    opened = [SilentServerConnection(0), SilentServerConnection(1), FakeConnection(2)]
    connections = iter(opened)

    async def connect() -> FakeConnection:
        return next(connections)

    pool: Pool[FakeConnection] = Pool(connect, size=3, idle_lifetime=60.0)
    conns = [await pool.acquire(1) for _ in range(3)]
    for conn in conns:
        pool.release(conn)
    await asyncio.wait_for(pool.close(0.05), 5)
    assert SilentServerConnection.peak == 2  # both goodbyes under way at once
    assert [c.state for c in opened] == ["terminated", "terminated", "closed"]


async def test_close_waits_for_a_connection_being_opened_and_terminates_it() -> None:
    pool, opener = pool_of(1)
    opener.gate = asyncio.Event()
    acquiring = asyncio.create_task(pool.acquire(1))
    await settle_loop()
    closing = asyncio.create_task(pool.close(1))
    await settle_loop()
    assert not closing.done()
    opener.gate.set()
    with pytest.raises(PoolClosed):
        await acquiring
    await asyncio.wait_for(closing, 1)
    assert [c.state for c in opener.opened] == ["terminated"]


async def test_terminate_ends_every_connection_in_use_or_idle() -> None:
    pool, _ = pool_of(2)
    a, b = await pool.acquire(1), await pool.acquire(1)
    pool.release(a)
    pool.terminate()
    assert (a.state, b.state) == ("terminated", "terminated")
    pool.release(b)  # a late return after terminate changes nothing
    assert len(pool) == 0


async def test_take_returns_an_idle_connection_or_none() -> None:
    pool, _ = pool_of(1)
    assert pool.take() is None  # nothing idle: the caller awaits acquire()
    conn = await pool.acquire(1)
    assert pool.take() is None  # the only one is in use
    pool.release(conn)
    assert pool.take() is conn
    pool.release(conn)
    await pool.close(1)
    assert pool.take() is None  # closed: acquire() raises PoolClosed

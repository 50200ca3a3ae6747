"""The deadline fence of every PostgreSQL write (`checkpointkit.adapters.postgres.fence`).

A write that reaches the server after its deadline (a loaded server, a slow network) is
refused by its fence: its statement, hence its transaction, is rolled back, and the adapter
sends it again with a new deadline. Each test gives the adapter a clock whose first deadlines
have already passed on the server, as if each statement had waited that long in the server's
queue, and checks three things: the server refused exactly those statements (its log), the
write then did what it should have done once (a create-only put or a conditional delete would
fail on its own earlier landing), and a server that is always past the deadline is an error
that writes nothing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from checkpointkit.adapters._deadline import ServerClock
from checkpointkit.adapters.postgres import ATTEMPTS, INLINE_MAX, LATE, PostgresStorage
from checkpointkit.conformance.servers.postgres import PostgresServer
from checkpointkit.errors import NotFound, StorageUnavailable
from checkpointkit.storage import IfMatch

PAST = 3600.0
"""Seconds by which a late deadline has passed when its statement runs."""


class _PastClock(ServerClock):
    """The storage's clock, but its first ``late`` deadlines have passed on the server."""

    __slots__ = ("asked", "late")

    def __init__(self, clock: ServerClock, late: int) -> None:
        super().__init__()
        self.lo, self.hi, self.at = clock.lo, clock.hi, clock.at
        self.late, self.asked = late, 0

    def deadline(self, now: float, window: float, window_min: float) -> tuple[float, float]:
        deadline, until = super().deadline(now, window, window_min)
        self.asked += 1
        return (deadline - PAST if self.asked <= self.late else deadline), until


def _refused(server: PostgresServer) -> int:
    """Statements that the server's fences refused so far (the error's lines in its log)."""
    assert server.directory is not None
    with open(os.path.join(server.directory, "server.log"), errors="replace") as log:
        return sum(1 for line in log if "ERROR:" in line and LATE in line)


def _late(storage: PostgresStorage, late: int) -> _PastClock:
    clock = _PastClock(storage._clock, late)
    storage._clock = clock
    return clock


Write = Callable[[PostgresStorage, str], Awaitable[Any]]


async def _put(s: PostgresStorage, key: str) -> Any:
    return await s.put(key, b"new")


async def _put_big(s: PostgresStorage, key: str) -> Any:
    return await s.put(key, b"n" * (INLINE_MAX + 1))  # BEGIN, the statement, fenced COMMIT


async def _create(s: PostgresStorage, key: str) -> Any:
    return await s.put(f"{key}-created", b"new", mode="create")  # a second landing would fail


async def _if_match(s: PostgresStorage, key: str) -> Any:
    version = (await s.get(key)).version
    return await s.put(key, b"new", mode=IfMatch(version))  # fails once the version moved


async def _delete(s: PostgresStorage, key: str) -> Any:
    return await s.delete(key)  # False if an earlier attempt had deleted it


async def _delete_if(s: PostgresStorage, key: str) -> Any:
    return await s.delete(key, if_match=(await s.get(key)).version)


async def _delete_many(s: PostgresStorage, key: str) -> Any:
    return await s.delete_many([key, f"{key}-absent"])  # 1: the number it deleted


WRITES: dict[str, tuple[Write, Callable[[Any], bool], bytes | None]] = {
    # the write, what its result must be, what the key holds after it (None: absent)
    "put": (_put, lambda r: isinstance(r, str), b"new"),
    "put, staged": (_put_big, lambda r: isinstance(r, str), b"n" * (INLINE_MAX + 1)),
    "create": (_create, lambda r: isinstance(r, str), b"old"),
    "if-match": (_if_match, lambda r: isinstance(r, str), b"new"),
    "delete": (_delete, lambda r: r is True, None),
    "conditional delete": (_delete_if, lambda r: r is True, None),
    "delete_many": (_delete_many, lambda r: r == 1, None),
}


async def _held(storage: PostgresStorage, key: str) -> bytes | None:
    try:
        return (await storage.get(key)).data
    except NotFound:
        return None


@pytest.mark.parametrize("name", list(WRITES))
async def test_a_write_past_its_deadline_is_refused_then_sent_again_and_lands_once(
    pg_server: PostgresServer, name: str
) -> None:
    write, result_ok, after = WRITES[name]
    key = f"runs/fence/{uuid.uuid4().hex}"
    async with PostgresStorage.from_url(pg_server.url, prefix="fence") as storage:
        await storage.put(key, b"old")
        before = _refused(pg_server)
        clock = _late(storage, late=2)
        result = await write(storage, key)
        assert _refused(pg_server) - before == 2, "the server's fence did not refuse the late"
        assert clock.asked == 3, f"{name}: sent {clock.asked} times, not 2 refused and 1 kept"
        assert result_ok(result), f"{name} returned {result!r} after its late attempts"
        assert await _held(storage, key) == after


@pytest.mark.parametrize("staged", [False, True])
async def test_a_server_always_past_the_deadline_is_an_error_and_writes_nothing(
    pg_server: PostgresServer, staged: bool
) -> None:
    key = f"runs/fence/{uuid.uuid4().hex}"
    value = b"n" * (INLINE_MAX + 1) if staged else b"new"
    async with PostgresStorage.from_url(pg_server.url, prefix="fence") as storage:
        await storage.put(key, b"old")
        before = _refused(pg_server)
        _late(storage, late=ATTEMPTS)
        with pytest.raises(StorageUnavailable, match=f"after its deadline {ATTEMPTS} times"):
            await storage.put(key, value)
        assert _refused(pg_server) - before == ATTEMPTS
        assert await _held(storage, key) == b"old"

"""A cancelled PostgreSQL write never lands after ``CancelledError`` (``settles_cancelled_writes``).

Each test stalls the server while many writes are in flight, cancels them all,
lets the server run again, and then watches every key through a *second*
storage (its own pool) for :data:`WATCH` seconds: a key whose value changes
from what it held before the writes is a late landing. Two ways to stall:

- the real server frozen with ``SIGSTOP`` (the postmaster and every backend):
  the cancelled statements sit complete in the server's sockets (a barrier on
  the kernel's receive queues says so before the cancel), and the backends
  read and run them once they get ``SIGCONT``; the server's log proves that
  they did (each one's fence refused it: "ran after its deadline");
- the repository's late relay (:class:`~checkpointkit.conformance.relay.LateRelay`),
  which delivers every request half a second late, even after the client
  dropped its connection.

The broken twin of each round is the same adapter with its fence taken off
(each statement's deadline at infinity, no settling wait): the same round must
then find late landings, or it proves nothing.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from checkpointkit import NotFound, Storage
from checkpointkit.adapters._deadline import ServerClock
from checkpointkit.adapters.postgres import PostgresStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.relay import LateRelay
from checkpointkit.conformance.servers import backlog, until_sent
from checkpointkit.conformance.servers.postgres import PostgresServer

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SIGSTOP and /proc/net/tcp: Linux only"
)

WRITES = 100
"""Cancelled puts per test, and cancelled deletes."""
WATCH = 2.0
"""Seconds during which every cancelled key is watched for a late landing."""
SLACK = 0.15
"""Seconds allowed beyond the grace for the event loop of a loaded machine."""
RELAY_DELAY = 0.2
"""Seconds the late relay holds each request."""
RELAY_GRACE = 0.6
"""The writer's cancel_grace behind the late relay (more than its delay: the writes that
are not cancelled must still arrive before their deadline)."""
LATE_LOG = "ran after its deadline"


class _NoDeadline(ServerClock):
    """The broken twin's clock: every statement's deadline at infinity, no settling wait."""

    __slots__ = ()

    def deadline(self, now: float, window: float, window_min: float) -> tuple[float, float]:
        return 1e300, now


def _unfenced(storage: PostgresStorage) -> PostgresStorage:
    """The broken twin of the adapter: its writes carry no deadline."""
    clock, storage._clock = storage._clock, _NoDeadline()
    storage._clock.lo, storage._clock.hi, storage._clock.at = clock.lo, clock.hi, clock.at
    return storage


def _late_in_log(server: PostgresServer) -> int:
    assert server.directory is not None
    with open(os.path.join(server.directory, "server.log"), errors="replace") as log:
        # The error's line, not the STATEMENT line after it (which quotes the fence's text).
        return sum(1 for line in log if "ERROR:" in line and LATE_LOG in line)


async def _until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds:g} s"
        await asyncio.sleep(0.01)


async def _cancel_every(tasks: list[asyncio.Task[Any]]) -> list[float]:
    """Cancel every task at once; each one's seconds from cancel() to CancelledError."""
    loop = asyncio.get_running_loop()
    ended: dict[asyncio.Task[Any], float] = {}
    for task in tasks:
        task.add_done_callback(lambda t: ended.setdefault(t, loop.time()))
    start = loop.time()
    for task in tasks:
        task.cancel()
    _, pending = await asyncio.wait(tasks, timeout=10)
    assert not pending, f"{len(pending)} cancelled writes were still running after 10 s"
    wrong = [t for t in tasks if not t.cancelled()]
    assert not wrong, f"{len(wrong)} writes did not raise CancelledError: " + str(
        [t.exception() or t.result() for t in wrong][:3]
    )
    return [ended[t] - start for t in tasks]


async def _value(storage: Storage, key: str) -> bytes | None:
    try:
        return (await storage.get(key)).data
    except NotFound:
        return None


async def _watch(observer: Storage, before: dict[str, bytes | None]) -> list[str]:
    """The keys whose value, watched for WATCH seconds, ever differs from ``before``."""
    late: set[str] = set()
    keys = sorted(before)
    deadline = time.monotonic() + WATCH
    while True:
        now = await asyncio.gather(*(_value(observer, k) for k in keys))
        late.update(k for k, v in zip(keys, now, strict=True) if v != before[k])
        if time.monotonic() >= deadline:
            return sorted(late)
        await asyncio.sleep(0.05)


def _open(url: str, prefix: str, **options: Any) -> PostgresStorage:
    return PostgresStorage.from_url(url, prefix=prefix, pool_size=2 * WRITES + 5, **options)


async def _stopped_round(
    server: PostgresServer,
    observer: PostgresStorage,
    before: dict[str, bytes | None],
    write: Callable[[str], Awaitable[Any]],
    request_bytes: int,
) -> tuple[list[str], list[float], int]:
    """Freeze the server, start ``write(key)`` for every key, wait until every statement is
    in the server's sockets, cancel them all, thaw the server, watch through ``observer``.

    Returns the late keys, each cancel's latency, and how many statements the
    server's fence refused meanwhile (each a cancelled write that it ran).
    """
    refused = _late_in_log(server)
    baseline = backlog(server.port)
    server.pause()
    try:
        tasks = [asyncio.ensure_future(write(k)) for k in before]
        await until_sent(
            server.port,
            request_bytes,
            baseline,
            "every cancelled statement reaching the stopped server",
        )
        latencies = await _cancel_every(tasks)
    finally:
        server.resume()
    late = await _watch(observer, before)
    return late, latencies, _late_in_log(server) - refused


async def _puts_round(
    server: PostgresServer, prefix: str, broken: bool = False
) -> tuple[list[str], list[float], int, float]:
    keys = [f"runs/late/p{i:03d}" for i in range(WRITES)]
    new = {k: bytes([65 + i % 26]) * 1024 for i, k in enumerate(keys)}
    async with (
        hygiene(),
        _open(server.url, prefix) as writer,
        _open(server.url, prefix) as observer,
    ):
        # warm: one connection per concurrent put, each with its statement prepared
        for _ in range(2):
            await asyncio.gather(*(writer.put(k, b"old") for k in keys))
        if broken:
            _unfenced(writer)
        before: dict[str, bytes | None] = dict.fromkeys(keys, b"old")
        late, latencies, ran = await _stopped_round(
            server, observer, before, lambda k: writer.put(k, new[k]), 1024 * len(keys)
        )
    return late, latencies, ran, writer.cancel_grace


async def _deletes_round(
    server: PostgresServer, prefix: str, broken: bool = False
) -> tuple[list[str], list[float], int, float]:
    keys = [f"runs/late/d{i:03d}" for i in range(WRITES)]
    async with (
        hygiene(),
        _open(server.url, prefix) as writer,
        _open(server.url, prefix) as observer,
    ):
        for _ in range(2):  # warm: one connection per concurrent delete, statement prepared
            await asyncio.gather(*(writer.put(k, b"still here") for k in keys))
            await asyncio.gather(*(writer.delete(f"{k}-none") for k in keys))
        if broken:
            _unfenced(writer)
        before: dict[str, bytes | None] = dict.fromkeys(keys, b"still here")
        late, latencies, ran = await _stopped_round(
            server, observer, before, writer.delete, 30 * len(keys)
        )
    return late, latencies, ran, writer.cancel_grace


async def test_cancelled_put_never_lands_after_cancel_with_server_stopped(
    pg_server: PostgresServer,
) -> None:
    late, latencies, ran, grace = await _puts_round(pg_server, "settle-put")
    print(f"\nSIGSTOP, {WRITES} puts: {len(late)} late, {ran} refused by the fence, cancel "
          f"median/max {sorted(latencies)[len(latencies) // 2] * 1e3:.0f}/"
          f"{max(latencies) * 1e3:.0f} ms")  # fmt: skip
    assert ran >= WRITES, f"the server ran only {ran} of the {WRITES} cancelled puts"
    assert late == [], f"{len(late)} of {WRITES} cancelled puts landed later: {late[:5]}"
    assert max(latencies) <= grace + SLACK, f"a cancel took {max(latencies):.3f} s"


async def test_cancelled_delete_never_lands_after_cancel_with_server_stopped(
    pg_server: PostgresServer,
) -> None:
    late, latencies, ran, grace = await _deletes_round(pg_server, "settle-delete")
    print(f"\nSIGSTOP, {WRITES} deletes: {len(late)} late, {ran} refused by the fence, cancel "
          f"median/max {sorted(latencies)[len(latencies) // 2] * 1e3:.0f}/"
          f"{max(latencies) * 1e3:.0f} ms")  # fmt: skip
    assert ran >= WRITES, f"the server ran only {ran} of the {WRITES} cancelled deletes"
    assert late == [], f"{len(late)} of {WRITES} cancelled deletes landed later: {late[:5]}"
    assert max(latencies) <= grace + SLACK, f"a cancel took {max(latencies):.3f} s"


async def test_stopped_server_rounds_catch_an_unfenced_writer(pg_server: PostgresServer) -> None:
    """The broken twin: without the fence, the same rounds see cancelled writes land."""
    late_puts, *_ = await _puts_round(pg_server, "settle-put-broken", broken=True)
    late_deletes, *_ = await _deletes_round(pg_server, "settle-delete-broken", broken=True)
    print(f"\nunfenced, SIGSTOP: {len(late_puts)} of {WRITES} puts and {len(late_deletes)} "
          f"of {WRITES} deletes landed after CancelledError")  # fmt: skip
    assert late_puts, "no cancelled put of the unfenced writer landed: the round proves nothing"
    assert late_deletes, "no cancelled delete of the unfenced writer landed"


async def _relayed_round(
    url: str, prefix: str, writes: int = WRITES, broken: bool = False
) -> tuple[list[str], list[float], float]:
    """``writes`` puts and ``writes`` deletes through the late relay, all cancelled once the
    relay holds them; then every key is watched for a change after the cancellations."""
    parts = urlsplit(url)
    upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
    put_keys = [f"runs/late/p{i:03d}" for i in range(writes)]
    delete_keys = [f"runs/late/d{i:03d}" for i in range(writes)]
    new = {k: bytes([65 + i % 26]) * 1024 for i, k in enumerate(put_keys)}
    async with (
        hygiene(),
        LateRelay(upstream, RELAY_DELAY) as relay,
        _open(url, prefix, endpoint=relay.address, cancel_grace=RELAY_GRACE) as writer,
        _open(url, prefix) as observer,
    ):
        keys = put_keys + delete_keys
        await asyncio.gather(*(observer.put(k, b"old") for k in keys))
        # warm: the writer's connections open (through the relay) and its statements prepared
        await asyncio.gather(*(writer.put(f"{k}-warm", b"w") for k in keys))
        await asyncio.gather(*(writer.delete(f"{k}-warm") for k in keys))
        if broken:
            _unfenced(writer)
        start = relay.in_transit
        tasks = [asyncio.ensure_future(writer.put(k, new[k])) for k in put_keys]
        tasks += [asyncio.ensure_future(writer.delete(k)) for k in delete_keys]
        await _until(lambda: relay.in_transit - start >= len(keys), "every request in the relay")
        latencies = await _cancel_every(tasks)
        # What is stored once every cancellation returned must never change after: a
        # write may have landed before its CancelledError, never after it.
        now = await asyncio.gather(*(_value(observer, k) for k in keys))
        seen = dict(zip(keys, now, strict=True))
        parts_left = [k for k in put_keys if seen[k] not in (b"old", new[k])]
        assert parts_left == [], f"cancelled puts left a part of a value: {parts_left[:5]}"
        late = await _watch(observer, seen)
    return late, latencies, writer.cancel_grace


async def test_cancelled_writes_never_land_after_cancel_through_a_late_relay(
    pg_url: str,
) -> None:
    late, latencies, grace = await _relayed_round(pg_url, "settle-relay")
    print(f"\nlate relay ({RELAY_DELAY:g} s), {WRITES} puts and {WRITES} deletes: {len(late)} "
          f"late, cancel max {max(latencies) * 1e3:.0f} ms")  # fmt: skip
    assert late == [], f"{len(late)} of {2 * WRITES} cancelled writes landed later: {late[:5]}"
    assert max(latencies) <= grace + SLACK, f"a cancel took {max(latencies):.3f} s"


async def test_late_relay_round_catches_an_unfenced_writer(pg_url: str) -> None:
    late, _, _ = await _relayed_round(pg_url, "settle-relay-broken", writes=10, broken=True)
    assert late, "no cancelled write of the unfenced writer landed: the round proves nothing"

"""A cancelled Redis write never lands after ``CancelledError`` (``settles_cancelled_writes``).

Each test stalls the server while many writes are in flight, cancels them all,
lets the server run again, and then watches every key through a *second*
storage (its own client) for :data:`WATCH` seconds: a key whose value changes
from what it held before the writes is a late landing. Two ways to stall:

- the real server frozen with ``SIGSTOP``: the cancelled requests sit complete
  in the server's socket or the client's send queue (a barrier on the kernel's
  queues, read from ``/proc/net/tcp``, says so before the cancel), and the server executes them
  once it gets ``SIGCONT``; the server's command counters prove that it did;
- the repository's stall proxy (:class:`~checkpointkit.conformance.proxy.StallProxy`)
  holding the requests, resumed as soon as the cancellations returned.

Standalone and the 3-node cluster alike (the ``redis_url`` fixture).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import pytest
from checkpointkit import NotFound, Storage
from checkpointkit.adapters.redis import RedisStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.redis_target import _pinned_node
from checkpointkit.conformance.relay import LateRelay
from checkpointkit.conformance.servers import backlog, received_unread, until_sent

from .conftest import fresh_prefix

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SIGSTOP and /proc/net/tcp: Linux only"
)

PUTS = 100
"""Cancelled writes per size (and per test for deletes)."""
WATCH = 2.0
"""Seconds during which every cancelled key is watched for a late landing."""
SLACK = 0.15
"""Seconds allowed beyond the grace for the event loop of a loaded machine."""
RELAY_GRACE = 1.0
"""The writer's cancel_grace behind the late relay."""
RELAY_TIMEOUT = 60.0
"""The relayed writer's operation timeout. Its set-up puts, 200 at once through the relay,
each on a new connection whose every command is held ``RELAY_DELAY`` s, took 5.3 to 9.6 s
in four rounds in one quiet process, against the default timeout of 10 s, and went past it
with four pytest workers on two cores; the timeout is not what these tests check (the
cancels are bound by ``RELAY_GRACE``)."""
RELAY_DELAY = 0.5
"""Seconds the late relay holds each request: less than the grace (the writes that are
not cancelled must still arrive before their deadline), more than the observer needs to
read every key once the cancellations returned."""
KiB = 1024


# -- helpers ---------------------------------------------------------------------------------
async def _info(storage: RedisStorage, key: str, section: str) -> dict[str, Any]:
    """``INFO section`` of the node that holds ``key`` (the server, on standalone)."""
    client = storage.client
    if storage.cluster:
        await storage._cluster_ready()
        name = storage._names(storage._scope(key)).h
        node = client.get_node_from_key(name)  # type: ignore[union-attr]
        return dict(await client.execute_command("INFO", section, target_nodes=node))
    return dict(await client.info(section))


async def _server_of(storage: RedisStorage, key: str) -> tuple[int, int]:
    """(pid, port) of the server process that holds ``key``."""
    info = await _info(storage, key, "server")
    return int(info["process_id"]), int(info["tcp_port"])


async def _scripts_run(storage: RedisStorage, key: str) -> int:
    """How many ``EVALSHA`` the node holding ``key`` has executed (without error) so far."""
    stats = (await _info(storage, key, "commandstats")).get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)) - int(stats.get("failed_calls", 0))


async def _until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    """Wait (bounded) until ``condition()`` holds."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds:g} s"
        await asyncio.sleep(0.01)


@contextmanager
def _frozen(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def _cancel_all(tasks: list[asyncio.Task[Any]]) -> list[float]:
    """Cancel every task at once; return each one's seconds from cancel() to its end."""
    loop = asyncio.get_running_loop()
    ended: dict[asyncio.Task[Any], float] = {}
    for task in tasks:
        task.add_done_callback(lambda t: ended.setdefault(t, loop.time()))
    start = loop.time()
    for task in tasks:
        task.cancel()
    _, pending = await asyncio.wait(tasks, timeout=10)
    assert not pending, f"{len(pending)} cancelled writes were still running after 10 s"
    not_cancelled = [t for t in tasks if not t.cancelled()]
    assert not not_cancelled, f"{len(not_cancelled)} writes did not raise CancelledError: " + str(
        [t.exception() or t.result() for t in not_cancelled][:3]
    )
    return [ended[t] - start for t in tasks]


async def _value(storage: Storage, key: str) -> bytes | None:
    try:
        return (await storage.get(key)).data
    except NotFound:
        return None


async def _late_landings(observer: Storage, before: dict[str, bytes | None]) -> list[str]:
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


def _sizes() -> list[tuple[str, bytes]]:
    """PUTS keys of 1 KiB and PUTS of 256 KiB (above inline_max: the staged path)."""
    out = []
    for size, label in ((KiB, "small"), (256 * KiB, "big")):
        for i in range(PUTS):
            out.append((f"runs/late/{label}{i:03d}", bytes([65 + i % 26]) * size))
    return out


async def _opened(url: str, prefix: str, **options: Any) -> RedisStorage:
    return RedisStorage.from_url(url, prefix=prefix, max_connections=2 * PUTS + 10, **options)


# -- SIGSTOP ---------------------------------------------------------------------------------
async def _stopped_server_round(
    writer: RedisStorage,
    observer: RedisStorage,
    before: dict[str, bytes | None],
    write: Callable[[str], Awaitable[Any]],
    request_bytes: int,
    calls: int | None = None,
) -> tuple[list[str], list[float], int, int]:
    """Freeze the server, start ``write(key)`` for every key, wait until every request
    left the writer, cancel them all, thaw the server, watch through ``observer``.

    Returns the late keys, each cancel's latency, how many scripts the server ran for
    the cancelled requests, and how many requests were whole in the server's socket
    when they were cancelled: all but those whose connection's receive queue on the
    server had no room left (the kernel grows it as the server reads; a connection the
    warm-up missed keeps its first size), whose rest the cancel's reset discards.
    ``calls``: start only that many writes (the first keys).
    """
    some = next(iter(before))
    pid, port = await _server_of(observer, some)
    scripts = await _scripts_run(observer, some)
    baseline = backlog(port)
    with _frozen(pid):
        tasks = [asyncio.ensure_future(write(k)) for k in list(before)[:calls]]
        waiting = await until_sent(
            port, request_bytes, baseline, "every cancelled request leaving the writer"
        )
        latencies = await _cancel_all(tasks)
    late = await _late_landings(observer, before)
    ran = await _scripts_run(observer, some) - scripts
    whole = len(tasks) - waiting
    assert whole >= len(tasks) * 3 // 4, (
        f"only {whole} of {len(tasks)} requests were whole in the stopped server's socket"
        f" ({waiting} connections had bytes left to send): the round tests too few"
    )
    return late, latencies, ran, whole


async def test_cancelled_put_never_lands_after_cancel_with_server_stopped(redis_url: str) -> None:
    prefix = fresh_prefix()
    values = dict(_sizes())
    async with (
        hygiene(),
        await _opened(redis_url, prefix) as writer,
        await _opened(redis_url, prefix) as observer,
    ):
        # warm: one connection per concurrent put, whose receive buffers on the server
        # have grown to hold a 256 KiB request (the kernel grows them as the server reads)
        for _ in range(2):
            await asyncio.gather(*(writer.put(k, b"w" * 256 * KiB) for k in values))
        await asyncio.gather(*(writer.put(k, b"old") for k in values))
        before: dict[str, bytes | None] = dict.fromkeys(values, b"old")
        late, latencies, ran, whole = await _stopped_server_round(
            writer,
            observer,
            before,
            lambda k: writer.put(k, values[k]),
            sum(map(len, values.values())) + 200 * len(values),
        )
    assert ran >= whole, f"the server ran only {ran} of the {whole} cancelled puts it received"
    assert late == [], f"{len(late)} of {len(values)} cancelled puts landed later: {late[:5]}"
    grace = writer.cancel_grace
    assert max(latencies) <= grace + SLACK, f"a cancel took {max(latencies):.3f} s"


async def test_cancelled_delete_never_lands_after_cancel_with_server_stopped(
    redis_url: str,
) -> None:
    prefix = fresh_prefix()
    keys = [f"runs/late/d{i:03d}" for i in range(PUTS)]
    async with (
        hygiene(),
        await _opened(redis_url, prefix) as writer,
        await _opened(redis_url, prefix) as observer,
    ):
        for _ in range(2):  # warm: one connection per concurrent delete
            await asyncio.gather(*(writer.put(k, b"still here") for k in keys))
        await writer.delete("runs/late/none")  # and the delete's script loaded
        before: dict[str, bytes | None] = dict.fromkeys(keys, b"still here")
        late, latencies, ran, whole = await _stopped_server_round(
            writer, observer, before, writer.delete, 200 * len(keys)
        )
    assert ran >= whole, f"the server ran only {ran} of the {whole} cancelled deletes it received"
    assert late == [], f"{len(late)} of {len(keys)} cancelled deletes landed later: {late[:5]}"
    assert max(latencies) <= writer.cancel_grace + SLACK, f"a cancel took {max(latencies):.3f} s"


async def test_cancelled_delete_many_never_lands_after_cancel_with_server_stopped(
    redis_url: str,
) -> None:
    prefix = fresh_prefix()
    keys = [f"runs/late/m{i:04d}" for i in range(10 * PUTS)]  # two scripts in one pipeline
    async with (
        hygiene(),
        RedisStorage.from_url(redis_url, prefix=prefix, max_connections=1) as writer,
        await _opened(redis_url, prefix) as observer,
    ):
        await asyncio.gather(*(observer.put(k, b"still here") for k in keys))
        for _ in range(2):  # its one connection can then hold the whole request on the server
            await writer.put("runs/late/warm", bytes(256 * KiB))
        await writer.delete_many(["runs/late/none"])  # the script loaded
        before: dict[str, bytes | None] = dict.fromkeys(keys, b"still here")
        late, latencies, ran, _ = await _stopped_server_round(
            writer,
            observer,
            before,
            lambda _key: writer.delete_many(keys),
            100 * len(keys),  # each key: its name and its two value names
            calls=1,
        )
    assert ran >= 2, f"the server ran only {ran} of the 2 scripts of the cancelled delete_many"
    assert late == [], f"{len(late)} of {len(keys)} keys were deleted after the cancel: {late[:5]}"
    assert max(latencies) <= writer.cancel_grace + SLACK, f"the cancel took {max(latencies):.3f} s"


# -- a relay that delivers requests late ------------------------------------------------------
@asynccontextmanager
async def _relayed(
    url: str, prefix: str, delay: float
) -> AsyncIterator[tuple[RedisStorage, RedisStorage, LateRelay]]:
    """A writer whose requests reach the server ``delay`` s late, even after it reset them
    (:class:`~checkpointkit.conformance.relay.LateRelay`), and a direct observer. On the
    cluster both are pinned to one node (``hash_tag``), the one behind the relay."""
    options: dict[str, Any] = {}
    cluster = "cluster=true" in url
    if cluster:
        upstream, options["hash_tag"] = _pinned_node(url)
    else:
        parts = urlsplit(url)
        upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)
    async with LateRelay(upstream, delay) as relay:
        mine = dict(
            options, endpoint=relay.address, cancel_grace=RELAY_GRACE, timeout=RELAY_TIMEOUT
        )
        if cluster:
            mine["address_remap"] = lambda addr: relay.address if addr == upstream else addr
        async with (
            await _opened(url, prefix, **mine) as writer,
            await _opened(url, prefix, **options) as observer,
        ):
            yield writer, observer, relay


def _relayed_bytes(relay: LateRelay) -> int:
    """Bytes the relay has received from clients so far (it logs each connection's)."""
    return sum(len(log) for log in relay._logs)


async def _relayed_round(
    redis_url: str, before: dict[str, bytes | None], write: str, values: dict[str, bytes]
) -> tuple[list[str], list[float], float]:
    """Cancel every write once the relay holds its request, then watch: the value seen right
    after the cancellations returned must never change (the relay delivers them late)."""
    async with _relayed(redis_url, fresh_prefix(), RELAY_DELAY) as (writer, observer, relay):
        await asyncio.gather(*(writer.put(k, v) for k, v in before.items() if v is not None))
        await writer.delete("runs/late/none")  # the delete's script loaded
        start = _relayed_bytes(relay)
        if write == "put":
            tasks = [asyncio.ensure_future(writer.put(k, v)) for k, v in values.items()]
            expected = sum(map(len, values.values()))
        else:
            tasks = [asyncio.ensure_future(writer.delete(k)) for k in before]
            expected = 100 * len(before)
        await _until(
            lambda: _relayed_bytes(relay) - start >= expected, "every request reaching the relay"
        )
        latencies = await _cancel_all(tasks)
        now = await asyncio.gather(*map(partial(_value, observer), before))
        seen = dict(zip(before, now, strict=True))
        parts = [k for k, v in seen.items() if v not in (before[k], values.get(k))]
        assert parts == [], f"cancelled writes left a part of a value: {parts[:5]}"
        late = await _late_landings(observer, seen)
        return late, latencies, writer.cancel_grace


async def test_cancelled_put_never_lands_after_cancel_through_a_late_relay(
    redis_url: str,
) -> None:
    values = dict(_sizes())
    before: dict[str, bytes | None] = dict.fromkeys(values, b"old")
    async with hygiene():
        late, latencies, grace = await _relayed_round(redis_url, before, "put", values)
    assert late == [], f"{len(late)} of {len(values)} cancelled puts landed later: {late[:5]}"
    assert max(latencies) <= grace + SLACK, f"a cancel took {max(latencies):.3f} s"


async def test_cancelled_delete_never_lands_after_cancel_through_a_late_relay(
    redis_url: str,
) -> None:
    before: dict[str, bytes | None] = {f"runs/late/d{i:03d}": b"still here" for i in range(PUTS)}
    async with hygiene():
        late, latencies, grace = await _relayed_round(redis_url, before, "delete", {})
    assert late == [], f"{len(late)} of {len(before)} cancelled deletes landed later: {late[:5]}"
    assert max(latencies) <= grace + SLACK, f"a cancel took {max(latencies):.3f} s"


# -- promptness, and writes that are slow but not cancelled ------------------------------------
async def test_cancel_returns_within_grace(redis_url: str) -> None:
    """With ``?cancel_grace=0.1``, a put cancelled while the server is stopped returns
    within 0.1 s (plus the event loop's slack), and does not land later."""
    url = redis_url + ("&" if "?" in redis_url else "?") + "cancel_grace=0.1"
    prefix = fresh_prefix()
    async with (
        hygiene(),
        RedisStorage.from_url(url, prefix=prefix) as writer,
        await _opened(redis_url, prefix) as observer,
    ):
        assert writer.cancel_grace == 0.1
        key = "runs/grace/k"
        await writer.put(key, b"old")
        pid, port = await _server_of(observer, key)
        baseline = received_unread(port)
        with _frozen(pid):
            task = asyncio.ensure_future(writer.put(key, b"new"))
            await _until(lambda: received_unread(port) > baseline, "the put reaching the socket")
            (latency,) = await _cancel_all([task])
        assert await _late_landings(observer, {key: b"old"}) == []
    assert latency <= 0.1 + SLACK, f"the cancel took {latency:.3f} s"


async def test_a_write_that_reaches_the_server_after_its_deadline_is_sent_again(
    redis_url: str,
) -> None:
    """Not cancelled, only slow (the server stopped for longer than the grace): each
    script finds its deadline passed and does nothing, and the storage sends it again
    with a fresh deadline; the put (100 KiB, inline: staged with a SET before it is sent
    again), the delete and the delete_many succeed, once each."""
    prefix = fresh_prefix()
    many = [f"runs/slow/m{i}" for i in range(3)]
    async with (
        hygiene(),
        RedisStorage.from_url(redis_url, prefix=prefix, cancel_grace=0.1) as writer,
        await _opened(redis_url, prefix) as observer,
    ):
        await writer.put("runs/slow/gone", b"to delete")
        await asyncio.gather(*(writer.put(k, b"to delete") for k in many))
        await writer.delete_many(["runs/slow/none"])  # its script loaded
        for _ in range(2):  # warm three connections, whose server side can then hold 100 KiB
            await asyncio.gather(*(writer.put("runs/slow/k", bytes(256 * KiB)) for _ in range(3)))
        pid, port = await _server_of(observer, "runs/slow/k")
        scripts = await _scripts_run(observer, "runs/slow/k")
        baseline = backlog(port)
        value = bytes(range(256)) * 400  # 100 KiB
        with _frozen(pid):
            put = asyncio.ensure_future(writer.put("runs/slow/k", value))
            delete = asyncio.ensure_future(writer.delete("runs/slow/gone"))
            delete_many = asyncio.ensure_future(writer.delete_many(many))
            await until_sent(port, len(value) + 901, baseline, "the writes reaching it")
            await asyncio.sleep(0.3)  # the scripts' deadlines pass while the server is stopped
        version = await asyncio.wait_for(put, 10)
        assert await asyncio.wait_for(delete, 10) is True
        assert await asyncio.wait_for(delete_many, 10) == 3
        assert await observer.get("runs/slow/k") == (value, version)
        assert [k async for k in observer.list("runs/slow/")] == ["runs/slow/k"]
        # each script ran twice: once too late (a no-op), once with a fresh deadline
        assert await _scripts_run(observer, "runs/slow/k") - scripts >= 6

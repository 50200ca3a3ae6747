"""Cancellation through a stalling loopback TCP proxy, on standalone and cluster.

The proxy (``checkpointkit.conformance.proxy.StallProxy``) sits between the
client and every server node; it stops forwarding in the middle of a request
or a reply, the operation is cancelled, and then the promises are checked:
``CancelledError`` promptly, the client healthy (the next operation gets its
own answer, never the stale reply of the cancelled one), a cancelled put whole
or absent and never landing later.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Literal

import pytest
from checkpointkit import IfMatch, NotFound, OutcomeUnknown, StorageUnavailable
from checkpointkit.adapters.redis import RedisStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.proxy import StallProxy
from checkpointkit.conformance.servers.redis import ValkeyProcess, valkey_server_or_unavailable
from checkpointkit.storage import PutMode, delete_many
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from .conftest import fresh_prefix

PROMPT = 1.0
"""Seconds within which a cancelled operation must raise (generous for a loaded machine)."""


class Proxies:
    """One StallProxy per server node, controlled together."""

    def __init__(self, proxies: list[StallProxy]) -> None:
        self.proxies = proxies

    def stall(self, direction: Literal["request", "response"], *, partial: bool = True) -> None:
        for p in self.proxies:
            p.stall(direction, partial=partial)

    def resume(self) -> None:
        for p in self.proxies:
            p.resume()

    async def wait_stalled(self) -> None:
        """Return once some proxy holds bytes of the operation (bounded: 10 s)."""
        waits = [asyncio.ensure_future(p.stalled.wait()) for p in self.proxies]
        try:
            done, _ = await asyncio.wait(waits, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        assert done, "the operation never reached the proxy"

    async def wait_dropped(self) -> None:
        """Return once a proxy has discarded held bytes because their sender closed (10 s)."""
        deadline = time.monotonic() + 10
        while not any(p.dropped_bytes for p in self.proxies):
            assert time.monotonic() < deadline, "the cancelled connection was never closed"
            await asyncio.sleep(0.01)


async def _nodes(url: str) -> list[tuple[str, int]]:
    client = RedisCluster.from_url(url.split("?", 1)[0])
    try:
        await client.initialize()
        return [(n.host, n.port) for n in client.get_nodes()]
    finally:
        await client.aclose()


@asynccontextmanager
async def proxied(url: str, **options: Any) -> AsyncIterator[tuple[RedisStorage, Proxies]]:
    """A storage whose every connection goes through a StallProxy."""
    cluster = "cluster=true" in url
    host, port = url.split("@")[-1].split("/")[2].split(":")
    nodes = await _nodes(url) if cluster else [(host, int(port))]
    async with AsyncExitStack() as stack:
        proxies = [await stack.enter_async_context(StallProxy(node)) for node in nodes]
        remap = {node: p.address for node, p in zip(nodes, proxies, strict=True)}
        if cluster:
            options["address_remap"] = lambda addr: remap.get(addr, addr)
        first = remap[nodes[0]]
        storage = RedisStorage.from_url(
            url, endpoint=first, prefix=options.pop("prefix", fresh_prefix()), **options
        )
        await stack.enter_async_context(storage)
        if cluster:
            # load the topology now, not inside the first timed operation: redis-py parses
            # the nodes' COMMAND reply in Python, which under hygiene() (coroutine origin
            # tracking) takes about as long as the tests' 0.5 s timeouts
            await storage._cluster_ready()
        yield storage, Proxies(proxies)


async def cancel_promptly(task: asyncio.Task[Any]) -> float:
    """Cancel ``task``; assert it raises CancelledError within PROMPT seconds."""
    start = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), PROMPT * 5)
    elapsed = time.monotonic() - start
    assert elapsed < PROMPT, f"cancellation took {elapsed:.2f}s"
    return elapsed


async def start_stalled(proxies: Proxies, op: Awaitable[Any]) -> asyncio.Task[Any]:
    task = asyncio.ensure_future(op)
    await proxies.wait_stalled()
    assert not task.done()
    return task


async def test_cancelled_get_leaves_no_stale_reply_for_the_next_call(redis_url: str) -> None:
    async with hygiene(), proxied(redis_url) as (s, proxies):
        await s.put("runs/a/k", b"A" * 100_000)
        await s.put("runs/a/other", b"other value")
        assert (await s.get("runs/a/k")).data[:1] == b"A"  # warm connection and scripts
        proxies.stall("response", partial=True)  # the client gets half of the reply
        task = await start_stalled(proxies, s.get("runs/a/k"))
        await cancel_promptly(task)
        proxies.resume()
        assert (await s.get("runs/a/other")).data == b"other value"
        assert (await s.get("runs/a/k")).data == b"A" * 100_000


@pytest.mark.parametrize("mode", ["overwrite", "create", "if-match"])
async def test_cancelled_put_is_whole_or_absent_and_never_lands_later(
    redis_url: str, mode: str
) -> None:
    new = random.randbytes(300_000)
    async with hygiene(), proxied(redis_url) as (s, proxies):
        key = "runs/p/k"
        old: bytes | None = None
        put_mode: PutMode
        if mode == "create":
            put_mode = "create"
            await s.put("runs/p/warm", b"")  # register the run's scope; warm the connection
        else:
            old = b"old value"
            version = await s.put(key, old)
            put_mode = IfMatch(version) if mode == "if-match" else "overwrite"
        proxies.stall("request", partial=True)  # the server got half of the request
        task = await start_stalled(proxies, s.put(key, new, mode=put_mode))
        await cancel_promptly(task)
        await proxies.wait_dropped()  # the client reset the connection: the proxy drops the rest
        proxies.resume()

        async def observe() -> bytes | None:
            try:
                return (await s.get(key)).data
            except NotFound:
                return None

        first = await observe()
        assert first in (old, new)  # whole or absent, never a part
        # a barrier: more commands on every connection; the held bytes were dropped
        for i in range(5):
            await s.put(f"runs/p/after{i}", b"x")
        assert await observe() == first  # the cancelled put did not land later
        assert first == old  # the server never got the whole request


async def test_cancelled_put_whose_reply_stalled_has_happened_entirely(redis_url: str) -> None:
    """A put whose request reached the server ran there (one Lua script, atomic)."""
    new = random.randbytes(50_000)
    async with hygiene(), proxied(redis_url) as (s, proxies):
        await s.put("runs/q/k", b"old")
        proxies.stall("response", partial=False)
        task = await start_stalled(proxies, s.put("runs/q/k", new))
        await cancel_promptly(task)
        proxies.resume()
        got = await s.get("runs/q/k")
        assert got.data == new
        assert (await s.put("runs/q/k", b"next", mode=IfMatch(got.version))) != got.version


async def test_cancelled_listing_leaves_the_client_healthy(redis_url: str) -> None:
    async with hygiene(), proxied(redis_url) as (s, proxies):
        keys = sorted(f"runs/l{i}/k" for i in range(12))
        for k in keys:
            await s.put(k, b"")
        assert [k async for k in s.list("runs/")] == keys
        proxies.stall("response", partial=True)
        task = await start_stalled(proxies, _collect(s, "runs/"))
        await cancel_promptly(task)
        proxies.resume()
        assert [k async for k in s.list("runs/", limit=5)] == keys[:5]
        assert [k async for k in s.list("runs/l3/")] == ["runs/l3/k"]


async def _collect(s: RedisStorage, prefix: str) -> list[str]:
    return [k async for k in s.list(prefix)]


async def test_cancellation_while_connecting_leaves_the_client_healthy(redis_url: str) -> None:
    async with hygiene(), proxied(redis_url) as (s, proxies):
        proxies.stall("response", partial=False)  # the connection handshake never completes
        task = await start_stalled(proxies, s.put("runs/c/k", b"v"))
        await cancel_promptly(task)
        proxies.resume()
        await s.put("runs/c/k2", b"v2")
        assert (await s.get("runs/c/k2")).data == b"v2"


async def test_caller_timeout_ends_a_stalled_operation_promptly(redis_url: str) -> None:
    async with hygiene(), proxied(redis_url) as (s, proxies):
        await s.put("runs/t/k", b"v")
        proxies.stall("response")
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await s.get("runs/t/k")
        assert time.monotonic() - start < 0.3 + PROMPT
        proxies.resume()
        assert (await s.get("runs/t/k")).data == b"v"


async def test_a_stalled_server_gives_storage_unavailable_after_the_timeout(
    redis_url: str,
) -> None:
    async with hygiene(), proxied(redis_url, timeout=0.5) as (s, proxies):
        await s.put("runs/u/k", b"v")
        proxies.stall("response")
        start = time.monotonic()
        with pytest.raises(StorageUnavailable, match="get 'runs/u/k'"):
            await s.get("runs/u/k")
        assert time.monotonic() - start < 0.5 + PROMPT
        proxies.resume()
        assert (await s.get("runs/u/k")).data == b"v"


async def test_cancelled_put_never_reaches_a_server_that_stopped_reading() -> None:
    """No proxy: the real server is frozen (SIGSTOP) while a big put is being sent.

    The cancelled put's unsent bytes must be discarded (the connection is
    reset), not flushed once the server runs again: else the put would land
    after the caller saw CancelledError.
    """
    binary = valkey_server_or_unavailable()
    server = ValkeyProcess(binary=binary)
    server.start()
    try:
        assert server.process is not None
        url = f"redis://127.0.0.1:{server.port}/0"
        async with hygiene(), RedisStorage.from_url(url, prefix="frozen") as s:
            await s.put("runs/f/k", b"old")
            big = b"N" * (48 * 1024 * 1024)  # more than the socket buffers on both sides hold
            os.kill(server.process.pid, signal.SIGSTOP)
            try:
                task = asyncio.ensure_future(s.put("runs/f/k", big))
                await asyncio.sleep(0.2)  # let it fill the buffers; it cannot complete
                assert not task.done()
                await cancel_promptly(task)
            finally:
                os.kill(server.process.pid, signal.SIGCONT)
            async with Redis(port=server.port) as probe:
                deadline = time.monotonic() + 15
                while int((await probe.info("clients"))["connected_clients"]) > 1:
                    assert time.monotonic() < deadline, "the cancelled connection stayed open"
                    await asyncio.sleep(0.02)
            assert (await s.get("runs/f/k")).data == b"old"
    finally:
        server.stop()


@pytest.mark.parametrize("op", ["put", "delete", "delete_many"])
async def test_a_write_whose_answer_never_came_raises_outcome_unknown(
    redis_url: str, op: str
) -> None:
    """The request reached the server (and ran), the reply did not come back in time."""
    async with hygiene(), proxied(redis_url, timeout=0.5) as (s, proxies):
        await s.put("runs/o/k", b"old")
        await s.delete("runs/o/none")  # the delete scripts loaded
        await s.delete_many(["runs/o/none"])
        write = {
            "put": lambda: s.put("runs/o/k", b"new"),
            "delete": lambda: s.delete("runs/o/k"),
            "delete_many": lambda: s.delete_many(["runs/o/k"]),
        }[op]
        proxies.stall("response", partial=False)
        with pytest.raises(OutcomeUnknown, match=r"runs/o/k.*may have happened"):
            await write()
        proxies.resume()
        got = await s.get("runs/o/k") if op == "put" else None
        assert got is None or got.data == b"new"  # it had happened
        if op != "put":
            with pytest.raises(NotFound):
                await s.get("runs/o/k")


async def test_a_read_that_timed_out_is_storage_unavailable_not_outcome_unknown(
    redis_url: str,
) -> None:
    async with hygiene(), proxied(redis_url, timeout=0.5) as (s, proxies):
        await s.put("runs/o/k", b"old")
        proxies.stall("response", partial=False)
        with pytest.raises(StorageUnavailable) as err:
            await s.get("runs/o/k")
        assert not isinstance(err.value, OutcomeUnknown)
        proxies.resume()


async def test_a_write_whose_connection_was_lost_after_sending_raises_outcome_unknown(
    redis_url: str,
) -> None:
    async with hygiene(), proxied(redis_url, retries=0) as (s, proxies):
        await s.put("runs/o/k", b"old")
        proxies.stall("request", partial=True)  # half of the request reached the server
        task = await start_stalled(proxies, s.put("runs/o/k", b"new"))
        for p in proxies.proxies:
            await p.drop()  # the connection is reset under it
        with pytest.raises(OutcomeUnknown, match="put 'runs/o/k'"):
            await asyncio.wait_for(task, 10)
        proxies.resume()
        assert (await s.get("runs/o/k")).data == b"old"  # (half a request never runs)


async def test_each_stalled_operation_gets_its_own_full_deadline(redis_standalone_url: str) -> None:
    async with hygiene(), proxied(redis_standalone_url, timeout=0.8) as (s, proxies):
        await s.put("runs/d/k", b"v")
        proxies.stall("response")

        async def timed_get() -> float:
            start = time.monotonic()
            with pytest.raises(StorageUnavailable, match=r"no answer within 0\.8 s"):
                await s.get("runs/d/k")
            return time.monotonic() - start

        first = asyncio.ensure_future(timed_get())
        await proxies.wait_stalled()
        await asyncio.sleep(0.3)  # the second operation starts later than the first
        second = asyncio.ensure_future(timed_get())
        a, b = await asyncio.gather(first, second)
        for elapsed in (a, b):
            assert 0.7 < elapsed < 0.8 + PROMPT
        proxies.resume()
        assert (await s.get("runs/d/k")).data == b"v"
        assert s._timeouts._ops == set()


async def test_a_caller_cancellation_is_not_mistaken_for_the_deadline(
    redis_standalone_url: str,
) -> None:
    async with hygiene(), proxied(redis_standalone_url, timeout=0.5) as (s, proxies):
        await s.put("runs/d/k", b"v")
        proxies.stall("response")
        task = await start_stalled(proxies, s.get("runs/d/k"))
        await cancel_promptly(task)  # CancelledError, not StorageUnavailable
        proxies.resume()
        assert (await s.get("runs/d/k")).data == b"v"


async def test_a_write_refused_before_its_request_left_is_sent_again_and_lands(
    redis_url: str,
) -> None:
    """The server resets the storage's connections and refuses its next new one: the write
    did not happen, so it is retried (after the reset, a pooled connection is replaced
    before anything is sent on it) and lands. Only a write whose request had started to
    leave is never sent again (``test_a_write_whose_reply_is_lost_...`` in the suite)."""
    async with proxied(redis_url) as (s, proxies):
        for i in range(3):
            await s.put(f"runs/a/k{i}", b"old")
        for p in proxies.proxies:
            await p.refuse(connections=1)
        assert await s.delete("runs/a/k0") is True
        assert await s.put("runs/a/k1", b"new", mode=IfMatch((await s.get("runs/a/k1")).version))
        assert await delete_many(s, ["runs/a/k2"]) == 1
        assert sum(p.refused for p in proxies.proxies) >= 1
        assert [k async for k in s.list("runs/a/")] == ["runs/a/k1"]
        assert (await s.get("runs/a/k1")).data == b"new"

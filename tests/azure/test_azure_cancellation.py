"""Cancellation and lost replies, through a stalling TCP proxy between the client and Azurite.

The proxy (:class:`checkpointkit.conformance.proxy.StallProxy`) holds the bytes
of one direction on command, so an operation is provably stuck mid-request or
mid-response when the test cancels it. The late relay (``LateRelay``, from
``checkpointkit.conformance.relay``) delivers a request to Azurite late even if the client
hangs up: a server that holds a whole write and applies it late, the case where a cancelled
write could land after its cancellation.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from checkpointkit import IfMatch, NotFound
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.proxy import StallProxy

MiB = 1024 * 1024
T = TypeVar("T")
PROMPT = 2.0
"""Generous bound, in seconds, for a cancelled operation to return."""


@pytest.fixture
async def proxy(azurite: str) -> AsyncIterator[StallProxy]:
    match = re.search(r"BlobEndpoint=https?://([^:/]+):(\d+)/", azurite)
    assert match is not None
    async with StallProxy((match[1], int(match[2]))) as p:
        yield p


async def dropped(proxy: StallProxy) -> None:
    """Wait until the proxy has discarded held bytes: the cancelled request's connection is gone."""
    async with asyncio.timeout(PROMPT):
        while proxy.dropped_bytes == 0:
            await asyncio.sleep(0.005)


async def no_connection_open(proxy: StallProxy) -> None:
    """Wait until no connection through the proxy is open (the only one was the cancelled
    call's: the calls before it gave theirs back, and it took that one)."""
    async with asyncio.timeout(PROMPT):
        while proxy.open_connections:
            await asyncio.sleep(0.005)


async def cancel_when_stalled(proxy: StallProxy, task: asyncio.Task[Any]) -> None:
    """Wait until the proxy holds the operation's bytes, cancel it, check it ends promptly."""
    await asyncio.wait_for(proxy.stalled.wait(), 10)
    assert not task.done()
    task.cancel()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < PROMPT


def awaiting(task: asyncio.Task[Any], name: str) -> bool:
    """Whether ``task`` is suspended, at any depth, in a coroutine function called ``name``."""
    coro: Any = task.get_coro()
    while coro is not None:
        if getattr(coro, "__name__", None) == name:
            return True
        coro = getattr(coro, "cr_await", None)
    return False


async def until_awaiting(task: asyncio.Task[Any], name: str) -> None:
    async with asyncio.timeout(PROMPT):
        while not awaiting(task, name):
            await asyncio.sleep(0.001)


async def test_cancelled_get_mid_response_leaves_the_client_healthy(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy
) -> None:
    a, b = os.urandom(512 * 1024), os.urandom(300 * 1024)
    async with hygiene(), make_az(endpoint=proxy.address) as storage:
        await storage.put("a", a)
        await storage.put("b", b)
        proxy.stall("response", partial=True)
        task = asyncio.create_task(storage.get("a"))
        await cancel_when_stalled(proxy, task)
        # its connection is closed now, not when the garbage collector finds its response
        # (an unclosed connection, and a ResourceWarning, whenever it comes)
        await no_connection_open(proxy)
        proxy.resume()  # the held bytes of the cancelled reply must reach no one
        assert (await storage.get("b")).data == b  # its own answer, not the stale one
        assert (await storage.get("a")).data == a


async def test_cancelled_put_mid_request_is_absent_and_never_lands_later(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy
) -> None:
    async with hygiene(), make_az(endpoint=proxy.address) as storage, make_az() as direct:
        v1 = await storage.put("k", b"old")
        proxy.stall("request", partial=True)
        task = asyncio.create_task(storage.put("k", os.urandom(512 * 1024), mode=IfMatch(v1)))
        await cancel_when_stalled(proxy, task)
        await dropped(proxy)  # the client closed the connection: the server never sees the rest
        proxy.resume()
        await storage.put("other", b"x")
        assert await storage.get("other") == await direct.get("other")
        assert await direct.get("k") == (b"old", v1)


async def test_cancelled_block_upload_commits_nothing(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy, az_prefix: str
) -> None:
    class StallOnSecondBlock(AzureBlobStorage):
        async def _call(
            self, op: str, key: str | None, request: Callable[[], Awaitable[T]], **kw: Any
        ) -> T:
            if op.startswith("put (block 2 "):
                proxy.stall("request", partial=True)  # before the block's first byte is sent
            return await super()._call(op, key, request, **kw)

    async with make_az() as direct:
        await direct.put("big", b"old")
        storage = make_az(endpoint=proxy.address, max_concurrency=1)
        storage.__class__ = StallOnSecondBlock  # the fixture's settings, instrumented
        async with hygiene(), storage:
            task = asyncio.create_task(storage.put("big", os.urandom(3 * MiB)))
            await cancel_when_stalled(proxy, task)
            await dropped(proxy)
            proxy.resume()
        assert (await direct.get("big")).data == b"old"
        blob = direct.client.get_blob_client(f"{az_prefix}/big")
        committed, _uncommitted = await blob.get_block_list("all")
        assert committed == []  # the old value was one Put Blob; no block list was committed


@pytest.mark.parametrize("mode", ["create", "if-match"])
async def test_conditional_put_whose_reply_was_lost_is_recognized_as_a_success(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy, mode: str
) -> None:
    recognized: list[str | None] = []

    class Spy(AzureBlobStorage):
        async def _own_write(self, *args: Any) -> str | None:
            recognized.append(await super()._own_write(*args))
            return recognized[-1]

    async with make_az() as direct:
        storage = make_az(endpoint=proxy.address)
        storage.__class__ = Spy
        async with hygiene(), storage:
            put_mode: Any = "create"
            await storage.put("warm", b"")  # the container's creation is done before the stall
            if mode == "if-match":
                put_mode = IfMatch(await storage.put("k", b"old"))
            proxy.stall("response", partial=False)
            task = asyncio.create_task(storage.put("k", b"new", mode=put_mode))
            await asyncio.wait_for(proxy.stalled.wait(), 10)
            assert (await direct.get("k")).data == b"new"  # the server has written it...
            await proxy.drop()  # ...but the reply never arrives: the put is sent again
            proxy.resume()
            version = await asyncio.wait_for(task, 20)
        assert recognized == [version]  # the failed condition was recognized as its own write
        assert await direct.get("k") == (b"new", version)


# -- a cancelled write settles: it has landed, or it never will -------------------------------


async def test_put_cancelled_while_the_server_holds_it_has_landed_when_the_cancellation_returns(
    make_az: Callable[..., AzureBlobStorage], late_relay: Callable[[float], Any]
) -> None:
    new = b"late" * 256
    async with (
        hygiene(),
        late_relay(0.2) as relay,
        make_az(endpoint=relay.address, cancel_grace=1.0) as storage,
        make_az() as direct,
    ):
        await direct.put("k", b"old")
        task = asyncio.create_task(storage.put("k", new))
        await relay.holding(new)  # the whole body has reached the server's side
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < PROMPT
        assert (await direct.get("k")).data == new  # landed before CancelledError...
        assert relay.in_transit == 0  # ...and nothing of it is left to land later


async def test_delete_cancelled_while_the_server_holds_it_has_happened_when_cancellation_returns(
    make_az: Callable[..., AzureBlobStorage], late_relay: Callable[[float], Any]
) -> None:
    async with (
        hygiene(),
        late_relay(0.2) as relay,
        make_az(endpoint=relay.address, cancel_grace=1.0) as storage,
        make_az() as direct,
    ):
        await direct.put("k", b"old")
        task = asyncio.create_task(storage.delete("k"))
        await relay.holding(b"DELETE /")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(NotFound):
            await direct.get("k")
        assert relay.in_transit == 0


async def test_put_the_server_holds_past_the_grace_can_still_land_later_as_documented(
    make_az: Callable[..., AzureBlobStorage], late_relay: Callable[[float], Any]
) -> None:
    # What HTTP leaves possible (docs/adapters/azure.md), and proof that the relay
    # reproduces the race that the tests above prove settled.
    new = b"late" * 256
    async with (
        hygiene(),
        late_relay(1.0) as relay,
        make_az(endpoint=relay.address, cancel_grace=0.0) as storage,
        make_az() as direct,
    ):
        await direct.put("k", b"old")
        task = asyncio.create_task(storage.put("k", new))
        await relay.holding(new)
        relay.answered.clear()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await direct.get("k")).data == b"old"  # reset at once (grace 0)...
        await asyncio.wait_for(relay.answered.wait(), 10)
        assert (await direct.get("k")).data == new  # ...and yet the server applied it


async def test_put_cancelled_while_the_server_stalls_is_reset_after_its_grace(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy
) -> None:
    grace = 0.3
    async with (
        hygiene(),
        make_az(endpoint=proxy.address, cancel_grace=grace) as storage,
        make_az() as direct,
    ):
        await direct.put("k", b"old")
        await storage.put("warm", b"")  # the container's creation is done before the stall
        proxy.stall("request", partial=True)
        task = asyncio.create_task(storage.put("k", b"new" * 1000))
        await asyncio.wait_for(proxy.stalled.wait(), 10)
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        took = time.monotonic() - started
        assert grace - 0.05 <= took < grace + PROMPT  # it waited for the grace, then gave up
        await dropped(proxy)  # the connection was reset: the rest never reaches the server
        proxy.resume()
        await storage.put("other", b"x")  # a full round trip through the same proxy
        assert (await direct.get("k")).data == b"old"


async def test_second_cancellation_cuts_the_grace_short(
    make_az: Callable[..., AzureBlobStorage], proxy: StallProxy
) -> None:
    async with (
        hygiene(),
        make_az(endpoint=proxy.address, cancel_grace=30.0) as storage,
        make_az() as direct,
    ):
        await direct.put("k", b"old")
        await storage.put("warm", b"")
        proxy.stall("request", partial=True)
        task = asyncio.create_task(storage.put("k", b"new" * 1000))
        await asyncio.wait_for(proxy.stalled.wait(), 10)
        task.cancel()
        await until_awaiting(task, "_wind_down")  # the first cancellation is settling
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < PROMPT
        await dropped(proxy)
        proxy.resume()
        assert (await direct.get("k")).data == b"old"

"""Cancellation and lost replies, through a stalling TCP proxy between the client and moto.

The proxy (:class:`checkpointkit.conformance.proxy.StallProxy`) holds the bytes
of one direction on command, so an operation is provably stuck mid-request or
mid-response when the test cancels it. The late relay (``LateRelay``, from
``checkpointkit.conformance.relay``) delivers a request to moto late even if the client
hangs up: a server that holds a whole write and applies it late, the case where a
cancelled write could land after its cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest
from checkpointkit import IfMatch, NotFound
from checkpointkit.adapters import _inflight
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.proxy import StallProxy
from checkpointkit.conformance.servers.s3 import storage_options

MiB = 1024 * 1024
T = TypeVar("T")
PROMPT = 2.0
"""Generous bound, in seconds, for a cancelled operation to return."""


@pytest.fixture
async def proxy(s3_endpoint: str) -> AsyncIterator[StallProxy]:
    parts = urlsplit(s3_endpoint)
    assert parts.hostname is not None and parts.port is not None
    async with StallProxy((parts.hostname, parts.port)) as p:
        yield p


async def dropped(proxy: StallProxy) -> None:
    """Wait until the proxy has discarded held bytes: the cancelled request's connection is gone.

    Resuming before that would forward the bytes that the client had already
    handed to the network: a request in flight may land after its cancellation
    (as on any network); only a closed connection proves that it cannot.
    """
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
    make_s3: Callable[..., S3Storage], proxy: StallProxy
) -> None:
    a, b = os.urandom(512 * 1024), os.urandom(300 * 1024)
    async with hygiene(), make_s3(endpoint=proxy.address) as storage:
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
    make_s3: Callable[..., S3Storage], proxy: StallProxy
) -> None:
    async with hygiene(), make_s3(endpoint=proxy.address) as storage, make_s3() as direct:
        v1 = await storage.put("k", b"old")
        proxy.stall("request", partial=True)
        task = asyncio.create_task(storage.put("k", os.urandom(512 * 1024), mode=IfMatch(v1)))
        await cancel_when_stalled(proxy, task)
        await dropped(proxy)  # the client closed the connection: the server never sees the rest
        proxy.resume()
        # a full round trip through the same proxy, then the key: still the old value
        await storage.put("other", b"x")
        assert await storage.get("other") == await direct.get("other")
        assert await direct.get("k") == (b"old", v1)


async def test_cancelled_multipart_put_aborts_its_upload(
    make_s3: Callable[..., S3Storage], proxy: StallProxy, s3_prefix: str, s3_endpoint: str
) -> None:
    class StallOnFirstPart(S3Storage):
        async def _call(
            self, op: str, key: str | None, request: Callable[[], Awaitable[T]], **kw: Any
        ) -> T:
            if op.startswith("put (part 1 "):
                proxy.stall("request", partial=True)  # before the part's first byte is sent
            return await super()._call(op, key, request, **kw)

    async with make_s3() as direct:
        storage = StallOnFirstPart(
            direct.bucket,
            direct.prefix,
            **storage_options(s3_endpoint),
            endpoint=proxy.address,
            multipart_threshold=MiB,
            part_size=5 * MiB,
            max_concurrency=1,
        )
        async with hygiene(), storage:
            task = asyncio.create_task(storage.put("big", os.urandom(11 * MiB)))
            await cancel_when_stalled(proxy, task)
            await dropped(proxy)
            proxy.resume()
            # aclose() has waited for the abort that the cancellation left behind
        assert [k async for k in direct.list()] == []
        uploads = await direct.client.list_multipart_uploads(
            Bucket=direct.bucket, Prefix=f"{s3_prefix}/"
        )
        assert uploads.get("Uploads", []) == []


@pytest.mark.parametrize("mode", ["create", "if-match"])
async def test_conditional_put_whose_reply_was_lost_is_recognized_as_a_success(
    make_s3: Callable[..., S3Storage], proxy: StallProxy, mode: str, s3_endpoint: str
) -> None:
    recognized: list[str | None] = []

    class Spy(S3Storage):
        async def _own_write(self, *args: Any) -> tuple[str | None, bool]:
            result = await super()._own_write(*args)
            recognized.append(result[0])
            return result

    async with make_s3() as direct:
        storage = Spy(
            direct.bucket, direct.prefix, **storage_options(s3_endpoint), endpoint=proxy.address
        )
        async with hygiene(), storage:
            put_mode: Any = "create"
            if mode == "if-match":
                put_mode = IfMatch(await storage.put("k", b"old"))
            proxy.stall("response", partial=False)
            task = asyncio.create_task(storage.put("k", b"new", mode=put_mode))
            await asyncio.wait_for(proxy.stalled.wait(), 10)
            assert (await direct.get("k")).data == b"new"  # the server has written it...
            await proxy.drop()  # ...but the reply never arrives: the client retries, gets a 412
            proxy.resume()
            version = await asyncio.wait_for(task, 20)
        assert recognized == [version]  # the 412 was recognized as the put's own write
        assert await direct.get("k") == (b"new", version)


# -- a cancelled write settles: it has landed, or it never will -------------------------------


async def test_put_cancelled_while_the_server_holds_it_has_landed_when_the_cancellation_returns(
    make_s3: Callable[..., S3Storage], late_relay: Callable[[float], Any]
) -> None:
    # The race behind a flaky "a cancelled put must not land later": the server holds the
    # whole request and answers late. The cancellation returns once the put has landed.
    new = b"late" * 256
    async with (
        hygiene(),
        late_relay(0.2) as relay,
        make_s3(endpoint=relay.address, cancel_grace=1.0) as storage,
        make_s3() as direct,
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
    make_s3: Callable[..., S3Storage], late_relay: Callable[[float], Any]
) -> None:
    async with (
        hygiene(),
        late_relay(0.2) as relay,
        make_s3(endpoint=relay.address, cancel_grace=1.0) as storage,
        make_s3() as direct,
    ):
        await direct.put("k", b"old")
        task = asyncio.create_task(storage.delete("k"))
        await relay.holding(b"DELETE /")  # after the HeadObject, the conditional delete
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(NotFound):
            await direct.get("k")
        assert relay.in_transit == 0


async def test_put_the_server_holds_past_the_grace_can_still_land_later_as_documented(
    make_s3: Callable[..., S3Storage], late_relay: Callable[[float], Any]
) -> None:
    # What HTTP leaves possible (docs/adapters/s3.md): a server that holds the whole
    # request past the grace applies it after the cancellation. This also shows that the
    # relay reproduces the race that the test above proves settled.
    new = b"late" * 256
    async with (
        hygiene(),
        late_relay(1.0) as relay,
        make_s3(endpoint=relay.address, cancel_grace=0.0) as storage,
        make_s3() as direct,
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
    make_s3: Callable[..., S3Storage], proxy: StallProxy
) -> None:
    grace = 0.3
    async with (
        hygiene(),
        make_s3(endpoint=proxy.address, cancel_grace=grace) as storage,
        make_s3() as direct,
    ):
        await direct.put("k", b"old")
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
    make_s3: Callable[..., S3Storage], proxy: StallProxy
) -> None:
    async with (
        hygiene(),
        make_s3(endpoint=proxy.address, cancel_grace=30.0) as storage,
        make_s3() as direct,
    ):
        await direct.put("k", b"old")
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


async def test_put_cancelled_before_its_request_is_sent_ends_at_once(
    make_s3: Callable[..., S3Storage], proxy: StallProxy
) -> None:
    async with (
        hygiene(),
        make_s3(endpoint=proxy.address, cancel_grace=30.0, max_pool_connections=1) as storage,
        make_s3() as direct,
    ):
        await storage.put("a", b"a")
        await direct.put("k", b"old")
        proxy.stall("response", partial=True)
        reader = asyncio.create_task(storage.get("a"))  # holds the only connection
        await asyncio.wait_for(proxy.stalled.wait(), 10)
        writer = asyncio.create_task(storage.put("k", b"new"))  # waits for a connection
        await until_awaiting(writer, "settle")
        writer.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await writer
        assert time.monotonic() - started < 1.0  # nothing was sent: no grace to wait for
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        proxy.resume()
        assert (await direct.get("k")).data == b"old"


async def test_write_attempt_that_ignores_its_cancellation_is_adopted_not_left_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_inflight, "SETTLE_BOUND", 0.05)
    started, release = asyncio.Event(), asyncio.Event()
    adopted: list[asyncio.Task[Any]] = []

    async def stubborn() -> str:
        started.set()
        while True:
            try:
                await release.wait()
                return "done"
            except asyncio.CancelledError:
                continue  # a misbehaving attempt

    async with hygiene():
        outer = asyncio.create_task(_inflight.settle(stubborn, 30.0, adopted.append))
        await started.wait()
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer  # the caller's cancellation is raised again, not swallowed
        assert len(adopted) == 1 and not adopted[0].done()
        release.set()
        assert await adopted[0] == "done"  # the storage waits for it in aclose()


async def test_first_call_cancelled_while_the_client_is_set_up_leaves_no_session(
    make_s3: Callable[..., S3Storage],
) -> None:
    """The first call of a fresh storage sets its client up (an aiohttp session): cancelled
    at any step of that, nothing is left unclosed once the storage is closed (the model
    group found an unclosed client session)."""
    for turns in range(0, 40, 3):
        async with hygiene():
            storage = make_s3()
            call = asyncio.ensure_future(storage.get("k"))
            for _ in range(turns):
                await asyncio.sleep(0)
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, NotFound):
                await call
            await storage.aclose()

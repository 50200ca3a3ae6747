"""aclose() of an Azure Blob storage: it lets the calls under way end before it closes the
client, and a call that waited for the client to open does not go on."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.errors import StorageClosed


async def test_a_put_the_server_holds_when_aclose_is_called_has_landed_when_it_returns(
    make_az: Callable[..., AzureBlobStorage], late_relay: Callable[[float], Any]
) -> None:
    new = b"late" * 256
    async with hygiene(), late_relay(0.2) as relay, make_az() as direct:
        await direct.put("k", b"old")
        storage = make_az(endpoint=relay.address)
        put = asyncio.ensure_future(storage.put("k", new))
        await relay.holding(new)  # the whole request has reached the server's side
        await storage.aclose()
        assert (await direct.get("k")).data == new  # landed before aclose() returned...
        assert relay.in_transit == 0  # ...and nothing of it is left to land later
        assert put.done()
        assert isinstance(put.result(), str)  # its own answer: the version


async def test_a_put_that_waited_for_the_client_to_open_ends_with_storage_closed(
    make_az: Callable[..., AzureBlobStorage],
) -> None:
    container = f"ckk-close-{secrets.token_hex(6)}"  # a new one: opening creates it
    async with hygiene():
        storage = make_az(container=container)
        put = asyncio.ensure_future(storage.put("k", b"late"))
        while not storage._open_lock.locked():  # the put is opening the client
            await asyncio.sleep(0)
        await storage.aclose()
        with pytest.raises(StorageClosed, match=r"^AzureBlobStorage is closed$"):  # no request
            await put
        async with make_az(container=container) as direct:
            assert [key async for key in direct.list()] == []


async def test_aclose_waits_for_a_large_put_up_to_its_own_deadline_not_timeout(
    make_az: Callable[..., AzureBlobStorage], late_relay: Callable[[float], Any]
) -> None:
    # A request's deadline is `timeout` plus one second per MiB of its body: aclose() lets a
    # large put end within that, though it outlasts `timeout` (here the server holds it
    # 0.6 s, with `timeout` 0.25 s and a deadline of 0.25 + 0.9 s).
    new = secrets.token_bytes(900 * 1024)  # under `block_threshold`: one request
    async with hygiene(), late_relay(0.0) as relay, make_az() as direct:
        await direct.put("k", b"old")
        storage = make_az(endpoint=relay.address, timeout=0.25, read_timeout=10.0)
        await storage.put("opened", b"")  # the client opens (and its requests go) in time
        relay.delay = 0.6
        put = asyncio.ensure_future(storage.put("k", new))
        await relay.holding(new)  # the whole request has reached the server's side
        await storage.aclose()
        assert (await direct.get("k")).data == new  # landed before aclose() returned...
        assert relay.in_transit == 0  # ...and nothing of it is left to land later
        assert isinstance(put.result(), str)  # its own answer: the version

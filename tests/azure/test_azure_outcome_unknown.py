"""Writes whose outcome is unknown on Azure Blob: ``OutcomeUnknown``, never a false failure.

A write that times out or loses its reply after its request left the client may
have happened, or may still happen: it raises ``OutcomeUnknown``. One that
never reached a server (nothing listens) raises plain ``StorageUnavailable``.
A retry after an indeterminate attempt can meet that attempt's own effect (412,
404): the adapter then reports its own write as a success when it can prove it
(its token), and ``OutcomeUnknown`` otherwise, never ``PreconditionFailed``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from azure.core import exceptions as aexc
from checkpointkit import IfMatch, NotFound, OutcomeUnknown, PreconditionFailed, StorageUnavailable
from checkpointkit.adapters.azure import AzureBlobStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.servers import free_port

T = TypeVar("T")


class LostFirstReply(AzureBlobStorage):
    """Runs the first attempt of request ``op`` for real, then runs ``meanwhile`` and
    loses the reply: the write has landed, the client cannot know."""

    op = "put"
    meanwhile: Callable[[], Awaitable[Any]] | None = None
    lost = 0

    async def _call(
        self, op: str, key: str | None, request: Callable[[], Awaitable[T]], **kw: Any
    ) -> T:
        if op != self.op or self.lost or not kw.get("write"):  # a read's lost reply: read again
            return await super()._call(op, key, request, **kw)

        async def first_attempt_lands_but_its_reply_is_lost() -> T:
            if self.lost:
                return await request()
            self.lost += 1
            await request()
            if self.meanwhile is not None:
                await self.meanwhile()
            raise aexc.ServiceResponseError("the reply was lost")

        return await super()._call(op, key, first_attempt_lands_but_its_reply_is_lost, **kw)


async def test_put_that_times_out_after_its_request_left_is_outcome_unknown_and_lands_later(
    make_az: Callable[..., AzureBlobStorage], late_relay: Callable[[float], Any]
) -> None:
    new = b"late" * 256
    async with (
        hygiene(),
        late_relay(1.0) as relay,  # the server gets the request 1 s late, whatever the client does
        make_az() as direct,  # first: it creates the container
        make_az(endpoint=relay.address, timeout=0.3, create=False) as storage,
    ):
        await direct.put("k", b"old")
        relay.answered.clear()
        with pytest.raises(OutcomeUnknown, match="may have happened") as info:
            await storage.put("k", new)
        assert isinstance(info.value, StorageUnavailable)  # callers of the old error still catch it
        assert (await direct.get("k")).data == b"old"  # not yet...
        await asyncio.wait_for(relay.answered.wait(), 10)
        assert (await direct.get("k")).data == new  # ...and then it landed: unknown was right


async def test_write_to_an_endpoint_that_refuses_connections_is_unavailable_not_unknown(
    make_az: Callable[..., AzureBlobStorage],
) -> None:
    async with make_az(
        endpoint=("127.0.0.1", free_port()), timeout=2.0, retries=1, create=False
    ) as storage:
        with pytest.raises(StorageUnavailable, match="cannot connect") as info:
            await storage.put("k", b"v", mode="create")
        assert type(info.value) is StorageUnavailable  # nothing was sent: it did not happen


@pytest.mark.parametrize("mode", ["create", "if-match"])
async def test_conditional_put_retried_after_a_lost_reply_is_its_own_success(
    make_az: Callable[..., AzureBlobStorage], azurite: str, mode: str
) -> None:
    async with hygiene(), make_az() as direct:
        storage = LostFirstReply(direct.container, direct.prefix, connection_string=azurite)
        async with storage:
            put_mode: Any = "create"
            if mode == "if-match":
                put_mode = IfMatch(await direct.put("k", b"old"))
            version = await storage.put("k", b"new", mode=put_mode)
            assert storage.lost == 1  # the first reply was lost, the retry met a 412
        assert await direct.get("k") == (b"new", version)


@pytest.mark.parametrize("mode", ["create", "if-match"])
async def test_conditional_put_whose_lost_write_was_replaced_is_outcome_unknown_not_a_conflict(
    make_az: Callable[..., AzureBlobStorage], azurite: str, mode: str
) -> None:
    # The first attempt lands, another writer replaces it. If-match: the retry fails its
    # condition, and "another version" would be false (this put did happen), so the outcome
    # is unknown. Create-only: never repeated (a repeat could land again after a delete);
    # its own write is looked for, is gone, and the outcome stays unknown.
    async with hygiene(), make_az() as direct:
        storage = LostFirstReply(direct.container, direct.prefix, connection_string=azurite)
        storage.meanwhile = lambda: direct.put("k", b"other writer")
        async with storage:
            put_mode: Any = "create"
            if mode == "if-match":
                put_mode = IfMatch(await direct.put("k", b"old"))
            said = "echo" if mode == "if-match" else "may have happened"
            with pytest.raises(OutcomeUnknown, match=said) as info:
                await storage.put("k", b"new", mode=put_mode)
            if mode == "if-match":
                assert isinstance(info.value.__cause__, PreconditionFailed)  # the retry's
            assert not isinstance(info.value, PreconditionFailed)
        assert (await direct.get("k")).data == b"other writer"


async def test_delete_whose_reply_was_lost_is_outcome_unknown_and_not_repeated(
    make_az: Callable[..., AzureBlobStorage], azurite: str
) -> None:
    async with hygiene(), make_az() as direct:
        storage = LostFirstReply(direct.container, direct.prefix, connection_string=azurite)
        storage.op = "delete"
        await direct.put("k", b"v")
        async with storage:
            # the first Delete Blob lands and its reply is lost: "did not exist" would be
            # false, and a repeat could delete a later write: OutcomeUnknown, not repeated
            with pytest.raises(OutcomeUnknown) as info:
                await storage.delete("k")
            assert not isinstance(info.value.__cause__, NotFound)
        with pytest.raises(NotFound):
            await direct.get("k")


async def test_aiohttp_never_resends_a_write_unseen(az: AzureBlobStorage) -> None:
    # aiohttp resends a PUT or DELETE once on a dropped kept-alive connection; the adapter
    # turns that off, so that every resend goes through its own retries (and their rules)
    await az.put("k", b"v")
    session = az.client._pipeline._transport.session
    assert session is not None and session._retry_connection is False


async def test_overwrite_whose_reply_was_lost_is_not_repeated_over_a_later_write(
    make_az: Callable[..., AzureBlobStorage], azurite: str
) -> None:
    """An overwrite lands, its reply is lost, another client writes meanwhile: repeating
    the overwrite would undo that later write (the linearizability group caught it).
    It raises OutcomeUnknown at once, and the later write stays."""
    async with hygiene(), make_az() as direct:
        storage = LostFirstReply(direct.container, direct.prefix, connection_string=azurite)
        later: list[str] = []

        async def another_client_writes() -> None:
            later.append(await direct.put("k", b"later"))

        storage.meanwhile = another_client_writes
        async with storage:
            with pytest.raises(OutcomeUnknown):
                await storage.put("k", b"first")
            assert storage.lost == 1
        assert await direct.get("k") == (b"later", later[0])

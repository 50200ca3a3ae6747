"""Writes whose outcome is unknown on S3: ``OutcomeUnknown``, never a failure that may be false.

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
from botocore import exceptions as bexc
from checkpointkit import IfMatch, NotFound, OutcomeUnknown, PreconditionFailed, StorageUnavailable
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.servers import free_port

T = TypeVar("T")


class LostFirstReply(S3Storage):
    """Runs the first attempt of request ``op`` for real, then runs ``meanwhile`` and
    loses the reply (a read timeout): the write has landed, the client cannot know."""

    op = "put"
    meanwhile: Callable[[], Awaitable[Any]] | None = None
    lost = 0

    async def _call(
        self, op: str, key: str | None, request: Callable[[], Awaitable[T]], **kw: Any
    ) -> T:
        if op != self.op or self.lost:
            return await super()._call(op, key, request, **kw)

        async def first_attempt_lands_but_its_reply_is_lost() -> T:
            if self.lost:
                return await request()
            self.lost += 1
            await request()
            if self.meanwhile is not None:
                await self.meanwhile()
            raise bexc.ReadTimeoutError(endpoint_url="http://127.0.0.1")

        return await super()._call(op, key, first_attempt_lands_but_its_reply_is_lost, **kw)


async def test_put_that_times_out_after_its_request_left_is_outcome_unknown_and_lands_later(
    make_s3: Callable[..., S3Storage], late_relay: Callable[[float], Any]
) -> None:
    new = b"late" * 256
    async with (
        hygiene(),
        late_relay(1.0) as relay,  # the server gets the request 1 s late, whatever the client does
        make_s3(endpoint=relay.address, timeout=0.3) as storage,
        make_s3() as direct,
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
    make_s3: Callable[..., S3Storage],
) -> None:
    async with make_s3(endpoint=("127.0.0.1", free_port()), timeout=2.0, retries=1) as storage:
        with pytest.raises(StorageUnavailable, match="cannot connect") as info:
            await storage.put("k", b"v", mode="create")
        assert type(info.value) is StorageUnavailable  # nothing was sent: it did not happen


@pytest.mark.parametrize("mode", ["create", "if-match"])
async def test_conditional_put_retried_after_a_lost_reply_is_its_own_success(
    make_s3: Callable[..., S3Storage], mode: str
) -> None:
    async with hygiene(), make_s3() as direct:
        storage = LostFirstReply(direct.bucket, direct.prefix, **_options(direct))
        async with storage:
            put_mode: Any = "create"
            if mode == "if-match":
                put_mode = IfMatch(await direct.put("k", b"old"))
            version = await storage.put("k", b"new", mode=put_mode)
            assert storage.lost == 1  # the first reply was lost, the retry met a 412
        assert await direct.get("k") == (b"new", version)


@pytest.mark.parametrize("mode", ["create", "if-match"])
async def test_conditional_put_whose_lost_write_was_replaced_is_outcome_unknown_not_a_conflict(
    make_s3: Callable[..., S3Storage], mode: str
) -> None:
    # The first attempt lands, another writer replaces it. If-match: the retry fails its
    # condition, and "another version" would be false (this put did happen), so the outcome
    # is unknown. Create-only: never repeated (a repeat could land again after a delete);
    # its own write is looked for, is gone, and the outcome stays unknown.
    async with hygiene(), make_s3() as direct:
        storage = LostFirstReply(direct.bucket, direct.prefix, **_options(direct))
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


async def test_delete_retried_after_a_lost_reply_is_outcome_unknown_not_missing(
    make_s3: Callable[..., S3Storage],
) -> None:
    async with hygiene(), make_s3() as direct:
        storage = LostFirstReply(direct.bucket, direct.prefix, **_options(direct))
        storage.op = "delete"
        await direct.put("k", b"v")
        async with storage:
            # the first DeleteObject lands; its retry gets 404: "did not exist" would be false
            with pytest.raises(OutcomeUnknown) as info:
                await storage.delete("k", if_match=(await direct.get("k")).version)
            assert isinstance(info.value.__cause__, NotFound)
        with pytest.raises(NotFound):
            await direct.get("k")


def _options(storage: S3Storage) -> dict[str, Any]:
    access, secret, token = storage._credentials
    return {
        "endpoint_url": storage.endpoint_url,
        "region": storage.region,
        "access_key_id": access,
        "secret_access_key": secret,
        "session_token": token,
    }


async def test_aiohttp_never_resends_a_write_unseen(s3: S3Storage) -> None:
    # aiohttp resends a PUT or DELETE once on a dropped kept-alive connection; the adapter
    # turns that off, so that every resend goes through its own retries (and their rules)
    await s3.put("k", b"v")
    sessions = list(s3.client._endpoint.http_session._sessions.values())
    assert sessions and all(session._retry_connection is False for session in sessions)


async def test_write_whose_retries_run_out_after_an_indeterminate_attempt_stays_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # attempt 1 times out after sending (may have landed), attempt 2 cannot connect:
    # "unavailable" would hide that the first one may still land
    from checkpointkit.adapters import _retry

    storage = S3Storage("bkt", endpoint_url="http://127.0.0.1:1", retries=1, retry_backoff=0)
    failures = iter([TimeoutError(), bexc.EndpointConnectionError(endpoint_url="x")])
    sent = iter([True, False])
    monkeypatch.setattr(_retry, "settle", lambda attempt, grace, adopt, record: attempt())

    async def attempt() -> None:
        raise next(failures)

    def translate(_: Callable[[], bool] | None) -> Any:
        return storage._translate_errors("put", "k", sent=lambda: next(sent))

    with pytest.raises(OutcomeUnknown, match="attempt 2 then failed") as info:
        await _retry.call(
            attempt, storage._policy, translate, lambda e: True, write=True, adopt=print
        )
    assert type(info.value.__cause__) is StorageUnavailable  # cannot connect, chained


async def test_overwrite_whose_reply_was_lost_is_not_repeated_over_a_later_write(
    make_s3: Callable[..., S3Storage],
) -> None:
    """An overwrite lands, its reply is lost, another client writes meanwhile: repeating
    the overwrite would undo that later write (the linearizability group caught it).
    It raises OutcomeUnknown at once, and the later write stays."""
    async with hygiene(), make_s3() as direct:
        storage = LostFirstReply(direct.bucket, direct.prefix, **_options(direct))
        later: list[str] = []

        async def another_client_writes() -> None:
            later.append(await direct.put("k", b"later"))

        storage.meanwhile = another_client_writes
        async with storage:
            with pytest.raises(OutcomeUnknown):
                await storage.put("k", b"first")
            assert storage.lost == 1
        assert await direct.get("k") == (b"later", later[0])


async def test_create_whose_reply_was_lost_is_not_repeated_after_a_delete(
    make_s3: Callable[..., S3Storage],
) -> None:
    """A create-only put lands, its reply is lost, another client deletes the key
    meanwhile: a repeat would pass If-None-Match again and bring the deleted value back
    (the linearizability group caught it on moto). It raises OutcomeUnknown at once,
    and the key stays deleted."""
    async with hygiene(), make_s3() as direct:
        storage = LostFirstReply(direct.bucket, direct.prefix, **_options(direct))

        async def another_client_deletes() -> None:
            assert await direct.delete("k")

        storage.meanwhile = another_client_deletes
        async with storage:
            with pytest.raises(OutcomeUnknown):
                await storage.put("k", b"first", mode="create")
            assert storage.lost == 1
        with pytest.raises(NotFound):
            await direct.get("k")


async def test_a_call_makes_no_further_attempt_once_the_storage_is_closed() -> None:
    """After aclose() a retry could reopen what aclose() closed (an aiohttp session that
    nothing closes): the call ends with StorageClosed, chained from its last failure."""
    from checkpointkit import StorageClosed
    from checkpointkit.adapters import _retry

    storage = S3Storage("bkt", endpoint_url="http://127.0.0.1:1", retries=3, retry_backoff=0)
    attempts = 0

    async def attempt() -> None:
        nonlocal attempts
        attempts += 1
        raise bexc.EndpointConnectionError(endpoint_url="x")  # transient: retried if open

    def translate(_: Callable[[], bool] | None) -> Any:
        return storage._translate_errors("get", "k")

    with pytest.raises(StorageClosed, match="closed while the call was retried") as info:
        await _retry.call(attempt, storage._policy, translate, lambda e: True, closed=lambda: True)
    assert attempts == 1 and type(info.value.__cause__) is StorageUnavailable
    attempts = 0
    with pytest.raises(StorageUnavailable, match="after 4 attempts"):
        await _retry.call(attempt, storage._policy, translate, lambda e: True, closed=lambda: False)
    assert attempts == 4

"""The backend-down tests of the ``lifecycle`` group: each operation while the backend fails.

For each of ``put``, ``delete``, ``delete_many``, ``get`` and a ``list`` page
(a put and a delete also in each conditional mode the adapter declares, with a
condition that holds: a create-only put of a missing key, an if-match put and
delete with the key's version), the test writes what it needs, takes the
backend down with the target's `Outage` (`outages`), calls the operation, and
checks
(clause ``error.unavailable``):

1. it raises ``StorageUnavailable`` (or its subclass ``OutcomeUnknown``)
   within `UNAVAILABLE_BOUND` seconds: not a raw socket, driver or file
   system error that a caller cannot tell from a bug, not a hang, and not an
   answer made up while the backend could not be asked (``NotFound``,
   ``False``, an empty listing, or ``PreconditionFailed`` from a conditional
   write: its caller takes the condition for failed and gives the write up);
2. the backend's own error is chained (``__cause__``), so that the cause is
   in the traceback;
3. once the backend is back, the same client answers again, a write that
   failed left its key whole (the old value, or the new one for a write whose
   outcome is unknown), and the keys it did not touch hold what they held.

Another cuts a ``delete_many`` of many keys partway, where the outage can
(`Outage.down_partway`): the backend answers one request and goes down at the next;
the call must raise, and one that returns must have deleted its whole batch.

Another makes a storage's first call while its backend is down: it raises, and the
storage answers once the backend is back. Another closes a storage while its backend is
down: ``aclose()`` returns without
raising and releases everything (clause ``close.backend-down``).

Another keeps the backend up and failing: the stall proxy answers every HTTP/1.1
request with a 503, every Redis command with ``-MASTERDOWN`` and every PostgreSQL
connection with ``57P03`` (`ErrorAnswer`), and each operation, and a listing's next page,
must raise ``StorageUnavailable`` as above; an adapter that reads an error *answer*
as "not there", as a failed condition or as the end of a listing shows it only there
(a reset is a connection error, not an answer). Skipped for a target the proxy cannot
stand in front of, or whose protocol is none of these.

A target that supplies no outage gets the tests reported as *not exercised*;
an operation that the outage does not fail (a SQLite read never waits for the
write lock) is skipped with the outage's name; a storage with no backend that
can fail (`NoBackend`) skips them all.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from ..errors import OutcomeUnknown, PreconditionFailed, StorageUnavailable
from ..storage import IfMatch, Storage
from ..storage import delete_many as delete_many_of
from . import descriptors
from .cancelling import aclose_within, next_calls, own_answer
from .checks import describe, expect_keys, expect_value, fail, get_or_none
from .clauses import checks
from .coverage import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_VALUE,
    backend_down,
    backend_down_partway,
    large_sizes,
)
from .credentials import expect_no_secret, secrets_of, shown
from .fixtures import StorageFixtures, not_exercised, raw_storage, set_small_pages
from .holds import Operation
from .hygiene import hygiene
from .hygiene_rules import RELEASE_LAG
from .outages import Outage, ProxyOutage
from .proxy import ErrorAnswer
from .target import Target, has_own_delete_many, new_location

__all__ = ["PARTWAY_VALUE", "UNAVAILABLE_BOUND", "UnavailableTests", "first_of_two_pages"]

PARTWAY_VALUE = 4 * 1024 * 1024 + 1
"""The largest value the partway tests put and get (at most the target's ``max_value``): a
value an adapter may send or read in parts (DynamoDB's items hold 400 KB, Firestore's
documents 1 MiB, etcd's requests 1.5 MiB)."""

UNAVAILABLE_BOUND = 30.0
"""Seconds within which an operation on a backend that is down must raise: generous, to
leave room for the adapter's retries (the built-in adapters take well under 2 s)."""

OUTAGE_WAVE = 20
"""Calls made at once by the many-failures test while the backend is down: more than the
pool of common drivers holds (asyncpg and aiomysql 10, SQLAlchemy 5 + 10 overflow)."""

OUTAGE_WAVES = 2
"""Waves of `OUTAGE_WAVE` calls that the many-failures test makes while the backend is down."""

_KEPT = {"down-kept": b"a key that no test of the outage touches"}

_FIX = (
    "To fix it, catch the backend's errors (socket, driver, file system) at the adapter's "
    "boundary and raise StorageUnavailable from them (raise StorageUnavailable(...) from "
    "exc), after the adapter's retries"
)


@dataclass
class _Case:
    """One operation on a backend that is down: what it needs first and what it may leave."""

    before: dict[str, bytes]
    start: Callable[[Storage, Mapping[str, str]], Awaitable[Any]]  # given the before's versions
    allowed: dict[str, tuple[bytes | None, ...]]  # after the outage, per key it writes
    key: str  # the key named in messages


_OLD, _NEW = b"old value before the outage", b"new value written while the backend is down"


def _case(kind: str) -> _Case:
    """The case of ``kind``: an operation (`Operation`), or a put or delete in one of its
    conditional modes (``create-only put``, ``if-match put``, ``if-match delete``), each
    with a condition that holds, so that only the outage can make it fail."""
    if kind == "put":
        return _Case(
            {"down-put": _OLD},
            lambda s, v: s.put("down-put", _NEW),
            {"down-put": (_OLD, _NEW)},
            "down-put",
        )
    if kind == "create-only put":  # of a missing key: it would be created
        return _Case(
            {},
            lambda s, v: s.put("down-create", _NEW, mode="create"),
            {"down-create": (None, _NEW)},
            "down-create",
        )
    if kind == "if-match put":  # with the key's current version: it would be written
        return _Case(
            {"down-if-match": _OLD},
            lambda s, v: s.put("down-if-match", _NEW, mode=IfMatch(v["down-if-match"])),
            {"down-if-match": (_OLD, _NEW)},
            "down-if-match",
        )
    if kind == "delete":
        old = b"a value the outage's delete tries to delete"
        return _Case(
            {"down-del": old},
            lambda s, v: s.delete("down-del"),
            {"down-del": (old, None)},
            "down-del",
        )
    if kind == "if-match delete":  # with the key's current version: it would be deleted
        old = b"a value the outage's if-match delete tries to delete"
        return _Case(
            {"down-del-if": old},
            lambda s, v: s.delete("down-del-if", if_match=v["down-del-if"]),
            {"down-del-if": (old, None)},
            "down-del-if",
        )
    if kind == "delete_many":
        keys = ["down-many/0", "down-many/1"]
        return _Case(
            {k: k.encode() for k in keys},
            lambda s, v: delete_many_of(s, keys),
            {k: (k.encode(), None) for k in keys},
            keys[0],
        )
    if kind == "get":
        return _Case(
            {"down-get": b"the value of the outage's get"},
            lambda s, v: s.get("down-get"),
            {},
            "down-get",
        )
    keys = [f"down-list/{i}" for i in range(3)]

    async def first_page(s: Storage, v: Mapping[str, str]) -> list[str]:
        return [k async for k in s.list("down-list/", limit=2)]

    return _Case({k: k.encode() for k in keys}, first_page, {}, keys[0])


def _kinds(op: Operation, conditional: bool) -> list[str]:
    """``op``, and its conditional modes where the adapter declares them."""
    if op == "put":
        return ["put", *(["create-only put", "if-match put"] if conditional else [])]
    if op == "delete":
        return ["delete", *(["if-match delete"] if conditional else [])]
    return [op]


class UnavailableTests(StorageFixtures):
    """Each operation while the target's outage keeps the backend from answering."""

    conformance_group: ClassVar[str | None] = "lifecycle"

    async def _down(
        self,
        op: Operation,
        storage: Storage,
        outage: Outage | None,
        target: Target | None,
        location: str | None,
        conditional: bool = False,
    ) -> None:
        """``op`` (and each of its conditional modes, with ``conditional``) while down."""
        __tracebackhide__ = True
        outage = _failing(op, outage)
        async with outage.client(target, storage, location) as client:
            for key, value in _KEPT.items():
                await client.put(key, value)
            for kind in _kinds(op, conditional):
                await self._one_down(kind, client, outage, target)

    async def _one_down(
        self, kind: str, client: Storage, outage: Outage, target: Target | None
    ) -> None:
        __tracebackhide__ = True
        case = _case(kind)
        versions = {key: await client.put(key, value) for key, value in case.before.items()}
        context = f"while the backend was down ({outage.name})"
        async with outage.down(raw_storage(client)):
            error = await _raises_unavailable(kind, case.key, context, case.start(client, versions))
        expect_no_secret(
            secrets_of(None if target is None else target.spec),
            f"the StorageUnavailable of {_a(kind)} {context}",
            shown(error),
        )
        # The backend is back: the same client answers, and nothing stored was lost.
        after = f"{_a(kind)} that failed {context}"
        await own_answer(client, "down-next", after)
        await _expect_kept(client, after)
        for key, allowed in case.allowed.items():
            got = await get_or_none(client, key)
            seen = None if got is None else got.data
            if seen not in allowed:
                fail(
                    f"{_a(kind)} that failed must leave its key whole",
                    key=key,
                    expected=" or ".join(describe(a) for a in allowed),
                    observed=f"it holds {describe(seen)} after {after}",
                )
        if kind == "get":
            await expect_value(
                client,
                case.key,
                case.before[case.key],
                promise="an outage must lose nothing that was stored",
                detail=f"after {after}",
            )
        elif kind == "list":
            await expect_keys(
                client,
                sorted(case.before),
                prefix="down-list/",
                promise="once the backend is back, a listing must get its own answer",
            )

    @checks("error.unavailable", "error.no-credentials")
    async def test_put_while_the_backend_is_down_raises_storage_unavailable(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
        supports_conditional_put: bool,
    ) -> None:
        """A put in every mode the adapter declares, each with a condition that holds: a
        create-only put of a missing key, an if-match put with the key's version. One that
        answers ``PreconditionFailed`` for a backend it could not ask tells its caller that
        another writer won, and the caller re-reads and gives up a write that never ran."""
        await self._down(
            "put",
            storage,
            backend_outage,
            storage_target,
            storage_location,
            supports_conditional_put,
        )

    @checks("error.unavailable", "error.no-credentials")
    async def test_delete_while_the_backend_is_down_raises_storage_unavailable(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
        supports_conditional_delete: bool,
    ) -> None:
        """A delete, and an if-match delete with the key's version where the adapter
        declares it: ``False`` (nothing there, or not at that version) for a backend that
        could not be asked is an answer made up."""
        await self._down(
            "delete",
            storage,
            backend_outage,
            storage_target,
            storage_location,
            supports_conditional_delete,
        )

    @checks("error.unavailable", "error.no-credentials")
    async def test_delete_many_while_the_backend_is_down_raises_storage_unavailable(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        await self._down("delete_many", storage, backend_outage, storage_target, storage_location)

    @checks("error.unavailable", "error.no-credentials")
    async def test_get_while_the_backend_is_down_raises_storage_unavailable(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        await self._down("get", storage, backend_outage, storage_target, storage_location)

    @checks("error.unavailable", "error.no-credentials")
    async def test_list_page_while_the_backend_is_down_raises_storage_unavailable(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        await self._down("list", storage, backend_outage, storage_target, storage_location)

    @checks("error.unavailable", "list.pages")
    async def test_list_whose_next_page_finds_the_backend_down_raises_storage_unavailable(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A listing of five keys in pages of two, its first page read while the backend
        was up, then read on while it is down: the next page must raise
        ``StorageUnavailable``. A paginator that takes a failed continuation for the end
        of the listing (``except ClientError: break``) answers a listing cut short, which
        a caller cannot tell from the whole (a ``latest()`` then finds an older head)."""
        await _next_page_down(
            _failing("list", backend_outage), storage, storage_target, storage_location
        )

    @checks("error.unavailable", "list.pages")
    async def test_each_operation_while_the_backend_answers_only_errors_raises_storage_unavailable(
        self,
        storage: Storage,
        storage_target: Target | None,
        storage_location: str | None,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """The backend up but failing: the stall proxy answers every request itself with
        an error in its protocol (`ErrorAnswer`): HTTP 503, as an overloaded S3 or Azure
        Blob does, Redis ``-MASTERDOWN``, as a replica cut off from its primary does, or
        PostgreSQL ``57P03`` to a new connection, as a server starting up does.
        Each operation in each mode, and a listing's next page, must raise
        ``StorageUnavailable`` as in the tests above. An adapter that reads any error
        answer (``except ClientError``, ``except ResponseError``, ``except PostgresError``)
        as "not there", as a
        refused condition, or as the end of a listing passes those tests, whose client
        sees its connections reset and raises a connection error, never an answer."""
        if (
            storage_target is None
            or not storage_target.proxyable
            or storage_target.upstream is None
        ):
            pytest.skip(
                "the backend answers errors only through the stall proxy: the target's "
                "factory takes no endpoint, or the target names no upstream server"
            )
        outage = ProxyOutage(answer=ErrorAnswer())
        modes = {"put": supports_conditional_put, "delete": supports_conditional_delete}
        answered = 0
        for op in ("put", "delete", "delete_many", "get", "list"):
            await self._down(
                op, storage, outage, storage_target, storage_location, modes.get(op, False)
            )
            if outage.unrecognized and not outage.answered:
                pytest.skip(
                    "the backend's protocol is not HTTP/1.1, Redis or PostgreSQL: the stall "
                    "proxy answers errors in those only (the tests above reset its connections)"
                )
            answered += outage.answered
        if not answered:
            not_exercised(
                "no request reached the stall proxy while it answered errors: the operations "
                "raised without asking the backend"
            )
        await _next_page_down(outage, storage, storage_target, storage_location)

    @checks("error.unavailable", "error.outcome-unknown")
    async def test_every_operation_where_nothing_listens_raises_storage_unavailable(
        self, storage_target: Target | None
    ) -> None:
        """A storage opened on an address where nothing listens (its server's port closed:
        each connect refused at once): each operation, the first one included, raises
        ``StorageUnavailable`` (the refusal chained), never the driver's or the socket's
        own error (``ConnectionRefusedError``, an ``OSError``, a driver's interface
        error), and a write never ``OutcomeUnknown``: nothing was sent. The outages above
        reset connections that were accepted; a refused connect takes another path through
        a driver, and an adapter that translates only the server's errors lets it out."""
        if storage_target is None or not storage_target.proxyable:
            pytest.skip(
                "the factory takes no 'endpoint' (or the target names no server in "
                "Target.upstream): the suite cannot point a storage at a closed port"
            )
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))  # bound, never listening: connects are refused
            address: tuple[str, int] = closed.getsockname()[:2]
            async with storage_target.open(
                endpoint=address,
                location=new_location() if storage_target.reopens else None,
                timeout=2.0 if storage_target.times_out else None,
            ) as storage:

                async def listed() -> list[str]:
                    return [key async for key in storage.list("refused/")]

                calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                    ("get", lambda: storage.get("refused/k")),
                    ("put", lambda: storage.put("refused/k", b"v")),
                    ("put", lambda: storage.put("refused/k", b"v", mode="create")),
                    ("delete", lambda: storage.delete("refused/k")),
                    ("list", listed),
                    ("delete_many", lambda: delete_many_of(storage, ["refused/k", "refused/j"])),
                ]
                for op, call in calls:
                    context = f"on {address[0]}:{address[1]}, where nothing listens"
                    error = await _raises_unavailable(op, "refused/k", context, call())
                    if isinstance(error, OutcomeUnknown):
                        fail(
                            f"{_a(op)} that could not connect must raise StorageUnavailable, "
                            "not OutcomeUnknown: nothing was sent",
                            key="refused/k",
                            expected="StorageUnavailable (nothing happened)",
                            observed=f"it raised {describe(error)} ({context})",
                            detail="OutcomeUnknown tells the caller that the write may have "
                            "happened, and sends it to read the key back or reconcile; raise it "
                            "only once the write's request may have left",
                        )

    @checks("error.unavailable")
    async def test_first_call_while_the_backend_is_down_raises_and_the_storage_recovers(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A storage whose very first call finds its backend down (what opens its client,
        connections, files or schema fails with it): that call raises
        ``StorageUnavailable``, and once the backend is back the same storage object
        answers. One that keeps its failed opening (a setup task that every call awaits,
        made once) raises on every call after, for good: only a new storage object, or a
        restart of the process, would answer."""
        outage = _failing("put", backend_outage)
        op: Operation = "get" if outage.fails("get") else "put"
        key = "down-first"
        async with outage.client(storage_target, storage, storage_location) as client:
            context = f"as the first call of a storage, while its backend was down ({outage.name})"
            call = client.get(key) if op == "get" else client.put(key, _NEW)
            async with outage.down(raw_storage(client)):
                with backend_down():
                    await _raises_unavailable(op, key, context, call)
            after = f"{_a(op)} {context}, then the backend came back"
            try:
                await own_answer(client, "down-first-next", after)
            except StorageUnavailable as exc:
                fail(
                    "once its backend is back, a storage whose first call found it down must "
                    "answer",
                    key="down-first-next",
                    expected="a put and a get of the key to get their own answers",
                    observed=f"the put raised {describe(exc)} after {after}",
                    detail="the storage kept what failed when it opened (a setup task awaited "
                    "by every call, a connection or schema check made once): open again on "
                    "the next call when the first opening failed",
                )
            got = await get_or_none(client, key)
            if got is not None and (op == "get" or got.data != _NEW):
                fail(
                    f"{_a(op)} that failed must leave its key whole",
                    key=key,
                    expected="nothing" if op == "get" else f"nothing or {describe(_NEW)}",
                    observed=f"it holds {describe(got.data)} after {after}",
                )

    @checks("error.unavailable")
    async def test_calls_beyond_the_pool_size_while_the_backend_is_down_leave_the_storage_answering(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A storage in use (its connections made) whose backend goes down: `OUTAGE_WAVES`
        waves of `OUTAGE_WAVE` calls at once (puts, and gets where the outage fails them),
        each must raise ``StorageUnavailable``; once the backend is back, the same storage
        answers, also `OUTAGE_WAVE` puts at once. A pool that takes a slot for a new
        connection and gives it back only when the connection opened (its ``release`` not
        in a ``finally``) loses a slot to every connect that fails: after as many
        failures as the pool holds, every call waits for a slot that never comes, the
        backend back or not, until the process restarts."""
        outage = _failing("put", backend_outage)
        reads = outage.fails("get")
        async with outage.client(storage_target, storage, storage_location) as client:
            await client.put("down-many/k", b"v")  # in use: its pool, if any, is open
            context = (
                f"while its backend was down ({outage.name}), {OUTAGE_WAVE} calls at once, "
                f"{OUTAGE_WAVES} times"
            )

            def call(n: int) -> tuple[str, Awaitable[Any]]:
                if reads and n % 2:
                    return "get", client.get("down-many/k")
                return "put", client.put(f"down-many/{n}", _NEW)

            async with outage.down(raw_storage(client)):
                for wave in range(OUTAGE_WAVES):
                    calls = [call(n) for n in range(wave * OUTAGE_WAVE, (wave + 1) * OUTAGE_WAVE)]
                    await asyncio.gather(
                        *(_raises_unavailable(op, "down-many/k", context, c) for op, c in calls)
                    )
            after = f"{OUTAGE_WAVE * OUTAGE_WAVES} calls {context}, then the backend came back"
            try:
                await own_answer(client, "down-many/next", after)
                async with next_calls("down-many/at-once", after):
                    await asyncio.gather(
                        *(client.put(f"down-many/at-once/{n}", _NEW) for n in range(OUTAGE_WAVE))
                    )
            except StorageUnavailable as exc:
                fail(
                    "once its backend is back, a storage whose calls failed while it was down "
                    "must answer",
                    key="down-many/next",
                    expected="a put and a get to get their own answers",
                    observed=f"a put raised {describe(exc)} after {after}",
                    detail="the failed calls kept what later calls wait for: give a pool's slot "
                    "back in a finally: block, also when opening its connection failed",
                )

    @checks("error.unavailable", "delete-many.count")
    async def test_delete_many_whose_backend_goes_down_partway_raises_storage_unavailable(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A ``delete_many`` of the target's ``max_batch`` keys (65,537 by default), nine
        of them stored and spread over the batch, while the backend goes down once it has
        answered a request (`Outage.down_partway`): an adapter that sends the batch in
        several requests is cut between two. It must raise ``StorageUnavailable``; one
        that returns a count anyway (a failed request counted as nothing deleted, or an
        error raised only if every request failed) tells its caller the keys are gone
        while some are still stored. Whatever happens, a ``delete_many`` that returns has
        deleted every key of its batch, and no key outside it."""
        outage = _failing("delete_many", backend_outage)
        if not has_own_delete_many(storage):
            pytest.skip("the adapter has no delete_many of its own (the optional operation)")
        if not outage.partway:
            pytest.skip(f"{outage.name} cannot start partway through a call")
        size = max(3, DEFAULT_MAX_BATCH if storage_target is None else storage_target.max_batch)
        batch = [f"down-partway/{i:06d}" for i in range(size)]
        stored = sorted({batch[i * (size - 1) // 8] for i in range(9)})
        async with outage.client(storage_target, storage, storage_location) as client:
            for key, value in _KEPT.items():
                await client.put(key, value)
            for key in stored:
                await client.put(key, b"a key of the batch")
            context = f"while its backend went down partway ({outage.name})"
            async with outage.down_partway(raw_storage(client)) as went_down:
                with backend_down_partway(went_down):
                    count, error = await _answer_or_unavailable(
                        "delete_many", stored[0], context, delete_many_of(client, batch)
                    )
                context += "" if went_down() else ", though it never went down"
            after = f"a delete_many of {size:,} keys {context}"
            await own_answer(client, "down-next", after)
            left = [key for key in stored if await get_or_none(client, key) is not None]
            if error is None and (left or count != len(stored)):
                fail(
                    "a delete_many that returns must have deleted every key of its batch",
                    key=left[0] if left else stored[0],
                    expected=f"StorageUnavailable, or {len(stored)} returned and every "
                    "key of the batch deleted",
                    observed=f"it returned {count!r}, and {len(left)} of the {len(stored)} "
                    f"stored keys of its batch are still there, after {after}",
                    detail="A request of the batch failed and the call went on as if it had "
                    "deleted nothing: raise StorageUnavailable when any request of the batch "
                    "fails (after the adapter's retries), not only when every one did",
                )
            if error is not None:
                expect_no_secret(
                    secrets_of(None if storage_target is None else storage_target.spec),
                    f"the StorageUnavailable of {after}",
                    shown(error),
                )
            await _expect_kept(client, after)

    @checks("error.unavailable", "put.atomic")
    async def test_put_whose_backend_goes_down_partway_leaves_the_key_whole(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """An overwrite of a small value with a large one (the largest of the ``large
        values`` rows the target allows, at most 4 MiB + 1), while the backend goes down
        once it has answered a request (`Outage.down_partway`): an adapter that sends a
        value in parts is cut between two. The put raises ``StorageUnavailable`` (or
        ``OutcomeUnknown``) or returns; either way, once the backend is back, the key
        holds the old value or the whole new one (the new one if the put returned), never
        the parts that went before the cut."""
        outage, size = self._partway("put", backend_outage, storage_target)
        key, old = "down-partway-put", b"the old value, before the outage"
        new = _large_value(size)
        async with outage.client(storage_target, storage, storage_location) as client:
            await client.put(key, old)
            context = f"while its backend went down partway ({outage.name})"
            async with outage.down_partway(raw_storage(client)) as went_down:
                with backend_down_partway(went_down):
                    version, _ = await _answer_or_unavailable(
                        "put", key, context, client.put(key, new)
                    )
                context += "" if went_down() else ", though it never went down"
            after = f"a put of {size:,} bytes {context}"
            await own_answer(client, "down-next", after)
            got = await get_or_none(client, key)
            held = None if got is None else got.data
            if held != new and (version is not None or held != old):
                fail(
                    "a put cut partway must leave its key whole",
                    key=key,
                    expected=f"the new value, {size:,} bytes, whole"
                    + ("" if version is not None else f", or the old one, {describe(old)}"),
                    observed=f"it holds {_held(held)} after {after}"
                    + (f" (the put returned {version!r})" if version is not None else ""),
                    detail="an adapter that writes a value in parts must make the new value "
                    "visible only once every part is stored (write the parts aside, then switch "
                    "to them in one step), and must raise when a part fails",
                )

    @checks("error.unavailable", "put.round-trip")
    async def test_get_whose_backend_goes_down_partway_never_answers_part_of_a_value(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A get of a large value (as for the put above) while the backend goes down once it
        has answered a request: an adapter that reads a value in parts is cut between two.
        It must raise ``StorageUnavailable`` or answer the whole value: one that reads parts
        until one fails (a failed part read as "no more parts") answers the first part
        alone, which its caller takes for the value."""
        outage, size = self._partway("get", backend_outage, storage_target)
        key, value = "down-partway-get", _large_value(size)
        async with outage.client(storage_target, storage, storage_location) as client:
            await client.put(key, value)
            context = f"while its backend went down partway ({outage.name})"
            async with outage.down_partway(raw_storage(client)) as went_down:
                with backend_down_partway(went_down):
                    got, _ = await _answer_or_unavailable("get", key, context, client.get(key))
                context += "" if went_down() else ", though it never went down"
            if got is not None and bytes(got.data) != value:
                fail(
                    "a get cut partway must raise or answer the whole value",
                    key=key,
                    expected=f"StorageUnavailable, or the {size:,} bytes stored",
                    observed=f"it answered {_held(bytes(got.data))} {context}",
                    detail="an adapter that reads a value in parts must raise when a part "
                    "fails, never stop there as if the value ended",
                )
            after = f"a get of {size:,} bytes {context}"
            await own_answer(client, "down-next", after)
            await expect_value(
                client,
                key,
                value,
                promise="an outage must lose nothing that was stored",
                detail=f"after {after}",
            )

    def _partway(
        self, op: Operation, outage: Outage | None, target: Target | None
    ) -> tuple[Outage, int]:
        """The outage of a partway test of ``op``, and the size of its value."""
        __tracebackhide__ = True
        outage = _failing(op, outage)
        if not outage.partway:
            pytest.skip(f"{outage.name} cannot start partway through a call")
        sizes = large_sizes(
            min(PARTWAY_VALUE, DEFAULT_MAX_VALUE if target is None else target.max_value)
        )
        if not sizes:
            pytest.skip("the target's max_value holds no large value")
        return outage, sizes[-1]

    @checks("close.backend-down", "close.releases")
    async def test_aclose_while_the_backend_is_down_returns_and_releases_everything(
        self,
        storage: Storage,
        backend_outage: Outage | None,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A storage used (a put, a get, a listing: its connections open), its backend
        taken down, then closed: ``aclose()`` returns within `UNAVAILABLE_BOUND` without
        raising (every write returned once stored: there is nothing left to ask the
        backend) and leaves no descriptor, session, pending task or thread. An
        ``aclose()`` that says goodbye to its server and awaits the answer (a ``QUIT``)
        raises the outage at its caller, or hangs, or keeps the socket it failed on."""
        outage = _failing("put", backend_outage)
        async with outage.client(storage_target, storage, storage_location) as client:
            before = descriptors.snapshot() if descriptors.available() else None
            await client.put("down-close/a", b"written before the outage")
            await client.get("down-close/a")
            _ = [key async for key in client.list("down-close/")]
            context = f"while its backend was down ({outage.name})"
            found: list[descriptors.Descriptor] = []
            async with outage.down(raw_storage(client)), hygiene(check=False) as report:
                with backend_down():
                    await aclose_within(client, UNAVAILABLE_BOUND, "down-close/a", context)
            if before is not None:
                foreign = None if storage_target is None else storage_target.foreign_descriptors
                found = await descriptors.wait_for_no_leak(
                    before, grace=RELEASE_LAG, foreign=foreign
                )
            if found or report.findings:
                fail(
                    "aclose() must release everything while the backend is down",
                    key="down-close/a",
                    expected="as many open descriptors as before the storage was used, and "
                    "no unclosed session, pending task or thread",
                    observed="; ".join(
                        (
                            ["the process still has " + descriptors.describe_leak(found)]
                            if found
                            else []
                        )
                        + report.findings
                    )
                    + f" ({context})",
                    detail="close every connection, session and file in aclose(), also one "
                    "whose last call failed",
                )


async def _raises_unavailable(
    op: str, key: str, context: str, call: Awaitable[Any]
) -> StorageUnavailable:
    """The ``StorageUnavailable`` that ``call`` (``op`` with its backend down) must raise
    within `UNAVAILABLE_BOUND`, chaining the backend's error; anything else fails."""
    __tracebackhide__ = True
    started = time.monotonic()
    with backend_down():
        answer, error = await _answer_or_unavailable(op, key, context, call)
    if error is None:
        fail(
            f"{_a(op)} must raise StorageUnavailable when its backend is down",
            key=key,
            expected="StorageUnavailable",
            observed=f"it answered {describe(answer)} after "
            f"{time.monotonic() - started:.3f} s ({context}), as if the backend had been asked",
            detail="The backend could not be asked, so the answer was made up: an adapter "
            "that reads an error (a missing directory, a refused connection) as 'not there', "
            "'nothing listed' or the end of a listing must raise StorageUnavailable instead",
        )
    return error


async def _answer_or_unavailable(
    op: str, key: str, context: str, call: Awaitable[Any]
) -> tuple[Any, StorageUnavailable | None]:
    """What ``call`` answered, or the ``StorageUnavailable`` it raised (chaining the
    backend's error), within `UNAVAILABLE_BOUND`; any other error, or none in time, fails."""
    __tracebackhide__ = True
    scope = asyncio.timeout(UNAVAILABLE_BOUND)
    try:
        async with scope:
            return await call, None
    except StorageUnavailable as exc:
        error = exc
    except TimeoutError as exc:
        if not scope.expired():
            _wrong(op, key, exc, context)
        fail(
            f"{_a(op)} must raise StorageUnavailable when its backend is down",
            key=key,
            expected=f"StorageUnavailable within {UNAVAILABLE_BOUND:g} s",
            observed=f"it had not returned after {UNAVAILABLE_BOUND:g} s ({context})",
            detail="An adapter bounds every call (a deadline over its retries), "
            "then raises StorageUnavailable",
        )
    except PreconditionFailed as exc:
        _wrong(
            op,
            key,
            exc,
            context,
            "PreconditionFailed says the backend was asked and the condition did not hold: "
            "its caller re-reads and gives the write up, or takes another writer for the "
            "winner. An adapter must not read every error of a conditional request as a "
            "failed condition (catch the backend's precondition answer only: HTTP 412, a "
            "zero-row UPDATE, a nil from SET NX)",
        )
    except Exception as exc:
        _wrong(op, key, exc, context)
    if error.__cause__ is None:
        fail(
            "StorageUnavailable must chain the backend's own error",
            key=key,
            expected="its __cause__ to be the backend's error",
            observed=f"{describe(error)} has no __cause__ ({context})",
            detail="Raise it with 'raise StorageUnavailable(...) from exc', so that "
            "the traceback shows what failed",
        )
    return None, error


async def _next_page_down(
    outage: Outage, storage: Storage, target: Target | None, location: str | None
) -> None:
    """A listing of five keys in pages of two: its first page read with the backend up,
    the next while it is down must raise ``StorageUnavailable``."""
    __tracebackhide__ = True
    async with outage.client(target, storage, location) as client:
        keys, listing, seen = await first_of_two_pages(client, "down-pages/")

        async def rest() -> str:
            keys_after = [key async for key in listing]
            return f"{len(seen) + len(keys_after)} of the 5 keys, the listing cut short"

        context = f"while the backend was down ({outage.name}), after its first page"
        async with outage.down(raw_storage(client)):
            await _raises_unavailable("listing's next page", keys[2], context, rest())
        await expect_keys(
            client,
            keys,
            prefix="down-pages/",
            promise="once the backend is back, a listing must get its own answer",
        )


async def first_of_two_pages(
    storage: Storage, prefix: str
) -> tuple[list[str], AsyncIterator[str], list[str]]:
    """Five keys under ``prefix`` put through ``storage``, listed in pages of two, the first
    page read: the keys, the listing and what it yielded so far. *Not exercised* for an
    adapter whose page size is not known (not a `StorageBase`)."""
    __tracebackhide__ = True
    keys = [f"{prefix}{i}" for i in range(5)]
    for key in keys:
        await storage.put(key, key.encode())
    if not set_small_pages(storage, 2):
        not_exercised(
            "the adapter's page size is not known (no StorageBase): a listing cannot "
            "be read across pages with a handful of keys"
        )
    listing = storage.list(prefix)
    return keys, listing, [await anext(listing), await anext(listing)]


def _failing(op: Operation, outage: Outage | None) -> Outage:
    """``outage`` if it fails ``op``; else the test is skipped or not exercised."""
    __tracebackhide__ = True
    if outage is not None and not outage.can_fail:
        pytest.skip(f"the storage has {outage.name}: no {op} can find it down")
    if outage is None or not outage.operations:
        not_exercised(
            f"the target supplies no outage, so no {op} ran while the backend was down: "
            "give the Target one (Target(outage=...), see checkpointkit.conformance.outages)"
        )
    if not outage.fails(op):
        pytest.skip(f"{outage.name} fails only {', '.join(sorted(outage.operations))}, not {op}")
    return outage


def _wrong(op: str, key: str, exc: BaseException, context: str, detail: str = _FIX) -> None:
    __tracebackhide__ = True
    fail(
        f"{_a(op)} must raise StorageUnavailable when its backend is down",
        key=key,
        expected="StorageUnavailable (or OutcomeUnknown) with the backend's error chained",
        observed=f"it raised {type(exc).__module__}.{describe(exc)} ({context}), "
        + (
            "an answer made up: the backend could not be asked"
            if isinstance(exc, PreconditionFailed)
            else "which a caller cannot tell from a bug"
        ),
        detail=detail,
    )


async def _expect_kept(client: Storage, after: str) -> None:
    """The keys no test of the outage touches (`_KEPT`) hold what they held, ``after``."""
    __tracebackhide__ = True
    for key, value in _KEPT.items():
        await expect_value(
            client,
            key,
            value,
            promise="an outage must lose nothing that was stored",
            detail=f"after {after}",
        )


def _large_value(size: int) -> bytes:
    """``size`` bytes whose every 64 KiB block differs (a part read twice, or out of place,
    shows)."""
    blocks = (size + 65535) // 65536
    return b"".join(i.to_bytes(4, "big") * 16384 for i in range(blocks))[:size]


def _held(data: bytes | None) -> str:
    """What a key holds, for a message about a large value."""
    if data is None:
        return "nothing (the key is missing)"
    if len(data) <= 64:
        return describe(data)
    return f"{len(data):,} bytes"


def _a(kind: str) -> str:
    """``kind`` with its article: "a put", "an if-match put"."""
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"

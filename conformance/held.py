"""The held-backend tests of the ``cancellation`` group: each operation, cancelled while the
backend does not answer.

For each of ``put``, ``delete``, ``delete_many``, ``get`` and a ``list`` page,
the test writes what it needs, holds the backend with the target's hold
(`holds`), starts the operation, checks that
the hold caught it (it is still running), cancels it, and checks:

1. ``CancelledError`` within the cancel bound, although the backend does not answer;
2. for a write, the key holds the whole old or the whole new value, and after
   the release nothing of the write lands over the settle window (a failure
   where the adapter declares ``settles_cancelled_writes``, an indeterminate
   outcome where it does not), watched through a second client where the
   target can open one;
3. once the backend answers again, the next calls on the same client get
   their own answers (for a read: the value or the keys that are stored).

A target that supplies no hold, or whose hold did not catch the operation in
flight, gets the test reported as *not exercised* (a skip whose reason starts
with ``not exercised:``, listed by the report and keeping the level from
``full``): never a pass. An operation that the hold says it does not hold (a
writers' lock and a read) is skipped with the hold's name.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from ..errors import StorageError
from ..storage import Storage
from ..storage import delete_many as delete_many_of
from . import descriptors
from .cancelling import aclose_within, cancel, check_raised, own_answer
from .checks import describe, expect_keys, expect_value, fail
from .clauses import checks
from .coverage import backend_held, watching_landings
from .fixtures import StorageFixtures, not_exercised, raw_key, raw_storage
from .holds import Hold, Operation
from .hygiene_rules import RELEASE_LAG
from .lost_replies import HELD_TIMEOUT
from .proxy import StallProxy
from .settle import SettleWatch
from .sweeps import expect_busy_released, max_value_of
from .target import Target
from .unavailable import UNAVAILABLE_BOUND, _a

__all__ = ["CLOSE_BOUND", "CLOSE_WAIT_BOUND", "HOLD_ATTEMPTS", "HeldBackendTests", "not_exercised"]

STALLED_PUT = 16 * 1024 * 1024
"""The size of the put that the stalled-link close test holds: more than a loopback socket's
send and receive buffers take, so that part of it waits in the client's own buffers."""

STUCK_PUT = 8 * 1024 * 1024
"""The size of the put whose link stops moving until it ends by its own deadline: more than
a loopback socket's send buffer takes, so that the client waits to write the rest."""
CLOSE_BOUND = 5.0
"""Seconds within which ``aclose()`` must return while the backend is held: it has nothing
to ask the backend (the built-in adapters take milliseconds)."""

CLOSE_WAIT_BOUND = 15.0
"""Seconds within which ``aclose()`` must return while a call that the target's hold stops
is in flight, where the suite cannot give the storage a short ``timeout``: ``aclose()`` may
wait for the call's own deadline (a lock timeout, 5 s by default for the file and SQLite
adapters)."""

HOLD_ATTEMPTS = 3
"""Tries at catching an operation inside a hold that holds it only for a while (a large value)."""

_SHORTEST_HOLD = 0.005
"""Seconds: an operation that a hold cannot keep this long is not held at all."""


@dataclass
class _Case:
    """One operation to hold: what it works on, what it may leave, and how to check after."""

    op: Operation
    key: str  # the key the hold is taken for
    before: dict[str, bytes]  # written first
    start: Callable[[Storage], Awaitable[Any]]
    allowed: dict[str, tuple[bytes | None, ...]] = field(default_factory=dict)  # writes
    written: dict[str, bytes | None] = field(default_factory=dict)


def _case(op: Operation, hold: Hold) -> _Case:
    if op == "put":
        new = hold.value()
        old = b"old value before the held put"
        return _Case(
            op,
            "held",
            {"held": old},
            lambda s: s.put("held", new),
            allowed={"held": (old, new)},
            written={"held": new},
        )
    if op == "delete":
        return _Case(
            op,
            "held-delete",
            {"held-delete": b"still here"},
            lambda s: s.delete("held-delete"),
            allowed={"held-delete": (None, b"still here")},
            written={"held-delete": None},
        )
    if op == "delete_many":
        keys = [f"held-many/{i}" for i in range(4)]
        values = {k: f"value of {k}".encode() for k in keys}
        return _Case(
            op,
            keys[0],
            values,
            lambda s: delete_many_of(s, keys),
            allowed={k: (None, v) for k, v in values.items()},
            written=dict.fromkeys(keys),
        )
    if op == "get":
        return _Case(
            op, "held-get", {"held-get": b"the held get's value"}, lambda s: s.get("held-get")
        )
    keys = [f"held-list/{i}" for i in range(5)]

    async def first_page(s: Storage) -> list[str]:
        return [k async for k in s.list("held-list/", limit=2)]

    return _Case(op, keys[0], {k: k.encode() for k in keys}, first_page)


class HeldBackendTests(StorageFixtures):
    """Each operation cancelled while the target's hold keeps the backend from answering."""

    conformance_group: ClassVar[str | None] = "cancellation"

    async def _held(
        self,
        op: Operation,
        storage: Storage,
        settle: SettleWatch,
        hold: Hold,
        bound: float,
        target: Target | None,
        location: str | None,
    ) -> None:
        __tracebackhide__ = True
        if not hold.operations:
            not_exercised(
                f"the target supplies no hold ({hold.name} holds nothing), so no {op} was "
                "cancelled while the backend did not answer: give the Target a hold "
                "(Target(hold=...), see checkpointkit.conformance.holds)"
            )
        if not hold.holds(op):
            pytest.skip(
                f"{hold.name} holds only {', '.join(sorted(hold.operations))}, not {op}: "
                f"a {op} never waits for it"
            )
        case = _case(op, hold)
        async with hold.client(target, storage, location) as client:
            proxied = client is not storage
            for key, value in case.before.items():
                await client.put(key, value)
            if op == "put":
                await hold.prepare(client, case.key)
            # The watch reads through a client that the hold does not stop, where there is one.
            watch = settle
            if proxied and location is not None:
                watch = SettleWatch(
                    storage,
                    window=settle.window,
                    settles=settle.settles,
                    node=settle.node,
                    second_client=True,
                    interval=settle.interval,
                )
            observed: dict[str, bytes | None] = {}
            # the cancelled write is watched below, over the settle window
            with watching_landings():
                async with hold.held(raw_storage(client), raw_key(client, case.key)):
                    task = await _catch(op, case, client, hold)
                    context = f"cancelled while held by {hold.name}"
                    outcome = await cancel(
                        lambda: case.start(client), context, case.key, bound=bound, task=task
                    )
                    check_raised([outcome], f"{op} (held by {hold.name})", bound)
                    # What the keys hold once CancelledError was raised, while still held. A hold
                    # that stops the watching client's reads too stops every change: the keys
                    # then hold what they held before, and any change after the release is late.
                    held_reads = False
                    if case.allowed and watch.observer is not client:
                        try:
                            async with asyncio.timeout(1.0):
                                for key in case.allowed:
                                    observed[key] = await watch.read(key)
                        except TimeoutError:
                            held_reads = True
                    elif case.allowed:
                        held_reads = hold.holds("get")
                    if held_reads:
                        observed = {key: case.before.get(key) for key in case.allowed}
            # The backend answers again: a write that was not settled lands from here, so
            # the settle window starts now.
            released = time.monotonic()
            for key, allowed in case.allowed.items():
                now = await watch.read(key)
                if key not in observed:
                    observed[key] = now
                for seen in (observed[key], now):
                    if seen not in allowed:
                        fail(
                            f"a cancelled {op} must be whole or absent",
                            key=key,
                            expected=" or ".join(describe(a) for a in allowed),
                            observed=f"it holds {describe(seen)} ({context})",
                        )
                watch.add(
                    key,
                    observed[key],
                    what="delete" if op != "put" else "put",
                    since=released,
                    context=context + ", then the hold was released (the delay counts from the "
                    "release)",
                    allowed=allowed,
                    written=case.written[key],
                )
            if case.allowed:
                await watch.settle()
            await _next_answers(op, case, client, context)

    @checks(
        "cancel.held-backend",
        "cancel.prompt",
        "cancel.whole-or-absent",
        "cancel.no-late-landing",
        "cancel.healthy-after",
    )
    async def test_put_cancelled_while_held_in_backend_raises_promptly_and_never_lands(
        self,
        storage: Storage,
        settle: SettleWatch,
        backend_hold: Hold,
        cancel_bound: float,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        await self._held(
            "put", storage, settle, backend_hold, cancel_bound, storage_target, storage_location
        )

    @checks(
        "cancel.held-backend",
        "cancel.prompt",
        "cancel.whole-or-absent",
        "cancel.no-late-landing",
        "cancel.healthy-after",
    )
    async def test_delete_cancelled_while_held_in_backend_raises_promptly_and_never_lands(
        self,
        storage: Storage,
        settle: SettleWatch,
        backend_hold: Hold,
        cancel_bound: float,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        await self._held(
            "delete", storage, settle, backend_hold, cancel_bound, storage_target, storage_location
        )

    @checks(
        "cancel.held-backend",
        "cancel.prompt",
        "cancel.whole-or-absent",
        "cancel.no-late-landing",
        "cancel.healthy-after",
    )
    async def test_delete_many_cancelled_while_held_in_backend_raises_promptly_and_never_lands(
        self,
        storage: Storage,
        settle: SettleWatch,
        backend_hold: Hold,
        cancel_bound: float,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        await self._held(
            "delete_many",
            storage,
            settle,
            backend_hold,
            cancel_bound,
            storage_target,
            storage_location,
        )

    @checks("cancel.held-backend", "cancel.prompt", "cancel.healthy-after")
    async def test_get_cancelled_while_held_in_backend_raises_promptly_and_client_recovers(
        self,
        storage: Storage,
        settle: SettleWatch,
        backend_hold: Hold,
        cancel_bound: float,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        await self._held(
            "get", storage, settle, backend_hold, cancel_bound, storage_target, storage_location
        )

    @checks("cancel.held-backend", "cancel.prompt", "cancel.healthy-after")
    async def test_list_page_cancelled_while_held_in_backend_raises_promptly_and_client_recovers(
        self,
        storage: Storage,
        settle: SettleWatch,
        backend_hold: Hold,
        cancel_bound: float,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        await self._held(
            "list", storage, settle, backend_hold, cancel_bound, storage_target, storage_location
        )

    @checks("close.backend-down", "close.releases")
    async def test_aclose_while_the_backend_is_held_returns_promptly(
        self,
        storage: Storage,
        backend_hold: Hold,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A storage used (a put, a get, a listing: its connections open), then closed
        while the target's hold keeps the backend from answering (a server stopped, a
        network that drops everything): ``aclose()`` must return within `CLOSE_BOUND`
        without raising. It has nothing to ask the backend; one that says goodbye to its
        server and awaits the answer (a ``QUIT``) never returns, and the shutdown it is part
        of never ends."""
        hold = backend_hold
        if not hold.operations or not hold.stops_backend:
            not_exercised(
                f"the target's hold ({hold.name}) does not stop the backend, so no storage "
                "was closed while its backend did not answer: give the Target a hold "
                "(Target(hold=...), see checkpointkit.conformance.holds)"
            )
        key = "held-close/a"
        async with hold.client(storage_target, storage, storage_location) as client:
            await client.put(key, b"written before the hold")
            await client.get(key)
            _ = [k async for k in client.list("held-close/")]
            context = f"while its backend was held by {hold.name}"
            async with hold.held(raw_storage(client), raw_key(client, key)):
                with backend_held():
                    await aclose_within(client, CLOSE_BOUND, key, context)

    @checks("close.in-flight", "close.releases")
    async def test_aclose_with_a_call_the_backend_does_not_answer_leaves_nothing_running(
        self,
        storage: Storage,
        backend_hold: Hold,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A call in flight that the backend does not answer when ``aclose()`` is called,
        and the backend still silent when ``aclose()`` returns: by then the call has ended
        (with its own answer, ``StorageClosed``, or the error of its own deadline), and
        once everything is closed no descriptor is left. An ``aclose()`` that gives the
        call a grace and closes its connection only when the call ended in it (the close
        not in a ``finally:``) returns with the call still waiting on a socket that
        nothing closes.

        Where the target takes ``endpoint`` and ``timeout``, a get through a new stall
        proxy that holds its request, on a storage opened with ``timeout`` `HELD_TIMEOUT`:
        ``aclose()`` must return within `CLOSE_BOUND` after that. Otherwise the first
        operation that the target's hold stops, and ``aclose()`` may take the call's own
        deadline (a lock timeout), up to `CLOSE_WAIT_BOUND`."""
        if storage_target is not None and storage_target.times_out:
            assert storage_target.upstream is not None
            before = descriptors.snapshot() if descriptors.available() else None
            async with (
                StallProxy(storage_target.upstream) as proxy,
                storage_target.open(endpoint=proxy.address, timeout=HELD_TIMEOUT) as client,
            ):
                await client.put("held-close/get", b"the held get's value")
                proxy.stall("request", partial=True)
                task: asyncio.Future[Any] = asyncio.ensure_future(client.get("held-close/get"))
                await _held_by(proxy, task, "get")
                context = (
                    f"a get whose request the stall proxy held when aclose() was called, on "
                    f"a storage opened with timeout={HELD_TIMEOUT:g}"
                )
                await _close_under(client, task, "get", "held-close/get", context, HELD_TIMEOUT)
                proxy.resume()
            await expect_busy_released(before, storage_target, "held-close/get", _RELEASED, context)
            return
        hold = backend_hold
        if not hold.operations or not hold.stops_backend:
            not_exercised(
                f"the target's hold ({hold.name}) does not stop the backend, and the target "
                "takes no endpoint and timeout, so no call was in flight without an answer "
                "when aclose() was called: give the Target a hold (Target(hold=...), see "
                "checkpointkit.conformance.holds)"
            )
        op = next(o for o in _HELD_OPS if hold.holds(o))
        case = _case(op, hold)
        context = (
            f"{_a('listing' if op == 'list' else op)} held by {hold.name} when aclose() was called"
        )
        async with hold.client(storage_target, storage, storage_location) as client:
            before = descriptors.snapshot() if descriptors.available() else None
            for key, value in case.before.items():
                await client.put(key, value)
            if op == "put":
                await hold.prepare(client, case.key)
            async with hold.held(raw_storage(client), raw_key(client, case.key)):
                task = await _catch(op, case, client, hold)
                await _close_under(client, task, op, case.key, context, None)
        await expect_busy_released(before, storage_target, case.key, _RELEASED, context)

    @checks("close.releases", "hygiene.descriptors")
    async def test_aclose_with_a_large_put_stalled_on_the_link_closes_its_socket_at_once(
        self, storage_target: Target | None
    ) -> None:
        """A put of `STALLED_PUT` bytes (at most the target's ``max_value``) whose request
        the stall proxy stops forwarding partway, and stops reading, the rest of it waiting
        in the client's send buffers, is cancelled, and ``aclose()`` called, on a storage
        opened with ``timeout`` `HELD_TIMEOUT`. ``aclose()`` returns (within the timeout
        and `CLOSE_BOUND`), and by then, the link still stalled, no socket of the storage
        to the proxy is open (give or take `RELEASE_LAG`). A connection closed gracefully
        (asyncio's ``transport.close()``, a driver's ``close()``) stays open until its
        buffered bytes are sent: with the link stalled, for ever; once it moves, they go
        out after ``aclose()`` returned, and the put lands. Abort such a connection
        (``transport.abort()``)."""
        target = _stallable(storage_target)
        size = min(STALLED_PUT, max_value_of(target))
        async with _StalledPut.started(target, size, "held-big/k") as stalled:
            context = (
                f"a put of {size:,} bytes whose request the stall proxy held partway, "
                f"cancelled, then aclose() called, on a storage opened with "
                f"timeout={HELD_TIMEOUT:g}"
            )
            stalled.task.cancel()
            await asyncio.wait({stalled.task}, timeout=HELD_TIMEOUT + CLOSE_BOUND)
            await stalled.closed(
                context,
                "a connection closed gracefully waits to send what its buffers hold, for as "
                "long as the link takes, and sends the rest of the put after aclose() "
                "returned: abort the connections that aclose() closes (transport.abort(), "
                "the driver's terminate()), at least those whose requests are unfinished",
            )

    @checks("error.healthy-after", "close.releases", "hygiene.descriptors")
    async def test_a_large_put_whose_link_stops_moving_ends_by_its_own_deadline(
        self, storage_target: Target | None
    ) -> None:
        """A put of `STUCK_PUT` bytes, on a storage opened with ``timeout`` `HELD_TIMEOUT`,
        whose request the stall proxy holds partway and stops reading, so that the rest
        waits in the client's buffers and its writes block: nobody cancels it, and it must
        end by its own deadline with a `StorageError` within `UNAVAILABLE_BOUND` (an adapter
        may give a large value a longer deadline than ``timeout``, not an endless one).
        Then ``aclose()`` returns and, the link still stalled, no socket of the storage to
        the proxy is left open. A deadline that bounds each read of the reply (a driver's
        ``read_timeout``) never fires while the client is still writing, and a connection
        closed with a goodbye (``QUIT``, a graceful close) waits for buffers that never
        empty: the call hangs."""
        target = _stallable(storage_target)
        size = min(STUCK_PUT, max_value_of(target))
        key = "held-stuck/k"
        context = (
            f"a put of {size:,} bytes whose request the stall proxy held partway and stopped "
            f"reading, on a storage opened with timeout={HELD_TIMEOUT:g}"
        )
        async with _StalledPut.started(target, size, key) as stalled:
            task = stalled.task
            started = time.monotonic()
            await asyncio.wait({task}, timeout=UNAVAILABLE_BOUND)
            if not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=CLOSE_BOUND)
                fail(
                    "a call whose backend stops taking its request ends by its own deadline",
                    key=key,
                    expected=f"a StorageError within {UNAVAILABLE_BOUND:g} s",
                    observed=f"the put had not ended after {UNAVAILABLE_BOUND:g} s ({context})",
                    detail="bound the whole call, the sending of its request included, by "
                    "one deadline (asyncio.timeout around it), not each read of the reply; "
                    "then abort its connection (a goodbye waits for buffers that the link "
                    "never drains)",
                )
            took = time.monotonic() - started
            outcome = (await asyncio.gather(task, return_exceptions=True))[0]
            if not isinstance(outcome, StorageError):
                fail(
                    "a put whose request never reached its server whole cannot succeed",
                    key=key,
                    expected="StorageUnavailable or OutcomeUnknown",
                    observed=f"it ended with {describe(outcome)} after {took:.1f} s ({context})",
                )
            await stalled.closed(
                f"after {context} ended by its deadline",
                "abort the connection of a call that failed mid-request (transport.abort(), "
                "the driver's terminate()), not a graceful close",
            )


def _stallable(storage_target: Target | None) -> Target:
    """``storage_target``, if a put can be stalled on its link; else skip the test."""
    __tracebackhide__ = True
    if storage_target is None or not storage_target.times_out:
        pytest.skip(
            "no put can be stalled on a link: the target's factory takes no endpoint and "
            "timeout, or the target names no upstream server"
        )
    return storage_target


@dataclass
class _StalledPut:
    """A large put whose request the stall proxy holds partway and stops reading (a link
    that stopped moving), on a storage opened through the proxy with ``timeout``
    `HELD_TIMEOUT`."""

    target: Target
    key: str
    proxy: StallProxy
    client: Storage
    task: asyncio.Future[Any]
    before: dict[int, str] | None  # the process's descriptors before the storage opened

    @classmethod
    @asynccontextmanager
    async def started(cls, target: Target, size: int, key: str) -> AsyncIterator[_StalledPut]:
        """Open the storage, put a small value, then start the put of ``size`` bytes and
        wait until the proxy holds it; the link stays stalled until the context ends."""
        assert target.upstream is not None
        async with StallProxy(target.upstream, receive_buffer=64 * 1024) as proxy:
            before = descriptors.snapshot() if descriptors.available() else None  # its own out
            async with target.open(endpoint=proxy.address, timeout=HELD_TIMEOUT) as client:
                await client.put(key, b"the value before the held put")
                proxy.stall("request", partial=True, backpressure=True, large=True)
                task: asyncio.Future[Any] = asyncio.ensure_future(client.put(key, bytes(size)))
                await _held_by(proxy, task, "put")
                try:
                    yield cls(target, key, proxy, client, task, before)
                finally:
                    proxy.resume()

    async def closed(self, context: str, detail: str) -> None:
        """``aclose()`` returns, the put ends, and then, the link still stalled, no socket
        of the storage to the proxy is left open (``context`` says how the put got there,
        ``detail`` what to do about a socket left)."""
        __tracebackhide__ = True
        with backend_held():
            await aclose_within(self.client, HELD_TIMEOUT + CLOSE_BOUND, self.key, context)
        await asyncio.gather(self.task, return_exceptions=True)
        if self.before is None:
            return
        link = f" -> {self.proxy.address[0]}:{self.proxy.address[1]} "
        left = await descriptors.wait_for_no_leak(
            self.before,
            grace=RELEASE_LAG,
            foreign=self.target.foreign_descriptors,
            only=lambda d: link in d.name,  # not the proxy's own to the server
        )
        if left:
            fail(
                "when aclose() returns, no socket of the storage is left open or writing",
                key=self.key,
                expected=f"as many open descriptors as before the storage was opened, "
                f"{RELEASE_LAG:g} s after aclose() returned, the link still stalled",
                observed=f"the process still had {descriptors.describe_leak(left)} ({context})",
                detail=detail,
            )


async def _held_by(proxy: StallProxy, task: asyncio.Future[Any], what: str) -> None:
    """Wait until ``proxy`` holds bytes of ``task`` (the ``what`` just started); if it ended
    first, let it end and report the test not exercised."""
    __tracebackhide__ = True
    if not await proxy.holding(task, 10):
        proxy.resume()
        await asyncio.gather(task, return_exceptions=True)
        not_exercised(f"the stall proxy did not hold the {what} (it ended first)")


async def _close_under(
    client: Storage,
    task: asyncio.Future[Any],
    op: Operation,
    key: str,
    context: str,
    timeout: float | None,
) -> None:
    """``aclose()`` while ``task`` (``op``) waits for a silent backend: it must return, and
    the call must have ended by then (`RELEASE_LAG` for its task to see it), with its own
    answer or a ``StorageError``."""
    __tracebackhide__ = True
    bound = CLOSE_WAIT_BOUND if timeout is None else timeout + CLOSE_BOUND
    with backend_held():
        await aclose_within(client, bound, key, context)
    await asyncio.wait({task}, timeout=RELEASE_LAG)
    ended = task.done()
    if not ended:
        task.cancel()
    outcome = (await asyncio.gather(task, return_exceptions=True))[0]
    if not ended:
        fail(
            "when aclose() returns, no call of the storage is still running",
            key=key,
            expected=f"the {op} in flight to have ended (with its own answer, StorageClosed "
            "or its deadline's error) when aclose() returned",
            observed=f"it was still waiting, {RELEASE_LAG:g} s after aclose() returned "
            f"({context}; the backend was still silent)",
            detail="let aclose() wait for the calls under way (each until its own deadline) "
            "or end them, and close every connection in a finally: block: a close skipped "
            "when the wait for a call timed out leaves the call waiting on its socket until "
            "the server answers, or for ever",
        )
    if isinstance(outcome, BaseException) and not isinstance(outcome, StorageError):
        fail(
            "a call in flight when aclose() is called must end with its own answer or a "
            "StorageError",
            key=key,
            expected="its answer, StorageClosed, or the StorageUnavailable of its deadline",
            observed=f"it raised {describe(outcome)} ({context})",
        )


_HELD_OPS: tuple[Operation, ...] = ("get", "list", "put", "delete", "delete_many")
_RELEASED = "it was closed and the backend answered again"


async def _catch(op: Operation, case: _Case, client: Storage, hold: Hold) -> asyncio.Future[Any]:
    """Start the operation until the hold catches it in flight (a large value may not)."""
    __tracebackhide__ = True
    tries = 0
    while tries < HOLD_ATTEMPTS:
        tries += 1
        task = asyncio.ensure_future(case.start(client))
        if await hold.caught(task):
            return task
        if not task.cancelled():
            task.exception()
        # A hold that stops the backend did not stop it: writing the case's keys again, to
        # try once more, would wait for the hold itself (a put it does stop).
        if hold.stops_backend or tries == HOLD_ATTEMPTS or hold.hold_for <= _SHORTEST_HOLD:
            break
        # It went faster than when it was timed (a busy machine then): cancel sooner.
        hold.hold_for = max(hold.hold_for / 4, _SHORTEST_HOLD)
        for key, value in case.before.items():
            await client.put(key, value)
    not_exercised(
        f"{hold.name} did not hold the {op}: it finished within {hold.hold_for * 1000:g} ms, "
        f"{tries} {'time' if tries == 1 else 'times'} (the adapter answers without waiting "
        "for the backend, or the hold does not apply to it: give the Target a hold that stops "
        "this backend, Target(hold=...), naming only the operations it stops)"
    )


async def _next_answers(op: Operation, case: _Case, client: Storage, context: str) -> None:
    __tracebackhide__ = True
    what = f"a {op} {context}"
    await own_answer(client, "held-next", what)
    if op == "get":
        await expect_value(
            client,
            case.key,
            case.before[case.key],
            promise="after a cancelled get, the client must stay healthy",
            detail=what,
        )
    elif op == "list":
        await expect_keys(
            client,
            sorted(case.before),
            prefix="held-list/",
            promise="after a cancelled listing, the next listing must get its own answer",
        )

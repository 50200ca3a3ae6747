"""Group ``cancellation``: a cancelled operation did all or nothing, promptly, the
client stays healthy, and (for an adapter that declares it) nothing lands later.

Four ways to cancel an operation in flight:

- a sweep over the adapter itself: start the operation, let the event loop run
  a few iterations (or a few milliseconds) and cancel, at many points, so that
  cancellation lands inside the adapter's own awaits;
- a stall inside the backend, for any adapter (the ``backend_stall`` fixture,
  `stalls`): a held file lock or transaction,
  or a value large enough to take a while;
- the fault-injecting wrapper (`faults`),
  usable around every adapter: the call stalls before or after the backend;
- for network adapters whose target accepts an ``endpoint``, the loopback
  stall proxy (`proxy`): the backend stops
  answering mid-request or mid-response.

After each cancellation the suite checks: ``CancelledError`` within the
cancel bound (``cancel_bound``, 0.5 s by default, the measured delay in the
failure); the key holds the whole old or the whole new value, read through a
second client of the same data where the target can open one; and, over the
settle window (`settle`), whether the write
lands later: a failure for an adapter that declares
``settles_cancelled_writes``, an indeterminate outcome for one that does not;
the next operation on the same client gets its own answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from typing import ClassVar, Literal, TypeVar

import pytest

from ..storage import IfMatch, PutMode, Storage
from ..storage import delete_many as delete_many_of
from .cancelling import (
    Outcome,
    cancel,
    check_raised,
    expect_listed_iff_readable,
    next_calls,
    observe,
    own_answer,
    point_text,
)
from .checks import ConformanceFailure, describe, expect_value, fail, get_or_none
from .clauses import checks
from .coverage import watching_landings
from .faults import FaultyStorage
from .fixtures import DEFAULT_CANCEL_BOUND
from .gaps import GapCancellationTests
from .held import HeldBackendTests
from .proxy import StallProxy
from .settle import SettleWatch
from .sweeps import CancellationSweepTests
from .target import Target, new_location

__all__ = ["CANCEL_BOUND", "CANCEL_POINTS", "CancellationTests"]

T = TypeVar("T")

CANCEL_BOUND = DEFAULT_CANCEL_BOUND
SLOW_LINK_EXCHANGES = 6
"""The most request chunks of one put that the slow-link test holds, one run each: a write
of several exchanges (a transaction's statement, then its ``COMMIT``) is held at each."""
"""Seconds within which a cancelled operation must raise CancelledError, by default."""

CANCEL_POINTS: list[int | float] = [0, 1, 2, 3, 5, 8, 13, 21, 0.001, 0.003, 0.01, 0.03]
"""When the sweep cancels: ints are event-loop iterations, floats seconds."""

PutSwept = Literal["overwrite", "create", "if-match"]
"""How the put sweep writes: over a value, create-only on a missing key, or if-match with
the current version of the value it holds."""

DeleteSwept = Literal["delete", "if-match delete", "delete_many"]
"""How the delete sweep deletes a key that holds a value: a delete, an if-match delete with
its current version, a ``delete_many`` of it."""


def _put_modes(conditional_put: bool) -> list[PutSwept]:
    return ["overwrite", "create", "if-match"] if conditional_put else ["overwrite"]


def _put_prefix(mode: PutSwept) -> str:
    """The keys' prefix of the put sweep of ``mode``: ``cancel/``, ``cancel-create/``..."""
    return "cancel" if mode == "overwrite" else f"cancel-{mode}"


def _delete_kinds(conditional_delete: bool) -> list[DeleteSwept]:
    if conditional_delete:
        return ["delete", "if-match delete", "delete_many"]
    return ["delete", "delete_many"]


class CancellationTests(HeldBackendTests, CancellationSweepTests, GapCancellationTests):
    """Cancelled puts and gets: prompt, whole or absent, never late, no stale replies."""

    conformance_group: ClassVar[str | None] = "cancellation"

    # -- the sweep over the adapter's own awaits ---------------------------------------------
    async def _sweep_puts(
        self,
        storage: Storage,
        observer: Storage,
        bound: float,
        size: int = 64 * 1024,
        *,
        check_whole: bool = True,
        check_prompt: bool = False,
        prefix: str = "cancel",
        mode: PutSwept = "overwrite",
        after_each: Callable[[int, Outcome, bytes | None], Awaitable[None]] | None = None,
    ) -> list[Outcome]:
        """Each put cancelled at each of `CANCEL_POINTS`; ``after_each`` gets the index, the
        outcome and the value the key held before (None: it was missing)."""
        __tracebackhide__ = True
        outcomes = []
        for i, point in enumerate(CANCEL_POINTS):
            key = f"{prefix}/{i:02d}"
            old: bytes | None = None if mode == "create" else b"o" * size
            new = bytes([97 + i % 26]) * size
            put_mode: PutMode = "create" if mode == "create" else "overwrite"
            if old is not None:
                version = await storage.put(key, old)
                put_mode = IfMatch(version) if mode == "if-match" else "overwrite"
            outcome = await cancel(
                functools.partial(storage.put, key, new, mode=put_mode), point, key, bound=bound
            )
            if check_prompt:
                check_raised([outcome], "put", bound)  # at once: a slow adapter fails fast
            outcome.observed = await observe(observer, key)
            if check_whole and outcome.observed not in (old, new):
                refs = [new] if old is None else [new, old]
                fail(
                    "a cancelled put must be whole or absent",
                    key=key,
                    expected=f"the whole old value {describe(old)} "
                    f"or the whole new value {describe(new)}",
                    observed=f"it holds {describe(outcome.observed, reference=refs)} "
                    f"({point_text(point)}, {mode})",
                )
            if check_whole:
                await expect_listed_iff_readable(
                    observer, key, f"a put ({mode}) {point_text(point)}"
                )
            if (
                check_whole
                and not outcome.cancelled
                and outcome.took
                and outcome.ended_in is not None
                and not isinstance(outcome.result, BaseException)
                and outcome.observed != new
            ):
                fail(
                    "a put that returned a version must have written",
                    key=key,
                    expected=f"the new value {describe(new)}",
                    observed=f"it holds {describe(outcome.observed)}",
                )
            outcomes.append(outcome)
            if after_each is not None:
                await after_each(i, outcome, old)
        return outcomes

    @checks("cancel.prompt")
    async def test_cancelled_put_raises_cancelled_error_promptly(
        self, storage: Storage, cancel_bound: float
    ) -> None:
        await self._sweep_puts(storage, storage, cancel_bound, check_whole=False, check_prompt=True)

    @checks("cancel.whole-or-absent", "put.atomic")
    async def test_cancelled_put_is_whole_or_absent(
        self,
        storage: Storage,
        observer: Storage,
        cancel_bound: float,
        supports_conditional_put: bool,
    ) -> None:
        """A put of each mode cancelled at each point: its key holds the whole old value or
        the whole new one, and a listing of it yields it if and only if a get finds it."""
        for mode in _put_modes(supports_conditional_put):  # checks each key at once
            await self._sweep_puts(
                storage, observer, cancel_bound, prefix=_put_prefix(mode), mode=mode
            )

    @checks("cancel.no-late-landing")
    async def test_cancelled_put_does_not_land_later(
        self,
        storage: Storage,
        settle: SettleWatch,
        cancel_bound: float,
        supports_conditional_put: bool,
    ) -> None:
        """Watched through a second client over the settle window, in sweeps: in the first
        ones every cancelled put is only watched, a sweep for each mode (an overwrite, a
        create-only put, an if-match put: an adapter may send each its own way); in the
        last a put that completes overwrites the key after each cancellation, and the
        cancelled put must not come back over it (take effect twice). Every cancellation
        point is a chance to see a late landing, so a write still in flight after
        CancelledError (a thread still writing) is seen in every run, not in some."""

        async def watch(i: int, o: Outcome, old: bytes | None) -> None:
            new = bytes([97 + i % 26]) * 1024
            settle.add(
                o.key,
                o.observed,
                what="put",
                since=o.ended_at,
                context=point_text(o.point),
                allowed=(old, new),
                written=new,
            )

        async def overwrite(i: int, o: Outcome, old: bytes | None) -> None:
            new = bytes([97 + i % 26]) * 1024
            after = f"written after the cancelled put of {o.key}".encode()
            await storage.put(o.key, after)
            settle.add(
                o.key,
                await settle.read(o.key),
                what="put",
                since=o.ended_at,
                context=point_text(o.point) + ", then overwritten by a put that completed",
                allowed=(old, new, after),
                written=new,
                seen_written=o.observed == new,
            )

        sweeps: list[tuple[str, PutSwept, Callable[[int, Outcome, bytes | None], Awaitable[None]]]]
        sweeps = [(_put_prefix(m), m, watch) for m in _put_modes(supports_conditional_put)]
        sweeps.append(("cancel-then-put", "overwrite", overwrite))
        with watching_landings():
            for prefix, mode, then in sweeps:
                await self._sweep_puts(
                    storage,
                    settle.observer,
                    cancel_bound,
                    size=1024,
                    check_whole=False,
                    prefix=prefix,
                    mode=mode,
                    after_each=then,
                )
        await settle.settle()

    async def _sweep_deletes(
        self, storage: Storage, observer: Storage, bound: float, kind: DeleteSwept
    ) -> list[Outcome]:
        """A delete of ``kind`` of a key that holds a value, cancelled at each of
        `CANCEL_POINTS`: the key deleted or whole, listed if and only if it can be read."""
        outcomes = []
        for i, point in enumerate(CANCEL_POINTS):
            key = f"cdel-{kind.replace(' ', '-')}/{i:02d}"
            version = await storage.put(key, b"still here")
            call: Callable[[], Awaitable[object]] = (
                functools.partial(delete_many_of, storage, [key])
                if kind == "delete_many"
                else functools.partial(
                    storage.delete, key, if_match=version if kind == "if-match delete" else None
                )
            )
            outcome = await cancel(call, point, key, bound=bound)
            outcome.observed = await observe(observer, key)
            if outcome.observed not in (None, b"still here"):
                fail(
                    f"a cancelled {kind} must be whole or absent",
                    key=key,
                    expected="the key to be deleted or to keep its value",
                    observed=f"it holds {describe(outcome.observed)} ({point_text(point)})",
                )
            await expect_listed_iff_readable(observer, key, f"a {kind} {point_text(point)}")
            outcomes.append(outcome)
        return outcomes

    @checks("cancel.prompt", "cancel.whole-or-absent")
    async def test_cancelled_delete_raises_promptly_and_is_whole_or_absent(
        self,
        storage: Storage,
        observer: Storage,
        cancel_bound: float,
        supports_conditional_delete: bool,
    ) -> None:
        """A delete, an if-match delete (where declared) and a ``delete_many``, each
        cancelled at each point."""
        for kind in _delete_kinds(supports_conditional_delete):
            outcomes = await self._sweep_deletes(storage, observer, cancel_bound, kind)
            check_raised(outcomes, kind, cancel_bound)

    @checks("cancel.no-late-landing")
    async def test_cancelled_delete_does_not_land_later(
        self,
        storage: Storage,
        settle: SettleWatch,
        cancel_bound: float,
        supports_conditional_delete: bool,
    ) -> None:
        """A delete, an if-match delete (where declared) and a ``delete_many`` of a key
        that holds a value, each cancelled at each point and watched over the settle
        window through a second client: a batch request that goes on after
        ``CancelledError`` (awaited through ``asyncio.shield``, sent from a task of its
        own) deletes the key later."""
        with watching_landings():
            for kind in _delete_kinds(supports_conditional_delete):
                for o in await self._sweep_deletes(storage, settle.observer, cancel_bound, kind):
                    settle.add(
                        o.key,
                        o.observed,
                        what=kind,
                        since=o.ended_at,
                        context=point_text(o.point),
                        allowed=(None, b"still here"),
                    )
        await settle.settle()

    @checks("cancel.healthy-after")
    async def test_next_call_after_cancelled_get_gets_its_own_answer(
        self, storage: Storage, cancel_bound: float
    ) -> None:
        for i, point in enumerate(CANCEL_POINTS):
            a, b = f"own/a{i:02d}", f"own/b{i:02d}"
            await storage.put(a, f"answer for {a}".encode())
            await storage.put(b, f"answer for {b}".encode())
            outcome = await cancel(functools.partial(storage.get, a), point, a, bound=cancel_bound)
            detail = f"the get of {a!r} before it was {point_text(point)}"
            async with next_calls(b, detail):
                await expect_value(
                    storage,
                    b,
                    f"answer for {b}".encode(),
                    promise="after a cancelled get, the next call must get its own answer",
                    detail=detail,
                )
                await expect_value(
                    storage,
                    a,
                    f"answer for {a}".encode(),
                    promise="after a cancelled get, the client must stay healthy",
                    detail=detail,
                )
            check_raised([outcome], "get", cancel_bound)

    @checks("cancel.healthy-after")
    async def test_next_call_after_cancelled_put_gets_its_own_answer(
        self, storage: Storage, cancel_bound: float
    ) -> None:
        for i, point in enumerate(CANCEL_POINTS):
            a, b = f"own/a{i:02d}", f"own/b{i:02d}"
            await storage.put(b, f"answer for {b}".encode())
            await cancel(
                functools.partial(storage.put, a, b"cancelled put"), point, a, bound=cancel_bound
            )
            detail = f"a put of {a!r} was {point_text(point)}"
            async with next_calls(b, detail):
                await expect_value(
                    storage,
                    b,
                    f"answer for {b}".encode(),
                    promise="after a cancelled put, the next call must get its own answer",
                    detail=detail,
                )
                version = await storage.put(b, b"after")
                await expect_value(
                    storage,
                    b,
                    b"after",
                    version=version,
                    promise="after a cancelled put, the next put must get its own version",
                    detail=detail,
                )

    # -- the fault-injecting wrapper --------------------------------------------------------------
    @checks("cancel.prompt", "cancel.whole-or-absent", "cancel.healthy-after")
    async def test_put_cancelled_while_backend_stalls_raises_promptly(
        self, storage: Storage, observer: Storage, cancel_bound: float
    ) -> None:
        faulty = FaultyStorage(storage)
        await storage.put("stall", b"old")
        stall = faulty.stall("put", when="before")
        outcome = await cancel(
            lambda: faulty.put("stall", b"new"),
            0,
            "stall",
            started=stall.entered,
            bound=cancel_bound,
        )
        check_raised([outcome], "put (stalled before the backend call)", cancel_bound)
        # Nothing reached the adapter: a second client must see the old value.
        await expect_value(
            observer,
            "stall",
            b"old",
            promise="a put cancelled before reaching the backend must not have happened",
        )
        await own_answer(faulty, "stall-next", "the stalled put was cancelled")

    @checks("cancel.whole-or-absent", "cancel.healthy-after")
    async def test_put_cancelled_after_backend_answered_is_whole(
        self, storage: Storage, observer: Storage, cancel_bound: float
    ) -> None:
        faulty = FaultyStorage(storage)
        await storage.put("stall", b"old")
        stall = faulty.stall("put", when="after")
        outcome = await cancel(
            lambda: faulty.put("stall", b"new"),
            0,
            "stall",
            started=stall.entered,
            bound=cancel_bound,
        )
        check_raised([outcome], "put (reply held after the backend call)", cancel_bound)
        await expect_value(
            observer,
            "stall",
            b"new",
            promise="a put cancelled after the backend applied it must be whole",
        )
        await own_answer(faulty, "stall-next", "the put's reply was held and then cancelled")

    # -- the stall proxy (network adapters) --------------------------------------------------------
    @checks(
        "cancel.held-backend",
        "cancel.prompt",
        "cancel.healthy-after",
        "cancel.whole-or-absent",
    )
    async def test_put_cancelled_mid_request_raises_promptly_and_client_recovers(
        self, target: Target, settle: SettleWatch, cancel_bound: float
    ) -> None:
        await _through_proxy(target, "request", settle, cancel_bound)

    @checks(
        "cancel.held-backend",
        "cancel.prompt",
        "cancel.healthy-after",
        "cancel.whole-or-absent",
    )
    async def test_put_cancelled_mid_response_raises_promptly_and_client_recovers(
        self, target: Target, settle: SettleWatch, cancel_bound: float
    ) -> None:
        await _through_proxy(target, "response", settle, cancel_bound)

    @checks("cancel.no-late-landing", "cancel.held-backend", "cancel.whole-or-absent")
    async def test_put_cancelled_while_its_request_is_on_a_slow_link_never_lands_later(
        self, target: Target, settle: SettleWatch, cancel_bound: float
    ) -> None:
        """The stall proxy lets half of a put's request through and holds the rest *on
        the wire*: when the client, cancelled, resets its connection, the held half still
        arrives, once the put has raised ``CancelledError`` (a slow link: what left the
        client arrives, and a reset does not overtake it). The server then has the whole
        request, late. An adapter that declares ``settles_cancelled_writes`` must make it
        do nothing (a deadline the server checks, past which the write does nothing, as
        the Redis and PostgreSQL adapters' scripts and statements carry); the key is
        watched over the settle window through a second client. For an adapter that does
        not declare it, a late landing is recorded as an indeterminate outcome.

        Each request of the put is held in turn, one run each: the first, then (the
        first let through) the second, and so on, until a put ends before the proxy held
        anything, `SLOW_LINK_EXCHANGES` runs at most. A write of several exchanges (a
        statement, then a ``COMMIT``) must settle wherever it was held: a deadline
        checked at an earlier exchange does not stop a commit that arrives late."""
        for after in range(SLOW_LINK_EXCHANGES):
            held = await _through_proxy(
                target, "request", settle, cancel_bound, in_flight=True, after=after
            )
            if not held:
                break


async def _bounded(aw: Awaitable[T], seconds: float, what: str, key: str) -> T:
    __tracebackhide__ = True
    try:
        async with asyncio.timeout(seconds):
            return await aw
    except TimeoutError:
        fail(
            "the client must recover once the backend answers again",
            key=key,
            expected=f"{what} to complete within {seconds:g} s after the proxy resumed forwarding",
            observed="it did not (the client is stuck on the connection of the cancelled call?)",
        )


async def _through_proxy(
    target: Target,
    direction: Literal["request", "response"],
    settle: SettleWatch,
    bound: float,
    *,
    in_flight: bool = False,
    after: int = 0,
) -> bool:
    """One put through a new stall proxy, held in ``direction`` after ``after`` chunks and
    cancelled; False (nothing checked) if the put ended before the proxy held anything,
    which only a later exchange (``after`` > 0) may do."""
    __tracebackhide__ = True
    if not target.proxyable:
        pytest.skip(
            "the target does not accept an endpoint (no stall proxy): give its factory an "
            "'endpoint' keyword and set Target.upstream"
        )
    assert target.upstream is not None
    location = new_location() if target.reopens else None
    async with (
        StallProxy(target.upstream) as proxy,
        target.open(endpoint=proxy.address, location=location) as storage,
        contextlib.AsyncExitStack() as stack,
    ):
        # A second client, straight to the server (the proxied one may queue behind), open
        # throughout: closing a target's storage may clean its location up.
        direct = None
        if location is not None:
            direct = await stack.enter_async_context(target.open(location=location))
        key = f"proxy/{direction}"
        old, new = b"o" * 4096, b"n" * 4096
        await _bounded(storage.put(key, old), 10, "the first put", key)
        await _bounded(storage.put("proxy/other", b"other"), 10, "a put", "proxy/other")
        proxy.stall(direction, partial=True, in_flight=in_flight, after=after)
        call = asyncio.ensure_future(storage.put(key, new))
        if after and not await proxy.holding(call, 10) and call.done():
            if not call.cancelled():
                call.exception()  # retrieved: the put ended without this exchange
            proxy.resume()
            return False
        outcome = await cancel(lambda: call, 0, key, started=proxy.stalled, task=call, bound=bound)
        where = f"{direction} (chunk {after + 1} of it held)" if after else direction
        before: list[bytes | None] = []
        if in_flight and direct is not None:
            # what the key holds before the request's second half arrives (at resume)
            got = await _bounded(get_or_none(direct, key), 10, f"get({key!r})", key)
            before.append(None if got is None else got.data)
        proxy.resume()
        resumed = time.monotonic()
        check_raised([outcome], f"put (the backend stopped answering mid-{where})", bound)
        try:
            got_other = await _bounded(
                storage.get("proxy/other"), 10, "get('proxy/other')", "proxy/other"
            )
            other: object = got_other.data
        except ConformanceFailure:
            raise
        except Exception as exc:  # a stale reply often cannot even be parsed as this call's
            other = exc
        if other != b"other":
            fail(
                "after a cancelled call, the next call must get its own answer",
                key="proxy/other",
                expected=f"get to return {describe(b'other')}",
                observed=f"it returned {describe(other)} (a reply meant for the cancelled put?)",
                detail=f"the put of {key!r} was cancelled while the backend stalled mid-{where}",
            )
        await _watch_proxied(direct or storage, settle, key, old, new, where, resumed, before)
        await _bounded(
            own_answer(storage, "proxy/next", f"a put cancelled mid-{where}"),
            10,
            "a put and get",
            "proxy/next",
        )
    return True


async def _watch_proxied(
    observer: Storage,
    settle: SettleWatch,
    key: str,
    old: bytes,
    new: bytes,
    direction: str,
    resumed: float,
    before: list[bytes | None],
) -> None:
    """Watch ``key`` from ``resumed`` on: from what it held then (``before``, read before
    the proxy resumed, where given; else read now)."""
    watch = SettleWatch(
        observer,
        window=settle.window,
        settles=settle.settles,
        node=settle.node,
        second_client=observer is not settle.observer or settle.second_client,
        interval=max(settle.interval, 0.05),
    )
    if before:
        observed = before[0]
    else:
        got = await _bounded(get_or_none(observer, key), 10, f"get({key!r})", key)
        observed = None if got is None else got.data
    if observed not in (old, new):
        fail(
            "a cancelled put must be whole or absent",
            key=key,
            expected="the whole old or the whole new value",
            observed=f"it holds {describe(observed, reference=[new, old])} "
            f"(stalled mid-{direction})",
        )
    watch.add(
        key,
        observed,
        what="put",
        since=resumed,
        context=f"cancelled while the backend stalled mid-{direction}, then the proxy resumed",
        allowed=(old, new),
        written=new,
    )
    await _bounded(watch.settle(), settle.window + 10, "watching the key", key)

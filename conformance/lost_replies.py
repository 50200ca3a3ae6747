"""Exchanges lost between a network client and its server: the ``lifecycle`` group's tests
of ``OutcomeUnknown`` and of the call after a failed one (clauses ``error.outcome-unknown``,
``error.healthy-after``), each through the stall proxy:

- a write whose reply is lost after its server applied it (below);
- a write whose request is lost while a second client writes the same key: a repeat must
  not take what it meets for its own first attempt;
- a call whose reply is held past the storage's own ``timeout``: it ends by itself, and the
  next call never reads the late reply;
- a listing whose connections are reset between two pages: each key once, or an error.

The first in detail.

The stall proxy stands between a storage and its server, lets the write's request through,
holds the server's reply and resets the connection: the write happened, and its client
never hears so. What the client does next is where adapters go wrong. One whose driver
resends the command on a new connection (redis-py's ``Retry``, an HTTP client's retries of
a request it takes for idempotent) gets the answer to the repeat, not to the write: a
delete answers ``False``, for a key it deleted itself; a create-only put, or an if-match
put, answers ``PreconditionFailed``, beaten by its own first attempt. One that raises plain
``StorageUnavailable`` tells its caller that nothing happened. The caller then acts on a
falsehood: it gives up a record it did store, or writes again what a later writer
replaced.

So each write, in each mode the adapter declares, with a condition that holds, must
either answer truly (the version it stored, ``True``, the count of what existed) or raise
``OutcomeUnknown``; ``StorageUnavailable`` only if its write did not happen. The test then
reads the keys back through the same storage: it must answer again, and hold the whole old
or the whole new value.

A write can take several exchanges (a read first, a value sent in parts): the stall holds
the first reply after the set-up, then, run again on new keys, the second, and so on
(`StallProxy.stall`'s ``after``), until one run shows the write applied when its reply was
lost, or the write ends before anything is held. Skipped for a target without an
endpoint for the proxy; *not exercised* if no run lost a reply after its write applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, NoReturn

import pytest

from ..errors import (
    OutcomeUnknown,
    PreconditionFailed,
    StorageClosed,
    StorageError,
    StorageUnavailable,
)
from ..storage import GetResult, Storage
from ..storage import delete_many as delete_many_of
from .cancelling import own_answer
from .checks import ConformanceFailure, describe, expect_keys, fail, get_or_none
from .clauses import checks
from .coverage import reply_lost
from .fixtures import StorageFixtures, need_two_clients, not_exercised, proxied_target
from .proxy import StallProxy
from .target import Target, new_location
from .unavailable import _NEW, UNAVAILABLE_BOUND, _a, _Case, _case, first_of_two_pages

__all__ = ["HELD_TIMEOUT", "LOST_EXCHANGES", "LostReplyTests"]

LOST_EXCHANGES = 6
"""The most exchanges of one write whose reply the test loses, one run each."""
CLOSE_HOLD = 1.0
"""Seconds a write's reply stays held once ``aclose()`` is called under it (then it is
forwarded): a client whose ``aclose()`` ends the call ends it within them."""

_CONDITIONAL = ("create-only put", "if-match put", "if-match delete")
_KINDS = ("put", "create-only put", "if-match put", "delete", "if-match delete", "delete_many")


class LostReplyTests(StorageFixtures):
    """Each write whose reply the stall proxy loses after its server applied it."""

    conformance_group: ClassVar[str | None] = "lifecycle"

    @checks("error.outcome-unknown")
    async def test_a_write_whose_reply_is_lost_raises_outcome_unknown_or_answers_truly(
        self,
        storage_target: Target | None,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """A put, a delete and a ``delete_many``, in each conditional mode declared (its
        condition holding), each on a storage of its own behind a new stall proxy. Once
        the keys are set up, the proxy holds a reply of the server's and resets the
        connections: the write's first reply, then (in a run of its own) its second, and
        so on, each reply of the write once; the write must return its true answer or
        raise ``OutcomeUnknown`` (``StorageUnavailable`` only if nothing happened) within
        `UNAVAILABLE_BOUND`, and the keys must read back whole. A driver's transparent
        resend answers with the repeat's ``False`` or ``PreconditionFailed`` and fails
        here."""
        target = proxied_target(storage_target, "no reply can be lost")
        kinds = _kinds(_KINDS, supports_conditional_put, supports_conditional_delete)
        lost = [kind for kind in kinds if await _lose(kind, target)]
        if not lost:
            not_exercised(
                "no write applied before its reply was lost: every write ended before the "
                f"stall proxy held any of its first {LOST_EXCHANGES} replies, or failed first"
            )

    @checks("error.outcome-unknown", "close.in-flight")
    async def test_a_write_that_aclose_cut_off_after_its_server_applied_it_says_so(
        self,
        storage_target: Target | None,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
        supports_shared: bool,
    ) -> None:
        """As the lost-reply test, with ``aclose()`` in the place of the reset: the stall
        proxy holds a reply of the write (each of its replies in turn, one run each), the
        storage is closed under it, and then the proxy forwards again. The write must
        return its true answer or raise ``OutcomeUnknown``; ``StorageClosed`` says "it did
        not happen", so only a write that did not take effect may raise it (read through a
        second client on the same data). A client that answers every call that
        ``aclose()`` cut off with ``StorageClosed``, whatever it had sent, tells its caller
        that a write which landed never ran."""
        target = proxied_target(storage_target, "no reply can be held")
        need_two_clients(target, supports_shared)
        kinds = _kinds(_KINDS, supports_conditional_put, supports_conditional_delete)
        cut = [kind for kind in kinds if await _close_under(kind, target)]
        if not cut:
            not_exercised(
                "no write applied before aclose() cut it off: every write ended before the "
                f"stall proxy held any of its first {LOST_EXCHANGES} replies, or failed first"
            )

    @checks("error.outcome-unknown")
    async def test_a_write_whose_request_is_lost_while_another_client_writes_answers_truly(
        self,
        storage_target: Target | None,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
        supports_shared: bool,
    ) -> None:
        """The other side of a lost exchange: the stall proxy holds a write's request, a
        second client (straight to the server) writes the same key meanwhile, and the proxy
        resets the connection, so the held request never arrives. A write sent again then
        meets the other client's write, and must say so: a create-only put whose repeat
        finds the key answers ``PreconditionFailed`` or ``OutcomeUnknown``, never a version
        ("it must have been my own first attempt"); a delete whose repeat finds nothing
        answers ``False`` or ``OutcomeUnknown``, never ``True`` (the other client's delete
        answered ``True``: one value deleted twice). Every write in each mode declared,
        each against the other client's write that its repeat would meet. Needs a target
        that opens a second client on the same data (``shared``, ``location``)."""
        target = proxied_target(storage_target, "no request can be lost")
        need_two_clients(target, supports_shared)
        kinds = _kinds(_KINDS, supports_conditional_put, supports_conditional_delete)
        lost = [kind for kind in kinds if await _race(kind, target)]
        if not lost:
            not_exercised(
                "no write sent a request that the stall proxy could hold: every write "
                "ended without sending one, or failed first"
            )

    @checks("error.outcome-unknown", "error.healthy-after")
    async def test_a_call_whose_reply_never_comes_times_out_and_leaves_no_late_reply(
        self,
        storage_target: Target | None,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """Each operation (each write in each mode declared) on a storage opened with
        ``timeout=1``, whose reply the stall proxy holds until the call ends by itself:
        it must end within `UNAVAILABLE_BOUND` with ``StorageUnavailable``
        (``OutcomeUnknown`` for a write, which the server applied); then the proxy lets
        the held reply through, and the next call on the same storage must get its own
        answer. A client that stops waiting but keeps its connection hands the late reply
        to the next call. Needs a target whose factory takes ``timeout``."""
        target = storage_target
        if target is None or not target.times_out:
            pytest.skip(
                "no reply can be held past the storage's deadline: the target's factory "
                "takes no timeout (or no endpoint, or names no upstream server)"
            )
        kinds = _kinds(_ALL_KINDS, supports_conditional_put, supports_conditional_delete)
        held = [kind for kind in kinds if await _time_out(kind, target)]
        if not held:
            not_exercised("no call sent a request whose reply the stall proxy could hold")

    @checks("list.pages", "error.healthy-after")
    async def test_a_listing_whose_connections_reset_between_pages_yields_each_key_once(
        self, storage_target: Target | None
    ) -> None:
        """A listing of five keys in pages of two, through the stall proxy: after its first
        page the proxy resets every connection (the server stays up, as when a load balancer
        or a server's idle timeout cuts them). The rest of the listing must yield each of the
        other keys once, in order, or raise ``StorageUnavailable``; never a key twice (a
        cursor that lived on the lost connection, opened again from the start) nor a key
        skipped. Then a new listing gets all five."""
        target = proxied_target(storage_target, "no connection can be reset between pages")
        assert target.upstream is not None  # (proxyable)
        async with (
            StallProxy(target.upstream) as proxy,
            target.open(endpoint=proxy.address) as storage,
        ):
            keys, listing, seen = await first_of_two_pages(storage, "reset-pages/")
            await proxy.drop()
            try:
                async with asyncio.timeout(UNAVAILABLE_BOUND):
                    seen += [key async for key in listing]
            except StorageUnavailable:
                seen = keys  # it said it could not go on: the truth
            if seen != keys:
                fail(
                    "a listing whose connection was reset between pages must yield each key "
                    "once, or raise StorageUnavailable",
                    key=keys[0],
                    expected=f"{keys}",
                    observed=f"it yielded {seen} (the connections reset after its first page)",
                    detail="A cursor that lives on a connection is gone with it: continue from "
                    "the last key yielded (start after it), or raise StorageUnavailable",
                )
            await expect_keys(
                storage,
                keys,
                prefix="reset-pages/",
                promise="after its connections were reset, a listing must get its own answer",
            )


async def _held(proxy: StallProxy, call: asyncio.Future[Any], kind: str, key: str) -> bool:
    """Whether the proxy came to hold something of ``call`` (True), or the call ended
    before it did (False: the proxy then forwards again); neither within
    `UNAVAILABLE_BOUND` fails."""
    __tracebackhide__ = True
    if not await proxy.holding(call, UNAVAILABLE_BOUND) and not call.done():
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        fail(
            f"{_a(kind)} must end once the backend stops answering",
            key=key,
            expected=f"an answer or an error within {UNAVAILABLE_BOUND:g} s",
            observed="it neither sent anything that the proxy could hold nor ended",
        )
    if call.done() and not proxy.stalled.is_set():
        if not call.cancelled():
            call.exception()  # retrieved: what it raised is another test's business
        proxy.resume()
        return False
    return True


def _kinds(kinds: tuple[str, ...], conditional_put: bool, conditional_delete: bool) -> list[str]:
    """``kinds`` without the conditional modes the adapter does not declare."""
    left_out = {
        "create-only put": not conditional_put,
        "if-match put": not conditional_put,
        "if-match delete": not conditional_delete,
    }
    return [kind for kind in kinds if not left_out.get(kind)]


async def _lose(kind: str, target: Target) -> bool:
    """`_lose_once` for each reply of ``kind`` in turn (`_every_reply`)."""
    return await _every_reply(_lose_once, kind, target)


async def _every_reply(
    run: Callable[[str, Target, int], Awaitable[bool | None]], kind: str, target: Target
) -> bool:
    """``run`` ``kind`` with its ``n``-th reply held, for n = 1, 2, ... until the write ends
    before the proxy held a reply (each of its replies was held once), `LOST_EXCHANGES`
    runs at most: whether any run held a reply after the write applied. Every reply, not
    only up to the first after which the write had applied: a write of several exchanges
    (a statement, then its ``COMMIT``) that a client sends again when the statement's
    reply is lost is right, and wrong when the commit's is."""
    __tracebackhide__ = True
    applied_once = False
    for after in range(LOST_EXCHANGES):
        applied = await run(kind, target, after)
        if applied is None:
            break
        applied_once = applied_once or applied
    return applied_once


async def _lose_once(kind: str, target: Target, after: int) -> bool | None:
    """One run: None if the write ended before a reply was held; else whether it applied."""
    __tracebackhide__ = True
    assert target.upstream is not None
    case = _case(kind)
    location = new_location() if target.reopens else None
    losing = False  # set once the proxy holds a reply and is about to drop it
    context = f"after the stall proxy lost reply {after + 1} of the write"
    async with (
        StallProxy(target.upstream) as proxy,
        target.open(endpoint=proxy.address, location=location) as storage,
    ):
        versions = {key: await storage.put(key, value) for key, value in case.before.items()}
        proxy.stall("response", partial=False, after=after)
        with reply_lost(lambda: losing):
            call = asyncio.ensure_future(case.start(storage, versions))
        if not await _held(proxy, call, kind, case.key):
            return None
        losing = True
        await proxy.drop()
        proxy.resume()
        answer, error = await _outcome(kind, case.key, call, context)
        got = {key: await _read(storage, key, kind, context) for key in case.allowed}
    return _judged(kind, case, answer, error, got, context)


def _judged(
    kind: str,
    case: _Case,
    answer: Any,
    error: StorageError | None,
    got: Mapping[str, GetResult | None],
    context: str,
) -> bool:
    """Check what a write whose reply was held answered (``answer``, or ``error``) against
    what its keys hold (``got``): whether it applied."""
    __tracebackhide__ = True
    stored = _whole(kind, case.allowed, got, context)
    new = {key: allowed[-1] for key, allowed in case.allowed.items()}
    applied = stored == new
    if isinstance(error, StorageClosed):
        if any(stored[k] != values[0] for k, values in case.allowed.items()):
            fail(
                f"{_a(kind)} that aclose() cut off after it happened must not raise StorageClosed",
                key=case.key,
                expected="OutcomeUnknown (its request had left), or its true answer",
                observed=f"it raised StorageClosed: {error} ({context}); yet the keys hold "
                f"{describe(list(stored.values()))}",
                detail="StorageClosed tells the caller that the call did not happen. A write "
                "whose request had left when aclose() ended it raises OutcomeUnknown",
            )
    elif error is None:
        current = got[case.key]
        if kind.endswith("put") and (current is None or current.version != answer):
            applied = False  # it returned a version that the key does not hold
        _expect_true(kind, case.key, answer, applied, stored, new, context)
    else:
        _unknown_if_it_happened(kind, case.key, error, case.allowed, stored, context)
    return applied


async def _close_under(kind: str, target: Target) -> bool:
    """`_close_under_once` for each reply of ``kind`` in turn (`_every_reply`)."""
    return await _every_reply(_close_under_once, kind, target)


async def _close_under_once(kind: str, target: Target, after: int) -> bool | None:
    """One run: None if the write ended before a reply was held; else whether it applied."""
    __tracebackhide__ = True
    assert target.upstream is not None
    case = _case(kind)
    location = new_location()
    context = f"after aclose() cut it off while the stall proxy held reply {after + 1} of it"
    async with (
        StallProxy(target.upstream) as proxy,
        target.open(location=location) as reader,
        target.open(endpoint=proxy.address, location=location) as storage,
    ):
        versions = {key: await storage.put(key, value) for key, value in case.before.items()}
        proxy.stall("response", partial=False, after=after)
        call = asyncio.ensure_future(case.start(storage, versions))
        if not await _held(proxy, call, kind, case.key):
            return None
        closing = asyncio.ensure_future(storage.aclose())
        try:
            # An aclose() that waits for the call under way has it get the reply, once the
            # proxy forwards again; one that ends the call ends it before then.
            await asyncio.wait({call}, timeout=CLOSE_HOLD)
            proxy.resume()
            answer, error = await _cut_off(kind, case.key, call, context)
        finally:
            proxy.resume()
            await asyncio.wait({closing}, timeout=UNAVAILABLE_BOUND)
        if not closing.done():
            closing.cancel()
            await asyncio.wait({closing}, timeout=CLOSE_HOLD)  # nothing left running unseen
            fail(
                "aclose() must return once the backend answers again",
                key=case.key,
                expected=f"it to return within {UNAVAILABLE_BOUND:g} s",
                observed=f"it had not, {context}",
            )
        closing.result()
        got = {key: await _read(reader, key, kind, context) for key in case.allowed}
    return _judged(kind, case, answer, error, got, context)


async def _cut_off(
    kind: str, key: str, call: asyncio.Future[Any], context: str
) -> tuple[Any, StorageError | None]:
    """What a write that ``aclose()`` ends answers: its answer, or the ``StorageClosed`` or
    ``StorageUnavailable`` it raises (anything else, or no end in time, fails)."""
    __tracebackhide__ = True
    try:
        async with asyncio.timeout(UNAVAILABLE_BOUND):
            return await asyncio.shield(call), None
    except (StorageClosed, StorageUnavailable) as exc:
        return None, exc
    except TimeoutError:
        if not call.done():
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            fail(
                f"{_a(kind)} that aclose() cut off must end",
                key=key,
                expected="an answer, StorageClosed or OutcomeUnknown within "
                f"{UNAVAILABLE_BOUND:g} s",
                observed=f"it had not ended {UNAVAILABLE_BOUND:g} s {context}",
            )
        raise
    except Exception as exc:
        _wrong(kind, key, exc, context, "reply")


def _whole(
    kind: str,
    allowed: Mapping[str, tuple[bytes | None, ...]],
    got: Mapping[str, GetResult | None],
    context: str,
) -> dict[str, bytes | None]:
    """What each key written by ``kind`` holds (``got``), which must be one of ``allowed``."""
    __tracebackhide__ = True
    stored = {key: None if g is None else g.data for key, g in got.items()}
    for key, seen in stored.items():
        if seen not in allowed[key]:
            fail(
                f"{_a(kind)} whose exchange was lost must leave its key whole",
                key=key,
                expected=" or ".join(describe(a) for a in allowed[key]),
                observed=f"it holds {describe(seen)} {context}",
            )
    return stored


def _unknown_if_it_happened(
    kind: str,
    key: str,
    error: Exception,
    allowed: Mapping[str, tuple[bytes | None, ...]],
    stored: Mapping[str, bytes | None],
    context: str,
) -> None:
    """``error`` of a write that changed any of its keys (``stored`` is not the keys' old
    values) must be ``OutcomeUnknown``: plain ``StorageUnavailable`` says nothing happened."""
    __tracebackhide__ = True
    if isinstance(error, OutcomeUnknown) or all(
        stored[k] == values[0] for k, values in allowed.items()
    ):
        return
    fail(
        f"{_a(kind)} that happened must not raise plain StorageUnavailable",
        key=key,
        expected="OutcomeUnknown (the write may have happened), or its true answer",
        observed=f"it raised {type(error).__name__}: {error} ({context}); "
        f"yet the write happened: the keys hold {describe(list(stored.values()))}",
        detail="StorageUnavailable tells the caller that nothing happened. A write whose "
        "request had left when the connection failed or timed out raises OutcomeUnknown, "
        "a StorageUnavailable, so that the caller can tell the two apart",
    )


HELD_TIMEOUT = 1.0
"""The deadline, in seconds, of the storage whose reply the timeout test holds past it."""

_ALL_KINDS = (*_KINDS, "get", "list")


async def _time_out(kind: str, target: Target) -> bool:
    """One run of ``kind`` on a storage with a deadline of `HELD_TIMEOUT`, whose reply the
    proxy holds until the call ends on its own; then the held reply is let through, and the
    next call must get its own answer. False if the call ended before a reply was held."""
    __tracebackhide__ = True
    assert target.upstream is not None
    case = _case(kind)
    timing = False  # set once a reply of the call is held: it can only end by its deadline
    context = f"after it timed out (timeout={HELD_TIMEOUT:g} s) while the proxy held its reply"
    async with (
        StallProxy(target.upstream) as proxy,
        target.open(endpoint=proxy.address, timeout=HELD_TIMEOUT) as storage,
    ):
        versions = {key: await storage.put(key, value) for key, value in case.before.items()}
        proxy.stall("response", partial=False)
        with reply_lost(lambda: timing, "timed out"):
            call = asyncio.ensure_future(case.start(storage, versions))
        if not await _held(proxy, call, kind, case.key):
            return False
        timing = True
        done, _ = await asyncio.wait({call}, timeout=UNAVAILABLE_BOUND)
        if not done:
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            fail(
                f"{_a(kind)} whose reply never comes must end by its deadline",
                key=case.key,
                expected=f"StorageUnavailable (OutcomeUnknown for a write) within "
                f"{UNAVAILABLE_BOUND:g} s, on a storage opened with timeout={HELD_TIMEOUT:g}",
                observed=f"it had not ended after {UNAVAILABLE_BOUND:g} s",
                detail="Bound every wait for the backend by the operation's deadline, "
                "retries included (asyncio.timeout around the whole call)",
            )
        answer, error = await _outcome(kind, case.key, call, context, lost="reply")
        if error is None:
            fail(
                f"{_a(kind)} whose reply never came cannot answer",
                key=case.key,
                expected="StorageUnavailable (OutcomeUnknown for a write)",
                observed=f"it answered {describe(answer)} ({context})",
            )
        proxy.resume()  # the held reply now reaches a connection the storage kept, if any
        await _next_answers(storage, kind)
        got = {key: await _read(storage, key, kind, context) for key in case.allowed}
    stored = _whole(kind, case.allowed, got, context)
    assert error is not None  # an answer failed above
    _unknown_if_it_happened(kind, case.key, error, case.allowed, stored, context)
    return True


async def _next_answers(storage: Storage, kind: str) -> None:
    """The next call after ``kind`` timed out gets its own answer (`own_answer`); an error
    that the late reply of the call causes (a reply of another shape) fails as such."""
    __tracebackhide__ = True
    after = f"{_a(kind)} that timed out, whose reply then came"
    try:
        await own_answer(storage, "down-next", after)
    except ConformanceFailure:
        raise
    except Exception as exc:
        fail(
            "after a call that timed out, the next call must get its own answer",
            key="down-next",
            expected="a put, then a get of what it wrote",
            observed=f"it raised {type(exc).__name__}: {exc} (after {after}: that late reply "
            "read as the next call's own?)",
            detail="A call that stops waiting for its answer must drop its connection (or "
            "read the answer away before another call uses it)",
        )


_RIVAL = b"written by the other client while the request was held"


async def _rival(kind: str, other: Storage) -> None:
    """The other client's write that a repeat of ``kind`` would meet."""
    if kind in ("put", "create-only put", "if-match put"):
        await other.put(_case(kind).key, _RIVAL)
    elif kind == "if-match delete":
        await other.put("down-del-if", _RIVAL)
    elif kind == "delete":
        await other.delete("down-del")
    else:
        await delete_many_of(other, list(_case(kind).allowed))


async def _race(kind: str, target: Target) -> bool:
    """One run of ``kind`` whose request is held while the other client writes, then lost.
    False if the write ended before the proxy held any request of it."""
    __tracebackhide__ = True
    assert target.upstream is not None
    case = _case(kind)
    location = new_location()
    context = "after the stall proxy lost its request while another client wrote the key"
    losing = False  # set once the other client wrote and the proxy is about to drop
    async with (
        StallProxy(target.upstream) as proxy,
        target.open(endpoint=proxy.address, location=location) as storage,
        target.open(location=location) as other,
    ):
        versions = {key: await storage.put(key, value) for key, value in case.before.items()}
        proxy.stall("request", partial=False)
        with reply_lost(lambda: losing, "request lost"):
            call = asyncio.ensure_future(case.start(storage, versions))
        if not await _held(proxy, call, kind, case.key):
            return False
        await _rival(kind, other)
        losing = True
        await proxy.drop()
        proxy.resume()
        answer, error = await _outcome(kind, case.key, call, context, lost="request")
        got = {key: await _read(storage, key, kind, context) for key in case.allowed}
    if error is not None:
        return True  # OutcomeUnknown, or StorageUnavailable: nothing of it arrived
    stored = {key: None if g is None else g.data for key, g in got.items()}
    current = got[case.key]
    if kind.endswith("put"):
        truth = current is not None and current.version == answer and current.data == _NEW
        expected = "the version the key holds, with the new value (a repeat that landed)"
    elif kind == "delete_many":
        truth = answer == 0
        expected = "0: the other client had deleted every key"
    elif kind == "delete":
        truth = answer is False
        expected = "False: the other client had deleted the key (and was answered True)"
    else:
        truth = False
        expected = "no answer: the other client had changed the key's version"
    if not truth:
        fail(
            f"{_a(kind)} whose request was lost must answer truly or raise OutcomeUnknown",
            key=case.key,
            expected=f"{expected}, PreconditionFailed where its condition failed, or "
            "OutcomeUnknown",
            observed=f"it answered {describe(answer)} ({context}), and the keys hold "
            f"{describe(list(stored.values()))}",
            detail="A write sent again after a lost connection that meets another client's "
            "write cannot take that write for its own first attempt: raise OutcomeUnknown "
            "(or the true PreconditionFailed, False, 0)",
        )
    return True


async def _outcome(
    kind: str, key: str, call: asyncio.Future[Any], context: str, lost: str = "reply"
) -> tuple[Any, StorageUnavailable | PreconditionFailed | None]:
    """What the write answered, or the ``StorageUnavailable`` it raised (``lost`` the
    request: or the ``PreconditionFailed`` of a condition that the other client's write
    failed); anything else (a driver's error) or no end in time fails."""
    __tracebackhide__ = True
    try:
        async with asyncio.timeout(UNAVAILABLE_BOUND):
            return await asyncio.shield(call), None
    except StorageUnavailable as exc:
        return None, exc
    except PreconditionFailed as exc:
        if lost == "request" and kind in _CONDITIONAL:
            return None, exc
        _wrong(kind, key, exc, context, lost)
    except TimeoutError:
        if not call.done():
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            fail(
                f"{_a(kind)} whose {lost} was lost must end",
                key=key,
                expected=f"OutcomeUnknown or its answer within {UNAVAILABLE_BOUND:g} s",
                observed=f"it had not ended {UNAVAILABLE_BOUND:g} s {context}",
            )
        raise
    except Exception as exc:
        _wrong(kind, key, exc, context, lost)


def _wrong(kind: str, key: str, exc: Exception, context: str, lost: str) -> NoReturn:
    __tracebackhide__ = True
    fail(
        f"{_a(kind)} whose {lost} was lost must raise OutcomeUnknown or answer truly",
        key=key,
        expected="OutcomeUnknown, or its true answer (its condition held)",
        observed=f"it raised {type(exc).__name__}: {exc} ({context})",
        detail=(
            "The write's request had reached the server, which applied it; an "
            "answer to a repeat of it (a driver that resends the command on a new "
            "connection) sees the write's own effect: 'the key exists', 'another "
            "version', 'not found'. Resend no write whose request may have left, or raise "
            "OutcomeUnknown when the repeat fails"
            if lost == "reply"
            else "The write's request never arrived: a backend error becomes "
            "StorageUnavailable (OutcomeUnknown where the request may have left)"
        ),
    )


async def _read(storage: Any, key: str, kind: str, context: str) -> GetResult | None:
    __tracebackhide__ = True
    try:
        async with asyncio.timeout(UNAVAILABLE_BOUND):
            got = await get_or_none(storage, key)
    except TimeoutError:
        fail(
            "the client must answer again once the backend does",
            key=key,
            expected=f"get to answer within {UNAVAILABLE_BOUND:g} s",
            observed=f"it did not, {context} of {_a(kind)}",
        )
    return got


def _expect_true(
    kind: str,
    key: str,
    answer: Any,
    applied: bool,
    stored: dict[str, bytes | None],
    new: dict[str, bytes | None],
    context: str,
) -> None:
    """The answer of a write that returned must say what it did."""
    __tracebackhide__ = True
    if kind.endswith("put"):
        truth, expected = applied, "the version the key now holds, with the new value"
    elif kind == "delete_many":
        truth = applied and answer == len(new)
        expected = f"{len(new)} (every key existed), with every key deleted"
    else:
        truth = applied and answer is True
        expected = "True (the key existed), with the key deleted"
    if truth:
        return
    fail(
        f"{_a(kind)} whose reply was lost must answer truly or raise OutcomeUnknown",
        key=key,
        expected=f"{expected}, or OutcomeUnknown",
        observed=f"it answered {describe(answer)} ({context}), and the keys hold "
        f"{describe(list(stored.values()))}",
        detail="An answer computed from a repeat of the write (resent on a new connection "
        "after the first had applied) sees the write's own effect: a delete answers False "
        "for the key it deleted. Resend no write whose request may have left, or raise "
        "OutcomeUnknown",
    )

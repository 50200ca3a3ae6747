"""Another client's write at each gap of a read: the ``concurrency`` group's test that a get
made of several exchanges with its server is still one read (clause ``put.atomic``).

A get that reads a value with two requests (the row, then its parts; the bytes, then the
version; a first range, then the next) returns a torn value when another client's write
commits between them: the version of one put with the bytes of another, or with none. Under
load that happens now and then, so a run of the readers-during-overwrites tests may miss it
(a MariaDB adapter that read a value's parts by a second statement passed them). Here the
stall proxy makes it happen every time.

The reader's client goes through the proxy, which forwards the get's first exchange and
holds the request that opens its second (`StallProxy.stall` with ``exchanges``: an exchange
opens with the bytes a connection sends after the server's reply). A second client,
straight to the server, overwrites the key meanwhile; then the proxy forwards again, and the
get must return the bytes of one put with the version that put answered. Then the same with
the first two exchanges let through, and so on, until a get ends with nothing held (at most
`GAP_EXCHANGES` exchanges): at a small size, and at the largest value size of the target,
where adapters keep a value in parts or fetch it in ranges.

A write made of several exchanges is stopped the same way, with the second client's write
of the same key in the gap: a conditional put or delete whose check and write are two
requests (a read of the version, then an unconditional write) succeeds on a version that
the other write made stale, and that write is lost; a delete or ``delete_many`` that asks
whether the key exists and then deletes it counts the value that the other client's delete
counted too. The races of two clients find that window only now and then; here it is
there every time.

A listing, in pages of 3 keys where the adapter pages through `StorageBase`, is stopped
the same way while the second client overwrites each key that stays present, and creates
a key and deletes another around them: it must yield each key that stayed present once, in
order, and nothing outside its prefix or never written. An adapter that fetches every page
of a listing before it yields the first (by offset: a key created before the cursor repeats
one, a key deleted skips one) is out of reach of the listing test that writes between the
keys a listing yields, and the tests that race writes against listings catch it when a
write happens to fall between two of its requests; here one falls there every time.

The ``cancellation`` group's gap test cancels a write there instead: a put of a small
value and one of the largest size, an if-match put and a delete, each held before each of
its exchanges in turn and cancelled. It must end within the cancel bound, its key must hold
the old value or the new one, whole (a value written in parts, or in several statements,
cut between two of them is not), the next call on the same storage must get its own answer
once the proxy forwards again (a client that kept the connection would send the held
request then, and read its reply as the next call's), and, for an adapter that declares
``settles_cancelled_writes``, nothing of the write may land afterwards.

A call that holds a lock which the other client's write waits for (a transaction of several
statements) keeps that write waiting while the proxy holds the call, and the test forwards
again after `GAP_WRITE_WAIT` seconds; by then the call may have run past its own deadline.
Such a call may fail with a `StorageError`, and its round is not judged; a call whose gap
the other write did not wait on must answer.

All need a target that the proxy can stand in front of (its factory takes ``endpoint``)
and that is ``shared``; they are skipped for others, saying why.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import pytest

from ..errors import NotFound, PreconditionFailed, StorageError
from ..storage import Capabilities, GetResult, IfMatch, Storage
from ..storage import delete_many as delete_many_of
from .cancelling import own_answer
from .checks import describe, fail, get_or_none
from .clauses import checks
from .coverage import large_sizes, reply_lost, size_label, watching_landings
from .fixtures import (
    StorageFixtures,
    need_two_clients,
    not_exercised,
    proxied_target,
    set_small_pages,
)
from .proxy import StallProxy
from .settle import SettleWatch
from .target import Target, new_location
from .unavailable import UNAVAILABLE_BOUND

__all__ = ["GAP_EXCHANGES", "GAP_SMALL", "GapCancellationTests", "GapTests"]

GAP_EXCHANGES = 12
"""The most exchanges of one get that the test holds, one run each."""
GAP_SMALL = 1000
"""Bytes of the small value (the large one: the largest of the target's value sizes)."""
GAP_HOLD_WAIT = 10.0
"""Seconds to wait for the proxy to hold a request of the get, or for the get to end."""
GAP_WRITE_WAIT = 5.0
"""Seconds the second client's write may take while the get is held; the proxy forwards
then in any case (a backend whose reads lock the key makes that write wait for the get)."""

_KEY = "gaps/value"
_WRITES = ("put", "if-match put", "create-only put", "if-match delete", "delete", "delete_many")
MINE, THEIRS, BEFORE = b"the held write's value", b"the other client's value", b"before"
GAP_LASTING = 8
"""Keys that stay present while the listing's gaps are written into (each overwritten)."""
_LISTED = "gaps-list/"


class GapTests(StorageFixtures):
    """A get with another client's write between each two of its exchanges."""

    conformance_group: ClassVar[str | None] = "concurrency"

    @checks("put.atomic", "put.returns-version", "cap.shared")
    async def test_a_get_with_another_clients_write_in_each_of_its_gaps_returns_one_put_whole(
        self, storage_target: Target | None, supports_shared: bool
    ) -> None:
        """A value of `GAP_SMALL` bytes, then one of the largest size: for each exchange of
        a get in turn, the stall proxy holds the request that opens it, a second client
        overwrites the key, and the proxy forwards again; every get must return the bytes
        of one put at the version that put answered. A get made of two requests (the
        value's row, then its parts) fails here as soon as one write falls between them."""
        target = proxied_target(storage_target, "no get can be held between its exchanges")
        need_two_clients(target, supports_shared)
        sizes = dict.fromkeys([GAP_SMALL, *large_sizes(target.max_value)[-1:]])
        if not any([await _each_gap(target, size) for size in sizes]):
            not_exercised(
                "no get was held: each answered before the stall proxy saw a request of it"
            )

    @checks(
        "put.returns-version",
        "put.conditional.one-winner",
        "put.if-match.stale",
        "put.create.existing",
        "delete.conditional.one-winner",
        "delete.if-match.stale",
        "delete.one-true",
        "delete-many.one-true",
        "cap.shared",
    )
    async def test_each_write_with_another_clients_write_in_each_of_its_gaps_loses_neither(
        self,
        storage_target: Target | None,
        supports_shared: bool,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """A put, an if-match put and a create-only put (the last two where
        ``conditional_put`` is declared), an if-match delete (where ``conditional_delete``
        is), a delete and a ``delete_many``: for each exchange of the write in turn, on a
        key of its own, the stall proxy holds the request that opens it while a second
        client writes the same key (a put; a delete where the held write is a delete), then
        forwards again. Both answers must fit one order of the two writes: a put answers
        its own version, never the other's, and the key ends with one of the two puts at
        the version it answered; a conditional write that succeeds must not have undone the
        other client's put (the key ends with that put's value, or is deleted by the
        if-match delete that came first); of two deletes of one value, exactly one finds
        it."""
        target = proxied_target(storage_target, "no write can be held between its exchanges")
        need_two_clients(target, supports_shared)
        kinds = [
            kind
            for kind in _WRITES
            if (supports_conditional_put or not kind.endswith(" put"))
            and (supports_conditional_delete or kind != "if-match delete")
        ]
        if not any([await _each_write_gap(target, kind) for kind in kinds]):
            not_exercised(
                "no write was held: each answered before the stall proxy saw a request of it"
            )

    @checks("list.concurrent-writes", "list.order", "list.prefix-only", "list.pages", "cap.shared")
    async def test_a_listing_with_another_clients_writes_in_each_of_its_gaps_yields_each_key_once(
        self, storage_target: Target | None, supports_shared: bool
    ) -> None:
        """`GAP_LASTING` keys stay present; for each exchange of a listing of their prefix
        in turn (pages of 3 keys where the adapter pages through `StorageBase`), the stall
        proxy holds the request that opens it while a second client overwrites every one of
        them, creates a key between two of them and deletes the one it created before, and
        writes next to the prefix; then it forwards again. The listing must yield each of
        the lasting keys once, in ascending order, and no key outside the prefix or never
        written."""
        target = proxied_target(storage_target, "no listing can be held between its exchanges")
        need_two_clients(target, supports_shared)
        if not await _each_listing_gap(target):
            not_exercised(
                "no listing was held: each ended before the stall proxy saw a request of it"
            )


async def _each_gap(target: Target, size: int) -> bool:
    """Overwrite the key through a second client at each exchange of a get in turn;
    whether any get was held."""
    __tracebackhide__ = True
    base = random.Random(size).randbytes(size)
    values: list[bytes] = []  # the digest of each put, in order
    versions: dict[str, int] = {}  # version -> the put (index) that answered it

    def value(i: int) -> bytes:
        data = b"%08d" % i + base[8:]
        values.append(hashlib.blake2b(data, digest_size=16).digest())
        return data

    held_any = False
    async with _two_clients(target) as (proxy, writer, reader):

        async def overwrite() -> str:
            return await writer.put(_KEY, value(len(values)))

        versions[await writer.put(_KEY, value(0))] = 0
        first = await _get(reader, size, "before any hold")  # the reader's connection opens
        _failed(first, False, "a get", _KEY, "before any hold")
        for n in range(GAP_EXCHANGES):
            where = (
                f"a get of {size_label(size)} held before its exchange {n + 1} with the server "
                "(the stall proxy let the first ones through) while a second client "
                "overwrote the key"
            )
            gap = await _in_gap(proxy, n, partial(_get, reader, size, where), overwrite)
            held_any = held_any or gap.held
            if gap.held:
                versions[gap.theirs] = len(values) - 1
            if _failed(gap.mine, gap.blocked, "a get", _KEY, where):
                continue  # it held a lock past its own deadline: the order is not known
            data, version = gap.mine
            _expect_one_put(data, version, values, versions, size, where)
            if not gap.held:
                break  # the get ended with nothing held: it has no exchange n + 1
    return held_any


async def _get(
    reader: Storage, size: int, where: str
) -> tuple[bytes, str] | StorageError | TimeoutError:
    """The reader's get of the key, bounded, or the error it raised (`_failed` judges it);
    a missing key fails the test."""
    __tracebackhide__ = True
    try:
        async with asyncio.timeout(UNAVAILABLE_BOUND):
            got = await reader.get(_KEY)
    except NotFound:
        fail(
            "an overwrite is atomic: a read finds the old or the new value, never the key missing",
            key=_KEY,
            expected="the get to find the key (it is never deleted)",
            observed=f"it raised NotFound: {where}",
        )
    except (StorageError, TimeoutError) as exc:
        return exc
    return bytes(got.data), got.version


def _expect_one_put(
    data: bytes,
    version: str,
    values: list[bytes],
    versions: dict[str, int],
    size: int,
    where: str,
) -> None:
    """Fail unless ``(data, version)`` is what one put wrote and answered."""
    __tracebackhide__ = True
    digest = hashlib.blake2b(data, digest_size=16).digest()
    put = versions.get(version)
    if put is not None and values[put] == digest:
        return
    bytes_of = (
        f"the bytes of put {values.index(digest) + 1}"
        if digest in values
        else f"{len(data)} bytes that no put wrote"
    )
    version_of = (
        f"the version put {put + 1} answered" if put is not None else "a version no put answered"
    )
    fail(
        "a get returns the bytes of one put with the version that put answered, also when "
        "another client's write falls between two of its exchanges with the server",
        key=_KEY,
        expected=f"the bytes and the version of one of {len(values)} puts of {size_label(size)}",
        observed=f"it returned {bytes_of} with {version_of} ({where})",
        detail="read the value and its version in one request, or in one snapshot or "
        "transaction: a second request (the parts of a value, its version, a next range) "
        "may find another write's data",
    )


async def _each_listing_gap(target: Target) -> bool:
    """List the prefix with a second client's writes at each exchange in turn; whether any
    listing was held."""
    __tracebackhide__ = True
    lasting = [f"{_LISTED}k{i:02d}" for i in range(GAP_LASTING)]
    held_any = False
    written = set(lasting)
    created: list[str] = []
    rounds = 0
    async with _two_clients(target) as (proxy, writer, reader):
        paged = set_small_pages(reader, 3)
        for key in lasting:
            await writer.put(key, BEFORE)
        await get_or_none(reader, "gaps/none")  # the reader's connection is open

        async def write_around() -> None:
            nonlocal rounds
            rounds += 1
            new = f"{_LISTED}k{(rounds * 3) % GAP_LASTING:02d}.{rounds}"
            await asyncio.gather(
                *(writer.put(key, THEIRS) for key in lasting),
                writer.put(new, THEIRS),
                writer.put(f"gaps-list0/{rounds}", THEIRS),  # next to the prefix
                *(writer.delete(created.pop()) for _ in created[-1:]),
            )
            created.append(new)
            written.add(new)

        for n in range(GAP_EXCHANGES):
            where = (
                f"a listing of {_LISTED!r}{' in pages of 3' if paged else ''} held before its "
                f"exchange {n + 1} with the server while a second client overwrote its "
                f"{GAP_LASTING} keys, created one and deleted another"
            )
            gap = await _in_gap(proxy, n, partial(_listing, reader), write_around)
            held_any = held_any or gap.held
            if _failed(gap.mine, gap.blocked, "a listing", None, where):
                continue  # it held a lock past its own deadline: the order is not known
            assert isinstance(gap.mine, list)
            _expect_lasting_once(gap.mine, lasting, written, where)
            if not gap.held:
                break  # the listing ended with nothing held: it has no exchange n + 1
    return held_any


async def _listing(reader: Storage) -> list[str] | StorageError | TimeoutError:
    """The reader's whole listing of the prefix, bounded, or the error it raised (`_failed`
    judges it)."""
    try:
        async with asyncio.timeout(UNAVAILABLE_BOUND):
            return [key async for key in reader.list(_LISTED)]
    except (StorageError, TimeoutError) as exc:
        return exc


def _expect_lasting_once(
    listed: list[str], lasting: list[str], written: set[str], where: str
) -> None:
    """Fail unless ``listed`` is ascending, within the prefix, holds each lasting key once
    and only keys that were written."""
    __tracebackhide__ = True
    wrong = [
        f"{b!r} {'twice' if a == b else 'after ' + repr(a)}"
        for a, b in itertools.pairwise(listed)
        if not a < b
    ]
    wrong += [f"{k!r} (outside the prefix)" for k in listed if not k.startswith(_LISTED)]
    wrong += [
        f"{k!r} (never written)" for k in listed if k.startswith(_LISTED) and k not in written
    ]
    wrong += [f"{k!r} missing" for k in lasting if k not in listed]
    if wrong:
        fail(
            "a listing under another client's writes yields each key present throughout "
            "once, in ascending order, and nothing else but keys written meanwhile",
            expected=f"the {len(lasting)} lasting keys once each, in order",
            observed=f"it yielded {len(listed)} keys, with {', '.join(wrong[:4])} ({where})",
            detail="page by the last key yielded (start_after), not by an offset, and read "
            "a page in one request or one snapshot",
        )


async def _each_write_gap(target: Target, kind: str) -> bool:
    """Write the key through a second client at each exchange of ``kind`` in turn (a key
    of its own each time); whether any of them was held."""
    __tracebackhide__ = True
    held_any = False
    async with _two_clients(target) as (proxy, writer, reader):
        await get_or_none(reader, "gaps/none")  # the reader's connection is open
        for n in range(GAP_EXCHANGES):
            key = f"gaps/{kind.replace(' ', '-')}/{n}"
            version = None if kind == "create-only put" else await writer.put(key, BEFORE)
            where = (
                f"{_a(kind)} held before its exchange {n + 1} with the server (the stall proxy "
                "let the first ones through) while a second client "
                f"{'deleted' if kind.startswith('delete') else 'put'} the key"
            )
            gap = await _in_gap(
                proxy,
                n,
                partial(_held_write, kind, reader, key, version),
                partial(_other_write, kind, writer, key),
            )
            held_any = held_any or gap.held
            if _failed(gap.mine, gap.blocked, _a(kind), key, where):
                continue  # it held a lock past its own deadline: the order is not known
            final = await get_or_none(writer, key)
            _judge(kind, key, gap.mine, gap.theirs, gap.held, final, where)
            if not gap.held:
                break  # the write ended with nothing held: it has no exchange n + 1
    return held_any


@asynccontextmanager
async def _two_clients(target: Target) -> AsyncIterator[tuple[StallProxy, Storage, Storage]]:
    """A new stall proxy in front of the target's server, and two storages at one new
    location: one straight to the server, one through the proxy."""
    assert target.upstream is not None
    location = new_location()
    async with (
        StallProxy(target.upstream) as proxy,
        target.open(location=location) as direct,
        target.open(endpoint=proxy.address, location=location) as proxied,
    ):
        yield proxy, direct, proxied


@dataclass(frozen=True)
class _Gap:
    """One round of `_in_gap`: the held call's outcome (``mine``), whether it was held, the
    other client's write's answer (``theirs``, if it was), and whether that write was still
    waiting when the proxy forwarded again (``blocked``: the held call holds its lock)."""

    mine: Any
    held: bool
    theirs: Any
    blocked: bool


async def _in_gap(
    proxy: StallProxy,
    n: int,
    call: Callable[[], Awaitable[Any]],
    write: Callable[[], Awaitable[Any]],
) -> _Gap:
    """Start ``call`` with the proxy holding the request that opens its exchange ``n + 1``;
    once it holds it, start ``write`` (the other client's) and give it `GAP_WRITE_WAIT`
    seconds, then forward again. The call's cell ``written in a gap`` is recorded if the
    write fell there."""
    proxy.stall("request", partial=False, after=n, exchanges=True)
    gap = asyncio.Event()  # set once the other client's write falls in the gap
    with reply_lost(gap.is_set, "written in a gap"):
        task = asyncio.ensure_future(call())
    other: asyncio.Future[Any] | None = None
    try:
        if await proxy.holding(task, GAP_HOLD_WAIT):
            gap.set()
            other = asyncio.ensure_future(write())
            await asyncio.wait({other}, timeout=GAP_WRITE_WAIT)
    finally:
        blocked = other is not None and not other.done()
        proxy.resume()
    await asyncio.wait([future for future in (task, other) if future is not None])
    theirs = None if other is None else other.result()
    return _Gap(task.result(), other is not None, theirs, blocked)


async def _held_write(kind: str, storage: Storage, key: str, version: str | None) -> Any:
    """The held write of ``kind``: its answer, or the error it raised (`_answer`)."""
    return await _answer(_start(kind, storage, key, version))


def _other_write(kind: str, writer: Storage, key: str) -> Awaitable[Any]:
    """The other client's write in the gap of a held write of ``kind``."""
    return writer.delete(key) if kind.startswith("delete") else writer.put(key, THEIRS)


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _start(kind: str, reader: Storage, key: str, version: str | None) -> Awaitable[Any]:
    """The held write of ``kind``."""
    if kind == "put":
        return reader.put(key, MINE)
    if kind == "if-match put":
        assert version is not None
        return reader.put(key, MINE, mode=IfMatch(version))
    if kind == "create-only put":
        return reader.put(key, MINE, mode="create")
    if kind == "if-match delete":
        return reader.delete(key, if_match=version)
    if kind == "delete":
        return reader.delete(key)
    return delete_many_of(reader, [key])


async def _answer(write: Awaitable[Any]) -> Any:
    """What the held write answered: its result, or the `StorageError` (a
    `PreconditionFailed` among them) or `TimeoutError` (past `UNAVAILABLE_BOUND`) it raised."""
    try:
        async with asyncio.timeout(UNAVAILABLE_BOUND):
            return await write
    except (StorageError, TimeoutError) as exc:
        return exc


def _failed(outcome: Any, blocked: bool, what: str, key: str | None, where: str) -> bool:
    """Whether the held call failed (``outcome`` is an error other than
    `PreconditionFailed`), which is allowed only where it ``blocked`` the other client's
    write: it holds a lock the write waits for, and the test held it past its own deadline
    meanwhile (`GAP_WRITE_WAIT`); otherwise the test fails."""
    __tracebackhide__ = True
    if not isinstance(outcome, StorageError | TimeoutError) or isinstance(
        outcome, PreconditionFailed
    ):
        return False
    if not blocked:
        fail(
            f"{what} answers while another client writes",
            key=key,
            expected="its answer",
            observed=f"it raised {type(outcome).__name__}: {outcome} ({where})",
        )
    return True


def _judge(
    kind: str,
    key: str,
    mine: Any,
    theirs: Any,
    raced: bool,
    final: GetResult | None,
    where: str,
) -> None:
    """Fail unless the held write's answer (``mine``), the other client's (``theirs``, if
    it ``raced``) and what the key holds at the end (``final``) fit one order of the two."""
    __tracebackhide__ = True
    ends = f"the key ends {describe(None if final is None else bytes(final.data))}"
    if kind.startswith("delete"):
        found = [mine if kind == "delete" else mine == 1, *([theirs] if raced else [])]
        if found.count(True) != 1 or final is not None:
            fail(
                "of deletes of one value racing each other, exactly one finds it"
                if raced
                else f"{_a(kind)} of a present key finds it",
                key=key,
                expected="exactly one of them to find the value, and the key to end deleted",
                observed=f"the held {kind} answered {mine!r}"
                + (f" and the other client's delete {theirs!r}" if raced else "")
                + f", and {ends} ({where})",
                detail="check and delete in one request or one transaction: an existence "
                "check answered before the delete lets two deletes count one value",
            )
        return
    refused = isinstance(mine, PreconditionFailed) or mine is False
    answered = type(mine).__name__ if refused and mine is not False else repr(mine)
    if not raced:
        wrote = (
            final is None
            if kind.endswith("delete")
            else final is not None and final.version == mine
        )
        if refused or not wrote:
            fail(
                f"{_a(kind)} whose condition holds writes",
                key=key,
                expected="it to succeed",
                observed=f"it answered {answered}, and {ends} ({where})",
            )
        return
    if kind.endswith("put") and not refused and mine == theirs:
        fail(
            f"{_a(kind)} returns the version that it wrote, also while another client writes "
            "the key",
            key=key,
            expected="two versions, one for each of the two puts",
            observed=f"it answered {mine!r}, the version the other client's put answered, and "
            f"{ends} ({where})",
            detail="take the version from the write's own answer (RETURNING, the response's "
            "ETag or version id), not from a read after it, which may find another write; "
            "and mint a new one for every write, not from a clock (two writes in one tick "
            "share it)",
        )
    if kind == "put":  # the two puts in either order: the key ends with the last one's
        if final is None or (final.data, final.version) not in ((MINE, mine), (THEIRS, theirs)):
            fail(
                "a put and another client's put of one key each write their value at their "
                "own version",
                key=key,
                expected="the key to end with one of the two puts, at the version it answered",
                observed=f"the held put answered {mine!r} and the other client's {theirs!r}, "
                f"and {ends}"
                + ("" if final is None else f" at version {final.version!r}")
                + f" ({where})",
            )
        return
    # Its success came before the other client's put, its refusal after: either way the key
    # ends with that put's value and version.
    if final is None or final.data != THEIRS or final.version != theirs:
        fail(
            f"{_a(kind)} must not undo another client's put that completed while it was in flight",
            key=key,
            expected="the key to end with the other client's put (whether the held write "
            "came first and succeeded, or came second and was refused)",
            observed=f"the held write answered {answered} and the other client's put "
            f"answered {theirs!r}, and {ends}"
            + ("" if final is None else f" at version {final.version!r}")
            + f" ({where})",
            detail="check the condition and write in one request (a conditional statement, "
            "a compare-and-set, If-Match): a check answered before the write lets another "
            "client's write fall between them, and the write then undoes it",
        )


class GapCancellationTests(StorageFixtures):
    """A write cancelled between each two of its exchanges."""

    conformance_group: ClassVar[str | None] = "cancellation"

    @checks(
        "cancel.prompt", "cancel.whole-or-absent", "cancel.no-late-landing", "cancel.healthy-after"
    )
    async def test_each_write_cancelled_in_each_of_its_gaps_is_whole_or_absent(
        self,
        request: pytest.FixtureRequest,
        storage_target: Target | None,
        supports_shared: bool,
        supports_conditional_put: bool,
        capabilities: Capabilities,
        settle_window: float,
        cancel_bound: float,
        scale: float,
    ) -> None:
        """A put of `GAP_SMALL` bytes and one of the largest value size, an if-match put
        (where ``conditional_put`` is declared) and a delete: for each exchange of the
        write in turn, on a key of its own, the stall proxy holds the request that opens it
        and the write is cancelled. It ends within the cancel bound; its key then holds the
        old value or the new one, whole; once the proxy forwards again the next call gets
        its own answer; and nothing of the write lands later where the adapter declares
        ``settles_cancelled_writes`` (watched through a second client)."""
        target = proxied_target(storage_target, "no write can be held between its exchanges")
        need_two_clients(target, supports_shared)
        settles = capabilities.settles_cancelled_writes
        large = large_sizes(target.max_value)[-1:]
        kinds = [("put", GAP_SMALL), *[("put", size) for size in large], ("delete", GAP_SMALL)]
        if supports_conditional_put:
            kinds.insert(2, ("if-match put", GAP_SMALL))
        held = [
            await _cancel_in_each_gap(
                target, kind, size, cancel_bound, settle_window, settles, request, scale
            )
            for kind, size in kinds
        ]
        if not any(held):
            not_exercised(
                "no write was held: each answered before the stall proxy saw a request of it"
            )


async def _cancel_in_each_gap(
    target: Target,
    kind: str,
    size: int,
    cancel_bound: float,
    settle_window: float,
    settles: bool,
    request: pytest.FixtureRequest,
    scale: float,
) -> bool:
    """Cancel ``kind`` of a ``size``-byte value held at each of its exchanges in turn;
    whether any was held."""
    __tracebackhide__ = True
    old = random.Random(size).randbytes(size)
    new = bytes(reversed(old)) if size > 1 else b"n"
    held_any = False
    label = f"{kind.replace(' ', '-')}-{size}"
    async with _two_clients(target) as (proxy, observer, storage):
        watch = SettleWatch(
            observer,
            window=settle_window,
            settles=settles,
            node=request.node,
            second_client=True,
            interval=max(0.01, 0.02 / scale),
        )
        await get_or_none(storage, "gaps/none")  # the storage's connection is open
        for n in range(GAP_EXCHANGES):
            key = f"gaps-cut/{label}/{n}"
            version = await observer.put(key, old)
            where = (
                f"{_a(kind)} of {size_label(size)} held before its exchange {n + 1} with the "
                "server (the stall proxy let the first ones through), then cancelled"
            )
            proxy.stall("request", partial=False, after=n, exchanges=True)
            with watching_landings():
                call = asyncio.ensure_future(_cut(kind, storage, key, new, version))
            if not await proxy.holding(call, GAP_HOLD_WAIT):
                proxy.resume()
                await call  # it ended with nothing held: it has no exchange n + 1
                break
            held_any = True
            call.cancel()
            loop = asyncio.get_running_loop()
            start = loop.time()
            done, _ = await asyncio.wait({call}, timeout=cancel_bound * 4)
            took, ended = loop.time() - start, time.monotonic()
            proxy.resume()  # a client that kept the connection sends the held request now
            if not done or took > cancel_bound:
                fail(
                    "a cancelled operation must end promptly",
                    key=key,
                    expected=f"it to end within {cancel_bound:g} s of its cancel",
                    observed=(f"it took {took:.3f} s" if done else "it had not ended")
                    + f" ({where})",
                )
            outcome = (await asyncio.gather(call, return_exceptions=True))[0]
            if isinstance(outcome, BaseException) and not isinstance(
                outcome, asyncio.CancelledError
            ):
                fail(
                    "a cancelled operation must raise CancelledError or give its own answer",
                    key=key,
                    expected="CancelledError or its answer",
                    observed=f"it raised {describe(outcome)} ({where})",
                )
            await own_answer(storage, f"gaps-cut/{label}/next-{n}", where)
            allowed = (old, None) if kind == "delete" else (old, new)
            seen = await watch.read(key)
            if seen not in allowed:
                fail(
                    "a cancelled write leaves its key whole or as it was",
                    key=key,
                    expected=f"{describe(allowed[0])} or {describe(allowed[1])}",
                    observed=f"it holds {describe(seen, reference=[old, new])} ({where})",
                    detail="write a value in one statement or one transaction, and roll "
                    "back (or drop the connection of) a transaction whose call was cancelled",
                )
            if call.cancelled():
                watch.add(
                    key,
                    seen,
                    what=kind,
                    since=ended,
                    context=where,
                    allowed=allowed,
                    written=None if kind == "delete" else new,
                )
        await watch.settle()
    return held_any


def _cut(kind: str, storage: Storage, key: str, new: bytes, version: str) -> Awaitable[Any]:
    """The write of ``kind`` that the test cancels."""
    if kind == "put":
        return storage.put(key, new)
    if kind == "if-match put":
        return storage.put(key, new, mode=IfMatch(version))
    return storage.delete(key)

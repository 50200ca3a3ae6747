"""Sweeps over the protocol's surface: every operation and mode in every key state, every
value size class, every listing option, operations in flight during writes, listings and
``aclose()``.

The hand-written tests of the other groups check one promise each; these tests
make sure that every reachable cell of the coverage matrices
(`coverage`) is exercised at least once, and
check each answer against what the protocol allows. They belong to the groups
whose promises they check (``semantics``, ``concurrency``, ``lifecycle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar

import pytest

from ..errors import (
    InvalidKey,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageClosed,
    StorageUnavailable,
)
from ..keys import MAX_KEY_BYTES
from ..storage import GetResult, IfMatch, PutMode, Storage
from ..storage import delete_many as delete_many_of
from . import descriptors
from .cancelling import cancel, check_raised, own_answer, point_text
from .checks import (
    collect,
    describe,
    expect,
    expect_keys,
    expect_raises,
    expect_value,
    fail,
    get_or_none,
)
from .clauses import checks
from .coverage import (
    AFTER_WRITES,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_VALUE,
    VALUE_LIMITS,
    after_pairs,
    backend_held,
    batch_cap,
    batch_label,
    batch_sizes,
    large_sizes,
    measuring_waits,
    size_classes,
    size_label,
    state_rows,
    value_shapes,
    watching_landings,
)
from .fixtures import (
    StorageFixtures,
    not_exercised,
    raw_key,
    raw_storage,
    set_small_pages,
    slow,
)
from .holds import Hold
from .hygiene import hygiene
from .hygiene_rules import RELEASE_LAG
from .settle import SettleWatch
from .target import Target, has_own_delete_many, holds_key_of, new_location

__all__ = [
    "CancellationSweepTests",
    "ConcurrentSweepTests",
    "LifecycleSweepTests",
    "SemanticSweepTests",
]

ESCAPE_TWINS = (
    "a/b",
    "a%2Fb",
    "a%2fb",
    "a%252Fb",
    "a_b",
    "a:b",
    "a b",
    "a+b",
    "a%20b",
    "a%",
    "a%25",
    "a&b",
    "a&amp;b",
)
"""Distinct keys that a backend name escaped one way, or decoded once too often, makes one:
``/`` replaced by ``%2F`` without ``%`` escaped first, or by ``_`` or ``:``; a name
URL-decoded on the server (``%2F``, ``%2f``, ``%20``, ``+`` as a space, ``%25``, twice:
``%252F``); XML entities decoded twice (``&amp;``)."""

IDLE_BESIDE = 8
"""Gets made at once just before the cancelled-``aclose()`` test holds its calls: the
connections they open stay idle in a pool that keeps several."""

ESCAPED_BYTES = b"\x00'\"\\\n\r\x1a&<>%\xff"
"""Bytes that text encodings of a value escape: a MySQL string literal (``\\0``, ``\\'``,
``\\"``, ``\\\\``, ``\\n``, ``\\r``, ``\\Z``: two bytes each), JSON (``\\u0000``: six),
XML (``&amp;``, ``&lt;``), a URL (``%25``), UTF-8 text of Latin-1 (``\\xff``: two)."""

_ESCAPED_TABLE = bytes(ESCAPED_BYTES[b % len(ESCAPED_BYTES)] for b in range(256))

LINE_BREAKS = ("\x85", "\u2028", "\u2029")
"""The characters a key may hold at which ``str.splitlines()`` splits (the others it splits at,
``\\n``, ``\\r``, ``\\x0b``, ``\\x0c``, ``\\x1c`` to ``\\x1e``, are control characters, which no
key holds)."""

BATCH_SWEEP_SECONDS = 300.0
"""The time limit of the batch sweep: about 330,000 keys in 43 calls of ``delete_many``, about
660 requests of 1,000 keys on S3 (half of them listings): minutes from afar."""

_STALE = "stale"
_BOGUS = "bogus"
_CURRENT = "current"
_MISSING = object()


def _bogus_version(current: str, known: tuple[str | None, ...] = ()) -> str:
    """A version of the adapter's own form that it never minted: ``current`` with its last
    character changed (a digit for a digit, a letter for a letter), unlike every version
    in ``known``."""
    head, last = current[:-1], current[-1]
    pool = "0123456789" if last.isdigit() else "abcdefghijklmnopqrstuvwxyz"
    for swap in pool:
        candidate = head + swap
        if swap != last and candidate not in known:
            return candidate
    return head + ("0" if last != "0" else "1")


class _Key:
    """A key put into a state: missing, present or deleted, with the versions it had."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: bytes | None = None
        self.current: str | None = None
        self.stale: str | None = None


async def _prepare(storage: Storage, name: str, state: str) -> _Key:
    key = _Key(name)
    if state == "missing":
        return key
    key.stale = await storage.put(name, b"first value of " + name.encode())
    key.current = await storage.put(name, b"second value of " + name.encode())
    key.value = b"second value of " + name.encode()
    if state == "deleted":
        await storage.delete(name)
        # the version it had when deleted is its stale one: a backend that keeps a deleted
        # key's last version (a tombstone, a soft delete) must not match it
        key.value, key.current, key.stale = None, None, key.current
    return key


async def _after(storage: Storage, name: str, write: str, writer: Storage | None = None) -> _Key:
    """A key whose last change was ``write`` (one of `AFTER_WRITES`), read and listed just
    before it through ``storage``: a create-only put of a deleted key; a put, an if-match
    put or a delete of a key that holds one value; made through ``writer`` if given
    (another client at the same location)."""
    by = storage if writer is None else writer
    key = _Key(name)
    first, second = b"first value of " + name.encode(), b"second value of " + name.encode()
    key.stale = await storage.put(name, first)
    if write == "create":
        await storage.delete(name)
    # what an adapter may keep from a read or a listing, as a caller's reads leave it
    await get_or_none(storage, name)
    _ = [k async for k in storage.list(name)]
    if write in ("overwrite", "create", "if-match put"):
        mode: PutMode = (
            "create"
            if write == "create"
            else IfMatch(key.stale)
            if write == "if-match put"
            else "overwrite"
        )
        key.current = await by.put(name, second, mode=mode)
        key.value = second
    elif write == "delete":
        await by.delete(name)
    elif write == "if-match delete":
        await by.delete(name, if_match=key.stale)
    else:
        await delete_many_of(by, [name])
    return key


_WRITE_NAMES = {
    "overwrite": "an overwrite",
    "create": "a create-only put",
    "if-match put": "an if-match put",
    "delete": "a delete",
    "if-match delete": "an if-match delete",
    "delete_many": "a delete_many()",
}


async def _first_calls_answer(
    target: Target, location: str | None, stored: dict[str, bytes]
) -> None:
    """Each operation as the first call of a storage of its own at ``location``, which
    holds ``stored`` (``first/a``, ``first/d``, ``first/e``, or nothing)."""
    __tracebackhide__ = True
    expected: dict[str, object] = {
        "put": "a version",
        "create-only put": "a version",
        "get": stored.get("first/a", NotFound),
        "delete": "first/d" in stored,
        "delete_many": int("first/e" in stored),
        "list": ["first/a"] if stored else [],  # d and e deleted by then
    }
    # Each storage stays in its context until the end: a target may clean the location up
    # when a storage leaves it.
    async with contextlib.AsyncExitStack() as contexts:
        for name, want in expected.items():
            fresh = await contexts.enter_async_context(target.open(location=location))
            got: object
            try:
                if name in ("put", "create-only put"):
                    mode: PutMode = "create" if name == "create-only put" else "overwrite"
                    version = await fresh.put(f"first/{name[0]}", b"x", mode=mode)
                    got = "a version" if isinstance(version, str) and version else version
                elif name == "get":
                    got = (await fresh.get("first/a")).data
                elif name == "delete":
                    got = await fresh.delete("first/d")
                elif name == "delete_many":
                    got = await delete_many_of(fresh, ["first/e"])
                else:
                    got = await _listed(fresh, "first/")
            except NotFound:
                got = NotFound
            if got != want:
                fail(
                    "every operation must answer right as a fresh storage's first call",
                    key="first/",
                    expected=f"{name} to answer {describe(want)}"
                    + (" (data written through an earlier storage)" if stored else ""),
                    observed=f"it answered {describe(got)}",
                )
            if stored:  # the later calls' expectations stay exact; the location ends empty
                for key in {"put": ["first/p"], "create-only put": ["first/c"]}.get(name, []):
                    await fresh.delete(key)
                if name == "list":
                    await fresh.delete("first/a")
            await fresh.aclose()


def _version(key: _Key, which: str, fallback: str) -> str:
    if which == _CURRENT and key.current is not None:
        return key.current
    if which == _STALE and key.stale is not None:
        return key.stale
    return _bogus_version(key.current or key.stale or fallback, (key.current, key.stale))


async def _check_row(
    storage: Storage, row: str, key: _Key, fallback: str, after: str | None = None
) -> None:
    """Run ``row`` on ``key`` and check the answer and what is stored after it (``after``:
    the write that last changed the key, for messages)."""
    __tracebackhide__ = True
    name = key.name
    present = key.value is not None
    new = b"written by " + row.encode()
    op, _, which = row.partition(" if-match ")
    where = f"{row} of a key that is {'present' if present else 'not present'}"
    if after is not None:
        where += f", right after {after} of it (read and listed just before that)"

    async def outcome(call: Awaitable[Any]) -> Any:
        try:
            return await call
        except (PreconditionFailed, NotFound) as exc:
            return exc

    stored_after: bytes | object | None = _MISSING
    if row == "put overwrite":
        got = await outcome(storage.put(name, new))
        ok, stored_after = isinstance(got, str), new
    elif row == "put create":
        got = await outcome(storage.put(name, new, mode="create"))
        ok = isinstance(got, PreconditionFailed) if present else isinstance(got, str)
        stored_after = key.value if present else new
    elif op == "put":
        version = _version(key, which, fallback)
        got = await outcome(storage.put(name, new, mode=IfMatch(version)))
        wins = which == _CURRENT and present
        ok = isinstance(got, str) if wins else isinstance(got, PreconditionFailed)
        stored_after = new if wins else key.value
    elif row == "get":
        got = await outcome(storage.get(name))
        ok = (
            got.data == key.value
            if present and not isinstance(got, Exception)
            else (not present and isinstance(got, NotFound))
        )
    elif row == "delete":
        got = await outcome(storage.delete(name))
        ok, stored_after = got is present, None
    elif op == "delete":
        version = _version(key, which, fallback)
        got = await outcome(storage.delete(name, if_match=version))
        if not present:
            ok, stored_after = got is False, None  # a missing key: False, with if_match too
        elif which == _CURRENT:
            ok, stored_after = got is True, None
        else:
            ok, stored_after = isinstance(got, PreconditionFailed), key.value
    elif row == "delete_many":
        got = await outcome(delete_many_of(storage, [name]))
        ok, stored_after = got == (1 if present else 0), None
    else:  # list
        got = [k async for k in storage.list(name)]
        ok = got == ([name] if present else [])
    if not ok:
        fail(
            "every operation must answer as the protocol says in every state of its key",
            key=name,
            expected=f"the protocol's answer to {where}",
            observed=f"it gave {describe(got) if isinstance(got, Exception) else repr(got)}",
        )
    if stored_after is _MISSING:
        return
    try:
        now: bytes | None = (await storage.get(name)).data
    except NotFound:
        now = None
    if now != stored_after:
        fail(
            "every operation must leave what the protocol says in every state of its key",
            key=name,
            expected=f"{describe(stored_after)} after {where}",
            observed=f"it holds {describe(now)}",
        )


_ROW_CLAUSES = (
    "put.overwrite",
    "put.create.missing",
    "put.create.existing",
    "put.if-match.current",
    "put.if-match.stale",
    "put.if-match.missing",
    "put.refused-changes-nothing",
    "get.missing",
    "delete.existing",
    "delete.missing",
    "delete.if-match.current",
    "delete.if-match.stale",
    "delete.if-match.missing",
    "delete-many.count",
    "list.reflects-writes",
    "version.exact-match",
)
"""The clauses `_check_row` holds an operation to, in whatever state its key is."""


class SemanticSweepTests(StorageFixtures):
    """Every operation and mode in every key state; every value size; every listing option."""

    conformance_group: ClassVar[str | None] = "semantics"

    @checks(*_ROW_CLAUSES)
    async def test_every_operation_answers_right_in_every_key_state(
        self,
        storage: Storage,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """Missing, present and just-deleted keys, each operation and mode once on each."""
        fallback = await storage.put("sweep-version-sample", b"x")
        for row in state_rows(supports_conditional_put, supports_conditional_delete):
            for state in ("missing", "present", "deleted"):
                name = f"sweep/{row.replace(' ', '-')}/{state}"
                key = await _prepare(storage, name, state)
                await _check_row(storage, row, key, fallback)

    @checks(*_ROW_CLAUSES)
    async def test_every_operation_answers_right_after_every_kind_of_write(
        self,
        storage: Storage,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """Each operation and mode once on a key right after each kind of write changed it
        (an overwrite, a create-only put of a deleted key, an if-match put, a delete, an
        if-match delete, a ``delete_many``), the key read and listed just before that
        write: an adapter that caches reads or listings and forgets the cache on some
        write paths answers from before the write (the ``after`` matrix)."""
        fallback = await storage.put("sweep-version-sample", b"x")
        pairs = after_pairs(supports_conditional_put, supports_conditional_delete)
        # write by write (a stable sort of the report's row-by-row order)
        for row, write in sorted(pairs, key=lambda pair: AFTER_WRITES.index(pair[1])):
            name = f"after/{write.replace(' ', '-')}/{row.replace(' ', '-')}"
            key = await _after(storage, name, write)
            await _check_row(storage, row, key, fallback, _WRITE_NAMES[write])

    @checks(*_ROW_CLAUSES, "cap.shared")
    async def test_every_operation_answers_right_after_another_clients_write(
        self,
        storage: Storage,
        observer: Storage,
        supports_shared: bool,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """Each operation and mode once through one client on a key right after a second
        client at the same location changed it by each kind of write, the key read and
        listed through the first just before that write: an adapter that keeps what a
        client object read (a get, a listing page, whether a key exists) and forgets it
        on that object's own writes only answers from before the other client's write
        (two processes of one deployment; the ``another client`` column of ``after``)."""
        if not supports_shared:
            pytest.skip("the adapter does not declare shared")
        if observer is storage:
            not_exercised(
                "the target cannot open a second storage at the same location (its factory "
                "takes no location=), so no other client wrote"
            )
        fallback = await storage.put("sweep-version-sample", b"x")
        pairs = after_pairs(supports_conditional_put, supports_conditional_delete)
        for row, write in sorted(pairs, key=lambda pair: AFTER_WRITES.index(pair[1])):
            name = f"after-another/{write.replace(' ', '-')}/{row.replace(' ', '-')}"
            key = await _after(storage, name, write, writer=observer)
            where = f"{_WRITE_NAMES[write]} through another client"
            await _check_row(storage, row, key, fallback, where)

    @checks(
        "put.returns-version",
        "get.missing",
        "delete.existing",
        "delete.missing",
        "delete-many.count",
        "list.reflects-writes",
    )
    async def test_every_operation_answers_right_as_the_first_call_of_a_fresh_storage(
        self, storage_target: Target | None
    ) -> None:
        """Each operation as the first call of a storage object of its own (what opens
        its client, connections, files or schema), on data written through an earlier
        storage at the same location where the target can open one, else on a fresh one:
        a put and a create-only put answer a version, a get the value (or ``NotFound``), a
        delete and a ``delete_many`` whether the key existed, a listing its keys. A client
        that answers before it has loaded what is stored (an index read lazily, a schema
        checked after the first query) answers "missing" here."""
        if storage_target is None:
            not_exercised(
                "the target supplies no factory, so no operation was a fresh storage's first"
            )
        if not storage_target.reopens:
            await _first_calls_answer(storage_target, None, {})
            return
        location = new_location()
        stored = {"first/a": b"first value", "first/d": b"to delete", "first/e": b"to delete"}
        # The writer is closed before the fresh storages open; it leaves its context only at
        # the end, which a target may use to clean the location up.
        async with storage_target.open(location=location) as writer:
            for key, value in stored.items():
                await writer.put(key, value)
            await writer.aclose()
            await _first_calls_answer(storage_target, location, stored)

    @checks("cap.durable", "put.if-match.current", "delete.if-match.current", "get.missing")
    async def test_every_operation_answers_right_after_a_reopen(
        self,
        storage: Storage,
        storage_target: Target | None,
        storage_location: str | None,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
        supports_durable: bool,
    ) -> None:
        """Keys written (and keys written, then deleted) through a storage that was closed,
        used through a new one at the same location: each operation and mode once on each
        (the versions must still match, and the deleted keys stay deleted); and a value of
        1 MiB + 1 read back whole."""
        if not supports_durable:
            pytest.skip("the adapter does not declare durable")
        if storage_target is None or storage_location is None:
            not_exercised(
                "the target cannot open a second storage at the same location (its factory "
                "takes no location=), so nothing was used after a reopen"
            )
        rows = state_rows(supports_conditional_put, supports_conditional_delete)
        keys: dict[tuple[str, str], _Key] = {}
        # a large value too: adapters store those another way (in parts, blocks, staged)
        large = random.Random(7).randbytes(min(REOPEN_LARGE, max_value_of(storage_target)))
        # The first storage is closed (aclose) before the second opens; it leaves its
        # context only at the end, which a target may use to clean the location up.
        async with storage_target.open(location=storage_location) as first:
            fallback = await first.put("sweep-version-sample", b"x")
            for row in rows:
                for state in ("present", "deleted"):  # a delete must be durable too
                    name = f"reopen/{row.replace(' ', '-')}/{state}"
                    keys[row, state] = await _prepare(first, name, state)
            large_version = await first.put("reopen/large", large)
            await first.aclose()
            async with storage_target.open(location=storage_location) as second:
                for (row, _), key in keys.items():
                    await _check_row(second, row, key, fallback)
                await expect_value(
                    second,
                    "reopen/large",
                    large,
                    version=large_version,
                    promise="a large value must survive closing and reopening, whole",
                )

    @checks("cap.durable", "version.changes", "put.if-match.stale")
    async def test_versions_after_a_reopen_never_repeat_earlier_ones(
        self,
        storage_target: Target | None,
        storage_location: str | None,
        supports_conditional_put: bool,
        supports_durable: bool,
    ) -> None:
        """A key written three times, the storage closed and reopened, then written three
        times again: no version minted after the reopen is one minted before it (a counter
        kept in the process starts again), and no version from before matches after."""
        if not supports_durable:
            pytest.skip("the adapter does not declare durable")
        if storage_target is None or storage_location is None:
            not_exercised(
                "the target cannot open a second storage at the same location (its factory "
                "takes no location=), so no version was minted after a reopen"
            )
        key, writes = "reopen-versions/k", 3
        async with storage_target.open(location=storage_location) as first:
            before = [await first.put(key, b"before %d" % i) for i in range(writes)]
            await first.aclose()
            async with storage_target.open(location=storage_location) as second:
                for i in range(writes):
                    data = b"after %d" % i
                    version = await second.put(key, data)
                    if version in before:
                        fail(
                            "a version minted after a reopen must differ from every version "
                            "the key had before it",
                            key=key,
                            expected=f"a version other than {before!r}",
                            observed=f"write {i + 1} after the reopen returned {version!r}, "
                            f"the version of write {before.index(version) + 1} before it",
                        )
                    if not supports_conditional_put:
                        continue
                    for old in before:
                        await expect_raises(
                            PreconditionFailed,
                            second.put(key, b"stale", mode=IfMatch(old)),
                            promise="a version from before a reopen must not match after it",
                            call=f"put({key!r}, b'stale', mode=IfMatch({old!r}))",
                            key=key,
                        )
                    await expect_value(
                        second,
                        key,
                        data,
                        version=version,
                        promise="a refused if-match put must change nothing",
                    )

    @checks("put.round-trip", "put.returns-version")
    async def test_values_of_every_size_class_round_trip(
        self, storage: Storage, storage_target: Target | None
    ) -> None:
        """0 and 1 bytes, each power of two up to the target's ``max_value``, and each value
        limit of common backends (`VALUE_LIMITS`: DynamoDB's 400 KB item, GridFS's 255 KiB
        chunks, etcd's 1.5 MiB request, S3's 5 MiB part), each also minus and plus one, put
        and read back whole. The values of one byte more or less are random bytes; those
        of an exact power of two or limit are made of bytes that text encodings escape
        (`ESCAPED_BYTES`): an adapter that sends a value as an escaped literal or an
        encoded string, and sizes its inline limit or its parts by the value's length, sends
        a request up to twice as long, or more, than it counted."""
        cap = max_value_of(storage_target)
        sizes = size_classes(cap)
        pattern = random.Random(len(sizes)).randbytes(sizes[-1])
        escaped = pattern.translate(_ESCAPED_TABLE)
        exact = {n for n in sizes if n & (n - 1) == 0 and n > 2} | set(VALUE_LIMITS)
        for size in sizes:
            heavy = size in exact
            data = (escaped if heavy else pattern)[:size]
            what = f"{size} bytes{', bytes that encoders escape' if heavy else ''}"
            key = f"size/{size}"
            call = f"put({key!r}, {what})"
            try:
                version = await storage.put(key, data)
                call = f"get({key!r})"
                got = await storage.get(key)
            except Exception as exc:
                fail(
                    "a value of every size must round-trip whole",
                    key=key,
                    expected=f"{size_label(size)} ({what}) put and read back",
                    observed=f"{call} raised {type(exc).__name__}: {exc}",
                    detail="a value at or near a backend's limit must still be stored: count "
                    "what the backend counts beside the value (the key, attribute names, the "
                    "version, the escaping or encoding of the value as sent) before keeping a "
                    "value inline or sizing its parts, and read a value kept in parts from "
                    "ceil(size / part) parts, also when the size is an exact multiple",
                )
            if got.data != data or got.version != version:
                fail(
                    "a value of every size must round-trip whole",
                    key=key,
                    expected=f"{size_label(size)} ({what}) and version {version!r}",
                    observed=f"get gave {len(got.data)} bytes "
                    f"({'the same' if got.data == data else 'other'} bytes) "
                    f"and version {got.version!r}",
                )
            await storage.delete(key)

    @checks("put.round-trip", "put.returns-version")
    async def test_values_of_every_shape_round_trip(self, storage: Storage) -> None:
        """Each row of ``values`` (every byte value, invalid UTF-8, byte order marks, line
        ends, whitespace around, compressed streams and their headers, a pickle, JSON, JSON
        ``null``): put, read back byte for byte, and overwritten by the next (an adapter
        that reads what looks compressed or encoded as its own data, a value as text, or a
        value as its own marker, such as a tombstone told by its value)."""
        key = "shape/v"
        for shape, data in value_shapes().items():
            version = await storage.put(key, data)
            got = await get_or_none(storage, key)
            if got is None:
                fail(
                    "a value must round-trip byte for byte, whatever it looks like",
                    key=key,
                    expected=f"{shape}: {describe(data)} at version {version!r}",
                    observed="get raised NotFound, as if the value marked the key deleted",
                )
            if got.data != data or got.version != version:
                fail(
                    "a value must round-trip byte for byte, whatever it looks like",
                    key=key,
                    expected=f"{shape}: {describe(data)} at version {version!r}",
                    observed=f"get gave {describe(got.data)} at version {got.version!r}",
                )

    @checks("delete-many.count", "delete-many.any-size")
    @slow(
        BATCH_SWEEP_SECONDS,
        "lower the largest batch, Target(max_batch=...); 4097 is past S3's and Azure's limits",
    )
    async def test_delete_many_of_every_batch_size_deletes_exactly_the_keys_that_existed(
        self, storage: Storage, storage_target: Target | None
    ) -> None:
        """A ``delete_many`` of each row of ``batches``: 0, 1 and 2 keys, each power of two and
        one more, and each batch limit of common backends and one more, up to the target's
        ``max_batch`` (2 for a storage without a ``delete_many`` of its own). Of the keys
        given, the first two and the last two exist (either side of any split an adapter
        makes, counted from either end), and three keys that sort between them exist and
        are not given: it returns how many of the given keys existed, and leaves exactly
        the three."""
        cap = batch_cap(max_batch_of(storage_target), own=has_own_delete_many(storage))
        for n in batch_sizes(cap):
            scope = f"batch/{n}/"
            given = [f"{scope}{i:05d}" for i in range(n)]
            present = sorted({given[i] for i in (0, 1, n - 2, n - 1) if 0 <= i < n})
            kept = sorted({f"{scope}{i:05d}+" for i in (0, n // 2, max(n - 1, 0))})
            for key in present + kept:
                await storage.put(key, b"x")
            call = f"delete_many([{batch_label(n)} from {scope}00000 on])"
            try:
                count = await delete_many_of(storage, given)
            except Exception as exc:
                fail(
                    "delete_many must take any number of keys (a batch larger than the "
                    "backend takes at once is split)",
                    key=scope,
                    expected=f"{call} to return {len(present)}",
                    observed=f"it raised {type(exc).__name__}: {exc}",
                )
            expect(
                count == len(present),
                "delete_many must return how many of the keys existed, at every batch size",
                key=scope,
                expected=f"{call} to return {len(present)} (the keys {', '.join(present)})",
                observed=f"{count!r}",
            )
            await expect_keys(
                storage,
                kept,
                prefix=scope,
                promise=f"delete_many of {batch_label(n)} must delete every key given and "
                "none other",
            )

    @checks(
        "put.overwrite",
        "put.create.missing",
        "put.create.existing",
        "put.if-match.current",
        "put.if-match.stale",
        "put.refused-changes-nothing",
        "delete.if-match.current",
        "delete.if-match.stale",
        "list.prefix-only",
        "list.pages",
        "version.exact-match",
        "delete-many.count",
    )
    async def test_every_write_mode_on_large_values(
        self,
        storage: Storage,
        storage_target: Target | None,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """At one byte over every power of four from 1 KiB to the target's ``max_value``
        (across any power-of-two threshold at which an adapter writes values another way):
        an overwrite of the value, a create-only put and an if-match put with a stale
        version (both refused, the value unchanged), an if-match put with the current one,
        a listing (the key once, then two keys after it), an if-match delete with a stale
        version (refused) and with the current one, a create-only put of the missing key,
        and a ``delete_many`` of it; each read back whole, with the version its write
        answered."""
        cap = max_value_of(storage_target)
        sizes = large_sizes(cap)
        pattern = random.Random(len(sizes)).randbytes(3 * sizes[-1]) if sizes else b""
        for size in sizes:
            first, second, third = (pattern[i * size : (i + 1) * size] for i in range(3))
            key = f"large/{size_label(size).replace(' ', '')}"
            where = f"a value of {size_label(size)} ({size} bytes)"
            holds = functools.partial(_holds_large, storage, key, where)
            old = await storage.put(key, first)
            current = await storage.put(key, second)
            await holds(second, current, "after an overwrite of the value")
            if supports_conditional_put:
                await expect_raises(
                    PreconditionFailed,
                    storage.put(key, third, mode="create"),
                    promise=f"a create-only put of {where} must be refused on a present key",
                    call=f"put({key!r}, {size} bytes, mode='create')",
                    key=key,
                )
                await holds(second, current, "after a refused create-only put")
                await expect_raises(
                    PreconditionFailed,
                    storage.put(key, third, mode=IfMatch(old)),
                    promise=f"an if-match put of {where} must be refused with a stale version",
                    call=f"put({key!r}, {size} bytes, mode=IfMatch(<the stale version>))",
                    key=key,
                )
                await holds(second, current, "after a refused if-match put")
                current = await storage.put(key, third, mode=IfMatch(current))
                await holds(third, current, "after an if-match put with the current version")
            after = [f"{key}-after{i}" for i in (1, 2)]
            for other in after:
                await storage.put(other, b"after")
            listed = [k async for k in storage.list("large/")]
            expect(
                listed == [key, *after],
                f"a listing must return the key of {where} once, and the keys after it",
                key=key,
                expected=repr([key, *after]),
                observed=repr(listed),
                detail="a page that a backend cut short by its bytes (DynamoDB answers at "
                "most 1 MB a query, Cosmos DB 4 MB) is not the last one: take the end of "
                "a listing from the backend's continuation, not from a page holding fewer "
                "keys than asked for",
            )
            await delete_many_of(storage, after)
            if supports_conditional_delete:
                await expect_raises(
                    PreconditionFailed,
                    storage.delete(key, if_match=old),
                    promise=f"an if-match delete of {where} must be refused with a stale version",
                    call=f"delete({key!r}, if_match=<the stale version>)",
                    key=key,
                )
                await holds(
                    third if supports_conditional_put else second,
                    current,
                    "after a refused if-match delete",
                )
            deleted = await storage.delete(
                key, if_match=current if supports_conditional_delete else None
            )
            expect(
                deleted is True,
                f"a delete of {where} must answer True",
                key=key,
                expected="True",
                observed=repr(deleted),
            )
            await expect_value(storage, key, None, promise=f"a deleted {where} must be missing")
            if supports_conditional_put:
                current = await storage.put(key, first, mode="create")
                await holds(first, current, "after a create-only put of the missing key")
            else:
                await storage.put(key, first)
            count = await delete_many_of(storage, [key, f"{key}-none"])
            expect(
                count == 1,
                f"a delete_many of {where} and a missing key must count 1",
                key=key,
                expected="1",
                observed=repr(count),
            )
            await expect_value(
                storage, key, None, promise=f"{where} deleted by delete_many must be missing"
            )

    @checks(
        "key.max-length",
        "key.multi-byte",
        "key.one-to-one",
        "list.order",
        "list.prefix-only",
        "delete-many.count",
    )
    async def test_every_key_shape_round_trips_lists_and_deletes(
        self, storage: Storage, storage_target: Target | None
    ) -> None:
        """One character, several and 120 segments, a 200-byte segment, the longest key
        the storage holds and the longest segment it holds under ``s/``, each beside a twin
        that differs in its last character only (a name cut to a length makes one of
        both), characters of 2, 3 and 4 UTF-8 bytes (either side of U+FFFF,
        where UTF-16 order differs, and above U+F8FF), punctuation, dots; keys that a
        backend's escaping would merge (``a/b`` and ``a%2Fb``, ``a b`` and ``a+b``...); the
        characters ``str.splitlines()`` splits at (U+0085, U+2028, U+2029); a parent with its
        child and the neighbours of ``/``: each put, read back, listed with the others in
        code-point order, under the prefix of its parent (``u/``, where a range up to
        ``prefix + '\\uf8ff'`` misses ``u/\\uff5e``) and under itself and itself less its
        last character (a prefix sent unescaped where names are escaped lists nothing),
        and deleted; then each put again and all
        deleted by one ``delete_many`` (a batch request whose body or sub-request names the
        keys: XML to escape, a path to encode)."""
        holds = storage_target.holds_key(storage) if storage_target else holds_key_of(storage)
        longest = "l"
        while holds(longest + "l") and len(longest) < 2048:
            longest += "l"
        segment = "x" * 200  # the longest one segment under "s/" that the storage holds
        while holds("s/" + segment + "x") and len(segment) < 2048:
            segment += "x"
        shapes = [
            "k",
            "a/b/c",
            "/".join(["d"] * 100),
            "s/" + "x" * 200,
            longest,
            # twins of the longest key and of the longest segment, different in their last
            # character only: a backend name cut to a length (a file name limit, a VARCHAR
            # column) makes one name of both
            longest[:-1] + "m",
            "s/" + segment,
            "s/" + segment[:-1] + "y",
            "é/ß",
            "日本/語",
            "emoji/\U0001f600",
            # either side of U+FFFF: by code point (and UTF-8 bytes) U+E000 and U+FF5E sort
            # before U+1F600; by UTF-16 code units (JavaScript, Java) after it
            "u/\ue000",
            "u/\uf8ff",
            "u/\uff5e",
            "u/\U0001f600",
            # keys that a backend's escaping merges when it is not one to one: '/' escaped
            # without '%' first, names URL-decoded once more (or with '+' as a space),
            # a separator replaced, XML entities decoded twice
            *(f"esc/{k}" for k in ESCAPE_TWINS),
            # the line ends str.splitlines() splits at that a key may hold (a listing body
            # of one key a line, parsed with splitlines, makes two keys of each)
            *(f"lines/a{c}b" for c in LINE_BREAKS),
            "p/a b%+?#:*~=;&@$,",
            # every printable ASCII character but '/' and the backslash, in one key and one
            # key each (an HTTP client that signs or escapes one of them wrongly; an order
            # other than the bytes')
            "ascii/" + _PRINTABLE,
            *(f"ascii1/{c}" for c in _PRINTABLE if c != "."),  # '.' alone: not a key
            "dot/a.b",
            "n/a",
            "n/a-b",
            "n/a.b",
            "n/a/b",
            "n/a0",
        ]
        shapes = [k for k in dict.fromkeys(shapes) if holds(k)]
        for key in shapes:
            data = key.encode()
            version = await storage.put(key, data)
            got = await storage.get(key)
            if (got.data, got.version) != (data, version):
                fail(
                    "a key of every shape must round-trip",
                    key=key,
                    expected=f"{describe(data)} at version {version!r}",
                    observed=f"get gave {describe(got.data)} at version {got.version!r}",
                )
        for key in shapes:  # read again once all are written: one may have replaced another
            again = await get_or_none(storage, key)
            if again is None or again.data != key.encode():
                fail(
                    "distinct keys must stay distinct: a write of one must not change another",
                    key=key,
                    expected=f"{describe(key.encode())}, as put, once every key was written",
                    observed="it is missing"
                    if again is None
                    else f"get gave {describe(again.data)} (another key's value)",
                    detail="a backend name made from a key must be one to one: escape the "
                    "escape character first ('%' before '/', as quote(key, safe='') does), "
                    "and decode a name once, with '+' as '+'",
                )
        listed = sorted(shapes)
        await expect_keys(
            storage, listed, promise="keys of every shape must list exactly, in order"
        )
        # the prefix of each key's parent, and prefixes made of each key's own characters
        # (the key, and the key less its last character): a prefix sent to the backend
        # other than as its names are (unescaped where names are escaped) lists nothing
        parents = {k[: k.rindex("/") + 1] for k in shapes if "/" in k}
        own = {p for k in shapes for p in (k, k[:-1]) if p}
        for prefix in sorted(parents | own):
            want = [k for k in listed if k.startswith(prefix)]
            under = await collect(storage.list(prefix), bound=len(want) + 1000)
            if under != want:
                missing = [k for k in want if k not in under]
                extra = [k for k in under if k not in want]
                fail(
                    "keys of every shape must list exactly under the prefix of their parent "
                    "and under prefixes made of their own characters",
                    key=(missing or extra or [prefix])[0],
                    expected=f"list({prefix!r}) to return every key that starts with it "
                    f"({len(want)}), in order",
                    observed=f"it returned {len(under)} keys"
                    + (f", without {', '.join(repr(k) for k in missing[:3])}" if missing else "")
                    + (f", with {', '.join(repr(k) for k in extra[:3])}" if extra else ""),
                    detail="a prefix is every key that starts with it: a range up to prefix + "
                    "'\\uf8ff' or '\\uffff' misses a key whose next character is above "
                    "(U+FF5E, an emoji); end the range at the prefix with its last character "
                    "incremented, or scan from the prefix while keys start with it; where "
                    "keys become escaped names, escape the prefix the same way",
                )
        for key in shapes:
            existed = await storage.delete(key)
            expect(
                existed is True,
                "a delete of a key of every shape must find it",
                key=key,
                expected="True",
                observed=repr(existed),
            )
        for key in shapes:
            await storage.put(key, key.encode())
        try:
            count = await delete_many_of(storage, shapes)
        except Exception as exc:
            fail(
                "delete_many must take keys of every shape",
                expected=f"delete_many of the {len(shapes)} keys to return {len(shapes)}",
                observed=f"it raised {type(exc).__name__}: {exc}",
            )
        left = [k async for k in storage.list()]
        expect(
            count == len(shapes) and not left,
            "a delete_many of keys of every shape must delete and count each of them",
            key=left[0] if left else None,
            expected=f"it to return {len(shapes)} and leave no key",
            observed=f"it returned {count!r} and left {len(left)} keys"
            + (f", {', '.join(repr(k) for k in left[:3])} first" if left else ""),
        )

    @checks("error.invalid-key")
    async def test_a_valid_key_the_storage_does_not_hold_is_refused_as_invalid(
        self, storage: Storage, storage_target: Target | None
    ) -> None:
        """A key within the key rules (at most 1024 UTF-8 bytes with the suite's prefix)
        that the adapter's ``holds_key`` says it does not hold (a server's 255-byte name
        segments, a root before every key): ``put``, ``get``, ``delete`` and
        ``delete_many`` of it raise ``InvalidKey`` naming the limit, and nothing is stored.
        An adapter that sends it anyway gets the backend's own error (a file name too long,
        an HTTP 400) as ``StorageUnavailable``, an error a caller retries, or a wrong
        answer (``NotFound``, False)."""
        holds = storage_target.holds_key(storage) if storage_target else holds_key_of(storage)
        room = MAX_KEY_BYTES - len(raw_key(storage, "").encode())
        candidates = [
            "l" * room,
            "s/" + "x" * (room - 2),
            *(f"s/{'x' * n}" for n in (256, 512) if n + 2 <= room),
            "/".join(["d"] * (room // 2)),
        ]
        unheld = [k for k in dict.fromkeys(candidates) if not holds(k)]
        if not unheld:
            pytest.skip("the storage holds every valid key (its holds_key accepts them all)")
        for key in unheld:
            calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
                ("put", functools.partial(storage.put, key, b"not held")),
                ("get", functools.partial(storage.get, key)),
                ("delete", functools.partial(storage.delete, key)),
                ("delete_many", functools.partial(delete_many_of, storage, [key])),
            ]
            for name, call in calls:
                try:
                    answer = await call()
                except InvalidKey:
                    continue
                except Exception as exc:
                    fail(
                        "an operation on a key the storage does not hold raises InvalidKey",
                        key=key,
                        expected=f"{name} to raise InvalidKey naming the limit "
                        f"(holds_key is False for this {len(key.encode())}-byte key)",
                        observed=f"it raised {type(exc).__name__}: {exc}",
                        detail="in every operation, check holds_key before sending, and "
                        "raise InvalidKey naming the limit, not the backend's error",
                    )
                fail(
                    "an operation on a key the storage does not hold raises InvalidKey",
                    key=key,
                    expected=f"{name} to raise InvalidKey naming the limit",
                    observed=f"it returned {answer!r}",
                )
        left = [k async for k in storage.list()]
        expect(
            not left,
            "a key the storage does not hold is never stored",
            key=left[0] if left else None,
            expected="no key",
            observed=f"{len(left)} keys",
        )

    @checks("delete-many.validates-first", "error.invalid-key")
    async def test_delete_many_with_an_invalid_key_deletes_nothing(
        self, storage: Storage, storage_target: Target | None
    ) -> None:
        """An adapter's own ``delete_many`` checks every key before it deletes any, the
        empty key included (not dropped from the batch as a stray name), and in a batch of
        the target's ``max_batch`` keys (65,537 by default) too, the invalid key last: an
        adapter that splits a batch into requests and checks each request's keys just
        before sending it refuses the batch once the requests before were sent."""
        if getattr(raw_storage(storage), "delete_many", None) is None:
            pytest.skip("the adapter has no delete_many of its own (the optional operation)")
        size = max(3, max_batch_of(storage_target))
        long = [f"dm/long/{i:06d}" for i in range(size - 1)]
        present = sorted({long[i * (len(long) - 1) // 8] for i in range(9)})  # spread over it
        for bad in ("dm//bad", ""):
            for kept, batch in (
                (["dm/a", "dm/b"], ["dm/a", bad, "dm/b"]),
                (present, [*long, bad]),
            ):
                await self._refused_whole(storage, bad, kept, batch)

    async def _refused_whole(
        self, storage: Storage, bad: str, kept: list[str], batch: list[str]
    ) -> None:
        """``batch`` (holding ``bad``) refused with ``InvalidKey``, each of ``kept`` kept."""
        __tracebackhide__ = True
        shown = (
            repr(batch)
            if len(batch) <= 3
            else f"of {len(batch):,} keys, {batch[0]!r} first and {bad!r} last"
        )
        for key in kept:
            await storage.put(key, b"kept")
        try:
            count = await delete_many_of(storage, batch)
        except InvalidKey:
            pass
        else:
            fail(
                "delete_many must refuse a batch with an invalid key",
                key=bad,
                expected=f"delete_many(batch {shown}) to raise InvalidKey",
                observed=f"it returned {count!r}",
                detail="validate every key of the batch as a single call would; never "
                "skip or drop one",
            )
        for key in kept:
            try:
                await storage.get(key)
            except NotFound:
                fail(
                    "delete_many must check every key before it deletes any",
                    key=key,
                    expected=f"the key kept (the batch {shown} had an invalid key)",
                    observed="it was deleted",
                    detail="check the whole batch before the first delete is sent, not each "
                    "request's keys as it is sent",
                )

    @checks("close.context-manager", "close.storage-closed")
    async def test_async_with_closes_the_storage(self, storage: Storage) -> None:
        """Leaving ``async with`` closes the adapter: a later call raises StorageClosed; an
        exception raised in the block goes on (``__aexit__`` must not swallow it)."""
        adapter = raw_storage(storage)

        class _Raised(Exception):
            pass

        try:
            async with adapter:
                raise _Raised
        except _Raised:
            pass
        else:
            fail(
                "leaving 'async with' must let an exception raised in the block go on",
                key="after-exit",
                expected="the block's exception raised on from the 'async with'",
                observed="it was swallowed (an __aexit__ that returns True)",
            )
        try:
            await adapter.get("after-exit")
        except StorageClosed:
            return
        except NotFound:
            pass
        fail(
            "leaving 'async with' must close the storage",
            key="after-exit",
            expected="StorageClosed from a call after the block",
            observed="the call ran as on an open storage",
        )

    @checks("list.order", "list.prefix-only", "list.start-after", "list.limit", "list.pages")
    async def test_listings_span_many_directories(self, storage: Storage) -> None:
        """Keys of 130 top-level directories and of 130 directories under one (more than an
        adapter that lists directory by directory, partition by partition or scope by
        scope may merge at once: 64, 100, 128): every listing that spans them returns
        each key once, in order, with the adapter's own pages and with pages of 7 keys."""
        top = [f"d{i:03d}/k" for i in range(130)]
        nested = [f"runs/r{i:03d}/k" for i in range(130)]
        everything = sorted(top + nested)
        for key in everything:
            await storage.put(key, b"x")
        for small in (False, True):
            pages = " (pages of 7 keys)" if small and set_small_pages(storage, 7) else ""
            if small and not pages:
                break  # the page size is the adapter's own: listed already
            promise = f"a listing must return every key of many directories once, in order{pages}"
            await expect_keys(storage, everything, promise=promise)
            await expect_keys(storage, nested, prefix="runs/", promise=promise)
            await expect_keys(storage, top[100:], prefix="d1", promise=promise)
            await expect_keys(storage, everything[65:], start_after=everything[64], promise=promise)
            await expect_keys(
                storage,
                nested[65:115],
                prefix="runs/",
                start_after=nested[64],
                limit=50,
                promise=promise,
            )

    @checks("list.order", "list.pages", "delete-many.count")
    async def test_a_listing_of_a_megabyte_of_key_names(
        self, storage: Storage, storage_target: Target | None
    ) -> None:
        """Keys as long as the storage holds (up to 1,024 bytes), more than `NAMES_BYTES` of
        names in all (1,025 keys of 1 KiB): a listing returns each once, in order (a backend
        that answers a megabyte at a time, as DynamoDB's keys-only ``Query``, cuts its page
        short there, and an adapter that takes a short page for the last loses the rest);
        then one ``delete_many`` counts them all."""
        holds = storage_target.holds_key(storage) if storage_target else holds_key_of(storage)
        size = 16
        while size < 1024 and holds("names/99999-".ljust(size + 1, "n")):
            size += 1
        count = NAMES_BYTES // size + 1
        keys = [f"names/{i:05d}-".ljust(size, "n") for i in range(count)]
        for start in range(0, count, 16):  # 16 at a time: 4,000 keys of a slow server
            await asyncio.gather(*(storage.put(key, b"n") for key in keys[start : start + 16]))
        await expect_keys(
            storage,
            keys,
            prefix="names/",
            promise=f"a listing of {count} keys of {size} bytes ({count * size:,} bytes of "
            "names) must return each once, in order",
        )
        deleted = await delete_many_of(storage, keys)
        expect(
            deleted == count,
            f"a delete_many of {count} keys of {size} bytes must count each",
            key=keys[0],
            expected=f"{count}",
            observed=f"{deleted}",
        )

    @checks("list.order", "list.prefix-only", "list.start-after", "list.limit", "list.pages")
    async def test_every_listing_option_against_every_kind_of_prefix(
        self, storage: Storage
    ) -> None:
        """The empty prefix, one ending in ``/`` and one inside a segment, against every kind
        of ``start_after`` and ``limit``, and more than one page."""
        keys = sorted(["lo/a", "lo/b", "lo/b/c", "lo/ba", "lo/c", "lo0", "lp", "ln"])
        for key in keys:
            await storage.put(key, key.encode())
        set_small_pages(storage, 2)
        for prefix in ("", "lo/", "lo/b"):
            inside = [k for k in keys if k.startswith(prefix)]
            afters: list[str | None] = [None, inside[1]]
            if prefix:
                afters += ["a", "z"]  # before the prefix's keys; past them
            for after in afters:
                for limit in (None, 0, 1, 3):
                    want = [k for k in inside if after is None or k > after]
                    if limit is not None:
                        want = want[:limit]
                    await expect_keys(
                        storage,
                        want,
                        promise="a listing must honour prefix, start_after and limit",
                        prefix=prefix,
                        start_after=after,
                        limit=limit,
                    )


class ConcurrentSweepTests(StorageFixtures):
    """Every operation while another task's write of the same key is in flight."""

    conformance_group: ClassVar[str | None] = "concurrency"

    @checks("put.conditional.one-winner", "put.create.existing", "put.if-match.stale")
    async def test_conditional_races_on_large_values_have_one_winner(
        self,
        storage: Storage,
        storage_target: Target | None,
        supports_conditional_put: bool,
    ) -> None:
        """At one byte over every power of four from 1 KiB to the target's ``max_value``
        (the rows of ``large values``), 4 create-only puts of one new key at once, then 4
        if-match puts with the winner's version: each race has exactly one winner, whose
        value is stored whole at the version it answered (a large value's path of its own,
        parts or staging, must keep the condition atomic too)."""
        if not supports_conditional_put:
            pytest.skip("the adapter does not declare conditional_put")
        cap = max_value_of(storage_target)
        sizes = large_sizes(cap)
        pattern = random.Random(len(sizes)).randbytes(sizes[-1] + RACERS) if sizes else b""
        for size in sizes:
            key = f"large-race/{size_label(size).replace(' ', '')}"
            values = [pattern[i : i + size] for i in range(RACERS)]
            version: str | None = None
            for how in ("create-only", "if-match"):
                mode: PutMode = "create" if version is None else IfMatch(version)
                answers = await asyncio.gather(
                    *(put_or_refused(storage, key, value, mode) for value in values)
                )
                winners = [i for i, answer in enumerate(answers) if answer is not None]
                expect(
                    len(winners) == 1,
                    f"{RACERS} concurrent {how} puts of one key must have exactly one winner",
                    key=key,
                    expected="1 writer to succeed and the others to get PreconditionFailed",
                    observed=f"{len(winners)} succeeded (writers {winners}), with values of "
                    f"{size_label(size)} ({size} bytes)",
                )
                version = answers[winners[0]]
                await expect_value(
                    storage, key, values[winners[0]], version=version,
                    promise=f"the winner's value of {size_label(size)} must be stored whole, "
                    f"at the version it answered ({how} race)",
                )  # fmt: skip
            await storage.delete(key)

    @checks("put.atomic", "list.order", "delete-many.count", "error.own-call")
    async def test_every_operation_while_a_write_of_its_key_is_held(
        self,
        storage: Storage,
        backend_hold: Hold,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A put of the key is held in the backend; a put, get, delete, ``delete_many`` and a
        listing of the same key start meanwhile; once released, each answers as one of the
        orders of the writes allows, and the key ends whole."""
        hold = backend_hold
        if not hold.holds("put"):
            not_exercised(
                f"the target's hold ({hold.name}) does not hold a put, so no operation ran "
                "while another write of its key was in flight"
            )
        async with hold.client(storage_target, storage, storage_location) as client:
            key = "busy/k"
            first = b"the held put's value"
            second = b"the second put's value"
            await client.put(key, b"before")
            async with hold.held(raw_storage(client), raw_key(client, key)):
                held = asyncio.ensure_future(client.put(key, first))
                if not await hold.caught(held):
                    await held
                    not_exercised(f"{hold.name} did not catch the put in flight")
                others = [
                    asyncio.ensure_future(call)
                    for call in (
                        client.put(key, second),
                        client.get(key),
                        client.delete(key),
                        delete_many_of(client, [key]),
                        _listed(client, "busy/"),
                    )
                ]
                await asyncio.sleep(0)
            answers = await asyncio.gather(held, *others, return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(answer, NotFound):
                fail(
                    "operations running at once must each get their own answer",
                    key=key,
                    expected="a version, a value, NotFound, a bool, a count or keys",
                    observed=f"one raised {describe(answer)}",
                )
        got, listed = answers[2], answers[5]
        if not isinstance(got, BaseException):
            expect(
                got.data in (b"before", first, second),
                "a value read while it is written must be whole",
                key=key,
                expected="one of the values written",
                observed=f"get gave {describe(got.data)}",
            )
        expect(
            listed in ([], [key]),
            "a listing while its key is written must return it once or not at all",
            key=key,
            expected=f"[] or [{key!r}]",
            observed=repr(listed),
        )


async def expect_busy_released(
    before: dict[int, str] | None, target: Target | None, key: str, when: str, context: str = ""
) -> None:
    """The process has no descriptor more than ``before`` (a snapshot taken before the
    storage was used; None where descriptors cannot be listed), once ``when``: every
    connection was released, also one that a call was using when ``aclose()`` ran."""
    __tracebackhide__ = True
    if before is None:
        return
    found = await descriptors.wait_for_no_leak(
        before, grace=RELEASE_LAG, foreign=None if target is None else target.foreign_descriptors
    )
    if found:
        fail(
            "aclose() must release every connection, also one busy when it ran",
            key=key,
            expected=f"as many open descriptors as before the storage was used, once {when}",
            observed="the process still has "
            + descriptors.describe_leak(found)
            + (f" ({context})" if context else ""),
            detail="close the connections in use too (when their call ends, if aclose() lets "
            "it end): a pool that closes only its idle connections leaks the busy ones",
        )


async def _calls_to_hold(client: Storage, prefix: str) -> list[Callable[[], Awaitable[Any]]]:
    """A put, get, delete, ``delete_many`` and listing under ``prefix``, their keys stored
    first (``a`` and ``c`` small, ``b`` large): the calls that the lifecycle tests hold in
    the backend while ``aclose()`` runs. `_expect_honest_answers` judges their answers."""
    for k in (f"{prefix}/a", f"{prefix}/c"):
        await client.put(k, b"v")
    # a large value: an adapter that reads small ones at once may wait for this one
    await client.put(f"{prefix}/b", bytes(4 * 1024 * 1024))
    return [
        lambda: client.put(f"{prefix}/a", b"new"),
        lambda: client.get(f"{prefix}/b"),
        lambda: client.delete(f"{prefix}/c"),
        lambda: delete_many_of(client, [f"{prefix}/d"]),
        lambda: _listed(client, f"{prefix}/"),
    ]


_CLOSED_IN_FLIGHT = (
    "an operation in flight when aclose() is called must end with its own answer or "
    "StorageClosed (a write that aclose() ended before its answer came: OutcomeUnknown)"
)
"""Clause ``close.in-flight``'s answers, as the checks of calls in flight say it."""


def _honest_when_closed(answer: object, *, write: bool) -> bool:
    """Whether ``answer`` (a call's result or error) is one that clause ``close.in-flight``
    allows a call in flight when ``aclose()`` was called: its own answer, ``StorageClosed``,
    or, for a write that ``aclose()`` ended after it was sent, ``OutcomeUnknown``."""
    if not isinstance(answer, BaseException):
        return True
    return isinstance(answer, (StorageClosed, OutcomeUnknown) if write else StorageClosed)


def _expect_honest_answers(answers: Sequence[Any], key: str) -> None:
    """Each call of `_calls_to_hold` that ``aclose()`` ran under ended with its own answer,
    ``StorageClosed``, or (a write) ``OutcomeUnknown``."""
    __tracebackhide__ = True
    writes = (0, 2, 3)  # the put, the delete and the delete_many
    for n, answer in enumerate(answers):
        if not _honest_when_closed(answer, write=n in writes):
            fail(
                _CLOSED_IN_FLIGHT,
                key=key,
                expected="an answer, StorageClosed, or OutcomeUnknown from a write",
                observed=f"one raised {describe(answer)}",
            )


class LifecycleSweepTests(StorageFixtures):
    """``aclose()`` with every operation in flight, and writes while a listing is open."""

    conformance_group: ClassVar[str | None] = "lifecycle"

    @checks("close.in-flight", "close.storage-closed", "close.idempotent", "close.releases")
    async def test_aclose_with_every_operation_in_flight(
        self,
        backend_hold: Hold,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A put, get, delete, ``delete_many`` and a listing are held in the backend when
        ``aclose()`` is called: each ends with its own answer or ``StorageClosed`` (a write
        that ``aclose()`` ended before its answer came may raise ``OutcomeUnknown``), and
        ``aclose()`` returns once the backend answers again. Where the target can open a
        second storage at the same location, it reads that a write answered was in place
        the moment ``aclose()`` returned, and that nothing changed after that. Once the
        calls have ended and everything the test opened is closed, the process has no
        descriptor more than before: a connection that was busy when ``aclose()`` ran (a
        pool that closes its idle connections only, and takes the busy one back later)
        is closed too."""
        hold = backend_hold
        if storage_target is None or not hold.operations:
            not_exercised(
                "the target supplies no hold (or no factory), so no operation was in flight "
                "when aclose() was called"
            )
        keys = ["closing/a", "closing/c", "closing/d"]  # what the put and the deletes write
        before = descriptors.snapshot() if descriptors.available() else None
        async with contextlib.AsyncExitStack() as stack:
            opened = await stack.enter_async_context(storage_target.open(location=storage_location))
            client = await stack.enter_async_context(
                hold.client(storage_target, opened, storage_location)
            )
            reader = await _Reader.of(storage_target, storage_location, opened, stack)
            calls = await _calls_to_hold(client, "closing")

            async def close() -> Stored:
                await client.aclose()
                return {} if reader is None else await reader.read(keys)

            async with hold.held(raw_storage(client), raw_key(client, "closing/a")):
                # aclose() starts in the same turn of the loop as the calls, right after each
                # has run to its first wait: whatever they wait for, they are in flight
                running = [asyncio.ensure_future(call()) for call in calls]
                with backend_held():  # an aclose() that waits for the held calls: a hold's wait
                    closing = asyncio.ensure_future(close())
                await asyncio.wait(running, timeout=hold.hold_for)
            answers = await asyncio.gather(*running, return_exceptions=True)
            at_close = await closing
            at_end = {} if reader is None else await reader.read(keys)
            await client.aclose()  # idempotent
        await expect_busy_released(
            before,
            storage_target,
            "closing/a",
            "the calls in flight ended and the storage was closed",
        )
        _expect_honest_answers(answers, "closing/a")
        if reader is None:
            return
        held = f"the calls were held by {hold.name} when aclose() was called"
        put, deleted = answers[0], answers[2]
        stored = at_close["closing/a"]
        expect(
            not isinstance(put, str) or (stored is not None and stored.version == put),
            "a write answered while aclose() ran must be in place when aclose() returns",
            key="closing/a",
            expected="the answered put in place once aclose() returned",
            observed=f"the put answered {put!r}, and the key then held {_held(stored)} ({held})",
        )
        expect(
            deleted is not True or at_close["closing/c"] is None,
            "a write answered while aclose() ran must be in place when aclose() returns",
            key="closing/c",
            expected="the key deleted once aclose() returned",
            observed=f"the delete answered True, and the key then held "
            f"{_held(at_close['closing/c'])} ({held})",
        )
        _expect_nothing_landed_after(
            at_close, at_end, f"{held}; aclose() returned while a write was still under way"
        )
        for n, call, key in ((0, "put", "closing/a"), (2, "delete", "closing/c")):
            if isinstance(answers[n], StorageClosed):
                _expect_untouched(call, key, b"v", at_end[key], held)

    @checks("close.releases", "close.in-flight", "close.idempotent")
    async def test_aclose_cancelled_while_calls_are_in_flight_still_releases_everything(
        self,
        backend_hold: Hold,
        storage_target: Target | None,
        storage_location: str | None,
    ) -> None:
        """A put and a get are held in the backend, `IDLE_BESIDE` gets having just left
        their connections idle in the storage's pool (where it keeps several), when
        ``aclose()`` is called, and ``aclose()`` is cancelled while it runs (a shutdown
        under a deadline, a task group torn down). It must raise ``CancelledError`` or
        return, never another error; once the backend answers again each call ends with
        its own answer, ``StorageClosed`` or (the put) ``OutcomeUnknown``; a second
        ``aclose()`` returns, and by then the process has no descriptor more than before.
        An ``aclose()`` that waits for the calls under way and closes its connections after
        that wait, not in a ``finally:``, never closes them when it is cancelled there
        (the busy ones may be closed by their calls; the idle ones by nothing): the storage
        is marked closed, so the second call returns at once and leaves them open."""
        hold = backend_hold
        if storage_target is None or not hold.operations:
            not_exercised(
                "the target supplies no hold (or no factory), so no operation was in flight "
                "when aclose() was cancelled"
            )
        before = descriptors.snapshot() if descriptors.available() else None
        async with contextlib.AsyncExitStack() as stack:
            opened = await stack.enter_async_context(storage_target.open(location=storage_location))
            client = await stack.enter_async_context(
                hold.client(storage_target, opened, storage_location)
            )
            put_and_get = (await _calls_to_hold(client, "cut-close"))[:2]
            # connections of a pool left idle beside the held calls (where it keeps several)
            await asyncio.gather(*(client.get("cut-close/a") for _ in range(IDLE_BESIDE)))
            async with hold.held(raw_storage(client), raw_key(client, "cut-close/a")):
                running = [asyncio.ensure_future(call()) for call in put_and_get]
                with backend_held():
                    closing = asyncio.ensure_future(client.aclose())
                await asyncio.wait({closing}, timeout=hold.hold_for)  # into its wait, if any
                closing.cancel()
                closed: BaseException | None = (
                    await asyncio.gather(closing, return_exceptions=True)
                )[0]
            answers = await asyncio.gather(*running, return_exceptions=True)
            if isinstance(closed, BaseException) and not isinstance(closed, asyncio.CancelledError):
                fail(
                    "a cancelled aclose() must raise CancelledError or return",
                    key="cut-close/a",
                    expected="CancelledError, or aclose() returning",
                    observed=f"it raised {describe(closed)} (cancelled while calls were held "
                    f"by {hold.name})",
                )
            _expect_honest_answers(answers, "cut-close/a")
            await client.aclose()  # must return only once everything is released
        await expect_busy_released(  # `client` is still referenced: nothing was collected
            before,
            storage_target,
            "cut-close/a",
            "aclose() was cancelled while calls were in flight, and called again after they ended",
            "the storage still referenced",
        )

    @checks("close.other-storages")
    async def test_closing_one_storage_leaves_another_open(
        self, storage_target: Target | None
    ) -> None:
        """Two storage objects of the target open at once (at two locations, where the
        target takes one: a client kept per server or per URL is shared by both), each
        used; the first closed: every operation through the second still gets its own
        answer, and closing it afterwards releases what is left. An adapter that shares a
        client, pool or session between storage objects and closes it in the first
        ``aclose()`` fails the second's calls until the process restarts."""
        if storage_target is None:
            not_exercised("the target supplies no factory, so no second storage was opened")
        reopens = storage_target.reopens
        async with (
            storage_target.open(location=new_location() if reopens else None) as first,
            storage_target.open(location=new_location() if reopens else None) as second,
        ):
            await first.put("two-open/first", b"written through the first")
            await second.put("two-open/a", b"written through the second")
            await first.aclose()
            what = "through a storage object still open after another one was closed"
            try:
                await expect_value(
                    second,
                    "two-open/a",
                    b"written through the second",
                    promise="closing one storage object must leave another open",
                    detail=what,
                )
                await second.put("two-open/b", b"b")
                await second.put("two-open/b", b"b again")
                await expect_keys(
                    second,
                    ["two-open/a", "two-open/b"],
                    prefix="two-open/",
                    promise="closing one storage object must leave another open",
                )
                await second.delete("two-open/a")
                await delete_many_of(second, ["two-open/b"])
                await second.aclose()  # what is left of the two is released
            except (StorageClosed, StorageUnavailable, RuntimeError, OSError) as exc:
                fail(
                    "closing one storage object must leave another open",
                    key="two-open/a",
                    expected="each call through the second storage object to get its own answer",
                    observed=f"it raised {describe(exc)} {what}",
                    detail="the two shared a client, pool, session or connection, and the first "
                    "aclose() closed it: share nothing, or close a shared client only when the "
                    "last storage object that uses it closes",
                )

    @checks("close.in-flight", "close.releases")
    async def test_aclose_while_a_fresh_storage_opens(self, storage_target: Target | None) -> None:
        """A fresh storage's first calls (a put alone, a delete alone, then a put, a
        create-only put, a get, a delete, a ``delete_many`` and a listing at once) open its
        client, connections or files; ``aclose()`` comes 0 to 21 event-loop iterations
        after they start. Each call ends with its own answer, ``StorageClosed`` or (a
        write that ``aclose()`` ended after it was sent) ``OutcomeUnknown``, and nothing
        is left open; where the target can open a second storage at the same
        location, a second round reads through it that a write answered was in place when
        ``aclose()`` returned, that a write that raised ``StorageClosed`` changed nothing,
        and that nothing landed later."""
        if storage_target is None:
            not_exercised(
                "the target supplies no factory, so no fresh storage could be closed while "
                "its first calls ran"
            )
        # the rounds without a second storage share one location (where the target takes
        # one), emptied at the end, so that the target has no cleanup of its own to run
        location = new_location() if storage_target.reopens else None
        for names in OPENING_ROUNDS:
            for after in OPENING_AFTER:
                await _closed_while_opening(storage_target, names, after, location)
                if storage_target.reopens:
                    await _landed_while_opening(storage_target, names, after)
        if location is not None:
            async with storage_target.open(location=location) as rest:
                await delete_many_of(rest, await _listed(rest, "opening/"))

    @checks("hygiene.no-task-left", "hygiene.no-thread-left")
    async def test_aclose_returns_with_nothing_of_the_storage_still_running(
        self, storage_target: Target | None
    ) -> None:
        """A fresh storage used once in every operation, then closed with a put in flight
        (in the caller's task): when ``aclose()`` returns, no task it started is pending
        (not even one cancelled and not awaited) and no thread it started is alive, daemon
        or not. The hygiene check around each test gives a task or thread a few loop turns
        and a second; here nothing may be left the moment ``aclose()`` returns, as the
        protocol says: a keep-alive task cancelled but
        not awaited, a write in a task of the storage's own, or a writer thread not joined
        may still write after the caller went on (and deleted or reopened what it wrote)."""
        if storage_target is None:
            not_exercised("the target supplies no factory: no fresh storage to close")
        tasks = asyncio.all_tasks()
        threads = set(threading.enumerate())
        async with storage_target.open() as fresh:
            await fresh.put("running/a", b"a")
            await fresh.get("running/a")
            await _listed(fresh, "running/")
            await delete_many_of(fresh, ["running/a"])
            await fresh.delete("running/b")
            # and a put in flight, in the caller's own task: aclose() may let it finish
            # there, but not in a task of the storage's that outlives aclose()
            in_flight = asyncio.ensure_future(fresh.put("running/c", b"c"))
            await asyncio.sleep(0)
            await fresh.aclose()
            mine = {asyncio.current_task(), in_flight}
            pending = [t for t in asyncio.all_tasks() - tasks if t not in mine and not t.done()]
            alive = [
                t
                for t in set(threading.enumerate()) - threads
                if t.is_alive() and not t.name.startswith("asyncio_") and not _serving(t)
            ]
            await asyncio.gather(in_flight, return_exceptions=True)
        if pending or alive:
            fail(
                "when aclose() returns, nothing the storage started is still running",
                expected="no pending task and no live thread of the storage",
                observed=", ".join(
                    [f"task {t.get_name()} ({t.get_coro()!r})" for t in pending]
                    + [f"thread {t.name!r}" for t in alive]
                ),
                detail="in aclose(), cancel each task the storage started and await it "
                "(await asyncio.gather(*tasks, return_exceptions=True)), and join each "
                "thread, daemon ones too",
            )

    @checks("list.concurrent-writes")
    async def test_writes_while_a_listing_is_open(self, storage: Storage) -> None:
        """A put, a delete and a ``delete_many`` of keys of the prefix between two steps of a
        listing: every key present for the whole listing is returned exactly once, in order."""
        kept = [f"open/{i:02d}" for i in range(0, 12, 2)]
        for k in [*kept, "open/05", "open/07"]:
            await storage.put(k, b"v")
        set_small_pages(storage, 2)
        listing = storage.list("open/")
        seen = [await anext(listing)]
        await storage.put("open/03", b"new")
        await storage.delete("open/05")
        await delete_many_of(storage, ["open/07"])
        seen += [k async for k in listing]
        expect(
            seen == sorted(set(seen)) and set(kept) <= set(seen),
            "a listing must return every key present for its whole length once, in order",
            key="open/",
            expected=f"ascending keys, each once, including {kept}",
            observed=repr(seen),
        )


RACERS = 4
"""Writers of each race of `test_conditional_races_on_large_values_have_one_winner`."""


def max_batch_of(target: Target | None) -> int:
    """The largest ``delete_many`` the batch sweep makes: the target's ``max_batch``, or the
    default."""
    return target.max_batch if target is not None else DEFAULT_MAX_BATCH


def max_value_of(target: Target | None) -> int:
    """The largest value the size sweeps write: the target's ``max_value``, or the default."""
    return target.max_value if target is not None else DEFAULT_MAX_VALUE


async def put_or_refused(storage: Storage, key: str, data: bytes, mode: PutMode) -> str | None:
    """The version a conditional put wrote, or None if its condition refused it."""
    try:
        return await storage.put(key, data, mode=mode)
    except PreconditionFailed:
        return None


async def _holds_large(
    storage: Storage, key: str, where: str, data: bytes, version: str, after: str
) -> None:
    await expect_value(
        storage, key, data, version=version,
        promise=f"{where} must read back whole, at the version of its last write, {after}",
    )  # fmt: skip


class _Reader:
    """Reads keys at a location as another client: through a storage opened beforehand when
    the adapter declares ``shared``; else, when it declares ``durable``, through a new
    storage opened for each read (its data survives closing and reopening; a client that
    is not shared may read a snapshot taken when it opened). Every storage it opens stays
    open until ``stack`` closes (a target may clean the location up when one leaves)."""

    def __init__(
        self, target: Target, location: str, stack: contextlib.AsyncExitStack, look: Storage | None
    ) -> None:
        self.target = target
        self.location = location
        self.stack = stack
        self.look = look

    @classmethod
    async def of(
        cls,
        target: Target,
        location: str | None,
        storage: Storage,
        stack: contextlib.AsyncExitStack,
        look: Storage | None = None,
    ) -> _Reader | None:
        """A reader of ``location``, or None where no other client can be trusted to see
        its data (no location, or neither ``shared`` nor ``durable``). ``look``: a
        storage already open there, read through if the adapter declares ``shared``."""
        caps = target.capabilities or storage.capabilities
        if location is None or not (caps.shared or caps.durable):
            return None
        if not caps.shared:
            look = None
        elif look is None:
            look = await stack.enter_async_context(target.open(location=location))
        return cls(target, location, stack, look)

    async def client(self) -> Storage:
        """A storage that sees the location's data as it is now."""
        if self.look is not None:
            return self.look
        return await self.stack.enter_async_context(self.target.open(location=self.location))

    async def read(self, keys: Sequence[str]) -> Stored:
        """What ``keys`` hold now, as another client sees them."""
        return await _stored(await self.client(), keys)


async def _listed(storage: Storage, prefix: str) -> list[str]:
    return [k async for k in storage.list(prefix)]


NAMES_BYTES = 1024 * 1024
"""The bytes of key names that `test_a_listing_of_a_megabyte_of_key_names` lists: more than one
answer of a backend that answers a megabyte at a time."""

OPENING_AFTER = (0, 1, 2, 3, 5, 8, 13, 21)
"""Event-loop iterations from a fresh storage's first calls to its ``aclose()``."""

OPENING_ROUNDS = (("put",), ("delete",), ("put", "create", "get", "delete", "delete_many", "list"))
"""The first calls of each round: a write alone (the one that opens the client is then the
only call; others would queue behind it and shift when it runs), then one of each."""

_WRITES = {"put": "a", "create": "b", "delete": "d", "delete_many": "e"}
"""The key (under the round's prefix) of each write of a round; get reads ``a``."""

_BEFORE = b"old"
"""What the keys of a round's put, delete and ``delete_many`` hold before the round (a
create-only put's key is missing), where a second storage reads them."""

Stored = dict[str, GetResult | None]


def _call(storage: Storage, name: str, prefix: str) -> Awaitable[Any]:
    if name == "put":
        return storage.put(prefix + "a", b"new")
    if name == "create":
        return storage.put(prefix + "b", b"new", mode="create")
    if name == "get":
        return storage.get(prefix + "a")
    if name == "delete":
        return storage.delete(prefix + "d")
    if name == "delete_many":
        return delete_many_of(storage, [prefix + "e"])
    return _listed(storage, prefix)


async def _first_calls(
    target: Target,
    names: tuple[str, ...],
    prefix: str,
    after: int,
    location: str | None = None,
    reader: _Reader | None = None,
) -> tuple[dict[str, object], Stored, Stored]:
    """Open a storage (at ``location``), start its first calls (``names``) on keys under
    ``prefix``, and ``aclose()`` it ``after`` event-loop iterations later. Returns each
    call's answer or error by name, once every call ended, and what ``reader`` (of
    ``location``) read of the written keys the moment ``aclose()`` returned and once the
    calls ended (empty without it)."""
    keys = [prefix + _WRITES[name] for name in names if name in _WRITES]
    at_close: Stored = {}
    at_end: Stored = {}
    async with target.open(location=location) as fresh:
        running = [asyncio.ensure_future(_call(fresh, name, prefix)) for name in names]
        for _ in range(after):
            await asyncio.sleep(0)
        await fresh.aclose()
        if reader is not None:
            at_close = await reader.read(keys)
        ended = await asyncio.gather(*running, return_exceptions=True)
        if reader is not None:  # before the context ends: the target may then clean up
            at_end = await reader.read(keys)
            written = [prefix + key for key in _WRITES.values()]
            await delete_many_of(await reader.client(), written)
    answers = dict(zip(names, ended, strict=True))
    for name, answer in answers.items():
        if isinstance(answer, NotFound) and name == "get":
            continue  # the get's own answer: its key was never written
        if not _honest_when_closed(answer, write=name in _WRITES):
            fail(
                _CLOSED_IN_FLIGHT,
                key=prefix,
                expected="an answer, StorageClosed, or OutcomeUnknown from a write",
                observed=f"the {_NAMES.get(name, name)} raised {describe(answer)}",
                detail=_when(names, after),
            )
    return answers, at_close, at_end


_NAMES = {"create": "create-only put", "delete_many": "delete_many()", "list": "listing"}


def _when(names: tuple[str, ...], after: int) -> str:
    calls = ", ".join(_NAMES.get(name, name) for name in names)
    return (
        f"aclose() came {after} event-loop iterations after a fresh storage's first "
        f"call{'s' if len(names) > 1 else ''} ({calls})"
    )


async def _closed_while_opening(
    target: Target, names: tuple[str, ...], after: int, location: str | None
) -> None:
    """`_first_calls` in a hygiene check: nothing of the storage may be left open."""
    prefix = f"opening/{len(names)}{names[0]}/{after:02d}/"
    async with hygiene(check=False) as report:
        await _first_calls(target, names, prefix, after, location)
    if report.findings:
        fail(
            "a storage closed while its first calls open it must leave nothing behind",
            expected="no unclosed session, socket or file, no pending task, no thread",
            observed="the hygiene check found: " + "; ".join(report.findings),
            detail=f"{_when(names, after)}; a call that goes on after aclose() may open a "
            "connection or session again, which nothing closes",
        )


async def _landed_while_opening(target: Target, names: tuple[str, ...], after: int) -> None:
    """`_first_calls` at a location read through a second storage: a write answered was in
    place the moment ``aclose()`` returned, one that raised ``StorageClosed`` changed
    nothing, and nothing changed after that."""
    prefix = f"landing/{len(names)}{names[0]}/{after:02d}/"
    location = new_location()
    async with contextlib.AsyncExitStack() as stack:
        look = await stack.enter_async_context(target.open(location=location))
        reader = await _Reader.of(target, location, look, stack, look)
        if reader is None:
            return
        for name in ("put", "delete", "delete_many"):
            if name in names:
                await look.put(prefix + _WRITES[name], _BEFORE)
        if reader.look is None:
            await look.aclose()  # not shared: its writes are whole for the next to open
        answers, at_close, at_end = await _first_calls(
            target, names, prefix, after, location, reader
        )
    for name, answer in answers.items():
        if name not in _WRITES or isinstance(answer, BaseException):
            continue
        key = prefix + _WRITES[name]
        stored = at_close[key]
        if isinstance(answer, str):  # a put's version
            landed = stored is not None and stored.version == answer
        else:  # a delete's True (or False), a delete_many's count
            landed = stored is None or not answer
        expect(
            landed,
            "a write answered while aclose() ran must be in place when aclose() returns",
            key=key,
            expected="the answered write in place once aclose() returned",
            observed=f"the {_NAMES.get(name, name)} answered {answer!r}, and the key then "
            f"held {_held(stored)} ({_when(names, after)})",
        )
    _expect_nothing_landed_after(
        at_close,
        at_end,
        f"{_when(names, after)}; a call that waited for the storage to open went on writing "
        "after it was closed",
    )
    for name, answer in answers.items():
        if name in _WRITES and isinstance(answer, StorageClosed):
            key = prefix + _WRITES[name]
            before = None if name == "create" else _BEFORE
            _expect_untouched(_NAMES.get(name, name), key, before, at_end[key], _when(names, after))


def _expect_untouched(
    call: str, key: str, before: bytes | None, after: GetResult | None, detail: str
) -> None:
    """A write that raised ``StorageClosed`` left its key as it was (``before``, None:
    missing): ``StorageClosed`` says the write did not happen, and one that ``aclose()``
    ended after it was sent owes ``OutcomeUnknown`` instead."""
    __tracebackhide__ = True
    expect(
        (after.data if after is not None else None) == before,
        "a write that raised StorageClosed must not have taken effect",
        key=key,
        expected=f"the key still holding {_held_bytes(before)}, as before the write",
        observed=f"the {call} raised StorageClosed, and the key then held {_held(after)} "
        f"({detail})",
        detail="a write that aclose() ended after its request was sent may have happened: "
        "raise OutcomeUnknown for it, StorageClosed only for one that was never sent",
    )


def _held_bytes(data: bytes | None) -> str:
    return "nothing" if data is None else describe(data)


def _expect_nothing_landed_after(at_close: Stored, at_end: Stored, detail: str) -> None:
    """What the keys held when ``aclose()`` returned is what they hold once the calls ended."""
    for key, before in at_close.items():
        if at_end[key] != before:
            fail(
                "nothing of a call in flight may land after aclose() returned",
                key=key,
                expected=f"{_held(before)} (as when aclose() returned) once the calls ended",
                observed=f"it then held {_held(at_end[key])}",
                detail=detail,
            )


async def _stored(storage: Storage, keys: Sequence[str]) -> Stored:
    """What ``keys`` hold, read at once (None: missing)."""
    found = await asyncio.gather(*(get_or_none(storage, key) for key in keys))
    return dict(zip(keys, found, strict=True))


def _held(stored: GetResult | None) -> str:
    return "nothing" if stored is None else f"{describe(stored.data)} at version {stored.version}"


REOPEN_LARGE = (1 << 20) + 1
"""The size of the large value written before a reopen (at most the target's ``max_value``)."""

_PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in "/\\")
"""Every printable ASCII character that a key segment may hold."""

FIRST_CALL_POINTS: tuple[int | float, ...] = (*range(1, 13), *(0.001 * 2**i for i in range(10)))
"""When a fresh storage's first call is cancelled: after 1 to 12 event-loop iterations, then
after 1 ms, doubling to 0.5 s (a client that connects waits for a server or a thread)."""


class CancellationSweepTests(StorageFixtures):
    """Every operation cancelled on its first wait, then the client used again."""

    conformance_group: ClassVar[str | None] = "cancellation"

    @checks("cancel.prompt", "cancel.healthy-after")
    async def test_first_call_of_a_fresh_storage_cancelled_leaves_it_healthy(
        self, storage_target: Target | None, cancel_bound: float
    ) -> None:
        """A fresh storage's first call (a put, which opens its client, connections or
        files) cancelled at each of `FIRST_CALL_POINTS`, one storage each, until the put
        ends before its cancellation: it raises ``CancelledError`` within the cancel bound,
        and the next put and get of that storage get their own answers (a client stored
        before its handshake ended would be left half open)."""
        if storage_target is None:
            not_exercised(
                "the target supplies no factory, so no fresh storage's first call could be "
                "cancelled"
            )
        for point in FIRST_CALL_POINTS:
            async with storage_target.open() as fresh:
                outcome = await cancel(
                    functools.partial(fresh.put, "fresh/cut", b"cancelled"),
                    point,
                    "fresh/cut",
                    bound=cancel_bound,
                )
                check_raised([outcome], "first put of a fresh storage", cancel_bound)
                await own_answer(fresh, "fresh/next", f"its first call was {point_text(point)}")
            if not outcome.took:
                return

    @checks(
        "cancel.prompt", "cancel.whole-or-absent", "cancel.no-late-landing", "cancel.healthy-after"
    )
    async def test_every_operation_cancelled_at_its_first_wait(
        self, storage: Storage, cancel_bound: float, settle: SettleWatch
    ) -> None:
        """Each operation on a large value (an adapter that answers small ones at once may
        wait for this one) is cancelled as soon as it waits: ``CancelledError`` (or its own
        answer, if it never waited) within the cancel bound, the key whole or absent, and
        the next call on the same client gets its own answer. Each write's key is watched
        over the settle window: nothing of it may land later (for an adapter that declares
        ``settles_cancelled_writes``)."""
        big = bytes(range(256)) * (16 * 1024)  # 4 MiB
        await storage.put("cut/get", big)
        await storage.put("cut/delete", big)
        await storage.put("cut/many", big)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "put": lambda: storage.put("cut/put", big),
            "get": lambda: storage.get("cut/get"),
            "delete": lambda: storage.delete("cut/delete"),
            "delete_many": lambda: delete_many_of(storage, ["cut/many"]),
            "list": lambda: _listed(storage, "cut/"),
        }
        # Whether each waits, with nothing in its way: three uncancelled calls (one that
        # answers at once even once, as a read that finds what it needs at hand, is not
        # sure to be in flight: see coverage.measuring_waits)
        for _ in range(3):
            for call in calls.values():
                with measuring_waits():
                    measured = asyncio.ensure_future(call())
                await measured
            for key in ("cut/delete", "cut/many"):
                await storage.put(key, big)
        await storage.delete("cut/put")  # missing again: a put that lands late shows
        loop = asyncio.get_running_loop()
        written = {"put": "cut/put", "delete": "cut/delete", "delete_many": "cut/many"}
        for op, call in calls.items():
            with measuring_waits(), watching_landings():
                task = asyncio.ensure_future(call())
            await asyncio.sleep(0)  # it starts, and runs until its first wait
            task.cancel()
            start = loop.time()
            done, _ = await asyncio.wait({task}, timeout=cancel_bound * 4)
            ended = time.monotonic()
            took = loop.time() - start
            cut = written.get(op)
            if cut is not None and task.cancelled():  # a write that answered cannot land later
                settle.add(
                    cut,
                    await settle.read(cut),
                    what=op,
                    since=ended,
                    context="cancelled at its first wait",
                    allowed=(None, big),
                    written=big if op == "put" else None,
                )
            if not done or took > cancel_bound:
                fail(
                    "a cancelled operation must end promptly",
                    key=f"cut/{op}",
                    expected=f"{op} to end within {cancel_bound} s of its cancel",
                    observed=f"it took {took:.3f} s" if done else "it had not ended",
                )
            if not task.cancelled() and task.exception() is not None:
                fail(
                    "a cancelled operation must raise CancelledError or give its own answer",
                    key=f"cut/{op}",
                    expected="CancelledError or an answer",
                    observed=f"it raised {describe(task.exception())}",
                )
        for key in ("cut/put", "cut/get", "cut/delete", "cut/many"):
            try:
                data = (await storage.get(key)).data
            except NotFound:
                data = None
            expect(
                data in (None, big),
                "a cancelled operation must leave its key whole or absent",
                key=key,
                expected="the whole 4 MiB value or nothing",
                observed=f"it holds {describe(data)}",
            )
        await storage.put("cut/after", b"after")
        got = await storage.get("cut/after")
        expect(
            got.data == b"after",
            "after a cancellation the next call must get its own answer",
            key="cut/after",
            expected="b'after'",
            observed=describe(got.data),
        )
        await settle.settle()


def _serving(thread: threading.Thread) -> bool:
    """Whether ``thread`` answers a request of a server in this process (a test server's,
    such as moto's threaded one: ``socketserver`` names it after
    ``process_request_thread``), not a thread of the storage."""
    return "(process_request_thread)" in thread.name

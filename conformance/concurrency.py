"""Group ``concurrency``: many writers, races with exactly one winner, atomic reads.

Request counts scale with ``Target.scale`` (a local moto server answers about
100 requests a second: give it ``scale=0.2``).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, ClassVar

from ..errors import NotFound, PreconditionFailed, StorageError
from ..storage import IfMatch, PutMode, Storage
from ..storage import delete_many as delete_many_of
from .checks import (
    describe,
    expect,
    expect_keys,
    expect_listed_in_turn,
    expect_missing,
    expect_value,
    fail,
    get_or_none,
    listed,
)
from .clauses import checks
from .coverage import large_sizes, size_label
from .fixtures import need_two_clients, not_exercised, scaled, set_small_pages
from .gaps import GapTests
from .semantics import _need
from .sweeps import ConcurrentSweepTests, _listed, max_value_of, put_or_refused
from .target import Target, new_location
from .together import together

__all__ = ["ConcurrencyTests"]

MiB = 1024 * 1024
OVERWRITES = 4
"""How many times the second client overwrites each key while the first lists and deletes."""
KEPT = 8
"""How many keys other tasks overwrite while listings run (each stays present)."""
FLICKERING = 4
"""How many keys between them other tasks delete and create again meanwhile."""
CROSS_KEYS = 12
"""Keys raced at once through two clients, for each kind of conditional write."""
CROSS_WRITERS = 4
"""Writers of each of those keys, taking turns between the two clients."""
LARGE_RACE_VALUE = 64 * 1024
"""Bytes of each value of the if-match puts raced through two clients, or with a batch."""
BATCH_RACES = 16
"""Times a ``delete_many`` races if-match puts of its keys (a batch that skips the puts'
lock falls inside a put's check and write in about one race of three)."""
BATCH_KEYS = 8
"""Keys of each of those races."""
REFLECTED = 100
"""New keys put one after the other while another task lists them."""
SEEN_WRITES = 60
"""Overwrites of one key that a second client reads meanwhile (at least)."""
SEEN_FOR = 1.5
"""Seconds the first client overwrites that key for (at least): a read made of two
statements is torn by a write between them only now and then, and a fast adapter makes
many reads in that time (1 s let such a read through once in a CI run, 4 test workers on
2 cores)."""
SEEN_READERS = 3
"""Readers on the second client, each reading the key again and again."""
STALE_RACERS = 3
"""If-match puts, and as many deletes, on a stale version that race each current write."""


_RACED_SIZES = ((1 << 20) + 1, (1 << 22) + 1, (1 << 24) + 1)
"""The sizes of `test_concurrent_overwrites_of_large_values_all_write_and_leave_one_whole`:
past 1 MiB, Azure Blob's 4 MiB blocks and S3's 8 MiB multipart parts."""
_RACING_DELETES = 50
"""The most deletes the racing-deletes test sends during one put (it stops at the first
that answers True: one that takes a put's staged parts would make it stage them again)."""
GAP_SMALL_VALUE = 64 * 1024
"""The value of the racing-deletes test where the target holds no value of 1 MiB + 1."""


def _raced_sizes(target: Target | None) -> list[int]:
    """The sizes of `_RACED_SIZES` that ``target`` holds, smallest first."""
    return [s for s in large_sizes(max_value_of(target)) if s in _RACED_SIZES]


class ConcurrencyTests(ConcurrentSweepTests, GapTests):
    """Concurrent writers and readers on one storage."""

    conformance_group: ClassVar[str | None] = "concurrency"

    @checks("put.round-trip")
    async def test_concurrent_puts_to_distinct_keys_are_all_readable(
        self, storage: Storage, scale: float
    ) -> None:
        """Puts of distinct keys all at once, each key beside a key below it (``many/0001``
        and ``many/0001/x``): every put's value must read back and be listed. A backend
        whose objects are files in directories may lose a key to the directory that a key
        below it makes at the same moment (SeaweedFS with object names that are the keys:
        an acknowledged put of ``k`` gone in about one round in 50 where ``k/x`` is
        written at once)."""
        n = scaled(scale, 100)
        keys = [k for i in range(n) for k in (f"many/{i:04d}", f"many/{i:04d}/x")]
        await asyncio.gather(*(storage.put(k, k.encode()) for k in keys))
        results = await asyncio.gather(*(get_or_none(storage, k) for k in keys))
        for key, got in zip(keys, results, strict=True):
            if got is None or got.data != key.encode():
                fail(
                    f"{len(keys)} concurrent puts to distinct keys must all be readable",
                    key=key,
                    expected=f"it to hold {describe(key.encode())}",
                    observed=f"it holds {describe(None if got is None else got.data)}",
                )
        await expect_keys(
            storage,
            sorted(keys),
            prefix="many/",
            promise=f"{len(keys)} concurrent puts must all be listed",
        )

    @checks("put.conditional.one-winner", "put.create.existing")
    async def test_create_only_race_has_one_winner(
        self, storage: Storage, scale: float, supports_conditional_put: bool
    ) -> None:
        """A key never written, then a key written and deleted (a backend that keeps a
        deleted key's row may take another path to create it)."""
        _need(supports_conditional_put, "conditional_put")
        n = scaled(scale, 20)
        await storage.put("race-deleted", b"before")
        await storage.delete("race-deleted")
        for key, what in (("race", "one key"), ("race-deleted", "a deleted key")):
            outcomes = await asyncio.gather(
                *(put_or_refused(storage, key, f"writer {i}".encode(), "create") for i in range(n))
            )
            winners = [i for i, v in enumerate(outcomes) if v is not None]
            expect(
                len(winners) == 1,
                f"{n} concurrent create-only puts of {what} must have exactly one winner",
                key=key,
                expected="1 writer to succeed and the others to get PreconditionFailed",
                observed=f"{len(winners)} succeeded (writers {listed(winners)})",
            )
            w = winners[0]
            await expect_value(
                storage,
                key,
                f"writer {w}".encode(),
                version=outcomes[w],
                promise="the winner's value must be stored",
            )

    @checks("delete.conditional.one-winner", "delete.if-match.missing")
    async def test_conditional_delete_race_has_one_winner(
        self,
        storage: Storage,
        scale: float,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """Concurrent deletes with the stored version; then, where if-match puts are
        declared, deletes and if-match puts of that version at once: one wins."""
        _need(supports_conditional_delete, "conditional_delete")
        n = scaled(scale, 20)
        rounds = (
            ("deletes", "deletes and if-match puts") if supports_conditional_put else ("deletes",)
        )
        for r, what in enumerate(rounds):
            key = f"cas-delete/{r}"
            base = await storage.put(key, b"base")

            def swap(i: int, key: str = key, base: str = base) -> Awaitable[str | None]:
                return put_or_refused(storage, key, f"writer {i}".encode(), IfMatch(base))

            calls = [swap(i) if r and i % 2 else _delete(storage, i, key, base) for i in range(n)]
            outcomes = await asyncio.gather(*calls)
            winners = [i for i, v in enumerate(outcomes) if v not in (None, REFUSED)]
            if not r:
                _expect_no_delete_refused(key, outcomes, f"{n} concurrent deletes of one version")
            expect(
                len(winners) == 1,
                f"{n} concurrent {what} on one version must have exactly one winner",
                key=key,
                expected="1 call to succeed (a delete returning True, or a put), the others "
                "to get PreconditionFailed or, a delete after the winning delete, False",
                observed=f"{len(winners)} succeeded (calls {listed(winners)}; the odd ones "
                "are puts)"
                if r
                else f"{len(winners)} deletes returned True (deletes {listed(winners)})",
            )
            await _winner_holds(storage, key, winners[0], outcomes[winners[0]])

    @checks("delete.one-true")
    async def test_unconditional_delete_race_finds_the_value_once(
        self, storage: Storage, scale: float
    ) -> None:
        """Concurrent unconditional deletes of one stored value: exactly one finds it."""
        n = scaled(scale, 20)
        key = "delete-race"
        await storage.put(key, b"once")
        found = await asyncio.gather(*(storage.delete(key) for _ in range(n)))
        finders = [i for i, f in enumerate(found) if f]
        expect(
            len(finders) == 1,
            f"{n} concurrent deletes of one stored value must find it exactly once",
            key=key,
            expected="1 delete to return True, the others False",
            observed=f"{len(finders)} returned True (deletes {listed(finders)})",
        )
        await expect_missing(storage, key, promise="the key is gone after the deletes")

    @checks("delete-many.one-true", "delete-many.count")
    async def test_delete_many_racing_deletes_counts_the_value_once(
        self, storage: Storage, scale: float
    ) -> None:
        """Concurrent ``delete_many`` calls (each of the raced key among keys of its own) and
        unconditional deletes of one stored value, `BATCH_RACES` rounds: of all of them,
        exactly one finds the value, as a delete returning True or as a count of one."""
        n = max(4, scaled(scale, 12))
        for r in range(BATCH_RACES):
            key = f"delete-many-race/{r}"
            await storage.put(key, b"once")

            async def batch(i: int, r: int = r, key: str = key) -> int:
                own = f"delete-many-race/{r}-{i}"  # missing: counts nothing
                return await delete_many_of(storage, [own, key])

            async def delete(key: str = key) -> int:
                return int(await storage.delete(key))

            # a batch first in even rounds, a delete first in odd ones: which of them reaches
            # the backend first decides which interleavings the round can show
            calls = [batch(i) if (i + r) % 2 == 0 else delete() for i in range(n)]
            found = await asyncio.gather(*calls)
            finders = [i for i, f in enumerate(found) if f]
            expect(
                sum(found) == 1,
                f"{n} concurrent delete_many calls and deletes of one stored value must count it "
                "exactly once",
                key=key,
                expected="one delete to return True or one delete_many to count 1; the others "
                "False or 0",
                observed=f"found {sum(found)} times (calls {listed(finders)}; the "
                f"{'even' if r % 2 == 0 else 'odd'} ones are delete_many)",
            )
            await expect_missing(storage, key, promise="the key is gone after the deletes")

    @checks("put.conditional.one-winner", "put.if-match.stale")
    async def test_cas_race_has_one_winner(
        self, storage: Storage, scale: float, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        n = scaled(scale, 20)
        base = await storage.put("cas", b"base")

        outcomes = await asyncio.gather(
            *(
                put_or_refused(storage, "cas", f"writer {i}".encode(), IfMatch(base))
                for i in range(n)
            )
        )
        winners = [i for i, v in enumerate(outcomes) if v is not None]
        expect(
            len(winners) == 1,
            f"{n} concurrent if-match puts on one version must have exactly one winner",
            key="cas",
            expected="1 writer to succeed",
            observed=f"{len(winners)} succeeded (writers {listed(winners)})",
        )
        w = winners[0]
        await expect_value(
            storage,
            "cas",
            f"writer {w}".encode(),
            version=outcomes[w],
            promise="the compare-and-swap winner's value must be stored",
        )

    @checks("delete-many.each-atomic", "delete-many.count", "put.conditional.one-winner")
    async def test_delete_many_racing_if_match_puts_leaves_every_key_deleted(
        self, storage: Storage, scale: float, supports_conditional_put: bool
    ) -> None:
        """`BATCH_KEYS` keys written, then at once an if-match put of each key's version
        (64 KiB values) and one ``delete_many`` of them all, `BATCH_RACES` times. Whichever
        of a key's put and delete comes first, the key ends deleted: a put before the
        delete is deleted, a put after it finds the key missing; and the batch counts every
        key (each was present until deleted). A ``delete_many`` that deletes without the
        lock or transaction that the if-match put holds falls between the put's check and
        its write, which then puts the key back."""
        _need(supports_conditional_put, "conditional_put")
        count = scaled(scale, BATCH_KEYS)
        for race in range(scaled(scale, BATCH_RACES)):
            keys = [f"batch-race/{race}/{k:02d}" for k in range(count)]
            versions = [await storage.put(key, b"base") for key in keys]
            puts = [
                asyncio.ensure_future(put_or_refused(storage, key, _large(k), IfMatch(versions[k])))
                for k, key in enumerate(keys)
            ]
            await asyncio.sleep(0)  # the puts start first: each runs to its first wait
            deleted = await delete_many_of(storage, keys)
            answers = await asyncio.gather(*puts)
            left = {key: await get_or_none(storage, key) for key in keys}
            back = [k for k, key in enumerate(keys) if left[key] is not None]
            expect(
                not back,
                "a delete_many racing if-match puts of its keys must leave every key deleted",
                key=keys[back[0]] if back else keys[0],
                expected="every key missing: a put before the key's delete is deleted with "
                "it, a put after it finds the key missing (PreconditionFailed)",
                observed=", ".join(
                    f"{keys[k]!r} holds {describe(_data(left[keys[k]]))} (its put "
                    f"{'answered ' + repr(answers[k]) if answers[k] else 'was refused'})"
                    for k in back[:3]
                )
                + f" ({len(back)} of {count} keys; the delete_many answered {deleted})",
                detail="delete each key of a batch as one delete does, under the lock or in "
                "the transaction that a conditional put of the key takes: a delete that "
                "falls between a put's version check and its write is undone by the write",
            )
            expect(
                deleted == count,
                "a delete_many racing if-match puts of its keys must count every key",
                key=keys[0],
                expected=f"{count} (each key was present until deleted)",
                observed=f"{deleted}",
            )

    @checks("put.atomic", "put.returns-version", "cap.shared")
    async def test_a_second_client_reading_during_overwrites_sees_each_put_whole(
        self, target: Target, scale: float, supports_shared: bool
    ) -> None:
        """Two clients of a ``shared`` adapter at one location: while the first overwrites
        one key with distinct values (`SEEN_WRITES` times and for `SEEN_FOR` seconds, at
        least), `SEEN_READERS` readers on the second get it
        again and again. Every read finds the key (an overwrite made of a delete and an
        insert shows it missing), and returns the bytes of one put with the version that
        put answered (a get made of two reads, the bytes and then the version, returns one
        write's bytes with another's version)."""
        need_two_clients(target, supports_shared)
        writes = scaled(scale, SEEN_WRITES)
        key = "clients/seen"
        location = new_location()
        async with target.open(location=location) as a, target.open(location=location) as b:
            written = {await a.put(key, b"written 0"): b"written 0"}
            reads: list[tuple[bytes, str]] = []
            done = asyncio.Event()

            async def write() -> None:
                loop = asyncio.get_running_loop()
                until = loop.time() + SEEN_FOR
                try:
                    for i in itertools.count(1):
                        if i > writes and loop.time() > until:
                            break
                        value = b"written %d" % i
                        written[await a.put(key, value)] = value
                finally:
                    done.set()

            async def read() -> None:
                while not done.is_set() or not reads:
                    found = await get_or_none(b, key)
                    if found is None:
                        fail(
                            "an overwrite is atomic: another client's read finds the old or "
                            "the new value, never the key missing",
                            key=key,
                            expected="every read to find the key (it is never deleted)",
                            observed=f"read {len(reads) + 1} found it missing, while the "
                            "first client overwrote it",
                            detail="replace the value in one step (one statement, an "
                            "upsert, a rename), not a delete and then an insert",
                        )
                    reads.append((bytes(found.data), found.version))
                    await asyncio.sleep(0)

            await together(write(), *(read() for _ in range(SEEN_READERS)))
        torn = [(data, version) for data, version in reads if written.get(version) != data]
        expect(
            not torn,
            "a get returns the bytes of one put with the version that put answered, also "
            "while another client overwrites the key",
            key=key,
            expected="each read's (bytes, version) as one put wrote and answered them",
            observed=f"{len(torn)} of {len(reads)} reads did not: the first read "
            f"{describe(torn[0][0]) if torn else ''} at version {torn[0][1] if torn else ''!r}, "
            f"which answered {describe(written.get(torn[0][1])) if torn else ''}",
            detail="read the bytes and the version in one statement or one snapshot: two "
            "reads let a write of another client fall between them",
        )

    @checks("list.reflects-writes")
    async def test_listings_started_after_a_put_completed_show_it_while_writes_go_on(
        self, storage: Storage, scale: float
    ) -> None:
        """One task puts `REFLECTED` new keys, one after the other, while two others list
        their prefix again and again; after each put the writer waits until a listing that
        started after that put completed has ended, so that each put is looked for while no
        other write is made. Every listing shows each key whose put had completed when the
        listing started, and so does a last listing after them all. A listing cache
        refreshed when the directory's (or table's) change time moves, but with the time
        read after the scan, misses a key created during a scan until the next write."""
        count = scaled(scale, REFLECTED)
        loop = asyncio.get_running_loop()
        completed: dict[str, float] = {}
        done = asyncio.Event()
        seen_after = asyncio.Event()  # a listing started after the last put has ended
        stale: list[tuple[int, list[str]]] = []
        listings = 0

        async def write() -> None:
            try:
                for i in range(count):
                    key = f"reflected/{i:03d}"
                    await storage.put(key, b"x")
                    seen_after.clear()
                    completed[key] = loop.time()
                    await seen_after.wait()
            finally:
                done.set()

        async def list_again() -> None:
            nonlocal listings
            last = False
            while not last:
                last = done.is_set()
                started = loop.time()
                shown = set(await _listed(storage, "reflected/"))
                listings += 1
                missing = sorted(k for k, t in completed.items() if t <= started and k not in shown)
                if missing:
                    stale.append((listings, missing))
                if completed and max(completed.values()) <= started:
                    seen_after.set()
                await asyncio.sleep(0)  # a listing that never waits would starve the writer

        await together(write(), list_again(), list_again())
        if stale:
            first, missing = stale[0]
            fail(
                "a listing started after a put completed must show its key, also while other "
                "writes go on",
                key=missing[0],
                expected="every key whose put had completed when the listing started",
                observed=f"{len(stale)} of {listings} listings missed some (listing {first} "
                f"missed {listed(missing)}); the last listing "
                + ("too" if stale[-1][0] == listings else "did not"),
                detail="a cache of the listing must never outlive a write it did not see: "
                "take its change mark (mtime, a counter) before the scan, not after",
            )

    @checks(
        "put.conditional.one-winner",
        "delete.conditional.one-winner",
        "delete.if-match.missing",
        "cap.shared",
    )
    async def test_conditional_races_across_two_clients_have_one_winner(
        self,
        target: Target,
        scale: float,
        supports_shared: bool,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """Two storages at one location (two clients of a ``shared`` adapter) race on
        `CROSS_KEYS` keys at once, `CROSS_WRITERS` writers a key taking turns between
        them: create-only puts of a missing key, if-match puts of one version (values of
        64 KiB: a write that takes a while), if-match deletes of one version. Each key's
        race has one winner. A check and a write made atomic by a lock of one client (a
        thread lock, a cached version) hold for that client only; two clients find the
        version current at once only now and then, so the races are many and at once."""
        need_two_clients(target, supports_shared)
        writers, count = CROSS_WRITERS, scaled(scale, CROSS_KEYS)
        location = new_location()
        async with target.open(location=location) as a, target.open(location=location) as b:
            clients = (a, b)
            races: list[tuple[str, Callable[[Storage, int, str, str], Awaitable[Any]]]] = []
            if supports_conditional_put:
                races.append(("create-only puts", _create))
                races.append(("if-match puts", _swap_large))
            if supports_conditional_delete:
                races.append(("if-match deletes", _delete))
            _need(bool(races), "conditional_put or conditional_delete")
            for what, call in races:
                keys = [f"clients/{what.split()[0]}/{k:02d}" for k in range(count)]
                bases = {key: "" if call is _create else await a.put(key, b"base") for key in keys}
                outcomes = await asyncio.gather(
                    *(
                        call(clients[i % 2], i, key, bases[key])
                        for key in keys
                        for i in range(writers)
                    )
                )
                for k, key in enumerate(keys):
                    mine = outcomes[k * writers : (k + 1) * writers]
                    winners = [i for i, v in enumerate(mine) if v not in (None, REFUSED)]
                    if call is _delete:
                        _expect_no_delete_refused(
                            key,
                            mine,
                            f"{writers} concurrent if-match deletes of one version through "
                            "two clients",
                        )
                    expect(
                        len(winners) == 1,
                        f"{writers} concurrent {what} of one key through two clients must "
                        "have exactly one winner",
                        key=key,
                        expected="1 call to succeed, the others refused (PreconditionFailed, "
                        "or False for a delete of a key already deleted)",
                        observed=f"{len(winners)} succeeded (writers {listed(winners)}; the "
                        f"even ones through the first client, the odd ones through the "
                        f"second; {count} keys raced at once)",
                        detail="decide the condition in the backend, in the write itself (a "
                        "conditional request, a transaction, a script, a lock that every "
                        "client takes): a lock or a cached version held by one client does "
                        "not stop another",
                    )
                    w = winners[0]  # read through the client the winner did not write through
                    await _winner_holds(
                        clients[1 - w % 2], key, w, mine[w], large=call is _swap_large
                    )

    @checks("put.if-match.current", "delete.if-match.current", "put.refused-changes-nothing")
    async def test_a_current_conditional_write_wins_against_stale_ones_racing_it(
        self,
        storage: Storage,
        observer: Storage,
        scale: float,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """On `CROSS_KEYS` keys at once, each written twice (a stale version, then the
        current one), `STALE_RACERS` if-match puts and as many if-match deletes on the
        stale version race one write on the current version, an if-match put (and, in a
        second round, an if-match delete), through both clients where there are two. The
        stale ones change nothing and never stop the current one: its condition holds
        whatever they do, so it must write (delete) every time. A write that refuses
        when it finds the key busy (``SELECT ... FOR UPDATE NOWAIT``, a lock tried and not
        waited for, "someone else is writing it, so my version is stale") fails here: the
        writer that held the key may be one whose own condition then failed."""
        _need(
            supports_conditional_put or supports_conditional_delete,
            "conditional_put or conditional_delete",
        )
        count = scaled(scale, CROSS_KEYS)
        clients = (storage, observer)
        rounds: list[tuple[str, Callable[[Storage, int, str, str], Awaitable[Any]]]] = []
        if supports_conditional_put:
            rounds.append(("put", _swap))
        if supports_conditional_delete:
            rounds.append(("delete", _delete))
        for what, current_call in rounds:
            keys = [f"stale-racers/{what}/{k:02d}" for k in range(count)]
            stale = {key: await storage.put(key, b"stale") for key in keys}
            current = {key: await storage.put(key, b"current") for key in keys}
            racers: list[Awaitable[Any]] = []
            for key in keys:
                for i in range(STALE_RACERS):  # the stale ones first: they take the key first
                    if supports_conditional_put:
                        racers.append(_swap(clients[i % 2], 100 + i, key, stale[key]))
                    if supports_conditional_delete:
                        racers.append(_delete(clients[(i + 1) % 2], 200 + i, key, stale[key]))
                racers.append(current_call(clients[1], 0, key, current[key]))
            outcomes = await asyncio.gather(*racers)
            per_key = len(outcomes) // count
            for k, key in enumerate(keys):
                mine = outcomes[k * per_key : (k + 1) * per_key]
                stale_won = [v for v in mine[:-1] if v not in (None, REFUSED)]
                expect(
                    not stale_won,
                    "a conditional write on a stale version must be refused",
                    key=key,
                    expected="PreconditionFailed from every stale if-match put and delete",
                    observed=f"{len(stale_won)} of them succeeded",
                )
                refusal = "False" if what == "delete" and mine[-1] is None else "PreconditionFailed"
                expect(
                    mine[-1] not in (None, REFUSED),
                    f"an if-match {what} on the current version must succeed while stale "
                    "ones race it",
                    key=key,
                    expected=f"the {what} to succeed: no stale write can change the version",
                    observed=f"it was refused ({refusal}) while {STALE_RACERS} if-match puts "
                    f"and deletes of the older version raced it ({count} keys at once)",
                    detail="wait for a key that another writer holds (a row lock, a lock "
                    "every writer takes); do not take 'busy' for 'changed': the writer "
                    "holding it may fail its own condition and change nothing",
                )
                await _winner_holds(observer, key, 0, mine[-1])

    @checks("put.overwrite", "put.atomic", "cap.shared")
    async def test_overwrites_of_missing_keys_through_two_clients_all_write(
        self, target: Target, scale: float, supports_shared: bool
    ) -> None:
        """Two storages at one location overwrite `CROSS_KEYS` missing keys at once,
        `CROSS_WRITERS` writers a key taking turns between them: every overwrite writes
        (it returns a version, it never fails for the race), and each key ends holding one
        of the values, at the version its put returned. An overwrite made of an update
        and, when nothing was updated, an insert (no upsert) has two writers of a missing
        key both insert: the second fails on the first's row (or, without a unique key,
        both rows stay). One client's pool can serialize its own puts; two clients
        cannot."""
        need_two_clients(target, supports_shared)
        writers, count = CROSS_WRITERS, scaled(scale, CROSS_KEYS)
        location = new_location()
        async with target.open(location=location) as a, target.open(location=location) as b:
            clients = (a, b)
            keys = [f"clients/overwrite/{k:02d}" for k in range(count)]

            async def put(i: int, key: str) -> str | BaseException:
                try:
                    return await clients[i % 2].put(key, f"{key} writer {i}".encode())
                except StorageError as exc:
                    return exc

            outcomes = await asyncio.gather(*(put(i, key) for key in keys for i in range(writers)))
            for k, key in enumerate(keys):
                mine = outcomes[k * writers : (k + 1) * writers]
                failed = [i for i, v in enumerate(mine) if isinstance(v, BaseException)]
                expect(
                    not failed,
                    f"{writers} concurrent overwrites of a missing key through two clients "
                    "must all write",
                    key=key,
                    expected="a version from every put",
                    observed=f"writers {listed(failed)} failed: {mine[failed[0]]!r}"
                    if failed
                    else "",
                    detail="an overwrite is one upsert (INSERT ... ON CONFLICT DO UPDATE, a "
                    "SET, a PUT): an update then an insert when nothing was updated lets two "
                    "writers of a missing key both insert",
                )
                got = await b.get(key)
                values = [f"{key} writer {i}".encode() for i in range(writers)]
                expect(
                    got.data in values and got.version == mine[values.index(got.data)],
                    f"{writers} concurrent overwrites of a missing key must leave one of "
                    "the values, at the version its put returned",
                    key=key,
                    expected="one writer's value and version",
                    observed=f"it holds {describe(got.data, reference=values)} at version "
                    f"{got.version!r}",
                )

    @checks("list.pages", "list.prefix-only", "cap.shared")
    async def test_interleaved_listings_of_two_clients_each_get_their_own_keys(
        self, target: Target, supports_shared: bool
    ) -> None:
        """Two clients of a ``shared`` adapter at one location, each listing a prefix of its
        own in pages of two keys, read a key at a time in turn. A continuation that the
        backend keeps (a server-side cursor) named by a number each client counts alone
        (1, 2, 3...) is one name for both clients' cursors, and one client's next page is
        read from where the other's stopped."""
        need_two_clients(target, supports_shared)
        location = new_location()
        keys = {
            "two-listings/a/": [f"two-listings/a/{i}" for i in range(5)],
            "two-listings/b/": [f"two-listings/b/{i}" for i in range(7)],
        }
        async with target.open(location=location) as a, target.open(location=location) as b:
            if not (set_small_pages(a, 2) and set_small_pages(b, 2)):
                not_exercised(
                    "the adapter is not a StorageBase, whose page size the suite can lower: "
                    "a listing of a handful of keys has one page"
                )
            for key in [k for group in keys.values() for k in group]:
                await a.put(key, b"x")
            wanted = {
                "the first client's list('two-listings/a/')": (
                    a.list("two-listings/a/"),
                    keys["two-listings/a/"],
                ),
                "the second client's list('two-listings/b/')": (
                    b.list("two-listings/b/"),
                    keys["two-listings/b/"],
                ),
            }
            await expect_listed_in_turn(
                wanted,
                "listings of two clients read in turn must each return their own keys",
                "name a continuation the backend keeps so that no other "
                "client's can have its name (a random id, or one the backend counts)",
            )

    @checks("delete-many.count", "list.concurrent-writes", "cap.shared")
    async def test_listing_and_delete_many_while_another_client_writes(
        self, target: Target, supports_shared: bool
    ) -> None:
        """Two clients of a ``shared`` adapter: while the second overwrites each of 8 keys
        `OVERWRITES` times, the first lists them and deletes half of them with one
        ``delete_many``. The listing returns, in order and once each, every key present
        throughout (the half not deleted) and nothing else; ``delete_many`` counts every
        key it was given (each was present until deleted); afterwards each kept key holds
        the second client's last value, and each deleted one is missing or holds one of
        its values (an overwrite that came after the delete)."""
        need_two_clients(target, supports_shared)
        location = new_location()
        keys = [f"clients/busy/{i:02d}" for i in range(8)]
        doomed, kept = keys[::2], keys[1::2]
        values = [b"new %d" % r for r in range(OVERWRITES)]
        async with target.open(location=location) as a, target.open(location=location) as b:
            for key in keys:
                await a.put(key, b"old")

            async def overwrite(key: str) -> None:
                for value in values:
                    await b.put(key, value)

            # tasks start in the order made: the writes are in flight when the others start
            writes = [asyncio.ensure_future(overwrite(key)) for key in keys]
            listing = asyncio.ensure_future(_listed(a, "clients/busy/"))
            deleting = asyncio.ensure_future(delete_many_of(a, doomed))
            await asyncio.gather(deleting, listing, *writes)
            count, listed_keys = deleting.result(), listing.result()
            expect(
                count == len(doomed),
                "delete_many must count every key that was present, also while another "
                "client overwrites them",
                key=doomed[0],
                expected=f"{len(doomed)}",
                observed=f"{count}",
                detail="a key overwritten by another client between a read of its version "
                "and a conditional delete is still present: delete it (a delete_many does "
                "not compare versions)",
            )
            expect(
                listed_keys == sorted(set(listed_keys))
                and set(kept) <= set(listed_keys) <= set(keys),
                "a listing while another client writes must return every key present "
                "throughout, once each, in order, and no other key",
                key=kept[0],
                expected=f"{kept} and any of {doomed}, in order",
                observed=repr(listed_keys),
            )
            for key in keys:
                found = await get_or_none(a, key)
                expect(
                    (found is not None and found.data == values[-1])
                    or (key in doomed and (found is None or found.data in values)),
                    "after the second client's overwrites, a kept key holds its last value "
                    "and a deleted one is missing or holds one of its values",
                    key=key,
                    expected=repr(values[-1]) if key in kept else f"NotFound or one of {values}",
                    observed=describe(None if found is None else found.data),
                )

    @checks("put.conditional.one-winner")
    async def test_cas_counter_ends_exact_under_concurrent_increments(
        self, storage: Storage, scale: float, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        workers, each = 10, scaled(scale, 3, minimum=1)
        await storage.put("counter", b"0")
        attempts = 0

        async def worker() -> None:
            nonlocal attempts
            for _ in range(each):
                for _ in range(workers * 50):
                    attempts += 1
                    got = await storage.get("counter")
                    value = int(got.data)
                    try:
                        await storage.put(
                            "counter", str(value + 1).encode(), mode=IfMatch(got.version)
                        )
                        break
                    except PreconditionFailed:
                        await asyncio.sleep(0)
                else:
                    raise AssertionError("a counter increment never succeeded")

        await together(*(worker() for _ in range(workers)))
        total = workers * each
        got = await storage.get("counter")
        expect(
            got.data == str(total).encode(),
            f"a compare-and-swap counter incremented by {workers} concurrent workers "
            "must end exact",
            key="counter",
            expected=f"{total} ({workers} workers x {each} increments)",
            observed=f"it ended at {got.data.decode(errors='replace')} "
            f"after {attempts} attempts (lost updates)",
        )

    @checks("put.atomic")
    async def test_concurrent_reader_sees_only_whole_values(
        self, storage: Storage, scale: float, storage_target: Target | None
    ) -> None:
        """Two readers while a writer overwrites one key, at 256 KiB, then at 1 MiB + 1 and
        at the largest of the large values (adapters send those another way: in parts, in
        blocks, staged), with fewer writes: every read finds a whole value."""
        sizes = [256 * 1024, *[s for s in large_sizes(max_value_of(storage_target)) if s > MiB]]
        for size in dict.fromkeys([sizes[0], *sizes[1:2], *sizes[-1:]]):
            await self._readers_see_whole_values(
                storage, size, scaled(scale, 12) if size <= 256 * 1024 else scaled(scale, 4)
            )

    async def _readers_see_whole_values(self, storage: Storage, size: int, writes: int) -> None:
        key = f"atomic/{size}"
        values = [bytes([65 + i]) * size for i in range(3)]
        await storage.put(key, values[0])
        done = asyncio.Event()
        reads = 0

        async def writer() -> None:
            try:
                for i in range(writes):
                    await storage.put(key, values[(i + 1) % len(values)])
            finally:
                done.set()

        async def reader() -> None:
            nonlocal reads
            while not done.is_set() or reads == 0:
                try:
                    got = await storage.get(key)
                except NotFound:
                    fail(
                        "a put must be atomic: a concurrent reader sees the old or the new value",
                        key=key,
                        expected="every read to find a whole value",
                        observed=f"read {reads + 1} found the key missing during an overwrite",
                    )
                reads += 1
                if got.data not in values:
                    fail(
                        "a put must be atomic: a concurrent reader sees the old or the new "
                        "value, never a part",
                        key=key,
                        expected=f"one of the {len(values)} whole values of {size} bytes",
                        observed=f"read {reads} got {describe(got.data, reference=values)}",
                    )
                await asyncio.sleep(0)

        await together(writer(), reader(), reader())
        await storage.delete(key)

    @checks("put.atomic", "put.overwrite")
    async def test_concurrent_overwrites_leave_one_whole_value(
        self, storage: Storage, scale: float
    ) -> None:
        n = scaled(scale, 10)
        values = [f"{i:03d}".encode() * 1000 for i in range(n)]
        versions = await asyncio.gather(*(storage.put("last", v) for v in values))
        got = await storage.get("last")
        expect(
            got.data in values,
            f"{n} concurrent overwrites must leave one whole value",
            key="last",
            expected="one of the written values",
            observed=f"it holds {describe(got.data, reference=values)}",
        )
        i = values.index(got.data)
        expect(
            got.version == versions[i],
            "the stored version must be the one returned to the writer of the stored value",
            key="last",
            expected=f"version {versions[i]!r}",
            observed=f"get reports {got.version!r}",
        )

    @checks("put.atomic", "put.overwrite")
    async def test_concurrent_overwrites_of_large_values_all_write_and_leave_one_whole(
        self, storage: Storage, storage_target: Target | None, scale: float
    ) -> None:
        """Overwrites of one key racing each other at 1 MiB + 1, 4 MiB + 1 and 16 MiB + 1
        bytes (those the target holds), past the size where adapters send a value in
        parts (staged blocks, a multipart upload, rows of parts): every put returns a
        version, and the key holds one of the values whole, at its version. An adapter
        whose commit of staged parts fails when another writer's commit discarded them
        (Azure's ``InvalidBlockList``) must stage again, not raise."""
        writers = scaled(scale, 4, minimum=2)
        sizes = _raced_sizes(storage_target)
        for size in sizes:
            key = f"race-large/{size}"
            values = [bytes([65 + i]) * size for i in range(writers)]
            answers = await asyncio.gather(
                *(storage.put(key, v) for v in values), return_exceptions=True
            )
            failed = [a for a in answers if isinstance(a, BaseException)]
            if failed:
                fail(
                    "an overwrite racing other overwrites of the key must write",
                    key=key,
                    expected=f"each of {writers} concurrent puts of {size_label(size)} to "
                    "return its version",
                    observed=f"{len(failed)} raised, the first {type(failed[0]).__name__}: "
                    f"{failed[0]}",
                    detail="an overwrite has no condition: where the backend refuses a "
                    "commit because another writer's replaced its staged parts, stage them "
                    "again (new part ids for each attempt) and commit again",
                )
            got = await storage.get(key)
            expect(
                got.data in values and got.version == answers[values.index(got.data)],
                f"{writers} concurrent overwrites must leave one whole value at its version",
                key=key,
                expected=f"one of the {writers} values of {size_label(size)}, at the version "
                "its put returned",
                observed=f"it holds {describe(got.data, reference=values)} at version "
                f"{got.version!r}",
            )
            await storage.delete(key)

    @checks("delete.missing", "put.atomic")
    async def test_deletes_racing_a_large_put_of_a_missing_key_fit_one_order(
        self, storage: Storage, storage_target: Target | None
    ) -> None:
        """A put of the largest of `_RACED_SIZES` the target holds (a value sent in parts)
        to a missing key, and deletes of the key one after another for as long as it runs
        (up to 50, and none after one that answers True), three times: a delete that
        answers True found the put's value, so the put came before it, and the key must
        end deleted; if every delete answered False, the put came after them, and the key
        must end holding its value. A delete that takes the parts a put has staged for a
        new key (Azure's Delete Blob of a blob with uncommitted blocks only) answers True
        for a key no reader finds."""
        sizes = _raced_sizes(storage_target)
        size = sizes[-1] if sizes else GAP_SMALL_VALUE
        data = b"P" * size
        for round_ in range(3):
            key = f"race-delete/{round_}"
            put = asyncio.ensure_future(storage.put(key, data))
            found: list[bool] = []
            try:
                while not put.done() and True not in found and len(found) < _RACING_DELETES:
                    found.append(await storage.delete(key))
                    await asyncio.sleep(0)
                version = await put
            finally:
                if not put.done():
                    put.cancel()
                    await asyncio.gather(put, return_exceptions=True)
            final = await get_or_none(storage, key)
            if any(found):
                expect(
                    final is None,
                    "a delete that finds a value comes after the put that wrote it",
                    key=key,
                    expected=f"the key deleted: delete {found.index(True) + 1} of "
                    f"{len(found)}, made while a put of {size_label(size)} to the missing key "
                    "ran, answered True",
                    observed=f"it holds {describe(final.data if final else b'')} at version "
                    f"{final.version if final else None!r}, the put's (it answered "
                    f"{version!r})",
                    detail="a delete must not count what a put has staged but not "
                    "committed (uncommitted blocks, an unfinished multipart upload, parts "
                    "without their manifest): make the delete conditional on a committed "
                    "value (an If-Match: * condition), or check the committed value first",
                )
            else:
                expect(
                    final is not None and final.data == data and final.version == version,
                    "a put of a missing key that every racing delete missed stores its value",
                    key=key,
                    expected=f"{size_label(size)} at the version the put answered "
                    f"({version!r}), each of the {len(found)} deletes having answered False",
                    observed="it is missing"
                    if final is None
                    else f"{describe(final.data, reference=[data])} at version {final.version!r}",
                )
            await storage.delete(key)

    @checks("list.concurrent-writes", "list.order", "list.prefix-only", "list.pages")
    async def test_paged_listing_under_concurrent_writes_returns_each_lasting_key_once(
        self, storage: Storage, scale: float
    ) -> None:
        # Pages of 3 keys; after each key the listing yields, another task inserts a key
        # before the listing's cursor and one after it, deletes a key it inserted earlier,
        # and writes next to the prefix (lc0, lc/ is the prefix). The keys that were
        # stored before the listing began and are never touched must each come once.
        small = set_small_pages(storage, 3)
        n = scaled(scale, 24, minimum=9)
        lasting = [f"lc/k{i:03d}" for i in range(n)]
        for key in lasting:
            await storage.put(key, b"lasting")
        rng = random.Random(17)
        inserted: list[str] = []
        ever: set[str] = set()
        yielded: asyncio.Queue[str | None] = asyncio.Queue()
        answered: asyncio.Queue[None] = asyncio.Queue()

        async def writer() -> None:
            rounds = 0
            while (cursor := await yielded.get()) is not None:
                rounds += 1
                i = lasting.index(cursor) if cursor in lasting else n // 2
                # one key that sorts before the cursor, one after it
                before = f"lc/k{rng.randrange(i):03d}.{rounds}" if i else f"lc/a{rounds}"
                after = f"lc/k{rng.randrange(i, n):03d}.{rounds}"
                writes: list[Coroutine[Any, Any, object]] = [
                    storage.put(before, b"new"),
                    storage.put(after, b"new"),
                ]
                if inserted:
                    writes.append(storage.delete(inserted.pop(rng.randrange(len(inserted)))))
                writes.append(storage.put(f"lc0/{rounds}", b"outside"))
                await asyncio.gather(*writes)
                inserted.extend((before, after))
                ever.update((before, after))
                answered.put_nowait(None)

        task = asyncio.ensure_future(writer())
        listed: list[str] = []
        try:
            async for key in storage.list("lc/"):
                listed.append(key)
                if len(listed) > 4 * n:
                    break
                yielded.put_nowait(key)
                await answered.get()
        finally:
            yielded.put_nowait(None)
            await task
        pages = " in pages of 3" if small else ""
        what = f"a listing of 'lc/'{pages} while another task inserted and deleted keys there"
        for before, after in itertools.pairwise(listed):
            expect(
                before < after,
                "a paged listing under concurrent writes yields each key once, in ascending order",
                key=after,
                expected="strictly ascending keys",
                observed=f"{after!r} came {'twice' if before == after else 'out of order'} "
                f"after {before!r} ({what})",
            )
        outside = [k for k in listed if not k.startswith("lc/")]
        expect(
            not outside,
            "a paged listing under concurrent writes never yields a key outside its prefix",
            expected="keys under 'lc/' only",
            observed=f"it yielded {outside[:5]} ({what})",
        )
        missing = [k for k in lasting if k not in listed]
        expect(
            not missing,
            "a paged listing under concurrent writes yields every key present for the whole "
            "listing",
            expected=f"all {n} keys stored before the listing and never touched",
            observed=f"{len(missing)} were skipped: {missing[:5]} ({what})",
        )
        unknown = [k for k in listed if k not in lasting and k not in ever]
        expect(
            not unknown,
            "a paged listing yields only keys that were stored",
            expected="the lasting keys and some of the keys inserted meanwhile",
            observed=f"it yielded {unknown[:5]}, never written ({what})",
        )

    @checks("list.concurrent-writes", "list.order", "list.pages")
    async def test_listing_while_present_keys_are_overwritten_yields_each_of_them(
        self, storage: Storage, scale: float, supports_conditional_put: bool
    ) -> None:
        """While other tasks overwrite each of `KEPT` keys again and again (half of them by
        overwrites, half by if-match puts with the version the last one answered, where
        the adapter declares ``conditional_put``) and delete and create again `FLICKERING`
        keys between them, listings of their prefix (in pages of 3 keys, where the page
        size can be set) run one after another: each yields every overwritten key (present
        throughout), once each, in order, and no key but those. An adapter whose listing
        index is apart from the items, and whose overwrite replaces a key's index row in
        two requests (a delete, then an insert), misses a key between the two."""
        small = set_small_pages(storage, 3)
        kept = [f"ow/k{i:02d}" for i in range(KEPT)]
        flickering = [f"ow/k{i:02d}.x" for i in range(0, KEPT, KEPT // FLICKERING)]
        for key in kept + flickering:
            await storage.put(key, b"first")
        rounds = scaled(scale, 12, minimum=3)

        async def overwrite(key: str, conditional: bool) -> None:
            version: str | None = None
            for r in range(rounds):
                mode: PutMode = IfMatch(version) if conditional and version else "overwrite"
                version = await storage.put(key, b"round %d" % r, mode=mode)

        async def recreate(key: str) -> None:
            for r in range(rounds):
                await storage.delete(key)
                mode: PutMode = "create" if supports_conditional_put else "overwrite"
                await storage.put(key, b"again %d" % r, mode=mode)

        # tasks start in the order made: the writes are in flight when the first listing starts
        writers = [
            asyncio.ensure_future(overwrite(key, supports_conditional_put and i % 2 == 1))
            for i, key in enumerate(kept)
        ]
        writers += [asyncio.ensure_future(recreate(key)) for key in flickering]
        listings: list[list[str]] = []
        try:
            while not listings or not all(w.done() for w in writers):
                listings.append(await _listed(storage, "ow/"))
                await asyncio.sleep(0)  # the writers go on, also where nothing waits
        finally:
            await asyncio.gather(*writers)
        how = "overwrites and if-match puts" if supports_conditional_put else "overwrites"
        what = (
            f"listing {{n}} of {len(listings)} of 'ow/'{' in pages of 3' if small else ''}, "
            f"while other tasks wrote each of {kept[0]!r} .. {kept[-1]!r} {rounds} times by "
            f"{how} and deleted and created again {flickering}"
        )
        for n, listed_keys in enumerate(listings, 1):
            missing = [k for k in kept if k not in listed_keys]
            if missing:
                fail(
                    "a listing must yield every key present for the whole listing, also "
                    "while it is overwritten",
                    key=missing[0],
                    expected=f"all {len(kept)} overwritten keys",
                    observed=f"{len(missing)} were not yielded: {missing[:4]} ({what.format(n=n)})",
                    detail="To fix it, keep a key listed throughout an overwrite: update its "
                    "listing index row in place, or write the item and its index row in one "
                    "request or transaction; an index row deleted and inserted again in two "
                    "requests is missing in between",
                )
            expect(
                listed_keys == sorted(set(listed_keys))
                and set(listed_keys) <= set(kept + flickering),
                "a listing while keys are overwritten yields each key once, in order, and "
                "only keys that were written",
                key=listed_keys[0] if listed_keys else kept[0],
                expected=f"{kept} and any of {flickering}, in order, once each",
                observed=f"{listed_keys} ({what.format(n=n)})",
            )


async def _create(storage: Storage, i: int, key: str, base: str) -> str | None:
    return await put_or_refused(storage, key, f"writer {i}".encode(), "create")


async def _swap(storage: Storage, i: int, key: str, base: str) -> str | None:
    return await put_or_refused(storage, key, f"writer {i}".encode(), IfMatch(base))


async def _swap_large(storage: Storage, i: int, key: str, base: str) -> str | None:
    return await put_or_refused(storage, key, _large(i), IfMatch(base))


def _data(found: Any) -> bytes | None:
    return None if found is None else bytes(found.data)


def _large(i: int) -> bytes:
    """Writer ``i``'s value of `LARGE_RACE_VALUE` bytes."""
    return f"writer {i} ".encode().ljust(LARGE_RACE_VALUE, b".")


REFUSED = "refused"
"""What `_delete` gives for a conditional delete that raised PreconditionFailed: no winner."""


def _expect_no_delete_refused(key: str, outcomes: Sequence[Any], race: str) -> None:
    """In a race of conditional deletes of one version only, each delete finds the key at
    that version (and wins) or missing (False), never at another: a loser that raised
    PreconditionFailed (`REFUSED`) read the key as it was before the winner's delete (one
    statement whose snapshot predates the row lock it waited for)."""
    refused = [i for i, v in enumerate(outcomes) if v == REFUSED]
    expect(
        not refused,
        f"{race}: a delete that finds the key deleted by another must return False",
        key=key,
        expected="False from every delete but the winner (delete.if-match.missing)",
        observed=f"calls {listed(refused)} raised PreconditionFailed, which says the key is "
        "at another version",
    )


async def _delete(storage: Storage, i: int, key: str, base: str) -> str | None:
    try:
        return "deleted" if await storage.delete(key, if_match=base) else None
    except PreconditionFailed:
        return REFUSED


async def _winner_holds(
    storage: Storage, key: str, w: int, outcome: str | None, *, large: bool = False
) -> None:
    """The key is gone if the winner was a conditional delete (``"deleted"``), else it holds
    writer ``w``'s value (`_large` with ``large``) at the version its put answered."""
    if outcome == "deleted":
        found = await get_or_none(storage, key)
        expect(
            found is None,
            "the key must be gone when a conditional delete won",
            key=key,
            expected="NotFound",
            observed=f"it holds {describe(None if found is None else found.data)}",
        )
        return
    await expect_value(
        storage,
        key,
        _large(w) if large else f"writer {w}".encode(),
        version=outcome,
        promise="the winning put's value must be stored",
    )

"""Group ``capabilities``: every declared capability is verified; an undeclared one
is skipped with the reason.

``durable`` and ``shared`` need a second storage at the same location, so the
factory must accept the ``location`` keyword; ``ttl`` needs a factory that
accepts ``ttl`` (see `checkpointkit.conformance.target`).

``indexed_list`` is the one claim about cost, so its check is the suite's one
timing comparison: medians of interleaved calls, each round right after a
write to each prefix, after a warm-up, against a generous bound
(`INDEXED_LIST_FACTOR` times the reference plus
`INDEXED_LIST_SLACK`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar

import pytest

from ..errors import PreconditionFailed
from ..storage import Capabilities, IfMatch, PutMode, Storage
from ..storage import delete_many as delete_many_of
from .cancellation import CANCEL_POINTS
from .cancelling import cancel, point_text
from .checks import (
    expect,
    expect_keys,
    expect_missing,
    expect_raises,
    expect_value,
    fail,
    get_or_none,
)
from .clauses import checks
from .coverage import large_sizes
from .fixtures import (
    StorageFixtures,
    not_exercised,
    raw_storage,
    scaled,
    set_small_pages,
    unmeasured,
)
from .sweeps import REOPEN_LARGE, _bogus_version, max_value_of, put_or_refused
from .target import Target, new_location
from .together import together

__all__ = ["CapabilityTests"]

TTL_SECONDS = 1.0
"""The expiry asked of a ``ttl`` storage; the key must be gone within 5 s after it."""

LONG_TTLS = (2.95, 5.95)
"""The expiries of `test_declared_ttl_of_several_seconds_keeps_each_key_that_long_after_its_write`,
asked of two storages at once: at least the shortest lease of backends that raise a short
one to a minimum (etcd: 2 s with its default timings), which hides an expiry cut to whole
seconds or shared between writes. Each just under a whole number of seconds: the first cut
to whole seconds (2 s) ends before 0.9 of it even where the backend expires leases half a
second late (etcd checks them every 500 ms); the second is long enough that a lease shared
by the writes of half of it ends early for the last of them even where each lease is given
a second more as a margin (`ceil(ttl) + 1`)."""

LONG_TTL_KEPT = 0.9
"""How much of each of `LONG_TTLS` a key must last there (a margin of 0.3 s and 0.6 s for
the read)."""

LONG_TTL_SECOND_WRITE = 0.45
"""When, in fractions of the ttl after the first key's write, the second key is written:
within half a ttl, where an adapter that shares one lease among its writes gives the
second key the first one's expiry."""

FRACTIONAL_TTLS = (0.5, 1.5)
"""Expiries in fractions of a second, asked at once of two storages: a ttl sent as whole
seconds (``EX int(ttl)``) expires the first at once and the second after 1 s; one rounded
(``round``) the first at once."""

_EXPIRY_PROBES = (
    "get",
    "list",
    "create-only put",
    "conditional delete",
    "get after a create-only put",
    "get after an if-match put",
)
"""The operations that each watch one key of `test_declared_ttl_expires_keys` expire (the
last two watch a key whose last write was that put, not an overwrite)."""
_AFTER_EXPIRY = (
    "delete",
    "delete_many",
    "overwrite",
    "if-match put of its last version",
    "if-match put of a stale version",
    "if-match put of a bogus version",
    "conditional delete of its last version",
    "conditional delete of a bogus version",
    "listing past expired keys",
)
"""The operations that `test_declared_ttl_expires_keys` runs once on a key of their own, once
a listing of its scope shows it gone (each changes the key while it is there): with the
watchers, every row of the ``state`` matrix on an expired key; and listings of a key written
after the key and four more of its scope expired."""
_REFUSED_PUTS = (
    "create-only put",
    "if-match put of a stale version",
    "if-match put of a version never minted",
)
"""The puts that `test_declared_ttl_is_not_renewed_by_refused_writes` tries on a present key."""
_EXPIRED_SIBLINGS = 4
"""How many keys besides its own the scope of ``listing past expired keys`` has."""
_UNREAD_EXPIRED = 4
"""How many expired keys the ``delete_many`` calls of
`test_declared_ttl_delete_many_counts_no_expired_key_before_any_read` are given (half each)."""
_UNREAD_LIVE = 2
"""How many live keys the second of those calls is given, among the expired ones."""

INDEXED_LIST_FACTOR = 4.0
"""How many times slower than its reference an indexed listing may be."""

INDEXED_LIST_SLACK = 50e-6
"""Seconds added to the bound, so that scheduling noise on calls of a few µs never fails it."""

INDEXED_LIST_KEYS = 2000
"""Keys under the indexed-list test's prefix of many, whatever the backend's speed (times
the target's ``scale``)."""

INDEXED_LIST_MOST_KEYS = 20_000
"""Keys that prefix grows to where the backend writes them fast enough: a listing that
tests every key against its prefix (no index bounds it) costs a scan of the keys before
the prefix, which 2,000 keys leave within the bound and 20,000 do not (0.2 ms against
2 ms, a get 0.1 ms, on a real SQL server)."""

INDEXED_LIST_FILL_SECONDS = 4.0
"""How long the indexed-list test goes on adding keys past `INDEXED_LIST_KEYS`: a slow
backend keeps (about) the 2,000, a fast one reaches `INDEXED_LIST_MOST_KEYS`."""

INDEXED_LIST_PAGE = 8
"""The page size the indexed-list test sets on a `StorageBase` adapter (`set_small_pages`):
a listing that pages on past its prefix then reads one page per 8 keys after it."""


CHILD_TIMEOUT = 120.0
"""Seconds the child process of the durability test may take to start, write and exit."""

_CHILD = """
import asyncio, json, os, sys
from checkpointkit.conformance.target import resolve_target
from checkpointkit.storage import IfMatch

async def main(spec, locations, repeats):
    target, kept, answers = resolve_target(spec), [], {}
    for path, location in locations.items():  # each path's write the last on its storage
        kept.append(target.open(location=location))  # kept: never left
        s = await kept[-1].__aenter__()
        if path == "put of a new key":
            answers[path] = await s.put("crash/put", b"put before the process died")
        elif path == "put of 1 MiB and more":
            answers[path] = await s.put("crash/large", bytes(range(256)) * repeats)
        elif path == "overwrite of an existing key":
            await s.put("crash/overwrite", b"first")
            answers[path] = await s.put("crash/overwrite", b"overwritten")
        elif path == "create-only put" and s.capabilities.conditional_put:
            answers[path] = await s.put("crash/create", b"created", mode="create")
        elif path == "if-match put" and s.capabilities.conditional_put:
            first = await s.put("crash/cas", b"first")
            answers[path] = await s.put("crash/cas", b"second", mode=IfMatch(first))
        elif path == "delete":
            await s.put("crash/deleted", b"deleted before the process died")
            answers[path] = await s.delete("crash/deleted")
        elif path == "if-match delete" and s.capabilities.conditional_delete:
            first = await s.put("crash/cas-deleted", b"deleted at its version")
            answers[path] = await s.delete("crash/cas-deleted", if_match=first)
        elif path == "delete_many":
            await s.put("crash/many/a", b"a")
            await s.put("crash/many/b", b"b")
            answers[path] = await s.delete_many(["crash/many/a", "crash/many/b"])
    print(json.dumps(answers))  # the last line, whatever an adapter printed before
    sys.stdout.flush()
    os._exit(0)  # no aclose(), no clean-up, no buffer flushed: as a SIGKILL here

asyncio.run(
    main(os.environ["CHECKPOINTKIT_CONFORMANCE_SPEC"], json.loads(sys.argv[1]), int(sys.argv[2]))
)
"""
"""The child process of `test_declared_durable_data_survives_the_death_of_its_process`: each
write path (`_DURABLE_PATHS`) on a storage of its own location, as the last write there (an
adapter that saves a path's write lazily, at its next write or at ``aclose()``, saves it
before any later write on the same storage)."""
_DURABLE_PATHS = (
    "put of a new key",
    "put of 1 MiB and more",
    "overwrite of an existing key",
    "create-only put",
    "if-match put",
    "delete",
    "if-match delete",
    "delete_many",
)
"""The write paths the child of the durability test runs, one location each."""
_DURABLE_WRITTEN = {
    "put of a new key": ("crash/put", b"put before the process died"),
    "overwrite of an existing key": ("crash/overwrite", b"overwritten"),
    "create-only put": ("crash/create", b"created"),
    "if-match put": ("crash/cas", b"second"),
}
"""The key and value each put path of `_DURABLE_PATHS` leaves (the large put's are computed)."""
_DURABLE_DELETED = {
    "delete": ("crash/deleted",),
    "if-match delete": ("crash/cas-deleted",),
    "delete_many": ("crash/many/a", "crash/many/b"),
}
"""The keys each delete path of `_DURABLE_PATHS` deletes."""


def _undeclared(flag: bool, capability: str) -> None:
    if not flag:
        pytest.skip(f"the adapter does not declare {capability}")


async def _skip_unless_ttl(target: Target, supports_ttl: bool) -> None:
    """Skip unless the adapter declares ``ttl``: the storage the suite opened says so, or,
    where the factory takes ``ttl`` and the target does not set the capabilities, a
    storage opened with a ttl does (an adapter may declare it on such storages only, as
    `RedisStorage` does: their expiry is then checked, not skipped)."""
    if supports_ttl:
        return
    if target.expires and target.capabilities is None:
        async with target.open(ttl=TTL_SECONDS) as storage:
            declared = getattr(raw_storage(storage), "capabilities", None)
        if isinstance(declared, Capabilities) and declared.ttl:
            return
    _undeclared(False, "ttl")


def _reopenable(target: Target, capability: str) -> None:
    if not target.reopens:
        pytest.skip(
            f"{capability} is declared, but the factory takes no 'location' keyword, "
            "so the suite cannot open a second storage on the same data"
        )


class CapabilityTests(StorageFixtures):
    """Checks each capability that the adapter claims."""

    conformance_group: ClassVar[str | None] = "capabilities"

    @checks("cap.declared")
    async def test_capabilities_are_declared(self, storage: Storage) -> None:
        raw = raw_storage(storage)
        declared = getattr(type(raw), "capabilities", None)
        expect(
            isinstance(declared, Capabilities),
            "an adapter must declare its capabilities",
            expected=f"{type(raw).__name__}.capabilities to be a Capabilities instance",
            observed=f"it is {declared!r}",
        )

    @checks("put.create.existing", "put.if-match.stale", "put.refused-changes-nothing")
    async def test_declared_conditional_put_is_enforced(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        _undeclared(supports_conditional_put, "conditional_put")
        v1 = await storage.put("cap/put", b"one", mode="create")
        await expect_raises(
            PreconditionFailed,
            storage.put("cap/put", b"two", mode="create"),
            promise="conditional_put: create-only must refuse an existing key",
            call="put('cap/put', b'two', mode='create')",
            key="cap/put",
        )
        v2 = await storage.put("cap/put", b"two", mode=IfMatch(v1))
        await expect_raises(
            PreconditionFailed,
            storage.put("cap/put", b"three", mode=IfMatch(v1)),
            promise="conditional_put: if-match must refuse a stale version",
            call=f"put('cap/put', b'three', mode=IfMatch({v1!r}))",
            key="cap/put",
        )
        await expect_value(
            storage,
            "cap/put",
            b"two",
            version=v2,
            promise="conditional_put: refused puts must change nothing",
        )

    @checks("delete.if-match.stale", "put.refused-changes-nothing")
    async def test_declared_conditional_delete_is_enforced(
        self, storage: Storage, supports_conditional_delete: bool
    ) -> None:
        _undeclared(supports_conditional_delete, "conditional_delete")
        v1 = await storage.put("cap/del", b"one")
        await storage.put("cap/del", b"two")
        await expect_raises(
            PreconditionFailed,
            storage.delete("cap/del", if_match=v1),
            promise="conditional_delete: a stale version must be refused",
            call=f"delete('cap/del', if_match={v1!r})",
            key="cap/del",
        )
        await expect_value(
            storage,
            "cap/del",
            b"two",
            promise="conditional_delete: a refused delete must keep the value",
        )

    @checks("cap.durable")
    async def test_declared_durable_data_survives_reopening(
        self, target: Target, supports_durable: bool
    ) -> None:
        _undeclared(supports_durable, "durable")
        _reopenable(target, "durable")
        location = new_location()
        async with target.open(location=location) as first:
            version = await first.put("cap/durable", b"kept")
            await first.put("cap/other", b"also kept")
            await first.aclose()
            async with target.open(location=location) as second:
                await expect_value(
                    second,
                    "cap/durable",
                    b"kept",
                    version=version,
                    promise="durable: data must be readable from a storage reopened "
                    "on the same location",
                )
                await expect_keys(
                    second,
                    ["cap/durable", "cap/other"],
                    prefix="cap/",
                    promise="durable: a reopened storage must list the stored keys",
                )

    @checks("cap.durable")
    async def test_declared_durable_data_survives_the_death_of_its_process(
        self, target: Target, supports_durable: bool
    ) -> None:
        """A child process rebuilds the target from its SPEC string, runs every write path
        (`_DURABLE_PATHS`: a put of a new key, of 1 MiB and a little more, an overwrite of an
        existing key, a create-only and an if-match put, a delete, an if-match delete, a
        ``delete_many``), each the last write on a location of its own, and exits at once,
        without ``aclose()``; each write that returned is then read back here, a put at the
        version it answered, a deleted key missing."""
        _undeclared(supports_durable, "durable")
        _reopenable(target, "durable")
        if target.spec is None:
            not_exercised(
                "the target was not given as a SPEC string (a storage URL or "
                "module:factory; Target(spec=...)), so no process could rebuild it, write "
                "and die; a directory or database file per location is the file or sqlite "
                "URL of their folder with {location}: file:///srv/ckc/{location}"
            )
        locations = {path: new_location() for path in _DURABLE_PATHS}
        # a value of 1 MiB and 256 bytes (at most max_value): stored another way by many
        repeats = min((1 << 20) // 256 + 1, target.max_value // 256)
        path = os.pathsep.join(p for p in sys.path if p)  # what this process imports
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CHILD, json.dumps(locations), str(repeats),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            # the SPEC in the environment, not the command line: a URL may hold a password
            env={**os.environ, "PYTHONPATH": path, "CHECKPOINTKIT_CONFORMANCE_SPEC": target.spec},
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(child.communicate(), CHILD_TIMEOUT)
        except TimeoutError:
            child.kill()
            await child.wait()
            raise
        if child.returncode != 0 or not out:
            fail(
                "durable: the child process that writes and dies must run",
                key="crash/",
                expected=f"exit status 0 and the versions it wrote, through {target.name}",
                observed=f"exit status {child.returncode}: "
                + (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1],
            )
        answers = json.loads(out.decode().strip().splitlines()[-1])
        written = {
            **_DURABLE_WRITTEN,
            "put of 1 MiB and more": ("crash/large", bytes(range(256)) * repeats),
        }
        for what in _DURABLE_PATHS:
            if what not in answers:  # a conditional path the adapter does not declare
                continue
            promise = (
                f"durable: a write that returned must survive the death of the process that "
                f"made it (killed before aclose()): its last write was {what}"
            )
            async with target.open(location=locations[what]) as after:
                if what in written:
                    key, value = written[what]
                    await expect_value(after, key, value, version=answers[what], promise=promise)
                for key in _DURABLE_DELETED.get(what, ()):
                    await expect_missing(after, key, promise=promise)

    @checks("cap.shared", "put.conditional.one-winner")
    async def test_declared_shared_data_is_visible_to_a_second_client(
        self, target: Target, supports_shared: bool, supports_conditional_put: bool
    ) -> None:
        _undeclared(supports_shared, "shared")
        _reopenable(target, "shared")
        location = new_location()
        async with target.open(location=location) as a, target.open(location=location) as b:
            version = await a.put("cap/shared", b"from a")
            await expect_value(
                b,
                "cap/shared",
                b"from a",
                version=version,
                promise="shared: a second client must see the first client's write",
            )
            await b.delete("cap/shared")
            await expect_missing(
                a,
                "cap/shared",
                promise="shared: the first client must see the second client's delete",
            )
            # versions minted by two clients never repeat (a counter kept per client does)
            by_a = [await a.put("cap/versions", b"from a %d" % i) for i in range(3)]
            for i in range(3):
                version = await b.put("cap/versions", b"from b %d" % i)
                expect(
                    version not in by_a,
                    "shared: a version minted by one client must differ from every version "
                    "the key had through another",
                    key="cap/versions",
                    expected=f"a version other than {by_a!r} (the first client's)",
                    observed=f"the second client's write {i + 1} returned {version!r}",
                )
            if supports_conditional_put:

                async def create(s: Storage, who: bytes) -> bool:
                    try:
                        await s.put("cap/race", who, mode="create")
                        return True
                    except PreconditionFailed:
                        return False

                wins = await asyncio.gather(
                    create(a, b"a"), create(b, b"b"), create(a, b"a2"), create(b, b"b2")
                )
                expect(
                    sum(wins) == 1,
                    "shared: a create-only race between two clients must have one winner",
                    key="cap/race",
                    expected="1 winner",
                    observed=f"{sum(wins)} winners",
                )

    @checks("ttl.expires")
    async def test_declared_ttl_expires_keys(self, target: Target, supports_ttl: bool) -> None:
        """Six keys, each in a scope of its own (a backend may expire a run's keys
        together), each watched by one operation that changes nothing while the key is
        there, until that operation finds it gone: get (``NotFound``), a listing of its
        prefix (no key), a create-only put (it writes), a conditional delete of a stale
        version (``False``, where it was ``PreconditionFailed``), and a get of a key last
        written by a create-only put and of one last written by an if-match put (a write
        that sets no expiry, a ``SET`` without ``PX``, leaves a key that never expires).
        Nine more keys, watched
        by a listing of their scope; once it shows one gone, its operation must find it
        gone too (a backend that removes expired items late, DynamoDB's TTL, still holds
        it): a delete (``False``), a ``delete_many`` (counts 0), an overwrite (writes), an
        if-match put with its last version, a stale one or one never minted
        (``PreconditionFailed``), a conditional delete with its last version or one never
        minted (``False``); and a key written once it and the four others of its scope
        expired must be listed, by a listing of one key too (an adapter that filters
        expired items out of a page read by the limit, and takes a short page for the
        last, lists nothing)."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        async with target.open(ttl=TTL_SECONDS) as storage:
            caps = storage.capabilities
            versions: dict[str, str] = {}  # each key's first version, stale at once
            for probe in _EXPIRY_PROBES:
                key = f"cap/ttl-{probe}/k"
                if probe == "get after a create-only put":
                    if caps.conditional_put:
                        await storage.put(key, b"short-lived", mode="create")
                    continue
                versions[probe] = await storage.put(key, b"first")
                if probe == "get after an if-match put" and caps.conditional_put:
                    await storage.put(key, b"short-lived", mode=IfMatch(versions[probe]))
                else:
                    await storage.put(key, b"short-lived")
            last: dict[str, str] = {}
            for probe in _AFTER_EXPIRY:  # a stale version and the last one
                versions[probe] = await storage.put(f"cap/ttl-{probe}/k", b"first")
                last[probe] = await storage.put(f"cap/ttl-{probe}/k", b"short-lived")
            for n in range(_EXPIRED_SIBLINGS):  # listed before the key written after expiry
                await storage.put(f"cap/ttl-listing past expired keys/k{n}", b"short-lived")
            written = time.monotonic()
            await expect_value(
                storage,
                "cap/ttl-get/k",
                b"short-lived",
                promise="ttl: a fresh key must be readable",
            )

            async def gone(probe: str) -> bool:
                """Whether ``probe``'s operation finds its key gone (it changes nothing
                while the key is there)."""
                key = f"cap/ttl-{probe}/k"
                if probe in _AFTER_EXPIRY:
                    if [k async for k in storage.list(f"cap/ttl-{probe}/")]:
                        return False
                    await _finds_expired(storage, probe, key, versions[probe], last[probe])
                    return True
                if probe.startswith("get"):
                    return await get_or_none(storage, key) is None
                if probe == "list":
                    return not [k async for k in storage.list(f"cap/ttl-{probe}/")]
                if probe == "create-only put":
                    try:
                        await storage.put(key, b"written again", mode="create")
                    except PreconditionFailed:
                        return False
                    await expect_value(
                        storage,
                        key,
                        b"written again",
                        promise="ttl: a create-only put of an expired key must write it",
                    )
                    return True
                try:  # a conditional delete of a stale version: refused while it is there
                    existed = await storage.delete(key, if_match=versions[probe])
                except PreconditionFailed:
                    return False
                expect(
                    existed is False,
                    "ttl: a conditional delete of an expired key must find nothing",
                    key=key,
                    expected="False (a delete with if_match of a missing key)",
                    observed=f"{existed!r}, for a version the key no longer had",
                )
                return True

            waiting = [
                p
                for p in (*_EXPIRY_PROBES, *_AFTER_EXPIRY)
                if (
                    not p.startswith(("create-only put", "if-match put", "get after"))
                    or caps.conditional_put
                )
                and (not p.startswith("conditional delete") or caps.conditional_delete)
            ]
            # until the ttl has passed the keys must stay (test_declared_ttl_keeps_...): the
            # watching starts then, so that every call of it is on a key past its expiry
            await asyncio.sleep(max(0.0, written + TTL_SECONDS - time.monotonic()))
            deadline = written + TTL_SECONDS + 5
            while waiting and time.monotonic() < deadline:
                waiting = [p for p in waiting if not await gone(p)]
                if waiting:
                    await asyncio.sleep(0.1)
            if waiting:
                fail(
                    "ttl: a key must expire, and then no operation may find it",
                    key=f"cap/ttl-{waiting[0]}/k",
                    expected=f"each key gone within {TTL_SECONDS + 5:g} s (ttl "
                    f"{TTL_SECONDS:g} s) for the operation that watched it",
                    observed="still there for: " + ", ".join(waiting),
                )

    @checks("ttl.expires")
    async def test_declared_ttl_expired_keys_are_gone_to_writes_before_any_read(
        self, target: Target, supports_ttl: bool
    ) -> None:
        """Keys past their expiry that nothing has read since: a create-only put of one
        writes it (tried every 100 ms, within 5 s after the ttl), and then, the others having
        expired with it, an if-match put with the last version of one is refused, a delete
        of one finds nothing (``False``), and a conditional delete with the last version of
        one finds nothing. An adapter that removes expired keys only when a get or a
        listing comes by (a cache that expires lazily) refuses the create (a run that
        cannot start again until something reads) and lets an if-match put bring an
        expired key back; the watching in `test_declared_ttl_expires_keys` lists each key
        before its write, which removes it there."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        async with target.open(ttl=TTL_SECONDS) as storage:
            caps = storage.capabilities
            if not caps.conditional_put:
                pytest.skip("the adapter declares no conditional_put: no create-only put")
            keys = {
                probe: f"cap/ttl-unread-{probe}/k"
                for probe in ("create", "if-match", "delete", "conditional delete")
            }
            last = {probe: await storage.put(key, b"short-lived") for probe, key in keys.items()}
            written = time.monotonic()
            await asyncio.sleep(max(0.0, written + TTL_SECONDS - time.monotonic()))
            deadline = written + TTL_SECONDS + 5
            while True:
                try:
                    await storage.put(keys["create"], b"created again", mode="create")
                    break
                except PreconditionFailed:
                    if time.monotonic() > deadline:
                        fail(
                            "ttl: a create-only put of an expired key writes it, read or not",
                            key=keys["create"],
                            expected=f"the put to write within {TTL_SECONDS + 5:g} s (ttl "
                            f"{TTL_SECONDS:g} s), nothing having read the key",
                            observed="PreconditionFailed each time",
                            detail="an expired key is gone to every operation: test the "
                            "expiry in the write's condition (or let the backend expire it), "
                            "not only when a read comes by",
                        )
                    await asyncio.sleep(0.1)
            try:
                await storage.put(keys["if-match"], b"back", mode=IfMatch(last["if-match"]))
            except PreconditionFailed:
                pass
            else:
                fail(
                    "ttl: an if-match put of an expired key is refused",
                    key=keys["if-match"],
                    expected="PreconditionFailed (the key expired with the one created again)",
                    observed="the put wrote the expired key back",
                )
            existed = await storage.delete(keys["delete"])
            expect(
                existed is False,
                "ttl: a delete of an expired key finds nothing",
                key=keys["delete"],
                expected="False",
                observed=repr(existed),
            )
            if caps.conditional_delete:
                key = keys["conditional delete"]
                answer: bool | None
                try:
                    answer = await storage.delete(key, if_match=last["conditional delete"])
                except PreconditionFailed:
                    answer = None
                expect(
                    answer is False,
                    "ttl: a conditional delete of an expired key finds nothing",
                    key=key,
                    expected="False",
                    observed="PreconditionFailed" if answer is None else repr(answer),
                )

    @checks("delete-many.count", "ttl.expires")
    async def test_declared_ttl_delete_many_counts_no_expired_key_before_any_read(
        self, target: Target, supports_ttl: bool
    ) -> None:
        """Keys past their expiry that nothing has touched since: the first call on their
        storage after the expiry, a ``delete_many`` of two of them, counts 0; the next, of
        the two others and of two keys written 3/4 of the ttl after them (still live),
        counts the live ones. The expiry is watched on a clock key written, after them,
        through a second storage, so that no call on the first one reads or lists first. An
        adapter whose data expires on its own but whose index (or lazy expiry) holds the
        key until a listing sweeps it counts the index rows;
        `test_declared_ttl_expires_keys` lists each key before its ``delete_many``."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        expired = [f"cap/ttl-counted-{n}/k" for n in range(_UNREAD_EXPIRED)]
        live = [f"cap/ttl-counted-live-{n}/k" for n in range(_UNREAD_LIVE)]
        clock_key = "cap/ttl-clock/k"
        async with (
            target.open(ttl=TTL_SECONDS) as storage,
            target.open(ttl=TTL_SECONDS) as clock,
        ):
            for key in expired:
                await storage.put(key, b"short-lived")
            await clock.put(clock_key, b"short-lived")
            written = time.monotonic()
            await asyncio.sleep(max(0.0, written + 0.75 * TTL_SECONDS - time.monotonic()))
            for key in live:
                await storage.put(key, b"live")
            live_written = time.monotonic()
            await asyncio.sleep(max(0.0, written + TTL_SECONDS - time.monotonic()))
            await _until_gone(
                clock,
                clock_key,
                written,
                "ttl: a key must expire",
                f"of its write (ttl {TTL_SECONDS:g} s), the clock of the keys written before it",
            )
            detail = (
                "an expired key is missing to every operation before anything reads or "
                "lists it: count what the backend deleted of live data (DEL's answer, a "
                "condition on the expiry), not the index rows or cache entries removed"
            )
            first = expired[: _UNREAD_EXPIRED // 2]
            count = await delete_many_of(storage, first)
            expect(
                count == 0,
                "ttl: a delete_many of expired keys counts none of them, read or not",
                key=first[0],
                expected=f"0 for {first} (expired, the first call on the storage since)",
                observed=f"it counted {count}",
                detail=detail,
            )
            rest = expired[_UNREAD_EXPIRED // 2 :]
            mixed = [k for pair in zip(rest, live, strict=True) for k in pair]
            began = time.monotonic()
            count = await delete_many_of(storage, mixed)
            if began < live_written + 0.75 * TTL_SECONDS:  # else the live ones may be gone
                expect(
                    count == len(live),
                    "ttl: a delete_many of expired and live keys counts the live ones",
                    key=mixed[0],
                    expected=f"{len(live)} for {mixed} (the {live} written "
                    f"{0.75 * TTL_SECONDS:g} s after the others are live)",
                    observed=f"it counted {count}",
                    detail=detail,
                )

    @checks("cancel.whole-or-absent", "ttl.expires")
    async def test_declared_ttl_cancelled_put_leaves_no_key_without_its_expiry(
        self, target: Target, supports_ttl: bool, cancel_bound: float, settle_window: float
    ) -> None:
        """A put of each mode (as `test_cancelled_put_is_whole_or_absent`) on a ``ttl``
        storage, cancelled at each of the sweep's points (`CANCEL_POINTS`), each on a key of
        its own: ttl after the last of them (and the settle window, in which one may still
        land, unless the adapter declares ``settles_cancelled_writes``) each key is gone,
        read every 50 ms until 5 s after. A put that stores the value and then sets its
        expiry by a second request (``SET``, then ``PEXPIRE``) leaves a key without expiry
        when cancelled between the two: whole or absent includes the expiry."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        async with target.open(ttl=TTL_SECONDS) as storage:
            modes = ["overwrite", "create", "if-match"]
            if not storage.capabilities.conditional_put:
                modes = ["overwrite"]
            cancelled: list[tuple[str, str]] = []
            for how in modes:
                for i, point in enumerate(CANCEL_POINTS):
                    key = f"cap/ttl-cancelled-{how}/{i:02d}"
                    mode: PutMode = "create" if how == "create" else "overwrite"
                    if how == "if-match":
                        mode = IfMatch(await storage.put(key, b"first"))
                    put = functools.partial(storage.put, key, b"short-lived", mode=mode)
                    await cancel(put, point, key, bound=cancel_bound)
                    cancelled.append((key, f"a put ({how}) {point_text(point)}"))
            # the latest a cancelled put may land: at once if the adapter settles them
            landing = 0.0 if storage.capabilities.settles_cancelled_writes else settle_window
            written = time.monotonic() + landing
            await asyncio.sleep(max(0.0, written + TTL_SECONDS - time.monotonic()))
            for key, what in cancelled:
                await _until_gone(
                    storage,
                    key,
                    written,
                    "ttl: a cancelled put must be whole or absent, its expiry included",
                    f"of {what} (ttl {TTL_SECONDS:g} s, after a settle window of {landing:g} s)",
                    detail="a put that stores the value, then sets its expiry by a second "
                    "request (SET, then PEXPIRE) leaves, cancelled between the two, a key "
                    "that never expires: send both in one request (SET ... PX) or one "
                    "transaction (MULTI/EXEC, a script)",
                )

    @checks("ttl.across-reopen")
    async def test_declared_ttl_holds_across_a_reopen(
        self, target: Target, supports_ttl: bool, supports_durable: bool
    ) -> None:
        """A key written through a ``ttl`` storage that is then closed, read through a
        storage opened again at the same location (with the same ``ttl``) until it is gone:
        an expiry kept in the storage object (a timer, a table of deadlines in memory) is
        lost with it, and the key would then never expire."""
        await _skip_unless_ttl(target, supports_ttl)
        _undeclared(supports_durable, "durable")
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        _reopenable(target, "ttl with durable")
        location, key = new_location(), "cap/ttl-reopened/k"
        async with target.open(location=location, ttl=TTL_SECONDS) as first:
            await first.put(key, b"short-lived")
        written = time.monotonic()
        async with target.open(location=location, ttl=TTL_SECONDS) as second:
            await _until_gone(
                second,
                key,
                written,
                "ttl: a key must keep its expiry when the storage is opened again",
                f"of its write (ttl {TTL_SECONDS:g} s), read through a storage opened after "
                "the one that wrote it was closed",
            )

    @checks("version.never-repeats", "ttl.expires")
    async def test_declared_ttl_versions_after_an_expiry_never_repeat_earlier_ones(
        self, target: Target, supports_ttl: bool
    ) -> None:
        """A key written three times through a ``ttl`` storage, read until it has expired,
        then written three times again (created first, with ``conditional_put``): no
        version minted after the expiry is one the key had before it, and none from before
        matches an if-match put or a conditional delete after it. A version counted per key
        and kept with the key's expiry (a revision kept in the item, or in a record that
        expires with it) starts again once the key expires, though a delete keeps it, and a
        writer holding a version from before the expiry then overwrites the new key."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        key, writes = "cap/ttl-versions/k", 3
        async with target.open(ttl=TTL_SECONDS) as storage:
            caps = storage.capabilities
            before = [await storage.put(key, b"before %d" % i) for i in range(writes)]
            await _until_gone(
                storage, key, time.monotonic(), "ttl: a key must expire", "of its last write"
            )
            for i in range(writes):
                data = b"after %d" % i
                if i == 0 and caps.conditional_put:
                    version = await storage.put(key, data, mode="create")
                else:
                    version = await storage.put(key, data)
                if version in before:
                    fail(
                        "a version minted after a key expired must differ from every version "
                        "the key had before it",
                        key=key,
                        expected=f"a version other than {before!r}",
                        observed=f"write {i + 1} after the expiry returned {version!r}, the "
                        f"version of write {before.index(version) + 1} before it",
                    )
                for old in before:
                    if caps.conditional_put:
                        await expect_raises(
                            PreconditionFailed,
                            storage.put(key, b"stale", mode=IfMatch(old)),
                            promise="a version from before a key expired must not match after "
                            "it is written again",
                            call=f"put({key!r}, b'stale', mode=IfMatch({old!r}))",
                            key=key,
                        )
                    if caps.conditional_delete:
                        await expect_raises(
                            PreconditionFailed,
                            storage.delete(key, if_match=old),
                            promise="a version from before a key expired must not match after "
                            "it is written again",
                            call=f"delete({key!r}, if_match={old!r})",
                            key=key,
                        )
                await expect_value(
                    storage,
                    key,
                    data,
                    version=version,
                    promise="a refused if-match put or conditional delete must change nothing",
                )

    @checks("ttl.expires", "put.refused-changes-nothing")
    async def test_declared_ttl_is_not_renewed_by_refused_writes(
        self, target: Target, supports_ttl: bool
    ) -> None:
        """Keys, each in a scope of its own, written twice through a ``ttl`` storage, then
        tried every 50 ms, until a listing of their scope shows them gone, by a write that a
        present key refuses: a create-only put, an if-match put of a stale version and of one
        never minted, a conditional delete of a stale version. A refused write is no write:
        each key must be gone within ttl + 5 s of its last write (an expiry set by a command
        of its own after the write's, ``SETNX`` and then ``PEXPIRE``, is renewed by every
        refused try, and a key that such writes keep trying never expires)."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        async with target.open(ttl=TTL_SECONDS) as storage:
            caps = storage.capabilities
            probes = [*(_REFUSED_PUTS if caps.conditional_put else ())]
            if caps.conditional_delete:
                probes.append("conditional delete of a stale version")
            if not probes:
                pytest.skip("no write can be refused: neither conditional_put nor delete")
            stale: dict[str, str] = {}
            last: dict[str, str] = {}
            for probe in probes:
                stale[probe] = await storage.put(f"cap/ttl-refused {probe}/k", b"first")
                last[probe] = await storage.put(f"cap/ttl-refused {probe}/k", b"short-lived")
            deadline = time.monotonic() + TTL_SECONDS + 5
            waiting = probes
            while waiting:
                if time.monotonic() >= deadline:
                    fail(
                        "ttl: a refused write must not renew a key's expiry",
                        key=f"cap/ttl-refused {waiting[0]}/k",
                        expected=f"each key gone within {TTL_SECONDS + 5:g} s of its last write "
                        f"(ttl {TTL_SECONDS:g} s), tried every 50 ms by a write it refuses",
                        observed="still there, tried by: " + ", ".join(waiting),
                    )
                present = []
                for probe in waiting:
                    key = f"cap/ttl-refused {probe}/k"
                    if not [k async for k in storage.list(f"cap/ttl-refused {probe}/")]:
                        continue
                    present.append(probe)
                    # refused while the key is there; one that expired just before it may
                    # write (a create-only put) or find nothing (a conditional delete)
                    with contextlib.suppress(PreconditionFailed):
                        if probe == "create-only put":
                            await storage.put(key, b"again", mode="create")
                        elif probe.startswith("if-match put"):
                            version = stale[probe]
                            if "never minted" in probe:
                                version = _bogus_version(last[probe], (stale[probe], last[probe]))
                            await storage.put(key, b"again", mode=IfMatch(version))
                        else:
                            await storage.delete(key, if_match=stale[probe])
                waiting = present
                if waiting:
                    await asyncio.sleep(0.05)

    @checks("ttl.not-early")
    async def test_declared_ttl_keeps_a_key_until_ttl_after_its_last_write(
        self, target: Target, supports_ttl: bool
    ) -> None:
        """A key read every 50 ms: it is there for every read that starts before 3/4 of the
        ttl after its last write. It is written at 0 (create-only, with
        ``conditional_put``), then at 3/5 of the ttl by an if-match put of the version it
        has, then at 6/5 by an overwrite: each write's reads go on past the expiry of the
        write before (a write that keeps the key's expiry, Redis's ``KEEPTTL`` in a
        compare-and-set script, lets it expire early). Then, once it has expired, it is
        created again and read for 3/4 of the ttl (a create-only put over an expired item
        that a backend has yet to remove must give it a new expiry). A second key, written
        alongside it each time with the same large value (about 1 MiB), must read back whole
        as long (an adapter that keeps a large value in parts, written only where no part
        holds their bytes yet, leaves them the expiry of their first write)."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        key, large_key = "cap/ttl-kept/k", "cap/ttl-kept/large"
        sizes = [s for s in large_sizes(max_value_of(target)) if s <= REOPEN_LARGE]
        large = random.Random(11).randbytes(max(sizes, default=0))
        keys: dict[str, bytes | None] = {key: None}
        if large:  # a target whose values are all smaller has no large value to renew
            keys[large_key] = large
        async with target.open(ttl=TTL_SECONDS) as storage:
            conditional = storage.capabilities.conditional_put
            writes = (
                (("create-only put", 0.6), ("if-match put", 0.6), ("overwrite", 0.75))
                if conditional
                else (("put", 0.6), ("overwrite", 0.75))
            )
            versions, past, written = {k: "" for k in keys}, 0.0, 0.0
            for write, (how, read_for) in enumerate(writes, 1):
                began = time.monotonic()
                for k, data in keys.items():
                    versions[k] = await _write_as(storage, k, how, versions[k], write, data)
                written = time.monotonic()
                await _read_until(storage, keys, began, read_for, how, write, past)
                # the next write's reads go on until one starts past this write's expiry,
                # counted from when it returned (the latest moment a backend counts it from)
                past = written + TTL_SECONDS
            if not conditional:
                return
            # the first read of each key starts past its expiry by any clock, its write's end
            # included: a backend may have removed it then, or may answer it expired
            await asyncio.sleep(max(0.0, past - time.monotonic()))
            for k in keys:
                await _until_gone(
                    storage, k, time.monotonic(), "ttl: a key must expire", "of its last write"
                )
            began = time.monotonic()
            await storage.put(key, b"created again", mode="create")
            if large:
                await storage.put(large_key, large, mode="create")
            await _read_until(storage, keys, began, 0.75, "create-only put after it expired", 4)

    @checks("ttl.not-early")
    async def test_declared_ttl_starts_again_for_a_key_deleted_and_written_again(
        self, target: Target, supports_ttl: bool
    ) -> None:
        """Keys written through a ``ttl`` storage, deleted at half the ttl and written again
        at once (by a create-only put, with ``conditional_put``, and by an overwrite), each
        read every 50 ms until 3/4 of the ttl after its new write, past the expiry of its
        first: a deadline that the delete leaves behind (a table of expiries apart from the
        items, whose row a delete forgets) and that the new write keeps (a create-only put
        that sets an expiry only where none is, ``INSERT OR IGNORE``) expires the new key at
        the time of the old one."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        async with target.open(ttl=TTL_SECONDS) as storage:
            hows = ["overwrite"]
            if storage.capabilities.conditional_put:
                hows.insert(0, "create-only put")
            keys = {how: f"cap/ttl-written again/{how}" for how in hows}
            first = time.monotonic()
            for key in keys.values():
                await storage.put(key, b"first")
            await asyncio.sleep(max(0.0, first + TTL_SECONDS / 2 - time.monotonic()))
            began = time.monotonic()
            for how, key in keys.items():
                await storage.delete(key)
                await _write_as(storage, key, how, "", 2, b"written again")
            await _read_until(
                storage,
                dict.fromkeys(keys.values(), b"written again"),
                began,
                0.75,
                "a delete, then a write of the key again",
                2,
                first + TTL_SECONDS,
                detail="a delete must remove the key's expiry with it, or the next write must "
                "set a new one whatever is there",
            )

    @checks("ttl.not-early", "cap.shared")
    async def test_declared_ttl_starts_again_for_a_key_another_client_writes(
        self, target: Target, supports_ttl: bool, supports_shared: bool
    ) -> None:
        """Two ``ttl`` storages at one location: a key written through the first, overwritten
        through the second at half the ttl, then read through both every 50 ms until 3/4 of
        the ttl after that write, past the expiry of the first write. An expiry kept by the
        client that wrote (a timer of its own, ``loop.call_later``, or a table of deadlines
        in the storage object), which another client's write does not move, removes the key
        at the time of the first write."""
        await _skip_unless_ttl(target, supports_ttl)
        _undeclared(supports_shared, "shared")
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        _reopenable(target, "shared with ttl")
        location, key = new_location(), "cap/ttl-another client/k"
        async with (
            target.open(location=location, ttl=TTL_SECONDS) as first,
            target.open(location=location, ttl=TTL_SECONDS) as second,
        ):
            written = time.monotonic()
            await first.put(key, b"from the first client")
            await asyncio.sleep(max(0.0, written + TTL_SECONDS / 2 - time.monotonic()))
            began = time.monotonic()
            await second.put(key, b"from the second client")
            await asyncio.gather(
                *(
                    _read_until(
                        client,
                        {key: b"from the second client"},
                        began,
                        0.75,
                        f"an overwrite through a second client, read through the {which}",
                        2,
                        written + TTL_SECONDS,
                        detail="keep each key's expiry with the data, where every client's "
                        "write moves it, not in the client that wrote",
                    )
                    for which, client in (("first", first), ("second", second))
                )
            )

    @checks("ttl.expires", "ttl.not-early")
    async def test_declared_ttl_is_the_writing_storages_beside_one_without(
        self, target: Target, supports_ttl: bool, supports_shared: bool
    ) -> None:
        """Two storages at one location, the first opened without a ttl, the second with
        one: a key written through the second expires (read through both), and a key
        written through the first at the same moment is still there then, and a ttl
        later. An adapter that keeps one ttl per location (the first client's settings,
        a table's default expiry set when the table was made) expires both keys or
        neither."""
        await _skip_unless_ttl(target, supports_ttl)
        _undeclared(supports_shared, "shared")
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        _reopenable(target, "shared with ttl")
        location = new_location()
        # each in a scope of its own: a backend may expire a run's keys together
        kept, expiring = "cap/ttl-writer-kept/k", "cap/ttl-writer-expiring/k"
        async with (
            target.open(location=location) as without,
            target.open(location=location, ttl=TTL_SECONDS) as with_ttl,
        ):
            written = time.monotonic()
            await without.put(kept, b"no ttl")
            await with_ttl.put(expiring, b"ttl")
            for client in (with_ttl, without):
                await _until_gone(
                    client,
                    expiring,
                    written,
                    "ttl: a key written through a storage opened with a ttl expires, beside "
                    "a storage at the same location opened without one",
                    "of its write",
                )
            await asyncio.sleep(TTL_SECONDS)  # a ttl past the other key's expiry
            for client in (with_ttl, without):
                await expect_value(
                    client,
                    kept,
                    b"no ttl",
                    promise="a key written through a storage opened without a ttl never "
                    "expires, beside one at the same location opened with a ttl",
                )

    @checks("ttl.not-early")
    async def test_declared_ttl_of_several_seconds_keeps_each_key_that_long_after_its_write(
        self, target: Target, supports_ttl: bool
    ) -> None:
        """Two storages, opened with the ttls of `LONG_TTLS` (2.95 s and 5.95 s) at once:
        through each, a key written, a second one written 0.45 of the ttl later, each read
        every 50 ms until 0.9 of the ttl after its own write. The other ttl tests ask 0.5
        to 1.5 s, which a backend with a shortest lease (etcd) raises to it: that hid an
        expiry sent as whole seconds (2.95 s cut to 2 s) and one lease shared by the writes
        of half a ttl (the second key expiring with the first), the sixth blind round's
        etcd adapters b16 and b12."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        detail = (
            "give each write the whole ttl from its own time, in milliseconds or as a float "
            "(not whole seconds), with an expiry of its own (a lease granted for an earlier "
            "write ends early for this one)"
        )

        async def write_and_read(storage: Storage, ttl: float, key: str, after: float) -> None:
            await asyncio.sleep(after)
            began = time.monotonic()
            await storage.put(key, key.encode())
            await _read_until(
                storage,
                {key: key.encode()},
                began,
                LONG_TTL_KEPT,
                f"a put through a storage opened with ttl={ttl:g}, {after:.2f} s after the "
                "first key's",
                1,
                ttl=ttl,
                detail=detail,
                kept=LONG_TTL_KEPT,
            )

        async with contextlib.AsyncExitStack() as stack:
            calls = []
            for ttl in LONG_TTLS:
                storage = await stack.enter_async_context(target.open(ttl=ttl))
                base = f"cap/ttl-long/{ttl:g}"
                calls.append(write_and_read(storage, ttl, f"{base}/first", 0.0))
                calls.append(
                    write_and_read(storage, ttl, f"{base}/second", LONG_TTL_SECOND_WRITE * ttl)
                )
            await together(*calls)

    @checks("ttl.not-early")
    async def test_declared_ttl_of_a_fraction_of_a_second_keeps_a_key_that_long(
        self, target: Target, supports_ttl: bool
    ) -> None:
        """A storage opened with each ttl of `FRACTIONAL_TTLS` (0.5 s and 1.5 s), both at
        once, a key written through each and read every 50 ms: it is there for every read
        that starts before 3/4 of its ttl after its write (a ttl sent as whole seconds,
        ``SET ... EX int(ttl)``, expires the first at once and the second after 1 s)."""
        await _skip_unless_ttl(target, supports_ttl)
        if not target.expires:
            pytest.skip("ttl is declared, but the factory takes no 'ttl' keyword")
        key, data = "cap/ttl-fraction/k", b"short-lived"
        detail = (
            "send the expiry in milliseconds (Redis PX or PEXPIRE, an interval in SQL) or as "
            "a float, not as whole seconds, which cut it short"
        )
        async with contextlib.AsyncExitStack() as stack:
            storages = [
                (ttl, await stack.enter_async_context(target.open(ttl=ttl)))
                for ttl in FRACTIONAL_TTLS
            ]
            began = time.monotonic()
            for _, storage in storages:
                await storage.put(key, data)
            # each runs to its end (no read left running), then the first failure is raised
            ended = await asyncio.gather(
                *(
                    _read_until(
                        storage,
                        {key: data},
                        began,
                        0.75,
                        f"a put through a storage opened with ttl={ttl:g}",
                        1,
                        ttl=ttl,
                        detail=detail,
                    )
                    for ttl, storage in storages
                ),
                return_exceptions=True,
            )
            for outcome in ended:
                if isinstance(outcome, BaseException):
                    raise outcome

    @checks("cap.indexed-list")
    async def test_declared_indexed_list_is_flat_in_the_number_of_keys(
        self, storage: Storage, supports_indexed_list: bool, scale: float
    ) -> None:
        """The first key of a listing (of a prefix of many keys, of few, after a
        ``start_after`` in the middle of the many) costs about a get, and a whole listing
        of a prefix of few keys followed, in key order, by many other keys about what one
        of a prefix of as many keys followed by none, with pages of `INDEXED_LIST_PAGE` keys
        on a `StorageBase` (a listing that reads pages of the range from the prefix on,
        filters them, and goes on from the last row read scans to the end of the keys).

        The prefix of many holds `INDEXED_LIST_KEYS` keys, and more, up to
        `INDEXED_LIST_MOST_KEYS`, for as long as `INDEXED_LIST_FILL_SECONDS` last: a
        listing that tests each key against its prefix is within the bound with 2,000
        keys and not with 20,000, which a backend that writes thousands of keys a second
        reaches."""
        _undeclared(supports_indexed_list, "indexed_list")
        # A prefix of many keys sorting before a prefix of few: a listing that
        # scans the storage, the prefix or up to ``start_after`` is slow on one of them.
        # Another prefix of few before the many: one that scans past its prefix is slow there.
        ahead, many, few = "cap/idx/a-few/", "cap/idx/a-many/", "cap/idx/b-few/"
        n_many, n_few = scaled(scale, INDEXED_LIST_KEYS, minimum=200), 20
        keys = [f"{ahead}{i:06d}" for i in range(n_few)]
        keys += [f"{many}{i:06d}" for i in range(n_many)] + [f"{few}{i:06d}" for i in range(n_few)]
        gate = asyncio.Semaphore(32)

        async def put(key: str) -> None:
            async with gate:
                await storage.put(key, b"x")

        began = time.monotonic()
        await asyncio.gather(*(put(key) for key in keys))
        n_many = await _grow_by_budget(
            n_many,
            scaled(scale, INDEXED_LIST_MOST_KEYS, minimum=n_many),
            len(keys) / max(time.monotonic() - began, 1e-6),
            lambda lo, hi: asyncio.gather(*(put(f"{many}{i:06d}") for i in range(lo, hi))),
        )
        middle = f"{many}{n_many // 2:06d}"
        paged = set_small_pages(storage, INDEXED_LIST_PAGE)

        timed = unmeasured(storage)  # the suite's own timing and coverage wrappers left out

        async def first(prefix: str, start_after: str | None = None) -> None:
            async for _ in timed.list(prefix, start_after=start_after, limit=1):
                break

        async def whole(prefix: str) -> None:
            async for _ in timed.list(prefix):
                pass

        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "get": lambda: timed.get(f"{few}{0:06d}"),
            f"list({few!r}, limit=1)": lambda: first(few),
            f"list({many!r}, limit=1)": lambda: first(many),
            f"list({many!r}, start_after={middle!r}, limit=1)": lambda: first(many, middle),
            f"list({few!r})": lambda: whole(few),
            f"list({ahead!r})": lambda: whole(ahead),
        }
        rounds = scaled(scale, 100, minimum=20) | 1
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for i in range(rounds + 5):  # the first 5 rounds warm up (caches, connections)
            # A write to each prefix first, as a listing follows a save in use: a
            # cached listing (a directory read once and kept until it changes) is stale.
            await asyncio.gather(
                storage.put(f"{many}{i % n_many:06d}", b"y"),
                storage.put(f"{few}{0:06d}", b"y"),
                storage.put(f"{ahead}{0:06d}", b"y"),
            )
            for name, call in calls.items():
                start = time.perf_counter()
                await call()
                if i >= 5:
                    samples[name].append(time.perf_counter() - start)
        median = {name: statistics.median(values) for name, values in samples.items()}

        def us(seconds: float) -> str:
            return f"{seconds * 1e6:,.0f} µs"

        names = list(calls)
        stored = (
            "a listing must cost about a get however many keys are stored "
            f"(prefix {many!r} holds {n_many} keys)"
        )
        scans = (
            "the adapter should not declare indexed_list if its listing reads a directory "
            "or scans keys"
        )
        checks = [(names[1], names[0], f"a get of one of {2 * n_few + n_many} keys", stored, scans)]
        checks += [
            (name, names[1], f"a listing of a prefix of {n_few} keys", stored, scans)
            for name in names[2:4]
        ]
        pages = f", in pages of {INDEXED_LIST_PAGE} keys" if paged else ""
        checks.append(
            (
                names[5],
                names[4],
                f"the listing of {few!r} ({n_few} keys too, no key after them{pages})",
                "a listing of a prefix must end at its last key, however many keys sort "
                f"after it ({ahead!r} holds {n_few} keys, {n_many + n_few} sort after them)",
                "a listing that reads pages of the key range from the prefix on and filters "
                "them must end at the first key past the prefix (no cursor), not page on "
                "to the end of the keys",
            )
        )
        for name, reference, what, promise, fix in checks:
            bound = INDEXED_LIST_FACTOR * median[reference] + INDEXED_LIST_SLACK
            expect(
                median[name] <= bound,
                f"indexed_list: {promise}",
                expected=f"{name} within {INDEXED_LIST_FACTOR:g}x {what} "
                f"({us(median[reference])}) + {us(INDEXED_LIST_SLACK)}, so at most {us(bound)} "
                f"(medians of {rounds} interleaved calls)",
                observed=f"it took {us(median[name])}, "
                f"{median[name] / median[reference]:.1f}x; {fix}",
            )


async def _grow_by_budget(
    have: int, most: int, rate: float, add: Callable[[int, int], Awaitable[object]]
) -> int:
    """Add keys ``have`` to ``most`` (``add(lo, hi)`` writes keys ``lo`` to ``hi - 1``) in
    doubling batches while `INDEXED_LIST_FILL_SECONDS` last, each batch no larger than the
    time left buys at ``rate`` keys a second (the rate so far); how many keys there are."""
    deadline = time.monotonic() + INDEXED_LIST_FILL_SECONDS
    while have < most:
        began = time.monotonic()
        batch = min(most - have, have, int((deadline - began) * rate))
        if batch < 1:
            break
        await add(have, have + batch)
        have += batch
        rate = batch / max(time.monotonic() - began, 1e-6)
    return have


async def _write_as(
    storage: Storage, key: str, how: str, version: str, write: int, data: bytes | None = None
) -> str:
    """Write ``data`` (by default, one naming the ``write``) to ``key`` as ``how`` says (an
    if-match put with ``version``); its new version."""
    data = f"write {write}".encode() if data is None else data
    if how == "create-only put":
        return await storage.put(key, data, mode="create")
    if how == "if-match put":
        return await storage.put(key, data, mode=IfMatch(version))
    return await storage.put(key, data)


async def _until_gone(
    storage: Storage, key: str, written: float, promise: str, since: str, *, detail: str = ""
) -> None:
    """Read ``key`` every 50 ms until it is gone; fail if it is still there ``TTL_SECONDS +
    5`` s after ``written`` (``since`` says what that moment was; ``detail``, how to fix
    it)."""
    __tracebackhide__ = True
    deadline = written + TTL_SECONDS + 5
    while await get_or_none(storage, key) is not None:
        if time.monotonic() >= deadline:
            fail(
                promise,
                key=key,
                expected=f"it gone within {TTL_SECONDS + 5:g} s {since}",
                observed="still there",
                detail=detail,
            )
        await asyncio.sleep(0.05)


async def _read_until(
    storage: Storage,
    keys: Mapping[str, bytes | None],
    began: float,
    fraction: float,
    how: str,
    write: int,
    past: float = 0.0,
    *,
    ttl: float = TTL_SECONDS,
    detail: str = "",
    kept: float = 0.75,
) -> None:
    """Read ``keys`` every 50 ms until ``fraction`` of the ``ttl`` after ``began`` (when their
    writes started), and until a read has started at ``past`` or later: every read that
    starts before ``kept`` of the ttl (3/4) must find each key, holding its value where one
    is given (``detail``: how to fix a key gone early)."""
    kept_until = began + kept * ttl
    stop = began + fraction * ttl
    read_past = False  # a round of reads started at ``past`` or later
    while (started := time.monotonic()) < stop or not read_past:
        for key, data in keys.items():
            read = time.monotonic()
            found = await get_or_none(storage, key)
            if read >= kept_until:
                continue
            if found is None:
                observed = f"gone for a get that started {read - began:.2f} s after it"
            elif data is not None and found.data != data:
                observed = f"{len(found.data):,} bytes, not the {len(data):,} it wrote"
            else:
                continue
            fail(
                "ttl: a key must stay until ttl after its last write",
                key=key,
                expected=f"it readable, whole, for {ttl:g} s after write {write} ({how})",
                observed=observed,
                detail=detail,
            )
        read_past = read_past or started >= past
        await asyncio.sleep(0.05)


async def _finds_expired(storage: Storage, probe: str, key: str, stale: str, last: str) -> None:
    """``probe`` (one of `_AFTER_EXPIRY`) of ``key``, which a listing showed expired, finds
    nothing: a delete ``False``, a ``delete_many`` 0, an if-match put ``PreconditionFailed``
    (with the key's last version, a stale one or one never minted), a conditional delete
    ``False``; an overwrite writes a new value; a key written after it, and after the other
    keys of its scope expired, is listed."""
    observed: str | None
    bogus = _bogus_version(last, (stale, last))  # neither of the versions the key had
    if probe.startswith("if-match put"):
        version = {"last": last, "stale": stale}.get(probe.split()[-2], bogus)
        answered = await put_or_refused(storage, key, b"after expiry", IfMatch(version))
        observed = None if answered is None else f"it wrote, version {answered!r}"
        expected = "PreconditionFailed (an if-match put of a missing key)"
    elif probe.startswith("conditional delete"):
        version = last if probe.endswith("last version") else bogus
        try:
            found = await storage.delete(key, if_match=version)
        except PreconditionFailed:
            found = None
        observed = None if found is False else f"{'PreconditionFailed' if found is None else found}"
        expected = "False (a conditional delete of a missing key)"
    elif probe == "delete":
        found = await storage.delete(key)
        observed = None if found is False else f"{found!r}"
        expected = "False (a delete of a missing key)"
    elif probe == "listing past expired keys":
        scope, live = key.rpartition("/")[0] + "/", key.rpartition("/")[0] + "/z"
        await storage.put(live, b"after expiry")
        listed = {
            "a listing": [k async for k in storage.list(scope)],
            "limit=1": [k async for k in storage.list(scope, limit=1)],
            f"start_after={key!r}, limit=1": [
                k async for k in storage.list(scope, start_after=key, limit=1)
            ],
        }
        wrong = [f"{how}: {keys}" for how, keys in listed.items() if keys != [live]]
        observed = "; ".join(wrong) or None
        expected = (
            f"[{live!r}] from each listing of {scope!r} (a key written after the "
            f"{_EXPIRED_SIBLINGS + 1} before it expired)"
        )
    elif probe == "overwrite":
        await storage.put(key, b"after expiry")
        got = await get_or_none(storage, key)
        observed = None if got is not None and got.data == b"after expiry" else "not it"
        expected = "the new value (an overwrite of a missing key writes it)"
    else:
        count = await delete_many_of(storage, [key])
        observed = None if count == 0 else f"it counted {count}"
        expected = "0 (a delete_many of a missing key)"
    if observed is not None:
        fail(
            "ttl: a listing must go on past the expired keys of its range"
            if probe == "listing past expired keys"
            else f"ttl: an expired key must be missing for every operation ({probe}), once "
            "a listing no longer shows it",
            key=key,
            expected=expected,
            observed=observed,
            detail="a backend that removes expired items late (DynamoDB's TTL can take "
            "days) still holds them: every operation, and every count, must leave out an "
            "item whose expiry has passed",
        )

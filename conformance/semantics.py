"""Group ``semantics``: what each operation does, one promise per test."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import ClassVar

import pytest

from ..errors import NotFound, PreconditionFailed, StorageClosed
from ..storage import IfMatch, PutMode, Storage, delete_many
from .checks import (
    collect,
    describe,
    expect,
    expect_keys,
    expect_missing,
    expect_raises,
    expect_value,
    fail,
)
from .clauses import checks
from .fixtures import raw_storage, scaled, set_small_pages
from .pitfalls import PitfallTests
from .sweeps import SemanticSweepTests, put_or_refused

__all__ = ["LONG_SEGMENT_KEYS", "ODD_KEYS", "OWN_NAME_KEYS", "UNICODE_KEYS", "SemanticsTests"]

UNICODE_KEYS = [
    "caf\u00e9",  # NFC é
    "cafe\u0301",  # NFD é: another key, must stay distinct
    "\u65e5\u672c\u8a9e/\u30ad\u30fc",
    "\u0440\u0443\u0441/\u043a\u043b\u044e\u0447",
    "emoji/\U0001f642\U0001f680",
    "mixed/\u00df\u1e9e/\u03a3\u03c3\u03c2",
]
"""Valid keys beyond ASCII: NFC and NFD forms, CJK, Cyrillic, emoji, case-folding traps."""

ODD_KEYS = [
    "with space",
    "trailing space ",
    "trailing space",  # another key: a PAD SPACE collation (SQL Server's =) makes them one
    "trailing space  ",
    "trailing dot.",
    "trailing dot",  # another key: Windows names, and URLs normalized, drop a trailing dot
    "trailing dot/x.",
    "trailing dot/x",
    "per%cent",
    "%2F-looks-encoded",
    "%20",
    "plus+sign",
    "a+b",
    "a b",
    "co:lon",
    "equals=sign",
    "tilde~x",
    "semi;colon",
    "q?mark",
    "hash#tag",
    "amp&ersand",
    "at@sign",
    "star*",
    "brackets[1]",
    "quote'and\"",
    "dollar$",
    "comma,",
    "Case",
    "case",
    ".hidden",
    "...",
    "dir.d/file",
    "emoji-\U0001f642",
    "deep/a/b/c/d/e/f/g",
]
"""Odd but valid keys: URL-special characters, case twins, twins but for trailing spaces,
dots, deep paths."""

LONG_SEGMENT_KEYS = [
    "x" * 200,
    "X" * 200,
    "\u00e9" * 100,  # 200 bytes of 2-byte characters
    "deep/" + "y" * 200 + "/leaf",
]
"""Keys with a 200-byte segment (the key rules limit only the whole key, to 1024 bytes)."""

_OWN_NAMES = [
    ".tmp-1",
    ".tmp",
    "x.tmp",
    "#0123456789abcdef.tmp",
    "#locks",
    ".lock",
    "x.lock",
    "x.part",
    "x.part-1",
    "x.meta",
    "x.version",
    "x",
    "x.json",
    "x.bin",
    "x.dat",
    "x.value",
    "x.zst",
    "x~",
    "_index",
    "__meta__",
    ".DS_Store",
]
OWN_NAME_KEYS = [*_OWN_NAMES, *(f"own/{name}" for name in _OWN_NAMES), ".tmp-x/y"]
"""Valid keys named as adapters name their own records beside the keys, at the top and
under a prefix: temporary and staging files (``.tmp-N``, ``x.tmp``, the file adapter's
``#<hex>.tmp``), locks (``#locks``, ``.lock``), the parts of a large value, metadata and
version records, an index; and a key beside itself with the extensions that adapters give
their value files (``x`` and ``x.json``: one file when the extension is added only where
missing, or replaced)."""


class SemanticsTests(PitfallTests, SemanticSweepTests):
    """Round trips, versions, conditional writes, deletes, listing, close."""

    conformance_group: ClassVar[str | None] = "semantics"

    # -- round trips ------------------------------------------------------------------
    @checks("put.round-trip", "put.returns-version")
    async def test_empty_value_round_trips(self, storage: Storage) -> None:
        version = await storage.put("empty", b"")
        await expect_value(
            storage, "empty", b"", version=version, promise="an empty value must round-trip"
        )

    @checks(
        "put.create.existing",
        "put.if-match.current",
        "delete.existing",
        "list.reflects-writes",
        "delete-many.count",
    )
    async def test_a_key_holding_an_empty_value_is_present_to_every_operation(
        self,
        storage: Storage,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """A key holding ``b""`` is present, not missing: a create-only put is refused, an
        if-match put of its version writes (another empty value) and one of a stale version
        is refused, a listing returns it, a conditional delete of a stale version is refused
        and one of its version deletes it, a delete and a ``delete_many`` count it. An
        adapter that reads a key's value and tests it for truth (``if not current``, where
        ``GET`` answered ``b""``) takes it for a missing key on that path."""
        key = "empty-present/k"
        version = await storage.put(key, b"")
        if supports_conditional_put:
            await expect_raises(
                PreconditionFailed,
                storage.put(key, b"x", mode="create"),
                promise="a create-only put of a key holding an empty value must be refused",
                call=f"put({key!r}, b'x', mode='create')",
                key=key,
            )
            await expect_value(
                storage, key, b"", version=version, promise="a refused put must change nothing"
            )
            stale, written = version, await put_or_refused(storage, key, b"", IfMatch(version))
            if written is None:
                fail(
                    "an if-match put of a key holding an empty value, with its version, must write",
                    key=key,
                    expected="a new version",
                    observed=f"put({key!r}, b'', mode=IfMatch({version!r})) raised "
                    "PreconditionFailed, as if the key were missing",
                )
            version = written
            await expect_raises(
                PreconditionFailed,
                storage.put(key, b"x", mode=IfMatch(stale)),
                promise="an if-match put of a stale version must be refused",
                call=f"put({key!r}, b'x', mode=IfMatch({stale!r}))",
                key=key,
            )
            await expect_value(
                storage,
                key,
                b"",
                version=version,
                promise="an if-match put of an empty value's version must write it",
            )
        await expect_keys(
            storage, [key], prefix="empty-present/", promise="a key holding b'' must be listed"
        )
        if supports_conditional_delete:
            stale, version = version, await storage.put(key, b"")
            await expect_raises(
                PreconditionFailed,
                storage.delete(key, if_match=stale),
                promise="a conditional delete of a stale version must be refused",
                call=f"delete({key!r}, if_match={stale!r})",
                key=key,
            )
            existed = await storage.delete(key, if_match=version)
            expect(
                existed is True,
                "a conditional delete of a key holding an empty value, with its version, must "
                "delete it and return True",
                key=key,
                expected="True",
                observed=repr(existed),
            )
            await expect_value(storage, key, None, promise="a deleted key must be missing")
        for how in ("delete", "delete_many"):
            await storage.put(key, b"")
            if how == "delete":
                answer: object = await storage.delete(key)
                counted = answer is True
            else:
                answer = await delete_many(storage, [key])
                counted = answer == 1
            expect(
                counted,
                f"a {how} of a key holding an empty value must count it",
                key=key,
                expected="True" if how == "delete" else "1",
                observed=repr(answer),
            )
            await expect_value(
                storage, key, None, promise=f"a key deleted by {how} must be missing"
            )

    @checks("put.round-trip", "put.returns-version")
    async def test_small_value_round_trips(self, storage: Storage) -> None:
        data = bytes(range(256))
        version = await storage.put("small", data)
        await expect_value(
            storage, "small", data, version=version, promise="a small value must round-trip"
        )

    @checks("put.round-trip", "put.returns-version")
    async def test_16_mib_value_round_trips(self, storage: Storage) -> None:
        data = random.Random(16).randbytes(16 * 1024 * 1024)
        version = await storage.put("big", data)
        await expect_value(
            storage, "big", data, version=version, promise="a 16 MiB value must round-trip"
        )

    @checks("put.bytes-like")
    async def test_bytes_like_data_is_stored_as_bytes(self, storage: Storage) -> None:
        """A bytearray and a memoryview (of a bytearray) are stored as they were when the
        put returned: the caller then reuses its buffer, and nothing stored changes (an
        adapter that keeps the object given, and copies it to bytes on a get, answers the
        caller's later bytes)."""
        given, under = bytearray(b"from bytearray"), bytearray(b"from memoryview")
        await storage.put("ba", given)  # type: ignore[arg-type]
        await storage.put("mv", memoryview(under))  # type: ignore[arg-type]
        given[:], under[:] = b"REUSED BUFFER!", b"REUSED BUFFER!!"  # a buffer used again
        promise = "bytes-like data must be accepted and read back as bytes, as it was put"
        await expect_value(storage, "ba", b"from bytearray", promise=promise)
        await expect_value(storage, "mv", b"from memoryview", promise=promise)

    @checks("put.returns-version", "version.opaque-str")
    async def test_put_returns_the_version_that_get_reports(self, storage: Storage) -> None:
        version = await storage.put("v", b"one")
        expect(
            isinstance(version, str) and bool(version),
            "put must return the new version",
            key="v",
            expected="a non-empty str",
            observed=f"put returned {version!r}",
        )
        await expect_value(
            storage,
            "v",
            b"one",
            version=version,
            promise="get must report the version put returned",
        )

    @checks("put.overwrite", "version.changes")
    async def test_overwrite_replaces_value_and_changes_version(self, storage: Storage) -> None:
        v1 = await storage.put("k", b"old")
        v2 = await storage.put("k", b"new")
        expect(
            v1 != v2,
            "an overwrite must change the version",
            key="k",
            expected="a new version",
            observed=f"both puts returned {v1!r}",
        )
        await expect_value(
            storage, "k", b"new", version=v2, promise="an overwrite must replace the value"
        )

    # -- conditional puts ---------------------------------------------------------------
    @checks("put.create.missing")
    async def test_create_only_writes_a_missing_key(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        version = await storage.put("c", b"first", mode="create")
        await expect_value(
            storage,
            "c",
            b"first",
            version=version,
            promise="a create-only put must write a missing key",
        )

    @checks("put.create.existing", "put.refused-changes-nothing")
    async def test_create_only_rejects_existing_key(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        version = await storage.put("c", b"old")
        await expect_raises(
            PreconditionFailed,
            storage.put("c", b"new", mode="create"),
            promise="a create-only put must refuse an existing key",
            call="put('c', b'new', mode='create')",
            key="c",
        )
        await expect_value(
            storage,
            "c",
            b"old",
            version=version,
            promise="a refused create-only put must change nothing",
        )

    @checks("put.if-match.current")
    async def test_if_match_put_succeeds_on_current_version(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        v1 = await storage.put("m", b"one")
        try:
            v2 = await storage.put("m", b"two", mode=IfMatch(v1))
        except PreconditionFailed as exc:
            fail(
                "an if-match put must succeed on the current version",
                key="m",
                expected=f"put(..., mode=IfMatch({v1!r})) to write",
                observed=f"it raised {describe(exc)}",
            )
        expect(
            v2 != v1,
            "an if-match put must change the version",
            key="m",
            expected="a new version",
            observed=f"it returned the old one {v1!r}",
        )
        await expect_value(
            storage, "m", b"two", version=v2, promise="an if-match put must write the value"
        )

    @checks("put.if-match.stale", "put.refused-changes-nothing")
    async def test_if_match_put_rejects_stale_version(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        v1 = await storage.put("m", b"one")
        v2 = await storage.put("m", b"two")
        await expect_raises(
            PreconditionFailed,
            storage.put("m", b"three", mode=IfMatch(v1)),
            promise="an if-match put must refuse a stale version",
            call=f"put('m', b'three', mode=IfMatch({v1!r})) after an overwrite",
            key="m",
        )
        await expect_value(
            storage, "m", b"two", version=v2, promise="a refused if-match put must change nothing"
        )

    @checks("put.if-match.missing")
    async def test_if_match_put_rejects_missing_key(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        version = await storage.put("other", b"x")
        await expect_raises(
            PreconditionFailed,
            storage.put("absent", b"x", mode=IfMatch(version)),
            promise="an if-match put must refuse a missing key",
            call=f"put('absent', b'x', mode=IfMatch({version!r}))",
            key="absent",
        )
        await expect_missing(
            storage, "absent", promise="a refused if-match put must not create the key"
        )

    @checks("version.never-repeats")
    async def test_version_changes_after_delete_and_recreate(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        _need(supports_conditional_put, "conditional_put")
        v1 = await storage.put("r", b"same")
        await storage.delete("r")
        v2 = await storage.put("r", b"same")
        expect(
            v1 != v2,
            "a re-created key must get a new version (else a stale if-match would succeed)",
            key="r",
            expected="a version other than the deleted value's",
            observed=f"both are {v1!r}",
        )
        await expect_raises(
            PreconditionFailed,
            storage.put("r", b"late", mode=IfMatch(v1)),
            promise="an if-match put must refuse the version of a deleted value",
            call=f"put('r', b'late', mode=IfMatch({v1!r}))",
            key="r",
        )

    @checks("version.changes", "version.never-repeats")
    async def test_every_write_mints_a_new_version(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        a, b = b"the same bytes", b"other bytes"
        steps: list[tuple[str, str]] = [("put A", await storage.put("mint", a))]
        steps.append(("put A again (the same bytes)", await storage.put("mint", a)))
        steps.append(("put B", await storage.put("mint", b)))
        steps.append(("put A (A -> B -> A)", await storage.put("mint", a)))
        await storage.delete("mint")
        mode: PutMode = "create" if supports_conditional_put else "overwrite"
        steps.append((f"delete, then put A ({mode})", await storage.put("mint", a, mode=mode)))
        if supports_conditional_put:
            current = steps[-1][1]
            steps.append(
                (
                    "if-match put of A on A's version",
                    await storage.put("mint", a, mode=IfMatch(current)),
                )
            )
        seen: dict[str, str] = {}
        for step, version in steps:
            if version in seen:
                fail(
                    "every write must mint a new version, also one that writes the same bytes",
                    key="mint",
                    expected=f"{step!r} to return a version never returned before",
                    observed=f"it returned {version!r}, as {seen[version]!r} did",
                    detail="a version derived from the content (a hash, an ETag of the bytes) "
                    "repeats, so a stale if-match succeeds after A -> B -> A and a cancelled "
                    "write cannot be told from a later one. To fix it, mint a version per "
                    "write (a counter, a random token, the backend's generation number)",
                )
            seen[version] = step
        await expect_value(
            storage,
            "mint",
            a,
            version=steps[-1][1],
            promise="get must report the version of the last write",
        )

    @checks("put.returns-version", "put.if-match.stale")
    async def test_versions_of_one_key_never_repeat_over_many_writes(
        self, storage: Storage, scale: float, supports_conditional_put: bool
    ) -> None:
        """A thousand writes of one key (scaled by the target's ``scale``), overwrites and
        if-match puts in turn: every version differs from every earlier one, and an
        if-match with the first is refused. A version from a short hash, a clock of
        milliseconds or a per-key counter kept in a few bits repeats after a few hundred
        writes, and a stale if-match then overwrites a value changed since (the run head's
        compare-and-swap goes backward)."""
        n = scaled(scale, 1000, minimum=50)
        version = await storage.put("many", b"0")
        first = version
        seen = {version: 0}
        for i in range(1, n):
            mode: PutMode = IfMatch(version) if supports_conditional_put and i % 2 else "overwrite"
            version = await storage.put("many", str(i).encode(), mode=mode)
            if version in seen:
                fail(
                    "versions of one key never repeat",
                    key="many",
                    expected=f"write {i} to return a version never returned before",
                    observed=f"it returned {version!r}, as write {seen[version]} did",
                    detail="mint versions from a counter or a random token wide enough never "
                    "to repeat (64 bits or more), not a short hash or a clock",
                )
            seen[version] = i
        if supports_conditional_put:
            try:
                await storage.put("many", b"stale", mode=IfMatch(first))
            except PreconditionFailed:
                return
            fail(
                "an if-match put with a stale version is refused",
                key="many",
                expected=f"IfMatch({first!r}), the version of write 0 of {n}, refused",
                observed="the put succeeded",
            )

    # -- get and delete -------------------------------------------------------------------
    @checks("get.missing")
    async def test_get_missing_key_raises_not_found(self, storage: Storage) -> None:
        await expect_raises(
            NotFound,
            storage.get("nothing/here"),
            promise="get of a missing key must raise NotFound",
            call="get('nothing/here')",
            key="nothing/here",
        )

    @checks("delete.missing")
    async def test_delete_missing_key_returns_false(self, storage: Storage) -> None:
        existed = await storage.delete("nothing")
        expect(
            existed is False,
            "delete of a missing key must return False",
            key="nothing",
            expected="False",
            observed=f"it returned {existed!r}",
        )

    @checks("delete.existing")
    async def test_delete_removes_key_and_returns_true(self, storage: Storage) -> None:
        await storage.put("d", b"x")
        await storage.put("keep", b"y")
        existed = await storage.delete("d")
        expect(
            existed is True,
            "delete of an existing key must return True",
            key="d",
            expected="True",
            observed=f"it returned {existed!r}",
        )
        await expect_missing(storage, "d", promise="a deleted key must be gone")
        await expect_value(storage, "keep", b"y", promise="delete must not touch other keys")
        await expect_keys(storage, ["keep"], promise="a deleted key must not be listed")

    @checks("delete.if-match.stale", "put.refused-changes-nothing")
    async def test_delete_if_match_rejects_stale_version(
        self, storage: Storage, supports_conditional_delete: bool
    ) -> None:
        _need(supports_conditional_delete, "conditional_delete")
        v1 = await storage.put("d", b"one")
        v2 = await storage.put("d", b"two")
        await expect_raises(
            PreconditionFailed,
            storage.delete("d", if_match=v1),
            promise="an if-match delete must refuse a stale version",
            call=f"delete('d', if_match={v1!r})",
            key="d",
        )
        await expect_value(
            storage, "d", b"two", version=v2, promise="a refused delete must keep the value"
        )

    @checks("delete.if-match.current")
    async def test_delete_if_match_current_version_deletes(
        self, storage: Storage, supports_conditional_delete: bool
    ) -> None:
        _need(supports_conditional_delete, "conditional_delete")
        v1 = await storage.put("d", b"one")
        existed = await storage.delete("d", if_match=v1)
        expect(
            existed is True,
            "an if-match delete on the current version must delete",
            key="d",
            expected="True",
            observed=f"it returned {existed!r}",
        )
        await expect_missing(storage, "d", promise="an if-match delete must remove the key")

    @checks("delete.if-match.missing")
    async def test_delete_if_match_of_missing_key_returns_false(
        self, storage: Storage, supports_conditional_delete: bool
    ) -> None:
        _need(supports_conditional_delete, "conditional_delete")
        v1 = await storage.put("d", b"one")
        await storage.delete("d")
        for key, version in (("d", v1), ("never", v1), ("never", "made-up-version")):
            outcome: object
            try:
                outcome = await storage.delete(key, if_match=version)
            except PreconditionFailed as exc:
                outcome = exc
            expect(
                outcome is False,
                "an if-match delete of a missing key must return False",
                key=key,
                expected="False",
                observed=f"delete({key!r}, if_match={version!r}) gave {describe(outcome)}",
            )
        await expect_missing(storage, "d", promise="a missing key must stay missing")
        gone = await storage.delete("d", if_match=v1)
        expect(
            gone is False,
            "an if-match delete of a missing key must return False",
            key="d",
            expected="False",
            observed=f"it returned {gone!r}",
        )

    # -- listing -----------------------------------------------------------------------------
    @checks("list.prefix-only")
    async def test_list_of_empty_storage_is_empty(self, storage: Storage) -> None:
        await expect_keys(storage, [], promise="a fresh storage must list nothing")

    @checks("list.order")
    async def test_list_returns_keys_in_ascending_order(self, storage: Storage) -> None:
        keys = ["b", "a", "a/b", "a/a", "a.b", "a0", "B", "c/d/e", "ab", "_", "~"]
        shuffled = keys[:]
        random.Random(7).shuffle(shuffled)
        for key in shuffled:
            await storage.put(key, key.encode())
        await expect_keys(storage, sorted(keys), promise="list must return keys in ascending order")

    @checks("list.pages", "list.order")
    async def test_list_pages_across_many_keys(self, storage: Storage) -> None:
        small = set_small_pages(storage, 4)
        keys = [f"p/{i:03d}" for i in range(23)]
        for key in reversed(keys):
            await storage.put(key, b"x")
        pages = " (pages of 4 keys)" if small else ""
        await expect_keys(storage, keys, promise=f"list must page through every key{pages}")
        await expect_keys(
            storage, keys[:9], limit=9, promise=f"a limited listing must stop across pages{pages}"
        )
        await expect_keys(
            storage,
            keys[5:],
            start_after=keys[4],
            promise=f"start_after must hold across pages{pages}",
        )

    @checks("list.start-after")
    async def test_list_start_after_skips_keys_up_to_it(self, storage: Storage) -> None:
        keys = ["a", "b", "c", "d"]
        for key in keys:
            await storage.put(key, b"x")
        await expect_keys(
            storage,
            ["c", "d"],
            start_after="b",
            promise="start_after must skip keys up to and including it",
        )
        await expect_keys(
            storage, ["c", "d"], start_after="bb", promise="start_after need not be an existing key"
        )
        await expect_keys(
            storage, [], start_after="d", promise="start_after at the last key must list nothing"
        )

    @checks("list.start-after", "list.order")
    async def test_list_start_after_keeps_the_keys_below_it(self, storage: Storage) -> None:
        # "a/b" > "a": a server that stores keys as directories must not skip "a/" (SeaweedFS
        # does, when StartAfter names one of its directories)
        for key in ["a", "a/b", "a/c/d", "b"]:
            await storage.put(key, b"x")
        await expect_keys(
            storage,
            ["a/b", "a/c/d", "b"],
            start_after="a",
            promise="start_after must keep the keys that extend it ('a/b' after 'a')",
        )
        await expect_keys(
            storage,
            ["a/c/d", "b"],
            start_after="a/c",
            promise="start_after naming no key must keep the keys that extend it",
        )

    @checks("list.limit")
    async def test_list_limit_caps_the_number_of_keys(self, storage: Storage) -> None:
        keys = [f"l{i}" for i in range(5)]
        for key in keys:
            await storage.put(key, b"x")
        await expect_keys(storage, [], limit=0, promise="limit=0 must list nothing")
        await expect_keys(storage, keys[:3], limit=3, promise="limit must cap the listing")
        await expect_keys(
            storage, keys, limit=50, promise="a limit above the count must list everything"
        )

    @checks("list.start-after", "list.limit")
    async def test_list_start_after_and_limit_page_through_everything(
        self, storage: Storage
    ) -> None:
        keys = [f"k/{i:02d}" for i in range(11)]
        for key in keys:
            await storage.put(key, b"x")
        seen: list[str] = []
        after: str | None = None
        for _ in range(20):
            page = await collect(storage.list("k/", start_after=after, limit=3), bound=10)
            if not page:
                break
            seen.extend(page)
            after = page[-1]
        expect(
            seen == keys,
            "paging with start_after and limit must visit every key once, in order",
            expected=f"{len(keys)} keys",
            observed=f"it visited {seen}",
        )

    @checks("list.prefix-only")
    async def test_list_prefix_isolates_keys(self, storage: Storage) -> None:
        keys = ["a", "a.b", "a/b", "a/c/d", "a0", "ab", "b/a", "A/b"]
        for key in keys:
            await storage.put(key, b"x")
        await expect_keys(
            storage,
            ["a/b", "a/c/d"],
            prefix="a/",
            promise="list must return only keys under the prefix",
        )
        await expect_keys(
            storage,
            ["a", "a.b", "a/b", "a/c/d", "a0", "ab"],
            prefix="a",
            promise="a partial-segment prefix must match by string prefix",
        )
        await expect_keys(
            storage, ["a/c/d"], prefix="a/c", promise="a nested prefix must isolate its keys"
        )
        await expect_keys(
            storage, [], prefix="zz", promise="a prefix with no keys must list nothing"
        )
        await expect_keys(
            storage,
            ["a/c/d"],
            prefix="a/",
            start_after="a/b",
            promise="start_after must combine with the prefix",
        )

    @checks("list.prefix-only", "list.order")
    async def test_prefixes_ending_in_the_highest_code_points_list_their_keys(
        self, storage: Storage
    ) -> None:
        """Prefixes whose last character is U+D7FF (the last before the surrogates) or
        U+10FFFF (the last of all) list their keys like any other. A listing bounded above
        by the prefix with its last character incremented meets a lone surrogate (which no
        encoder takes) after U+D7FF, and no character at all after U+10FFFF."""
        keys = ["hi/a\ud7ff", "hi/a\ud7ffb", "hi/a\ue000", "hi/a\U0010ffff", "hi/a\U0010ffffb"]
        for key in keys:
            await storage.put(key, b"x")
        await expect_keys(
            storage,
            sorted(keys),
            prefix="hi/a",
            promise="a listing must give keys in ascending order, whatever their characters",
        )
        for prefix in ("hi/a\ud7ff", "hi/a\U0010ffff"):
            await expect_keys(
                storage,
                [k for k in sorted(keys) if k.startswith(prefix)],
                prefix=prefix,
                promise="a prefix ending in U+D7FF or U+10FFFF must list the keys under it",
            )

    @checks("list.reflects-writes")
    async def test_listing_reflects_puts_and_deletes(self, storage: Storage) -> None:
        await storage.put("x/1", b"1")
        await storage.put("x/2", b"2")
        await expect_keys(storage, ["x/1", "x/2"], promise="a listing must show written keys")
        await storage.delete("x/1")
        await expect_keys(storage, ["x/2"], promise="a listing must not show deleted keys")

    @checks("list.reflects-writes", "list.limit")
    async def test_listings_after_one_cut_short_show_later_writes(self, storage: Storage) -> None:
        """A listing stopped by its limit, then a put; a listing left after its first key,
        then a put and a delete: each listing started after them shows them. A listing that
        reads its pages in one snapshot (a read transaction, a server-side cursor) and ends
        it only after its last page never ends one cut short, and every later listing reads
        that old snapshot."""
        for key in ("cut/a", "cut/b"):
            await storage.put(key, b"x")
        shown = [key async for key in storage.list("cut/", limit=1)]
        expect(shown == ["cut/a"], "list(limit=1) yields the first key", key="cut/a",
               expected="['cut/a']", observed=repr(shown))  # fmt: skip
        await storage.put("cut/c", b"x")
        await expect_keys(
            storage,
            ["cut/a", "cut/b", "cut/c"],
            prefix="cut/",
            promise="a listing started after a put completed must show it, also after a "
            "listing stopped by its limit",
        )
        left = storage.list("cut/")
        first = await anext(aiter(left))
        await storage.put("cut/d", b"x")
        await storage.delete(first)
        try:
            await expect_keys(
                storage,
                ["cut/b", "cut/c", "cut/d"],
                prefix="cut/",
                promise="a listing started after a put and a delete completed must reflect "
                "them, also while an earlier listing was left unfinished",
            )
        finally:
            closing = getattr(left, "aclose", None)
            if closing is not None:
                await closing()

    # -- keys ------------------------------------------------------------------------------------
    @checks("key.multi-byte", "key.one-to-one")
    async def test_unicode_keys_round_trip_and_stay_distinct(self, storage: Storage) -> None:
        await _round_trip_all(storage, UNICODE_KEYS, "unicode keys")

    @checks("key.multi-byte", "key.one-to-one")
    async def test_odd_but_valid_keys_round_trip_and_list_exactly(self, storage: Storage) -> None:
        await _round_trip_all(storage, ODD_KEYS, "odd but valid keys")

    @checks("key.multi-byte")
    async def test_200_byte_segment_keys_round_trip(self, storage: Storage) -> None:
        await _round_trip_all(storage, LONG_SEGMENT_KEYS, "keys with a 200-byte segment")

    @checks("key.one-to-one", "list.prefix-only")
    async def test_keys_named_like_an_adapters_own_records_round_trip_and_list_exactly(
        self, storage: Storage
    ) -> None:
        """Keys named as adapters name their own records beside the keys (`OWN_NAME_KEYS`:
        temporary and staging files, locks, parts, metadata, an index): an adapter that keeps
        such records in the keys' name space and tells them by a name that a key can have
        leaves those keys out of listings, or mixes them with its own."""
        await _round_trip_all(storage, OWN_NAME_KEYS, "keys named like an adapter's own records")

    # -- close -------------------------------------------------------------------------------------
    @checks("close.storage-closed", "close.open-listing")
    async def test_operations_after_close_raise_storage_closed(
        self,
        storage: Storage,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """Every call after ``aclose()`` raises StorageClosed: each put mode, a plain and a
        conditional delete, an empty and a non-empty ``delete_many``, a listing."""
        version = await storage.put("k", b"x")
        await storage.aclose()
        promise = "an operation after aclose() must raise StorageClosed"
        detail = (
            "check that the storage is open at the start of every operation, whatever path "
            "it takes (a compare-and-set helper, an empty batch answered without a request)"
        )
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("put('k', b'y')", lambda: storage.put("k", b"y")),
            ("get('k')", lambda: storage.get("k")),
            ("delete('k')", lambda: storage.delete("k")),
            ("delete_many(['k', 'k2'])", lambda: delete_many(storage, ["k", "k2"])),
        ]
        if getattr(raw_storage(storage), "delete_many", None) is not None:
            calls.append(("delete_many([])", lambda: delete_many(storage, [])))
        if supports_conditional_put:
            calls += [
                ("put('k2', b'y', mode='create')", lambda: storage.put("k2", b"y", mode="create")),
                (
                    f"put('k', b'y', mode=IfMatch({version!r}))",
                    lambda: storage.put("k", b"y", mode=IfMatch(version)),
                ),
            ]
        if supports_conditional_delete:
            calls.append(
                (
                    f"delete('k', if_match={version!r})",
                    lambda: storage.delete("k", if_match=version),
                )
            )
        for call, make in calls:
            await expect_raises(
                StorageClosed, make(), promise=promise, call=call, key="k", detail=detail
            )
        try:
            await collect(storage.list(""))
        except StorageClosed:
            pass
        else:
            fail(
                promise,
                expected="list('') to raise StorageClosed",
                observed="it listed keys",
                detail=detail,
            )

    @checks("close.idempotent")
    async def test_close_is_idempotent(self, storage: Storage) -> None:
        await storage.aclose()
        try:
            await storage.aclose()
            await storage.aclose()
        except Exception as exc:
            fail(
                "aclose() must be idempotent",
                expected="a second aclose() to do nothing",
                observed=f"it raised {describe(exc)}",
            )


def _need(flag: bool, capability: str) -> None:
    if not flag:
        pytest.skip(f"the adapter does not declare the {capability} capability")


async def _round_trip_all(storage: Storage, keys: list[str], what: str) -> None:
    __tracebackhide__ = True
    versions = {}
    for i, key in enumerate(keys):
        try:
            versions[key] = await storage.put(key, f"{i}:{key}".encode())
        except Exception as exc:
            fail(
                f"{what} are valid (portable between adapters) and must be accepted",
                key=key,
                expected="put to store it",
                observed=f"it raised {describe(exc)}",
            )
    for i, key in enumerate(keys):
        await expect_value(
            storage,
            key,
            f"{i}:{key}".encode(),
            version=versions[key],
            promise=f"{what} must round-trip and map one-to-one to backend names",
        )
    await expect_keys(storage, sorted(keys), promise=f"{what} must be listed exactly as written")

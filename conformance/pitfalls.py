"""Tests aimed at mistakes backend authors make that the broader tests did not single out.

Each test here was added because a broken adapter of the mutation corpus
(``tests/conformance/broken/corpus.py``) passed the suite without it: a put that
returns the version it replaced, values stored as C strings (trailing NULs cut), a
prefix matched with SQL ``LIKE`` (``_`` and ``%`` are wildcards), as a glob or as a
regular expression, a repeated key counted twice by ``delete_many`` (or a batch that
stops at the first missing key), a key limit counted in characters instead of
UTF-8 bytes. `PitfallTests` joins the ``semantics`` group,
`BadInputPitfallTests` the ``bad-input`` group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import ClassVar

from ..errors import InvalidKey, StorageClosed
from ..storage import IfMatch, Storage, delete_many
from .checks import (
    call_text,
    describe,
    expect_keys,
    expect_listed_in_turn,
    expect_raises,
    expect_value,
    fail,
)
from .clauses import checks
from .fixtures import StorageFixtures, not_exercised, raw_storage, set_small_pages

__all__ = ["NUL_ENDED_VALUES", "BadInputPitfallTests", "PitfallTests"]

NUL_ENDED_VALUES: dict[str, bytes] = {
    "one-nul": b"\0",
    "text-then-nul": b"text\0",
    "three-nuls": b"x\0\0\0",
    "all-nuls-4-kib": bytes(4096),
    "binary-then-nuls": bytes(range(1, 256)) + bytes(9),
}
"""Values that end in NUL bytes, by case name: a C-string backend cuts them."""


class PitfallTests(StorageFixtures):
    """Versions, values, prefixes and batches, where a plausible adapter goes wrong."""

    conformance_group: ClassVar[str | None] = "semantics"

    @checks("put.returns-version")
    async def test_overwrite_returns_the_version_that_get_reports(self, storage: Storage) -> None:
        """Every put (an overwrite, a conditional put) returns the version it wrote, not
        the one it replaced."""
        await storage.put("returned", b"first")
        writes: list[tuple[str, bytes, object]] = [
            ("overwrite", b"second", "overwrite"),
            ("overwrite again", b"third", "overwrite"),
        ]
        for what, data, mode in writes:
            version = await storage.put("returned", data)
            await expect_value(
                storage,
                "returned",
                data,
                version=version,
                promise=f"a put ({what}) must return the version that get then reports",
                detail=f"put('returned', {data!r}, mode={mode!r})",
            )
        current = (await storage.get("returned")).version
        try:
            version = await storage.put("returned", b"fourth", mode=IfMatch(current))
        except Exception:  # an adapter without conditional puts: overwrites were checked
            return
        await expect_value(
            storage,
            "returned",
            b"fourth",
            version=version,
            promise="an if-match put must return the version that get then reports",
        )

    @checks("put.round-trip")
    async def test_values_ending_in_nul_bytes_round_trip(self, storage: Storage) -> None:
        for case, data in NUL_ENDED_VALUES.items():
            await storage.put(f"nul/{case}", data)
        for case, data in NUL_ENDED_VALUES.items():
            await expect_value(
                storage,
                f"nul/{case}",
                data,
                promise=f"a value that ends in NUL bytes ({case}) must round-trip exactly",
            )

    @checks("list.prefix-only")
    async def test_list_prefix_with_like_wildcards_matches_literally(
        self, storage: Storage
    ) -> None:
        """``_`` and ``%`` in a prefix are characters, not SQL wildcards, and case counts."""
        keys = ["a%b/1", "a_b/1", "A_b/1", "aXb/1", "aZZb/1", "a_c", "ab%/x"]
        for key in keys:
            await storage.put(key, b"x")
        for prefix, expected in (
            ("a_", ["a_b/1", "a_c"]),
            ("a%", ["a%b/1"]),
            ("a_b/", ["a_b/1"]),
            ("ab%", ["ab%/x"]),
        ):
            await expect_keys(
                storage,
                expected,
                prefix=prefix,
                promise="a prefix matches literally ('_' and '%' are not wildcards, case counts)",
            )

    @checks("list.prefix-only")
    async def test_list_prefix_with_glob_and_regex_characters_matches_literally(
        self, storage: Storage
    ) -> None:
        """``*``, ``?`` and ``[...]`` (a glob, as Redis ``SCAN MATCH``) and ``.``, ``+`` and
        ``(`` (a regular expression, as a document store's ``$regex``) in a prefix are
        characters: each prefix below has keys beside it that the pattern would match."""
        keys = ["a*b/1", "a?b/1", "a[b]/1", "a.b/1", "a+b/1", "a(b/1", "ab/1", "axb/1", "aab/1"]
        for key in keys:
            await storage.put(key, b"x")
        for prefix, expected in (
            ("a*", ["a*b/1"]),
            ("a?", ["a?b/1"]),
            ("a[b]", ["a[b]/1"]),
            ("a.", ["a.b/1"]),
            ("a+", ["a+b/1"]),
            ("a(", ["a(b/1"]),
            ("a", sorted(keys)),
        ):
            await expect_keys(
                storage,
                expected,
                prefix=prefix,
                promise="a prefix matches literally (glob and regular-expression characters "
                "are characters)",
            )

    @checks("delete-many.count")
    async def test_delete_many_counts_a_repeated_key_once(self, storage: Storage) -> None:
        await storage.put("many/a", b"a")
        await storage.put("many/b", b"b")
        # a missing key before present ones: a batch must go on past it
        keys = ["many/a", "many/missing", "many/b", "many/a", "many/b"]
        got = await delete_many(storage, keys)
        if got != 2:
            fail(
                "delete_many must return how many of the keys existed, each key once",
                key="many/a",
                expected=f"delete_many({keys!r}) to return 2",
                observed=f"it returned {describe(got)}",
            )
        await expect_keys(
            storage, [], prefix="many/", promise="delete_many must delete every key given"
        )

    @checks("delete-many.count")
    async def test_delete_many_takes_any_iterable_of_keys(self, storage: Storage) -> None:
        """A generator (which can be read once: an adapter that checks every key in one pass
        and deletes in a second deletes nothing), a tuple, a set and a dict's keys."""
        batches: dict[str, Callable[[list[str]], Iterable[str]]] = {
            "a generator": lambda keys: (key for key in keys),
            "a tuple": tuple,
            "a set": set,
            "a dict's keys": lambda keys: dict.fromkeys(keys).keys(),
        }
        for what, make in batches.items():
            keys = [f"many-of/{what.replace(' ', '-')}/{i}" for i in range(3)]
            for key in keys:
                await storage.put(key, b"x")
            got = await delete_many(storage, make(keys))
            if got != len(keys):
                fail(
                    "delete_many must take any iterable of keys",
                    key=keys[0],
                    expected=f"delete_many of {what} of {len(keys)} stored keys to return "
                    f"{len(keys)}",
                    observed=f"it returned {describe(got)}",
                )
            await expect_keys(
                storage,
                [],
                prefix=keys[0].rsplit("/", 1)[0] + "/",
                promise=f"delete_many of {what} must delete every key of it",
            )

    @checks("list.pages", "list.prefix-only", "list.start-after")
    async def test_interleaved_listings_each_get_their_own_keys(self, storage: Storage) -> None:
        """Four listings of one storage object read a key at a time in turn, in pages of
        two keys: two prefixes, and one of them again from a ``start_after``. A paginator
        kept on the storage object (one continuation token, one database cursor reused by
        every listing) hands one listing's next page to another."""
        _small_pages(storage, 2)
        keys = {
            "interleaved/a/": [f"interleaved/a/{i}" for i in range(5)],
            "interleaved/b/": [f"interleaved/b/{i}" for i in range(7)],
        }
        for key in [k for group in keys.values() for k in group]:
            await storage.put(key, b"x")
        a, b = keys["interleaved/a/"], keys["interleaved/b/"]
        wanted = {
            "list('interleaved/a/')": (storage.list("interleaved/a/"), a),
            "list('interleaved/b/')": (storage.list("interleaved/b/"), b),
            f"list('interleaved/b/', start_after={b[1]!r})": (
                storage.list("interleaved/b/", start_after=b[1]),
                b[2:],
            ),
            "list('interleaved/a/') again": (storage.list("interleaved/a/"), a),
        }
        await expect_listed_in_turn(
            wanted,
            "listings read in turn must each return their own keys",
            "Keep a listing's continuation (token, cursor, offset) in the "
            "listing, not on the storage object",
        )

    @checks("close.open-listing")
    async def test_next_page_of_a_listing_opened_before_close_raises_storage_closed(
        self, storage: Storage
    ) -> None:
        """Keys of a page fetched before ``aclose()`` may still come; the next page may not."""
        page = _small_pages(storage, 2)
        keys = [f"open/{i:02d}" for i in range(3 * page + 1)]
        for key in keys:
            await storage.put(key, b"x")
        listing = storage.list("open/").__aiter__()
        seen = [await listing.__anext__()]
        await storage.aclose()
        try:
            async for key in listing:
                seen.append(key)
        except StorageClosed:
            if len(seen) <= page:
                return
        fail(
            "the next page of a listing opened before aclose() must raise StorageClosed",
            expected=f"at most the first page ({page} keys) and then StorageClosed",
            observed=f"it yielded {len(seen)} of the {len(keys)} keys"
            + (" and ended without StorageClosed" if len(seen) == len(keys) else ""),
        )


def _small_pages(storage: Storage, size: int) -> int:
    """Make the adapter page by ``size`` keys; its page size, or not exercised."""
    __tracebackhide__ = True
    if set_small_pages(storage, size):
        return size
    raw = raw_storage(storage)
    if isinstance(getattr(raw, "page_size", None), int):
        raw.page_size = size
        return size
    not_exercised(
        "the adapter's page size is not known (no StorageBase, no page_size attribute): a "
        "listing cannot be left open across pages with a handful of keys"
    )


class BadInputPitfallTests(StorageFixtures):
    """Key limits where a plausible adapter counts the wrong thing."""

    conformance_group: ClassVar[str | None] = "bad-input"

    @checks("key.too-long", "error.invalid-key")
    async def test_key_over_1024_utf8_bytes_is_refused_though_shorter_in_characters(
        self, storage: Storage
    ) -> None:
        """The limit is 1024 UTF-8 bytes: 513 'é' (1026 bytes, 513 characters) is too long."""
        for key in ("\u00e9" * 513, "\u20ac" * 342, "k/" + "\U0001f642" * 256):
            size = len(key.encode())
            await expect_raises(
                InvalidKey,
                storage.put(key, b"x"),
                promise=f"a key of {size} UTF-8 bytes ({len(key)} characters) must be refused",
                call=call_text("put", key, b"x"),
            )

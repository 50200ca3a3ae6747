"""Broken adapters that only the ``model`` and ``concurrency`` listing checks catch.

Each is a mistake a backend author makes when the obvious cases work: the
hand-written tests of the other groups pass them (``test_model_group`` checks
that too). Their correct twin is :class:`~.adapters.IOMemoryStorage`: each class
here overrides one method of it, the way the author would have written it.
"""

from __future__ import annotations

import bisect
from typing import Any

from checkpointkit.errors import PreconditionFailed
from checkpointkit.storage import ListPage, PutMode

from .adapters import IOMemoryStorage

__all__ = [
    "DeleteManyCountsRepeats",
    "DeleteManyLeavesTombstones",
    "ListSkipsAfterMissingStartAfter",
    "OffsetPagedListing",
    "Utf16Order",
    "VersionsRestartAfterDeleteMany",
]


def _remove(storage: IOMemoryStorage, keys: list[str]) -> int:
    """Remove every stored key of ``keys`` at once, as one batch request does; how many
    distinct keys were stored."""
    values, existed = storage._data.values, 0
    for key in set(keys):
        if key in values:
            del values[key]
            storage._data.keys.remove(key)
            existed += 1
    return existed


class DeleteManyCountsRepeats(IOMemoryStorage):
    """Bug: one batch request (``DEL k1 k2 ...``) whose count is computed up front,
    one per key given that exists: a key given twice is counted twice."""

    async def _delete_many(self, keys: list[str]) -> int:
        await self._io()
        existed = sum(1 for key in keys if key in self._data.values)
        _remove(self, keys)
        return existed


class DeleteManyLeavesTombstones(IOMemoryStorage):
    """Bug: ``delete_many`` marks its keys deleted (one ``UPDATE ... SET deleted = 1``,
    cheaper than a ``DELETE``) where ``delete`` removes the row; reads and listings skip
    a marked row, but a create-only put (an ``INSERT`` that conflicts on the key) is
    refused on it, and an overwrite then clears the mark."""

    def __init__(self) -> None:
        super().__init__()
        self._marked: set[str] = set()

    def _check(self, key: str, mode: PutMode) -> tuple[bytes, str] | None:
        if mode == "create" and key in self._marked:
            raise PreconditionFailed(f"key {key!r} exists")
        return super()._check(key, mode)

    def _store(self, key: str, data: bytes) -> str:
        self._marked.discard(key)
        return super()._store(key, data)

    async def _delete_many(self, keys: list[str]) -> int:
        await self._io()  # the one UPDATE
        self._marked.update(keys)
        return _remove(self, keys)


class VersionsRestartAfterDeleteMany(IOMemoryStorage):
    """Bug: versions count the writes of each key (a counter in the key's row); ``delete``
    keeps the row as a tombstone with its counter, ``delete_many`` removes the rows: a
    key written again after a ``delete_many`` repeats the versions it had, and an if-match
    put with a version from before the ``delete_many`` wins."""

    def __init__(self) -> None:
        super().__init__()
        self._writes: dict[str, int] = {}

    def _store(self, key: str, data: bytes) -> str:
        d = self._data
        self._writes[key] = self._writes.get(key, 0) + 1
        version = str(self._writes[key])
        if key not in d.values:
            bisect.insort(d.keys, key)
        d.values[key] = (data, version)
        return version

    async def _delete_many(self, keys: list[str]) -> int:
        await self._io()  # the one DELETE of the rows
        for key in keys:
            self._writes.pop(key, None)
        return _remove(self, keys)


class ListSkipsAfterMissingStartAfter(IOMemoryStorage):
    """Bug: the listing seeks to ``start_after`` and steps over it, assuming the
    seek found it; when ``start_after`` is not stored (deleted, or never a key) the
    seek lands on the next key, which is then stepped over too."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._io()
        keys = self._data.keys
        after = cursor if cursor is not None else start_after
        if after is not None and after >= prefix:
            lo = bisect.bisect_left(keys, after) + 1  # step over start_after itself
        else:
            lo = bisect.bisect_left(keys, prefix)
        page = [k for k in keys[lo : lo + limit] if k.startswith(prefix)]
        more = lo + limit < len(keys) and len(page) == limit
        return ListPage(page, page[-1] if more else None)


class Utf16Order(IOMemoryStorage):
    """Bug: keys are kept sorted the way a Java or .NET backend compares strings,
    by UTF-16 code units: a character above U+FFFF (an emoji) sorts before
    U+E000 to U+FFFF, where code-point (and UTF-8 byte) order puts it after."""

    def _store(self, key: str, data: bytes) -> str:
        d = self._data
        version = str(next(d.counter))
        if key not in d.values:
            units = [k.encode("utf-16-be") for k in d.keys]
            d.keys.insert(bisect.bisect_left(units, key.encode("utf-16-be")), key)
        d.values[key] = (data, version)
        return version

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._io()
        after = cursor if cursor is not None else start_after
        units = after.encode("utf-16-be") if after is not None else None
        page: list[str] = []
        for key in self._data.keys:  # in UTF-16 order
            if units is not None and key.encode("utf-16-be") <= units:
                continue
            if key.startswith(prefix):
                page.append(key)
                if len(page) == limit:
                    return ListPage(page, page[-1])
        return ListPage(page, None)


class OffsetPagedListing(IOMemoryStorage):
    """Bug: the listing pages by position (``OFFSET n LIMIT k``, a page number):
    a key inserted before the cursor while the listing runs makes the next page
    repeat a key, a key deleted before it makes the next page skip one."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._io()
        keys = [
            k
            for k in self._data.keys
            if k.startswith(prefix) and (start_after is None or k > start_after)
        ]
        offset = cursor or 0
        page = keys[offset : offset + limit]
        more = offset + limit < len(keys)
        return ListPage(page, offset + limit if more else None)

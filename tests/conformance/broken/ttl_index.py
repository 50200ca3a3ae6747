"""Three mistakes of ``ttl`` and ``indexed_list`` adapters that a blind round found the suite
passing, each with its correct twin, on the dict-backed adapters of :mod:`.kv_dict`.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from checkpointkit.storage import Capabilities, ListPage, PutMode

from .kv_dict import DictKV, ExpiringDictKV, LateEvictionKV

__all__ = [
    "DeleteManyCountsUnsweptItems",
    "ExpiryInTheWrite",
    "ExpirySetByASecondRequest",
    "ListingScansPastItsPrefix",
    "ListingStopsPastItsPrefix",
    "ListingSweepsExpiredKV",
]


# -- delete_many of expired keys ----------------------------------------------------------------
class ListingSweepsExpiredKV(LateEvictionKV):
    """Correct twin of `DeleteManyCountsUnsweptItems`: the backend removes expired items
    late, a listing removes those of its prefix before it reads (a sweep run with the scan),
    and ``delete_many`` counts the live items it removed only."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        for name in [k for k in self.keys if k.startswith(prefix) and not self._live(k)]:
            self._drop(name)
        return await super()._list_page(prefix, start_after, cursor, limit)


class DeleteManyCountsUnsweptItems(ListingSweepsExpiredKV):
    """Bug: ``delete_many`` counts every item its batch removed (the index rows a ``ZREM``
    answers for), expired ones that no listing has swept yet too: a ``delete_many`` of a key
    past its expiry, before any listing, counts it though a get finds nothing."""

    def _counted(self, name: str) -> bool:
        return True


# -- a cancelled put and its expiry -------------------------------------------------------------
class ExpiryInTheWrite(ExpiringDictKV):
    """Correct twin of `ExpirySetByASecondRequest`: a put sends its value and its expiry in
    one request (``SET ... PX``): a cancelled put stored both or neither."""


class ExpirySetByASecondRequest(ExpiryInTheWrite):
    """Bug: a put stores the value with a plain ``SET`` (which clears the key's expiry), then
    sets the expiry by a second request (``PEXPIRE``): a put cancelled between the two leaves
    the key without an expiry, and it never expires."""

    def _store(self, name: str, data: bytes, version: str) -> None:
        DictKV._store(self, name, data, version)
        self.expires.pop(name, None)  # SET without PX

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        version = await super()._put(key, data, mode)
        await self._round_trip()  # PEXPIRE, a request of its own
        if self.ttl is not None and key in self.values:
            self.expires[key] = time.monotonic() + self.ttl
        return version


# -- a listing of a short prefix ----------------------------------------------------------------
class ListingStopsPastItsPrefix(DictKV):
    """Correct twin of `ListingScansPastItsPrefix`: declares ``indexed_list``; a page reads up
    to ``limit`` rows of the ordered index from the prefix on (``WHERE key > :after ORDER BY
    key LIMIT :n``), keeps those of the prefix, and the listing ends at the first row past
    it."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=False, settles_cancelled_writes=True, indexed_list=True
    )

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        lo = self._first(prefix, cursor if cursor is not None else start_after)
        rows = self.keys[lo : lo + limit]
        page = [k for k in rows if k.startswith(prefix)]
        return ListPage(page, self._cursor(prefix, rows, limit))

    def _cursor(self, prefix: str, rows: list[str], limit: int) -> str | None:
        """Where the next page starts: after the last row, if the page was full and that
        row is of the prefix."""
        return rows[-1] if len(rows) == limit and rows[-1].startswith(prefix) else None


class ListingScansPastItsPrefix(ListingStopsPastItsPrefix):
    """Bug: the cursor is the last row a page read, of the prefix or past it: a listing
    of a prefix goes on, page after empty page, through every key that sorts after it to
    the end of the index."""

    def _cursor(self, prefix: str, rows: list[str], limit: int) -> str | None:
        return rows[-1] if len(rows) == limit else None

"""The in-memory adapter: the reference implementation of the storage protocol.

It stores bytes, never Python objects, so a value saved is a snapshot that no
later mutation can reach. Every operation completes without yielding to the
event loop, which makes each one atomic and a cancelled one absent. The one
exception is `MemoryStorage.pause`, the conformance suite's way to make
this backend stop answering: while paused, each operation waits before it
touches the data, so a cancelled one still never started, and one waiting when
the storage is closed ends with ``StorageClosed``, having done nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Callable
from typing import Any, ClassVar

from ..errors import NotFound, PreconditionFailed, StorageClosed
from ..storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase
from ..versions import decimal_version

__all__ = ["MemoryStorage"]


class MemoryStorage(StorageBase):
    """Keys and bytes in a dict, with a sorted key index for ordered listing.

    Several ``MemoryStorage`` objects can share one dataset by name
    (``memory://name``); the unnamed default gives each object its own.

    Args:
        name: share the data with every other storage of this name in the
            process (the URL ``memory://name``). None keeps it private.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False,
        shared=False,
        settles_cancelled_writes=True,
        indexed_list=True,
        local=True,
    )
    _shared: ClassVar[dict[str, _Data]] = {}

    def __init__(self, name: str | None = None) -> None:
        if name is None:
            self._data = _Data()
        else:
            self._data = self._shared.setdefault(name, _Data())
        self.name = name
        self._paused_calls: set[asyncio.Future[None]] = set()  # aclose() ends them

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStorage:
        """``memory://`` (private) or ``memory://NAME`` (shared by name in this process)."""
        rest = url.split("://", 1)[1] if "://" in url else ""
        name = rest.split("?", 1)[0].strip("/") or None
        return cls(name=name, **options)

    def __repr__(self) -> str:
        return f"MemoryStorage(name={self.name!r}, keys={len(self._data.values)})"

    def _may_match(self, version: str) -> bool:
        return decimal_version(version) is not None  # a counter: "13", never "013"

    def pause(self) -> Callable[[], None]:
        """Make every operation on this data wait until the returned function is called.

        The in-memory backend's way to stop answering, for the conformance
        suite's held-backend tests (`MemoryPause`):
        each operation started while paused waits before it reads or changes
        anything, so one cancelled while waiting did nothing. Storages that
        share the data by name pause together. Calling the returned function
        again does nothing.

        Raises:
            RuntimeError: the data is paused already.
        """
        d = self._data
        if d.paused is not None:
            raise RuntimeError(f"{self!r} is paused already")
        gate = d.paused = asyncio.Event()

        def resume() -> None:
            gate.set()
            if d.paused is gate:
                d.paused = None

        return resume

    async def _answering(self) -> None:
        """Return at once, or, while paused, once resumed; ``StorageClosed`` if this storage
        was closed first (the operation then did nothing)."""
        gate = self._data.paused
        if gate is None:
            return
        closed = asyncio.get_running_loop().create_future()
        self._paused_calls.add(closed)
        resumed = asyncio.ensure_future(gate.wait())
        try:
            await asyncio.wait({resumed, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._paused_calls.discard(closed)
            resumed.cancel()
        if not gate.is_set():
            raise StorageClosed(f"{self!r} was closed while paused; the call did nothing")

    async def _aclose(self) -> None:
        """End the calls waiting while paused (each raises ``StorageClosed``), and return
        once they have: nothing of this storage runs after."""
        for closed in self._paused_calls:
            closed.set_result(None)
        while self._paused_calls:  # each leaves in its next step
            await asyncio.sleep(0)

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._answering()
        d = self._data
        current = d.values.get(key)
        if mode == "create":
            if current is not None:
                raise PreconditionFailed(f"key {key!r} already exists (create-only put)")
        elif isinstance(mode, IfMatch):
            if current is None:
                raise PreconditionFailed(f"key {key!r} does not exist (if-match {mode.version})")
            if current[1] != mode.version:
                raise PreconditionFailed(
                    f"key {key!r} is at version {current[1]}, not {mode.version} (if-match put)"
                )
        version = str(next(d.counter))
        if current is None:
            bisect.insort(d.keys, key)
        d.values[key] = (data, version)
        return version

    async def _get(self, key: str) -> GetResult:
        await self._answering()
        try:
            data, version = self._data.values[key]
        except KeyError:
            raise NotFound(f"key {key!r} not found") from None
        return GetResult(data, version)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await self._answering()
        d = self._data
        current = d.values.get(key)
        if current is None:
            return False
        if if_match is not None and current[1] != if_match:
            raise PreconditionFailed(
                f"key {key!r} is at version {current[1]}, not {if_match} (if-match delete)"
            )
        del d.values[key]
        del d.keys[bisect.bisect_left(d.keys, key)]
        return True

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._answering()
        keys = self._data.keys
        after = cursor if cursor is not None else start_after
        if after is not None and after >= prefix:
            lo = bisect.bisect_right(keys, after)
        else:
            lo = bisect.bisect_left(keys, prefix)
        page: list[str] = []
        for key in keys[lo : lo + limit]:
            if not key.startswith(prefix):
                return ListPage(page, None)
            page.append(key)
        return ListPage(page, page[-1] if len(page) == limit else None)


class _Data:
    __slots__ = ("counter", "keys", "paused", "values")

    def __init__(self) -> None:
        self.values: dict[str, tuple[bytes, str]] = {}
        self.keys: list[str] = []
        self.counter = itertools.count(1)
        self.paused: asyncio.Event | None = None  # set by pause(): operations wait for it

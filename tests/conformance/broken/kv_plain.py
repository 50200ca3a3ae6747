"""An adapter that implements the protocol directly, without :class:`StorageBase`, and the
mistakes of an author who checks arguments and state by hand, one per subclass.

:class:`PlainKV` is correct: it validates keys, data, modes and arguments, refuses
every call after ``aclose()`` (the next page of an open listing included), and
closes idempotently. Each subclass rewrites the one method where the check is
forgotten or done wrong.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import AsyncIterator, Iterable
from typing import Any, ClassVar

from checkpointkit.errors import InvalidKey, NotFound, PreconditionFailed, StorageClosed
from checkpointkit.keys import validate_key, validate_prefix
from checkpointkit.storage import Capabilities, GetResult, IfMatch, PutMode


class PlainKV:
    """Correct: every check by hand, a dict and a sorted key list."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=False, settles_cancelled_writes=True
    )
    page_size: ClassVar[int] = 3

    def __init__(self) -> None:
        self.values: dict[str, tuple[bytes, str]] = {}
        self.keys: list[str] = []
        self.counter = itertools.count(1)
        self.closed = False

    # -- checks -------------------------------------------------------------------------------
    def _open(self) -> None:
        if self.closed:
            raise StorageClosed("PlainKV is closed")

    def _key(self, key: str) -> str:
        return validate_key(key)

    def _data(self, key: str, data: Any) -> bytes:
        if isinstance(data, bytes | bytearray | memoryview):
            return bytes(data)
        raise TypeError(f"data for key {key!r} must be bytes, not {type(data).__name__}")

    def _mode(self, key: str, mode: Any) -> PutMode:
        if mode in ("overwrite", "create"):
            return mode  # type: ignore[no-any-return]
        if isinstance(mode, IfMatch):
            if not isinstance(mode.version, str):
                raise TypeError(f"IfMatch version for key {key!r} must be a str")
            return mode
        raise ValueError(f"invalid put mode {mode!r} for key {key!r}")

    def _if_match(self, key: str, if_match: Any) -> str | None:
        if if_match is not None and not isinstance(if_match, str):
            raise TypeError(f"if_match for key {key!r} must be a str or None")
        return if_match  # type: ignore[no-any-return]

    def _limit(self, limit: Any) -> int | None:
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, not {limit}")
        return limit  # type: ignore[no-any-return]

    # -- the protocol ---------------------------------------------------------------------------
    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        self._open()
        key = self._key(key)
        data = self._data(key, data)
        mode = self._mode(key, mode)
        await asyncio.sleep(0)
        return self._write(key, data, mode)

    def _write(self, key: str, data: bytes, mode: PutMode) -> str:
        current = self.values.get(key)
        if mode == "create" and current is not None:
            raise PreconditionFailed(f"key {key!r} already exists")
        if isinstance(mode, IfMatch) and (current is None or current[1] != mode.version):
            raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
        version = str(next(self.counter))
        if current is None:
            bisect.insort(self.keys, key)
        self.values[key] = (data, version)
        return version

    async def get(self, key: str) -> GetResult:
        self._open()
        key = self._key(key)
        await asyncio.sleep(0)
        found = self.values.get(key)
        if found is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(*found)

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        self._open()
        key = self._key(key)
        if_match = self._if_match(key, if_match)
        await asyncio.sleep(0)
        return self._remove(key, if_match)

    def _remove(self, key: str, if_match: str | None) -> bool:
        current = self.values.get(key)
        if current is None:
            return False
        if if_match is not None and current[1] != if_match:
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        del self.values[key]
        self.keys.remove(key)
        return True

    async def delete_many(self, keys: Iterable[str]) -> int:
        self._open()
        batch = [self._key(k) for k in keys]
        await asyncio.sleep(0)
        return sum(self._remove(k, None) for k in dict.fromkeys(batch))

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        self._open()
        validate_prefix(prefix)
        if start_after is not None and not isinstance(start_after, str):
            raise TypeError("start_after must be a str or None")
        return self._listing(prefix, start_after, self._limit(limit))

    async def _listing(
        self, prefix: str, start_after: str | None, limit: int | None
    ) -> AsyncIterator[str]:
        after = start_after
        left = limit
        while left is None or left > 0:
            self._page_open()
            await asyncio.sleep(0)
            lo = bisect.bisect_right(self.keys, after) if after is not None else 0
            lo = max(lo, bisect.bisect_left(self.keys, prefix))
            size = self.page_size if left is None else min(left, self.page_size)
            page = [k for k in self.keys[lo : lo + size] if k.startswith(prefix)]
            for key in page:
                yield key
            if len(page) < size:
                return
            after = page[-1]
            if left is not None:
                left -= len(page)

    def _page_open(self) -> None:
        self._open()

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        await asyncio.sleep(0)

    async def __aenter__(self) -> PlainKV:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class CloseNotIdempotent(PlainKV):
    """Bug: a second ``aclose()`` raises (the connection it closes is gone)."""

    async def aclose(self) -> None:
        if self.closed:
            raise StorageClosed("PlainKV is closed already")
        self.closed = True
        await asyncio.sleep(0)


class WorksAfterClose(PlainKV):
    """Bug: aclose() only marks the object; no operation checks the mark."""

    def _open(self) -> None:
        pass


class DeleteManyAfterClose(PlainKV):
    """Bug: the batch delete, added later for speed, forgot the closed check the others make."""

    async def delete_many(self, keys: Iterable[str]) -> int:
        batch = [self._key(k) for k in keys]
        await asyncio.sleep(0)
        return sum(self._remove(k, None) for k in dict.fromkeys(batch))


class OpenListingOutlivesClose(PlainKV):
    """Bug: the state is checked when a listing starts, not before each of its pages."""

    def _page_open(self) -> None:
        pass


class AcceptsDotSegments(PlainKV):
    """Bug: the key check refuses NUL and backslash only (what the author's backend rejects)."""

    def _key(self, key: str) -> str:
        if not isinstance(key, str) or not key or "\0" in key or "\\" in key:
            raise InvalidKey(f"invalid key {key!r}")
        return key


class CountsKeyCharacters(PlainKV):
    """Bug: the length limit counts characters, not UTF-8 bytes: 1024 'é' (2048 bytes) pass."""

    def _key(self, key: str) -> str:
        if isinstance(key, str) and 0 < len(key) <= 1024:
            try:
                return validate_key(key)
            except InvalidKey as exc:
                if "bytes long" not in str(exc):
                    raise
                return key
        return validate_key(key)


class KeyLimitTooShort(PlainKV):
    """Bug: keys are limited to 1000 bytes (an older backend's limit), not 1024."""

    def _key(self, key: str) -> str:
        validate_key(key)
        if len(key.encode()) > 1000:
            raise InvalidKey(f"key {key!r} is longer than 1000 bytes")
        return key


class KeyErrorOmitsKey(PlainKV):
    """Bug: the InvalidKey message does not say which key."""

    def _key(self, key: str) -> str:
        try:
            return validate_key(key)
        except InvalidKey:
            raise InvalidKey("invalid key") from None


class StoresAnyData(PlainKV):
    """Bug: data is stored as given: a str or an int is accepted."""

    def _data(self, key: str, data: Any) -> bytes:
        return data  # type: ignore[no-any-return]


class KeepsBytearray(PlainKV):
    """Bug: a bytearray is stored by reference: the caller's later change alters the value."""

    def _data(self, key: str, data: Any) -> bytes:
        if isinstance(data, bytes | bytearray | memoryview):
            return data  # type: ignore[return-value]
        return super()._data(key, data)


class KeepsTheCallersBuffer(KeepsBytearray):
    """Bug: a bytearray or memoryview is stored by reference and copied to bytes on a get
    (so every get answers bytes): once the caller reuses its buffer, the stored value is
    the buffer's new bytes."""

    async def get(self, key: str) -> GetResult:
        found = await super().get(key)
        return GetResult(bytes(found.data), found.version)


class UnknownModeOverwrites(PlainKV):
    """Bug: any mode other than create and IfMatch is treated as overwrite."""

    def _mode(self, key: str, mode: Any) -> PutMode:
        if mode == "create" or isinstance(mode, IfMatch):
            return super()._mode(key, mode)
        return "overwrite"


class AcceptsNonStrIfMatch(PlainKV):
    """Bug: if_match is compared as given: an int version is accepted (and never matches)."""

    def _if_match(self, key: str, if_match: Any) -> str | None:
        return if_match  # type: ignore[no-any-return]


class AcceptsNegativeLimit(PlainKV):
    """Bug: a negative limit is taken as "no limit"."""

    def _limit(self, limit: Any) -> int | None:
        return None if limit is None or limit < 0 else limit  # type: ignore[no-any-return]


class BadDataDeletesFirst(PlainKV):
    """Bug: a put deletes the old value first (to "replace" it), then finds the data invalid."""

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        self._open()
        key = self._key(key)
        if mode == "overwrite" and key in self.values:
            self._remove(key, None)
        return await super().put(key, data, mode=mode)


class LimitOffByOne(PlainKV):
    """Bug: the listing stops once it has yielded *more* than limit keys (``>`` for ``>=``)."""

    async def _listing(
        self, prefix: str, start_after: str | None, limit: int | None
    ) -> AsyncIterator[str]:
        count = 0
        async for key in super()._listing(prefix, start_after, None):
            if limit is not None and count > limit:
                return
            yield key
            count += 1


class DeleteManyStopsAtBadKey(PlainKV):
    """Bug: delete_many validates and deletes key by key: keys before an invalid one are gone."""

    async def delete_many(self, keys: Iterable[str]) -> int:
        self._open()
        existed = 0
        for key in keys:
            existed += self._remove(self._key(key), None)
        await asyncio.sleep(0)
        return existed


class CoercesKeysToStr(PlainKV):
    """Bug: a key that is not a str is turned into one (``str(key)``) instead of refused."""

    def _key(self, key: str) -> str:
        return super()._key(key if isinstance(key, str) else str(key))


class AcceptsAnyPrefix(PlainKV):
    """Bug: a listing's prefix is not checked (only keys are)."""

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        self._open()
        return self._listing(prefix, start_after, self._limit(limit))


class ExitDoesNotClose(PlainKV):
    """Bug: ``__aexit__`` was left empty: ``async with`` never closes the storage."""

    async def __aexit__(self, *exc: object) -> None:
        return None


class IfMatchVersionCoerced(PlainKV):
    """Bug: the if-match version goes on as the backend's client encodes it (7 as b"7"):
    ``put(k, v, mode=IfMatch(7))`` is accepted and matches the stored version "7"."""

    def _mode(self, key: str, mode: Any) -> PutMode:
        if isinstance(mode, IfMatch) and not isinstance(mode.version, str):
            return IfMatch(str(mode.version))
        return super()._mode(key, mode)


class ConditionalPutEncodesStr(PlainKV):
    """Bug: the data type is checked on the plain put only; a create-only or if-match put
    goes to a compare-and-set path that stores a str (or number) as its UTF-8."""

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if mode != "overwrite" and isinstance(data, str | int | float):
            self._open()
            key = self._key(key)
            mode = self._mode(key, mode)
            await asyncio.sleep(0)
            return self._write(key, str(data).encode(), mode)
        return await super().put(key, data, mode=mode)


class DeleteManySkipsEmptyKeys(PlainKV):
    """Bug: delete_many drops empty keys before checking the rest: ``delete_many(["a",
    ""])`` deletes ``a`` instead of raising InvalidKey and deleting nothing."""

    async def delete_many(self, keys: Iterable[str]) -> int:
        return await super().delete_many([k for k in keys if k])


class EmptyBatchAfterClose(PlainKV):
    """Bug: delete_many answers 0 for an empty batch before any check, the closed one
    included: ``delete_many([])`` after ``aclose()`` returns 0."""

    async def delete_many(self, keys: Iterable[str]) -> int:
        batch = list(keys)
        if not batch:
            return 0
        return await super().delete_many(batch)


class ConditionalPutAfterClose(PlainKV):
    """Bug: create-only and if-match puts go to a compare-and-set helper that forgot the
    closed check: after ``aclose()`` such a put still writes and returns a version."""

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if mode == "overwrite":
            return await super().put(key, data, mode=mode)
        key = self._key(key)
        data = self._data(key, data)
        mode = self._mode(key, mode)
        await asyncio.sleep(0)
        return self._write(key, data, mode)

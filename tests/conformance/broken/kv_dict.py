"""A dict-backed adapter as a backend author writes one on :class:`StorageBase`, and the
mistakes such an author makes, one per subclass.

:class:`DictKV` is correct: one "round trip" (a yield to the event loop) before every
operation, then the check and the change in one synchronous step. Each subclass
rewrites one method the way the mistake is made in real adapters: a version taken
from the data, a per-key counter that starts again, a check and a write in two
steps, a listing that pages by offset, a start_after that is inclusive...
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import fnmatch
import functools
import hashlib
import itertools
import re
import secrets
import socket
import threading
import unicodedata
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, ClassVar, TypeVar
from urllib.parse import quote as url_quote
from urllib.parse import unquote as url_unquote
from urllib.parse import urlsplit
from xml.etree import ElementTree
from xml.sax.saxutils import escape as xml_escape

from checkpointkit.conformance.holds import WRITES, Hold, Operation
from checkpointkit.errors import (
    InvalidKey,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageClosed,
    StorageUnavailable,
)
from checkpointkit.keys import validate_key
from checkpointkit.storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase

T = TypeVar("T")


class DictKV(StorageBase):
    """Correct: a sorted key list and a dict of (bytes, version), a global write counter."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=False, settles_cancelled_writes=True
    )

    def __init__(self) -> None:
        self.values: dict[str, tuple[bytes, str]] = {}
        self.keys: list[str] = []
        self.counter = itertools.count(1)

    async def _round_trip(self) -> None:
        await asyncio.sleep(0)

    def _mint(self, key: str, data: bytes) -> str:
        return str(next(self.counter))

    def _name(self, key: str) -> str:
        """The backend's name of ``key``."""
        return key

    def _refuse(self, key: str, current: tuple[bytes, str] | None, mode: PutMode) -> None:
        if mode == "create" and current is not None:
            raise PreconditionFailed(f"key {key!r} already exists")
        if isinstance(mode, IfMatch) and (current is None or current[1] != mode.version):
            raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")

    def _store(self, name: str, data: bytes, version: str) -> None:
        if name not in self.values:
            bisect.insort(self.keys, name)
        self.values[name] = (data, version)

    def _drop(self, name: str) -> None:
        del self.values[name]
        self.keys.remove(name)

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._round_trip()
        name = self._name(key)
        self._refuse(key, self.values.get(name), mode)
        version = self._mint(name, data)
        self._store(name, data, version)
        return version

    async def _get(self, key: str) -> GetResult:
        await self._round_trip()
        found = self.values.get(self._name(key))
        if found is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(*found)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await self._round_trip()
        name = self._name(key)
        current = self.values.get(name)
        if current is None:
            return False
        if if_match is not None and current[1] != if_match:
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        self._drop(name)
        return True

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        lo = self._first(prefix, cursor if cursor is not None else start_after)
        page = [k for k in self.keys[lo : lo + limit] if k.startswith(prefix)]
        return ListPage(page, page[-1] if len(page) == limit else None)

    def _first(self, prefix: str, after: str | None) -> int:
        """Where a page of ``prefix`` after ``after`` starts in the sorted key list."""
        lo = bisect.bisect_right(self.keys, after) if after is not None else 0
        return max(lo, bisect.bisect_left(self.keys, prefix))

    def _walk(self, prefix: str, after: str | None) -> Iterator[str]:
        """The keys of ``prefix`` after ``after``, in order (what a page reads from)."""
        return itertools.takewhile(
            lambda key: key.startswith(prefix), self.keys[self._first(prefix, after) :]
        )


# -- versions ---------------------------------------------------------------------------------
class VersionIsLength(DictKV):
    """Bug: the version is the value's length (a size as an ETag)."""

    def _mint(self, key: str, data: bytes) -> str:
        return str(len(data))


class VersionResetsOnRecreate(DictKV):
    """Bug: a per-key write counter, forgotten with the key: a re-created key's versions repeat."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[str, int] = {}

    def _mint(self, key: str, data: bytes) -> str:
        self.writes[key] = self.writes.get(key, 0) + 1
        return str(self.writes[key])

    def _drop(self, name: str) -> None:
        super()._drop(name)
        self.writes.pop(name, None)


class PutReturnsPreviousVersion(DictKV):
    """Bug: put returns the version the key had before the write (the one it replaced)."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._round_trip()
        current = self.values.get(key)
        self._refuse(key, current, mode)
        version = self._mint(key, data)
        self._store(key, data, version)
        return current[1] if current is not None else version


# -- conditional puts ---------------------------------------------------------------------------
class CreateChecksThenWrites(DictKV):
    """Bug: create-only as ``exists()`` and then a write, two round trips."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if mode == "create":
            await self._round_trip()
            if key in self.values:  # exists()
                raise PreconditionFailed(f"key {key!r} already exists")
            mode = "overwrite"  # then write
        return await super()._put(key, data, mode)


class IfMatchMissingCreates(DictKV):
    """Bug: an if-match put on a missing key writes it (only a present key is compared)."""

    def _refuse(self, key: str, current: tuple[bytes, str] | None, mode: PutMode) -> None:
        if mode == "create" and current is not None:
            raise PreconditionFailed(f"key {key!r} already exists")
        if isinstance(mode, IfMatch) and current is not None and current[1] != mode.version:
            raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")


class RefusedCreateStillWrites(DictKV):
    """Bug: the value is written first and the condition checked after (then raises)."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._round_trip()
        current = self.values.get(key)
        version = self._mint(key, data)
        self._store(key, data, version)
        self._refuse(key, current, mode)
        return version


class IfMatchComparesNumbers(DictKV):
    """Bug: if-match compares ``int(version)``: any version of another form that parses
    to the same number (``"+7"``, ``" 7"``, ``"7\\n"``) matches."""

    def _refuse(self, key: str, current: tuple[bytes, str] | None, mode: PutMode) -> None:
        if isinstance(mode, IfMatch) and current is not None:
            try:
                same = int(mode.version) == int(current[1])
            except ValueError:
                same = False
            if not same:
                raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
            return
        super()._refuse(key, current, mode)


class IfMatchSentAsAnEntityTagList(DictKV):
    """Bug: if-match is sent as HTTP's ``If-Match: "<version>"`` after refusing a version
    that is empty, ``*``, padded with spaces or quoted, and the server matches any entity
    tag of the list the header holds: the version ``x", "7`` makes the list ``"x", "7"``,
    which matches version 7."""

    def _refuse(self, key: str, current: tuple[bytes, str] | None, mode: PutMode) -> None:
        if isinstance(mode, IfMatch):
            given = mode.version
            sane = given not in ("", "*") and given == given.strip() and given[0] != '"'
            tags = [t.strip().strip('"') for t in f'"{given}"'.split(",")] if sane else []
            if current is None or current[1] not in tags:
                raise PreconditionFailed(f"key {key!r} is not at version {given}")
            return
        super()._refuse(key, current, mode)


# -- delete -------------------------------------------------------------------------------------
class DeleteMissingReturnsTrue(DictKV):
    """Bug: delete returns True whether or not the key existed (``pop(key, None)``)."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await self._round_trip()
        current = self.values.get(key)
        if current is not None and if_match is not None and current[1] != if_match:
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        if current is not None:
            self._drop(key)
        return True


class DeleteIfMatchMissingRaises(DictKV):
    """Bug: a conditional delete of a missing key raises PreconditionFailed (nothing matches)."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await self._round_trip()
        current = self.values.get(key)
        if if_match is not None and (current is None or current[1] != if_match):
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        if current is None:
            return False
        self._drop(key)
        return True


class DeleteIgnoresIfMatch(DictKV):
    """Bug: delete never looks at if_match."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        return await super()._delete(key, None)


class DeleteIfMatchComparesInts(DictKV):
    """Bug: versions are kept as ints and compared with the caller's string: never equal."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await self._round_trip()
        current = self.values.get(key)
        if current is None:
            return False
        stored: object = int(current[1])
        if if_match is not None and stored != if_match:
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        self._drop(key)
        return True


class DeleteLeavesIndex(DictKV):
    """Bug: delete removes the value but not the key from the sorted index."""

    def _drop(self, name: str) -> None:
        del self.values[name]


class DeleteManyCountsRequests(DictKV):
    """Bug: delete_many returns how many keys it was given, not how many existed."""

    async def _delete_many(self, keys: list[str]) -> int:
        for key in keys:
            await self._delete(key, None)
        return len(keys)


class DeleteChecksThenDeletes(DictKV):
    """Bug: an unconditional delete asks whether the key exists (``HEAD``), then deletes it
    by a second request that does not say whether it found anything (S3's
    ``DeleteObject``): two deletes of one value both answer True. Conditional deletes are
    one request, and right."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if if_match is not None:
            return await super()._delete(key, if_match)
        await self._round_trip()
        existed = key in self.values
        await self._round_trip()
        if key in self.values:
            self._drop(key)
        return existed


class DeleteManyCountsThenDeletes(DictKV):
    """Bug: delete_many counts the keys that exist by one request (``SELECT count(*)``, a
    listing), then deletes them by a second one that does not say what it found: a key
    that a racing delete removes in between is counted by both. Its twin is `DictKV`,
    whose delete_many deletes and counts each key in one step."""

    async def _delete_many(self, keys: list[str]) -> int:
        await self._round_trip()
        existed = sum(key in self.values for key in set(keys))
        await self._round_trip()
        for key in set(keys):
            if key in self.values:
                self._drop(key)
        return existed


class DeleteIfMatchDecidesFromASnapshot(DictKV):
    """Bug: a conditional delete in one statement that also reads the current version
    (``WITH d AS (DELETE ... WHERE version = $v) SELECT count(*) FROM d, (SELECT version
    ...)``): the read is the statement's snapshot, taken before the delete waited for the
    row's lock. A delete that lost to another delete of that version sees the row still at
    it and raises PreconditionFailed, where the key is missing (False)."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if if_match is None:
            return await super()._delete(key, None)
        seen = self.values.get(key)  # the statement's snapshot
        await self._round_trip()  # the delete waits for the row's lock
        current = self.values.get(key)
        if current is not None and current[1] == if_match:
            self._drop(key)
            return True
        if seen is None:
            return False
        raise PreconditionFailed(f"key {key!r} is not at version {if_match}")


class ConditionalWritesLockTheKey(DictKV):
    """Correct: a conditional put or delete holds the key's lock (a row lock, ``SELECT ...
    FOR UPDATE``) from its read of the version to its write, and a writer that finds the
    key locked waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.locks: dict[str, asyncio.Lock] = {}

    async def _locked(self, key: str, write: Callable[[], Awaitable[T]]) -> T:
        lock = self.locks.setdefault(key, asyncio.Lock())
        async with lock:
            await self._round_trip()  # the statement runs, holding the lock
            return await write()

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if mode == "overwrite":
            return await super()._put(key, data, mode)
        return await self._locked(
            key, lambda: super(ConditionalWritesLockTheKey, self)._put(key, data, mode)
        )

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if if_match is None:
            return await super()._delete(key, None)
        return await self._locked(
            key, lambda: super(ConditionalWritesLockTheKey, self)._delete(key, if_match)
        )


class ConditionalWritesRefusedWhileLocked(ConditionalWritesLockTheKey):
    """Bug: a conditional write that finds the key locked does not wait (``FOR UPDATE
    NOWAIT``) and raises PreconditionFailed ("someone else is writing it, so my version is
    stale"): the writer holding the lock may be one whose own condition fails, and the
    version stays current, yet this write is refused."""

    async def _locked(self, key: str, write: Callable[[], Awaitable[T]]) -> T:
        lock = self.locks.setdefault(key, asyncio.Lock())
        if lock.locked():
            raise PreconditionFailed(f"key {key!r} is being written (lock not available)")
        return await super()._locked(key, write)


class DeleteIfMatchChecksThenDeletes(DictKV):
    """Bug: a conditional delete reads the version, compares it, then deletes in a second
    request (``GET`` then ``DEL``, not one script): two deletes of one version both return
    True, and a delete and an if-match put of it both win."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await self._round_trip()
        current = self.values.get(key)
        if current is None:
            return False
        if if_match is not None and current[1] != if_match:
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        await self._round_trip()
        if key in self.values:
            self._drop(key)
        return True


class CreateOnATombstoneChecksThenWrites(DictKV):
    """Bug: a deleted key's row stays, marked deleted; a create-only put of such a key
    takes a second path (a read of the mark, then an ``UPDATE``) in two steps: creates of
    a deleted key racing each other all win. A key never written is created atomically."""

    def __init__(self) -> None:
        super().__init__()
        self.marked: set[str] = set()

    def _drop(self, name: str) -> None:
        super()._drop(name)
        self.marked.add(name)

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if mode != "create" or key not in self.marked:
            return await super()._put(key, data, mode)
        await self._round_trip()
        self._refuse(key, self.values.get(key), mode)
        await self._round_trip()  # the UPDATE of the marked row
        version = self._mint(key, data)
        self._store(key, data, version)
        return version


class DeleteKeepsATombstone(DictKV):
    """Bug: a delete is soft: the key keeps its last version as a tombstone, and an if-match
    put of that version writes it again (a ``deleted`` flag on the row, checked by reads
    but not by the conditional write)."""

    def __init__(self) -> None:
        super().__init__()
        self.tombstones: dict[str, str] = {}

    def _refuse(self, key: str, current: tuple[bytes, str] | None, mode: PutMode) -> None:
        tombstone = self.tombstones.get(key) if current is None else None
        if isinstance(mode, IfMatch) and tombstone == mode.version:
            return
        super()._refuse(key, current, mode)

    def _drop(self, name: str) -> None:
        self.tombstones[name] = self.values[name][1]
        super()._drop(name)


class DeleteManyReadsItsKeysTwice(DictKV):
    """Bug: ``delete_many`` checks every key in one pass over ``keys`` and deletes in a
    second (its own, not `StorageBase`'s): given a generator, the second pass finds
    nothing, and nothing is deleted."""

    async def delete_many(self, keys: Iterable[str]) -> int:
        self._check_open()
        for key in keys:
            validate_key(key)
        return await self._delete_many(list(keys)) if keys else 0


class DeleteManyStopsAtMissing(DictKV):
    """Bug: delete_many stops at the first key that does not exist (a loop that breaks when
    a delete reports nothing deleted): the keys after it stay."""

    async def _delete_many(self, keys: list[str]) -> int:
        existed = 0
        for key in keys:
            if not await self._delete(key, None):
                break
            existed += 1
        return existed


DELETE_BATCH = 1000
"""The most keys one batch request of `BatchDeleteKV`'s backend takes (S3's DeleteObjects)."""


class BatchDeleteKV(DictKV):
    """Correct: ``delete_many`` sends the keys in requests of at most `DELETE_BATCH` keys,
    to a backend that refuses a larger one (as S3's ``DeleteObjects`` answers
    ``MalformedXML``) and answers how many of them existed."""

    def _delete_batch(self, names: list[str]) -> int:
        """The backend's batch request."""
        if len(names) > DELETE_BATCH:
            raise StorageUnavailable(
                f"MalformedXML: {len(names)} keys in one request (the backend takes {DELETE_BATCH})"
            )
        existed = 0
        for name in names:
            if name in self.values:
                self._drop_in_batch(name)
                existed += 1
        return existed

    def _drop_in_batch(self, name: str) -> None:
        """What a batch request removes of ``name``."""
        self._drop(name)

    def _batches(self, keys: list[str]) -> list[list[str]]:
        return [keys[i : i + DELETE_BATCH] for i in range(0, len(keys), DELETE_BATCH)]

    async def _delete_many(self, keys: list[str]) -> int:
        existed = 0
        for batch in self._batches(keys):
            await self._round_trip()
            existed += self._delete_batch(batch)
        return existed


class DeleteManyInOneRequest(BatchDeleteKV):
    """Bug: ``delete_many`` sends every key in one request, which the backend refuses above
    its limit (S3's ``DeleteObjects`` takes 1000 keys, an Azure Blob batch 256)."""

    def _batches(self, keys: list[str]) -> list[list[str]]:
        return [keys]


class DeleteManyDropsTheLastBatch(BatchDeleteKV):
    """Bug: ``delete_many`` cuts ``len(keys) // 1000 or 1`` batches: past 1000 keys, the
    keys after the last full batch are neither deleted nor counted."""

    def _batches(self, keys: list[str]) -> list[list[str]]:
        full = len(keys) // DELETE_BATCH or 1
        return [keys[i * DELETE_BATCH : (i + 1) * DELETE_BATCH] for i in range(full)]


class DeleteManyChecksEachBatch(BatchDeleteKV):
    """Bug: ``delete_many`` checks the keys of each batch request just before sending it
    (the check inside the loop over batches, not before it): an invalid key in a later
    batch is refused once the batches before it were deleted."""

    async def delete_many(self, keys: Iterable[str]) -> int:
        self._check_open()
        existed = 0
        for batch in self._batches(list(keys)):
            for key in batch:
                validate_key(key)
            await self._round_trip()
            existed += self._delete_batch(batch)
        return existed


class DeleteManyCountsTheLastBatch(BatchDeleteKV):
    """Bug: ``delete_many`` returns the count of its last batch request (``existed = ...``
    where ``existed += ...`` was meant): past 1000 keys, the count is short."""

    async def _delete_many(self, keys: list[str]) -> int:
        existed = 0
        for batch in self._batches(keys):
            await self._round_trip()
            existed = self._delete_batch(batch)
        return existed


class XmlBatchDeleteKV(BatchDeleteKV):
    """Correct: each batch request is an XML body (S3's ``DeleteObjects``) that the backend
    parses; the keys in it are escaped."""

    def _body(self, names: list[str]) -> str:
        objects = "".join(f"<Object><Key>{xml_escape(n)}</Key></Object>" for n in names)
        return f"<Delete>{objects}</Delete>"

    def _delete_batch(self, names: list[str]) -> int:
        try:
            parsed = [
                key.text or "" for key in ElementTree.fromstring(self._body(names)).iter("Key")
            ]
        except ElementTree.ParseError as exc:
            raise StorageUnavailable(f"MalformedXML: {exc}") from None
        return super()._delete_batch(parsed)


class DeleteManyXmlUnescaped(XmlBatchDeleteKV):
    """Bug: the ``DeleteObjects`` body is built with an f-string, the keys not escaped: a
    key with ``&`` or ``<`` makes the body malformed (the batch fails), one with ``&amp;``
    names another key."""

    def _body(self, names: list[str]) -> str:
        return "<Delete>" + "".join(f"<Object><Key>{n}</Key></Object>" for n in names) + "</Delete>"


class PathBatchDeleteKV(BatchDeleteKV):
    """Correct: each key is a sub-request of the batch (an Azure Blob batch), ``DELETE``
    of a URL path that the backend splits and decodes; the keys in it are encoded."""

    def _line(self, name: str) -> str:
        return f"DELETE /container/{url_quote(name, safe='/')} HTTP/1.1"

    def _delete_batch(self, names: list[str]) -> int:
        paths = []
        for name in names:
            parts = self._line(name).split(" ")
            if len(parts) != 3:
                raise StorageUnavailable(f"400 Bad Request: {self._line(name)!r}")
            path = urlsplit(parts[1]).path
            paths.append(url_unquote(path.removeprefix("/container/")))
        return super()._delete_batch(paths)


class DeleteManyPathUnencoded(PathBatchDeleteKV):
    """Bug: the sub-request's path is built with an f-string, the key not encoded: a key
    with a space breaks the request line, one with ``?`` or ``#`` loses its end, one with
    ``%41`` names another key."""

    def _line(self, name: str) -> str:
        return f"DELETE /container/{name} HTTP/1.1"


class SettlingBatchDeleteKV(BatchDeleteKV):
    """Correct: each batch request of ``delete_many`` takes 5 ms on the wire and is sent as
    a task of its own (so that a cancellation never cuts one mid-way); a cancelled
    ``delete_many`` waits for the request in flight (milliseconds) before it re-raises,
    so nothing of it lands after ``CancelledError`` (it declares
    ``settles_cancelled_writes``)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight: set[asyncio.Future[int]] = set()

    async def _send(self, batch: list[str]) -> int:
        await asyncio.sleep(0.005)  # the request and its reply
        return self._delete_batch(batch)

    async def _settle(self, request: asyncio.Future[int]) -> None:
        """Wait until ``request`` has ended, cancelled again or not."""
        while not request.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({request})

    async def _delete_many(self, keys: list[str]) -> int:
        existed = 0
        for batch in self._batches(keys):
            request = asyncio.ensure_future(self._send(batch))
            self.in_flight.add(request)
            request.add_done_callback(self.in_flight.discard)
            try:
                existed += await asyncio.shield(request)
            except asyncio.CancelledError:
                await self._settle(request)
                raise
        return existed

    async def _aclose(self) -> None:
        if self.in_flight:
            await asyncio.wait(set(self.in_flight))


class BatchLandsAfterCancel(SettlingBatchDeleteKV):
    """Bug: ``delete_many`` awaits its batch request through ``asyncio.shield`` and
    re-raises ``CancelledError`` at once: the request in flight still deletes its keys
    milliseconds later, though the adapter declares ``settles_cancelled_writes`` (its
    single ``delete`` settles; the batch path was added later)."""

    async def _settle(self, request: asyncio.Future[int]) -> None:
        return


# -- get and values -----------------------------------------------------------------------------
COMPRESS_ABOVE = 1024
"""Values longer than this are stored compressed by `FlaggedCompressionKV` and its mutant."""


class FlaggedCompressionKV(DictKV):
    """Correct: a value over 1 KiB is stored zlib-compressed, and a flag byte before
    every stored value says whether it is."""

    def _store(self, name: str, data: bytes, version: str) -> None:
        packed = b"z" + zlib.compress(data) if len(data) > COMPRESS_ABOVE else b"-" + data
        super()._store(name, packed, version)

    def _unpack(self, stored: bytes) -> bytes:
        return zlib.decompress(stored[1:]) if stored[:1] == b"z" else stored[1:]

    async def _get(self, key: str) -> GetResult:
        found = await super()._get(key)
        return GetResult(self._unpack(found.data), found.version)


class SniffsCompression(FlaggedCompressionKV):
    """Bug: a value over 1 KiB is stored zlib-compressed, and a read decompresses any
    stored value that starts with zlib's header (``78 9c``), a user's small value too."""

    def _store(self, name: str, data: bytes, version: str) -> None:
        packed = zlib.compress(data) if len(data) > COMPRESS_ABOVE else data
        DictKV._store(self, name, packed, version)

    def _unpack(self, stored: bytes) -> bytes:
        return zlib.decompress(stored) if stored[:2] == b"\x78\x9c" else stored


class GetMissingReturnsEmpty(DictKV):
    """Bug: get of a missing key returns an empty value (``dict.get(key, b"")``)."""

    async def _get(self, key: str) -> GetResult:
        await self._round_trip()
        return GetResult(*self.values.get(key, (b"", "0")))


class EmptyValueReadsAsMissing(DictKV):
    """Bug: ``if not data: raise NotFound``: an empty value is read as a missing key."""

    async def _get(self, key: str) -> GetResult:
        await self._round_trip()
        found = self.values.get(key)
        if not found or not found[0]:
            raise NotFound(f"key {key!r} not found")
        return GetResult(*found)


class CreateTakesAnEmptyValueForMissing(DictKV):
    """Bug: the create-only check reads the stored value and tests it for truth (``if
    current: raise PreconditionFailed``, where ``GET`` answered ``b""``): a create-only put
    of a key holding an empty value overwrites it."""

    def _refuse(self, key: str, current: tuple[bytes, str] | None, mode: PutMode) -> None:
        if mode == "create" and current is not None and not current[0]:
            return
        super()._refuse(key, current, mode)


class IfMatchTakesAnEmptyValueForMissing(DictKV):
    """Bug: the compare-and-set reads the stored value and takes an empty one for a missing
    key (``if not current: raise PreconditionFailed``, where ``GET`` answered ``b""``): an
    if-match put of a key holding an empty value is refused, with its current version too."""

    def _refuse(self, key: str, current: tuple[bytes, str] | None, mode: PutMode) -> None:
        if isinstance(mode, IfMatch) and current is not None and not current[0]:
            raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
        super()._refuse(key, current, mode)


class SoftDeleteKV(DictKV):
    """Correct: a delete is soft (on a backend whose conditional write is its only atomic
    way to delete on a condition): the row stays, its value replaced by the JSON ``null``
    and a ``deleted`` flag set; reads, listings and conditions take a flagged row for a
    missing key."""

    TOMBSTONE: ClassVar[bytes] = b"null"

    def __init__(self) -> None:
        super().__init__()
        self.deleted: set[str] = set()

    def _is_deleted(self, name: str) -> bool:
        return name in self.deleted

    def _live(self, name: str) -> tuple[bytes, str] | None:
        row = self.values.get(name)
        return None if row is None or self._is_deleted(name) else row

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._round_trip()
        self._refuse(key, self._live(key), mode)
        version = self._mint(key, data)
        self.deleted.discard(key)
        self._store(key, data, version)
        return version

    async def _get(self, key: str) -> GetResult:
        await self._round_trip()
        row = self._live(key)
        if row is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(*row)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await self._round_trip()
        row = self._live(key)
        if row is None:
            return False
        if if_match is not None and row[1] != if_match:
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        self.values[key] = (self.TOMBSTONE, row[1])
        self.deleted.add(key)
        return True

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        after = cursor if cursor is not None else start_after
        keys = (k for k in self._walk(prefix, after) if self._live(k) is not None)
        page = list(itertools.islice(keys, limit))
        return ListPage(page, page[-1] if len(page) == limit else None)


class TombstoneToldByItsValue(SoftDeleteKV):
    """Bug: the row of a deleted key is told by its value, the JSON ``null``, without a
    flag: a key whose value is ``b"null"`` is missing to every read, listing and
    condition."""

    def _is_deleted(self, name: str) -> bool:
        row = self.values.get(name)
        return row is not None and row[0] == self.TOMBSTONE


class StripsTrailingNuls(DictKV):
    """Bug: values are stored as C strings: trailing NUL bytes are stripped."""

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data.rstrip(b"\0"), version)


class TruncatesAt64KiB(DictKV):
    """Bug: a fixed 64 KiB buffer per value: longer values are cut."""

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data[: 64 * 1024], version)


class DropsPartialChunkAbove1MiB(DictKV):
    """Bug: values over 1 MiB are sent in 1 MiB chunks and the last partial chunk is lost
    (``range(0, len(data) // CHUNK)``): an exact multiple of 1 MiB survives."""

    CHUNK = 1024 * 1024

    def _store(self, name: str, data: bytes, version: str) -> None:
        if len(data) > self.CHUNK:
            chunks = [
                data[i * self.CHUNK : (i + 1) * self.CHUNK] for i in range(len(data) // self.CHUNK)
            ]
            data = b"".join(chunks)
        super()._store(name, data, version)


# -- keys ---------------------------------------------------------------------------------------
class CaseFoldsKeys(DictKV):
    """Bug: keys are lower-cased (a case-insensitive backend): 'A/b' and 'a/b' are one."""

    def _name(self, key: str) -> str:
        return key.lower()


class NormalizesKeysNFC(DictKV):
    """Bug: keys are NFC-normalized: 'café' written as NFD and as NFC are one key."""

    def _name(self, key: str) -> str:
        return unicodedata.normalize("NFC", key)


class ParentLostToAChildAtOnce(DictKV):
    """Bug (SeaweedFS, with object names that are the keys): objects are files in
    directories, and a put of ``k/x`` makes a directory ``k`` while a put of the file ``k``
    is in flight, which then is lost: the put of ``k`` answered its version, and ``k`` is
    gone. Written one after the other, both stay."""

    def __init__(self) -> None:
        super().__init__()
        self.writing: set[str] = set()  # keys whose put is in flight
        self.lost: set[str] = set()  # ...of which a key below was written meanwhile

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        for other in self.writing:
            if other.startswith(key + "/"):
                self.lost.add(key)
            elif key.startswith(other + "/"):
                self.lost.add(other)
        self.writing.add(key)
        try:
            version = await super()._put(key, data, mode)
        finally:
            self.writing.discard(key)
        if key in self.lost:
            self.lost.discard(key)
            self._drop(self._name(key))
        return version


# -- listing ------------------------------------------------------------------------------------
MERGED_PARTITIONS = 64
"""The most partitions (first segments) that one page of `PartitionedListingKV` merges."""


class PartitionedListingKV(DictKV):
    """Correct: keys are partitioned by their first segment (a partition key, a directory,
    a scope); a page merges at most `MERGED_PARTITIONS` partitions, and when it stops
    there short of a full page, its cursor is the last key it took."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        page: list[str] = []
        partitions: list[str] = []
        stopped = False
        for key in self._walk(prefix, cursor if cursor is not None else start_after):
            partition = key.split("/", 1)[0]
            if not partitions or partitions[-1] != partition:
                if len(partitions) == MERGED_PARTITIONS:
                    stopped = True
                    break
                partitions.append(partition)
            page.append(key)
            if len(page) == limit:
                break
        return ListPage(page, self._cursor(page, limit, stopped))

    def _cursor(self, page: list[str], limit: int, stopped: bool) -> str | None:
        return page[-1] if page and (len(page) == limit or stopped) else None


class ListingStopsAtItsPartitionLimit(PartitionedListingKV):
    """Bug: a page that stops at its 64 partitions short of ``limit`` keys gives no cursor
    (a page shorter than asked is taken for the end): a listing that spans more than 64
    partitions ends after the 64th."""

    def _cursor(self, page: list[str], limit: int, stopped: bool) -> str | None:
        return page[-1] if len(page) == limit else None


ANSWER_BYTES = 1024 * 1024
"""The most bytes of items (key and value) one answer of `ByteCappedListingKV`'s backend
holds: DynamoDB's Query and Scan stop at 1 MB."""


class ByteCappedListingKV(DictKV):
    """Correct: the backend answers a listing with whole items, at most ``limit`` of them or
    `ANSWER_BYTES` of keys and values (at least one), and says whether it stopped early
    (a LastEvaluatedKey); the page's cursor comes from that, not from its length."""

    counts_values: ClassVar[bool] = True  # False: a keys-only answer (the names alone)

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        page: list[str] = []
        size, more = 0, False
        for key in self._walk(prefix, cursor if cursor is not None else start_after):
            if len(page) == limit:
                more = True
                break
            item = len(key.encode()) + (len(self.values[key][0]) if self.counts_values else 0)
            if page and size + item > ANSWER_BYTES:
                more = True
                break
            page.append(key)
            size += item
        return ListPage(page, self._cursor(page, limit, more))

    def _cursor(self, page: list[str], limit: int, more: bool) -> str | None:
        return page[-1] if page and more else None


class ShortPageEndsTheListing(ByteCappedListingKV):
    """Bug: a page holding fewer keys than asked for is taken for the last one (the
    backend's LastEvaluatedKey ignored): behind a large value, a page cut at 1 MB ends
    the listing."""

    def _cursor(self, page: list[str], limit: int, more: bool) -> str | None:
        return page[-1] if len(page) == limit else None


class KeysOnlyByteCappedListingKV(ByteCappedListingKV):
    """Correct: as `ByteCappedListingKV`, from a keys-only answer (an index that projects the
    keys), asked for 10,000 keys a page (a query without a limit): at most `ANSWER_BYTES`
    of key names a page."""

    counts_values = False
    page_size = 10_000


class ShortKeysOnlyPageEndsTheListing(ShortPageEndsTheListing):
    """Bug: as `ShortPageEndsTheListing`, from a keys-only answer: a listing of more than a
    megabyte of key names (1,025 keys of 1 KiB) ends after the first megabyte."""

    counts_values = False
    page_size = 10_000


class KeysComparedPadSpace(DictKV):
    """Bug: keys compare as a SQL ``PAD SPACE`` collation does (SQL Server's ``=`` always,
    MySQL's older collations): trailing spaces are ignored, so ``'a'`` finds the row of
    ``'a '``, which keeps the name first written."""

    def _name(self, key: str) -> str:
        bare = key.rstrip(" ")
        return next((k for k in self.keys if k.rstrip(" ") == bare), key)


class KeysLoseTrailingDots(DictKV):
    """Bug: each segment's name loses its trailing dots, as Windows file names and some URL
    normalizations do: ``'x.'`` finds the row of ``'x'`` (a segment of dots alone is kept),
    which keeps the name first written."""

    def _name(self, key: str) -> str:
        bare = "/".join(p.rstrip(".") or p for p in key.split("/"))
        return next(
            (k for k in self.keys if "/".join(p.rstrip(".") or p for p in k.split("/")) == bare),
            key,
        )


class ExtensionNotDoubled(DictKV):
    """Bug: each value is stored in a file named ``<key>.json``, unless the key already ends
    with ``.json`` (so as not to double the extension): ``'x'`` and ``'x.json'`` name one
    file, which keeps the key first written."""

    def _name(self, key: str) -> str:
        def file(k: str) -> str:
            return k if k.endswith(".json") else f"{k}.json"

        return next((k for k in self.keys if file(k) == file(key)), key)


class LockedKV(DictKV):
    """Correct: every put and get holds one ``asyncio.Lock`` (``async with``: released
    whatever ends the call, a cancellation too)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = asyncio.Lock()

    async def _locked(self, call: Callable[[], Awaitable[T]]) -> T:
        async with self.lock:
            return await call()

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        return await self._locked(functools.partial(DictKV._put, self, key, data, mode))

    async def _get(self, key: str) -> GetResult:
        return await self._locked(functools.partial(DictKV._get, self, key))


class LockKeptByACancelledCall(LockedKV):
    """Bug: the lock is released after the call and on its errors, but not in a
    ``finally``: a call cancelled while it waits keeps the lock, and every later call
    waits for it forever."""

    async def _locked(self, call: Callable[[], Awaitable[T]]) -> T:
        await self.lock.acquire()
        try:
            result = await call()
        except Exception:
            self.lock.release()
            raise
        self.lock.release()  # a CancelledError (a BaseException) skips both releases
        return result


class ListsInInsertionOrder(DictKV):
    """Bug: a listing iterates the dict (insertion order), not the sorted keys."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        offset = cursor or 0
        keys = [
            k
            for k in self.values
            if k.startswith(prefix) and (start_after is None or k > start_after)
        ]
        page = keys[offset : offset + limit]
        return ListPage(page, offset + limit if offset + limit < len(keys) else None)


class StartAfterInclusive(DictKV):
    """Bug: start_after is inclusive (``bisect_left``)."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        keys = self.keys
        if cursor is not None:
            lo = bisect.bisect_right(keys, cursor)
        else:
            lo = bisect.bisect_left(keys, start_after) if start_after is not None else 0
        lo = max(lo, bisect.bisect_left(keys, prefix))
        page = [k for k in keys[lo : lo + limit] if k.startswith(prefix)]
        return ListPage(page, page[-1] if len(page) == limit else None)


class PagesByOffset(DictKV):
    """Bug: the cursor of a listing is an offset into the prefix's keys: a key inserted or
    deleted before it between two pages shifts every later key by one."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        keys = [k for k in self.keys if k.startswith(prefix)]
        if start_after is not None:
            keys = keys[bisect.bisect_right(keys, start_after) :]
        offset = cursor or 0
        page = keys[offset : offset + limit]
        return ListPage(page, offset + limit if offset + limit < len(keys) else None)


class StopsAfterFirstPage(DictKV):
    """Bug: the cursor is only set when the page was cut by the caller's limit: a listing
    longer than one backend page ends after the first page."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        page = await super()._list_page(prefix, start_after, cursor, limit)
        return ListPage(page.keys, None)


class PageRepeatsBoundaryKey(DictKV):
    """Bug: the next page starts at the cursor key itself (``>=``), so each page repeats it."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        keys = self.keys
        if cursor is not None:
            lo = bisect.bisect_left(keys, cursor)
        else:
            lo = bisect.bisect_right(keys, start_after) if start_after is not None else 0
        lo = max(lo, bisect.bisect_left(keys, prefix))
        page = [k for k in keys[lo : lo + limit] if k.startswith(prefix)]
        return ListPage(page, page[-1] if len(page) == limit else None)


class IndexedListingKV(DictKV):
    """Correct: listings read an index apart from the items (a DynamoDB GSI, an SQL index
    table), whose rows carry each key's version. A new key's item and index row are
    written in one transaction; an overwrite writes the item, then updates its index row
    in place in a second request (the row's version changes, the row stays): the key is
    listed throughout."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._round_trip()
        current = self.values.get(key)
        self._refuse(key, current, mode)
        version = self._mint(key, data)
        self._store(key, data, version)  # a new key: its item and its index row
        if current is not None:
            await self._reindex(key)
        return version

    async def _reindex(self, key: str) -> None:
        """Bring the index row of ``key``, overwritten, to its new version."""
        await self._round_trip()  # UPDATE index SET version = ... WHERE key = ...

    def _drop(self, name: str) -> None:
        del self.values[name]
        i = bisect.bisect_left(self.keys, name)
        if i < len(self.keys) and self.keys[i] == name:
            del self.keys[i]


class IndexRowReplacedOnOverwrite(IndexedListingKV):
    """Bug: the index is keyed on (key, version), so an overwrite deletes the old index row
    and inserts the new one, in two requests and no transaction: a listing that runs
    between the two misses a key that exists all along, and a put cancelled between them
    leaves the key readable but never listed."""

    async def _reindex(self, key: str) -> None:
        i = bisect.bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            del self.keys[i]  # DELETE FROM index WHERE key = ... AND version = old
        await self._round_trip()
        i = bisect.bisect_left(self.keys, key)
        if key in self.values and (i == len(self.keys) or self.keys[i] != key):
            self.keys.insert(i, key)  # INSERT INTO index VALUES (key, new version)


class StagedUploadsKV(DictKV):
    """Correct: a put uploads its value to a staging record in the keys' name space first
    (one request), then commits it under the key, checking its condition, and removes the
    staging record; staging records are named so that no key can be one (they start with
    ``/``), and a listing leaves them out before it counts its page."""

    STAGE: ClassVar[str] = "/.tmp-"

    def __init__(self) -> None:
        super().__init__()
        self.staged = itertools.count(1)

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._round_trip()
        stage = f"{self.STAGE}{next(self.staged):08d}"
        self._store(stage, data, "staged")
        try:
            await self._round_trip()  # the upload
            self._refuse(key, self.values.get(key), mode)
            version = self._mint(key, data)
            self._store(key, data, version)
            return version
        finally:
            self._drop(stage)

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        after = cursor if cursor is not None else start_after
        keys = (k for k in self._walk(prefix, after) if not k.startswith(self.STAGE))
        page = list(itertools.islice(keys, limit))
        return ListPage(page, page[-1] if len(page) == limit else None)


class StagingRecordsNamedLikeKeys(StagedUploadsKV):
    """Bug: staging records are named ``.tmp-N``, which a key can be too (as a files adapter
    names its temporary files, and skips them when it lists): every key that starts with
    ``.tmp-`` is left out of listings."""

    STAGE = ".tmp-"


class IndexRecordNamedLikeAKey(DictKV):
    """Bug: the adapter keeps a record of its own in the keys' name space, ``_index`` (how
    many keys there are, rewritten by every write), and leaves it out of listings by that
    name: a key ``_index`` is overwritten by the adapter and never listed."""

    RECORD: ClassVar[str] = "_index"

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data, version)
        if name != self.RECORD:
            DictKV._store(self, self.RECORD, b"%d" % len(self.values), "index")

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        after = cursor if cursor is not None else start_after
        keys = (k for k in self._walk(prefix, after) if k != self.RECORD)
        page = list(itertools.islice(keys, limit))
        return ListPage(page, page[-1] if len(page) == limit else None)


class PrefixMatchesWholeSegments(DictKV):
    """Bug: the prefix is matched on whole segments: list('a/b') finds 'a/b/c' but not 'a/bc'."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        after = cursor if cursor is not None else start_after
        head = prefix.rstrip("/")
        keys = [
            k
            for k in self.keys
            if (not head or k == head or k.startswith(head + "/")) and (after is None or k > after)
        ]
        page = keys[:limit]
        return ListPage(page, page[-1] if len(keys) > limit else None)


class _MatchesPattern(DictKV):
    """A listing that filters every key with a pattern made from the prefix."""

    def _matches(self, prefix: str, key: str) -> bool:
        raise NotImplementedError

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._round_trip()
        after = cursor if cursor is not None else start_after
        keys = [k for k in self.keys if self._matches(prefix, k) and (after is None or k > after)]
        page = keys[:limit]
        return ListPage(page, page[-1] if len(keys) > limit else None)


class ListMatchesGlob(_MatchesPattern):
    """Bug: the prefix is matched as a glob (Redis ``SCAN MATCH prefix*`` unescaped): ``*``,
    ``?`` and ``[...]`` in a prefix are wildcards."""

    def _matches(self, prefix: str, key: str) -> bool:
        return fnmatch.fnmatchcase(key, prefix + "*")


class ListMatchesRegex(_MatchesPattern):
    """Bug: the prefix is matched as a regular expression (a document store's ``$regex:
    '^' + prefix`` unescaped): ``.``, ``+`` and ``(`` in a prefix are not characters."""

    def _matches(self, prefix: str, key: str) -> bool:
        try:
            return re.match(prefix, key) is not None
        except re.error:
            return False


class ContinuationOnTheStorage(DictKV):
    """Bug: a listing's continuation is kept on the storage object (one paginator per
    client, or one database cursor that every listing reuses): two listings read in turn
    hand each other their next pages."""

    def __init__(self) -> None:
        super().__init__()
        self.continuation: Any = None

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        if cursor is not None:
            cursor = self.continuation
        page = await super()._list_page(prefix, start_after, cursor, limit)
        self.continuation = page.cursor
        return page


class CachedListingsKV(DictKV):
    """Correct: keeps each listing page it answered (a cache of directory reads, or of a
    slow index) and forgets them all on every write that changes a key."""

    def __init__(self) -> None:
        super().__init__()
        self.pages: dict[tuple[str, str | None, Any, int], ListPage] = {}

    def _forget(self, write: str) -> None:
        """A key was changed by ``write`` (``overwrite``, ``create``, ``if-match put``,
        ``delete``, ``delete_many``)."""
        self.pages.clear()

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        kept = self.pages.get((prefix, start_after, cursor, limit))
        if kept is not None:
            await self._round_trip()
            return kept
        page = await super()._list_page(prefix, start_after, cursor, limit)
        self.pages[prefix, start_after, cursor, limit] = page
        return page

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        version = await super()._put(key, data, mode)
        self._forget("if-match put" if isinstance(mode, IfMatch) else mode)
        return version

    async def _delete(self, key: str, if_match: str | None) -> bool:
        existed = await super()._delete(key, if_match)
        self._forget("delete")
        return existed

    async def _delete_many(self, keys: list[str]) -> int:
        await self._round_trip()
        existed = 0
        for name in dict.fromkeys(keys):  # the backend's batch call, not _delete
            if name in self.values:
                self._drop(name)
                existed += 1
        self._forget("delete_many")
        return existed


class ListingCacheKeptByCreate(CachedListingsKV):
    """Bug: the cached listings are forgotten on the overwrite path but not on the
    create-only one (a separate ``put_if_absent`` call): a listing after a key was created
    answers from before it."""

    def _forget(self, write: str) -> None:
        if write != "create":
            super()._forget(write)


class ListingCacheKeptByDeleteMany(CachedListingsKV):
    """Bug: the cached listings are forgotten by ``delete`` but not by ``delete_many``
    (its batch call bypasses the per-key path): a listing after a batch delete still
    shows the keys."""

    def _forget(self, write: str) -> None:
        if write != "delete_many":
            super()._forget(write)


# -- capabilities -------------------------------------------------------------------------------
class DeclaresDurableInMemory(DictKV):
    """Bug: declares ``durable`` (the author's production backend is), but keeps the data in
    the object: reopened at the same location, it is gone."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=True, shared=False, settles_cancelled_writes=True
    )

    def __init__(self, location: str | None = None) -> None:
        super().__init__()
        self.location = location


class DurableDictKV(DictKV):
    """Correct twin of :class:`DeclaresDurableInMemory`: one dataset per location."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=True, shared=False, settles_cancelled_writes=True
    )
    _by_location: ClassVar[dict[str, tuple[dict[str, tuple[bytes, str]], list[str]]]] = {}

    def __init__(self, location: str | None = None) -> None:
        super().__init__()
        if location is not None:
            self.values, self.keys = self._by_location.setdefault(location, ({}, []))
        self.counter = _GLOBAL_COUNTER


_GLOBAL_COUNTER = itertools.count(1)


class ListingIndexBuiltByTheFirstWrite(DurableDictKV):
    """Bug: the sorted key index that listings read is kept in the storage object and
    built from the durable data by its first write (a rebuild hooked on the write path):
    a fresh storage's listing before any write finds nothing."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self.durable_keys, self.keys = self.keys, []

    def _build(self) -> None:
        self.keys = self.durable_keys

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        self._build()
        return await super()._put(key, data, mode)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        self._build()
        return await super()._delete(key, if_match)


class LargeValuesSpilledToTheProcess(DurableDictKV):
    """Bug: a value over 256 KiB is spilled to a temporary area of the storage object (a
    temporary file deleted at close) and the durable store holds a reference to it: after
    a reopen the reference leads nowhere, and the key reads as missing."""

    SPILL = 256 * 1024

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self.spilled: dict[str, bytes] = {}

    def _store(self, name: str, data: bytes, version: str) -> None:
        if len(data) > self.SPILL:
            self.spilled[version] = data
            data = b"spilled:" + version.encode()
        super()._store(name, data, version)

    async def _get(self, key: str) -> GetResult:
        found = await super()._get(key)
        if not found.data.startswith(b"spilled:"):
            return found
        data = self.spilled.get(found.version)
        if data is None:
            raise NotFound(f"key {key!r} not found (its spilled value is gone)")
        return GetResult(data, found.version)


class VersionCounterPerOpen(DurableDictKV):
    """Bug: versions come from a counter kept in the storage object (the data is durable,
    the counter is not): after a reopen it starts again at 1, and repeats versions that
    keys had before."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self.counter = itertools.count(1)


class SharedDictKV(DictKV):
    """Correct twin of :class:`DeclaresSharedPrivate`: clients of one location share the data."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=True, settles_cancelled_writes=True
    )
    _by_location: ClassVar[dict[str, tuple[dict[str, tuple[bytes, str]], list[str]]]] = {}

    def __init__(self, location: str | None = None) -> None:
        super().__init__()
        if location is not None:
            self.values, self.keys = self._by_location.setdefault(location, ({}, []))
        self.counter = _GLOBAL_COUNTER


class VersionCounterPerClient(SharedDictKV):
    """Bug: the clients share the data, but each mints versions from a counter of its own
    (a per-process sequence): two clients give one key the same version, and a stale
    if-match of one client matches the other's write."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self.counter = itertools.count(1)


class ChecksThenWritesUnderAClientLock(SharedDictKV):
    """Bug: an if-match put and an if-match delete read the version, then write, in two
    round trips, under a lock of the storage object: no call of the same client comes
    between them, but another client's does, and two clients' swaps both win."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self._lock = asyncio.Lock()

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if not isinstance(mode, IfMatch):
            return await super()._put(key, data, mode)
        async with self._lock:
            await self._round_trip()
            self._refuse(key, self.values.get(key), mode)
            await self._round_trip()
            version = self._mint(key, data)
            self._store(key, data, version)
            return version

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if if_match is None:
            return await super()._delete(key, if_match)
        async with self._lock:
            return await DeleteIfMatchChecksThenDeletes._delete(self, key, if_match)  # type: ignore[arg-type]


class VersionedBatchDelete(SharedDictKV):
    """Bug: ``delete_many`` reads each key's version, then deletes the keys still at the
    version it read, in a second round trip (a batch of conditional deletes, so as never
    to delete a newer write), and counts those: a key another client overwrote between
    the two is neither deleted nor counted, though it was present throughout."""

    async def _delete_many(self, keys: list[str]) -> int:
        await self._round_trip()
        seen = {k: self.values[k][1] for k in dict.fromkeys(keys) if k in self.values}
        await self._round_trip()
        existed = 0
        for key, version in seen.items():
            current = self.values.get(key)
            if current is not None and current[1] == version:
                self._drop(key)
                existed += 1
        return existed


class ServerCursorsKV(SharedDictKV):
    """Correct: a listing's continuation is a cursor that the backend keeps (a table of the
    location, which every client reads), named by a number from a counter the clients
    share."""

    _cursor_tables: ClassVar[dict[str, dict[str, str]]] = {}
    _shared_ids: ClassVar[Iterator[int]] = itertools.count(1)

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self.cursors = {} if location is None else self._cursor_tables.setdefault(location, {})

    def _cursor_name(self) -> str:
        return f"c{next(self._shared_ids)}"

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = start_after if cursor is None else self.cursors[cursor]
        page = await super()._list_page(prefix, after, None, limit)
        if page.cursor is None:
            return page
        name = self._cursor_name()
        self.cursors[name] = page.cursor
        return ListPage(page.keys, name)


class ServerCursorsNamedPerClient(ServerCursorsKV):
    """Bug: the backend's cursors are named by a counter of the client (``c1``, ``c2``...,
    a sequence number per connection): two clients name theirs alike, and one client's
    next page is read from where the other client's listing stopped."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self._own_ids = itertools.count(1)

    def _cursor_name(self) -> str:
        return f"c{next(self._own_ids)}"


class _ReadCache:
    """What gets and listing pages answered, kept for the next same call."""

    def __init__(self) -> None:
        self.gets: dict[str, GetResult] = {}
        self.pages: dict[tuple[str, str | None, Any, int], ListPage] = {}


class CachedReadsKV(SharedDictKV):
    """Correct: keeps what gets and listing pages answered in a cache that every client of
    its location uses (a cache server in front of the backend), and each client's writes
    forget what they change there."""

    cache_gets: ClassVar[bool] = True
    cache_pages: ClassVar[bool] = True
    _caches: ClassVar[dict[str, _ReadCache]] = {}

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self.cache = self._cache_of(location)

    def _cache_of(self, location: str | None) -> _ReadCache:
        return _ReadCache() if location is None else self._caches.setdefault(location, _ReadCache())

    def _forget(self, key: str) -> None:
        self.cache.gets.pop(key, None)
        self.cache.pages.clear()

    async def _get(self, key: str) -> GetResult:
        kept = self.cache.gets.get(key) if self.cache_gets else None
        if kept is not None:
            await self._round_trip()
            return kept
        got = await super()._get(key)
        if self.cache_gets:
            self.cache.gets[key] = got
        return got

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        kept = self.cache.pages.get((prefix, start_after, cursor, limit))
        if kept is not None and self.cache_pages:
            await self._round_trip()
            return kept
        page = await super()._list_page(prefix, start_after, cursor, limit)
        if self.cache_pages:
            self.cache.pages[prefix, start_after, cursor, limit] = page
        return page

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        try:
            return await super()._put(key, data, mode)
        finally:
            self._forget(key)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        try:
            return await super()._delete(key, if_match)
        finally:
            self._forget(key)


class GetsCachedPerClient(CachedReadsKV):
    """Bug: each client object keeps what its gets answered, and forgets it on its own
    writes only (a read cache in the client, as a process-local LRU): a get after another
    client's write answers from before it."""

    cache_pages = False

    def _cache_of(self, location: str | None) -> _ReadCache:
        return _ReadCache()


class ListingsCachedPerClient(CachedReadsKV):
    """Bug: each client object keeps the listing pages it read, and forgets them on its
    own writes only: a listing after another client created or deleted a key answers from
    before it."""

    cache_gets = False

    def _cache_of(self, location: str | None) -> _ReadCache:
        return _ReadCache()


class DeclaresSharedPrivate(DictKV):
    """Bug: declares ``shared``, but every client object has data of its own."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=True, settles_cancelled_writes=True
    )

    def __init__(self, location: str | None = None) -> None:
        super().__init__()
        self.location = location


class CapabilitiesAsDict(DictKV):
    """Bug: the capabilities are declared as a plain dict, not a Capabilities instance."""

    capabilities = {"durable": False, "shared": False}  # type: ignore[assignment]  # noqa: RUF012


class ExitSwallowsErrors(DictKV):
    """Bug: ``__aexit__`` closes the storage and returns True (a copied context manager
    that "handles" errors): an exception raised in ``async with storage:`` is swallowed,
    and the code after the block runs as if the block had succeeded."""

    async def __aexit__(self, *exc_info: object) -> bool:  # type: ignore[override]
        await self.aclose()
        return True


SECRET_URL = "kv://user:pa%24%24word-9@127.0.0.1:6399/0"
"""The URL that :class:`ShowsItsURL` and its twin are opened with (password ``pa$$word-9``)."""


class ShowsItsURL(DictKV):
    """Bug: the storage keeps the URL it was opened with and shows it, password and all: in
    its repr and in the message of its NotFound (``key 'k' not found in kv://user:...``)."""

    def __init__(self, url: str = SECRET_URL) -> None:
        super().__init__()
        self.url = url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    async def _get(self, key: str) -> GetResult:
        found = self.values.get(key)
        if found is None:
            await self._round_trip()
            raise NotFound(f"key {key!r} not found in {self.url}")
        return await super()._get(key)


class ShowsItsHost(ShowsItsURL):
    """Correct twin of :class:`ShowsItsURL`: its repr and errors name the host only."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(host={self.url.split('@')[-1]!r})"

    async def _get(self, key: str) -> GetResult:
        return await DictKV._get(self, key)


class DeleteReportsAfterTheFact(DictKV):
    """Bug: delete returns whether the key exists *after* deleting it: always False."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await super()._delete(key, if_match)
        return key in self.values


class SkipsSameSizeOverwrite(DictKV):
    """Bug: an overwrite is skipped when the stored value has the same size (a cheap
    "unchanged" check borrowed from a sync tool): the old bytes stay."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        current = self.values.get(key)
        if mode == "overwrite" and current is not None and len(current[0]) == len(data):
            await self._round_trip()
            return current[1]
        return await super()._put(key, data, mode)


class CreateRefusesMissing(DictKV):
    """Bug: the create-only condition is inverted (``if current is None``)."""

    def _refuse(self, key: str, current: tuple[bytes, str] | None, mode: PutMode) -> None:
        if mode == "create" and current is None:
            raise PreconditionFailed(f"key {key!r} does not exist")
        if mode == "create":
            return
        super()._refuse(key, current, mode)


class IfMatchAgainstNextVersion(DictKV):
    """Bug: if-match compares the caller's version with the one the write would mint."""

    def _refuse(self, key: str, current: tuple[bytes, str] | None, mode: PutMode) -> None:
        if isinstance(mode, IfMatch):
            upcoming = str(int(current[1]) + 1) if current is not None else None
            if upcoming != mode.version:
                raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
            return
        super()._refuse(key, current, mode)


class VersionAsInt(DictKV):
    """Bug: versions are returned as ints (the backend's counter, unconverted)."""

    def _mint(self, key: str, data: bytes) -> str:
        return next(self.counter)  # type: ignore[return-value]


class RefusesCharactersToAvoid(DictKV):
    """Bug: keys with the characters that S3's guide says to avoid (``{}^`|<>``) are
    refused with InvalidKey (a check copied from that guide): valid keys, which every
    adapter must hold so that a run can move between backends."""

    def _name(self, key: str) -> str:
        bad = set(key) & set("{}^`|<>")
        if bad:
            from checkpointkit.errors import InvalidKey

            raise InvalidKey(f"key {key!r} has characters to avoid: {sorted(bad)}")
        return key


class KeysAsciiOnly(DictKV):
    """Bug: the backend's names are ASCII: a key with any other character is refused."""

    def _name(self, key: str) -> str:
        if not key.isascii():
            from checkpointkit.errors import InvalidKey

            raise InvalidKey(f"key {key!r} is not ASCII")
        return key


class ChunkedValue(DictKV):
    """Bug: a value is written as 16 KiB parts appended one round trip at a time (a
    multipart upload without a final commit): a cancelled put leaves the first parts."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._round_trip()
        self._refuse(key, self.values.get(key), mode)
        version = self._mint(key, data)
        self._store(key, b"", version)
        for i in range(0, len(data), 16 * 1024):
            self._store(key, self.values[key][0] + data[i : i + 16 * 1024], version)
            await self._round_trip()
        return version


class LargeValuesOverwrittenInPlace(DictKV):
    """Bug: an overwrite of a value over 256 KiB replaces its 256 KiB parts in place, one
    round trip each (a multipart write into the existing object), and runs to its end
    even when cancelled (it declares no ``settles_cancelled_writes``): a reader in between
    sees new parts beside old ones."""

    capabilities: ClassVar[Capabilities] = Capabilities(durable=False, shared=False)
    PART = 256 * 1024

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        current = self.values.get(key)
        if len(data) <= self.PART or current is None or mode != "overwrite":
            return await super()._put(key, data, mode)
        return await asyncio.shield(self._in_place(key, data))

    async def _in_place(self, key: str, data: bytes) -> str:
        await self._round_trip()
        version = self._mint(key, data)
        for start in range(0, len(data), self.PART):
            old, old_version = self.values.get(key, (b"", version))
            end = start + self.PART
            merged = old[:start] + data[start:end] + old[end:]
            self._store(key, merged, old_version)
            await self._round_trip()
        self._store(key, data, version)
        return version


class StagedBlocksKV(DictKV):
    """Correct twin of `StagedBlocksNotStagedAgain`: a value over 1 MiB goes up as staged
    blocks, one round trip each, then a commit, as Azure's block blobs do; like Azure, a
    commit discards every block staged for the key but its own, so a writer whose blocks
    another's commit discarded finds them gone at its own commit, and stages them again."""

    capabilities: ClassVar[Capabilities] = Capabilities(durable=False, shared=False)
    BLOCK = 1024 * 1024

    def __init__(self) -> None:
        super().__init__()
        self.staged: dict[str, set[str]] = {}  # key -> ids of the blocks staged for it

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if len(data) <= self.BLOCK or mode != "overwrite":
            return await super()._put(key, data, mode)
        while True:
            mine = {secrets.token_hex(4) for _ in range(0, len(data), self.BLOCK)}
            for block in mine:
                await self._round_trip()
                self.staged.setdefault(key, set()).add(block)
            await self._round_trip()
            if mine <= self.staged.get(key, set()):
                self.staged.pop(key, None)  # the commit discards every other staged block
                version = self._mint(key, data)
                self._store(key, data, version)
                return version
            self._stage_again(key)

    def _stage_again(self, key: str) -> None:
        """Another writer's commit discarded this put's blocks: stage them again."""


class StagedBlocksNotStagedAgain(StagedBlocksKV):
    """Bug: a commit that finds its staged blocks discarded by another writer's commit
    (Azure's ``400 InvalidBlockList``) raises instead of staging them again: overwrites of
    a large value racing each other fail (the sixth blind round's Azure adapter, whose
    check of the error code never matched; no test raced overwrites past the single-put
    size)."""

    def _stage_again(self, key: str) -> None:
        raise StorageUnavailable(f"InvalidBlockList: the blocks of key {key!r} are gone")


class DeleteFindsStagedBlocks(StagedBlocksKV):
    """Bug: a delete takes a key that holds only blocks a put has staged (Azure's Delete
    Blob of a blob with uncommitted blocks only answers 202) and answers True: a reader
    finds no such key, and the put, its blocks gone, stages them again and commits after
    the delete that "found" it (the sixth blind round's Azure adapter b03)."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if if_match is None and key not in self.values and self.staged.pop(key, None):
            await self._round_trip()
            return True
        return await super()._delete(key, if_match)


class LargeValuesInPartsLoseAByte(DictKV):
    """Bug: a value over 256 KiB is stored as 256 KiB parts cut with ``range(0, len(data) -
    1, PART)``: a value one byte over a multiple of the part size loses its last byte."""

    PART = 256 * 1024

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if len(data) <= self.PART:
            return await super()._put(key, data, mode)
        parts = [data[i : i + self.PART] for i in range(0, len(data) - 1, self.PART)]
        return await super()._put(key, b"".join(parts), mode)


class LargeValuesInPartsSkipTheCondition(DictKV):
    """Bug: a value over 256 KiB goes up in parts, and the parts path completes the upload
    without the put's condition (as an S3 ``CompleteMultipartUpload`` sent without the
    ``If-None-Match`` or ``If-Match`` of the put): a large create-only put overwrites a
    present key, a large if-match put ignores the version."""

    PART = 256 * 1024

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if len(data) <= self.PART:
            return await super()._put(key, data, mode)
        return await super()._put(key, data, "overwrite")


class LargeValuesReadWithTheFirstVersion(DictKV):
    """Bug: a value over 256 KiB is read back through its parts' manifest, which keeps the
    version of the key's first large write: an overwrite updates the parts, not the
    manifest's version, so a get answers a version that no longer matches."""

    PART = 256 * 1024

    def __init__(self) -> None:
        super().__init__()
        self.manifests: dict[str, str] = {}

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data, version)
        if len(data) > self.PART:
            self.manifests.setdefault(name, version)

    def _drop(self, name: str) -> None:
        super()._drop(name)
        self.manifests.pop(name, None)

    async def _get(self, key: str) -> GetResult:
        found = await super()._get(key)
        return GetResult(found.data, self.manifests.get(key, found.version))


class LargeValuesCheckedThenWritten(DictKV):
    """Bug: a value over 256 KiB goes up in parts after the put's condition was checked, and
    is committed without checking it again (as a create-only multipart upload guarded by a
    ``HEAD`` first): large create-only or if-match puts of one key at once all win."""

    PART = 256 * 1024

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if len(data) <= self.PART:
            return await super()._put(key, data, mode)
        await self._round_trip()
        self._refuse(key, self.values.get(key), mode)
        for _ in range(0, len(data), self.PART):
            await self._round_trip()  # one part's upload
        version = self._mint(key, data)
        self._store(key, data, version)
        return version


class LargeValuesDeletedWithoutTheCondition(DictKV):
    """Bug: a value over 256 KiB is stored in parts, and its delete removes the parts in one
    batch that forgets the delete's if-match: a stale if-match delete of a large value
    deletes it."""

    PART = 256 * 1024

    async def _delete(self, key: str, if_match: str | None) -> bool:
        current = self.values.get(self._name(key))
        if current is not None and len(current[0]) > self.PART:
            if_match = None
        return await super()._delete(key, if_match)


class LargeValuesListTheirManifest(DictKV):
    """Bug: a value over 256 KiB is stored in parts under a manifest kept beside it, at the
    key plus ``~parts``, in the same key space: listings return the manifest too."""

    PART = 256 * 1024
    SUFFIX = "~parts"

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data, version)
        if len(data) > self.PART and not name.endswith(self.SUFFIX):
            super()._store(name + self.SUFFIX, b"manifest", version)

    def _drop(self, name: str) -> None:
        super()._drop(name)
        if name + self.SUFFIX in self.values:
            super()._drop(name + self.SUFFIX)


class LargeValuesInPartsKV(BatchDeleteKV):
    """Correct: a value over 256 KiB is stored in parts, apart from the key's record (a
    stub), and read from its parts; ``delete``, and ``delete_many`` in batches of
    `DELETE_BATCH`, remove the record and the parts."""

    PART = 256 * 1024

    def __init__(self) -> None:
        super().__init__()
        self.parts: dict[str, tuple[bytes, str]] = {}

    def _store(self, name: str, data: bytes, version: str) -> None:
        if len(data) > self.PART:
            self.parts[name] = (data, version)
            data = b""  # the record: a stub
        else:
            self.parts.pop(name, None)
        super()._store(name, data, version)

    async def _get(self, key: str) -> GetResult:
        stored = self.parts.get(key)
        if stored is None:
            return await super()._get(key)
        await self._round_trip()
        return GetResult(*stored)

    def _drop(self, name: str) -> None:
        super()._drop(name)
        self.parts.pop(name, None)


class LargeValuesKeptByDeleteMany(LargeValuesInPartsKV):
    """Bug: ``delete_many``'s batch request removes the keys' records and not the parts of
    a value over 256 KiB (the batch names the records only; ``delete`` removes both): such a
    value is still read after ``delete_many`` counted it deleted."""

    def _drop_in_batch(self, name: str) -> None:
        DictKV._drop(self, name)


class DropsDataUnderCallsInFlight(DictKV):
    """Bug: aclose() drops the data at once, under the operations still in flight: they end
    with an AttributeError from the dropped store instead of their own answer or
    StorageClosed."""

    async def _aclose(self) -> None:
        del self.values  # as a client library's close() frees its connection pool


class UnderWay:
    """An adapter's calls under way, counted as an author counts them on the public API (the
    built-in adapters' ``CallsUnderWay`` is private): ``aclose()`` waits in `ended` until
    none is under way. It looks at the count each time it wakes: a call that starts in the
    turn another ends is waited for too."""

    def __init__(self) -> None:
        self._count = 0
        self._none = asyncio.Event()
        self._none.set()

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Count the enclosed call as under way."""
        self._count += 1
        self._none.clear()
        try:
            yield
        finally:
            self._count -= 1
            if not self._count:
                self._none.set()

    async def ended(self) -> None:
        """Wait until no call is under way."""
        while self._count:
            await self._none.wait()


class WaitsForWritesOnClose(DictKV):
    """A dict adapter whose puts and deletes count as under way from start to end, and
    whose ``aclose()`` waits until none is (what a durable twin needs: a reader that opens
    after ``aclose()`` must not miss a write that was still running)."""

    def __init__(self) -> None:
        super().__init__()
        self._under_way = UnderWay()

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        with self._under_way.call():
            return await super()._put(key, data, mode)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        with self._under_way.call():
            return await super()._delete(key, if_match)

    async def _aclose(self) -> None:
        await self._under_way.ended()


class DeletesLostOnReopen(WaitsForWritesOnClose):
    """Bug: the storage keeps a copy of its data in memory, loaded when it opens, and
    writes puts through to the durable store but applies deletes to the copy only (a
    write-ahead log whose replay skips delete records): after a reopen, deleted keys are
    back. (``aclose()`` waits for the writes under way.)"""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=True, shared=False, settles_cancelled_writes=True
    )
    _by_location: ClassVar[dict[str, tuple[dict[str, tuple[bytes, str]], list[str]]]] = {}
    deletes_durable: ClassVar[bool] = False

    def __init__(self, location: str | None = None) -> None:
        super().__init__()
        self.counter = _GLOBAL_COUNTER
        self.durable = self._by_location.setdefault(location or f"{id(self)}", ({}, []))
        self.values, self.keys = dict(self.durable[0]), list(self.durable[1])

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data, version)
        values, keys = self.durable
        if name not in values:
            bisect.insort(keys, name)
        values[name] = (data, version)

    def _drop(self, name: str) -> None:
        super()._drop(name)
        values, keys = self.durable
        if self.deletes_durable and name in values:
            del values[name]
            keys.remove(name)


class WritesThroughACopy(DeletesLostOnReopen):
    """Correct twin of :class:`DeletesLostOnReopen`: deletes go through as well."""

    _by_location: ClassVar[dict[str, tuple[dict[str, tuple[bytes, str]], list[str]]]] = {}
    deletes_durable: ClassVar[bool] = True


class _Connection:
    """A client's connection (a socket pair): left open, it warns when it is collected."""

    def __init__(self) -> None:
        self.ends = socket.socketpair()
        self.closed = False
        self.ready = True

    def close(self) -> None:
        self.closed = True
        for end in self.ends:
            end.close()


class PooledClientKV(DictKV):
    """Correct twin of :class:`PoolCutByCancelledClose`, a client with a pool of three
    connections: ``aclose()`` closes them one at a time, each after a round trip (a
    graceful goodbye), and closes those left in a ``finally:`` when it is cancelled."""

    GOODBYE: ClassVar[float] = 0.0
    """Seconds the goodbye on one connection takes."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = [_Connection() for _ in range(3)]

    async def _aclose(self) -> None:
        try:
            for connection in self.pool:
                await asyncio.sleep(self.GOODBYE)
                connection.close()
        finally:
            for connection in self.pool:
                if not connection.closed:
                    connection.close()


class PoolCutByCancelledClose(PooledClientKV):
    """Bug: ``aclose()`` closes its pool one connection at a time, and a cancellation
    between two leaves the rest open (as redis-py's client ``aclose()``, awaited as it is;
    the storage is marked closed, so the ``aclose()`` that ``async with`` calls again
    returns at once)."""

    async def _aclose(self) -> None:
        for connection in self.pool:
            await asyncio.sleep(self.GOODBYE)
            connection.close()


class PoliteClientKV(PooledClientKV):
    """Correct twin of :class:`SecondCloseReturnsAtOnce`: its pool says goodbye on each
    connection (50 ms each) before closing it; a second ``aclose()`` made meanwhile waits
    for the first (`StorageBase.aclose`)."""

    GOODBYE = 0.05  # a round trip


class SecondCloseReturnsAtOnce(PoliteClientKV):
    """Bug: ``aclose()`` written by hand with a flag: a second call made while the first
    is still closing sees the flag and returns at once, and its caller goes on (or the
    process exits) with the pool still open."""

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._aclose()


class CutOnClose:
    """The requests that ``aclose()`` may cut off instead of waiting for them: a task
    waiting in `wait` when `cut` is called raises ``OutcomeUnknown`` there (the server
    discards a request whose connection is gone before it ran, and the client cannot
    tell whether it did)."""

    def __init__(self) -> None:
        self.waiting: set[asyncio.Task[Any]] = set()
        self._cut: set[asyncio.Task[Any]] = set()

    async def wait(self, until: Awaitable[Any], cut_off: str) -> None:
        """Await ``until`` as the current task's request; ``cut_off``: the message of the
        ``OutcomeUnknown`` raised if `cut` ends it."""
        task = asyncio.current_task()
        assert task is not None
        self.waiting.add(task)
        try:
            await until
        except asyncio.CancelledError:
            if task not in self._cut:
                raise
            self._cut.discard(task)
            task.uncancel()
            raise OutcomeUnknown(cut_off) from None
        finally:
            self.waiting.discard(task)

    def cut(self) -> None:
        """End every request waiting now (``aclose()``)."""
        for task in list(self.waiting):
            self._cut.add(task)
            task.cancel()


class _AnswersStorageClosedOnceClosed(StorageBase):
    """The mistake of two mutants below: a write that completes once ``aclose()`` was called
    (``aclose()`` waits for it) answers ``StorageClosed`` although it happened."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        version = await super()._put(key, data, mode)
        if self._closed:
            raise StorageClosed("the storage was closed while the put was in flight")
        return version

    async def _delete(self, key: str, if_match: str | None) -> bool:
        existed = await super()._delete(key, if_match)
        if self._closed:
            raise StorageClosed("the storage was closed while the delete was in flight")
        return existed


class LazyClientKV(SharedDictKV):
    """Correct twin of :class:`GoesOnAfterClose`, a client as an HTTP SDK's: the first call
    opens a connection (two round trips, under a lock), and a request on a closed
    connection opens a new one. A request counts as under way while it runs; ``aclose()``
    lets the requests under way end, then closes the connection under the lock (after an
    opening under way). A call that waited for the connection while ``aclose()`` began
    raises ``StorageClosed``."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self._connection: _Connection | None = None
        self._opening = asyncio.Lock()
        self._under_way = UnderWay()

    async def _open(self) -> _Connection:
        async with self._opening:
            if self._connection is None or self._connection.closed:
                await asyncio.sleep(0)  # connect
                await asyncio.sleep(0)  # the first exchange
                self._connection = _Connection()
            return self._connection

    async def _connect(self) -> None:
        await self._open()
        self._check_open()  # the call waited here while aclose() began: it must not go on

    async def _round_trip(self) -> None:
        await self._connect()
        with self._under_way.call():
            await self._open()  # the SDK's request: on a closed connection, it opens anew
            await asyncio.sleep(0)

    async def _aclose(self) -> None:
        await self._under_way.ended()
        async with self._opening:
            if self._connection is not None:
                self._connection.close()


class HalfOpenAfterCancel(LazyClientKV):
    """Bug: the client keeps its connection before the handshake ends: a first call
    cancelled during the handshake leaves a half-open connection, which every later call
    takes and fails on ("the handshake never finished")."""

    async def _open(self) -> _Connection:
        async with self._opening:
            if self._connection is None or self._connection.closed:
                self._connection = _Connection()
                self._connection.ready = False
                await asyncio.sleep(0)  # connect
                await asyncio.sleep(0)  # the first exchange
                self._connection.ready = True
            if not self._connection.ready:
                raise StorageUnavailable("the connection's handshake never finished")
            return self._connection


class GoesOnAfterClose(LazyClientKV):
    """Bug: a call that waited for the connection to open while ``aclose()`` ran goes on
    with its request: the SDK opens a new connection for it after ``aclose()`` returned,
    which nothing closes, and the write lands through it (as the S3 adapter's did:
    aiobotocore opens a new aiohttp session for a request on a closed client)."""

    async def _connect(self) -> None:
        await self._open()


class FirstWritesAnswerStorageClosed(_AnswersStorageClosedOnceClosed, LazyClientKV):
    """Bug: ``aclose()`` lets the requests under way end, as it should, but a write that was
    in flight when it was called answers ``StorageClosed`` ("it did not happen") although
    the server applied it, as :class:`ClosedWritesAnswerStorageClosed` on a client that
    opens its connection on first use. For a target without a hold, no test held a call
    in the backend to see it: the opening sweep, through a second storage, does."""


class CutsSentWritesOffAtClose(LazyClientKV):
    """Correct: ``aclose()`` drops the connection under the writes whose request is on the
    wire instead of waiting for their answers (reads on the wire it waits for). The server
    discards a request whose connection is gone before it ran, as a transaction whose
    commit never came, and each such write raises ``OutcomeUnknown``: the client cannot
    tell whether the server ran it, and clause ``close.in-flight`` allows that answer.
    Nothing is left running and nothing lands after ``aclose()`` returns."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self._writers: set[asyncio.Task[Any]] = set()
        self.on_wire = CutOnClose()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        task = asyncio.current_task()
        assert task is not None
        self._writers.add(task)
        try:
            yield
        finally:
            self._writers.discard(task)

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        with self._writing():
            return await super()._put(key, data, mode)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        with self._writing():
            return await super()._delete(key, if_match)

    async def _round_trip(self) -> None:
        if asyncio.current_task() not in self._writers:
            await super()._round_trip()
            return
        await self._connect()
        with self._under_way.call():
            await self._open()
            await self.on_wire.wait(  # the request on the wire; the server runs it after
                asyncio.sleep(0),
                "aclose() dropped the connection while the write's request was sent",
            )

    async def _aclose(self) -> None:
        self.on_wire.cut()
        await super()._aclose()


class CutWritesGoOnAfterClose(CutsSentWritesOffAtClose):
    """Bug: the writes that ``aclose()`` cuts off answer ``OutcomeUnknown`` at once, but
    their requests go on in a task of the client's (as a client that shields each request
    from cancellation and lets it finish in the background): still running when
    ``aclose()`` has returned, each lands when the server answers it, after ``aclose()``."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self.background: set[asyncio.Task[None]] = set()

    def _later(self, land: Callable[[], object]) -> None:
        async def finish() -> None:
            await asyncio.sleep(0.05)  # the server's answer to the request that went on
            with contextlib.suppress(PreconditionFailed):
                land()

        task = asyncio.ensure_future(finish())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def _land_put(self, key: str, data: bytes, mode: PutMode) -> None:
        name = self._name(key)
        self._refuse(key, self.values.get(name), mode)
        self._store(name, data, self._mint(name, data))

    def _land_delete(self, key: str, if_match: str | None) -> None:
        current = self.values.get(self._name(key))
        if current is not None and (if_match is None or current[1] == if_match):
            self._drop(self._name(key))

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        try:
            return await super()._put(key, data, mode)
        except OutcomeUnknown:
            self._later(lambda: self._land_put(key, data, mode))
            raise

    async def _delete(self, key: str, if_match: str | None) -> bool:
        try:
            return await super()._delete(key, if_match)
        except OutcomeUnknown:
            self._later(lambda: self._land_delete(key, if_match))
            raise


class ServerKV(SharedDictKV):
    """Correct twin of :class:`ClosesUnderHeldWrites`: the client of a server whose write lock
    can be taken from outside (:class:`WriteLock`); a write waits for it, a read does not.
    A request counts as under way while it runs, and ``aclose()`` lets the requests under
    way end before it returns."""

    _gates: ClassVar[dict[str, asyncio.Event]] = {}

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        gate = asyncio.Event()
        gate.set()
        self.writable = gate if location is None else self._gates.setdefault(location, gate)
        self._under_way = UnderWay()

    @contextlib.asynccontextmanager
    async def _request(self, *, write: bool) -> AsyncIterator[None]:
        with self._under_way.call():
            if write:
                await self.writable.wait()
            yield

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        async with self._request(write=True):
            return await super()._put(key, data, mode)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        async with self._request(write=True):
            return await super()._delete(key, if_match)

    async def _get(self, key: str) -> GetResult:
        async with self._request(write=False):
            return await super()._get(key)

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        async with self._request(write=False):
            return await super()._list_page(prefix, start_after, cursor, limit)

    async def _aclose(self) -> None:
        await self._under_way.ended()


class ClosedWritesAnswerStorageClosed(_AnswersStorageClosedOnceClosed, ServerKV):
    """Bug: ``aclose()`` lets the requests under way end, as it should, but a write that was
    in flight when it was called answers ``StorageClosed`` ("it did not happen") although
    the server applied it: the author took "closed" for the answer to everything in
    flight. ``OutcomeUnknown`` (or the write's own answer) is right for a write sent."""


class ClosesUnderHeldWrites(ServerKV):
    """Bug: ``aclose()`` returns at once, while writes wait for the server's write lock; the
    server applies them once it is free, after ``aclose()`` returned (as a client that
    closes its connection under a request that the server already holds)."""

    async def _aclose(self) -> None:
        pass


class CutsWritesOffAtClose(ServerKV):
    """Correct: ``aclose()`` drops its connection under the writes that wait for the
    server's write lock instead of waiting for them: the server discards a request whose
    connection is gone before it ran (as a transaction whose commit never came), and
    each such write raises ``OutcomeUnknown``, as a client that cut a request off must
    (it cannot tell whether the server ran it). Nothing is left running, nothing lands
    after ``aclose()`` returns."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self.held = CutOnClose()

    @contextlib.asynccontextmanager
    async def _request(self, *, write: bool) -> AsyncIterator[None]:
        if not write:
            async with super()._request(write=False):
                yield
            return
        with self._under_way.call():
            await self.held.wait(
                self.writable.wait(), "the write was cut off by aclose() while the server held it"
            )
            yield

    async def _aclose(self) -> None:
        self.held.cut()
        await self._under_way.ended()


class WriteLock(Hold):
    """The write lock of a :class:`ServerKV`'s server, taken by the suite: writes wait for it."""

    name = "the server's write lock, held by the suite"
    operations: frozenset[Operation] = WRITES

    @contextlib.asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        storage.writable.clear()
        try:
            yield
        finally:
            storage.writable.set()


class ExpiringDictKV(DictKV):
    """Correct: declares ``ttl``; a key written through a storage opened with ``ttl`` expires
    ``ttl`` seconds after its last write, and every operation then finds it gone."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=False, settles_cancelled_writes=True, ttl=True
    )

    def __init__(self, ttl: float | None = None) -> None:
        super().__init__()
        self.ttl = ttl
        self.expires: dict[str, float] = {}

    def _expiry(self, name: str) -> float | None:
        """When a key written now expires: ``ttl`` from now."""
        return None if self.ttl is None else _now() + self.ttl

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data, version)
        expiry = self._expiry(name)
        if expiry is not None:
            self.expires[name] = expiry

    def _drop(self, name: str) -> None:
        super()._drop(name)
        self.expires.pop(name, None)

    def _expired(self) -> list[str]:
        now = _now()
        return [k for k, deadline in self.expires.items() if now >= deadline and k in self.values]

    async def _round_trip(self) -> None:
        await super()._round_trip()
        for name in self._expired():  # as the backend does: an expired key is gone
            self._drop(name)


class DurableExpiringKV(ExpiringDictKV):
    """Correct: durable (the data of a location outlives the storage object) and ``ttl``,
    with each key's expiry kept with the data."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=True, shared=False, settles_cancelled_writes=True, ttl=True
    )
    _by_location: ClassVar[
        dict[str, tuple[dict[str, tuple[bytes, str]], list[str], dict[str, float]]]
    ] = {}
    keeps_expiries: ClassVar[bool] = True

    def __init__(self, location: str | None = None, ttl: float | None = None) -> None:
        super().__init__(ttl)
        self.counter = _GLOBAL_COUNTER
        stored = self._by_location.setdefault(location or f"{id(self)}", ({}, [], {}))
        self.values, self.keys = stored[0], stored[1]
        if self.keeps_expiries:
            self.expires = stored[2]


class ExpiriesLostOnReopen(DurableExpiringKV):
    """Bug: each key's expiry is kept in the storage object (a table of deadlines in
    memory, or a timer that deletes the key), the data in the durable store: a key
    written before the storage was closed and opened again never expires."""

    _by_location: ClassVar[
        dict[str, tuple[dict[str, tuple[bytes, str]], list[str], dict[str, float]]]
    ] = {}
    keeps_expiries: ClassVar[bool] = False


class SharedExpiringKV(ExpiringDictKV):
    """Correct: ``shared`` and ``ttl``: the clients of a location share its data and each
    key's deadline, which every client's write moves and every client's call enforces."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=True, settles_cancelled_writes=True, ttl=True
    )
    _by_location: ClassVar[
        dict[str, tuple[dict[str, tuple[bytes, str]], list[str], dict[str, float]]]
    ] = {}
    shares_deadlines: ClassVar[bool] = True

    def __init__(self, location: str | None = None, ttl: float | None = None) -> None:
        super().__init__(ttl)
        self.counter = _GLOBAL_COUNTER
        if location is not None:
            stored = self._by_location.setdefault(location, ({}, [], {}))
            self.values, self.keys = stored[0], stored[1]
            if self.shares_deadlines:
                self.expires = stored[2]


class ExpiryTimersPerClient(SharedExpiringKV):
    """Bug: each client expires the keys it wrote with a timer of its own
    (``loop.call_later(ttl, delete)``, moved by its own writes, cancelled by its own
    deletes and at ``aclose()``): another client's write of the key does not move it, and
    the key is deleted at the time of the first client's write."""

    _by_location: ClassVar[
        dict[str, tuple[dict[str, tuple[bytes, str]], list[str], dict[str, float]]]
    ] = {}
    shares_deadlines = False

    def __init__(self, location: str | None = None, ttl: float | None = None) -> None:
        super().__init__(location, ttl)
        self.timers: dict[str, asyncio.TimerHandle] = {}

    def _expiry(self, name: str) -> float | None:
        return None  # the timer expires it

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data, version)
        if self.ttl is not None:
            self._stop(name)
            loop = asyncio.get_running_loop()
            self.timers[name] = loop.call_later(self.ttl, self._expire, name)

    def _stop(self, name: str) -> None:
        timer = self.timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, name: str) -> None:
        self.timers.pop(name, None)
        if name in self.values:
            DictKV._drop(self, name)

    def _drop(self, name: str) -> None:
        super()._drop(name)
        self._stop(name)

    async def _aclose(self) -> None:
        for name in list(self.timers):
            self._stop(name)


class DeclaresTtlWhenOpenedWithIt(ExpiringDictKV):
    """Correct: declares ``ttl`` on a storage opened with one only (as `RedisStorage` does:
    its class declares no ttl, a storage made with ``ttl=`` is of a subclass that does)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=False, settles_cancelled_writes=True, ttl=False
    )

    def __init__(self, ttl: float | None = None) -> None:
        super().__init__(ttl)
        if ttl is not None:
            self.capabilities = replace(self.capabilities, ttl=True)  # type: ignore[misc]


class NeverExpiresDeclaredWhenOpenedWithIt(DeclaresTtlWhenOpenedWithIt):
    """Bug: declares ``ttl`` on a storage opened with one, and takes the option, but never
    applies it (what `NeverExpires` does, declared as `RedisStorage` declares ttl)."""

    def _expiry(self, name: str) -> float | None:
        return None


class NeverExpires(ExpiringDictKV):
    """Bug: declares ``ttl`` and takes the option, but never applies it."""

    def _expiry(self, name: str) -> float | None:
        return None


class TtlFromTheFirstWrite(ExpiringDictKV):
    """Bug: the expiry is set when a key is created and kept by an overwrite (Redis
    ``EXPIRE ... NX``, or a ``SET ... KEEPTTL``): a key overwritten just before its time
    expires at it."""

    def _expiry(self, name: str) -> float | None:
        return self.expires.get(name) or super()._expiry(name)


class TtlInWholeSeconds(ExpiringDictKV):
    """Bug: the expiry is sent as whole seconds (``SET k v EX int(ttl)``; redis-py's ``ex``
    takes an int): a ttl of 1.5 s expires keys after 1 s, and one under a second at once."""

    def _expiry(self, name: str) -> float | None:
        return None if self.ttl is None else _now() + int(self.ttl)


LEASE_MINIMUM = 2.0
"""The shortest expiry of the lease-based mutants' backend: etcd raises a lease asked for
less than its minimum (1.5 s with its default timings) to that minimum."""


class TtlInWholeSecondsOverALeaseMinimum(ExpiringDictKV):
    """Bug: the expiry is a lease of whole seconds (``int(ttl)``, no margin), which the
    backend raises to its shortest lease: every ttl under 2 s lasts 2 s, longer than asked,
    and a ttl of 2.95 s lasts 2 s (the sixth blind round's etcd adapter b16)."""

    def _expiry(self, name: str) -> float | None:
        return None if self.ttl is None else _now() + max(int(self.ttl), LEASE_MINIMUM)


class LeaseReusedForHalfTheTtl(ExpiringDictKV):
    """Bug: the writes of half a ttl share one lease (one grant of the backend's expiry,
    to save a request a write): a key written late in a lease expires at the lease's end,
    up to half a ttl early. Leases are at least 2 s long, as the backend's shortest (the
    sixth blind round's etcd adapter b12: a key with a 6 s ttl gone 4.2 s after its
    write)."""

    def __init__(self, ttl: float | None = None) -> None:
        super().__init__(ttl)
        self._lease: tuple[float, float] | None = None  # granted, expires

    def _expiry(self, name: str) -> float | None:
        if self.ttl is None:
            return None
        now, ttl = _now(), max(self.ttl, LEASE_MINIMUM)
        if self._lease is None or now - self._lease[0] > ttl / 2:
            self._lease = (now, now + ttl)
        return self._lease[1]


class _ExpiryByMode(ExpiringDictKV):
    """What a write of one mode does to the expiry: the mode of the put in progress."""

    def __init__(self, ttl: float | None = None) -> None:
        super().__init__(ttl)
        self.mode: PutMode | None = None

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        self.mode = mode
        try:
            return await super()._put(key, data, mode)
        finally:
            self.mode = None


class IfMatchKeepsTheExpiry(_ExpiryByMode):
    """Bug: the compare-and-set script writes with ``SET ... KEEPTTL`` (the plain put with
    ``PX``): a key written by an if-match put expires when its write before said."""

    def _expiry(self, name: str) -> float | None:
        if isinstance(self.mode, IfMatch):
            return self.expires.get(name)
        return super()._expiry(name)


class IfMatchDropsTheExpiry(_ExpiryByMode):
    """Bug: the compare-and-set script writes with a plain ``SET`` (which clears a Redis
    key's expiry; the plain put passes ``PX``): a key written by an if-match put never
    expires."""

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data, version)
        if isinstance(self.mode, IfMatch):
            self.expires.pop(name, None)


class CreateSetsNoExpiry(_ExpiryByMode):
    """Bug: a create-only put is ``SET ... NX`` without ``PX`` (the overwrite has it): a key
    that was created and never written again never expires."""

    def _expiry(self, name: str) -> float | None:
        return None if self.mode == "create" else super()._expiry(name)


class CreateKeepsTheDeadlineADeleteLeft(_ExpiryByMode):
    """Bug: the deadlines are rows of a table apart from the items; the backend removes an
    expired item with its row, but a delete leaves the row, and a create-only put sets a
    deadline only where none is (``INSERT OR IGNORE``; an overwrite replaces it): a key
    deleted and created again expires at the time of the key it replaced."""

    def _drop(self, name: str) -> None:
        DictKV._drop(self, name)  # the deadline's row stays

    async def _round_trip(self) -> None:
        await DictKV._round_trip(self)
        for name in self._expired():  # an expired item goes with its row
            DictKV._drop(self, name)
            self.expires.pop(name, None)

    def _expiry(self, name: str) -> float | None:
        if self.mode == "create" and name in self.expires:
            return self.expires[name]
        return super()._expiry(name)


class ExpiringPartsKV(ExpiringDictKV):
    """Correct: a value over `PART` bytes is kept as content-addressed parts (one part for
    every value that holds its bytes, as an adapter stores large values on a backend with a
    size limit per item), the key's item naming them; every write gives each part it names
    the key's new expiry, unless the part already outlives it (Redis ``SET ... PX`` each
    time, or ``PEXPIRE ... GT``)."""

    PART: ClassVar[int] = 256 * 1024

    def __init__(self, ttl: float | None = None) -> None:
        super().__init__(ttl)
        self.parts: dict[str, bytes] = {}
        self.part_expires: dict[str, float] = {}
        self.manifests: dict[str, list[str]] = {}  # key's name -> the digests of its parts

    def _keep_part(self, digest: str, chunk: bytes, expiry: float | None) -> None:
        """Write the part ``digest`` with ``expiry`` (the key's), or renew the one there."""
        self.parts[digest] = chunk
        if expiry is not None:
            self.part_expires[digest] = max(expiry, self.part_expires.get(digest, expiry))

    def _store(self, name: str, data: bytes, version: str) -> None:
        if len(data) <= self.PART:
            self.manifests.pop(name, None)
            super()._store(name, data, version)
            return
        super()._store(name, b"", version)
        expiry = self.expires.get(name)
        digests = []
        for start in range(0, len(data), self.PART):
            chunk = bytes(data[start : start + self.PART])
            digest = hashlib.sha256(chunk).hexdigest()
            self._keep_part(digest, chunk, expiry)
            digests.append(digest)
        self.manifests[name] = digests

    def _drop(self, name: str) -> None:
        super()._drop(name)
        self.manifests.pop(name, None)  # its parts go when they expire

    async def _round_trip(self) -> None:
        await super()._round_trip()
        now = _now()
        for digest in [d for d, deadline in self.part_expires.items() if now >= deadline]:
            del self.parts[digest], self.part_expires[digest]

    async def _get(self, key: str) -> GetResult:
        found = await super()._get(key)
        digests = self.manifests.get(self._name(key))
        if digests is None:
            return found
        if any(digest not in self.parts for digest in digests):
            raise NotFound(f"key {key!r} not found (its parts expired)")
        return GetResult(b"".join(self.parts[digest] for digest in digests), found.version)


class PartsKeepTheirFirstExpiry(ExpiringPartsKV):
    """Bug: a part is written only when no part holds its bytes yet (``SET ... NX PX``,
    which saves rewriting the bytes of an unchanged value): a large value written again,
    the same bytes, keeps the parts of its first write and their expiry, and is gone at
    that expiry for every get (its item, renewed, is still listed)."""

    def _keep_part(self, digest: str, chunk: bytes, expiry: float | None) -> None:
        if digest not in self.parts:
            super()._keep_part(digest, chunk, expiry)


class RevisionedExpiringKV(ExpiringDictKV):
    """Correct: a version is a digest of the key and its revision, a count of the key's
    writes that a delete keeps (a tombstone) and an expiry keeps too (a record of its own
    that never expires): a key's versions never repeat."""

    def __init__(self, ttl: float | None = None) -> None:
        super().__init__(ttl)
        self.revisions: dict[str, int] = {}

    def _mint(self, key: str, data: bytes) -> str:
        self.revisions[key] = self.revisions.get(key, 0) + 1
        return hashlib.sha256(f"{key}\0{self.revisions[key]}".encode()).hexdigest()[:16]


class RevisionExpiresWithTheKey(RevisionedExpiringKV):
    """Bug: the revision is kept in the key's item, which the backend removes when it
    expires (a delete keeps it, as a tombstone): once a key has expired, its versions start
    again, and an if-match of a version from before the expiry matches the new key."""

    async def _round_trip(self) -> None:
        expired = self._expired()
        await super()._round_trip()
        for name in expired:
            self.revisions.pop(name, None)


class RefusedWritesRenewTheExpiry(ExpiringDictKV):
    """Bug: the expiry is set by a command of its own after the write's (``SETNX``, then
    ``PEXPIRE``: the pattern from before ``SET ... NX PX``), sent whether or not the write
    was refused: a create-only or if-match put refused on a present key gives it a new
    expiry, and a key that such puts keep trying never expires."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        try:
            return await super()._put(key, data, mode)
        except PreconditionFailed:
            if self.ttl is not None and key in self.values:
                self.expires[key] = _now() + self.ttl
            raise


class ExpiredKeysStillListed(ExpiringDictKV):
    """Bug: an expired key is dropped only when it is read (a lazy expiry on get; the
    listing reads an index that nothing expires): a listing, a create-only put and a
    conditional delete still find it."""

    async def _round_trip(self) -> None:
        await DictKV._round_trip(self)

    async def _get(self, key: str) -> GetResult:
        if key in self._expired():
            self._drop(key)
        return await super()._get(key)


class LateEvictionKV(ExpiringDictKV):
    """Correct: the backend removes expired items late (DynamoDB's TTL: up to days after),
    so every operation leaves them out itself: reads and listings filter them, a write or
    a delete of one treats it as missing, and ``delete_many`` counts live items only."""

    async def _round_trip(self) -> None:
        await DictKV._round_trip(self)  # nothing is removed on time

    def _live(self, name: str) -> bool:
        deadline = self.expires.get(name)
        return name in self.values and (deadline is None or _now() < deadline)

    def _evict(self, name: str) -> None:
        """What a write of ``name`` does to an expired item first: it is missing."""
        if name in self.values and not self._live(name):
            self._drop(name)

    async def _get(self, key: str) -> GetResult:
        if key in self.values and not self._live(key):
            await self._round_trip()
            raise NotFound(f"key {key!r} not found")
        return await super()._get(key)

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        self._evict(key)
        return await super()._put(key, data, mode)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        self._evict(key)
        return await super()._delete(key, if_match)

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        page = await super()._list_page(prefix, start_after, cursor, limit)
        return ListPage([k for k in page.keys if self._live(k)], page.cursor)

    async def _delete_many(self, keys: list[str]) -> int:
        await self._round_trip()
        existed = 0
        for name in dict.fromkeys(keys):
            if name in self.values:
                existed += self._counted(name)
                self._drop(name)
        return existed

    def _counted(self, name: str) -> bool:
        """Whether a batch counts ``name``, which it removes."""
        return self._live(name)


class ExpiredItemsEndTheListing(LateEvictionKV):
    """Bug: a page that the filter of expired items left shorter than the limit is taken
    for the last (DynamoDB's ``Query`` with ``Limit`` applies it before the
    ``FilterExpression``, and the adapter stops at a short page instead of at no
    ``LastEvaluatedKey``): the live keys after a run of expired ones are never listed."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        page = await super()._list_page(prefix, start_after, cursor, limit)
        return ListPage(page.keys, page.cursor if len(page.keys) == limit else None)


class ConditionsIgnoreExpiry(LateEvictionKV):
    """Bug: an if-match put and a conditional delete test the version alone (a
    ``ConditionExpression`` of ``version = :v`` without ``expires > :now``): with the last
    version of an expired item that the backend still holds, the put writes and the delete
    answers True."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if not isinstance(mode, IfMatch):
            return await super()._put(key, data, mode)
        return await DictKV._put(self, key, data, mode)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if if_match is None:
            return await super()._delete(key, if_match)
        return await DictKV._delete(self, key, if_match)


class DeleteManyCountsExpiredItems(LateEvictionKV):
    """Bug: ``delete_many`` counts every item its batch removed (``ReturnValues=ALL_OLD``),
    expired ones that the backend had not removed yet too."""

    def _counted(self, name: str) -> bool:
        return True


class WritesBehind(DictKV):
    """Bug: put returns at once and writes in a background task (a write-behind cache); a
    task the runner never sees, which a cancellation of the run drops."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: set[asyncio.Task[None]] = set()

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        self._refuse(key, self.values.get(key), mode)
        version = self._mint(key, data)

        async def later() -> None:
            await asyncio.sleep(0.05)
            self._store(key, data, version)

        task = asyncio.ensure_future(later())
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
        return version

    async def _aclose(self) -> None:
        for task in list(self.pending):
            task.cancel()


# -- keys named another way by the backend ------------------------------------------------------
class _PrefixAsARange(DictKV):
    """A non-empty prefix listed as the range ``prefix <= k <= prefix + upper`` of an ordered
    index (a backend with no prefix query): correct only if no key has a character above
    ``upper`` right after the prefix."""

    upper: ClassVar[str]

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        if not prefix:
            return await super()._list_page(prefix, start_after, cursor, limit)
        await self._round_trip()
        lo = self._first(prefix, cursor if cursor is not None else start_after)
        hi = bisect.bisect_right(self.keys, prefix + self.upper)
        page = self.keys[lo : min(hi, lo + limit)]
        return ListPage(page, page[-1] if len(page) == limit else None)


class PrefixUpperBoundF8FF(_PrefixAsARange):
    """Bug: a non-empty prefix is listed as the range ``prefix <= k <= prefix + '\\uf8ff'``
    (Firestore's documented recipe for a prefix query): a key whose character right after
    the prefix is above U+F8FF (U+FF5E, an emoji, anything outside the BMP) is never listed
    under that prefix."""

    upper: ClassVar[str] = "\uf8ff"


class PrefixUpperBoundFFFF(_PrefixAsARange):
    """Bug: a non-empty prefix is listed as the range ``prefix <= k <= prefix + '\\uffff'``
    ("the highest character", in UTF-16): a key whose character right after the prefix is
    outside the BMP (an emoji, U+1D11E) is never listed under that prefix."""

    upper: ClassVar[str] = "\uffff"


class EscapedDocumentIdsKV(DictKV):
    """Correct: the backend's document ids cannot hold ``/`` (Firestore, an Azure Table
    RowKey), so a key's document is named by escaping ``%`` and then ``/`` (one to one);
    the document holds the key in an indexed field, which listings read."""

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[str, str] = {}  # document id -> the key its field holds

    def _name(self, key: str) -> str:
        return key.replace("%", "%25").replace("/", "%2F")

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._round_trip()
        name = self._name(key)
        self._refuse(key, self.values.get(name), mode)
        version = self._mint(name, data)
        before = self.held.get(name)
        if before != key:
            if before is not None:
                self.keys.remove(before)
            bisect.insort(self.keys, key)
        self.held[name] = key
        self.values[name] = (data, version)
        return version

    def _drop(self, name: str) -> None:
        del self.values[name]
        self.keys.remove(self.held.pop(name))


class SlashEscapedPercentNot(EscapedDocumentIdsKV):
    """Bug: a key's document is named ``key.replace('/', '%2F')``, without escaping ``%``
    first: ``a/b`` and ``a%2Fb`` are one document, so writing one replaces the other and
    reading one returns the other's bytes."""

    def _name(self, key: str) -> str:
        return key.replace("/", "%2F")


class ListingBodySplitNewline(DictKV):
    """Correct: the backend answers a listing page as a text body of key names, one per
    line (``\\n``-joined), and the adapter splits it at ``\\n`` (no key holds one)."""

    def _lines(self, body: str) -> list[str]:
        return body.split("\n") if body else []

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        page = await super()._list_page(prefix, start_after, cursor, limit)
        names = self._lines("\n".join(page.keys))  # what the server sends, parsed
        return ListPage(names, names[-1] if page.cursor is not None and names else None)


class ListingBodySplitLines(ListingBodySplitNewline):
    """Bug: the listing's text body is parsed with ``str.splitlines()``, which also splits
    at U+0085, U+2028 and U+2029 (characters a key may hold): such a key is listed as two
    made-up keys."""

    def _lines(self, body: str) -> list[str]:
        return body.splitlines()


# -- values near a backend's limits --------------------------------------------------------
ITEM_LIMIT = 400 * 1024
"""DynamoDB's largest item (409,600 bytes), counting the key, the attribute names and values."""


class ItemSizedOffloadKV(DictKV):
    """Correct: items of a DynamoDB-like table (at most `ITEM_LIMIT` bytes, counting the
    key, the attribute names and values); a value that would not fit in its item with
    2 KiB to spare is kept in an object store and the item holds a pointer (AWS's pattern
    for large items)."""

    inline_max: ClassVar[int] = ITEM_LIMIT - 2048

    def _item_size(self, name: str, data: bytes, version: str) -> int:
        value = len(data) if len(data) <= self.inline_max else 80  # else: a pointer
        return len("k") + len(name.encode()) + len("ver") + len(version) + len("v") + value

    def _store(self, name: str, data: bytes, version: str) -> None:
        size = self._item_size(name, data, version)
        if size > ITEM_LIMIT:
            raise StorageUnavailable(
                "ValidationException: Item size has exceeded the maximum allowed size "
                f"({size} bytes) for key {name!r}"
            )
        super()._store(name, data, version)


class ItemLimitCountsTheValueOnly(ItemSizedOffloadKV):
    """Bug: a value is kept in its item when ``len(value) <= 400 KB`` (the documented
    limit), but the limit counts the whole item (the key, the attribute names, the
    version): a value within about a hundred bytes (and the key's length) under 409,600
    bytes is refused by the backend (ValidationException), so such a put fails."""

    inline_max: ClassVar[int] = ITEM_LIMIT


PACKET_LIMIT = 1024 * 1024
"""The largest statement the SQL-like backend of `EscapedStatementKV` takes (MySQL's
``max_allowed_packet``, here 1 MiB)."""

_SQL_ESCAPED = frozenset(b"\x00'\"\\\n\r\x1a")
"""The bytes that a MySQL string literal escapes (each becomes two)."""


class EscapedStatementKV(DictKV):
    """Correct: a SQL-like backend that takes statements of at most `PACKET_LIMIT` bytes,
    each value sent as an escaped string literal (MySQL's client-side escaping: ``\\0``,
    ``\\'``...). A value is kept inline up to `part` bytes and in parts of `part` bytes
    above that, each one statement; `part` leaves room for a literal twice its size (every
    byte escaped) and the statement's 1 KiB of text."""

    part: ClassVar[int] = (PACKET_LIMIT - 1024) // 2

    def _store(self, name: str, data: bytes, version: str) -> None:
        for start in range(0, max(len(data), 1), self.part):
            chunk = data[start : start + self.part]
            statement = 1024 + len(chunk) + sum(chunk.count(b) for b in _SQL_ESCAPED)
            if statement > PACKET_LIMIT:
                raise StorageUnavailable(
                    f"(1153, \"Got a packet bigger than 'max_allowed_packet' bytes\") "
                    f"({statement} bytes) for key {name!r}"
                )
        super()._store(name, data, version)


class PartSizedByTheRawValue(EscapedStatementKV):
    """Bug: the inline limit and the part size count the value's bytes, not its escaped
    literal (`PACKET_LIMIT` less the statement's text): a value or part whose bytes need
    escaping (zeros, quotes, backslashes) is up to twice as long as a literal, and the
    backend refuses the statement (the fifth blind round's asyncmy adapter b12). Random
    bytes escape about 3% of the time and fit."""

    part: ClassVar[int] = PACKET_LIMIT - 1024 - 64 * 1024


CHUNK = 255 * 1024
"""GridFS's default chunk size."""


class ChunkedValuesKV(DictKV):
    """Correct: a value is kept as chunks of 255 KiB (`CHUNK`) and its length; a read
    joins ``ceil(length / CHUNK)`` chunks (one empty chunk for an empty value)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: dict[str, list[bytes]] = {}

    def _store(self, name: str, data: bytes, version: str) -> None:
        self.chunks[name] = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
        super()._store(name, len(data).to_bytes(8, "big"), version)

    def _drop(self, name: str) -> None:
        super()._drop(name)
        self.chunks.pop(name, None)

    def _count(self, length: int) -> int:
        """How many chunks a value of ``length`` bytes is read from."""
        return max(1, -(-length // CHUNK))

    async def _get(self, key: str) -> GetResult:
        meta = await super()._get(key)
        length = int.from_bytes(meta.data, "big")
        parts = self.chunks[key]
        n = self._count(length)
        if n > len(parts):
            raise StorageUnavailable(f"chunk {len(parts)} of key {key!r} is missing")
        return GetResult(b"".join(parts[:n]), meta.version)


class ChunkCountOffByOne(ChunkedValuesKV):
    """Bug: the reader counts ``length // CHUNK + 1`` chunks (for "the partial last one"):
    a value whose length is an exact multiple of 255 KiB (261,120 bytes, 522,240...)
    cannot be read (the chunk after the last is missing)."""

    def _count(self, length: int) -> int:
        return length // CHUNK + 1


def _now() -> float:
    import time

    return time.monotonic()


# -- mistakes nobody had listed: a helper session's blind adapters, the suite passed them -----
class VersionsFromAShortHash(DictKV):
    """Bug: the version is 4 hex digits of a hash of the key and a write counter (a short
    ETag): after a few hundred writes of one key a version repeats, and an if-match with
    the old one succeeds although the value changed since."""

    def _mint(self, key: str, data: bytes) -> str:
        return hashlib.sha1(f"{key}{next(self.counter)}".encode()).hexdigest()[:4]


def _cut(key: str, size: int = 200) -> str:
    return "/".join(s.encode()[:size].decode("utf-8", "ignore") for s in key.split("/"))


class NamesCutTo200Bytes(DictKV):
    """Bug: each segment of a backend name is cut to 200 bytes (a file name limit), the
    whole key kept beside it for listing: two keys that differ only past a segment's 200th
    byte are one name, which keeps the key first written."""

    def _name(self, key: str) -> str:
        return next((k for k in self.keys if _cut(k) == _cut(key)), key)


class _HoldsShortKeys(DictKV):
    """Names of at most 255 bytes (a server's limit), which ``holds_key`` says."""

    LIMIT: ClassVar[int] = 255

    def holds_key(self, key: str) -> bool:
        return len(key.encode()) <= self.LIMIT and super().holds_key(key)


class ShortKeysKV(_HoldsShortKeys):
    """Correct: a key longer than its 255-byte names is refused with ``InvalidKey`` naming
    the limit, by every operation, before anything is sent."""

    def _check(self, key: str) -> None:
        if not self.holds_key(key):
            raise InvalidKey(f"key {key!r} is longer than this backend's {self.LIMIT}-byte names")

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        self._check(key)
        return await super()._put(key, data, mode)

    async def _get(self, key: str) -> GetResult:
        self._check(key)
        return await super()._get(key)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        self._check(key)
        return await super()._delete(key, if_match)

    async def _delete_many(self, keys: list[str]) -> int:
        for key in keys:
            self._check(key)
        return await super()._delete_many(keys)


class SendsKeysItDoesNotHold(_HoldsShortKeys):
    """Bug: ``holds_key`` says 255 bytes, but a longer key is sent anyway: the backend's
    error (a file name too long) comes back as ``StorageUnavailable``, which a caller
    retries, and a get answers ``NotFound``."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if not self.holds_key(key):
            await self._round_trip()
            raise StorageUnavailable(f"[Errno 36] File name too long: {key!r}")
        return await super()._put(key, data, mode)


class ExpiredKeysSweptByReadsOnly(ExpiringDictKV):
    """Bug: expired keys are removed by reads only (a get or a listing sweeps them, as a
    cache that expires lazily on access): a create-only put of an expired key is refused
    until something reads, an if-match put with its last version writes it back, and a
    delete finds it."""

    async def _round_trip(self) -> None:
        await DictKV._round_trip(self)

    async def _get(self, key: str) -> GetResult:
        await ExpiringDictKV._round_trip(self)
        return await super()._get(key)

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await ExpiringDictKV._round_trip(self)
        return await super()._list_page(prefix, start_after, cursor, limit)


class KeepAliveKV(DictKV):
    """Correct: a keep-alive task started by the first call; ``aclose()`` cancels it and
    awaits it, so that it has ended when ``aclose()`` returns."""

    def __init__(self) -> None:
        super().__init__()
        self.keep_alive: asyncio.Task[None] | None = None

    async def _round_trip(self) -> None:
        if self.keep_alive is None:
            self.keep_alive = asyncio.get_running_loop().create_task(self._ping())
        await super()._round_trip()

    async def _ping(self) -> None:
        while True:
            await asyncio.sleep(0.05)

    async def _aclose(self) -> None:
        if self.keep_alive is not None:
            self.keep_alive.cancel()
            await asyncio.gather(self.keep_alive, return_exceptions=True)


class KeepAliveCancelledNotAwaited(KeepAliveKV):
    """Bug: ``aclose()`` cancels the keep-alive task and returns without awaiting it: the
    task is still pending (unwinding) when the caller goes on."""

    async def _aclose(self) -> None:
        if self.keep_alive is not None:
            self.keep_alive.cancel()


class WriterThreadKV(DictKV):
    """Correct: a flusher thread started by the first call; ``aclose()`` stops it and joins
    it (in a worker thread), so that it has ended when ``aclose()`` returns."""

    def __init__(self) -> None:
        super().__init__()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    async def _round_trip(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._flush, name="flusher", daemon=True)
            self.thread.start()
        await super()._round_trip()

    def _flush(self) -> None:
        while not self.stop.wait(0.02):
            pass
        threading.Event().wait(0.05)  # the last flush, once told to stop

    async def _aclose(self) -> None:
        self.stop.set()
        if self.thread is not None:
            await asyncio.to_thread(self.thread.join)


class WriterThreadNotJoined(WriterThreadKV):
    """Bug: ``aclose()`` tells the flusher thread to stop and returns without joining it (a
    daemon thread, so nothing waits for it at exit): it may still be writing when the
    caller goes on."""

    async def _aclose(self) -> None:
        self.stop.set()


class TtlOfTheFirstClient(SharedExpiringKV):
    """Bug: a location's ttl is the one of the first storage opened at it (a table whose
    default expiry is set when the table is made): a storage opened with a ttl beside an
    earlier one opened without writes keys that never expire."""

    _by_location: ClassVar[
        dict[str, tuple[dict[str, tuple[bytes, str]], list[str], dict[str, float]]]
    ] = {}
    _first_ttl: ClassVar[dict[str, float | None]] = {}

    def __init__(self, location: str | None = None, ttl: float | None = None) -> None:
        super().__init__(location, ttl)
        if location is not None:
            self.ttl = self._first_ttl.setdefault(location, ttl)


class DeleteManyCutOffByClose(DictKV):
    """Correct: a ``delete_many`` that ``aclose()`` catches half-way stops and raises
    ``OutcomeUnknown`` (some of its keys are deleted, which it cannot promise either way,
    as a batch whose request was sent when its connection was cut), as clause
    ``close.in-flight`` allows a write that ``aclose()`` cut off."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    async def _delete_many(self, keys: list[str]) -> int:
        existed = 0
        for key in dict.fromkeys(keys):
            await self._round_trip()
            if self.closing:
                raise OutcomeUnknown("delete_many cut off by aclose(): some keys may be deleted")
            if key in self.values:
                self._drop(key)
                existed += 1
        return existed

    async def _aclose(self) -> None:
        self.closing = True
        await super()._aclose()

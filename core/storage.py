"""The storage protocol: the small byte-level contract that every adapter keeps.

Everything above this layer (codec, checkpoint store, runner) is shared, so a
backend needs only these five operations::

    put(key, data, *, mode)             -> version
    get(key)                            -> GetResult(data, version)
    delete(key, *, if_match=None)       -> existed
    list(prefix, *, start_after, limit) -> async iterator of keys, ascending
    aclose()

`Storage` is the structural type that callers depend on.
`StorageBase` is the optional base class for adapters: it validates
keys, data and arguments, refuses operations after ``aclose()``, pages
listings, and leaves only the backend calls (``_put``, ``_get``, ``_delete``,
``_list_page``, ``_aclose``) to the adapter.

Writes whose outcome is unknown
-------------------------------
A put or delete that is cancelled, times out or loses its connection after
its request may have left the client is *indeterminate*: it is atomic (all or
nothing), but it may already have happened, or may still happen later (bytes
already in the server's socket, a thread already writing). This is the model
of FoundationDB's ``commit_unknown_result`` and of Jepsen's "info" operations:
an indeterminate write may take effect at any moment after it was issued, or
never.

- An adapter that can guarantee that nothing of a cancelled operation lands
  once ``CancelledError`` has been raised declares
  `Capabilities.settles_cancelled_writes`; the conformance suite holds it
  to that, watching through a second client. One that cannot (S3 and Azure Blob
  over HTTP) declares nothing.
- A timeout or a lost connection after the request may have left raises
  `OutcomeUnknown` (a ``StorageUnavailable``), so
  callers can tell "failed" from "may have happened".
- Everything above the protocol is correct whatever a write's outcome: the
  store never overwrites data that matters unconditionally (records are
  create-only, heads move by compare-and-swap) and reconciles a conflict by
  reading what is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Literal, NamedTuple, Protocol, Self, runtime_checkable

from .errors import NotFound, OutcomeUnknown, PreconditionFailed, StorageClosed, StorageError
from .keys import MAX_KEY_BYTES, validate_key, validate_prefix

__all__ = [
    "CREATE",
    "OVERWRITE",
    "Capabilities",
    "GetResult",
    "IfMatch",
    "IntegrityChecked",
    "ListPage",
    "PutMode",
    "Storage",
    "StorageBase",
    "delete_many",
]


@dataclass(frozen=True, slots=True)
class IfMatch:
    """Put mode: replace the value only if the stored version is ``version``.

    A missing key, or another version, raises
    `PreconditionFailed`.
    """

    version: str


PutMode = Literal["overwrite", "create"] | IfMatch
"""How `Storage.put` treats an existing value.

- ``"overwrite"``: write whatever is stored (the default).
- ``"create"``: write only if the key does not exist, else
  `PreconditionFailed`.
- ``IfMatch(version)``: write only if the stored version is ``version``, else
  `PreconditionFailed`.
"""

OVERWRITE: PutMode = "overwrite"
CREATE: PutMode = "create"


class GetResult(NamedTuple):
    """What `Storage.get` returns: the stored bytes and their opaque version."""

    data: bytes
    version: str


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an adapter declares about itself; the conformance suite checks each claim.

    Attributes:
        conditional_put: ``put`` honours ``"create"`` and ``IfMatch`` atomically.
        conditional_delete: ``delete(if_match=...)`` is atomic.
        durable: data survives the process that wrote it.
        shared: several processes or clients can use the same data at once.
        ttl: the adapter can expire data after a configured time.
        settles_cancelled_writes: once a put or delete has raised
            ``CancelledError``, nothing of it lands later, as seen from any
            client (the adapter waits for its thread, a server-side deadline or
            the reply, within a bounded grace). Without it, a cancelled write is
            indeterminate: it may take effect at any moment after it was
            issued. See "Writes whose outcome is unknown" above.
        indexed_list: ``list(prefix, start_after=..., limit=k)`` reads an
            index: its cost is about that of a get (O(log N + k)) however many
            keys N the storage or the prefix holds. Callers may then find the
            newest of many keys with one ``list(limit=1)`` instead of keeping
            a pointer to it (the integrations' heads). Not declared where a
            listing reads a directory or costs a request priced above a get.
        local: the bytes live in this process's memory or on a local disk, so
            a byte read or written costs less than compressing it (zstd at
            level 1 runs at about 250 MB/s on the project's machine, and a
            read would pay its decompression too). A hint about cost, not a
            guarantee: the integrations store values uncompressed by default
            on such a storage and compress them where bytes cross a network.
            Not checked by the conformance suite.
    """

    conditional_put: bool = True
    conditional_delete: bool = True
    durable: bool = True
    shared: bool = True
    ttl: bool = False
    settles_cancelled_writes: bool = False
    indexed_list: bool = False
    local: bool = False


@runtime_checkable
class Storage(Protocol):
    """A byte-level key/value storage with versions and conditional writes.

    Keys follow `checkpointkit.keys.validate_key`. Versions are opaque
    strings that change on every write, including a delete and a re-create.

    Cancellation: when the awaiting task is cancelled, an operation raises
    ``CancelledError`` promptly, even if the backend stopped answering; the
    client stays healthy (the next operation gets its own answer); a cancelled
    put has either fully happened or not at all. Whether it can still land
    after ``CancelledError`` depends on
    `Capabilities.settles_cancelled_writes`: without it, a cancelled or
    timed-out write is indeterminate (see the module docstring).
    """

    capabilities: ClassVar[Capabilities]

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        """Store ``data`` under ``key`` atomically and return the new version.

        Any reader sees the whole old or the whole new value, never a part,
        also when the put is cancelled or the process is killed mid-put.

        Raises:
            PreconditionFailed: ``mode`` is ``"create"`` and the key exists, or
                ``IfMatch`` and the stored version differs or the key is missing.
            InvalidKey: the key is not valid.
            TypeError: ``data`` is not bytes-like.
            StorageClosed: the storage was closed.
            OutcomeUnknown: the request may have reached the backend, but no
                answer came (timeout, lost connection): the write may have
                happened, or may still happen.
            StorageUnavailable: the backend failed.
        """
        ...

    async def get(self, key: str) -> GetResult:
        """Return the bytes stored under ``key`` and their version.

        Raises:
            NotFound: the key does not exist.
            InvalidKey, StorageClosed, StorageUnavailable: as for `put`.
        """
        ...

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        """Delete ``key``; return whether it existed.

        Raises:
            PreconditionFailed: ``if_match`` is given and the stored version
                differs (a missing key returns False).
            InvalidKey, StorageClosed, OutcomeUnknown, StorageUnavailable: as
                for `put`.
        """
        ...

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        """Iterate, in ascending order, the keys that start with ``prefix``.

        Only keys greater than ``start_after`` are returned, at most ``limit``
        of them. The adapter pages internally and never yields a key outside
        the prefix.

        Raises:
            InvalidKey: the prefix or ``start_after`` is not valid.
            ValueError: ``limit`` is negative.
            StorageClosed, StorageUnavailable: as for `put`.
        """
        ...

    async def aclose(self) -> None:
        """Release every resource; idempotent. Later operations raise StorageClosed.

        When it returns, no session, socket, file or worker thread of the
        storage is left open or writing, even if it was cancelled. It returns
        without raising while the backend is down: it has nothing to ask it.
        """
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class IntegrityChecked(Protocol):
    """A storage whose backend can check its own structures, beyond what a read sees.

    A damaged B-tree index can make a stored key read as missing without any
    error; only a check of the structure itself finds it. ``checkpointkit
    verify`` calls it where a storage has it (SQLite's ``PRAGMA integrity_check``).
    """

    async def check_integrity(self) -> list[str]:
        """Every problem the backend finds in its own structures, one line each; [] if none.

        Raises:
            StorageUnavailable: the check could not run at all.
        """
        ...


class ListPage(NamedTuple):
    """One page of a listing, as an adapter's ``_list_page`` returns it.

    Attributes:
        keys: keys in ascending order, all starting with the prefix.
        cursor: an adapter-defined token for the next page, or None at the end.
    """

    keys: list[str]
    cursor: Any


class StorageBase:
    """Base class for adapters: checks arguments, state and paging in one place.

    Subclasses set `capabilities` and implement ``_put``, ``_get``,
    ``_delete``, ``_list_page`` and ``_aclose``; these receive validated keys
    and ``bytes``, and are never called after `aclose`.
    """

    capabilities: ClassVar[Capabilities] = Capabilities()
    page_size: ClassVar[int] = 1000
    """Keys fetched per backend request while listing."""

    _closed: bool = False
    _closing: asyncio.Event | None = None  # set once the first aclose() has ended

    # -- what an adapter implements ------------------------------------------------
    def _may_match(self, version: str) -> bool:
        """Whether ``version`` has the form of a version this adapter hands out.

        Versions compare by exact string equality, so one of another form
        (``"013"`` where the adapter writes ``"13"``, ``"²"``, an empty string)
        can never match. `put` and `delete` refuse such a version
        before it reaches the backend, where it could otherwise fail a shared
        batch or transaction, or match by a looser rule (a number, an HTTP
        ``*``). The default accepts any non-empty str; adapters narrow it.
        """
        return bool(version)

    def holds_key(self, key: str) -> bool:
        """Whether the backend's names hold the valid ``key``.

        Every valid key does (at most 1024 UTF-8 bytes) unless the adapter
        puts a root before it on a backend that limits whole names (S3's
        1024-byte object names under a prefix), or the server has a shorter
        limit (SeaweedFS: 255 bytes per name segment). An operation on a key
        it does not hold raises ``InvalidKey`` naming the limit. The
        conformance suite draws its longest keys within it.
        """
        return len(key.encode()) <= MAX_KEY_BYTES

    # -- the backend calls ---------------------------------------------------------
    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        raise NotImplementedError

    async def _get(self, key: str) -> GetResult:
        raise NotImplementedError

    async def _delete(self, key: str, if_match: str | None) -> bool:
        raise NotImplementedError

    async def _delete_many(self, keys: list[str]) -> int:
        """Delete validated ``keys`` unconditionally; return how many existed.

        The default deletes one key at a time. Adapters override it with one
        backend request or transaction (a pipeline, ``DeleteObjects``, a batch). A
        key's delete that fails once earlier ones deleted something (the storage
        closed under the batch, say) raises `OutcomeUnknown`: part of the batch
        happened, so the error of the failed key alone (``StorageClosed``, "not
        done") would not be true of it.
        """
        existed = 0
        for key in keys:
            try:
                existed += await self._delete(key, None)
            except StorageError as exc:
                if not existed or isinstance(exc, OutcomeUnknown):
                    raise  # nothing deleted yet: what the error says of the batch is true
                raise OutcomeUnknown(  # cut off (by aclose, say) after deleting some keys
                    f"delete_many deleted {existed} of its {len(keys)} keys, then failed on "
                    f"key {key!r}: {exc}"
                ) from exc
        return existed

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        """Return up to ``limit`` keys after ``start_after`` (first page) or ``cursor``."""
        raise NotImplementedError

    async def _aclose(self) -> None:
        """Release the backend's resources; called once."""

    # -- the protocol ----------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosed(f"{type(self).__name__} is closed")

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        """Store ``data`` under ``key`` atomically; see `Storage.put`."""
        self._check_open()
        validate_key(key)
        if type(data) is not bytes:
            data = _as_bytes(key, data)
        if not (mode == "overwrite" or mode == "create" or isinstance(mode, IfMatch)):
            raise ValueError(
                f"invalid put mode {mode!r} for key {key!r}: "
                "use 'overwrite', 'create' or IfMatch(version)"
            )
        if isinstance(mode, IfMatch):
            version = mode.version
            if not isinstance(version, str):
                raise TypeError(
                    f"IfMatch version for key {key!r} must be a version string, "
                    f"not {type(version).__name__}"
                )
            if not self._may_match(version):
                raise PreconditionFailed(
                    f"key {key!r}: if-match version {version!r} cannot match any version "
                    f"{type(self).__name__} writes (versions compare as exact strings); "
                    "nothing was written"
                )
        return await self._put(key, data, mode)

    async def get(self, key: str) -> GetResult:
        """Return the bytes and version stored under ``key``; see `Storage.get`."""
        self._check_open()
        validate_key(key)
        return await self._get(key)

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        """Delete ``key``, return whether it existed; see `Storage.delete`."""
        self._check_open()
        validate_key(key)
        if if_match is not None and not isinstance(if_match, str):
            raise TypeError(f"if_match for key {key!r} must be a version string or None")
        if if_match is not None and not self._may_match(if_match):
            # It cannot match: a missing key returns False, an existing one fails its
            # condition, as the backend would answer for any other version.
            try:
                await self._get(key)
            except NotFound:
                return False
            raise PreconditionFailed(
                f"key {key!r}: if-match version {if_match!r} cannot match any version "
                f"{type(self).__name__} writes (versions compare as exact strings); "
                "nothing was deleted"
            )
        return await self._delete(key, if_match)

    async def delete_many(self, keys: Iterable[str]) -> int:
        """Delete every key of ``keys`` unconditionally; return how many existed.

        An optional operation of the protocol (see `delete_many`): one
        request or transaction where the backend has one. Every key is
        validated before anything is deleted. Not atomic as a whole: if it
        fails or is cancelled, any subset may have been deleted.

        Raises:
            InvalidKey: a key is not valid (nothing is deleted).
            StorageClosed, OutcomeUnknown, StorageUnavailable: as for
                `Storage.put`.
        """
        self._check_open()
        batch = list(keys)
        for key in batch:
            if not isinstance(key, str):
                raise TypeError(f"keys must be str, not {type(key).__name__}")
            validate_key(key)
        if not batch:
            return 0
        return await self._delete_many(batch)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        """Iterate keys under ``prefix`` in ascending order; see `Storage.list`."""
        self._check_open()
        validate_prefix(prefix)
        if start_after is not None and not isinstance(start_after, str):
            raise TypeError(f"start_after must be a str or None, not {type(start_after).__name__}")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be a non-negative int or None, not {limit!r}")
        return _Listing(self, prefix, start_after, limit)

    async def aclose(self) -> None:
        """Close the storage; idempotent; see `Storage.aclose`.

        A call made while another is still closing returns when that one has ended,
        not at once: whichever returns, the storage has released what it holds.
        """
        if self._closed:
            closing = self._closing
            if closing is not None:
                await closing.wait()
            return
        self._closed = True
        closing = self._closing = asyncio.Event()
        try:
            await self._aclose()
        finally:
            closing.set()

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def delete_many(storage: Storage, keys: Iterable[str]) -> int:
    """Delete ``keys`` from any storage, in one batch where it has ``delete_many``.

    ``delete_many`` is optional in the protocol: a storage without it (one that
    implements `Storage` directly) gets one ``delete`` per key.
    Returns how many of the keys existed.
    """
    batch = getattr(storage, "delete_many", None)
    if batch is not None:
        return int(await batch(keys))
    existed = 0
    for key in keys:
        existed += await storage.delete(key)
    return existed


def _as_bytes(key: str, data: object) -> bytes:
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"data for key {key!r} must be bytes, not {type(data).__name__}")


class _Listing:
    """The async iterator behind `StorageBase.list`: pages lazily, stops at ``limit``.

    A plain iterator rather than an async generator, so that a listing left
    unfinished needs no finalization by the event loop.
    """

    __slots__ = ("_buffer", "_cursor", "_done", "_first", "_left", "_prefix", "_start", "_storage")

    def __init__(
        self, storage: StorageBase, prefix: str, start_after: str | None, limit: int | None
    ) -> None:
        self._storage = storage
        self._prefix = prefix
        self._start = start_after
        self._left = limit
        self._cursor: Any = None
        self._buffer: list[str] = []
        self._first = True
        self._done = limit == 0

    def __aiter__(self) -> _Listing:
        return self

    async def __anext__(self) -> str:
        while not self._buffer:
            if self._done:
                raise StopAsyncIteration
            storage = self._storage
            storage._check_open()
            want = storage.page_size if self._left is None else min(self._left, storage.page_size)
            given = None if self._first else self._cursor
            page = await storage._list_page(self._prefix, self._start, given, want)
            if not page.keys and page.cursor is not None:
                after = self._start if given is None else given
                if page.cursor == after:  # the next call would be this one again, forever
                    raise StorageError(
                        f"{type(storage).__name__}._list_page returned no keys and, as its "
                        f"cursor, the position it was asked to list after ({after!r}): the "
                        f"listing of prefix {self._prefix!r} would never end (an adapter bug)"
                    )
            self._first = False
            self._cursor = page.cursor
            self._buffer = page.keys[::-1]
            if page.cursor is None:
                self._done = True
        key = self._buffer.pop()
        if self._left is not None:
            self._left -= 1
            if self._left == 0:
                self._done = True
                self._buffer.clear()
        return key

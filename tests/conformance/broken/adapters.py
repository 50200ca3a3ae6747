"""The broken adapters: :class:`IOMemoryStorage` is correct; each subclass breaks one promise."""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import itertools
import socket
from dataclasses import dataclass, field
from typing import Any, ClassVar

from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.errors import NotFound, OutcomeUnknown, PreconditionFailed
from checkpointkit.storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase

IO_DELAY = 0.0005
"""Simulated backend latency of every operation, in seconds."""


@dataclass
class _Data:
    values: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


class IOMemoryStorage(StorageBase):
    """A correct in-memory adapter whose operations wait for simulated I/O first.

    The wait comes before the (atomic) change, so a cancellation during it
    leaves nothing done: the reference that the broken variants deviate from.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=False, settles_cancelled_writes=True
    )

    def __init__(self) -> None:
        self._data = _Data()

    async def _io(self) -> None:
        await asyncio.sleep(IO_DELAY)

    def _check(self, key: str, mode: PutMode) -> tuple[bytes, str] | None:
        current = self._data.values.get(key)
        if mode == "create" and current is not None:
            raise PreconditionFailed(f"key {key!r} exists")
        if isinstance(mode, IfMatch) and (current is None or current[1] != mode.version):
            raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
        return current

    def _store(self, key: str, data: bytes) -> str:
        d = self._data
        version = str(next(d.counter))
        if key not in d.values:
            bisect.insort(d.keys, key)
        d.values[key] = (data, version)
        return version

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._io()
        self._check(key, mode)
        return self._store(key, data)

    async def _get(self, key: str) -> GetResult:
        await self._io()
        try:
            data, version = self._data.values[key]
        except KeyError:
            raise NotFound(f"key {key!r} not found") from None
        return GetResult(data, version)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await self._io()
        d = self._data
        current = d.values.get(key)
        if current is None:
            return False
        if if_match is not None and current[1] != if_match:
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        del d.values[key]
        d.keys.remove(key)
        return True

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._io()
        keys = self._data.keys
        after = cursor if cursor is not None else start_after
        lo = (
            bisect.bisect_right(keys, after)
            if after is not None and after >= prefix
            else bisect.bisect_left(keys, prefix)
        )
        page = [k for k in keys[lo : lo + limit] if k.startswith(prefix)]
        more = lo + limit < len(keys) and len(page) == limit
        return ListPage(page, page[-1] if more else None)


class ListCursorStuck(IOMemoryStorage):
    """Bug: past the first page, a page holds no keys and hands back the cursor it was given
    (as the Redis adapter once did on a scope registered more times than a page scans): the
    listing would ask for the same page forever."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        if cursor is not None:
            await self._io()
            return ListPage([], cursor)
        return await super()._list_page(prefix, start_after, cursor, limit)


class NonAtomicPut(IOMemoryStorage):
    """Bug: the put writes the first half, waits for I/O, then the rest; a reader can see half."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        self._check(key, mode)
        self._store(key, data[: len(data) // 2])
        await self._io()
        return self._store(key, data)


class SwallowsCancel(IOMemoryStorage):
    """Bug: a cancellation during the put's I/O is caught and the put goes on and returns."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        try:
            await self._io()
        except asyncio.CancelledError:
            pass
        self._check(key, mode)
        return self._store(key, data)


class LandsLater(IOMemoryStorage):
    """Bug: the write runs in a detached task; a cancelled put raises, but the write lands later."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        return await asyncio.shield(asyncio.ensure_future(self._write_later(key, data, mode)))

    async def _write_later(self, key: str, data: bytes, mode: PutMode) -> str:
        await asyncio.sleep(0.01)
        self._check(key, mode)
        return self._store(key, data)


class CreateOverwrites(IOMemoryStorage):
    """Bug: create-only behaves as overwrite."""

    def _check(self, key: str, mode: PutMode) -> tuple[bytes, str] | None:
        return super()._check(key, "overwrite" if mode == "create" else mode)


class IfMatchIgnoresVersion(IOMemoryStorage):
    """Bug: an if-match put writes whatever the stored version is."""

    def _check(self, key: str, mode: PutMode) -> tuple[bytes, str] | None:
        return super()._check(key, "overwrite" if isinstance(mode, IfMatch) else mode)


class ListLeaksOutsidePrefix(IOMemoryStorage):
    """Bug: a listing returns every key from the prefix on, also those past the prefix."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._io()
        keys = self._data.keys
        after = cursor if cursor is not None else start_after
        lo = (
            bisect.bisect_right(keys, after)
            if after is not None and after >= prefix
            else bisect.bisect_left(keys, prefix)
        )
        page = keys[lo : lo + limit]
        return ListPage(page, page[-1] if len(page) == limit else None)


class StaleReply(IOMemoryStorage):
    """Bug: one pipelined "connection" whose replies are read in order by whoever asks next.

    A cancelled call leaves its reply behind, and the next call reads it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._requests: asyncio.Queue[tuple[str, tuple[Any, ...]]] = asyncio.Queue()
        self._replies: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue()
        self._server: asyncio.Task[None] | None = None

    async def _call(self, op: str, *args: Any) -> Any:
        if self._server is None:
            self._server = asyncio.ensure_future(self._serve())
        self._requests.put_nowait((op, args))
        ok, value = await self._replies.get()  # a cancelled call leaves its reply here
        if not ok:
            raise value
        return value

    async def _serve(self) -> None:
        while True:
            op, args = await self._requests.get()
            try:
                value = await getattr(IOMemoryStorage, op)(self, *args)
                self._replies.put_nowait((True, value))
            except Exception as exc:
                self._replies.put_nowait((False, exc))

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        result: str = await self._call("_put", key, data, mode)
        return result

    async def _get(self, key: str) -> GetResult:
        result: GetResult = await self._call("_get", key)
        return result

    async def _delete(self, key: str, if_match: str | None) -> bool:
        result: bool = await self._call("_delete", key, if_match)
        return result

    async def _aclose(self) -> None:
        if self._server is not None:
            self._server.cancel()
            await asyncio.gather(self._server, return_exceptions=True)


class LeaksSession(IOMemoryStorage):
    """Bug: opens an aiohttp client session on first use and never closes it."""

    _session: Any = None

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession()
        return await super()._put(key, data, mode)


class LeavesTaskPending(IOMemoryStorage):
    """Bug: starts a background "flusher" task that aclose() never stops."""

    _flusher: asyncio.Task[None] | None = None

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(asyncio.Event().wait())
        return await super()._put(key, data, mode)


class NeverAwaits(IOMemoryStorage):
    """Bug: the put creates a coroutine (a flush) and never awaits it."""

    async def _flush(self) -> None:
        await self._io()

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        version = await super()._put(key, data, mode)
        self._flush()  # type: ignore[unused-coroutine]  # the bug
        return version


class _Connection:
    """A client connection whose finalizer closes it, and fails when it was closed already."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        if self.closed:
            raise RuntimeError("connection already closed")
        self.closed = True

    def __del__(self) -> None:
        self.close()


class FinalizerRaises(IOMemoryStorage):
    """Bug: aclose() closes the connection, and its finalizer closes it again and raises:
    an exception nobody can catch (printed as "Exception ignored in ...")."""

    def __init__(self) -> None:
        super().__init__()
        self._conn: _Connection | None = _Connection()

    async def _aclose(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None  # collected here: its __del__ raises


class ContentHashVersion(IOMemoryStorage):
    """Bug: the version is a hash of the bytes (plus a generation bumped by a delete).

    It changes across a delete and a re-create, but not when the same bytes
    are written again, nor after A -> B -> A.
    """

    def __init__(self) -> None:
        super().__init__()
        self._generation: dict[str, int] = {}

    def _store(self, key: str, data: bytes) -> str:
        d = self._data
        version = f"{self._generation.get(key, 0)}-{hashlib.sha256(data).hexdigest()[:16]}"
        if key not in d.values:
            bisect.insort(d.keys, key)
        d.values[key] = (data, version)
        return version

    async def _delete(self, key: str, if_match: str | None) -> bool:
        existed = await super()._delete(key, if_match)
        if existed:
            self._generation[key] = self._generation.get(key, 0) + 1
        return existed


_KEPT: list[socket.socket] = []
"""Where KeepsSocketOpen keeps its connections: referenced, so nothing ever warns."""


class ClosesSocket(IOMemoryStorage):
    """Correct: holds a "connection" (a socket pair) from the first call until aclose()."""

    def __init__(self) -> None:
        super().__init__()
        self._conn: tuple[socket.socket, socket.socket] | None = None

    async def _io(self) -> None:
        if self._conn is None and not self._closed:
            self._conn = socket.socketpair()
            _KEPT.extend(self._conn)
        await super()._io()

    async def _aclose(self) -> None:
        if self._conn is not None and self.closes:
            for sock in self._conn:
                sock.close()
                _KEPT.remove(sock)
        self._conn = None

    closes: ClassVar[bool] = True


class KeepsSocketOpen(ClosesSocket):
    """Bug: aclose() forgets the connection, which a module-level pool keeps referenced."""

    closes: ClassVar[bool] = False


class DoubleApply(IOMemoryStorage):
    """Bug: a put cancelled while waiting for its reply is re-sent later (a blind retry).

    The backend had applied it: it takes effect twice, the second time over a
    later write.
    """

    RETRY_AFTER = 0.02

    def __init__(self) -> None:
        super().__init__()
        self._retries: set[asyncio.Task[None]] = set()

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        self._check(key, mode)
        version = self._store(key, data)  # the request reached the backend
        try:
            await self._io()  # the reply travels back
        except asyncio.CancelledError:
            retry = asyncio.ensure_future(self._resend(key, data))
            self._retries.add(retry)
            retry.add_done_callback(self._retries.discard)
            raise
        return version

    async def _resend(self, key: str, data: bytes) -> None:
        await asyncio.sleep(self.RETRY_AFTER)
        if not self._closed:
            self._store(key, data)

    async def _aclose(self) -> None:
        await asyncio.gather(*self._retries, return_exceptions=True)


class ScansEveryKey(MemoryStorage):
    """Bug: declares ``indexed_list``, but a listing scans and sorts every stored key."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after
        found = sorted(
            k for k in self._data.values if k.startswith(prefix) and (after is None or k > after)
        )
        page = found[:limit]
        return ListPage(page, page[-1] if len(found) > limit else None)


class GroupCommit(IOMemoryStorage):
    """Correct: puts issued together are applied in one batch, each with its own condition.

    The first put of a batch waits for the I/O, then applies every put queued
    meanwhile; a failed condition fails only its own put (SQLite's group commit
    in miniature).
    """

    def __init__(self) -> None:
        super().__init__()
        self._queue: list[tuple[str, bytes, PutMode, asyncio.Future[str]]] = []

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._queue.append((key, data, mode, future))
        if len(self._queue) == 1:  # the batch's first put commits it
            try:
                await self._io()
            finally:
                batch, self._queue = self._queue, []
                self._commit(batch)
        return await future

    def _commit(self, batch: list[tuple[str, bytes, PutMode, asyncio.Future[str]]]) -> None:
        for key, data, mode, future in batch:
            try:
                self._check(key, mode)
            except PreconditionFailed as exc:
                future.set_exception(exc)
            else:
                future.set_result(self._store(key, data))


class NumericVersionBatch(GroupCommit):
    """Bug: versions compare as numbers (``"013"`` matches ``"13"``), and a version that is
    no number (``"²"``, which ``isdigit`` accepts) fails the whole batch: every other put
    of it is rolled back (the SQLite adapter's old bug)."""

    def _check(self, key: str, mode: PutMode) -> tuple[bytes, str] | None:
        current = self._data.values.get(key)
        if isinstance(mode, IfMatch) and mode.version.isdigit():
            if current is None or int(current[1]) != int(mode.version):
                raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
            return current
        return super()._check(key, mode)

    def _commit(self, batch: list[tuple[str, bytes, PutMode, asyncio.Future[str]]]) -> None:
        saved = dict(self._data.values), list(self._data.keys)
        try:
            results: list[str | PreconditionFailed] = []
            for key, data, mode, _ in batch:
                try:
                    self._check(key, mode)
                except PreconditionFailed as exc:
                    results.append(exc)
                else:
                    results.append(self._store(key, data))
        except ValueError as exc:  # the transaction is rolled back, every caller fails
            self._data.values, self._data.keys = saved
            for *_, future in batch:
                future.set_exception(OutcomeUnknown(f"the batch failed: {exc!r}"))
            return
        for (*_, future), result in zip(batch, results, strict=True):
            if isinstance(result, PreconditionFailed):
                future.set_exception(result)
            else:
                future.set_result(result)

"""Adapters that wrap a blocking client in threads, the most common way to write one.

:class:`ThreadedStore` is correct: a shared in-process "server" (one per
``location``, so two clients see the same data) and a client whose every call
runs in its own worker threads, with a simulated latency and upload rate. A
cancelled write sets an abort flag that the worker checks after each chunk and,
under the server's lock, right before its commit: nothing lands once
``CancelledError`` was raised, and the cancellation is prompt.

Each subclass breaks one promise.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

from checkpointkit.errors import NotFound, PreconditionFailed
from checkpointkit.storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase

LATENCY = 0.005
"""Seconds a write spends on the wire and in the server before it commits."""

RATE = 160 * 1024 * 1024
"""Simulated upload rate in bytes per second: a 32 MiB value takes 0.2 s."""

ABORT_HANDSHAKE = 1.5
"""Seconds :class:`SlowCancel` waits for the server to confirm an aborted multi-part upload."""

CHUNK = 1024 * 1024


@dataclass
class _Server:
    lock: threading.Lock = field(default_factory=threading.Lock)
    values: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    clients: int = 0


_SERVERS: dict[str, _Server] = {}
_SERVERS_LOCK = threading.Lock()


class _Abort:
    """Set by the event loop when the awaiting task is cancelled."""

    def __init__(self) -> None:
        self.flag = False
        self.multipart = False  # set by the worker: the value takes several chunks


class ThreadedStore(StorageBase):
    """Correct: every call in a worker thread; a cancelled write is aborted before it commits."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=True, settles_cancelled_writes=True
    )
    aborts: ClassVar[bool] = True  # the worker checks the abort flag
    confirms_abort: ClassVar[bool] = False  # a cancelled upload waits for the server
    latency: ClassVar[float] = LATENCY  # a write's time on the wire and in the server

    def __init__(self, location: str | None = None) -> None:
        self._location = location
        with _SERVERS_LOCK:
            if location is None:
                self._server = _Server()
            else:
                self._server = _SERVERS.setdefault(location, _Server())
            self._server.clients += 1
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="threaded-store")

    # -- the client side --------------------------------------------------------------------
    async def _run(self, fn: Any, *args: Any) -> Any:
        abort = _Abort()
        future = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args, abort)
        try:
            return await future
        except asyncio.CancelledError:
            abort.flag = True
            if self.confirms_abort and abort.multipart:
                await _uncancellable(asyncio.to_thread(time.sleep, ABORT_HANDSHAKE))
            raise

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        result: str = await self._run(self._put_sync, key, data, mode)
        return result

    async def _get(self, key: str) -> GetResult:
        result: GetResult = await self._run(self._get_sync, key)
        return result

    async def _delete(self, key: str, if_match: str | None) -> bool:
        result: bool = await self._run(self._delete_sync, key, if_match)
        return result

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        result: ListPage = await self._run(self._list_sync, prefix, start_after, cursor, limit)
        return result

    async def _aclose(self) -> None:
        await asyncio.to_thread(self._pool.shutdown, True)
        with _SERVERS_LOCK:
            self._server.clients -= 1
            if self._location is not None and self._server.clients == 0:
                _SERVERS.pop(self._location, None)

    # -- the "server" side, in a worker thread ----------------------------------------------
    def _aborted(self, abort: _Abort) -> bool:
        return self.aborts and abort.flag

    def _upload(self, data: bytes, abort: _Abort) -> bool:
        """Send ``data`` at :data:`RATE`; False if aborted on the way."""
        time.sleep(self.latency)
        abort.multipart = len(data) > CHUNK
        for start in range(0, max(len(data), 1), CHUNK):
            if self._aborted(abort):
                return False
            time.sleep(len(data[start : start + CHUNK]) / RATE)
        return not self._aborted(abort)

    def _put_sync(self, key: str, data: bytes, mode: PutMode, abort: _Abort) -> str:
        if not self._upload(data, abort):
            raise asyncio.CancelledError  # nobody waits for it any more
        s = self._server
        with s.lock:
            if self._aborted(abort):
                raise asyncio.CancelledError
            current = s.values.get(key)
            if mode == "create" and current is not None:
                raise PreconditionFailed(f"key {key!r} exists")
            if isinstance(mode, IfMatch) and (current is None or current[1] != mode.version):
                raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
            version = str(next(s.counter))
            if current is None:
                bisect.insort(s.keys, key)
            s.values[key] = (data, version)
            return self._version(version, data)

    def _version(self, version: str, data: bytes) -> str:
        return version

    def _get_sync(self, key: str, abort: _Abort) -> GetResult:
        with self._server.lock:
            found = self._server.values.get(key)
        if found is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(*found)

    def _delete_sync(self, key: str, if_match: str | None, abort: _Abort) -> bool:
        time.sleep(self.latency)
        s = self._server
        with s.lock:
            if self._aborted(abort):
                raise asyncio.CancelledError
            current = s.values.get(key)
            if current is None:
                return False
            if if_match is not None and current[1] != if_match:
                raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
            del s.values[key]
            s.keys.remove(key)
            return True

    def _list_sync(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int, abort: _Abort
    ) -> ListPage:
        with self._server.lock:
            keys = list(self._server.keys)
        after = cursor if cursor is not None else start_after
        lo = (
            bisect.bisect_right(keys, after)
            if after is not None and after >= prefix
            else bisect.bisect_left(keys, prefix)
        )
        page = [k for k in keys[lo : lo + limit] if k.startswith(prefix)]
        more = lo + limit < len(keys) and len(page) == limit
        return ListPage(page, page[-1] if more else None)


class LateThread(ThreadedStore):
    """Bug: a cancelled write's thread keeps running and commits later (plain ``to_thread``).

    It declares ``settles_cancelled_writes``, which it does not keep. Its server takes
    50 ms per write, so that a cancelled write commits well after the suite's first look
    at the key, however loaded the machine: with 5 ms, a loaded machine's look came after
    the commit in some runs (the write then seemed to land before ``CancelledError``),
    and the first sweep of ``test_cancelled_put_does_not_land_later`` saw no late landing.
    """

    aborts: ClassVar[bool] = False
    latency: ClassVar[float] = 10 * LATENCY


class LateThreadUndeclared(LateThread):
    """The same late landings, honestly undeclared: the suite reports them as indeterminate."""

    capabilities: ClassVar[Capabilities] = Capabilities(durable=False, shared=True)


class SlowCancel(ThreadedStore):
    """Bug: a cancelled multi-part upload waits 1.5 s for the server to confirm the abort.

    Nothing lands late, but the cancellation is not prompt.
    """

    confirms_abort: ClassVar[bool] = True


async def _uncancellable(aw: Any) -> None:
    """Wait for ``aw`` to the end, however often the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(aw)
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue

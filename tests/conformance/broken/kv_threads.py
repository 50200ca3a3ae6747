"""An in-process store with its own lock, served by worker threads, and its own hold.

:class:`LockedKV` is correct: every call runs in a worker thread that takes the
store's lock before it touches the data, waiting for it in short steps and giving
up once the caller was cancelled (an abort flag, checked again under the lock
before any change). Its target supplies :class:`StoreLock`, a hold that takes the
store's lock from the test, the way a backend author holds an in-process backend:
nothing can stop answering between the event loop and a dict, except the lock the
workers wait for.

Each subclass makes one mistake that only a held backend shows: a cancellation
that waits 2 s for the worker, a delete whose worker commits after the caller was
cancelled, a get whose late answer is handed to the next caller.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from checkpointkit.conformance.holds import ALL_OPERATIONS, Hold, Operation
from checkpointkit.errors import NotFound, PreconditionFailed
from checkpointkit.storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase

T = TypeVar("T")

CANCEL_WAIT = 2.0
"""Seconds :class:`CancelWaitsForWorker` waits for its worker before it re-raises."""


class _Aborted(Exception):
    """The caller was cancelled: the worker gives up without changing anything."""


@dataclass
class _Store:
    lock: threading.Lock = field(default_factory=threading.Lock)
    values: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


_STORES: dict[str, _Store] = {}


class LockedKV(StorageBase):
    """Correct: workers take the store's lock in steps and give up once cancelled."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=True, settles_cancelled_writes=True
    )

    def __init__(self, location: str | None = None) -> None:
        self.store = _Store() if location is None else _STORES.setdefault(location, _Store())
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="locked-kv")

    # -- the caller's side ------------------------------------------------------------------
    async def _call(self, fn: Callable[[], T], abort: threading.Event) -> T:
        future = asyncio.get_running_loop().run_in_executor(self._pool, self._locked, fn, abort)
        try:
            return await future
        except asyncio.CancelledError:
            abort.set()
            await self._cancelled(future)
            raise

    async def _cancelled(self, future: asyncio.Future[Any]) -> None:
        """What a cancelled call does about its worker: nothing; the worker gives up."""

    def _locked(self, fn: Callable[[], T], abort: threading.Event) -> T:
        lock = self.store.lock
        while not lock.acquire(timeout=0.005):
            if abort.is_set():
                raise _Aborted
        try:
            if abort.is_set() and self._checks_abort():
                raise _Aborted
            return fn()
        finally:
            lock.release()

    def _checks_abort(self) -> bool:
        return True

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        return await self._call(lambda: self._put_now(key, data, mode), threading.Event())

    async def _get(self, key: str) -> GetResult:
        return await self._call(lambda: self._get_now(key), threading.Event())

    async def _delete(self, key: str, if_match: str | None) -> bool:
        return await self._call(lambda: self._delete_now(key, if_match), threading.Event())

    async def _delete_many(self, keys: list[str]) -> int:
        return await self._call(lambda: self._delete_many_now(keys), threading.Event())

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after
        return await self._call(lambda: self._page_now(prefix, after, limit), threading.Event())

    async def _aclose(self) -> None:
        await asyncio.to_thread(self._pool.shutdown, True)

    # -- the store's side (under its lock) ------------------------------------------------------
    def _put_now(self, key: str, data: bytes, mode: PutMode) -> str:
        s = self.store
        current = s.values.get(key)
        if mode == "create" and current is not None:
            raise PreconditionFailed(f"key {key!r} already exists")
        if isinstance(mode, IfMatch) and (current is None or current[1] != mode.version):
            raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
        version = str(next(s.counter))
        if current is None:
            bisect.insort(s.keys, key)
        s.values[key] = (data, version)
        return version

    def _get_now(self, key: str) -> GetResult:
        found = self.store.values.get(key)
        if found is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(*found)

    def _delete_now(self, key: str, if_match: str | None) -> bool:
        s = self.store
        current = s.values.get(key)
        if current is None:
            return False
        if if_match is not None and current[1] != if_match:
            raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
        del s.values[key]
        s.keys.remove(key)
        return True

    def _delete_many_now(self, keys: list[str]) -> int:
        return sum(self._delete_now(k, None) for k in dict.fromkeys(keys))

    def _page_now(self, prefix: str, after: str | None, limit: int) -> ListPage:
        keys = self.store.keys
        lo = bisect.bisect_right(keys, after) if after is not None else 0
        lo = max(lo, bisect.bisect_left(keys, prefix))
        page = [k for k in keys[lo : lo + limit] if k.startswith(prefix)]
        return ListPage(page, page[-1] if len(page) == limit else None)


class StoreLock(Hold):
    """The store's own lock, taken by the test: every worker waits for it."""

    name = "the store's lock, held by the test"
    operations: frozenset[Operation] = frozenset(ALL_OPERATIONS)

    @asynccontextmanager
    async def held(self, storage: Any, key: str) -> AsyncIterator[None]:
        lock: threading.Lock = storage.store.lock
        await asyncio.to_thread(lock.acquire)
        try:
            yield
        finally:
            lock.release()


class CancelWaitsForWorker(LockedKV):
    """Bug: a cancelled call waits (up to 2 s) for its worker to finish before it re-raises,
    "so that nothing is left running", and the worker waits for the lock without looking
    at an abort flag: held, the cancellation takes 2 s."""

    async def _call(self, fn: Callable[[], T], abort: threading.Event) -> T:
        def locked() -> T:
            with self.store.lock:
                return fn()

        future = asyncio.get_running_loop().run_in_executor(self._pool, locked)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            waiter = asyncio.ensure_future(asyncio.wait({future}, timeout=CANCEL_WAIT))
            while not waiter.done():
                try:
                    await asyncio.shield(waiter)
                except asyncio.CancelledError:
                    continue
            raise


class CommitsAfterCancel(LockedKV):
    """Bug: the worker checks the abort flag while it waits for the lock, but not once it
    has it: a call cancelled while the lock was held commits when the lock is released."""

    def _locked(self, fn: Callable[[], T], abort: threading.Event) -> T:
        with self.store.lock:
            return fn()


class HandsLateAnswerOn(LockedKV):
    """Bug: answers come back through one slot per client (a single reply buffer): a cancelled
    get's worker still fills it, and the next get takes that answer instead of its own."""

    def __init__(self, location: str | None = None) -> None:
        super().__init__(location)
        self._reply: list[GetResult] = []
        self._reply_lock = threading.Lock()

    async def _get(self, key: str) -> GetResult:
        def read() -> None:
            found = self._get_now(key)
            with self._reply_lock:
                self._reply.append(found)

        abort = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(
            self._pool, lambda: self._unchecked(read)
        )
        try:
            await future
        except asyncio.CancelledError:
            abort.set()
            raise
        with self._reply_lock:
            return self._reply.pop(0)

    def _unchecked(self, fn: Callable[[], None]) -> None:
        with self.store.lock:
            fn()


def locked_target(cls: type[LockedKV] = LockedKV, *, hold: Hold | None = None) -> Any:
    """A conformance target of ``cls`` at fresh or given locations, holding the store's lock."""
    from checkpointkit.conformance import Target

    async def factory(*, location: str | None = None) -> AsyncIterator[LockedKV]:
        async with cls(location) as storage:
            yield storage

    return Target(
        factory, name=cls.__name__, hold=StoreLock() if hold is None else hold, settle_window=0.3
    )

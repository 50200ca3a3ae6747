"""Broken LangGraph savers and agent-framework storages, each with its correct twin.

Every saver here keeps its data in a :class:`Backend` shared by location (so a
second instance sees it) whose writes wait while the backend is held (the
targets' ``hold``). The correct twins are :class:`HeldSaver`,
:class:`HeldStorage` and the other classes whose docstring begins "Correct";
each broken class differs from its twin in one bug, named in its docstring.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import fnmatch
import hashlib
import json
import os
import random
import re
import threading
import time
import unicodedata
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from agent_framework import (
    InMemoryCheckpointStorage,
    WorkflowCheckpoint,
    WorkflowCheckpointException,
)
from agent_framework._workflows._checkpoint_encoding import (
    decode_checkpoint_value,
    encode_checkpoint_value,
)
from checkpointkit.conformance.ecosystems import EcosystemTarget
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.memory import InMemorySaver

T = TypeVar("T")


class Backend:
    """The data of one location, and whether writes to it are held."""

    def __init__(self) -> None:
        self.storage: defaultdict[str, Any] = defaultdict(lambda: defaultdict(dict))
        self.writes: defaultdict[Any, Any] = defaultdict(dict)
        self.blobs: dict[Any, Any] = {}
        self.checkpoints: dict[str, WorkflowCheckpoint] = {}
        self.head: dict[str, str] = {}
        self.cached: dict[Any, Any] = {}  # a cache kept with the data (a server's)
        self.gate: asyncio.Event | None = None

    async def io(self) -> None:
        """One round trip: waits while the backend is held."""
        await asyncio.sleep(0)
        while self.gate is not None:
            await self.gate.wait()


BACKENDS: dict[str, Backend] = {}


def backend(location: str | None) -> Backend:
    """The backend of ``location`` (a fresh one for None)."""
    return Backend() if location is None else BACKENDS.setdefault(location, Backend())


@asynccontextmanager
async def hold(location: str | None) -> AsyncIterator[None]:
    """Writes to ``location`` wait until the context exits."""
    b = backend(location)
    gate = asyncio.Event()
    b.gate = gate
    try:
        yield
    finally:
        b.gate = None
        gate.set()


class Connection:
    """One connection to a backend: each request answered in the order sent, its reply
    taken by whichever call reads the connection next. A call cancelled before its reply
    came drops the connection (the next call opens another), unless ``keeps_replies``."""

    def __init__(self, backend: Backend, *, keeps_replies: bool) -> None:
        self.backend = backend
        self.keeps_replies = keeps_replies
        self.replies: asyncio.Queue[Any] = asyncio.Queue()
        self.sent: set[asyncio.Task[None]] = set()

    async def ask(self, compute: Callable[[], Awaitable[Any]]) -> Any:
        """Send a request that the backend answers with ``compute()`` (its value or its
        error); read the next reply."""
        replies = self.replies

        async def serve() -> None:
            await self.backend.io()
            try:
                replies.put_nowait((True, await compute()))
            except Exception as exc:  # the error is the reply
                replies.put_nowait((False, exc))

        task = asyncio.ensure_future(serve())
        self.sent.add(task)
        task.add_done_callback(self.sent.discard)
        try:
            ok, reply = await replies.get()
        except asyncio.CancelledError:
            if not self.keeps_replies:
                self.replies = asyncio.Queue()
            raise
        if not ok:
            raise reply
        return reply


# -- LangGraph ------------------------------------------------------------------------------------
class HeldSaver(InMemorySaver):
    """Correct: LangGraph's InMemorySaver on a shared, holdable backend."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__()
        self.backend = backend(location)
        self.storage = self.backend.storage
        self.writes = self.backend.writes
        self.blobs = self.backend.blobs

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        await self.backend.io()
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.backend.io()
        self.put_writes(config, writes, task_id, task_path)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        await asyncio.sleep(0)
        return self.get_tuple(config)


async def _close_cursor() -> None:
    """Close a database cursor as aiosqlite does: through a future of the thread's event
    loop (``RuntimeError`` in a thread that has none)."""
    loop = asyncio.get_event_loop()
    closed = loop.create_future()
    loop.call_soon(closed.set_result, None)
    await closed


class CursorListSaver(HeldSaver):
    """Correct: ``alist`` reads through a cursor that it closes in an event loop (as an
    aiosqlite cursor is); the sync ``list`` runs the whole listing on the saver's loop and
    returns what it read."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.loop = asyncio.get_running_loop()

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        try:
            for item in InMemorySaver.list(self, config, filter=filter, before=before, limit=limit):
                yield item
                await asyncio.sleep(0)
        finally:
            await _close_cursor()

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        return iter(asyncio.run_coroutine_threadsafe(collect(), self.loop).result())


class SyncListDrivesAlistSaver(CursorListSaver):
    """Bug: the sync ``list`` drives ``alist`` one item at a time from the calling thread
    (``run_coroutine_threadsafe(anext(...), loop)``, as LangGraph's AsyncSqliteSaver does):
    a caller that stops early leaves the async generator to be finalized in its own thread,
    outside the saver's loop, where closing the cursor raises."""

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        listing = self.alist(config, filter=filter, before=before, limit=limit)
        while True:
            try:
                yield asyncio.run_coroutine_threadsafe(anext(listing), self.loop).result()  # type: ignore[arg-type]
            except StopAsyncIteration:
                return


class NoDeleteThreadSaver(HeldSaver):
    """Bug: neither adelete_thread nor delete_thread (BaseCheckpointSaver's raise
    NotImplementedError), as in a saver whose author left them out."""

    adelete_thread = BaseCheckpointSaver.adelete_thread
    delete_thread = BaseCheckpointSaver.delete_thread


class SwallowsCancelSaver(HeldSaver):
    """Bug: aput catches the CancelledError of its round trip and writes anyway."""

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        try:
            await self.backend.io()
        except asyncio.CancelledError:
            pass
        return self.put(config, checkpoint, metadata, new_versions)


class WritesAfterCancelSaver(HeldSaver):
    """Bug: aput's write runs in a shielded task: a cancelled aput raises, the write lands later."""

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        async def write() -> RunnableConfig:
            await self.backend.io()
            return self.put(config, checkpoint, metadata, new_versions)

        return await asyncio.shield(asyncio.ensure_future(write()))


class UnawaitedTaskSaver(HeldSaver):
    """Bug: aput_writes spawns the write as a task it never awaits (left pending at close)."""

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        async def later() -> None:
            await asyncio.Event().wait()  # a flush that waits for a batch that never fills

        self._flusher = asyncio.ensure_future(later())
        self.put_writes(config, writes, task_id, task_path)


class ByReferenceSaver(HeldSaver):
    """Bug: aput keeps the caller's checkpoint dict and returns it from aget_tuple."""

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        result = await super().aput(config, checkpoint, metadata, new_versions)
        self.backend.blobs[("by-ref", checkpoint["id"])] = checkpoint
        return result

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        got = await super().aget_tuple(config)
        if got is None:
            return None
        kept = self.backend.blobs.get(("by-ref", got.checkpoint["id"]))
        return got if kept is None else got._replace(checkpoint=kept)


class SharedLoadSaver(HeldSaver):
    """Bug: aget_tuple caches what it decoded and returns the same object every time."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        key = json.dumps(config["configurable"], sort_keys=True, default=str)
        cache = self.backend.blobs.setdefault("load-cache", {})
        if key not in cache:
            cache[key] = await super().aget_tuple(config)
        return cache[key]  # type: ignore[no-any-return]


class HeadSaver(HeldSaver):
    """Correct: the latest checkpoint is a head that only moves forward."""

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        result = await super().aput(config, checkpoint, metadata, new_versions)
        thread = config["configurable"]["thread_id"]
        await self.backend.io()
        self.move_head(thread, checkpoint["id"])
        return result

    def move_head(self, thread: str, checkpoint_id: str) -> None:
        if checkpoint_id > self.backend.head.get(thread, ""):
            self.backend.head[thread] = checkpoint_id

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        if conf.get("checkpoint_id") is None and conf["thread_id"] in self.backend.head:
            conf = {**conf, "checkpoint_id": self.backend.head[conf["thread_id"]]}
            return await super().aget_tuple({"configurable": conf})
        return await super().aget_tuple(config)


class HeadGoesBackwardsSaver(HeadSaver):
    """Bug: the head is set to whatever was put last, so a slower instance moves it back."""

    def move_head(self, thread: str, checkpoint_id: str) -> None:
        self.backend.head[thread] = checkpoint_id

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        # The older of two concurrent puts takes a round trip more (as a slower client would).
        if int(checkpoint["channel_values"].get("v", 0) or 0) % 2 == 0:
            await asyncio.sleep(0.005)
        return await super().aput(config, checkpoint, metadata, new_versions)


class ListWritesSaver(HeldSaver):
    """Correct: the pending writes of a checkpoint are one list, rewritten under a lock."""

    lock_writes = True

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        key = (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
        locks = self.backend.blobs.setdefault("locks", {})
        lock = locks.setdefault(key, asyncio.Lock()) if self.lock_writes else None
        if lock is not None:
            await lock.acquire()
        try:
            current = dict(self.backend.writes.get(key, {}))  # read
            await self.backend.io()  # a round trip between the read and the write
            scratch = HeldSaver()
            scratch.writes[key] = current
            scratch.put_writes(config, writes, task_id, task_path)
            self.backend.writes[key] = scratch.writes[key]  # write back the whole list
        finally:
            if lock is not None:
                lock.release()


class LosesWritesSaver(ListWritesSaver):
    """Bug: the list of pending writes is read, changed and written back with no lock."""

    lock_writes = False


class SplitSaver(HeldSaver):
    """Correct: values first, then the checkpoint record that names them."""

    record_last = True

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        if self.record_last:
            return await super().aput(config, checkpoint, metadata, new_versions)
        # Record first, with empty values; the values follow after a round trip.
        empty = {**checkpoint, "channel_values": {}}
        result = self.put(config, empty, metadata, {})  # type: ignore[arg-type]
        await self.backend.io()
        await self.backend.io()
        self.put(config, checkpoint, metadata, new_versions)
        return result


class TornSaver(SplitSaver):
    """Bug: the checkpoint record is published before its values are written."""

    record_last = False


class SlowTornSaver(TornSaver):
    """`TornSaver` whose every put takes a while: the suite's writer is still putting when
    its reader finds the torn checkpoint and fails the test."""

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        await asyncio.sleep(0.05)
        return await super().aput(config, checkpoint, metadata, new_versions)


LUA_UNPACK_LIMIT = 8000
"""The most values Lua's ``unpack`` (Redis's scripts) spreads into one call."""


class DeletesAThreadInOneRequestSaver(HeldSaver):
    """Bug: ``adelete_thread`` sends every item of the thread in one request, a Redis
    script's ``redis.call("DEL", unpack(keys))`` (the sixth blind round's Redis saver b14):
    a thread of more than 8,000 items raises Lua's ``too many results to unpack``, and a
    long conversation can never be deleted."""

    async def adelete_thread(self, thread_id: str) -> None:
        await self.backend.io()
        items = sum(len(checkpoints) for checkpoints in self.storage[thread_id].values())
        if items > LUA_UNPACK_LIMIT:
            raise RuntimeError("user_script:1: too many results to unpack")
        self.delete_thread(thread_id)


class ReplacesFirstWriteSaver(HeldSaver):
    """Bug: a regular write of a (task, index) already stored replaces it (``INSERT OR
    REPLACE`` where LangGraph's savers ``INSERT OR IGNORE``)."""

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.backend.io()
        self._upsert(config, writes, task_id, task_path)

    def _upsert(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, path: str
    ) -> None:
        conf = config["configurable"]
        key = (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
        for idx, (channel, value) in enumerate(writes):
            self.writes[key][(task_id, WRITES_IDX_MAP.get(channel, idx))] = (
                task_id,
                channel,
                self.serde.dumps_typed(value),
                path,
            )


class WritesKeyedByChannelSaver(HeldSaver):
    """Bug: the writes table's key is (checkpoint, task_id, channel), not the write's index:
    a task's second write to one channel in one call (two ``Send``s, ``Command(update=
    [("log", a), ("log", b)])``) is dropped as if already stored."""

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        key = (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
        stored = self.writes[key]
        for idx, (channel, value) in enumerate(writes):
            index = WRITES_IDX_MAP.get(channel, idx)
            if index >= 0 and any(w[0] == task_id and w[1] == channel for w in stored.values()):
                continue  # "already stored": the key names the channel, not the index
            stored[(task_id, index)] = (task_id, channel, self.serde.dumps_typed(value), task_path)


class WritesNewestFirstSaver(HeldSaver):
    """Bug: a checkpoint's pending writes are read back newest first (pushed onto a list with
    ``LPUSH`` and read with ``LRANGE 0 -1``): each task's writes come in reverse order."""

    def _ordered_writes(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[tuple[str, str, tuple[str, bytes], str]]:
        return super()._ordered_writes(thread_id, checkpoint_ns, checkpoint_id)[::-1]


class SyncPutWritesReplacesSaver(ReplacesFirstWriteSaver):
    """Bug: the synchronous ``put_writes``, written apart from ``aput_writes``, upserts every
    write (``INSERT OR REPLACE``): a regular write of a (task, index) already stored is
    replaced; ``aput_writes`` keeps the first (``INSERT OR IGNORE``)."""

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.backend.io()
        InMemorySaver.put_writes(self, config, writes, task_id, task_path)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._upsert(config, writes, task_id, task_path)


class _MapsReads(HeldSaver):
    """A saver whose reads change what it stored: every tuple ``get_tuple`` and ``list``
    give (and ``aget_tuple``, which reads through ``get_tuple``) passes `_mapped`."""

    def _mapped(self, t: CheckpointTuple | None) -> CheckpointTuple | None:
        return t

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._mapped(super().get_tuple(config))

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for t in super().list(config, filter=filter, before=before, limit=limit):
            mapped = self._mapped(t)
            assert mapped is not None
            yield mapped


class SharedWriteValuesSaver(_MapsReads):
    """Bug: decoded pending-write values are kept in a decode cache ("a write never changes
    once stored") and handed out as they are: mutating a loaded write's value changes what
    every later read of that checkpoint gives."""

    def _mapped(self, t: CheckpointTuple | None) -> CheckpointTuple | None:
        if t is None:
            return None
        conf = t.config["configurable"]
        outer = (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
        cache = self.backend.cached
        pending = []
        for task_id, channel, typed, _ in self._ordered_writes(*outer):
            key = (outer, task_id, channel, typed[1])
            if key not in cache:
                cache[key] = self.serde.loads_typed(typed)
            pending.append((task_id, channel, cache[key]))
        return t._replace(pending_writes=pending)


class ListsCachedObjectsSaver(HeldSaver):
    """Bug: alist keeps the tuples it decoded in a cache and yields them again (aget_tuple
    decodes afresh): mutating a listed checkpoint changes what the next alist returns."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.decoded: dict[str, CheckpointTuple] = {}

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for found in super().list(config, filter=filter, before=before, limit=limit):
            key = found.config["configurable"]["checkpoint_id"]
            yield self.decoded.setdefault(key, found)


class UnpaddedVersionSaver(HeldSaver):
    """Bug: get_next_version writes its number unpadded (``f"{n}.{random}"``): LangGraph
    compares versions as strings, and ``"10.x"`` sorts before ``"9.x"``."""

    def get_next_version(self, current: Any, channel: Any) -> str:
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1}.{random.random():016}"


class ThreadsComparedSaver(HeldSaver):
    """Correct: a thread's checkpoints are listed and deleted by comparing each stored
    thread id with the one asked for (as a query's ``WHERE`` does), exactly."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored == asked

    def _threads(self, thread_id: Any) -> list[Any]:
        return [t for t in list(self.storage) if self._same(str(t), str(thread_id))]

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if not config:
            yield from super().list(config, filter=filter, before=before, limit=limit)
            return
        for thread in self._threads(config["configurable"]["thread_id"]):
            one: RunnableConfig = {"configurable": {**config["configurable"], "thread_id": thread}}
            yield from super().list(one, filter=filter, before=before, limit=limit)

    def delete_thread(self, thread_id: str) -> None:
        for thread in self._threads(thread_id):
            super().delete_thread(thread)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.backend.io()
        self.delete_thread(thread_id)


class ThreadPrefixSaver(ThreadsComparedSaver):
    """Bug: a thread's checkpoints are found and deleted by the prefix of its id (as a key
    prefix ``thread:{id}`` queried without a separator): thread ``t1`` lists and deletes
    the checkpoints of ``t10``."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored.startswith(asked)


def _like(pattern: str, text: str) -> bool:
    """SQL ``text LIKE pattern``, without an escape character."""
    rx = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, text, re.S) is not None


class ThreadsMatchedByLikeSaver(ThreadsComparedSaver):
    """Bug: threads are found with ``thread_id LIKE ?`` (to share one query with a prefix
    search), the id not escaped: ``_`` and ``%`` in a thread id are wildcards, and thread
    ``t_1`` lists and deletes the checkpoints of ``ta1``."""

    def _same(self, stored: str, asked: str) -> bool:
        return _like(asked, stored)


class ThreadsCaseFoldedSaver(ThreadsComparedSaver):
    """Bug: thread ids compared under a case-insensitive collation (MySQL's default
    ``utf8mb4_0900_ai_ci``, SQL Server's ``SQL_Latin1_General_CP1_CI_AS``): threads
    ``Case`` and ``case`` list and delete each other's checkpoints."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored.casefold() == asked.casefold()


class ThreadsPaddedSaver(ThreadsComparedSaver):
    """Bug: thread ids compared with trailing spaces ignored (SQL Server's ``=``, a ``PAD
    SPACE`` collation, a ``CHAR(n)`` column): threads ``w`` and ``w `` are one."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored.rstrip(" ") == asked.rstrip(" ")


class ThreadsNormalizedSaver(ThreadsComparedSaver):
    """Bug: thread ids compared in Unicode normal form (a macOS file name, a search
    engine's keyword normalizer): ``caf\u00e9`` and ``cafe\u0301`` are one thread."""

    def _same(self, stored: str, asked: str) -> bool:
        return unicodedata.normalize("NFC", stored) == unicodedata.normalize("NFC", asked)


class ThreadsCutTo255Saver(ThreadsComparedSaver):
    """Bug: thread ids compared in their first 255 characters (a ``VARCHAR(255)`` column
    that cuts, an index on a prefix): two long ids that share them are one thread."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored[:255] == asked[:255]


class FilterCheckedSaver(HeldSaver):
    """Correct: ``alist``'s filter is checked on each checkpoint's metadata (as a query's
    ``WHERE`` would): each key holds an equal value."""

    def _holds(self, metadata: dict[str, Any], key: str, value: Any) -> bool:
        return bool(metadata.get(key) == value)

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._selected(config, filter, before, limit, self._holds)

    def _selected(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
        holds: Callable[[dict[str, Any], str, Any], bool],
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints of ``config`` before ``before`` whose metadata ``holds`` each key
        of ``filter``, at most ``limit``."""
        given = 0
        for t in InMemorySaver.list(self, config, before=before):
            if filter and not all(holds(dict(t.metadata), k, v) for k, v in filter.items()):
                continue
            if limit is not None and given >= limit:
                return
            given += 1
            yield t


class DottedFilterKeysNestedSaver(FilterCheckedSaver):
    """Bug: a filter's key is made into a JSON path (``json_extract(metadata, '$.' ||
    key)``), so ``user.id`` is read as the field ``id`` of an object ``user``: a flat key
    with a dot matches nothing, and no error says so."""

    def _holds(self, metadata: dict[str, Any], key: str, value: Any) -> bool:
        found: Any = metadata
        for part in key.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        return bool(found == value)


class BooleanFilterAsTextSaver(FilterCheckedSaver):
    """Bug: a boolean in a filter is bound as its JSON text (``'true'``), and compared
    with what the JSON path extracts, a boolean: a filter on a boolean matches nothing;
    strings and numbers work."""

    def _holds(self, metadata: dict[str, Any], key: str, value: Any) -> bool:
        bound = json.dumps(value) if isinstance(value, bool) else value
        return bool(metadata.get(key) == bound)


class FilterOfOneThreadOnlySaver(FilterCheckedSaver):
    """Bug: the filter is applied in the query of one thread, and the query of every
    thread (``alist(None, filter=...)``, another SQL statement) leaves it out: every
    checkpoint answers."""

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        given = None if config is None else filter
        yield from super().list(config, filter=given, before=before, limit=limit)


class SyncListBooleanFilterAsTextSaver(FilterCheckedSaver):
    """Bug: the synchronous ``list`` builds its query apart from ``alist`` (as a saver with
    a sync and an async connection does) and binds a boolean in a filter as its JSON text
    there: ``alist`` selects right, ``list`` on a boolean matches nothing."""

    def _holds(self, metadata: dict[str, Any], key: str, value: Any) -> bool:
        return BooleanFilterAsTextSaver._holds(self, metadata, key, value)

    async def alist(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        await asyncio.sleep(0)
        right = partial(FilterCheckedSaver._holds, self)
        for t in self._selected(config, filter, before, limit, right):
            yield t


class FilterComparedAsTextSaver(FilterCheckedSaver):
    """Bug: a filter's value is compared as text (``str()`` on both sides, as a query that
    casts the JSON path's value and the bound one to text does): ``{"tenant": 7}`` also
    selects a checkpoint whose tenant is the string ``"7"``, and ``True`` one holding
    ``"True"``."""

    def _holds(self, metadata: dict[str, Any], key: str, value: Any) -> bool:
        return key in metadata and str(metadata[key]) == str(value)


class SpecialWritesByPositionSaver(HeldSaver):
    """Bug: a write's index is its position in the call, special writes included (no
    ``WRITES_IDX_MAP``), and a special write replaces what its (task, index) holds: the
    error of a task that wrote replaces its first regular write."""

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        outer = _conf(config)
        for idx, (channel, value) in enumerate(writes):
            inner = (task_id, idx)
            if channel not in WRITES_IDX_MAP and inner in self.writes[outer]:
                continue  # regular writes are write-once; special ones replace
            self.writes[outer][inner] = (
                task_id,
                channel,
                self.serde.dumps_typed(value),
                task_path,
            )


class DeleteLeavesValuesSaver(HeldSaver):
    """Bug: ``delete_thread`` deletes the thread's checkpoints and writes, not its channel
    values (a table of their own): a checkpoint put on the thread later that names one of
    their versions reads the deleted value back."""

    def delete_thread(self, thread_id: str) -> None:
        self.storage.pop(thread_id, None)
        for key in [k for k in self.writes if k[0] == thread_id]:
            del self.writes[key]


class LatestKeptByReferenceSaver(HeldSaver):
    """Bug: each instance keeps the caller's checkpoint and metadata of its last ``aput``
    as the thread's latest (a cache filled without a copy), and answers ``aget_tuple``
    without an id from it: the caller's later changes show in the latest checkpoint, while
    a read by id is right."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.mine: dict[tuple[str, str], tuple[Checkpoint, Any]] = {}

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        result = await super().aput(config, checkpoint, metadata, new_versions)
        thread, ns, _ = _conf(config)
        self.mine[(thread, ns)] = (checkpoint, metadata)
        return result

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        got = await super().aget_tuple(config)
        thread, ns, checkpoint_id = _conf(config)
        kept = self.mine.get((thread, ns))
        if got is None or checkpoint_id is not None or kept is None:
            return got
        checkpoint, metadata = kept
        if checkpoint["id"] != got.checkpoint["id"]:
            return got
        return got._replace(checkpoint=checkpoint, metadata=metadata)


class LatestByInsertionSaver(HeldSaver):
    """Bug: the latest checkpoint of a thread is the one put last (``ORDER BY rowid
    DESC``), not the greatest id: when two instances put at once and the older
    checkpoint's put lands last, that one is taken for the latest."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread, ns, checkpoint_id = _conf(config)
        stored = self.storage[thread][ns]
        if checkpoint_id is not None or not stored:
            return super().get_tuple(config)
        last = next(reversed(stored))  # the order the puts landed in
        return super().get_tuple(
            {"configurable": {**config["configurable"], "checkpoint_id": last}}
        )


class LateWrites:
    """The bug of `LandsLaterUnlessClosedSaver` and `SaveLandsLaterUnlessClosedStorage`: a
    write goes on in a task of its own after a cancel (as a statement in a worker thread
    that ``asyncio.to_thread`` does not stop); one that found the backend busy backs off a
    moment once it answers (a busy retry), then lands, unless its owner was closed
    meanwhile (its connection gone: the write fails, unseen)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.closed = False
        self.late: set[asyncio.Task[Any]] = set()

    async def write(self, land: Callable[[], Awaitable[T]], unseen: T) -> T:
        """``land()`` in a task a cancel does not stop; ``unseen`` if closed before it ran."""

        async def run() -> T:
            busy = self.backend.gate is not None
            await self.backend.io()
            if busy:  # the busy handler's back-off
                await asyncio.sleep(0.15)
            return unseen if self.closed else await land()

        task = asyncio.ensure_future(run())
        self.late.add(task)
        task.add_done_callback(self.late.discard)
        return await asyncio.shield(task)


class LandsLaterUnlessClosedSaver(HeldSaver):
    """Bug: aput's write lands after a cancel, unless the saver was closed first
    (`LateWrites`)."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.writes_late = LateWrites(self.backend)

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        async def land() -> RunnableConfig:
            return self.put(config, checkpoint, metadata, new_versions)

        return await self.writes_late.write(land, config)

    async def aclose(self) -> None:
        self.writes_late.closed = True


class NamespaceBlindLatestSaver(HeldSaver):
    """Bug: the latest checkpoint of a thread is its greatest id in any namespace (``ORDER BY
    checkpoint_id DESC LIMIT 1`` without ``checkpoint_ns = ?``): a subgraph's newer
    checkpoint is returned for the root."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if get_checkpoint_id(config):
            return super().get_tuple(config)
        thread = config["configurable"]["thread_id"]
        found = [
            super(NamespaceBlindLatestSaver, self).get_tuple(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            )
            for ns in list(self.storage[thread])
        ]
        tuples = [t for t in found if t is not None]
        return max(tuples, key=lambda t: t.config["configurable"]["checkpoint_id"], default=None)


class SyncLatestNamespaceBlindSaver(NamespaceBlindLatestSaver):
    """Bug: the sync ``get_tuple``'s latest query forgets ``checkpoint_ns = ?`` (the sync
    module written apart from the async one): ``aget_tuple`` gives the namespace's own
    latest checkpoint, ``get_tuple`` a subgraph's newer one for the root."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        await asyncio.sleep(0)
        return InMemorySaver.get_tuple(self, config)


def _parent_in_root(t: CheckpointTuple) -> CheckpointTuple:
    """``t`` with a ``parent_config`` of its thread and parent id alone."""
    if t.parent_config is None:
        return t
    conf = t.parent_config["configurable"]
    parent: RunnableConfig = {
        "configurable": {"thread_id": conf["thread_id"], "checkpoint_id": conf["checkpoint_id"]}
    }
    return t._replace(parent_config=parent)


class ParentConfigWithoutNamespaceSaver(_MapsReads):
    """Bug: ``parent_config`` is built from the thread id and the parent's id alone: a
    subgraph checkpoint's parent is named in the root namespace."""

    def _mapped(self, t: CheckpointTuple | None) -> CheckpointTuple | None:
        return None if t is None else _parent_in_root(t)


class NamespacesComparedSaver(HeldSaver):
    """Correct: the latest checkpoint and the listing of a namespace come from the stored
    namespaces that compare equal to the one asked for (as a query's ``WHERE`` does)."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored == asked

    def _namespaces(self, thread: str, ns: str) -> list[str]:
        return [n for n in list(self.storage.get(thread, {})) if self._same(n, ns)]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if get_checkpoint_id(config):
            return super().get_tuple(config)
        conf = config["configurable"]
        found = [
            super(NamespacesComparedSaver, self).get_tuple(
                {"configurable": {**conf, "checkpoint_ns": n}}
            )
            for n in self._namespaces(conf["thread_id"], conf.get("checkpoint_ns", ""))
        ]
        tuples = [t for t in found if t is not None]
        return max(tuples, key=lambda t: t.config["configurable"]["checkpoint_id"], default=None)

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if not config or config["configurable"].get("checkpoint_ns") is None:
            yield from super().list(config, filter=filter, before=before, limit=limit)
            return
        conf = config["configurable"]
        found: list[CheckpointTuple] = []
        for n in self._namespaces(conf["thread_id"], conf["checkpoint_ns"]):
            one: RunnableConfig = {"configurable": {**conf, "checkpoint_ns": n}}
            found += super().list(one, filter=filter, before=before)
        found.sort(key=lambda t: t.config["configurable"]["checkpoint_id"], reverse=True)
        yield from found[:limit]


class NamespacePrefixSaver(NamespacesComparedSaver):
    """Bug: a namespace's checkpoints are found by the key prefix ``ckpt:{thread}:{ns}``
    with nothing after the namespace (the root under a sentinel of its own): namespace
    ``p:1`` also reaches its nested subgraph's ``p:1|c:2`` and its sibling ``p:10``, whose
    newer checkpoints are then its latest."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored == asked if asked == "" else stored.startswith(asked)


class NamespaceAlternativesSaver(NamespacesComparedSaver):
    """Bug: the namespace goes unescaped into a RediSearch TAG query
    ``@checkpoint_ns:{ns}``, where ``|`` is OR: the nested namespace ``p:1|c:2`` finds the
    checkpoints of ``p:1`` (and of any ``c:2``), not its own."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored in asked.split("|")


class NamespacesCutTo255Saver(NamespacesComparedSaver):
    """Bug: namespaces compared in their first 255 characters (a ``VARCHAR(255)`` column
    that cuts, an index on a prefix): two subgraphs six levels deep whose last levels
    differ past them are one namespace, and each lists and reads the other's checkpoints."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored[:255] == asked[:255]


CHUNK = 256 * 1024
"""Bytes per chunk of `ChunkedSaver`'s channel blobs (a DynamoDB item is at most 400 KB)."""


class ChunkedSaver(HeldSaver):
    """Correct: a channel blob larger than `CHUNK` is kept as numbered chunks of `CHUNK`
    bytes and read back in the order of their numbers."""

    def _order(self, n: int) -> list[int]:
        """The order in which the ``n`` chunks of a blob are read back."""
        return list(range(n))

    def _load_blobs(
        self, thread_id: str, checkpoint_ns: str, versions: dict[str, Any]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for channel, version in versions.items():
            stored = self.blobs.get((thread_id, checkpoint_ns, channel, version))
            if stored is None or stored[0] == "empty":
                continue
            kind, data = stored
            chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
            out[channel] = self.serde.loads_typed(
                (kind, b"".join(chunks[i] for i in self._order(len(chunks))))
            )
        return out


class ChunksInTextOrderSaver(ChunkedSaver):
    """Bug: the chunks are read back sorted by their keys as text (``chunk#10`` before
    ``chunk#2``): a value of more than ten chunks (2.5 MiB) comes back out of order."""

    def _order(self, n: int) -> list[int]:
        return sorted(range(n), key=str)


class NeverAwaitsSaver(HeldSaver):
    """Bug: aput calls its flush coroutine without awaiting it."""

    async def _flush(self) -> None:
        await asyncio.sleep(0)

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        result = await super().aput(config, checkpoint, metadata, new_versions)
        self._flush()  # type: ignore[unused-coroutine]
        return result


PAGE = 100
"""Items per answer of the paged backends below (a Cosmos DB query page)."""


def pages(items: list[Any], follow: bool) -> list[Any]:
    """``items`` as a backend that answers a page of `PAGE` with a continuation token gives
    them: every page when the caller follows the token, else the first."""
    out: list[Any] = []
    token: int | None = 0
    while token is not None:
        out += items[token : token + PAGE]
        token = token + PAGE if token + PAGE < len(items) and follow else None
    return out


class PagedSaver(HeldSaver):
    """Correct: a thread's checkpoints, and a checkpoint's writes, come from a backend that
    answers `PAGE` at a time; every read and delete follows the continuation to the end."""

    follows: ClassVar[frozenset[str]] = frozenset({"list", "delete", "writes"})

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        found = list(super().list(config, filter=filter, before=before))
        if config:
            found = pages(found, "list" in self.follows)
        yield from found[:limit]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found = super().get_tuple(config)
        if found is None or not found.pending_writes:
            return found
        return found._replace(pending_writes=pages(found.pending_writes, "writes" in self.follows))

    def delete_thread(self, thread_id: str) -> None:
        namespaces = self.storage.get(thread_id, {})
        ids = sorted(((ns, c) for ns, saved in namespaces.items() for c in saved), reverse=True)
        for ns, made in pages(ids, "delete" in self.follows):
            del self.storage[thread_id][ns][made]
            for key in [k for k in self.writes if k[:3] == (thread_id, ns, made)]:
                del self.writes[key]
        if not any(self.storage.get(thread_id, {}).values()):
            super().delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.backend.io()
        self.delete_thread(thread_id)


class ListsOnePageSaver(PagedSaver):
    """Bug: alist reads the first page of a thread's checkpoints and never asks for the next
    (the continuation token of the backend's answer is ignored)."""

    follows = frozenset({"delete", "writes"})


class SyncListsOnePageSaver(PagedSaver):
    """Bug: the sync ``list``, written apart from ``alist`` (as savers with a sync and an
    async module are), reads the first page of a thread's checkpoints and never asks for
    the next; ``alist`` follows the continuation."""

    follows = frozenset({"delete", "writes"})

    async def alist(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        await asyncio.sleep(0)
        found = list(InMemorySaver.list(self, config, filter=filter, before=before))
        for t in (pages(found, True) if config else found)[:limit]:
            yield t


class DeletesOnePageSaver(PagedSaver):
    """Bug: adelete_thread deletes the first page of the thread's checkpoints only."""

    follows = frozenset({"list", "writes"})


class ReadsOnePageOfWritesSaver(PagedSaver):
    """Bug: aget_tuple reads the first page of a checkpoint's pending writes only."""

    follows = frozenset({"list", "delete"})


# -- agent-framework -----------------------------------------------------------------------------
class CachedLatestSaver(HeldSaver):
    """Correct: keeps each thread's latest tuple once read, with the data (a cache that
    every instance on the location shares, as a cache server is), and forgets it on every
    write that changes the thread (``aput``, ``aput_writes``, ``adelete_thread`` and their
    sync twins)."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.latest: dict[Any, CheckpointTuple | None] = self.backend.cached

    def forget(self, thread: str, write: str) -> None:
        """``write`` changed ``thread``: its latest tuple is read again."""
        for key in [k for k in self.latest if k[0] == thread]:
            del self.latest[key]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        if conf.get("checkpoint_id"):
            return await super().aget_tuple(config)
        key = (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")))
        if key not in self.latest:
            self.latest[key] = await super().aget_tuple(config)
        return copy.deepcopy(self.latest[key])

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        result = await super().aput(config, checkpoint, metadata, new_versions)
        self.forget(str(config["configurable"]["thread_id"]), "aput")
        return result

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await super().aput_writes(config, writes, task_id, task_path)
        self.forget(str(config["configurable"]["thread_id"]), "aput_writes")

    async def adelete_thread(self, thread_id: str) -> None:
        await super().adelete_thread(thread_id)
        self.forget(str(thread_id), "adelete_thread")

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        result = super().put(config, checkpoint, metadata, new_versions)
        self.forget(str(config["configurable"]["thread_id"]), "put")
        return result

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        super().put_writes(config, writes, task_id, task_path)
        self.forget(str(config["configurable"]["thread_id"]), "put_writes")

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)
        self.forget(str(thread_id), "delete_thread")


class LatestCachedPerInstanceSaver(CachedLatestSaver):
    """Bug: the latest tuples are kept in the instance, forgotten by its own writes only:
    after another instance on the same data (another worker) writes a thread, this one
    answers the latest checkpoint from before that write."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.latest = {}


class LatestCachedPastWritesSaver(CachedLatestSaver):
    """Bug: the latest tuple kept is forgotten by ``aput`` but not by ``aput_writes``
    (the writes live in another table): a resume reads the latest checkpoint without
    the pending writes of the tasks that finished, and runs them again."""

    def forget(self, thread: str, write: str) -> None:
        if write not in ("aput_writes", "put_writes"):
            super().forget(thread, write)


class LatestCachedPastSyncWritesSaver(CachedLatestSaver):
    """Bug: the latest tuple that the async reads keep is forgotten by the async writes
    only: after a sync ``put`` (LangGraph's ``update_state``, or a sync run on the same
    saver), ``aget_tuple`` answers the checkpoint before it."""

    def forget(self, thread: str, write: str) -> None:
        if write.startswith("a"):
            super().forget(thread, write)


class CopyingSaver(HeldSaver):
    """Correct: ``acopy_thread`` copies a thread's checkpoints, writes and blobs (keeping
    their checkpoint ids, as LangGraph's savers do)."""

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.backend.io()
        self._copy(source_thread_id, target_thread_id)

    def _copy(self, source: str, target: str, namespaces: Sequence[str] | None = None) -> None:
        """Copy ``source``'s checkpoints, writes and blobs to ``target`` (of ``namespaces``
        only, where given)."""
        for ns, saved in self.storage.get(source, {}).items():
            if namespaces is None or ns in namespaces:
                self.storage[target][ns].update(copy.deepcopy(dict(saved)))
        for key, value in list(self.writes.items()):
            if key[0] == source and (namespaces is None or key[1] in namespaces):
                self.writes[(target, *key[1:])] = copy.deepcopy(value)
        for key, blob in list(self.blobs.items()):
            if key[0] == source and (namespaces is None or key[1] in namespaces):
                self.blobs[(target, *key[1:])] = blob


class DeletesCopiesSaver(CopyingSaver):
    """Bug: ``adelete_thread`` deletes the thread's checkpoints by checkpoint id wherever
    they are (a ``DELETE ... WHERE checkpoint_id IN (...)`` that forgets the thread): a
    copy, which keeps the ids, loses them with its source."""

    async def adelete_thread(self, thread_id: str) -> None:
        ids = {cid for saved in self.storage.get(thread_id, {}).values() for cid in saved}
        for namespaces in self.storage.values():
            for saved in namespaces.values():
                for cid in ids:
                    saved.pop(cid, None)
        await super().adelete_thread(thread_id)


class DeleteLeavesWritesSaver(CopyingSaver):
    """Bug: ``delete_thread`` deletes the thread's checkpoints and blobs but forgets the
    writes table: a thread deleted and then copied again from its template (or whose
    checkpoints are put back) shows the old pending writes."""

    def delete_thread(self, thread_id: str) -> None:
        self.storage.pop(thread_id, None)
        for key in [k for k in self.blobs if isinstance(k, tuple) and k and k[0] == thread_id]:
            del self.blobs[key]


class LimitBeforeFilterSaver(HeldSaver):
    """Bug: a listing reads ``limit`` checkpoints and then checks the metadata filter
    itself (metadata kept as a blob the query cannot look into): with both, it gives
    fewer checkpoints than the limit, or none, where older ones match."""

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for t in super().list(config, before=before, limit=limit):
            if not filter or all(t.metadata.get(k) == v for k, v in filter.items()):
                yield t


class LatestFastPathSaver(HeldSaver):
    """Bug: a listing of one checkpoint with no ``before`` takes a fast path, the thread's
    latest checkpoint, and skips the metadata filter: ``filter`` with ``limit=1`` gives
    the latest checkpoint whether it matches or not."""

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is not None and limit == 1 and before is None:
            latest = self.get_tuple(config)
            yield from [latest] if latest is not None else []
            return
        yield from super().list(config, filter=filter, before=before, limit=limit)


class ListIgnoresConfigIdSaver(HeldSaver):
    """Bug: a listing's query is built from the config's ``thread_id`` and
    ``checkpoint_ns`` only (as MongoDBSaver's is): a config naming a checkpoint
    (``checkpoint_id``) lists every checkpoint of the thread, where LangGraph's savers
    list that checkpoint alone."""

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config:
            conf = {k: v for k, v in config["configurable"].items() if k != "checkpoint_id"}
            config = {**config, "configurable": conf}
        yield from super().list(config, filter=filter, before=before, limit=limit)


class FindsIdInAnyThreadSaver(HeldSaver):
    """Bug: a checkpoint named by its id is looked up by that id alone when the thread
    and namespace of the config have none of that id (a table keyed by the id: ids are
    unique, so it looks safe): another thread's checkpoint is answered."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        got = super().get_tuple(config)
        wanted = config["configurable"].get("checkpoint_id")
        if got is not None or not wanted:
            return got
        for thread, namespaces in list(self.storage.items()):
            for ns, checkpoints in list(namespaces.items()):
                if wanted in checkpoints:
                    return super().get_tuple(
                        {
                            "configurable": {
                                "thread_id": thread,
                                "checkpoint_ns": ns,
                                "checkpoint_id": wanted,
                            }
                        }
                    )
        return None


class MissingNamespaceIsNoneSaver(HeldSaver):
    """Bug: a config without ``checkpoint_ns`` is read as the namespace None (an SQL
    ``checkpoint_ns = NULL``), which matches nothing: where LangGraph's savers read the
    root namespace, it finds no checkpoint."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if "checkpoint_ns" not in config["configurable"]:
            return None
        return super().get_tuple(config)


class StoresOnlyPassedMetadataSaver(HeldSaver):
    """Bug: ``aput`` stores the metadata it was passed, without the keys LangGraph's
    ``get_checkpoint_metadata`` merges into it from the config's ``metadata`` and
    ``configurable`` (an application's user id, by which it filters checkpoints)."""

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        names = ("thread_id", "checkpoint_ns", "checkpoint_id")
        conf = {k: v for k, v in config["configurable"].items() if k in names}
        return super().put({"configurable": conf}, checkpoint, metadata, new_versions)


class RunsSaver(HeldSaver):
    """Correct: ``adelete_for_runs`` deletes each checkpoint whose metadata names one of
    the runs, and its pending writes, and keeps the thread's other checkpoints."""

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.backend.io()
        runs = {str(run) for run in run_ids}
        for thread, namespaces in list(self.storage.items()):
            for ns, saved in namespaces.items():
                for cid, (_, metadata, _) in list(saved.items()):
                    if str(self.serde.loads_typed(metadata).get("run_id")) in runs:
                        self._delete_checkpoint(thread, ns, cid)

    def _delete_checkpoint(self, thread: str, ns: str, checkpoint_id: str) -> None:
        """Delete one checkpoint of ``thread`` and its pending writes."""
        self.storage[thread][ns].pop(checkpoint_id, None)
        self.writes.pop((thread, ns, checkpoint_id), None)


class PruningSaver(CopyingSaver, RunsSaver):
    """Correct: ``aprune`` keeps, in each namespace of each thread, the newest checkpoint
    and its pending writes (``keep_latest``), or deletes the thread's every namespace
    (``delete``); ``acopy_thread`` and ``adelete_for_runs`` as its twins'."""

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.backend.io()
        self._prune(thread_ids, strategy)

    def _prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        for thread in thread_ids:
            if strategy == "delete":
                self._delete_all(thread)
            else:
                self._keep_checkpoints(thread)
                self._keep_writes(thread)

    def _newest(self, thread: str) -> dict[str, str]:
        """Namespace -> its newest checkpoint id, of ``thread``."""
        return {ns: max(saved) for ns, saved in self.storage.get(thread, {}).items() if saved}

    def _delete_all(self, thread: str) -> None:
        """``delete``: every namespace of ``thread``, its writes and its values."""
        self.delete_thread(thread)

    def _keep_checkpoints(self, thread: str) -> None:
        """``keep_latest``: delete every checkpoint but each namespace's newest."""
        newest = self._newest(thread)
        for ns, saved in self.storage.get(thread, {}).items():
            for checkpoint_id in [c for c in saved if c != newest.get(ns)]:
                del saved[checkpoint_id]

    def _keep_writes(self, thread: str) -> None:
        """``keep_latest``: delete the writes of every checkpoint but each namespace's newest."""
        newest = self._newest(thread)
        for key in [k for k in self.writes if k[0] == thread and k[2] != newest.get(k[1])]:
            del self.writes[key]


class SyncFormsSaver(PruningSaver):
    """Correct: sync ``copy_thread`` and ``prune`` of its own (what a saver used by LangGraph's
    sync runner has), each doing what its async form does."""

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._copy(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._prune(thread_ids, strategy)


class SyncCopiesTheRootOnlySaver(SyncFormsSaver):
    """Bug: the sync ``copy_thread``, written apart from ``acopy_thread``, copies the root
    namespace only (its rows read with a config whose ``checkpoint_ns`` is ``""``): a copy
    made by a sync graph has no subgraph checkpoints, and the async copy is right."""

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._copy(source_thread_id, target_thread_id, namespaces=("",))


class PruneDropsSubgraphWritesSaver(PruningSaver):
    """Bug: ``keep_latest`` deletes the writes of every checkpoint but the thread's newest
    in any namespace (the writes' ``DELETE ... WHERE checkpoint_id NOT IN (SELECT
    max(checkpoint_id) ... WHERE thread_id = ?)`` without the ``GROUP BY checkpoint_ns``
    of the checkpoints' delete): each subgraph's newest checkpoint is kept without its
    pending writes, and a resume runs its finished tasks again."""

    def _keep_writes(self, thread: str) -> None:
        ids = [c for saved in self.storage.get(thread, {}).values() for c in saved]
        newest = max(ids, default=None)
        for key in [k for k in self.writes if k[0] == thread and k[2] != newest]:
            del self.writes[key]


class PruneDeletesRootOnlySaver(PruningSaver):
    """Bug: ``aprune(strategy="delete")`` deletes the thread's root namespace only (its
    delete built from a config whose ``checkpoint_ns`` defaults to ``""``): the
    subgraphs' checkpoints and writes are left."""

    def _delete_all(self, thread: str) -> None:
        self.storage.get(thread, {}).pop("", None)
        for key in [k for k in self.writes if k[0] == thread and k[1] == ""]:
            del self.writes[key]


class CopiesRootWritesOnlySaver(PruningSaver):
    """Bug: ``acopy_thread`` copies every namespace's checkpoints and values, but the
    pending writes of the root namespace only (read with the latest tuple of a config
    whose ``checkpoint_ns`` is ``""``): a copy's subgraphs resume without them."""

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await super().acopy_thread(source_thread_id, target_thread_id)
        for key in [k for k in self.writes if k[0] == target_thread_id and k[1] != ""]:
            del self.writes[key]


class CopiesRootValuesOnlySaver(PruningSaver):
    """Bug: ``acopy_thread`` copies the channel values (blobs) of the root namespace only:
    a copy's subgraph checkpoints come back without their values."""

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await super().acopy_thread(source_thread_id, target_thread_id)
        for key in [
            k
            for k in self.blobs
            if isinstance(k, tuple) and len(k) == 4 and k[0] == target_thread_id and k[1] != ""
        ]:
            del self.blobs[key]


class CopyParentNamesSourceSaver(_MapsReads, PruningSaver):
    """Bug: each checkpoint row keeps its whole ``parent_config``, and ``acopy_thread``
    copies the rows with the new ``thread_id`` but the ``parent_config`` as it was: a
    copy's checkpoints name their parents in the source thread (``get_state`` of the
    copy, and a time travel to its parent, reach the source)."""

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await super().acopy_thread(source_thread_id, target_thread_id)
        self.backend.cached[("copied from", target_thread_id)] = source_thread_id

    def _mapped(self, t: CheckpointTuple | None) -> CheckpointTuple | None:
        """``t`` with the ``parent_config`` its row holds."""
        if t is None or t.parent_config is None:
            return t
        conf = t.parent_config["configurable"]
        source = self.backend.cached.get(("copied from", conf["thread_id"]))
        if source is None:
            return t
        return t._replace(parent_config={"configurable": {**conf, "thread_id": source}})


class ListsRootWithoutNamespaceSaver(HeldSaver):
    """Bug: a listing's config without ``checkpoint_ns`` is read as the root's (``ns =
    conf.get("checkpoint_ns", "")``, as ``get_tuple`` reads it): ``alist({"configurable":
    {"thread_id": t}})`` lists the root alone, where LangGraph's savers list every
    namespace."""

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config and "checkpoint_ns" not in config["configurable"]:
            config = {"configurable": {**config["configurable"], "checkpoint_ns": ""}}
        yield from super().list(config, filter=filter, before=before, limit=limit)


class BeforeLookedUpInNamespaceSaver(HeldSaver):
    """Bug: ``before`` is resolved by looking its checkpoint up in the namespace listed (to
    compare a stored timestamp), and is dropped when it is not there: ``before`` naming a
    subgraph's checkpoint lists every checkpoint of the root."""

    def list(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if before is not None and config:
            conf = config["configurable"]
            namespaces = self.storage.get(conf["thread_id"], {})
            ns = conf.get("checkpoint_ns")
            listed = [ns] if ns is not None else list(namespaces)
            if not any(get_checkpoint_id(before) in namespaces.get(n, {}) for n in listed):
                before = None
        yield from super().list(config, filter=filter, before=before, limit=limit)


class VersionsPaddedToFourSaver(HeldSaver):
    """Bug: get_next_version pads its number to four digits (``f"{n:04}.{random}"``):
    ``"10000.x"`` sorts before ``"9999.x"``, and a channel's 10,000th update triggers
    nothing."""

    def get_next_version(self, current: Any, channel: Any) -> str:
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:04}.{random.random():016}"


class MetadataNumbersAsDoublesSaver(HeldSaver):
    """Bug: metadata is kept in a document store whose numbers are doubles (JavaScript's,
    a JSON parser's default): an integer past 2**53 comes back, and is filtered, as the
    nearest double."""

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        stored = {
            k: int(float(v)) if isinstance(v, int) and not isinstance(v, bool) else v
            for k, v in metadata.items()
        }
        return super().put(config, checkpoint, stored, new_versions)


class MetadataDropsNoneSaver(HeldSaver):
    """Bug: metadata keys holding None are not stored (a serializer with ``exclude_none``,
    a document store that ignores nulls): they are missing when read back."""

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        stored = {k: v for k, v in metadata.items() if v is not None}
        return super().put(config, checkpoint, stored, new_versions)


BATCH_GET, BATCH_WRITE = 100, 25
"""Items per ``BatchGetItem`` and per ``BatchWriteItem`` (DynamoDB's limits)."""


class ReadsValuesInOneBatchSaver(HeldSaver):
    """Bug: a checkpoint's channel values are read with one batch get of at most
    `BATCH_GET` keys; the rest (the backend's unprocessed keys) are not asked again: a
    checkpoint of more channels comes back without them."""

    def _load_blobs(
        self, thread_id: str, checkpoint_ns: str, versions: dict[str, Any]
    ) -> dict[str, Any]:
        batch = dict(list(versions.items())[:BATCH_GET])
        return super()._load_blobs(thread_id, checkpoint_ns, batch)


class PutsValuesInOneBatchSaver(HeldSaver):
    """Bug: ``aput`` writes the new channel values with one batch write of at most
    `BATCH_WRITE` items; the rest are not sent: a checkpoint of more new channels comes
    back without them."""

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        batch = dict(list(new_versions.items())[:BATCH_WRITE])
        return super().put(config, checkpoint, metadata, batch)


class WritesInOneBatchSaver(HeldSaver):
    """Bug: ``aput_writes`` sends a call's writes as one batch write of at most
    `BATCH_WRITE` items; the rest are not sent: a node that sends to more workers
    leaves their writes out."""

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        super().put_writes(config, list(writes)[:BATCH_WRITE], task_id, task_path)


class CachedLatestRunsSaver(CachedLatestSaver, RunsSaver):
    """Correct: the cached latest tuple of each thread that ``adelete_for_runs`` changed
    is forgotten too."""

    def _delete_checkpoint(self, thread: str, ns: str, checkpoint_id: str) -> None:
        super()._delete_checkpoint(thread, ns, checkpoint_id)
        self.forget(thread, "adelete_for_runs")


class LatestCachedPastRunDeletionSaver(CachedLatestRunsSaver):
    """Bug: ``adelete_for_runs`` forgets no cached latest tuple (which threads a run
    touched is not known without reading them): the latest checkpoint read after it is
    one it deleted."""

    def forget(self, thread: str, write: str) -> None:
        if write != "adelete_for_runs":
            super().forget(thread, write)


class OneConnectionSaver(HeldSaver):
    """Correct: reads are requests on one connection (`Connection`), which a read
    cancelled before its reply came drops."""

    keeps_replies: ClassVar[bool] = False

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.connection = Connection(self.backend, keeps_replies=self.keeps_replies)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        async def read() -> CheckpointTuple | None:
            return self.get_tuple(config)

        return await self.connection.ask(read)  # type: ignore[no-any-return]

    async def alist(  # type: ignore[override]
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async def read() -> list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for t in await self.connection.ask(read):
            yield t


class ReplyLeftOnConnectionSaver(OneConnectionSaver):
    """Bug: a read cancelled before its reply came leaves the connection as it is: its
    reply, when it comes, is the next read's answer (another thread's checkpoint)."""

    keeps_replies = True


class HeldStorage(InMemoryCheckpointStorage):
    """Correct: agent-framework's InMemoryCheckpointStorage on a shared, holdable backend."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__()
        self.backend = backend(location)
        self._checkpoints = self.backend.checkpoints

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        copied = copy.deepcopy(checkpoint)  # at the call, as InMemoryCheckpointStorage does
        await self.backend.io()
        return await super().save(copied)


class SaveLandsLaterUnlessClosedStorage(HeldStorage):
    """Bug: save's write lands after a cancel, unless the storage was closed first
    (`LateWrites`)."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.writes_late = LateWrites(self.backend)

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        copied = copy.deepcopy(checkpoint)

        async def land() -> str:
            return await InMemoryCheckpointStorage.save(self, copied)

        return await self.writes_late.write(land, copied.checkpoint_id)

    async def aclose(self) -> None:
        self.writes_late.closed = True


def _to_utc(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    if isinstance(value, dict):
        return {k: _to_utc(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_utc(v) for v in value]
    return value


class StateDatetimesToUtcStorage(HeldStorage):
    """Bug: aware datetimes in the state are stored in UTC (a column or encoding that
    normalises them): they load back equal (the same instant) at another offset, and a
    workflow that shows or compares local times sees other ones."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        copied = copy.deepcopy(checkpoint)
        copied.state = _to_utc(copied.state)
        return await super().save(copied)


class SharesLoadedValuesStorage(HeldStorage):
    """Bug: values that agent-framework's encoding pickles (a set, a tuple) are decoded
    once and kept (a cache of decoded values keyed by their bytes): every load hands out
    the same objects, so a caller's change to one loaded checkpoint shows in the next."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.decoded: dict[tuple[str, str], Any] = {}

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        got = await super().load(checkpoint_id)
        for key, value in got.state.items():
            if isinstance(value, set | tuple):
                got.state[key] = self.decoded.setdefault((checkpoint_id, key), value)
        return got


class WorkerThreadStorage(HeldStorage):
    """Correct: a worker thread of its own (a database connection's), stopped and joined
    by ``aclose``."""

    joins = True

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.stop = threading.Event()
        self.worker = threading.Thread(target=self._work, name="storage-worker")
        self.worker.start()

    def _work(self) -> None:
        self.stop.wait()
        time.sleep(0.05)  # closing its connection

    async def aclose(self) -> None:
        self.stop.set()
        if self.joins:
            await asyncio.to_thread(self.worker.join)


class CloseLeavesThreadStorage(WorkerThreadStorage):
    """Bug: ``aclose`` tells the worker thread to stop and returns without joining it:
    the thread, its connection and files outlive the close for a while."""

    joins = False


class SwallowsBusyStorage(HeldStorage):
    """Bug: a save that finds the backend busy (held: a database locked) logs it and
    returns the checkpoint's id, having stored nothing."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        if self.backend.gate is not None:
            return checkpoint.checkpoint_id  # "database is locked", logged and skipped
        return await super().save(checkpoint)


class EncodesInTurnStorage(HeldStorage):
    """Bug: saves are queued for one worker, which copies (encodes) each checkpoint when
    its turn comes, not when save is called: a save waiting behind another stores the
    state as the caller changed it meanwhile."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.turn = asyncio.Lock()

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        async with self.turn:
            await self.backend.io()
            return await InMemoryCheckpointStorage.save(self, checkpoint)


class SwallowsCancelStorage(HeldStorage):
    """Bug: save catches the CancelledError of its round trip and saves anyway."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        try:
            await self.backend.io()
        except asyncio.CancelledError:
            pass
        return await InMemoryCheckpointStorage.save(self, checkpoint)


class SavesAfterCancelStorage(HeldStorage):
    """Bug: save runs in a shielded task: a cancelled save raises, the checkpoint lands later."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        return await asyncio.shield(asyncio.ensure_future(HeldStorage.save(self, checkpoint)))


class ByReferenceStorage(HeldStorage):
    """Bug: save keeps the caller's checkpoint object (no copy)."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        await self.backend.io()
        self._checkpoints[checkpoint.checkpoint_id] = checkpoint
        return checkpoint.checkpoint_id


class LatestBySaveOrderStorage(HeldStorage):
    """Bug: get_latest gives the checkpoint saved last, not the one with the newest timestamp."""

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = [c for c in self._checkpoints.values() if c.workflow_name == workflow_name]
        return copy.deepcopy(mine[-1]) if mine else None


class LatestByMillisecondScoreStorage(HeldStorage):
    """Bug: get_latest is the top of a sorted set scored by the timestamp in whole
    milliseconds (Redis ``ZADD`` and ``ZREVRANGE 0 0``): checkpoints of one millisecond tie,
    and the tie goes to the greatest checkpoint id, not the newest."""

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = [c for c in self._checkpoints.values() if c.workflow_name == workflow_name]

        def score(c: WorkflowCheckpoint) -> tuple[int, str]:
            millis = int(datetime.fromisoformat(c.timestamp).timestamp() * 1000)
            return millis, c.checkpoint_id

        return copy.deepcopy(max(mine, key=score)) if mine else None


class ListsStoredObjectsStorage(HeldStorage):
    """Bug: list_checkpoints returns the stored checkpoints themselves (no copy), where load
    and get_latest copy: mutating a listed checkpoint changes what is stored."""

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return [c for c in self._checkpoints.values() if c.workflow_name == workflow_name]


class DropsLineageStorage(HeldStorage):
    """Bug: save stores no previous_checkpoint_id, iteration_count or metadata (the table has
    no columns for them): every loaded checkpoint has None, 0 and {}."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        cp = copy.deepcopy(checkpoint)
        cp.previous_checkpoint_id, cp.iteration_count, cp.metadata = None, 0, {}
        return await super().save(cp)


class DropsMessagesStorage(HeldStorage):
    """Bug: save stores no messages (those in flight between executors): a graph workflow
    resumed from its checkpoint delivers nothing."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        cp = copy.deepcopy(checkpoint)
        cp.messages = {}
        return await super().save(cp)


class JsonStateStorage(HeldStorage):
    """Bug: the state goes through ``json.dumps(default=str)`` and ``json.loads`` (a JSONB
    column) instead of agent-framework's checkpoint encoding: tuples come back as lists,
    sets, bytes, datetimes and decimals as strings."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        cp = copy.deepcopy(checkpoint)
        cp.state = json.loads(json.dumps(cp.state, default=str))
        return await super().save(cp)


class UpsertStateOnlyStorage(HeldStorage):
    """Bug: saving an existing id is ``ON CONFLICT (id) DO UPDATE SET state =
    excluded.state``: the other fields (workflow name, timestamp, messages, pending
    requests, metadata...) keep the values of the first save."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        old = self._checkpoints.get(checkpoint.checkpoint_id)
        if old is None:
            return await super().save(checkpoint)
        await self.backend.io()
        old.state = copy.deepcopy(checkpoint.state)
        return checkpoint.checkpoint_id


class CascadingDeleteStorage(HeldStorage):
    """Bug: ``previous_checkpoint_id`` is a foreign key ``ON DELETE CASCADE``: deleting a
    checkpoint deletes every checkpoint after it in its chain (pruning the oldest
    checkpoint of a workflow deletes them all)."""

    async def delete(self, checkpoint_id: str) -> bool:
        if checkpoint_id not in self._checkpoints:
            return False
        doomed = {checkpoint_id}
        grew = True
        while grew:
            after = {k for k, c in self._checkpoints.items() if c.previous_checkpoint_id in doomed}
            grew = not after <= doomed
            doomed |= after
        for k in doomed:
            del self._checkpoints[k]
        return True


class IdsComparedStorage(HeldStorage):
    """Correct: checkpoints are rows whose key is compared with the id asked for (as a
    query's ``WHERE`` does), exactly; a save of an existing id replaces its row."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored == asked

    def _rows(self, checkpoint_id: str) -> list[str]:
        return [k for k in self._checkpoints if self._same(k, checkpoint_id)]

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        await self.backend.io()
        for k in self._rows(checkpoint.checkpoint_id):  # an upsert keeps the row's first key
            del self._checkpoints[k]
        self._checkpoints[checkpoint.checkpoint_id] = copy.deepcopy(checkpoint)
        return checkpoint.checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        for k in self._rows(checkpoint_id):
            return copy.deepcopy(self._checkpoints[k])
        raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")

    async def delete(self, checkpoint_id: str) -> bool:
        rows = self._rows(checkpoint_id)
        for k in rows:
            del self._checkpoints[k]
        return bool(rows)


class IdsCaseFoldedStorage(IdsComparedStorage):
    """Bug: checkpoint ids are keys under a case-insensitive collation (SQL Server's and
    MySQL's default; a file per id on macOS or Windows): ``Run-A`` and ``run-a`` are one
    checkpoint, and loading one gives the other."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored.casefold() == asked.casefold()


class DeletesByPrefixStorage(IdsComparedStorage):
    """Bug: delete removes every key matching ``checkpoint:{id}*`` (to take a checkpoint's
    side keys with it): deleting ``cp-1`` deletes ``cp-10`` too."""

    async def delete(self, checkpoint_id: str) -> bool:
        rows = [k for k in self._checkpoints if k.startswith(checkpoint_id)]
        for k in rows:
            del self._checkpoints[k]
        return bool(rows)


class PartitionedByWorkflowStorage(HeldStorage):
    """Bug: records are keyed by (workflow name, checkpoint id) (a Cosmos DB container
    partitioned by workflow name, where an id is unique in its partition only): saving an
    id again under another workflow name adds a second record instead of replacing it."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self._records: dict[tuple[str, str], WorkflowCheckpoint] = self.backend.cached

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        await self.backend.io()
        key = (checkpoint.workflow_name, checkpoint.checkpoint_id)
        self._records[key] = copy.deepcopy(checkpoint)
        return checkpoint.checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        for (_, cid), c in self._records.items():  # a cross-partition query: the first found
            if cid == checkpoint_id:
                return copy.deepcopy(c)
        raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")

    async def delete(self, checkpoint_id: str) -> bool:
        keys = [k for k in self._records if k[1] == checkpoint_id]
        for k in keys:
            del self._records[k]
        return bool(keys)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return [copy.deepcopy(c) for (w, _), c in self._records.items() if w == workflow_name]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [cid for (w, cid) in self._records if w == workflow_name]

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = await self.list_checkpoints(workflow_name=workflow_name)
        return max(mine, key=lambda c: datetime.fromisoformat(c.timestamp), default=None)


class WorkflowsComparedStorage(HeldStorage):
    """Correct: a workflow's checkpoints are found by comparing each stored workflow name
    with the one asked for (as a query's ``WHERE`` does), exactly."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored == asked

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return [
            copy.deepcopy(c)
            for c in self._checkpoints.values()
            if self._same(c.workflow_name, workflow_name)
        ]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [c.checkpoint_id for c in await self.list_checkpoints(workflow_name=workflow_name)]

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = await self.list_checkpoints(workflow_name=workflow_name)
        return max(mine, key=lambda c: datetime.fromisoformat(c.timestamp)) if mine else None


class WorkflowsMatchedByLikeStorage(WorkflowsComparedStorage):
    """Bug: workflows are found with ``workflow_name LIKE ?``, the name not escaped: the
    workflow ``report_1`` lists ``reportA1``'s checkpoints, and ``100%`` every name that
    begins with ``100``."""

    def _same(self, stored: str, asked: str) -> bool:
        return _like(asked, stored)


class WorkflowsCaseFoldedStorage(WorkflowsComparedStorage):
    """Bug: workflow names compared under a case-insensitive collation: ``Report`` and
    ``report`` list each other's checkpoints, and the latest of one is the other's."""

    def _same(self, stored: str, asked: str) -> bool:
        return stored.casefold() == asked.casefold()


class LatestByPrefixStorage(HeldStorage):
    """Bug: get_latest reads the workflows whose name starts with the one asked for (a key
    prefix ``{workflow}`` queried without a separator): ``wf`` gets ``wf-2``'s newer
    checkpoint."""

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = [c for c in self._checkpoints.values() if c.workflow_name.startswith(workflow_name)]
        if not mine:
            return None
        return copy.deepcopy(max(mine, key=lambda c: datetime.fromisoformat(c.timestamp)))


class OneConnectionStorage(HeldStorage):
    """Correct: reads are requests on one connection (`Connection`), which a read
    cancelled before its reply came drops."""

    keeps_replies: ClassVar[bool] = False

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.connection = Connection(self.backend, keeps_replies=self.keeps_replies)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        return await self.connection.ask(  # type: ignore[no-any-return]
            lambda: super(OneConnectionStorage, self).load(checkpoint_id)
        )

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return await self.connection.ask(  # type: ignore[no-any-return]
            lambda: super(OneConnectionStorage, self).get_latest(workflow_name=workflow_name)
        )

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return await self.connection.ask(  # type: ignore[no-any-return]
            lambda: super(OneConnectionStorage, self).list_checkpoints(workflow_name=workflow_name)
        )

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return await self.connection.ask(  # type: ignore[no-any-return]
            lambda: super(OneConnectionStorage, self).list_checkpoint_ids(
                workflow_name=workflow_name
            )
        )


class ReplyLeftOnConnectionStorage(OneConnectionStorage):
    """Bug: a read cancelled before its reply came leaves the connection as it is: its
    reply, when it comes, is the next read's answer (another workflow's)."""

    keeps_replies = True


class CachedReadsStorage(HeldStorage):
    """Correct: keeps each workflow's listings and latest checkpoint once read, with the
    data (shared by every instance on the location), and forgets them on every save and
    delete."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.kept: dict[Any, Any] = self.backend.cached

    def forget(self, write: str) -> None:
        """``write`` changed a checkpoint: every kept answer is read again."""
        self.kept.clear()

    async def _kept(self, what: str, workflow_name: str) -> Any:
        key = (what, workflow_name)
        if key not in self.kept:
            read = getattr(super(), what)
            self.kept[key] = await read(workflow_name=workflow_name)
        return copy.deepcopy(self.kept[key])

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return await self._kept("get_latest", workflow_name)  # type: ignore[no-any-return]

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return await self._kept("list_checkpoints", workflow_name)  # type: ignore[no-any-return]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return await self._kept("list_checkpoint_ids", workflow_name)  # type: ignore[no-any-return]

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        saved = await super().save(checkpoint)
        self.forget("save")
        return saved

    async def delete(self, checkpoint_id: str) -> bool:
        deleted = await super().delete(checkpoint_id)
        self.forget("delete")
        return deleted


class ReadsCachedPerInstanceStorage(CachedReadsStorage):
    """Bug: the kept answers live in the instance, forgotten by its own writes only: after
    another instance on the same data saves or deletes, this one answers from before."""

    def __init__(self, *, location: str | None = None) -> None:
        super().__init__(location=location)
        self.kept = {}


class CachedPastDeleteStorage(CachedReadsStorage):
    """Bug: the kept answers are forgotten by ``save`` but not by ``delete``: after the
    newest checkpoint is deleted, ``get_latest`` still gives it (a resume from a
    checkpoint that is gone), and the listings still list it."""

    def forget(self, write: str) -> None:
        if write != "delete":
            super().forget(write)


class PagedStorage(HeldStorage):
    """Correct: a workflow's checkpoints come from a backend that answers `PAGE` at a time;
    the listings follow the continuation to the end, and get_latest is the newest listed."""

    follows: ClassVar[bool] = True

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        await self.backend.io()
        return pages(await super().list_checkpoints(workflow_name=workflow_name), self.follows)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [c.checkpoint_id for c in await self.list_checkpoints(workflow_name=workflow_name)]

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = await self.list_checkpoints(workflow_name=workflow_name)
        return max(mine, key=lambda c: datetime.fromisoformat(c.timestamp), default=None)


class ListsOnePageStorage(PagedStorage):
    """Bug: list_checkpoints reads the first page of a workflow's checkpoints and never asks
    for the next: the listings miss the rest, and get_latest, taken from the listing, is
    not the newest."""

    follows = False


class ListingsProjectedStorage(WorkflowsComparedStorage):
    """Bug: list_checkpoints selects a few columns (id, workflow, timestamp, graph hash,
    state) to build its checkpoints: the listed ones have no messages, pending requests,
    metadata, previous id or iteration count, where load and get_latest read the whole
    record."""

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return [
            WorkflowCheckpoint(
                workflow_name=c.workflow_name,
                graph_signature_hash=c.graph_signature_hash,
                checkpoint_id=c.checkpoint_id,
                timestamp=c.timestamp,
                state=c.state,
            )
            for c in await super().list_checkpoints(workflow_name=workflow_name)
        ]

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = await WorkflowsComparedStorage.list_checkpoints(self, workflow_name=workflow_name)
        return max(mine, key=lambda c: datetime.fromisoformat(c.timestamp), default=None)


class LatestByTimestampTextStorage(HeldStorage):
    """Bug: ``get_latest`` orders by the timestamp's ISO text (a text column's ``ORDER BY
    timestamp DESC``, a sorted set scored by the string): a timestamp written with
    another UTC offset sorts by its wall-clock time, and an older one at ``+02:00``
    beats a newer one at ``-05:00``."""

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = [c for c in self._checkpoints.values() if c.workflow_name == workflow_name]
        return copy.deepcopy(max(mine, key=lambda c: c.timestamp)) if mine else None


class IndexedStorage(HeldStorage):
    """Correct: each workflow's checkpoint ids are also kept in an index (a set: Redis
    ``SADD``, a unique key), which ``list_checkpoint_ids`` reads; a save adds the id to
    its workflow's set, and removes it from any other's, in the write that stores it."""

    def _index(self, workflow_name: str) -> dict[str, None]:
        """The ids of ``workflow_name`` (a dict as an ordered set)."""
        index: dict[str, None] = self.backend.cached.setdefault(("index", workflow_name), {})
        return index

    def _unindex(self, checkpoint_id: str) -> None:
        """Remove ``checkpoint_id`` from every workflow's index."""
        for key, index in self.backend.cached.items():
            if isinstance(key, tuple) and key[0] == "index":
                index.pop(checkpoint_id, None)

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        await self._add(checkpoint.workflow_name, checkpoint.checkpoint_id)
        return await super().save(checkpoint)

    async def _add(self, workflow_name: str, checkpoint_id: str) -> None:
        """Add ``checkpoint_id`` to the index of ``workflow_name``, and to no other."""
        await self.backend.io()
        self._unindex(checkpoint_id)
        self._index(workflow_name)[checkpoint_id] = None

    async def delete(self, checkpoint_id: str) -> bool:
        self._unindex(checkpoint_id)
        return await super().delete(checkpoint_id)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [i for i in self._index(workflow_name) if i in self._checkpoints]

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        ids = await self.list_checkpoint_ids(workflow_name=workflow_name)
        return [copy.deepcopy(self._checkpoints[i]) for i in ids]


class IndexAppendedAfterCheckStorage(IndexedStorage):
    """Bug: the index is a list (Redis ``RPUSH``), and a save appends the id after
    checking, in another round trip, that it is not there yet: two saves of one id at
    once (a save retried after a timeout while the first is in flight) both append it,
    and the listings give it twice."""

    async def _add(self, workflow_name: str, checkpoint_id: str) -> None:
        self._unindex_elsewhere(workflow_name, checkpoint_id)
        listed = await self.list_checkpoint_ids(workflow_name=workflow_name)
        await self.backend.io()  # the check and the append are two round trips
        if checkpoint_id not in listed:
            self.backend.cached.setdefault(("list", workflow_name), []).append(checkpoint_id)

    def _unindex_elsewhere(self, workflow_name: str, checkpoint_id: str) -> None:
        """Remove ``checkpoint_id`` from the lists of the other workflows."""
        for key, ids in self.backend.cached.items():
            if isinstance(key, tuple) and key[0] == "list" and key[1] != workflow_name:
                while checkpoint_id in ids:
                    ids.remove(checkpoint_id)

    async def delete(self, checkpoint_id: str) -> bool:
        self._unindex_elsewhere("", checkpoint_id)
        return await HeldStorage.delete(self, checkpoint_id)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        ids = self.backend.cached.get(("list", workflow_name), [])
        return [i for i in ids if i in self._checkpoints]


class ListsTheIndexAloneStorage(IndexedStorage):
    """Bug: list_checkpoint_ids answers from the index alone, which a save writes a round
    trip before the checkpoint: a save cancelled between the two leaves an id listed that
    load does not find (and list_checkpoints, which loads, does not list)."""

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return list(self._index(workflow_name))

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        ids = await self.list_checkpoint_ids(workflow_name=workflow_name)
        return [copy.deepcopy(self._checkpoints[i]) for i in ids if i in self._checkpoints]


class TwoStepDeleteStorage(IndexedStorage):
    """Correct: delete removes the checkpoint, then, in another round trip, its id from
    the index; the listings keep only the indexed ids whose checkpoint is there."""

    async def delete(self, checkpoint_id: str) -> bool:
        existed = self._checkpoints.pop(checkpoint_id, None) is not None
        await self.backend.io()
        self._unindex(checkpoint_id)
        return existed


class TwoStepDeleteListsTheIndexStorage(TwoStepDeleteStorage):
    """Bug: as `TwoStepDeleteStorage`, but the listings read the index alone: a delete
    cancelled between its two round trips leaves an id listed that load does not find."""

    list_checkpoint_ids = ListsTheIndexAloneStorage.list_checkpoint_ids
    list_checkpoints = ListsTheIndexAloneStorage.list_checkpoints


class HeldEverywhereStorage(HeldStorage):
    """Correct: every call is a round trip to the backend (held reads and deletes too)."""

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        await self.backend.io()
        return await super().load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        await self.backend.io()
        return await super().list_checkpoints(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        await self.backend.io()
        return await super().list_checkpoint_ids(workflow_name=workflow_name)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        await self.backend.io()
        return await super().get_latest(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: str) -> bool:
        await self.backend.io()
        return await super().delete(checkpoint_id)


class SwallowsCancelledReadStorage(HeldEverywhereStorage):
    """Bug: get_latest and the listings catch the CancelledError of their round trip and
    answer as if the workflow had no checkpoint (None, []): the caller's task goes on with
    a wrong answer instead of ending."""

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        try:
            return await super().get_latest(workflow_name=workflow_name)
        except asyncio.CancelledError:
            return None

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        try:
            return await super().list_checkpoints(workflow_name=workflow_name)
        except asyncio.CancelledError:
            return []


class SwallowsCancelledDeleteStorage(HeldEverywhereStorage):
    """Bug: delete catches the CancelledError of its round trip and answers False ("there
    was no such checkpoint"), while the checkpoint is still stored."""

    async def delete(self, checkpoint_id: str) -> bool:
        try:
            return await super().delete(checkpoint_id)
        except asyncio.CancelledError:
            return False


class DeletesAfterCancelStorage(HeldEverywhereStorage):
    """Bug: delete runs in a shielded task (a thread, a fire-and-forget request): a
    cancelled delete raises CancelledError, and the checkpoint disappears later, when the
    backend answers."""

    async def delete(self, checkpoint_id: str) -> bool:
        return await asyncio.shield(
            asyncio.ensure_future(HeldEverywhereStorage.delete(self, checkpoint_id))
        )


class _ListsASelection(HeldStorage):
    """Listings and get_latest over `_selected`: each subclass selects a workflow's
    checkpoints its own (wrong) way."""

    def _selected(self, workflow_name: str) -> list[WorkflowCheckpoint]:
        raise NotImplementedError

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return [copy.deepcopy(c) for c in self._selected(workflow_name)]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [c.checkpoint_id for c in self._selected(workflow_name)]

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = self._selected(workflow_name)
        newest = max(mine, key=lambda c: datetime.fromisoformat(c.timestamp), default=None)
        return copy.deepcopy(newest)


class PrefixScanStorage(_ListsASelection):
    """Bug: a workflow's checkpoints are found by a prefix scan of keys ``cp:{workflow}:{id}``
    (Redis ``SCAN MATCH cp:orders:*``): the listings and get_latest of ``orders`` take in
    the checkpoints of ``orders:v2``."""

    def _selected(self, workflow_name: str) -> list[WorkflowCheckpoint]:
        prefix = f"cp:{workflow_name}:"
        return [
            c
            for c in self._checkpoints.values()
            if f"cp:{c.workflow_name}:{c.checkpoint_id}".startswith(prefix)
        ]


class GlobDeleteStorage(HeldStorage):
    """Bug: delete finds the keys to delete with a glob of the id (Redis ``KEYS cp:{id}``,
    unescaped): deleting ``run-*`` deletes ``run-1`` too."""

    async def delete(self, checkpoint_id: str) -> bool:
        doomed = [i for i in self._checkpoints if fnmatch.fnmatchcase(i, checkpoint_id)]
        for i in doomed:
            del self._checkpoints[i]
        return bool(doomed)


class DeleteSetsNullStorage(HeldStorage):
    """Bug: previous_checkpoint_id is a foreign key ``ON DELETE SET NULL``: deleting a
    checkpoint cuts the lineage of the checkpoints that named it."""

    async def delete(self, checkpoint_id: str) -> bool:
        for c in self._checkpoints.values():
            if c.previous_checkpoint_id == checkpoint_id:
                c.previous_checkpoint_id = None
        return await super().delete(checkpoint_id)


class ResavedAsDeleteAndInsertStorage(HeldStorage):
    """Bug: saving an existing id deletes the old row, then inserts the new one, in two
    round trips (an upsert written by hand): a read in between finds no checkpoint."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        if self._checkpoints.pop(checkpoint.checkpoint_id, None) is not None:
            await self.backend.io()
        return await super().save(checkpoint)


class CancelDeletesTheKeyStorage(HeldStorage):
    """Bug: a cancelled save "rolls back" by deleting the checkpoint's key, so that no half
    of it stays: cancelling a save of an existing id destroys the checkpoint it replaced."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        try:
            return await super().save(checkpoint)
        except asyncio.CancelledError:
            self._checkpoints.pop(checkpoint.checkpoint_id, None)
            raise


class CanonicalIdsStorage(HeldStorage):
    """Correct as it is (ids kept as given); its subclasses key checkpoints by a column
    type's canonical form of the id (`canonical`)."""

    def canonical(self, checkpoint_id: str) -> str:
        return checkpoint_id

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        await self.backend.io()
        kept = copy.deepcopy(checkpoint)
        kept.checkpoint_id = self.canonical(checkpoint.checkpoint_id)
        self._checkpoints[kept.checkpoint_id] = kept
        return checkpoint.checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        return await super().load(self.canonical(checkpoint_id))

    async def delete(self, checkpoint_id: str) -> bool:
        return await super().delete(self.canonical(checkpoint_id))


class NumericAffinityIdsStorage(CanonicalIdsStorage):
    """Bug: ids in an SQLite column of NUMERIC affinity: an id that reads as a number is
    stored as one, so ``007`` and ``7`` are one checkpoint, loaded back as ``7``."""

    def canonical(self, checkpoint_id: str) -> str:
        try:
            number = float(checkpoint_id)
        except ValueError:
            return checkpoint_id
        return str(int(number)) if number.is_integer() else str(number)


class UuidColumnIdsStorage(CanonicalIdsStorage):
    """Bug: ids in a PostgreSQL ``uuid`` column: an id that parses as a uuid comes back in
    the canonical form (lower case, hyphens), so its upper case and its hex are one."""

    def canonical(self, checkpoint_id: str) -> str:
        try:
            return str(uuid.UUID(checkpoint_id))
        except ValueError:
            return checkpoint_id


def _item_bytes(checkpoint: WorkflowCheckpoint) -> int:
    """About what a checkpoint takes as one item: its state's text."""
    return len(repr(checkpoint.state))


class FirstMebibytePageStorage(_ListsASelection):
    """Bug: a workflow's checkpoints are one DynamoDB query, whose page ends at 1 MiB, and
    the page's ``LastEvaluatedKey`` is ignored: past the first mebibyte, checkpoints are
    missing from the listings and get_latest."""

    def _selected(self, workflow_name: str) -> list[WorkflowCheckpoint]:
        page: list[WorkflowCheckpoint] = []
        total = 0
        for c in sorted(self._checkpoints.values(), key=lambda c: c.checkpoint_id):
            if c.workflow_name != workflow_name:
                continue
            if page and total + _item_bytes(c) > 1 << 20:
                break
            page.append(c)
            total += _item_bytes(c)
        return page


class StaleChunksStorage(HeldStorage):
    """Bug: a checkpoint is kept as chunks of 256 KiB of its JSON (``cp:{id}:0``,
    ``cp:{id}:1``...), and a save writes its chunks over the old ones without deleting
    those past its last: saved again smaller, it loads with the old tail appended."""

    CHUNK: ClassVar[int] = 256 << 10

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        await self.backend.io()
        text = json.dumps(encode_checkpoint_value(checkpoint.to_dict()))
        chunks = self.backend.cached.setdefault(("chunks", checkpoint.checkpoint_id), [])
        new = [text[i : i + self.CHUNK] for i in range(0, len(text), self.CHUNK)]
        chunks[: len(new)] = new
        self._checkpoints[checkpoint.checkpoint_id] = copy.deepcopy(checkpoint)
        return checkpoint.checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        chunks = self.backend.cached.get(("chunks", checkpoint_id))
        if not chunks:
            return await super().load(checkpoint_id)
        data = decode_checkpoint_value(json.loads("".join(chunks)))
        return WorkflowCheckpoint.from_dict(data)


class VersionAsNumberStorage(HeldStorage):
    """Bug: the checkpoint's ``version`` goes into a numeric column: ``"1.10"`` comes back
    ``"1.1"``."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        checkpoint = copy.deepcopy(checkpoint)
        checkpoint.version = str(float(checkpoint.version))
        return await super().save(checkpoint)


def _as_json_column(value: Any) -> Any:
    """``value`` as a JSON column gives it back: NaN and the infinities null, NUL stripped."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {k: _as_json_column(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_json_column(v) for v in value]
    return value


class JsonColumnStorage(HeldStorage):
    """Bug: the state goes into a JSON column (PostgreSQL ``jsonb`` through a driver that
    maps NaN to null, and a text column that cannot hold NUL): NaN and the infinities come
    back None, and NUL characters are gone, without an error."""

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        checkpoint = copy.deepcopy(checkpoint)
        checkpoint.state = _as_json_column(checkpoint.state)
        return await super().save(checkpoint)


class JsonChannelValuesSaver(HeldSaver):
    """Bug: channel values and writes are kept as JSON of their own (orjson, a JSON
    column), not as the serializer's bytes: NaN and the infinities come back None, and NUL
    characters are gone, without an error."""

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: Any,
        new_versions: Any,
    ) -> RunnableConfig:
        checkpoint = {**checkpoint, "channel_values": _as_json_column(checkpoint["channel_values"])}  # type: ignore[typeddict-item]
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        writes = [(c, _as_json_column(v)) for c, v in writes]
        await super().aput_writes(config, writes, task_id, task_path)


class FileStorage:
    """Correct: one JSON file per checkpoint (named by a digest of its id), holding the whole
    checkpoint in agent-framework's encoding, written to a temporary file of its own
    (two saves of one id at once write two), synced and renamed; a cancelled save waits
    for its write before raising CancelledError."""

    checkpointkit_durable = True
    write_behind = False

    def __init__(self, *, location: str | None = None) -> None:
        base = Path(os.environ.get("ECO_BROKEN_ROOT", "/tmp/checkpointkit-eco-broken"))
        self.root = base / (location or "default")
        self.root.mkdir(parents=True, exist_ok=True)
        self.pending: list[dict[str, Any]] = []

    def _path(self, checkpoint_id: str) -> Path:
        return self.root / f"{hashlib.sha256(checkpoint_id.encode()).hexdigest()}.json"

    def _write(self, encoded: dict[str, Any]) -> None:
        path = self._path(encoded["checkpoint_id"])
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(encoded, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        encoded = encode_checkpoint_value(checkpoint.to_dict())
        if self.write_behind:
            if not self.pending:
                atexit.register(self._flush)  # written when the process exits
            self.pending.append(encoded)
            return checkpoint.checkpoint_id
        write = asyncio.ensure_future(asyncio.to_thread(self._write, encoded))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await asyncio.wait({write})  # the thread cannot be stopped: let it end first
            raise
        return checkpoint.checkpoint_id

    def _flush(self) -> None:
        for encoded in self.pending:
            self._write(encoded)
        self.pending.clear()

    def _read(self, path: Path) -> WorkflowCheckpoint:
        encoded = json.loads(path.read_text(encoding="utf-8"))
        decoded = decode_checkpoint_value(encoded, allowed_types=frozenset())
        return WorkflowCheckpoint.from_dict(decoded)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        path = self._path(checkpoint_id)
        if not path.exists():
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        return self._read(path)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        found = [self._read(p) for p in self.root.glob("*.json")]
        return [c for c in found if c.workflow_name == workflow_name]

    async def delete(self, checkpoint_id: str) -> bool:
        path = self._path(checkpoint_id)
        if path.exists():
            path.unlink()
            return True
        return False

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        mine = await self.list_checkpoints(workflow_name=workflow_name)
        return max(mine, key=lambda c: datetime.fromisoformat(c.timestamp), default=None)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [c.checkpoint_id for c in await self.list_checkpoints(workflow_name=workflow_name)]


class WriteBehindStorage(FileStorage):
    """Bug: save returns before the checkpoint is written (a write-behind buffer that is
    written when the process exits, which a SIGKILL never lets it do)."""

    write_behind = True


def target(cls: type, ecosystem: str) -> EcosystemTarget:
    """The target of a broken or correct class here (holdable, importable by a subprocess)."""
    return EcosystemTarget(
        ecosystem,  # type: ignore[arg-type]
        cls,
        name=cls.__name__,
        hold=hold if issubclass(cls, HeldSaver | HeldStorage) else None,
        spec=f"{cls.__module__}:{cls.__qualname__}",
        settle_window=0.3,
    )


# -- mistakes nobody had listed: savers written from LangGraph's docs and savers -----------------
def _conf(config: RunnableConfig) -> tuple[str, str, str | None]:
    c = config["configurable"]
    return c["thread_id"], c.get("checkpoint_ns", ""), c.get("checkpoint_id")


class WritesByTaskIdSaver(HeldSaver):
    """Pending writes returned ORDER BY task_id, idx (task_path ignored), as a
    backend with no task_path column (or an old Postgres schema) does."""

    def _ordered_writes(self, thread_id, checkpoint_ns, checkpoint_id):
        stored = self.writes.get((thread_id, checkpoint_ns, checkpoint_id), {})
        return [stored[k] for k in sorted(stored)]  # (task_id, idx)


# 2 ---------------------------------------------------------------------------


class LimitPerNamespaceSaver(HeldSaver):
    """limit counted per (thread, namespace) partition, not over the whole listing
    (one query per partition, each with LIMIT n)."""

    def list(self, config, *, filter=None, before=None, limit=None):
        thread_ids = (config["configurable"]["thread_id"],) if config else list(self.storage)
        ns_wanted = config["configurable"].get("checkpoint_ns") if config else None
        for tid in thread_ids:
            for ns in list(self.storage[tid].keys()):
                if ns_wanted is not None and ns != ns_wanted:
                    continue
                sub = {"configurable": {"thread_id": tid, "checkpoint_ns": ns}}
                if config and get_checkpoint_id(config):
                    sub["configurable"]["checkpoint_id"] = get_checkpoint_id(config)
                yield from super().list(sub, filter=filter, before=before, limit=limit)


# 6 ---------------------------------------------------------------------------


class LockLeakSaver(HeldSaver):
    """Each instance serialises its calls with an asyncio.Lock, acquired and
    released without try/finally: a cancelled call leaves the lock held."""

    def __init__(self, *, location=None):
        super().__init__(location=location)
        self._lock = asyncio.Lock()

    async def aput(self, config, checkpoint, metadata, new_versions):
        await self._lock.acquire()
        await self.backend.io()
        out = self.put(config, checkpoint, metadata, new_versions)
        self._lock.release()
        return out

    async def aput_writes(self, config, writes, task_id, task_path=""):
        await self._lock.acquire()
        await self.backend.io()
        self.put_writes(config, writes, task_id, task_path)
        self._lock.release()

    async def aget_tuple(self, config):
        await self._lock.acquire()
        await asyncio.sleep(0)
        out = self.get_tuple(config)
        self._lock.release()
        return out


# 17 --------------------------------------------------------------------------


class EmptyAsNoneSaver(HeldSaver):
    """A channel bumped in new_versions but with no value (emptied) is stored as
    the value None instead of an 'empty' marker: reads give {channel: None}."""

    def put(self, config, checkpoint, metadata, new_versions):
        values = checkpoint["channel_values"]
        filled = {**values, **{k: None for k in new_versions if k not in values}}
        return super().put(config, {**checkpoint, "channel_values": filled}, metadata, new_versions)


# 18 --------------------------------------------------------------------------


class ClearsParentWritesOnPutSaver(HeldSaver):
    """put deletes the parent checkpoint's pending writes ('consumed' by the new
    checkpoint)."""

    def put(self, config, checkpoint, metadata, new_versions):
        thread_id, ns, parent = _conf(config)
        out = super().put(config, checkpoint, metadata, new_versions)
        if parent:
            self.writes.pop((thread_id, ns, parent), None)
        return out


# 21 --------------------------------------------------------------------------


class BeforeByLookupSaver(HeldSaver):
    """before resolved by looking its checkpoint up in the listed thread/ns; when
    not found there, before is ignored."""

    def list(self, config, *, filter=None, before=None, limit=None):
        if before is not None and config is not None:
            thread_id = config["configurable"]["thread_id"]
            bid = get_checkpoint_id(before)
            found = any(bid in d for d in self.storage.get(thread_id, {}).values())
            if not found:
                before = None
        yield from super().list(config, filter=filter, before=before, limit=limit)


# ============================ round 2 =========================================
# 28 (correct twin) -----------------------------------------------------------


class DeltaHistoryByListSaver(HeldSaver):
    """get_delta_channel_history walks list(before=target) (every older checkpoint
    of the namespace, newest first) instead of the parent chain: a fork's
    off-path siblings contribute their writes."""

    def get_delta_channel_history(self, *, config, channels):
        if not channels:
            return {}
        target = self.get_tuple(config)
        if target is None:
            return {ch: {"writes": []} for ch in channels}
        collected = {c: [] for c in channels}
        seed = {}
        remaining = set(channels)
        for tup in self.list(
            {
                "configurable": {
                    "thread_id": target.config["configurable"]["thread_id"],
                    "checkpoint_ns": target.config["configurable"].get("checkpoint_ns", ""),
                }
            },
            before=target.config,
        ):
            if not remaining:
                break
            for w in reversed(tup.pending_writes or []):
                if w[1] in remaining:
                    collected[w[1]].append(w)
            for ch in list(remaining):
                if ch in tup.checkpoint["channel_values"]:
                    seed[ch] = tup.checkpoint["channel_values"][ch]
                    remaining.discard(ch)
        out = {}
        for ch in channels:
            e = {"writes": list(reversed(collected[ch]))}
            if ch in seed:
                e["seed"] = seed[ch]
            out[ch] = e
        return out


# 30 --------------------------------------------------------------------------


class DeltaHistoryIncludesTargetSaver(HeldSaver):
    """get_delta_channel_history also collects the target checkpoint's own
    pending writes (they belong to the next super-step)."""

    def get_delta_channel_history(self, *, config, channels):
        res = super().get_delta_channel_history(config=config, channels=channels)
        thread_id, ns, cid = _conf(config)
        t = self.get_tuple(config)
        if t is None:
            return res
        cid = t.config["configurable"]["checkpoint_id"]
        out = {}
        for ch, e in res.items():
            own = [
                (tid, c, self.serde.loads_typed(v))
                for tid, c, v, _ in self._ordered_writes(thread_id, ns, cid)
                if c == ch
            ]
            e2 = dict(e)
            e2["writes"] = list(e["writes"]) + own
            out[ch] = e2
        return out


# 31 --------------------------------------------------------------------------


class PartialWritesOnCancelSaver(HeldSaver):
    """aput_writes sends one request per write (no transaction / batch): a
    cancelled call leaves the first writes of the task stored."""

    async def aput_writes(self, config, writes, task_id, task_path=""):
        for idx, (c, v) in enumerate(writes):
            await self.backend.io()
            # store this one write at its proper index
            thread_id, ns, cid = _conf(config)
            outer_key = (thread_id, ns, cid)
            inner = (task_id, WRITES_IDX_MAP.get(c, idx))
            outer = self.writes.get(outer_key)
            if inner[1] >= 0 and outer and inner in outer:
                continue
            self.writes[outer_key][inner] = (task_id, c, self.serde.dumps_typed(v), task_path)


# 33 --------------------------------------------------------------------------


class WritesToHeadSaver(HeldSaver):
    """put_writes attaches the writes to the namespace's latest checkpoint, not to
    config's checkpoint_id."""

    def put_writes(self, config, writes, task_id, task_path=""):
        thread_id, ns, cid = _conf(config)
        cps = self.storage[thread_id][ns]
        head = max(cps) if cps else cid
        conf = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": head}
        }
        super().put_writes(conf, writes, task_id, task_path)


# 35 --------------------------------------------------------------------------


class WritesNoneDroppedSaver(HeldSaver):
    """put_writes skips writes whose value is None (NULL column / 'nothing to
    store'): e.g. LangGraph's 'branch:to:<node>' writes, whose value is None."""

    def put_writes(self, config, writes, task_id, task_path=""):
        thread_id, ns, cid = _conf(config)
        outer_key = (thread_id, ns, cid)
        outer = self.writes.get(outer_key)
        for idx, (c, v) in enumerate(writes):
            if v is None:
                continue
            inner = (task_id, WRITES_IDX_MAP.get(c, idx))
            if inner[1] >= 0 and outer and inner in outer:
                continue
            self.writes[outer_key][inner] = (task_id, c, self.serde.dumps_typed(v), task_path)


class DeletePerRowSaver(HeldSaver):
    """adelete_thread is not one transaction: it deletes the child rows first (as
    foreign keys require: blobs, then writes), then the checkpoints, one request
    per row. A delete cancelled (or read concurrently) part way leaves checkpoints
    whose values and writes are gone."""

    async def adelete_thread(self, thread_id):
        for k in [k for k in list(self.blobs) if k[0] == thread_id]:
            await self.backend.io()
            self.blobs.pop(k, None)
        for k in [k for k in list(self.writes) if k[0] == thread_id]:
            await self.backend.io()
            self.writes.pop(k, None)
        for ns in list(self.storage.get(thread_id, {}).keys()):
            for cid in sorted(self.storage[thread_id][ns]):
                await self.backend.io()
                self.storage[thread_id][ns].pop(cid, None)
        self.storage.pop(thread_id, None)


class StoresLiveValuesSaver(HeldSaver):
    """Bug: every checkpoint stores the value of every channel as ``aput`` finds it (one
    document per checkpoint), also of a channel that kept its version: LangGraph hands
    over its live channel objects and changes them in place before a delayed put runs, so
    a version is stored with a value it never had (as ``AsyncSqliteSaver`` stores it)."""

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        every = dict(checkpoint["channel_versions"])
        return super().put(config, checkpoint, metadata, every)

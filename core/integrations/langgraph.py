"""A LangGraph checkpointer on any checkpointkit storage: `CheckpointkitSaver`.

Every storage URL becomes a LangGraph checkpointer::

    from langgraph.graph import StateGraph
    from checkpointkit.integrations.langgraph import CheckpointkitSaver

    async with CheckpointkitSaver.from_url("s3://bucket/graphs") as saver:
        graph = builder.compile(checkpointer=saver)
        await graph.ainvoke(inputs, {"configurable": {"thread_id": "t-1"}})

Channel values go through LangGraph's own serializer (``saver.serde``, by
default its ``JsonPlusSerializer``, with its msgpack allow-list); checkpointkit's
envelope frames every stored record (checksum, optional zstd, optional AES-GCM).

Key layout, under ``prefix`` (default ``langgraph``)::

    {prefix}/c/{thread}/{ns}/{~id}                   one record per checkpoint, newest first
    {prefix}/w/{thread}/{ns}/{id}/{task}/r{n}        a task's regular writes of one call (n writes)
    {prefix}/w/{thread}/{ns}/{id}/{task}/s{k}        a special write (error, interrupt, resume...)
    {prefix}/b/{thread}/{ns}/{channel}/{version}     a large channel value, once per version
    {prefix}/h/{thread}/{ns}                         the head: the id of the newest checkpoint
                                                     (not on a storage with ``indexed_list``)

``{~id}`` is the checkpoint id with every UTF-8 byte complemented (hex), so
LangGraph's time-ordered ids list newest first: the latest checkpoint of a
thread is the first key of one ``list(limit=1)``, however many there are.

The head makes the latest checkpoint one get away where a listing is dear (a
listing, even one of ``limit=1``, reads the whole directory on the file
storage). A storage that declares ``indexed_list`` (SQLite, memory) lists by
an index, so ``list(limit=1)`` costs about a get: there the saver keeps no
head, and a put is one write (one commit) fewer. A head only moves forward
(to a larger id; LangGraph's ids are uuid6, time-ordered), by
compare-and-swap: ``put`` moves it before writing the record, so a put that
fails half-way leaves a head naming a missing record, and readers then fall
back to the listing. ``delete_thread``, ``prune`` and
``delete_for_runs`` point a head whose checkpoint they deleted at the newest
one left (or remove it). A storage without conditional puts keeps no head.
Without heads, a head left by a saver that kept them is ignored by readers,
and deleted by each saver's first put of its thread and namespace, by
``prune`` and by ``delete_thread``.

Thread ids, namespaces, channels, task ids and versions are percent-encoded
into one key segment each.

A checkpoint record holds the checkpoint (without its channel values), its
metadata, its parent id, every channel value of at most ``inline_limit``
serialized bytes, and a reference ``(version, type)`` for each larger one. A
large value is written once, when its channel gets a new version, and is
referenced by every later checkpoint until the channel changes: unchanged large
state is neither re-serialized (within a process) nor re-written. Values are
written before the record that references them, so a record never points at a
value that is not stored.

Cost per operation, in storage requests:

- ``put``: 2 in sequence: the head (a compare-and-swap put) and the record
  (plus 1 per channel value above ``inline_limit`` whose version is new,
  written concurrently with the head, before the record). The head's version
  is remembered, so it costs 1 get more only when another writer moved it
  (and, for the first put of a thread and namespace in a process, 1 get and
  1 ``list(limit=1)``). Without heads: 1, the record (after the new large
  values), and 1 get more for the saver's first put of a thread and
  namespace.
- ``put_writes``: 1 create-only put for the call's regular writes (plus 1 put
  per special write: error, interrupt, resume, scheduled, which replace the
  previous one as in LangGraph's own savers). Records are write-once, named by
  (checkpoint, task, call length): a repeated call stores nothing new,
  concurrent calls never lose a write, and a write (task, index) seen in two
  calls keeps its first value.
- ``get_tuple`` without a checkpoint id: 1 get of the head, then 1 get of the
  record and 1 listing of its writes at once, then 1 get per task that wrote
  (and per special write) and per large value, concurrently. Without heads,
  or a valid head: 1 ``list(limit=1)`` instead of the head's get.
- ``get_tuple`` with a checkpoint id: the same without the head.
- ``list``: 1 paged listing, then per checkpoint yielded 1 get (+ the writes and
  large values, as ``get_tuple``); records are fetched 16 at a time.
- ``delete_thread``: 4 listings, 1 delete per key. ``copy_thread``: 4 listings,
  1 get and 1 put per key, and the heads moved as by ``put``. ``prune``:
  listings of the thread, 1 get per kept checkpoint, 1 delete per removed key,
  1 get per head. ``delete_for_runs``: reads every checkpoint record of the
  storage (run ids are not part of the keys), and mends the heads it affects.

Sync methods: LangGraph's sync API (``graph.invoke``, ``graph.get_state``) calls
``get_tuple``, ``put`` and so on. They run the async methods on the event loop
the saver was last used from (when called from another thread, like
LangGraph's own ``AsyncSqliteSaver``), or, for a saver used only synchronously,
on a private event loop in a thread owned by the saver, stopped by ``close()``
(or the ``with`` block). Calling a sync method on the thread that runs the
saver's event loop raises `asyncio.InvalidStateError` (it would
deadlock): use the ``a``-prefixed method there.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar, cast

from . import compress_threshold_for, keeps_heads, missing_extra

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise missing_extra(__name__, "langgraph", _exc) from _exc

from .. import reconcile
from ..crypto import Encryption
from ..envelope import open_envelope, open_view, reseal, seal
from ..errors import (
    CheckpointCorrupted,
    CheckpointkitError,
    DecodeError,
    NotFound,
    PreconditionFailed,
)
from ..keys import validate_prefix
from ..registry import open_storage
from ..storage import IfMatch, PutMode, Storage
from ._langgraph_layout import (
    CODEC_LANGGRAPH_BLOB,
    CODEC_LANGGRAPH_HEAD,
    CODEC_LANGGRAPH_RECORD,
    CODEC_LANGGRAPH_WRITE,
    LangGraphLayout,
    decode_record,
    decode_writes,
    encode,
)
from ._langgraph_layout import FORMAT as _FORMAT
from ._langgraph_layout import Record as _Record
from ._langgraph_layout import Writes as _Writes
from ._langgraph_layout import seg as _seg
from ._langgraph_layout import unseg as _unseg

__all__ = [
    "CODEC_LANGGRAPH_BLOB",
    "CODEC_LANGGRAPH_HEAD",
    "CODEC_LANGGRAPH_RECORD",
    "CODEC_LANGGRAPH_WRITE",
    "CheckpointkitSaver",
]

T = TypeVar("T")
U = TypeVar("U")

log = logging.getLogger("checkpointkit.integrations.langgraph")

_CONCURRENCY = 16
_LIST_BATCH = 16
_CACHE_SIZE = 4096
_INLINE_CACHE_BYTES = 16 << 20
"""Bytes of serialized channel values a saver keeps by (thread, namespace, channel, version)."""


def _expect_tag(got: int, tag: int, key: str) -> None:
    """Refuse an envelope whose codec tag is not the one this kind of record has."""
    if got != tag:
        raise DecodeError(
            f"the envelope at key {key!r} has codec tag {got}, expected {tag} "
            "(not written by the LangGraph integration)"
        )


class _LoopThread:
    """An event loop running in a daemon thread, for sync calls without a loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._main, name="checkpointkit-langgraph-loop", daemon=True
        )
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        """Cancel what still runs on the loop, stop it, join the thread, close the loop."""
        loop = self.loop
        if loop.is_closed():
            return

        async def drain() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_asyncgens()

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(drain(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join()
        loop.close()


class _Runtime:
    """The mutable state of a saver, shared with its copies (``with_allowlist``)."""

    def __init__(self) -> None:
        self.closed = False
        self.home: asyncio.AbstractEventLoop | None = None
        self.private: _LoopThread | None = None
        self.lock = threading.Lock()
        # (thread, ns, channel, version) -> serde type, for values stored apart:
        # lets put reference an unchanged large value without serializing it again.
        self.blob_types: OrderedDict[tuple[str, str, str, str], str] = OrderedDict()
        # head key -> (version, checkpoint id) last written or read here.
        self.heads: OrderedDict[str, tuple[str, str]] = OrderedDict()
        # Heads off: head keys checked for a head left by a saver that kept heads.
        self.no_head: OrderedDict[str, None] = OrderedDict()
        # (thread, ns, channel, version) -> the serialized value stored in a record for
        # that version: a put whose channel kept its version stores that value again, not
        # the live object LangGraph hands over (which it may have changed in place since).
        self.inline_values: OrderedDict[tuple[str, str, str, str], tuple[str, bytes]] = (
            OrderedDict()
        )
        self.inline_bytes = 0


class CheckpointkitSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that stores checkpoints in a checkpointkit storage.

    Use it with ``async with`` (or ``with`` for sync graphs); it closes what it
    opened (a storage made by `from_url`), never a storage passed in.

    Args:
        storage: Where the bytes go: any checkpointkit storage (memory, file,
            S3, Azure Blob, Redis, a plugin).
        serde: LangGraph serializer for checkpoints, metadata, channel values
            and writes; LangGraph's ``JsonPlusSerializer`` if None.
        prefix: Key prefix of every key the saver writes (``a/b`` or ``""``),
            so that several applications can share one storage.
        inline_limit: Channel values whose serialized form is at most this many
            bytes are stored inside each checkpoint record; larger ones are
            stored once per channel version and referenced.
        encryption: Encrypt every record with AES-GCM (see
            `checkpointkit.crypto.Encryption`); None stores them in clear.
        compress_threshold: zstd-compress records longer than this many bytes.
            ``None`` (the default) chooses by the storage: never on a local one
            (memory, file, SQLite: reading and writing the bytes costs less
            than compressing and decompressing them), 16 KiB elsewhere, where
            it saves transfer (see `checkpointkit.integrations.compress_threshold_for`).
        compression_level: zstd level for those records (1, the fastest positive
            level, by default: compression must not cost more than the bytes it
            saves). ``compress_threshold=sys.maxsize`` turns compression off.

    Raises:
        TypeError: ``storage`` is not a checkpointkit storage.
        InvalidKey: ``prefix`` cannot start a storage key.
        ValueError: ``inline_limit`` is negative.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        serde: SerializerProtocol | None = None,
        prefix: str = "langgraph",
        inline_limit: int = 128 * 1024,
        encryption: Encryption | None = None,
        compress_threshold: int | None = None,
        compression_level: int = 1,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(storage, Storage):
            raise TypeError(
                f"storage must be a checkpointkit Storage, not {type(storage).__name__}; "
                "use CheckpointkitSaver.from_url(url) for a URL"
            )
        prefix = _check_options(prefix, inline_limit)
        self._p = f"{prefix}/" if prefix else ""
        self._layout = LangGraphLayout(self._p)
        self.storage = storage
        self.prefix = prefix
        self.inline_limit = inline_limit
        self.encryption = encryption
        self._seal_options: dict[str, Any] = {
            "compress_threshold": compress_threshold_for(storage, compress_threshold),
            "compression_level": compression_level,
            "encryption": encryption,
        }
        self._owns_storage = False
        self._use_heads = keeps_heads(storage)
        # Shared by the shallow copies that LangGraph makes (``with_allowlist``).
        self._rt = _Runtime()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        storage_options: dict[str, Any] | None = None,
        serde: SerializerProtocol | None = None,
        prefix: str = "langgraph",
        inline_limit: int = 128 * 1024,
        encryption: Encryption | None = None,
        compress_threshold: int | None = None,
        compression_level: int = 1,
    ) -> CheckpointkitSaver:
        """Open the storage that ``url`` names and make a saver that owns (and closes) it.

        Args:
            url: A checkpointkit storage URL (``file:///var/graphs``,
                ``s3://bucket/prefix``, ``az://container``, ``redis://host:6379/0``,
                ``memory://``...).
            storage_options: Passed to the adapter (credentials, say, which then
                never appear in the URL).
            serde: See `CheckpointkitSaver`.
            prefix: See `CheckpointkitSaver`.
            inline_limit: See `CheckpointkitSaver`.
            encryption: See `CheckpointkitSaver`.
            compress_threshold: See `CheckpointkitSaver`.
            compression_level: See `CheckpointkitSaver`.

        Raises:
            ConfigurationError: An unknown scheme, bad URL parameters or a missing extra.
        """
        _check_options(prefix, inline_limit)  # before anything is opened
        saver = cls(
            open_storage(url, **(storage_options or {})),
            serde=serde,
            prefix=prefix,
            inline_limit=inline_limit,
            encryption=encryption,
            compress_threshold=compress_threshold,
            compression_level=compression_level,
        )
        saver._owns_storage = True
        return saver

    def __repr__(self) -> str:
        return f"CheckpointkitSaver({self.storage!r}, prefix={self.prefix!r})"

    # -- keys ----------------------------------------------------------------------------
    def _checkpoint_prefix(self, thread_id: str, ns: str | None = None) -> str:
        return self._layout.checkpoint_prefix(thread_id, ns)

    def _checkpoint_key(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        return self._layout.checkpoint_key(thread_id, ns, checkpoint_id)

    def _writes_prefix(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        return self._layout.writes_prefix(thread_id, ns, checkpoint_id)

    def _writes_key(
        self, thread_id: str, ns: str, checkpoint_id: str, task_id: str, name: str
    ) -> str:
        return self._layout.writes_key(thread_id, ns, checkpoint_id, task_id, name)

    def _blob_key(self, thread_id: str, ns: str, channel: str, version: str) -> str:
        return self._layout.blob_key(thread_id, ns, channel, version)

    def _head_key(self, thread_id: str, ns: str) -> str:
        return self._layout.head_key(thread_id, ns)

    def _parse_checkpoint_key(self, key: str) -> tuple[str, str, str]:
        """``(thread_id, checkpoint_ns, checkpoint_id)`` of a checkpoint record key."""
        parsed = self._layout.parse_checkpoint_key(key)
        return parsed.thread_id, parsed.checkpoint_ns, parsed.checkpoint_id

    # -- encoding ------------------------------------------------------------------------
    def _seal(self, payload: bytes, tag: int, key: str) -> bytes:
        return seal(payload, codec_tag=tag, key=key, **self._seal_options)

    def _open(self, data: bytes, key: str, tag: int, *, clear: bool = False) -> bytes:
        """The payload stored at ``key``; ``clear``: a record always written in clear (a head)."""
        got, payload = open_envelope(data, key=key, encryption=None if clear else self.encryption)
        _expect_tag(got, tag, key)
        return payload

    def _open_blob(self, data: bytes, key: str, serde_type: str) -> bytes:
        """A large value's serialized bytes; a view into ``data`` (no copy of up to
        megabytes) where LangGraph's own serializer reads it with msgpack, which takes one."""
        got, payload = open_view(data, key=key, encryption=self.encryption)
        _expect_tag(got, CODEC_LANGGRAPH_BLOB, key)
        if isinstance(payload, bytes) or (
            serde_type == "msgpack" and type(self.serde) is JsonPlusSerializer
        ):
            return cast(bytes, payload)  # ormsgpack.unpackb reads a memoryview as bytes
        return bytes(payload)

    def _decode_record(self, data: bytes, key: str) -> _Record:
        payload = self._open(data, key, CODEC_LANGGRAPH_RECORD)
        try:
            return decode_record(payload, key)
        except ValueError as exc:
            raise DecodeError(str(exc)) from exc

    def _decode_writes(self, data: bytes, key: str) -> _Writes:
        payload = self._open(data, key, CODEC_LANGGRAPH_WRITE)
        try:
            return decode_writes(payload, key)
        except ValueError as exc:
            raise DecodeError(str(exc)) from exc

    def _remember_blob(self, ident: tuple[str, str, str, str], serde_type: str) -> None:
        cache = self._rt.blob_types
        cache[ident] = serde_type
        cache.move_to_end(ident)
        if len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)

    def _remember_inline(self, ident: tuple[str, str, str, str], typed: tuple[str, bytes]) -> None:
        """Keep the serialized value of a channel version (bounded in entries and bytes)."""
        rt = self._rt
        old = rt.inline_values.pop(ident, None)
        if old is not None:
            rt.inline_bytes -= len(old[1])
        rt.inline_values[ident] = typed
        rt.inline_bytes += len(typed[1])
        while len(rt.inline_values) > _CACHE_SIZE or rt.inline_bytes > _INLINE_CACHE_BYTES:
            _, dropped = rt.inline_values.popitem(last=False)
            rt.inline_bytes -= len(dropped[1])

    def _forget_thread(self, thread_id: str) -> None:
        for ident in [i for i in self._rt.blob_types if i[0] == thread_id]:
            del self._rt.blob_types[ident]
        for ident in [i for i in self._rt.inline_values if i[0] == thread_id]:
            self._rt.inline_bytes -= len(self._rt.inline_values.pop(ident)[1])
        prefix = f"{self._p}h/{_seg(thread_id)}/"
        for cache in (self._rt.heads, self._rt.no_head):
            for key in [k for k in cache if k.startswith(prefix)]:
                del cache[key]

    # -- heads -----------------------------------------------------------------------------
    async def _read_head(self, key: str) -> tuple[str | None, str] | None:
        """``(checkpoint id, version)`` of a head; the id is None if unreadable; None if absent."""
        try:
            data, version = await self.storage.get(key)
        except NotFound:
            return None
        try:
            checkpoint_id = self._open(data, key, CODEC_LANGGRAPH_HEAD, clear=True).decode()
        except (CheckpointkitError, ValueError) as exc:
            log.warning("ignoring the unreadable head %r: %s", key, exc)
            return None, version
        return (checkpoint_id or None), version

    async def _write_head(self, key: str, checkpoint_id: str, mode: PutMode) -> None:
        data = seal(checkpoint_id.encode(), codec_tag=CODEC_LANGGRAPH_HEAD, key=key)
        self._remember_head(
            key, await reconcile.put(self.storage, key, data, mode=mode), checkpoint_id
        )

    def _remember_head(self, key: str, version: str, checkpoint_id: str) -> None:
        cache = self._rt.heads
        cache[key] = (version, checkpoint_id)
        cache.move_to_end(key)
        if len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)

    async def _newest_id(self, thread_id: str, ns: str) -> str | None:
        async for key in self.storage.list(self._checkpoint_prefix(thread_id, ns), limit=1):
            return self._parse_checkpoint_key(key)[2]
        return None

    async def _advance_head(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """Make the head name ``checkpoint_id`` unless it names a newer one already.

        A compare-and-swap loop, so concurrent puts never move it backward. A
        missing or unreadable head is rebuilt from the newest checkpoint listed
        (threads written before heads existed).
        """
        key = self._head_key(thread_id, ns)
        cached = self._rt.heads.get(key)
        while True:
            mode: PutMode
            new = checkpoint_id
            if cached is not None and checkpoint_id > cached[1]:
                mode = IfMatch(cached[0])  # forward from what this saver last saw
            else:
                current = await self._read_head(key)
                current_id, version = current if current is not None else (None, "")
                if current_id is not None:
                    if current_id >= checkpoint_id:
                        self._remember_head(key, version, current_id)
                        return  # it names this checkpoint or a newer one
                    mode = IfMatch(version)
                else:
                    newest = await self._newest_id(thread_id, ns)
                    if newest is not None and newest > checkpoint_id:
                        new = newest
                    mode = "create" if current is None else IfMatch(version)
            try:
                await self._write_head(key, new, mode)
            except PreconditionFailed:
                cached = None  # another writer moved it: read it again
                continue
            return

    async def _drop_old_head(self, thread_id: str, ns: str) -> None:
        """Heads off: delete a head left by a saver that kept heads (checked once per saver).

        Puts here do not move it, so a saver that reads heads (an older
        version, a wrapper that hides ``indexed_list``) would take it for the
        latest checkpoint; without it, that saver lists.
        """
        key = self._head_key(thread_id, ns)
        if key in self._rt.no_head:
            return
        await reconcile.delete_as_read(self.storage, key)
        self._no_head_to_drop(key)

    def _no_head_to_drop(self, key: str) -> None:
        """Heads off: remember that the head ``key`` needs no dropping by a later put."""
        checked = self._rt.no_head
        checked[key] = None
        if len(checked) > _CACHE_SIZE:
            checked.popitem(last=False)

    async def _mend_head(self, thread_id: str, ns: str, gone: Callable[[str], bool]) -> None:
        """After deleting checkpoints: a head naming one (``gone(id)``) goes to the newest left."""
        key = self._head_key(thread_id, ns)
        self._rt.heads.pop(key, None)
        while True:
            current = await self._read_head(key)
            if current is None or (current[0] is not None and not gone(current[0])):
                return
            version = current[1]
            newest = await self._newest_id(thread_id, ns)
            try:
                if newest is None:
                    await reconcile.delete(self.storage, key, if_match=version)
                else:
                    await self._write_head(key, newest, IfMatch(version))
            except PreconditionFailed:
                continue
            return

    # -- event loops -----------------------------------------------------------------------
    def _bind(self) -> None:
        """Remember the running loop as the one sync calls from other threads go to."""
        if self._rt.closed:
            raise RuntimeError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        home = self._rt.home
        if home is not loop and (home is None or home.is_closed() or not home.is_running()):
            self._rt.home = loop

    def _sync(self, make: Callable[[], Coroutine[Any, Any, T]], name: str) -> T:
        """Run ``make()`` on the saver's loop from a thread that does not run that loop."""
        if self._rt.closed:
            raise RuntimeError(f"{self!r} is closed")
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        home = self._rt.home
        if home is not None and not home.is_closed() and home.is_running():
            target = home
        else:
            target = self._private_loop()
        if running is target:
            raise asyncio.InvalidStateError(
                f"CheckpointkitSaver.{name}() was called on the thread that runs the saver's "
                f"event loop, where it would deadlock; use 'await saver.a{name}(...)' there "
                "(graph.ainvoke / graph.aget_state use the async methods)"
            )
        return asyncio.run_coroutine_threadsafe(make(), target).result()

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        with self._rt.lock:
            if self._rt.private is None:
                self._rt.private = _LoopThread()
            return self._rt.private.loop

    # -- lifecycle -------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the storage if the saver opened it, and stop its private loop; idempotent."""
        if self._rt.closed:
            return
        self._rt.closed = True
        private = self._rt.private
        try:
            if self._owns_storage:
                if private is not None and asyncio.get_running_loop() is not private.loop:
                    await asyncio.wrap_future(
                        asyncio.run_coroutine_threadsafe(self.storage.aclose(), private.loop)
                    )
                else:
                    await self.storage.aclose()
        finally:
            if private is not None:
                await asyncio.to_thread(private.stop)

    def close(self) -> None:
        """Sync `aclose`, for a saver used from sync code; idempotent.

        Raises:
            asyncio.InvalidStateError: Called on the thread that runs the saver's
                event loop while it has a storage to close (use ``await saver.aclose()``).
        """
        if self._rt.closed:
            return
        private = self._rt.private
        if self._owns_storage:
            if private is not None:
                asyncio.run_coroutine_threadsafe(self.storage.aclose(), private.loop).result()
            else:
                self._sync(self.storage.aclose, "close")
        self._rt.closed = True
        private = self._rt.private
        if private is not None:
            private.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        self._bind()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- reading -----------------------------------------------------------------------------
    async def _get_or_none(self, key: str) -> bytes | None:
        try:
            data, _ = await self.storage.get(key)
        except NotFound:
            return None
        return data

    async def _load_writes(
        self, thread_id: str, ns: str, checkpoint_id: str
    ) -> list[tuple[str, str, Any]]:
        keys = [
            key
            async for key in self.storage.list(self._writes_prefix(thread_id, ns, checkpoint_id))
        ]
        if not keys:
            return []
        found = await _gather_limited([self._get_or_none(key) for key in keys])
        batches: list[tuple[int, _Writes]] = []
        for key, data in zip(keys, found, strict=True):
            if data is not None:  # deleted meanwhile
                name = key[key.rfind("/") + 1 :]
                size = int(name[1:]) if name.startswith("r") else 0
                batches.append((size, self._decode_writes(data, key)))
        # A write is identified by (task, idx); when two calls hold it (a task's
        # writes saved again with more of them), the shorter, earlier call's wins.
        batches.sort(key=lambda b: b[0])
        chosen: dict[tuple[str, int], tuple[str, str, str, bytes]] = {}
        for _, batch in batches:
            for idx, channel, serde_type, value in batch.items:
                chosen.setdefault(
                    (batch.task_id, idx), (batch.task_path, channel, serde_type, value)
                )
        ordered = sorted(chosen.items(), key=lambda kv: (kv[1][0], kv[0][0], kv[0][1]))
        return [
            (task_id, channel, self.serde.loads_typed((serde_type, value)))
            for (task_id, _), (_, channel, serde_type, value) in ordered
        ]

    async def _load_values(self, thread_id: str, ns: str, record: _Record) -> dict[str, Any]:
        values = {ch: self.serde.loads_typed(typed) for ch, typed in record.values.items()}
        if not record.blobs:
            return values
        channels = list(record.blobs)
        keys = [self._blob_key(thread_id, ns, ch, record.blobs[ch][0]) for ch in channels]
        found = await _gather_limited([self._get_or_none(key) for key in keys])
        for ch, key, data in zip(channels, keys, found, strict=True):
            version, serde_type = record.blobs[ch]
            if data is None:
                raise CheckpointCorrupted(
                    f"the value of channel {ch!r} (version {version}) of thread {thread_id!r} "
                    f"is missing: key {key!r} not found"
                )
            values[ch] = self.serde.loads_typed(
                (serde_type, self._open_blob(data, key, serde_type))
            )
            self._remember_blob((thread_id, ns, ch, version), serde_type)
        return values

    def _config(self, thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    async def _tuple(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        record: _Record,
        writes: list[tuple[str, str, Any]] | None = None,
    ) -> CheckpointTuple:
        if writes is None and record.blobs:
            writes, values = await _both(
                self._load_writes(thread_id, ns, checkpoint_id),
                self._load_values(thread_id, ns, record),
            )
        else:
            if writes is None:
                writes = await self._load_writes(thread_id, ns, checkpoint_id)
            values = await self._load_values(thread_id, ns, record)
        checkpoint = cast(Checkpoint, self.serde.loads_typed(record.checkpoint))
        checkpoint["channel_values"] = values
        versions = checkpoint.get("channel_versions") or {}
        for channel, typed in record.values.items():
            if channel in versions:
                self._remember_inline((thread_id, ns, channel, str(versions[channel])), typed)
        metadata = cast(CheckpointMetadata, self.serde.loads_typed(record.metadata))
        return CheckpointTuple(
            config=self._config(thread_id, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=(self._config(thread_id, ns, record.parent) if record.parent else None),
            pending_writes=writes,
        )

    async def _tuple_at(
        self, thread_id: str, ns: str, checkpoint_id: str
    ) -> CheckpointTuple | None:
        key = self._checkpoint_key(thread_id, ns, checkpoint_id)
        data, writes = await _both(  # the record and its writes at once
            self._get_or_none(key), self._load_writes(thread_id, ns, checkpoint_id)
        )
        if data is None:
            return None
        record = self._decode_record(data, key)
        return await self._tuple(thread_id, ns, checkpoint_id, record, writes)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint that ``config`` names, or the thread's latest one; None if none.

        Args:
            config: ``{"configurable": {"thread_id": ..., "checkpoint_ns": ...,
                "checkpoint_id": ...}}``; without ``checkpoint_id``, the newest
                checkpoint of the thread and namespace.

        Raises:
            CheckpointCorrupted: A stored record fails its checksum, or a value it
                references is missing.
            DecodeError: A record cannot be decoded (or decrypted).
            StorageError: The storage failed.
        """
        self._bind()
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            return await self._tuple_at(thread_id, ns, checkpoint_id)
        if self._use_heads:
            current = await self._read_head(self._head_key(thread_id, ns))
            if current is not None and current[0] is not None:
                tup = await self._tuple_at(thread_id, ns, current[0])
                if tup is not None:
                    return tup
                # the head's checkpoint is gone (or not written yet): use the listing
        async for key in self.storage.list(self._checkpoint_prefix(thread_id, ns), limit=1):
            return await self._tuple_at(thread_id, ns, self._parse_checkpoint_key(key)[2])
        if not self._use_heads:
            # No checkpoint: a head left by a saver that kept heads names a missing
            # record, which its readers pass over for the listing, so the thread's first
            # put need not look for it (LangGraph reads the latest before a run's first
            # put: a new thread's run saves that get).
            self._no_head_to_drop(self._head_key(thread_id, ns))
        return None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints matching the criteria, newest first within each thread and namespace.

        Args:
            config: Restricts to a thread (``thread_id``), a namespace
                (``checkpoint_ns``; all namespaces of the thread if absent) and a
                checkpoint (``checkpoint_id``). None lists every thread.
            filter: Metadata items that must all be equal.
            before: Only checkpoints older than this one (by checkpoint id).
            limit: At most this many.

        Raises:
            CheckpointCorrupted, DecodeError, StorageError: as `aget_tuple`.
        """
        self._bind()
        if limit is not None and limit <= 0:
            return
        before_id = get_checkpoint_id(before) if before else None
        start_after: str | None = None
        only_id: str | None = None
        if config is None:
            prefix = f"{self._p}c/"
        else:
            conf = config["configurable"]
            thread_id = str(conf["thread_id"])
            ns = conf.get("checkpoint_ns")
            only_id = get_checkpoint_id(config)
            if ns is not None and only_id:
                tup = await self._tuple_at(thread_id, ns, only_id)
                if (
                    tup is not None
                    and (before_id is None or only_id < before_id)
                    and (not filter or _matches(tup.metadata, filter))
                ):
                    yield tup
                return
            prefix = self._checkpoint_prefix(thread_id, ns)
            if ns is not None and before_id:
                start_after = self._checkpoint_key(thread_id, ns, before_id)
        left = limit
        batch: list[tuple[str, str, str, str]] = []
        keys = self.storage.list(prefix, start_after=start_after)
        done = False
        while not done:
            batch.clear()
            want = _LIST_BATCH if left is None or filter else min(left, _LIST_BATCH)
            while len(batch) < want:
                try:
                    key = await anext(keys)
                except StopAsyncIteration:
                    done = True
                    break
                thread_id, ns, checkpoint_id = self._parse_checkpoint_key(key)
                if only_id is not None and checkpoint_id != only_id:
                    continue
                if before_id is not None and checkpoint_id >= before_id:
                    continue
                batch.append((key, thread_id, ns, checkpoint_id))
            if not batch:
                break
            found = await _gather_limited([self._get_or_none(b[0]) for b in batch])
            selected: list[tuple[str, str, str, str, _Record]] = []
            for (key, thread_id, ns, checkpoint_id), data in zip(batch, found, strict=True):
                if data is None:
                    continue  # deleted meanwhile
                record = self._decode_record(data, key)
                if filter and not _matches(self.serde.loads_typed(record.metadata), filter):
                    continue
                selected.append((key, thread_id, ns, checkpoint_id, record))
                if left is not None and len(selected) >= left:
                    break
            tuples = await _gather_limited([self._tuple(t, n, c, r) for _, t, n, c, r in selected])
            for tup in tuples:
                yield tup
            if left is not None:
                left -= len(tuples)
                if left <= 0:
                    return

    # -- writing -----------------------------------------------------------------------------
    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: its large new channel values first, then its record.

        Args:
            config: The thread, namespace and the parent checkpoint id.
            checkpoint: The checkpoint to store.
            metadata: Its metadata (merged with the config's, as LangGraph does).
            new_versions: Channels whose version is new in this checkpoint.

        Returns:
            The config of the stored checkpoint.

        Raises:
            StorageError: The storage failed (then the checkpoint may be absent,
                never half-written).
        """
        self._bind()
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = checkpoint["id"]
        body: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = body.pop("channel_values", None) or {}
        inline: dict[str, tuple[str, bytes]] = {}
        blobs: dict[str, tuple[str, str]] = {}
        uploads: list[tuple[str, bytes, bool]] = []  # key, data, overwrite
        learned: list[tuple[tuple[str, str, str, str], str]] = []  # remembered once stored
        for channel, raw_version in checkpoint["channel_versions"].items():
            version = str(raw_version)
            ident = (thread_id, ns, channel, version)
            is_new = channel in new_versions
            if not is_new:
                known = self._rt.blob_types.get(ident)
                if known is not None:
                    blobs[channel] = (version, known)
                    continue
                stored = self._rt.inline_values.get(ident)
                if stored is not None:  # the value of this version, as first stored
                    inline[channel] = stored
                    continue
            if channel not in values:
                continue  # an empty channel
            serde_type, data = self.serde.dumps_typed(values[channel])
            if len(data) <= self.inline_limit:
                inline[channel] = (serde_type, data)
                if is_new:
                    self._remember_inline(ident, (serde_type, data))
                continue
            blobs[channel] = (version, serde_type)
            key = self._blob_key(thread_id, ns, channel, version)
            # A new version is written; an unchanged one was written when it was new,
            # unless it was never seen here: then write it once more, create-only.
            uploads.append((key, self._seal(data, CODEC_LANGGRAPH_BLOB, key), is_new))
            learned.append((ident, serde_type))
        record = _Record(
            format=_FORMAT,
            checkpoint=self.serde.dumps_typed(body),
            metadata=self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)),
            parent=conf.get("checkpoint_id"),
            values=inline,
            blobs=blobs,
        )
        record_key = self._checkpoint_key(thread_id, ns, checkpoint_id)
        data = self._seal(encode(record), CODEC_LANGGRAPH_RECORD, record_key)
        # Values and the head before the record: a record never points at a missing
        # value, and a put that fails half-way leaves a head naming a missing
        # record (readers then use the listing), never a head behind the newest.
        # Without heads and large values, the record is the only write.
        writes: list[Coroutine[Any, Any, None]] = [self._upload(k, d, o) for k, d, o in uploads]
        if self._use_heads:
            writes.append(self._advance_head(thread_id, ns, checkpoint_id))
        elif self._head_key(thread_id, ns) not in self._rt.no_head:
            writes.append(self._drop_old_head(thread_id, ns))
        if writes:
            await _gather_limited(writes)
        # Only a value that is stored may be referenced by a later put without being
        # written again (a failed upload is retried by the next put that needs it).
        for ident, serde_type in learned:
            self._remember_blob(ident, serde_type)
        await reconcile.put(self.storage, record_key, data)
        return self._config(thread_id, ns, checkpoint_id)

    async def _upload(self, key: str, data: bytes, overwrite: bool) -> None:
        if overwrite:
            await reconcile.put(self.storage, key, data)
            return
        with contextlib.suppress(PreconditionFailed):
            await reconcile.put(self.storage, key, data, mode="create")

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for a checkpoint, write-once.

        The regular writes of one call go into one create-only record named by
        the task and the call's length, so a repeated call keeps the first, and
        concurrent calls never lose a write. Each special write (error,
        interrupt, resume, scheduled) gets its own record and replaces the
        previous one, as in LangGraph's own savers. A write is identified by
        (task, index): when a later, longer call repeats it (LangGraph re-saves
        the writes of its null task with the new ones appended), the first
        stored value counts.

        Args:
            config: The checkpoint the writes belong to.
            writes: ``(channel, value)`` pairs.
            task_id: The task that made them.
            task_path: The task's path (orders the writes of a super-step).

        Raises:
            StorageError: The storage failed.
        """
        self._bind()
        if not writes:
            return
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = str(conf["checkpoint_id"])
        regular: list[tuple[int, str, str, bytes]] = []
        uploads: list[tuple[str, bytes, bool]] = []
        for idx, (channel, value) in enumerate(writes):
            serde_type, data = self.serde.dumps_typed(value)
            special = WRITES_IDX_MAP.get(channel)
            if special is None:
                regular.append((idx, channel, serde_type, data))
                continue
            record = _Writes(_FORMAT, task_id, task_path, [(special, channel, serde_type, data)])
            key = self._writes_key(thread_id, ns, checkpoint_id, task_id, f"s{-special}")
            uploads.append((key, self._seal(encode(record), CODEC_LANGGRAPH_WRITE, key), True))
        if regular:
            record = _Writes(_FORMAT, task_id, task_path, regular)
            key = self._writes_key(thread_id, ns, checkpoint_id, task_id, f"r{len(writes)}")
            uploads.append((key, self._seal(encode(record), CODEC_LANGGRAPH_WRITE, key), False))
        await _gather_limited([self._upload(k, d, o) for k, d, o in uploads])

    # -- deleting and copying -------------------------------------------------------------
    async def _keys(self, prefix: str) -> list[str]:
        return [key async for key in self.storage.list(prefix)]

    async def _delete_keys(self, keys: Sequence[str]) -> None:
        await _gather_limited([reconcile.delete(self.storage, key) for key in keys])

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and value of a thread (all namespaces).

        Raises:
            StorageError: The storage failed (what was deleted stays deleted).
        """
        self._bind()
        thread_id = str(thread_id)
        self._forget_thread(thread_id)
        for kind in ("h", "c", "w", "b"):  # heads and checkpoints first: readers stop seeing it
            await self._delete_keys(await self._keys(f"{self._p}{kind}/{_seg(thread_id)}/"))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of ``run_ids``.

        Run ids are not part of the keys, so this reads every checkpoint record
        in the storage under the saver's prefix. Channel values stay: later
        checkpoints of other runs may reference them.

        Raises:
            CheckpointCorrupted, DecodeError, StorageError: as `aget_tuple`.
        """
        self._bind()
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        keys = await self._keys(f"{self._p}c/")
        for start in range(0, len(keys), _LIST_BATCH):
            chunk = keys[start : start + _LIST_BATCH]
            found = await _gather_limited([self._get_or_none(key) for key in chunk])
            doomed: list[str] = []
            for key, data in zip(chunk, found, strict=True):
                if data is None:
                    continue
                metadata = self.serde.loads_typed(self._decode_record(data, key).metadata)
                if str(metadata.get("run_id")) in wanted:
                    doomed.append(key)
            for key in doomed:
                thread_id, ns, checkpoint_id = self._parse_checkpoint_key(key)
                await reconcile.delete(self.storage, key)
                await self._delete_keys(
                    await self._keys(self._writes_prefix(thread_id, ns, checkpoint_id))
                )
                if self._use_heads:
                    await self._mend_head(thread_id, ns, {checkpoint_id}.__contains__)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, write and value of a thread to another thread id.

        Values and writes are copied before the checkpoints that use them, so
        a reader of the target never sees a checkpoint without its data. Keys of
        the target that exist are overwritten. Each record is sealed again for
        its new key (records are bound to their key), under the active
        encryption key if encryption is on; payloads are not decoded.

        Raises:
            CheckpointCorrupted, DecodeError: A source record is damaged or
                cannot be decrypted (records copied before it stay copied).
            StorageError: The storage failed.
        """
        self._bind()
        source, target = _seg(str(source_thread_id)), _seg(str(target_thread_id))
        for kind in ("b", "w", "c"):
            prefix = f"{self._p}{kind}/{source}/"
            keys = await self._keys(prefix)

            async def copy(key: str, prefix: str = prefix, kind: str = kind) -> None:
                data = await self._get_or_none(key)
                if data is not None:  # sealed again: a record is bound to its key
                    to_key = f"{self._p}{kind}/{target}/{key[len(prefix) :]}"
                    data = reseal(data, key=key, encryption=self.encryption, to_key=to_key)
                    await reconcile.put(self.storage, to_key, data)

            await _gather_limited([copy(key) for key in keys])
        if not self._use_heads:
            return
        # The target's heads: moved forward to the source's (never backward).
        prefix = f"{self._p}h/{source}/"
        for key in await self._keys(prefix):
            current = await self._read_head(key)
            if current is not None and current[0] is not None:
                ns = _unseg(key[len(prefix) :])
                await self._advance_head(str(target_thread_id), ns, current[0])

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: keep only the newest checkpoint per namespace, or delete all.

        ``keep_latest`` keeps, in each namespace of each thread, the newest
        checkpoint, its pending writes and the values it references; every
        other checkpoint, write and value of the thread is deleted. Like any
        pruning, it cuts the history that LangGraph's ``DeltaChannel`` (beta)
        rebuilds its value from.

        Args:
            thread_ids: Threads to prune.
            strategy: ``"keep_latest"`` or ``"delete"`` (as `adelete_thread`).

        Raises:
            ValueError: An unknown strategy.
            CheckpointCorrupted, DecodeError, StorageError: as `aget_tuple`.
        """
        self._bind()
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for raw in thread_ids:
            thread_id = str(raw)
            if strategy == "delete":
                await self.adelete_thread(thread_id)
                continue
            self._forget_thread(thread_id)
            keys = await self._keys(self._checkpoint_prefix(thread_id))
            kept: dict[str, str] = {}  # ns -> key of its newest checkpoint (first listed)
            doomed: list[str] = []
            for key in keys:
                _, ns, _ = self._parse_checkpoint_key(key)
                if ns in kept:
                    doomed.append(key)
                else:
                    kept[ns] = key
            await self._delete_keys(doomed)
            kept_writes = {
                self._writes_prefix(thread_id, ns, self._parse_checkpoint_key(key)[2])
                for ns, key in kept.items()
            }
            await self._delete_keys(
                [
                    key
                    for key in await self._keys(f"{self._p}w/{_seg(thread_id)}/")
                    if key[: key.rfind("/", 0, key.rfind("/")) + 1] not in kept_writes
                ]
            )
            used: set[str] = set()
            found = await _gather_limited([self._get_or_none(key) for key in kept.values()])
            for (ns, key), data in zip(kept.items(), found, strict=True):
                if data is None:
                    continue
                for channel, (version, _) in self._decode_record(data, key).blobs.items():
                    used.add(self._blob_key(thread_id, ns, channel, version))
            await self._delete_keys(
                [k for k in await self._keys(f"{self._p}b/{_seg(thread_id)}/") if k not in used]
            )
            heads = f"{self._p}h/{_seg(thread_id)}/"
            if self._use_heads:
                for key in await self._keys(heads):
                    ns = _unseg(key[len(heads) :])
                    keep = self._parse_checkpoint_key(kept[ns])[2] if ns in kept else None
                    await self._mend_head(thread_id, ns, functools.partial(_is_not, keep))
            else:  # heads left by a saver that kept them
                await self._delete_keys(await self._keys(heads))

    # -- versions ------------------------------------------------------------------------------
    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: a zero-padded counter and a random tie-breaker.

        Same format as LangGraph's ``InMemorySaver`` and ``PostgresSaver``:
        ordered as strings, and unique across concurrent writers.
        """
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # -- the sync API ----------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Sync `aget_tuple` (see the module docstring about threads)."""
        return self._sync(lambda: self.aget_tuple(config), "get_tuple")

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Sync `alist` (see the module docstring about threads)."""

        async def collect() -> list[CheckpointTuple]:
            return [
                tup async for tup in self.alist(config, filter=filter, before=before, limit=limit)
            ]

        return iter(self._sync(collect, "list"))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Sync `aput` (see the module docstring about threads)."""
        return self._sync(lambda: self.aput(config, checkpoint, metadata, new_versions), "put")

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Sync `aput_writes` (see the module docstring about threads)."""
        self._sync(lambda: self.aput_writes(config, writes, task_id, task_path), "put_writes")

    def delete_thread(self, thread_id: str) -> None:
        """Sync `adelete_thread`."""
        self._sync(lambda: self.adelete_thread(thread_id), "delete_thread")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Sync `adelete_for_runs`."""
        self._sync(lambda: self.adelete_for_runs(run_ids), "delete_for_runs")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Sync `acopy_thread`."""
        self._sync(lambda: self.acopy_thread(source_thread_id, target_thread_id), "copy_thread")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Sync `aprune`."""
        self._sync(lambda: self.aprune(thread_ids, strategy=strategy), "prune")


# -- helpers ---------------------------------------------------------------------------------


def _is_not(keep: str | None, checkpoint_id: str) -> bool:
    return checkpoint_id != keep


def _matches(metadata: Any, filter: dict[str, Any]) -> bool:
    return all(metadata.get(k) == v for k, v in filter.items())


async def _gather_limited(coros: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """Await ``coros`` at most 16 at a time, in a task group; results in order.

    On a failure the others are cancelled and awaited, and the error raised
    (the first one, not an exception group). On a failure or a cancellation,
    the coroutines that never got their turn (cancelled while they waited for
    it, or before their task started) are closed, never left unawaited.
    """
    if len(coros) == 1:
        return [await coros[0]]
    limit = asyncio.Semaphore(_CONCURRENCY)

    async def run(coro: Coroutine[Any, Any, T]) -> T:
        async with limit:
            return await coro

    tasks: list[asyncio.Task[T]] = []
    try:
        async with asyncio.TaskGroup() as tg:
            for coro in coros:
                tasks.append(tg.create_task(run(coro)))
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    finally:
        for coro in coros:  # every task has ended: closing an ended coroutine does nothing
            coro.close()
    return [t.result() for t in tasks]


async def _both(first: Coroutine[Any, Any, T], second: Coroutine[Any, Any, U]) -> tuple[T, U]:
    """Await two coroutines at once; on a failure, cancel the other and raise the first error.

    Not a task group: the error is raised as it is, never in an ``ExceptionGroup``.
    """
    a, b = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        await asyncio.gather(a, b)
    finally:
        for task in (a, b):
            task.cancel()
        await asyncio.gather(a, b, return_exceptions=True)
    return a.result(), b.result()


def _check_options(prefix: str, inline_limit: int) -> str:
    """Validate the saver's options; return the prefix without outer slashes."""
    if not isinstance(inline_limit, int) or isinstance(inline_limit, bool) or inline_limit < 0:
        raise ValueError(f"inline_limit must be an int >= 0 (bytes), not {inline_limit!r}")
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
    prefix = prefix.strip("/")
    if prefix:
        validate_prefix(prefix + "/")
    return prefix

"""agent-framework checkpoint storage on any checkpointkit storage.

`CheckpointkitCheckpointStorage` implements agent-framework's
``CheckpointStorage`` protocol (``save``, ``load``, ``list_checkpoints``,
``delete``, ``get_latest``, ``list_checkpoint_ids``), so every checkpointkit
storage URL (file, S3, Azure Blob, Redis, memory, a plugin) can hold the
checkpoints of agent-framework workflows::

    from checkpointkit.integrations.agent_framework import CheckpointkitCheckpointStorage

    async with CheckpointkitCheckpointStorage.from_url("s3://bucket/workflows") as storage:
        pipeline = my_pipeline.build()  # a @workflow definition
        result = await pipeline.run("input", checkpoint_storage=storage)

Checkpoint values keep agent-framework's own encoding rules: the checkpoint is
encoded with ``encode_checkpoint_value`` (JSON-native values as they are, any
other value pickled) and decoded with ``decode_checkpoint_value`` under its
restricted unpickler, with the same allow-list as its ``FileCheckpointStorage``
(built-in value types, agent-framework's and OpenAI's types, types registered
with ``register_checkpoint_type``, and ``allowed_checkpoint_types``). As there,
a checkpoint that would not decode under that allow-list is refused at save
time. The encoded structure is stored as msgpack (JSON when it holds an integer
too large for msgpack) inside checkpointkit's envelope (checksum, optional zstd,
optional AES-GCM).

Key layout, under ``prefix`` (default ``agent-framework``)::

    {prefix}/cp/{checkpoint_id}                      the checkpoint
    {prefix}/wf/{workflow_name}/{~time}-{id}         an empty marker, newest first
    {prefix}/head/{workflow_name}                    names the workflow's newest marker
                                                     (not on a storage with ``indexed_list``)

``{~time}`` is the checkpoint's timestamp in microseconds, inverted and in hex,
so the newest checkpoint of a workflow is the first key of a listing.

The head makes ``get_latest`` two gets where a listing is dear (a listing,
even one of ``limit=1``, reads the whole directory on the file storage). A
storage that declares ``indexed_list`` (SQLite, memory) lists by an index, so
``list(limit=1)`` costs about a get: there no head is kept, and a save is the
checkpoint and its marker at once (one commit on SQLite). A head only moves
forward (to a smaller marker name), by compare-and-swap: a save moves it
before writing its checkpoint and marker, so a save that fails half-way
leaves a head naming a missing checkpoint, and readers then fall back to the
listing. Deleting the head's checkpoint points the head at the newest marker
left (or removes it). A storage without conditional puts keeps no head.
Without heads, a head left by an object that kept them is ignored, and
deleted by each object's first save of its workflow.

Cost per operation, in storage requests:

- ``save``: 1 compare-and-swap put of the head, then 2 puts at once (the
  checkpoint, create-only, and its marker). The head's version is remembered,
  so the head costs 1 get more only when another writer moved it (and, for the
  first save of a workflow in a process, 1 get and 1 ``list(limit=1)``).
  Without heads: the 2 puts at once, and 1 get more for the first save of a
  workflow by this object. Saving an id again costs 1 get and 1 put more,
  and moves the marker if the timestamp or workflow changed. A marker whose
  checkpoint is missing (a save that failed half-way) is skipped by readers.
- ``load``: 1 get.
- ``get_latest``: 2 gets (the head, the checkpoint), however many checkpoints
  the workflow has; without heads or a valid head, 1 ``list(limit=1)`` and 1
  get.
- ``list_checkpoint_ids``: 1 paged listing (no reads).
- ``list_checkpoints``: 1 paged listing and 1 get per checkpoint (16 at a time).
- ``delete``: 1 get and 2 deletes; with heads, deleting the newest checkpoint
  costs 1 get, 1 ``list(limit=1)`` and 1 put (or delete) of the head more.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
from collections import OrderedDict
from collections.abc import Coroutine, Iterable, Sequence
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import msgspec

from . import compress_threshold_for, keeps_heads, missing_extra

try:
    from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
    from agent_framework._workflows._checkpoint_encoding import (
        decode_checkpoint_value,
        encode_checkpoint_value,
    )
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise missing_extra(__name__, "agent-framework", _exc) from _exc

from .. import reconcile
from ..crypto import Encryption
from ..envelope import open_envelope, open_view, seal
from ..errors import CheckpointCorrupted, CheckpointkitError, NotFound, PreconditionFailed
from ..keys import validate_prefix
from ..registry import open_storage
from ..storage import IfMatch, PutMode, Storage
from ._agent_framework_layout import (
    CODEC_AGENT_FRAMEWORK_HEAD,
    CODEC_AGENT_FRAMEWORK_JSON,
    CODEC_AGENT_FRAMEWORK_MSGPACK,
    AgentFrameworkLayout,
)

__all__ = [
    "CODEC_AGENT_FRAMEWORK_HEAD",
    "CODEC_AGENT_FRAMEWORK_JSON",
    "CODEC_AGENT_FRAMEWORK_MSGPACK",
    "CheckpointkitCheckpointStorage",
    "WorkflowCheckpointCorrupted",
]

log = logging.getLogger("checkpointkit.integrations.agent_framework")


class WorkflowCheckpointCorrupted(WorkflowCheckpointException, CheckpointCorrupted):
    """A stored checkpoint is damaged: checksum or length mismatch, or bound to another key.

    Both agent-framework's ``WorkflowCheckpointException`` (what its protocol
    raises) and checkpointkit's
    `CheckpointCorrupted`, so either ``except``
    catches it. The message names the key.
    """


_CONCURRENCY = 16
_HEAD_CACHE_SIZE = 4096
_msgpack_encoder = msgspec.msgpack.Encoder()
_msgpack_decoder = msgspec.msgpack.Decoder()

_PICKLED = b"__pickled__"
"""agent-framework's key for a pickled value; a payload without these bytes holds none."""


_RESERVED = (_PICKLED, b"__type__")
"""agent-framework's reserved keys: a dict holding one is pickled by its encoding."""

_JSON_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})
_MAX_DEPTH = 256


def _referents_are_sound() -> bool:
    """Check the CPython behaviour `_json_native` relies on: a dict whose keys are all exact
    str refers to its values only; any other dict to its keys too; a list to its items."""
    return (
        len(gc.get_referents({"a": 1, "b": [2]})) == 2
        and len(gc.get_referents({1: "a"})) == 2
        and len(gc.get_referents({"a": 1, 2: "b"})) == 4
        and sorted(map(repr, gc.get_referents([1, "x", None]))) == ["'x'", "1", "None"]
    )


_SOUND = _referents_are_sound()


def _json_native(root: dict[str, Any]) -> bool:
    """Whether agent-framework's encoding would return ``root`` as it is (equal, rebuilt).

    That is: only dicts with exact-str keys, lists, str, int, float, bool and None, of the
    exact types (a subclass is pickled), proven one level at a time with C-level scans
    (``gc.get_referents``): no Python code runs per value. A dict holding a reserved key
    is not caught here: the caller looks for those keys in the encoded bytes. Gives up
    (False) on a graph deeper than 256 levels, which includes reference cycles.
    """
    if not _SOUND:
        return False
    level: list[Any] = [root]
    for _ in range(_MAX_DEPTH):
        dicts = [x for x in level if type(x) is dict]
        lists = [x for x in level if type(x) is list]
        if not dicts and not lists:
            return True
        values = gc.get_referents(*dicts)
        if len(values) != sum(map(len, dicts)):
            return False  # some key is not an exact str: agent-framework stringifies it
        level = values + gc.get_referents(*lists)
        if not set(map(type, level)) <= _JSON_TYPES:
            return False
    return False


def _serialize(encoded: dict[str, Any]) -> tuple[bytes, int]:
    """msgpack, or JSON for an integer beyond 64 bits; the payload and its codec tag."""
    try:
        return _msgpack_encoder.encode(encoded), CODEC_AGENT_FRAMEWORK_MSGPACK
    except (OverflowError, msgspec.EncodeError):
        return json.dumps(encoded, ensure_ascii=False).encode(), CODEC_AGENT_FRAMEWORK_JSON


class _Plain(dict[str, Any]):
    """A decoded checkpoint structure whose payload holds no pickled value.

    agent-framework's ``decode_checkpoint_value`` returns such a structure
    unchanged (as a copy of every dict and list, the whole of its cost: 5 ms
    for a 1 MiB state), so it is skipped.
    """


class CheckpointkitCheckpointStorage:
    """agent-framework's ``CheckpointStorage`` on a checkpointkit storage.

    Use it with ``async with``: it closes the storage it opened
    (`from_url`), never one passed in.

    Args:
        storage: Where the bytes go: any checkpointkit storage.
        prefix: Key prefix of every key written (``a/b`` or ``""``), so that
            several applications can share one storage.
        allowed_checkpoint_types: Extra ``"module:qualname"`` types that the
            restricted decoding may rebuild, as for agent-framework's
            ``FileCheckpointStorage``.
        encryption: Encrypt every checkpoint with AES-GCM (see
            `checkpointkit.crypto.Encryption`); None stores them in clear.
        compress_threshold: zstd-compress checkpoints longer than this many bytes.
            ``None`` (the default) chooses by the storage: never on a local one
            (memory, file, SQLite: reading and writing the bytes costs less
            than compressing and decompressing them), 16 KiB elsewhere, where
            it saves transfer (see `checkpointkit.integrations.compress_threshold_for`).
        compression_level: zstd level for those (1, the fastest positive level, by
            default: compression must not cost more than the bytes it saves).
            ``compress_threshold=sys.maxsize`` turns compression off.

    Raises:
        TypeError: ``storage`` is not a checkpointkit storage.
        InvalidKey: ``prefix`` cannot start a storage key.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        prefix: str = "agent-framework",
        allowed_checkpoint_types: Iterable[str] | None = None,
        encryption: Encryption | None = None,
        compress_threshold: int | None = None,
        compression_level: int = 1,
    ) -> None:
        if not isinstance(storage, Storage):
            raise TypeError(
                f"storage must be a checkpointkit Storage, not {type(storage).__name__}; "
                "use CheckpointkitCheckpointStorage.from_url(url) for a URL"
            )
        prefix = _check_prefix(prefix)
        self.storage = storage
        self.prefix = prefix
        self._p = f"{prefix}/" if prefix else ""
        self._layout = AgentFrameworkLayout(self._p)
        self.encryption = encryption
        self._allowed: frozenset[str] = frozenset(allowed_checkpoint_types or ())
        self._seal_options: dict[str, Any] = {
            "compress_threshold": compress_threshold_for(storage, compress_threshold),
            "compression_level": compression_level,
            "encryption": encryption,
        }
        self._owns_storage = False
        self._use_heads = keeps_heads(storage)
        # head key -> (version, marker name) last written or read by this object
        self._heads: OrderedDict[str, tuple[str, str]] = OrderedDict()
        # Heads off: head keys checked for a head left by a storage object that kept heads.
        self._no_head: OrderedDict[str, None] = OrderedDict()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        storage_options: dict[str, Any] | None = None,
        prefix: str = "agent-framework",
        allowed_checkpoint_types: Iterable[str] | None = None,
        encryption: Encryption | None = None,
        compress_threshold: int | None = None,
        compression_level: int = 1,
    ) -> CheckpointkitCheckpointStorage:
        """Open the storage that ``url`` names; the result owns (and closes) it.

        Args:
            url: A checkpointkit storage URL (``file:///var/wf``,
                ``s3://bucket/prefix``, ``az://container``, ``redis://host:6379/0``...).
            storage_options: Passed to the adapter (credentials, say).
            prefix: See `CheckpointkitCheckpointStorage`.
            allowed_checkpoint_types: See `CheckpointkitCheckpointStorage`.
            encryption: See `CheckpointkitCheckpointStorage`.
            compress_threshold: See `CheckpointkitCheckpointStorage`.
            compression_level: See `CheckpointkitCheckpointStorage`.

        Raises:
            ConfigurationError: An unknown scheme, bad URL parameters or a missing extra.
        """
        _check_prefix(prefix)  # before anything is opened
        storage = cls(
            open_storage(url, **(storage_options or {})),
            prefix=prefix,
            allowed_checkpoint_types=allowed_checkpoint_types,
            encryption=encryption,
            compress_threshold=compress_threshold,
            compression_level=compression_level,
        )
        storage._owns_storage = True
        return storage

    def __repr__(self) -> str:
        return f"CheckpointkitCheckpointStorage({self.storage!r}, prefix={self.prefix!r})"

    async def aclose(self) -> None:
        """Close the storage if this object opened it; idempotent."""
        if self._owns_storage:
            await self.storage.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- keys ------------------------------------------------------------------------
    def _checkpoint_key(self, checkpoint_id: str) -> str:
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise WorkflowCheckpointException(
                f"Invalid checkpoint ID {checkpoint_id!r}: it must be a non-empty str"
            )
        return self._layout.checkpoint_key(checkpoint_id)

    def _workflow_prefix(self, workflow_name: str) -> str:
        if not isinstance(workflow_name, str):
            raise TypeError(f"workflow_name must be a str, not {type(workflow_name).__name__}")
        return self._layout.workflow_prefix(workflow_name)

    def _marker_key(self, workflow_name: str, timestamp: str, checkpoint_id: str) -> str:
        self._workflow_prefix(workflow_name)  # the type check
        try:
            return self._layout.marker_key(workflow_name, timestamp, checkpoint_id)
        except (TypeError, ValueError):
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id} has timestamp {timestamp!r}, which is not ISO 8601"
            ) from None

    @staticmethod
    def _marker_id(key: str) -> str:
        return AgentFrameworkLayout.marker_id(key)

    def _head_key(self, workflow_prefix: str) -> str:
        """``{p}head/_{name}`` for the workflow prefix ``{p}wf/_{name}/``."""
        return f"{self._layout.heads}{workflow_prefix[len(self._layout.workflows) : -1]}"

    # -- the head ----------------------------------------------------------------------
    async def _read_head(self, key: str) -> tuple[str | None, str] | None:
        """``(marker name, version)`` of a head; the name is None if unreadable; None if absent."""
        try:
            data, version = await self.storage.get(key)
        except NotFound:
            return None
        try:
            tag, payload = open_envelope(data, key=key)
            name = payload.decode() if tag == CODEC_AGENT_FRAMEWORK_HEAD else ""
        except (CheckpointkitError, ValueError) as exc:
            log.warning("ignoring the unreadable head %r: %s", key, exc)
            return None, version
        if len(name) < 18 or "/" in name:
            log.warning("ignoring the head %r: it names no marker", key)
            return None, version
        return name, version

    async def _write_head(self, key: str, name: str, mode: PutMode) -> None:
        data = seal(name.encode(), codec_tag=CODEC_AGENT_FRAMEWORK_HEAD, key=key)
        self._remember_head(key, await reconcile.put(self.storage, key, data, mode=mode), name)

    def _remember_head(self, key: str, version: str, name: str) -> None:
        self._heads[key] = (version, name)
        self._heads.move_to_end(key)
        if len(self._heads) > _HEAD_CACHE_SIZE:
            self._heads.popitem(last=False)

    async def _first_marker(self, workflow_prefix: str) -> str | None:
        async for marker in self.storage.list(workflow_prefix, limit=1):
            return marker[len(workflow_prefix) :]
        return None

    async def _advance_head(self, workflow_prefix: str, name: str) -> None:
        """Make the head name ``name`` unless it names a newer (smaller) marker already.

        A compare-and-swap loop: concurrent saves never move the head backward.
        A missing or unreadable head is rebuilt from the first marker listed
        (checkpoints saved before heads existed, or before a failure).
        """
        key = self._head_key(workflow_prefix)
        cached = self._heads.get(key)
        while True:
            mode: PutMode
            new = name
            if cached is not None and name < cached[1]:
                mode = IfMatch(cached[0])  # forward from what this object last saw
            else:
                current = await self._read_head(key)
                current_name, version = current if current is not None else (None, "")
                if current_name is not None:
                    if current_name <= name:
                        self._remember_head(key, version, current_name)
                        return  # it names this marker or a newer one
                    mode = IfMatch(version)
                else:
                    first = await self._first_marker(workflow_prefix)
                    if first is not None and first < name:
                        new = first
                    mode = "create" if current is None else IfMatch(version)
            try:
                await self._write_head(key, new, mode)
            except PreconditionFailed:
                cached = None  # another writer moved it: read it again
                continue
            return

    async def _drop_old_head(self, key: str) -> None:
        """Heads off: delete a head left by an object that kept heads (checked once per object).

        Saves here do not move it, so an object that reads heads (an older
        version, a wrapper that hides ``indexed_list``) would take it for the
        latest checkpoint; without it, that object lists.
        """
        await reconcile.delete_as_read(self.storage, key)
        self._no_head[key] = None
        if len(self._no_head) > _HEAD_CACHE_SIZE:
            self._no_head.popitem(last=False)

    async def _repair_head(self, marker: str) -> None:
        """After ``marker`` was removed: a head naming it goes to the newest marker left."""
        workflow_prefix = marker[: marker.rfind("/") + 1]
        gone = marker[len(workflow_prefix) :]
        key = self._head_key(workflow_prefix)
        self._heads.pop(key, None)
        while True:
            current = await self._read_head(key)
            if current is None or current[0] not in (None, gone):
                return
            version = current[1]
            first = await self._first_marker(workflow_prefix)
            try:
                if first is None:
                    await reconcile.delete(self.storage, key, if_match=version)
                else:
                    await self._write_head(key, first, IfMatch(version))
            except PreconditionFailed:
                continue
            return

    # -- encoding --------------------------------------------------------------------
    def _encode(self, checkpoint: WorkflowCheckpoint, key: str) -> bytes:
        # Refuse, now, a checkpoint that could not be restored (as FileCheckpointStorage does).
        # A structure without a pickled value decodes to itself (only pickled values
        # can fail to restore): the trial decode runs only when the marker is there.
        try:
            raw = checkpoint.to_dict()
            # JSON-native throughout: agent-framework's walk (5.8 ms for a 1 MiB state)
            # would return an equal structure, unless a dict holds a reserved key (the
            # encoded bytes then hold it; encoded again the long way below).
            native = _json_native(raw)
            encoded = raw if native else encode_checkpoint_value(raw)
            payload, tag = _serialize(encoded)
            if native and any(marker in payload for marker in _RESERVED):
                encoded = encode_checkpoint_value(raw)  # the long way: it pickles such dicts
                payload, tag = _serialize(encoded)
            if _PICKLED in payload:
                decode_checkpoint_value(encoded, allowed_types=self._allowed)
        except Exception as exc:
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint.checkpoint_id} cannot be encoded or restored under "
                f"this storage's allowed types; refusing to save. {exc}"
            ) from exc
        return seal(payload, codec_tag=tag, key=key, **self._seal_options)

    def _open(self, data: bytes, key: str) -> dict[str, Any]:
        """The encoded structure (not yet unpickled) stored at ``key``."""
        try:
            tag, payload = open_view(data, key=key, encryption=self.encryption)
            # A view into ``data`` when stored in clear and uncompressed: no copy.
            plain = _PICKLED not in (payload if isinstance(payload, bytes) else data)
            if tag == CODEC_AGENT_FRAMEWORK_MSGPACK:
                encoded = _msgpack_decoder.decode(payload)
            elif tag == CODEC_AGENT_FRAMEWORK_JSON:
                encoded = json.loads(bytes(payload))
            else:
                raise WorkflowCheckpointException(
                    f"The envelope at key {key!r} has codec tag {tag}, which is not an "
                    "agent-framework checkpoint"
                )
        except CheckpointCorrupted as exc:
            raise WorkflowCheckpointCorrupted(
                f"The checkpoint at key {key!r} is corrupted: {exc}"
            ) from exc
        except (CheckpointkitError, ValueError, msgspec.DecodeError) as exc:
            raise WorkflowCheckpointException(
                f"The checkpoint at key {key!r} cannot be read: {exc}"
            ) from exc
        if not isinstance(encoded, dict):
            raise WorkflowCheckpointException(f"The checkpoint at key {key!r} is not a mapping")
        if plain:
            return _Plain(encoded)  # a shallow copy of the top level: a few keys
        return encoded

    def _decode(self, encoded: dict[str, Any], key: str) -> WorkflowCheckpoint:
        if isinstance(encoded, _Plain):
            # No pickled value anywhere in the payload: agent-framework's decoding would
            # rebuild every dict and list of the structure, equal to what msgpack made.
            return WorkflowCheckpoint.from_dict(dict(encoded))
        try:
            decoded = decode_checkpoint_value(encoded, allowed_types=self._allowed)
        except WorkflowCheckpointException as exc:
            raise WorkflowCheckpointException(
                f"The checkpoint at key {key!r} cannot be decoded: {exc}"
            ) from exc
        return WorkflowCheckpoint.from_dict(decoded)

    async def _read(self, key: str) -> dict[str, Any] | None:
        try:
            data, _ = await self.storage.get(key)
        except NotFound:
            return None
        return self._open(data, key)

    # -- the protocol ------------------------------------------------------------------
    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Store a copy of ``checkpoint``; return its id.

        The bytes are made before anything is written, so later changes to
        ``checkpoint`` change nothing stored.

        Raises:
            WorkflowCheckpointException: The checkpoint cannot be encoded, would
                not decode under the allowed types, or its timestamp is not ISO 8601.
            StorageError: The storage failed.
        """
        checkpoint_id = checkpoint.checkpoint_id
        key = self._checkpoint_key(checkpoint_id)
        marker = self._marker_key(checkpoint.workflow_name, checkpoint.timestamp, checkpoint_id)
        data = self._encode(checkpoint, key)
        workflow_prefix = marker[: marker.rfind("/") + 1]
        if self._use_heads:
            # The head first: if what follows fails, the head names a missing
            # checkpoint and readers fall back to the listing (never a stale head).
            await self._advance_head(workflow_prefix, marker[len(workflow_prefix) :])

        async def write_checkpoint() -> str | None:
            """Write it; return the marker of an earlier save of this id if it moved."""
            try:
                await reconcile.put(self.storage, key, data, mode="create")
            except PreconditionFailed:
                pass
            else:
                return None
            try:
                old = await self._read(key)
            except WorkflowCheckpointException:
                old = None  # unreadable: replaced below all the same
            await reconcile.put(self.storage, key, data)
            old_marker = None if old is None else self._marker_of(old, checkpoint_id)
            return old_marker if old_marker != marker else None

        # Both at once: a marker whose checkpoint is missing (a failed save) is
        # skipped by readers. A cancel lets both finish (`_finishing`): else the
        # checkpoint could land and its marker not, and the checkpoint would load
        # by its id but be missing from the listings.
        writes = [write_checkpoint(), reconcile.put(self.storage, marker, b"")]
        head = self._head_key(workflow_prefix)
        if not self._use_heads and head not in self._no_head:
            writes.append(self._drop_old_head(head))
        stale = (await _finishing(_gather(writes)))[0]
        if stale is not None:
            await reconcile.delete(self.storage, stale)
            if self._use_heads:
                await self._repair_head(stale)
        return checkpoint_id

    def _marker_of(self, encoded: dict[str, Any], checkpoint_id: str) -> str | None:
        name, timestamp = encoded.get("workflow_name"), encoded.get("timestamp")
        if not isinstance(name, str) or not isinstance(timestamp, str):
            return None
        try:
            return self._marker_key(name, timestamp, checkpoint_id)
        except WorkflowCheckpointException:
            return None

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """Load a checkpoint by id (one get).

        Raises:
            WorkflowCheckpointCorrupted: The checkpoint is corrupted, or was
                written for another key (also a ``WorkflowCheckpointException``).
            WorkflowCheckpointException: No checkpoint has this id, or it cannot
                be read or decoded (a type outside the allow-list, encryption).
            StorageError: The storage failed.
        """
        key = self._checkpoint_key(checkpoint_id)
        encoded = await self._read(key)
        if encoded is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        return self._decode(encoded, key)

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete a checkpoint and its marker; return whether it existed.

        Raises:
            StorageError: The storage failed.
        """
        key = self._checkpoint_key(checkpoint_id)
        try:
            encoded = await self._read(key)
        except WorkflowCheckpointException:
            encoded = {}  # unreadable: delete it all the same
        if encoded is None:
            return False
        marker = self._marker_of(encoded, checkpoint_id)
        # The marker first, the checkpoint last: a delete cancelled between the two
        # leaves a checkpoint that loads by its id but is listed nowhere, never an id
        # listed (list_checkpoint_ids reads markers alone) that does not load.
        if marker is not None:
            await reconcile.delete(self.storage, marker)
        existed = await reconcile.delete(self.storage, key)
        if marker is not None and self._use_heads:
            await self._repair_head(marker)
        return existed

    async def _valid(self, marker: str) -> tuple[dict[str, Any], str] | None:
        """The checkpoint a marker names, if it still belongs there."""
        checkpoint_key = self._checkpoint_key(self._marker_id(marker))
        encoded = await self._read(checkpoint_key)
        if encoded is None or self._marker_of(encoded, self._marker_id(marker)) != marker:
            return None  # deleted, or saved again elsewhere: a stale marker
        return encoded, checkpoint_key

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """The checkpoint of ``workflow_name`` with the latest timestamp, or None.

        Two gets (the workflow's head, then the checkpoint it names), however
        many checkpoints exist; without heads (a storage with ``indexed_list``),
        or when the head is missing or names a checkpoint that is gone, one
        ``list(limit=1)`` and one get instead.

        Raises:
            WorkflowCheckpointException: The latest checkpoint cannot be read or
                decoded (it is not skipped for an older one);
                `WorkflowCheckpointCorrupted` if it is damaged.
            StorageError: The storage failed.
        """
        prefix = self._workflow_prefix(workflow_name)
        if self._use_heads:
            current = await self._read_head(self._head_key(prefix))
            if current is not None and current[0] is not None:
                found = await self._valid(prefix + current[0])
                if found is not None:
                    return self._decode(*found)
        after: str | None = None
        page = 1
        while True:
            markers = [m async for m in self.storage.list(prefix, start_after=after, limit=page)]
            for marker in markers:
                found = await self._valid(marker)
                if found is not None:
                    return self._decode(*found)
            if len(markers) < page:
                return None
            after, page = markers[-1], _CONCURRENCY

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        """Ids of the workflow's checkpoints, oldest first, from one listing (no reads).

        Raises:
            StorageError: The storage failed.
        """
        markers = [m async for m in self.storage.list(self._workflow_prefix(workflow_name))]
        return [self._marker_id(m) for m in reversed(markers)]

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """The workflow's checkpoints, oldest first.

        A checkpoint that cannot be read or decoded is logged and skipped, as
        agent-framework's ``FileCheckpointStorage`` does.

        Raises:
            StorageError: The storage failed.
        """
        prefix = self._workflow_prefix(workflow_name)
        markers = [m async for m in self.storage.list(prefix)]
        limit = asyncio.Semaphore(_CONCURRENCY)

        async def load(marker: str) -> WorkflowCheckpoint | None:
            async with limit:
                try:
                    found = await self._valid(marker)
                    return None if found is None else self._decode(*found)
                except WorkflowCheckpointException as exc:
                    log.warning("skipping checkpoint %s: %s", self._marker_id(marker), exc)
                    return None

        loaded = await _gather(load(m) for m in reversed(markers))
        return [cp for cp in loaded if cp is not None]


# -- helpers -------------------------------------------------------------------------


def _check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
    prefix = prefix.strip("/")
    if prefix:
        validate_prefix(prefix + "/")
    return prefix


T = TypeVar("T")

FINISH_GRACE: Final = 0.1
"""Seconds a cancelled `CheckpointkitCheckpointStorage.save` gives its writes in flight
(the checkpoint and its marker) to finish before it cancels them and raises."""


async def _finishing(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` in a task of its own. If cancelled meanwhile, give that task up to
    `FINISH_GRACE` seconds to finish (so that a save's writes land together), then cancel
    it, wait for it, and raise the ``CancelledError``: bounded, never swallowed."""
    task = asyncio.ensure_future(coro)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        try:
            await asyncio.wait({task}, timeout=FINISH_GRACE)
        finally:
            task.cancel()
            while not task.done():  # a second cancel does not leave it running
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # retrieve its error: the caller gets CancelledError
        raise


async def _gather(coros: Iterable[Any]) -> Sequence[Any]:
    """Await all in a task group; on a failure, cancel the rest and raise the first error."""
    tasks: list[asyncio.Task[Any]] = []
    try:
        async with asyncio.TaskGroup() as tg:
            for coro in coros:
                tasks.append(tg.create_task(coro))
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    return [t.result() for t in tasks]

"""LangGraph threads stored by `CheckpointkitSaver`, for the command line.

Read straight from the storage through the saver's layout
(`checkpointkit.integrations._langgraph_layout`), so LangGraph need not be
installed. Values are shown *decoded where cheap*: LangGraph's ``msgpack``
and ``json`` values up to `PREVIEW_BYTES` are decoded without running any
code from the data (a LangGraph object such as a message shows as
``{"$type": "module.Class", "$args": ...}``, nothing is imported or
unpickled); ``pickle`` and other serializers' values show their type and size.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .. import reconcile
from ..crypto import Encryption
from ..envelope import open_envelope
from ..errors import CheckpointkitError, NotFound, PreconditionFailed
from ..integrations._langgraph_layout import (
    CODEC_LANGGRAPH_BLOB,
    CODEC_LANGGRAPH_HEAD,
    CODEC_LANGGRAPH_RECORD,
    CODEC_LANGGRAPH_WRITE,
    CheckpointKey,
    LangGraphLayout,
    Record,
    decode_record,
    decode_writes,
)
from ..storage import IfMatch, Storage
from ..verify import Finding, Progress
from ._findings import Ticker, damage_of, finding, gather, unknown_key

__all__ = ["PREVIEW_BYTES", "LangGraphData", "PrunePlan", "decode_typed"]

PREVIEW_BYTES = 64 * 1024
"""Values up to this many serialized bytes are decoded by ``show``; larger ones are sized only."""


# -- values -----------------------------------------------------------------------------------
def _ext(code: int, data: memoryview) -> Any:
    """A msgpack extension of LangGraph's serializer, as data: nothing is imported or built."""
    inner = msgspec.msgpack.decode(bytes(data), ext_hook=_ext)
    if isinstance(inner, list) and len(inner) >= 2 and all(isinstance(x, str) for x in inner[:2]):
        args = inner[2:]
        return {"$type": f"{inner[0]}.{inner[1]}", "$args": args[0] if len(args) == 1 else args}
    return {"$ext": code, "$value": inner}


def decode_typed(serde_type: str, data: bytes) -> tuple[bool, Any]:
    """``(decoded, value)`` of a LangGraph-serialized value, without running its code.

    ``decoded`` is False (and the value None) for a serializer that cannot be
    read safely here (``pickle``, an encrypted serde).

    Raises:
        ValueError: A ``msgpack`` or ``json`` value that does not decode.
    """
    if serde_type == "null":
        return True, None
    if serde_type in ("bytes", "bytearray"):
        return True, bytes(data)
    try:
        if serde_type == "msgpack":
            return True, msgspec.msgpack.decode(data, ext_hook=_ext)
        if serde_type == "json":
            return True, json.loads(data)
    except (msgspec.DecodeError, ValueError) as exc:
        raise ValueError(f"a {serde_type} value that does not decode: {exc}") from None
    return False, None


def _preview(serde_type: str, data: bytes) -> dict[str, Any]:
    """``type``, ``bytes`` and, if cheap, the decoded ``value`` of a serialized value."""
    entry: dict[str, Any] = {
        "type": serde_type,
        "bytes": len(data),
        "decoded": False,
        "value": None,
    }
    if len(data) > PREVIEW_BYTES:
        return entry
    try:
        entry["decoded"], entry["value"] = decode_typed(serde_type, data)
    except ValueError as exc:
        entry["error"] = str(exc)
    return entry


def _unreadable(entry: dict[str, Any], serde_type: str, error: str) -> dict[str, Any]:
    """A channel entry whose value (stored apart) cannot be read."""
    return {**entry, "type": serde_type, "bytes": None, "decoded": False, "value": None,
            "error": error}  # fmt: skip


def _mapping(serde_type: str, data: bytes) -> dict[str, Any]:
    """A serialized checkpoint or metadata mapping, or ``{}`` if it cannot be read here."""
    try:
        decoded, value = decode_typed(serde_type, data)
    except ValueError:
        return {}
    return value if decoded and isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class _Loaded:
    """A checkpoint record read and decoded, with what its key says."""

    key: str
    where: CheckpointKey
    record: Record
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]


@dataclass(slots=True)
class PrunePlan:
    """What ``prune THREAD --keep N`` deletes: checkpoints, their writes and values, heads mended.

    Attributes:
        checkpoints: ``(ns, id)`` of each checkpoint to delete, newest first per namespace.
        keys: Every key to delete: the records, then their writes, then values
            that only they referenced.
        kept: ``ns -> id`` of the newest checkpoint kept in each namespace.
        unread: Checkpoint records that could not be read (their values stay).
    """

    checkpoints: list[tuple[str, str]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)


class LangGraphData:
    """The threads that one `CheckpointkitSaver` (one prefix) stored.

    Args:
        storage: The storage.
        layout: The saver's layout (its prefix).
        encryption: The saver's encryption, if its records are encrypted.
    """

    def __init__(
        self, storage: Storage, layout: LangGraphLayout, encryption: Encryption | None = None
    ) -> None:
        self.storage = storage
        self.layout = layout
        self.encryption = encryption

    @property
    def prefix(self) -> str:
        """The saver's prefix, without the trailing ``/``."""
        return self.layout.p.rstrip("/")

    async def _keys(self, prefix: str) -> list[str]:
        return [key async for key in self.storage.list(prefix)]

    async def _get(self, key: str) -> bytes | None:
        try:
            data, _ = await self.storage.get(key)
        except NotFound:
            return None
        return data

    def _open(self, data: bytes, key: str, tag: int, *, clear: bool = False) -> bytes:
        got, payload = open_envelope(data, key=key, encryption=None if clear else self.encryption)
        if got != tag:
            raise ValueError(
                f"the envelope at key {key!r} has codec tag {got}, expected {tag} "
                "(not written by the LangGraph saver)"
            )
        return payload

    def _decode(self, key: str, data: bytes) -> _Loaded:
        record = decode_record(self._open(data, key, CODEC_LANGGRAPH_RECORD), key)
        return _Loaded(
            key,
            self.layout.parse_checkpoint_key(key),
            record,
            _mapping(*record.checkpoint),
            _mapping(*record.metadata),
        )

    async def _load(self, key: str) -> _Loaded | None:
        data = await self._get(key)
        return None if data is None else self._decode(key, data)

    # -- listing ------------------------------------------------------------------------------
    async def threads(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """One entry per thread (ascending thread id): its checkpoints and the newest one.

        The newest checkpoint is that of the root namespace (``""``) if the
        thread has one there; a record that cannot be read gives ``error``.
        """
        by_thread: dict[str, list[CheckpointKey]] = {}
        for key in await self._keys(self.layout.kind_prefix("c")):
            try:
                where = self.layout.parse_checkpoint_key(key)
            except ValueError:
                continue  # verify reports it
            by_thread.setdefault(where.thread_id, []).append(where)
        threads = sorted(by_thread)[:limit]

        async def summary(thread: str) -> dict[str, Any]:
            found = by_thread[thread]
            root = [w for w in found if w.checkpoint_ns == ""]
            newest = (root or sorted(found, key=lambda w: w.checkpoint_id, reverse=True))[0]
            entry: dict[str, Any] = {
                "prefix": self.prefix,
                "thread_id": thread,
                "namespaces": sorted({w.checkpoint_ns for w in found}),
                "checkpoints": len(found),
                "checkpoint_id": newest.checkpoint_id,
                "step": None,
                "source": None,
                "created_at": None,
            }
            key = self.layout.checkpoint_key(thread, newest.checkpoint_ns, newest.checkpoint_id)
            try:
                loaded = await self._load(key)
            except (CheckpointkitError, ValueError) as exc:
                entry["error"] = f"{type(exc).__name__}: {exc}"
                return entry
            if loaded is not None:
                entry["step"] = loaded.metadata.get("step")
                entry["source"] = loaded.metadata.get("source")
                entry["created_at"] = loaded.checkpoint.get("ts")
            return entry

        return await gather(threads, summary)

    async def _thread_checkpoints(self, thread: str) -> list[CheckpointKey]:
        """Every checkpoint of the thread, newest first (by id, across namespaces)."""
        found: list[CheckpointKey] = []
        for key in await self._keys(self.layout.checkpoint_prefix(thread)):
            try:
                found.append(self.layout.parse_checkpoint_key(key))
            except ValueError:
                continue
        return sorted(found, key=lambda w: (w.checkpoint_id, w.checkpoint_ns), reverse=True)

    async def checkpoints(self, thread: str, *, limit: int | None = None) -> dict[str, Any]:
        """``ls THREAD``: the thread's checkpoints, newest first, each with its writes counted."""
        found = (await self._thread_checkpoints(thread))[:limit]
        writes: dict[tuple[str, str], int] = {}
        for key in await self._keys(self.layout.kind_prefix("w", thread)):
            try:
                _, ns, checkpoint_id, _, _ = self.layout.parse_writes_key(key)
            except ValueError:
                continue
            writes[(ns, checkpoint_id)] = writes.get((ns, checkpoint_id), 0) + 1

        async def entry(where: CheckpointKey) -> dict[str, Any]:
            key = self.layout.checkpoint_key(thread, where.checkpoint_ns, where.checkpoint_id)
            doc: dict[str, Any] = {
                "checkpoint_id": where.checkpoint_id,
                "checkpoint_ns": where.checkpoint_ns,
            }
            try:
                loaded = await self._load(key)
            except (CheckpointkitError, ValueError) as exc:
                doc["error"] = f"{type(exc).__name__}: {exc}"
                return doc
            if loaded is None:  # deleted meanwhile
                doc["error"] = "deleted while listed"
                return doc
            doc.update(
                step=loaded.metadata.get("step"),
                source=loaded.metadata.get("source"),
                created_at=loaded.checkpoint.get("ts"),
                parent_id=loaded.record.parent,
                channels=len(loaded.record.values) + len(loaded.record.blobs),
                write_records=writes.get((where.checkpoint_ns, where.checkpoint_id), 0),
            )
            return doc

        return {
            "kind": "thread",
            "prefix": self.prefix,
            "thread_id": thread,
            "checkpoints": await gather(found, entry),
        }

    # -- show -----------------------------------------------------------------------------------
    async def find(self, thread: str, checkpoint_id: str | None) -> CheckpointKey:
        """The checkpoint ``show`` shows: ``checkpoint_id`` (any namespace), else the newest
        of the root namespace (else the newest of any).

        Raises:
            CheckpointkitError: The thread has no such checkpoint, or none.
        """
        found = await self._thread_checkpoints(thread)
        if checkpoint_id is not None:
            for where in found:
                if where.checkpoint_id == checkpoint_id:
                    return where
            raise CheckpointkitError(
                f"checkpoint {checkpoint_id!r} of LangGraph thread {thread!r} not found"
            )
        if not found:
            raise CheckpointkitError(f"LangGraph thread {thread!r} has no checkpoint")
        root = [w for w in found if w.checkpoint_ns == ""]
        return (root or found)[0]

    async def show(self, thread: str, checkpoint_id: str | None) -> dict[str, Any]:
        """``show THREAD [CHECKPOINT]``: the checkpoint's channels and pending writes.

        Raises:
            CheckpointkitError: No such checkpoint; a record is damaged or
                cannot be decrypted (a value it references is missing: listed
                with its ``error`` instead).
            ValueError: A record that does not decode.
        """
        where = await self.find(thread, checkpoint_id)
        ns, cid = where.checkpoint_ns, where.checkpoint_id
        loaded = await self._load(self.layout.checkpoint_key(thread, ns, cid))
        if loaded is None:
            raise CheckpointkitError(f"checkpoint {cid!r} of LangGraph thread {thread!r} not found")
        record, checkpoint = loaded.record, loaded.checkpoint
        versions = checkpoint.get("channel_versions") or {}
        channels: list[dict[str, Any]] = []
        for channel, (serde_type, data) in sorted(record.values.items()):
            channels.append(
                {
                    "channel": channel,
                    "stored": "inline",
                    "version": versions.get(channel),
                    **_preview(serde_type, data),
                }
            )

        async def apart(item: tuple[str, tuple[str, str]]) -> dict[str, Any]:
            channel, (version, serde_type) = item
            key = self.layout.blob_key(thread, ns, channel, version)
            entry: dict[str, Any] = {"channel": channel, "stored": "apart", "version": version}
            data = await self._get(key)
            if data is None:
                return _unreadable(entry, serde_type, f"missing: key {key!r} not found")
            try:
                payload = self._open(data, key, CODEC_LANGGRAPH_BLOB)
            except (CheckpointkitError, ValueError) as exc:
                return _unreadable(entry, serde_type, f"{type(exc).__name__}: {exc}")
            return {**entry, **_preview(serde_type, payload)}

        channels += await gather(sorted(record.blobs.items()), apart)
        channels.sort(key=lambda c: c["channel"])
        return {
            "kind": "thread",
            "prefix": self.prefix,
            "thread_id": thread,
            "checkpoint_ns": ns,
            "checkpoint_id": cid,
            "created_at": checkpoint.get("ts"),
            "parent_id": record.parent,
            "metadata": loaded.metadata,
            "channels": channels,
            "pending_writes": await self._pending_writes(thread, ns, cid),
            "updated_channels": checkpoint.get("updated_channels"),
        }

    async def _pending_writes(self, thread: str, ns: str, cid: str) -> list[dict[str, Any]]:
        """The checkpoint's pending writes as the saver reads them (each (task, idx) once)."""
        keys = await self._keys(self.layout.writes_prefix(thread, ns, cid))
        found = await gather(keys, self._get)
        batches: list[tuple[int, Any]] = []
        for key, data in zip(keys, found, strict=True):
            if data is None:
                continue
            name = key[key.rfind("/") + 1 :]
            size = int(name[1:]) if name.startswith("r") else 0
            batches.append((size, decode_writes(self._open(data, key, CODEC_LANGGRAPH_WRITE), key)))
        batches.sort(key=lambda b: b[0])
        chosen: dict[tuple[str, int], tuple[str, str, str, bytes]] = {}
        for _, batch in batches:
            for idx, channel, serde_type, value in batch.items:
                chosen.setdefault(
                    (batch.task_id, idx), (batch.task_path, channel, serde_type, value)
                )
        ordered = sorted(chosen.items(), key=lambda kv: (kv[1][0], kv[0][0], kv[0][1]))
        return [
            {"task_id": task_id, "task_path": path, "channel": channel, **_preview(st, value)}
            for (task_id, _), (path, channel, st, value) in ordered
        ]

    # -- verify ---------------------------------------------------------------------------------
    async def verify(
        self, *, heads_matter: bool, progress: Callable[[Progress], None] | None = None
    ) -> tuple[int, int, list[Finding]]:
        """Check every record of the saver: ``(records read, threads, findings)``.

        Each record's envelope (checksum, binding to its key, encryption) and
        structure; each value decoded where it can be without running code;
        each checkpoint's id against its key, the values it references (a
        missing one is damage: the checkpoint cannot be loaded) and its
        parent (missing while older checkpoints of its namespace are stored:
        a hole, a warning); each write record against its key and its
        checkpoint (writes of a missing checkpoint: a warning); each head
        against the checkpoints (naming a missing one: a warning; behind the
        newest where readers use heads, ``heads_matter``: damage).
        """
        findings: list[Finding] = []
        lay = self.layout
        records = 0
        c_keys = await self._keys(lay.kind_prefix("c"))
        w_keys = await self._keys(lay.kind_prefix("w"))
        b_keys = set(await self._keys(lay.kind_prefix("b")))
        h_keys = await self._keys(lay.kind_prefix("h"))
        checkpoints: dict[tuple[str, str], list[str]] = {}  # (thread, ns) -> ids
        for key in c_keys:
            try:
                where = lay.parse_checkpoint_key(key)
            except ValueError:
                findings.append(unknown_key(key, "a LangGraph checkpoint key"))
                continue
            checkpoints.setdefault((where.thread_id, where.checkpoint_ns), []).append(
                where.checkpoint_id
            )
        stored = {(t, ns, cid) for (t, ns), ids in checkpoints.items() for cid in ids}
        threads = {t for t, _ in checkpoints}

        async def check_checkpoint(key: str) -> None:
            nonlocal records
            data = await self._get(key)
            if data is None:
                return
            records += 1
            try:
                loaded = self._decode(key, data)
            except (CheckpointkitError, ValueError) as exc:
                findings.append(damage_of(key, exc))
                return
            where, record = loaded.where, loaded.record
            problems = _undecodable_values(record)
            if problems:
                findings.append(finding(key, "undecodable", "damage", "; ".join(problems)))
            stored_id = loaded.checkpoint.get("id")
            if stored_id is not None and stored_id != where.checkpoint_id:
                findings.append(
                    finding(
                        key,
                        "mismatch",
                        "damage",
                        f"the checkpoint at key {key!r} holds id {stored_id!r}, "
                        f"its key names {where.checkpoint_id!r}",
                    )
                )
            for channel, (version, _) in sorted(record.blobs.items()):
                blob = lay.blob_key(where.thread_id, where.checkpoint_ns, channel, version)
                if blob not in b_keys:
                    findings.append(
                        finding(
                            key,
                            "missing",
                            "damage",
                            f"checkpoint {where.checkpoint_id!r} of LangGraph thread "
                            f"{where.thread_id!r} references the value of channel {channel!r} "
                            f"(version {version}) at key {blob!r}, which is not stored: the "
                            "checkpoint cannot be loaded",
                        )
                    )
            parent = record.parent
            if parent is not None:
                ids = checkpoints.get((where.thread_id, where.checkpoint_ns), [])
                if parent == where.checkpoint_id:
                    findings.append(
                        finding(
                            key,
                            "mismatch",
                            "damage",
                            f"checkpoint {where.checkpoint_id!r} at key {key!r} names itself "
                            "as its parent",
                        )
                    )
                elif parent > where.checkpoint_id:  # ids that are not time-ordered (not uuid6)
                    findings.append(
                        finding(
                            key,
                            "mismatch",
                            "warning",
                            f"checkpoint {where.checkpoint_id!r} at key {key!r} names parent "
                            f"{parent!r}, whose id sorts after its own: the newest-first order "
                            "of this thread is not its history's (ids that are not uuid6)",
                        )
                    )
                elif parent not in ids and any(i < parent for i in ids):
                    findings.append(
                        finding(
                            key,
                            "orphan",
                            "warning",
                            f"the parent {parent!r} of checkpoint {where.checkpoint_id!r} "
                            f"(LangGraph thread {where.thread_id!r}) is not stored while older "
                            "checkpoints are: a hole in the history (delete_for_runs, or a "
                            "lost record)",
                        )
                    )

        async def check_writes(key: str) -> None:
            nonlocal records
            try:
                thread, ns, cid, task, _ = lay.parse_writes_key(key)
            except ValueError:
                findings.append(unknown_key(key, "a LangGraph pending-write key"))
                return
            data = await self._get(key)
            if data is None:
                return
            records += 1
            try:
                writes = decode_writes(self._open(data, key, CODEC_LANGGRAPH_WRITE), key)
            except (CheckpointkitError, ValueError) as exc:
                findings.append(damage_of(key, exc))
                return
            if writes.task_id != task:
                findings.append(
                    finding(
                        key,
                        "mismatch",
                        "damage",
                        f"the pending writes at key {key!r} are of task {writes.task_id!r}, "
                        f"the key names task {task!r}",
                    )
                )
            bad = [
                f"channel {ch!r} (index {idx}): {e}"
                for idx, ch, st, value in writes.items
                if (e := _decode_error(st, value))
            ]
            if bad:
                findings.append(
                    finding(key, "undecodable", "damage", f"at key {key!r}: " + "; ".join(bad))
                )
            if (thread, ns, cid) not in stored:
                findings.append(
                    finding(
                        key,
                        "orphan",
                        "warning",
                        f"pending writes of checkpoint {cid!r} (LangGraph thread {thread!r}), "
                        "which is not stored: a put or migration that stopped half-way, or a "
                        "checkpoint deleted without its writes",
                    )
                )

        async def check_blob(key: str) -> None:
            nonlocal records
            try:
                lay.parse_blob_key(key)
            except ValueError:
                findings.append(unknown_key(key, "a LangGraph channel value key"))
                return
            data = await self._get(key)
            if data is None:
                return
            records += 1
            try:
                self._open(data, key, CODEC_LANGGRAPH_BLOB)
            except (CheckpointkitError, ValueError) as exc:
                findings.append(damage_of(key, exc))

        async def check_head(key: str) -> None:
            nonlocal records
            try:
                thread, ns = lay.parse_head_key(key)
            except ValueError:
                findings.append(unknown_key(key, "a LangGraph head key"))
                return
            data = await self._get(key)
            if data is None:
                return
            records += 1
            try:
                named = self._open(data, key, CODEC_LANGGRAPH_HEAD, clear=True).decode()
            except (CheckpointkitError, ValueError) as exc:
                findings.append(damage_of(key, exc))
                return
            ids = checkpoints.get((thread, ns), [])
            newest = max(ids, default=None)
            if named not in ids:
                findings.append(
                    finding(
                        key,
                        "head",
                        "warning",
                        f"the head of LangGraph thread {thread!r} names checkpoint {named!r}, "
                        "which is not stored (a put that failed half-way; readers list instead)",
                    )
                )
            elif newest is not None and named < newest:
                findings.append(
                    finding(
                        key,
                        "head",
                        "damage" if heads_matter else "warning",
                        f"the head of LangGraph thread {thread!r} names checkpoint {named!r}, "
                        f"older than the newest stored, {newest!r}"
                        + (
                            ": the saver reads it as the latest (rolled back)"
                            if heads_matter
                            else " (ignored here: this storage keeps no heads)"
                        ),
                    )
                )

        ticker = Ticker(len(c_keys) + len(w_keys) + len(b_keys) + len(h_keys), findings, progress)
        await gather(c_keys, ticker.each(check_checkpoint))
        await gather(w_keys, ticker.each(check_writes))
        await gather(sorted(b_keys), ticker.each(check_blob))
        await gather(h_keys, ticker.each(check_head))
        return records, len(threads), findings

    # -- deleting -------------------------------------------------------------------------------
    async def thread_keys(self, thread: str) -> list[str]:
        """Every key of the thread: heads and checkpoints first, then writes and values."""
        keys: list[str] = []
        for kind in ("h", "c", "w", "b"):
            keys += await self._keys(self.layout.kind_prefix(kind, thread))
        return keys

    async def delete_keys(self, keys: list[str]) -> int:
        """Delete ``keys`` in order (16 at a time within each kind); return how many existed."""
        done = await gather(keys, lambda key: reconcile.delete(self.storage, key))
        return sum(1 for existed in done if existed)

    async def prune_plan(self, thread: str, keep: int) -> PrunePlan:
        """What ``prune THREAD --keep N`` deletes: all but the newest ``keep`` per namespace.

        A value (stored apart) goes only if a deleted checkpoint referenced it
        and no kept one does; a kept checkpoint that cannot be read keeps every
        value of its namespace.
        """
        plan = PrunePlan()
        lay = self.layout
        by_ns: dict[str, list[str]] = {}
        for key in await self._keys(lay.checkpoint_prefix(thread)):
            try:
                where = lay.parse_checkpoint_key(key)
            except ValueError:
                continue
            by_ns.setdefault(where.checkpoint_ns, []).append(where.checkpoint_id)
        kept: dict[str, list[str]] = {}
        for ns, ids in sorted(by_ns.items()):
            ids.sort(reverse=True)
            kept[ns] = ids[:keep]
            if ids[:keep]:
                plan.kept[ns] = ids[0]
            plan.checkpoints += [(ns, cid) for cid in ids[keep:]]
        doomed_ids = set(plan.checkpoints)
        plan.keys = [lay.checkpoint_key(thread, ns, cid) for ns, cid in plan.checkpoints]
        for key in await self._keys(lay.kind_prefix("w", thread)):
            try:
                _, ns, cid, _, _ = lay.parse_writes_key(key)
            except ValueError:
                continue
            if (ns, cid) in doomed_ids:
                plan.keys.append(key)

        async def blobs_of(item: tuple[str, str]) -> tuple[str, set[str] | None]:
            ns, cid = item
            key = lay.checkpoint_key(thread, ns, cid)
            try:
                loaded = await self._load(key)
            except (CheckpointkitError, ValueError):
                plan.unread.append(key)
                return ns, None
            if loaded is None:
                return ns, set()
            return ns, {
                lay.blob_key(thread, ns, ch, version)
                for ch, (version, _) in loaded.record.blobs.items()
            }

        kept_refs = await gather([(ns, c) for ns, ids in kept.items() for c in ids], blobs_of)
        doomed_refs = await gather(plan.checkpoints, blobs_of)
        blind = {ns for ns, refs in kept_refs if refs is None}  # keep every value there
        used = {b for _, refs in kept_refs if refs for b in refs}
        plan.keys += sorted(
            {
                b
                for ns, refs in doomed_refs
                if refs and ns not in blind
                for b in refs
                if b not in used
            }
        )
        return plan

    async def apply_prune(self, thread: str, plan: PrunePlan) -> int:
        """Delete what ``plan`` lists, then point each head at the newest checkpoint left."""
        deleted = await self.delete_keys(plan.keys)
        gone = {cid for _, cid in plan.checkpoints}
        for key in await self._keys(self.layout.kind_prefix("h", thread)):
            _, ns = self.layout.parse_head_key(key)
            await self._mend_head(key, gone, plan.kept.get(ns))
        return deleted

    async def _mend_head(self, key: str, gone: set[str], newest: str | None) -> None:
        """A head naming a deleted checkpoint goes to ``newest`` (or away), by compare-and-swap."""
        from ..envelope import seal

        while True:
            try:
                data, version = await self.storage.get(key)
            except NotFound:
                return
            try:
                named = self._open(data, key, CODEC_LANGGRAPH_HEAD, clear=True).decode()
            except (CheckpointkitError, ValueError):
                named = None  # unreadable: readers ignore it; replace it all the same
            if named is not None and named not in gone:
                return
            try:
                if newest is None:
                    await reconcile.delete(self.storage, key, if_match=version)
                else:
                    sealed = seal(newest.encode(), codec_tag=CODEC_LANGGRAPH_HEAD, key=key)
                    await reconcile.put(self.storage, key, sealed, mode=IfMatch(version))
            except PreconditionFailed:
                continue  # moved by a writer: look again
            return


# -- values, checked -------------------------------------------------------------------------
def _decode_error(serde_type: str, data: bytes) -> str | None:
    try:
        decode_typed(serde_type, data)
    except ValueError as exc:
        return str(exc)
    return None


def _undecodable_values(record: Record) -> list[str]:
    problems = []
    for what, (serde_type, data) in (
        ("checkpoint", record.checkpoint),
        ("metadata", record.metadata),
    ):
        error = _decode_error(serde_type, data)
        if error:
            problems.append(f"its {what}: {error}")
    for channel, (serde_type, data) in sorted(record.values.items()):
        error = _decode_error(serde_type, data)
        if error:
            problems.append(f"channel {channel!r}: {error}")
    return problems

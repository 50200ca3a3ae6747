"""agent-framework workflows stored by `CheckpointkitCheckpointStorage`, for the command line.

Read straight from the storage through the storage's layout
(`checkpointkit.integrations._agent_framework_layout`), so agent-framework
need not be installed. A checkpoint is shown as its encoded structure:
JSON-native values as they are, and each value that agent-framework pickled
as ``{"$pickled": "module:qualname", "bytes": N}``; nothing is unpickled.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .. import reconcile
from ..crypto import Encryption
from ..envelope import open_envelope, seal
from ..errors import CheckpointkitError, NotFound, PreconditionFailed
from ..integrations._agent_framework_layout import (
    CODEC_AGENT_FRAMEWORK_HEAD,
    AgentFrameworkLayout,
    decode_checkpoint,
    marker_time,
)
from ..storage import IfMatch, Storage
from ..verify import Finding, Progress
from ._findings import Ticker, damage_of, finding, gather, unknown_key

__all__ = ["AgentFrameworkData", "WorkflowPrunePlan", "readable"]

_PICKLED = "__pickled__"
_TYPE = "__type__"


def readable(value: Any) -> Any:
    """An encoded checkpoint value with each pickled value replaced by its type and size."""
    if isinstance(value, dict):
        if _PICKLED in value and _TYPE in value:
            data = value[_PICKLED]
            try:
                size: int | None = len(base64.b64decode(data, validate=True))
            except (TypeError, ValueError):  # not base64: agent-framework would refuse it too
                size = None
            return {"$pickled": value[_TYPE], "bytes": size}
        return {k: readable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [readable(v) for v in value]
    return value


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()


@dataclass(slots=True)
class WorkflowPrunePlan:
    """What ``prune WORKFLOW --keep N`` deletes.

    Attributes:
        checkpoints: Ids of the checkpoints to delete, newest first.
        keys: Their markers, then the checkpoints themselves (a checkpoint saved
            again under another marker keeps its record: only the stale marker goes).
        newest: The name of the newest marker kept (for the head), or None.
    """

    checkpoints: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    newest: str | None = None


class AgentFrameworkData:
    """The workflows that one `CheckpointkitCheckpointStorage` (one prefix) stored.

    Args:
        storage: The storage.
        layout: The layout (its prefix).
        encryption: The storage's encryption, if its checkpoints are encrypted.
    """

    def __init__(
        self,
        storage: Storage,
        layout: AgentFrameworkLayout,
        encryption: Encryption | None = None,
    ) -> None:
        self.storage = storage
        self.layout = layout
        self.encryption = encryption

    @property
    def prefix(self) -> str:
        """The storage's prefix, without the trailing ``/``."""
        return self.layout.p.rstrip("/")

    async def _keys(self, prefix: str) -> list[str]:
        return [key async for key in self.storage.list(prefix)]

    async def _get(self, key: str) -> bytes | None:
        try:
            data, _ = await self.storage.get(key)
        except NotFound:
            return None
        return data

    def _decode(self, key: str, data: bytes) -> dict[str, Any]:
        tag, payload = open_envelope(data, key=key, encryption=self.encryption)
        return decode_checkpoint(tag, payload, key)

    async def _load(self, checkpoint_id: str) -> dict[str, Any] | None:
        key = self.layout.checkpoint_key(checkpoint_id)
        data = await self._get(key)
        return None if data is None else self._decode(key, data)

    def _marker_of(self, encoded: dict[str, Any], checkpoint_id: str) -> str | None:
        name, timestamp = encoded.get("workflow_name"), encoded.get("timestamp")
        if not isinstance(name, str) or not isinstance(timestamp, str):
            return None
        try:
            return self.layout.marker_key(name, timestamp, checkpoint_id)
        except ValueError:
            return None

    # -- listing ------------------------------------------------------------------------------
    async def workflows(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """One entry per workflow (ascending name), from one listing of the markers."""
        by_name: dict[str, list[str]] = {}
        for key in await self._keys(self.layout.workflows):
            try:
                name = self.layout.workflow_of(key)
            except ValueError:
                continue  # verify reports it
            by_name.setdefault(name, []).append(key)
        entries = []
        for name in sorted(by_name)[:limit]:
            markers = by_name[name]  # newest first
            newest = markers[0][markers[0].rfind("/") + 1 :]
            entries.append(
                {
                    "prefix": self.prefix,
                    "workflow": name,
                    "checkpoints": len(markers),
                    "checkpoint_id": self.layout.marker_id(markers[0]),
                    "created_at": _iso(marker_time(newest)),
                }
            )
        return entries

    async def _markers(self, workflow: str) -> list[str]:
        return await self._keys(self.layout.workflow_prefix(workflow))

    async def checkpoints(self, workflow: str, *, limit: int | None = None) -> dict[str, Any]:
        """``ls WORKFLOW``: the workflow's checkpoints, newest first."""
        markers = (await self._markers(workflow))[:limit]

        async def entry(marker: str) -> dict[str, Any]:
            cid = self.layout.marker_id(marker)
            doc: dict[str, Any] = {
                "checkpoint_id": cid,
                "created_at": _iso(marker_time(marker[marker.rfind("/") + 1 :])),
            }
            try:
                encoded = await self._load(cid)
            except (CheckpointkitError, ValueError) as exc:
                doc["error"] = f"{type(exc).__name__}: {exc}"
                return doc
            if encoded is None or self._marker_of(encoded, cid) != marker:
                doc["error"] = (
                    "stale marker: its checkpoint is not stored here (skipped by readers)"
                )
                return doc
            events = encoded.get("pending_request_info_events")
            doc.update(
                previous_checkpoint_id=encoded.get("previous_checkpoint_id"),
                iteration_count=encoded.get("iteration_count"),
                pending_requests=sorted(events) if isinstance(events, dict) else [],
            )
            return doc

        return {
            "kind": "workflow",
            "prefix": self.prefix,
            "workflow": workflow,
            "checkpoints": await gather(markers, entry),
        }

    async def show(self, workflow: str, checkpoint_id: str | None) -> dict[str, Any]:
        """``show WORKFLOW [CHECKPOINT]``: a checkpoint's state, messages and pending requests.

        Without CHECKPOINT, the newest checkpoint whose marker is not stale.

        Raises:
            CheckpointkitError: No such checkpoint, one of another workflow, or
                a damaged or undecryptable one.
            ValueError: A checkpoint that does not decode.
        """
        encoded: dict[str, Any] | None = None
        if checkpoint_id is None:
            for marker in await self._markers(workflow):
                cid = self.layout.marker_id(marker)
                found = await self._load(cid)
                if found is not None and self._marker_of(found, cid) == marker:
                    encoded, checkpoint_id = found, cid
                    break
            if encoded is None or checkpoint_id is None:
                raise CheckpointkitError(f"agent-framework workflow {workflow!r} has no checkpoint")
        else:
            encoded = await self._load(checkpoint_id)
            if encoded is None:
                raise CheckpointkitError(
                    f"checkpoint {checkpoint_id!r} of agent-framework workflow {workflow!r} "
                    "not found"
                )
            if encoded.get("workflow_name") != workflow:
                raise CheckpointkitError(
                    f"checkpoint {checkpoint_id!r} belongs to agent-framework workflow "
                    f"{encoded.get('workflow_name')!r}, not {workflow!r}"
                )
        return {
            "kind": "workflow",
            "prefix": self.prefix,
            "workflow": workflow,
            "checkpoint_id": checkpoint_id,
            "created_at": encoded.get("timestamp"),
            "previous_checkpoint_id": encoded.get("previous_checkpoint_id"),
            "iteration_count": encoded.get("iteration_count"),
            "state": readable(encoded.get("state")),
            "messages": readable(encoded.get("messages")),
            "pending_request_info_events": readable(encoded.get("pending_request_info_events")),
            "metadata": readable(encoded.get("metadata")),
            "graph_signature_hash": encoded.get("graph_signature_hash"),
            "version": encoded.get("version"),
        }

    # -- verify ---------------------------------------------------------------------------------
    async def verify(
        self, *, heads_matter: bool, progress: Callable[[Progress], None] | None = None
    ) -> tuple[int, int, list[Finding]]:
        """Check every record: ``(records read, workflows, findings)``.

        Each checkpoint's envelope (checksum, binding, encryption) and
        structure, its id and marker against its key (a checkpoint without its
        marker is invisible to ``list_checkpoints`` and ``get_latest``: a
        warning), its previous checkpoint (missing while an older checkpoint
        of the workflow is stored: a hole, a warning); each marker against its
        checkpoint (stale: a warning, readers skip it); each head against the
        markers (naming a missing one: a warning; behind the newest where
        readers use heads, ``heads_matter``: damage).
        """
        lay = self.layout
        findings: list[Finding] = []
        records = 0
        markers: dict[str, list[str]] = {}  # workflow -> marker keys, newest first
        marker_set: set[str] = set()
        for key in await self._keys(lay.workflows):
            try:
                name = lay.workflow_of(key)
            except ValueError:
                findings.append(unknown_key(key, "an agent-framework marker key"))
                continue
            markers.setdefault(name, []).append(key)
            marker_set.add(key)
        loaded: dict[str, dict[str, Any]] = {}  # checkpoint id -> encoded
        cp_keys = await self._keys(lay.checkpoints)
        head_keys = await self._keys(lay.heads)
        ticker = Ticker(len(cp_keys) + len(marker_set) + len(head_keys), findings, progress)

        async def check_checkpoint(key: str) -> None:
            nonlocal records
            try:
                cid = lay.checkpoint_id_of(key)
            except ValueError:
                findings.append(unknown_key(key, "an agent-framework checkpoint key"))
                return
            data = await self._get(key)
            if data is None:
                return
            records += 1
            try:
                encoded = self._decode(key, data)
            except (CheckpointkitError, ValueError) as exc:
                findings.append(damage_of(key, exc))
                return
            if encoded.get("checkpoint_id") != cid:
                findings.append(
                    finding(
                        key,
                        "mismatch",
                        "damage",
                        f"the checkpoint at key {key!r} holds id "
                        f"{encoded.get('checkpoint_id')!r}, its key names {cid!r}",
                    )
                )
                return
            marker = self._marker_of(encoded, cid)
            if marker is None:
                findings.append(
                    finding(
                        key,
                        "undecodable",
                        "damage",
                        f"the checkpoint at key {key!r} has no workflow name or an ISO 8601 "
                        "timestamp",
                    )
                )
                return
            loaded[cid] = encoded
            if marker not in marker_set:
                findings.append(
                    finding(
                        key,
                        "orphan",
                        "warning",
                        f"checkpoint {cid!r} of agent-framework workflow "
                        f"{encoded['workflow_name']!r} has no marker, so list_checkpoints and "
                        "get_latest do not see it (a save that stopped half-way)",
                    )
                )

        await gather(cp_keys, ticker.each(check_checkpoint))
        for cid, encoded in sorted(loaded.items()):
            previous = encoded.get("previous_checkpoint_id")
            if not isinstance(previous, str) or previous in loaded:
                continue
            name, stamp = encoded["workflow_name"], encoded["timestamp"]
            older = [
                c
                for c, e in loaded.items()
                if e.get("workflow_name") == name and str(e.get("timestamp")) < stamp and c != cid
            ]
            if older:
                findings.append(
                    finding(
                        lay.checkpoint_key(cid),
                        "orphan",
                        "warning",
                        f"the previous checkpoint {previous!r} of checkpoint {cid!r} "
                        f"(agent-framework workflow {name!r}) is not stored while older ones "
                        "are: a hole in the history (a deleted or lost checkpoint)",
                    )
                )
        for name, keys in sorted(markers.items()):
            for marker in keys:
                records += 1
                ticker.tick()
                cid = lay.marker_id(marker)
                found = loaded.get(cid)
                if found is None or self._marker_of(found, cid) != marker:
                    if found is None and await self._get(lay.checkpoint_key(cid)) is not None:
                        continue  # its checkpoint is damaged: reported above
                    findings.append(
                        finding(
                            marker,
                            "orphan",
                            "warning",
                            f"the marker of checkpoint {cid!r} (agent-framework workflow "
                            f"{name!r}) is stale: its checkpoint is not stored, or was saved "
                            "again under another workflow or time (readers skip it)",
                        )
                    )
        for key in head_keys:
            records += 1
            ticker.tick()
            found_head = await self._check_head(key, markers, heads_matter)
            if found_head is not None:
                findings.append(found_head)
        return records, len(markers), findings

    async def _check_head(
        self, key: str, markers: dict[str, list[str]], heads_matter: bool
    ) -> Finding | None:
        lay = self.layout
        rest = key[len(lay.heads) :]
        if not rest.startswith("_") or "/" in rest:
            return unknown_key(key, "an agent-framework head key")
        from urllib.parse import unquote

        name = unquote(rest[1:])
        data = await self._get(key)
        if data is None:
            return None
        try:
            tag, payload = open_envelope(data, key=key)
            if tag != CODEC_AGENT_FRAMEWORK_HEAD:
                raise ValueError(
                    f"the envelope at key {key!r} has codec tag {tag}, expected "
                    f"{CODEC_AGENT_FRAMEWORK_HEAD} (an agent-framework head)"
                )
            named = payload.decode()
        except (CheckpointkitError, ValueError) as exc:
            return damage_of(key, exc)
        names = [m[m.rfind("/") + 1 :] for m in markers.get(name, [])]
        if named not in names:
            return finding(
                key,
                "head",
                "warning",
                f"the head of agent-framework workflow {name!r} names marker {named!r}, which "
                "is not stored (a save that failed half-way; readers list instead)",
            )
        if names and named > names[0]:
            return finding(
                key,
                "head",
                "damage" if heads_matter else "warning",
                f"the head of agent-framework workflow {name!r} names an older checkpoint "
                f"({lay.marker_id(named)!r}) than the newest stored ({lay.marker_id(names[0])!r})"
                + (
                    ": get_latest returns it (rolled back)"
                    if heads_matter
                    else " (ignored here: this storage keeps no heads)"
                ),
            )
        return None

    # -- deleting -------------------------------------------------------------------------------
    async def _owned(self, marker: str) -> bool:
        """Whether the checkpoint a marker names is this marker's (or unreadable: deleted too)."""
        cid = self.layout.marker_id(marker)
        try:
            encoded = await self._load(cid)
        except (CheckpointkitError, ValueError):
            return True  # unreadable: deleted with its marker, as the storage's delete does
        return encoded is not None and self._marker_of(encoded, cid) == marker

    async def prune_plan(self, workflow: str, keep: int) -> WorkflowPrunePlan:
        """All but the newest ``keep`` checkpoints of the workflow, markers first."""
        markers = await self._markers(workflow)
        plan = WorkflowPrunePlan()
        doomed = markers[keep:]
        if markers[:keep]:
            plan.newest = markers[0][markers[0].rfind("/") + 1 :]
        owned = await gather(doomed, self._owned)
        plan.checkpoints = [self.layout.marker_id(m) for m in doomed]
        plan.keys = list(doomed) + [
            self.layout.checkpoint_key(self.layout.marker_id(m))
            for m, mine in zip(doomed, owned, strict=True)
            if mine
        ]
        return plan

    async def workflow_keys(self, workflow: str) -> list[str]:
        """Every key of the workflow: its head, its markers, then their checkpoints."""
        plan = await self.prune_plan(workflow, 0)
        head = self.layout.head_key(workflow)
        return ([head] if await self._get(head) is not None else []) + plan.keys

    async def delete_keys(self, keys: list[str]) -> int:
        """Delete ``keys`` (16 at a time); return how many existed."""
        done = await gather(keys, lambda key: reconcile.delete(self.storage, key))
        return sum(1 for existed in done if existed)

    async def apply_prune(self, workflow: str, plan: WorkflowPrunePlan) -> int:
        """Delete what ``plan`` lists, then point the head at the newest marker kept."""
        deleted = await self.delete_keys(plan.keys)
        key = self.layout.head_key(workflow)
        gone = {k[k.rfind("/") + 1 :] for k in plan.keys if k.startswith(self.layout.workflows)}
        while True:
            try:
                data, version = await self.storage.get(key)
            except NotFound:
                return deleted
            try:
                named: str | None = open_envelope(data, key=key)[1].decode()
            except (CheckpointkitError, ValueError):
                named = None
            if named is not None and named not in gone:
                return deleted
            try:
                if plan.newest is None:
                    await reconcile.delete(self.storage, key, if_match=version)
                else:
                    sealed = seal(
                        plan.newest.encode(), codec_tag=CODEC_AGENT_FRAMEWORK_HEAD, key=key
                    )
                    await reconcile.put(self.storage, key, sealed, mode=IfMatch(version))
            except PreconditionFailed:
                continue
            return deleted

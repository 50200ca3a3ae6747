"""The checkpoint store: runs, step records, checkpoints and leases over any storage.

It turns workflow records into keys and envelopes and uses nothing but the
storage protocol, so every adapter gets the same layout and guarantees::

    {ns}index/{run}                 one entry per run (list_runs without scanning runs)
    {ns}runs/{run}/input            the run's input, write-once
    {ns}runs/{run}/head             lease (owner, fencing epoch, expiry) and latest checkpoint seq
    {ns}runs/{run}/s/{step}         one write-once record per completed step
    {ns}runs/{run}/r/{request}      one write-once record per input response
    {ns}runs/{run}/c/{~seq}         full checkpoints, keyed newest-first ({~seq} = 2**64-1-seq)

Costs: a step record is one create-only put, so parallel steps never fork a
chain and bytes grow linearly with the steps. ``latest(run)`` is two gets
(head, then the checkpoint it names) however many checkpoints exist.
A checkpoint commit is a compare-and-swap on the head followed by a
create-only put: a stale owner's CAS fails, so its checkpoint never lands.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, unquote

from .codec import Codec, default_codec
from .errors import InvalidKey, LeaseLost, NotFound, PreconditionFailed, RunBusy
from .storage import IfMatch, PutMode, Storage

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "InputRequest",
    "Lease",
    "StepRecord",
    "validate_run_id",
]

_MAX_SEQ = 2**64 - 1
_MAX_RUN_ID = 200
_BAD_RUN_CHARS = re.compile(r"[\x00-\x1f\x7f/\\]")


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` if it can name a run: a non-empty str of one key segment.

    Raises:
        InvalidKey: empty, longer than 200 characters, holds ``/``, a control
            character or a backslash, or is ``.`` or ``..``.
    """
    if not isinstance(run_id, str) or not run_id:
        raise InvalidKey(f"invalid run id {run_id!r}: it must be a non-empty str")
    if len(run_id) > _MAX_RUN_ID:
        raise InvalidKey(f"invalid run id {run_id[:40]!r}...: longer than {_MAX_RUN_ID} characters")
    if run_id in (".", "..") or _BAD_RUN_CHARS.search(run_id):
        raise InvalidKey(
            f"invalid run id {run_id!r}: it must not be '.' or '..' "
            "nor hold '/', a backslash or a control character"
        )
    return run_id


@dataclass(frozen=True, slots=True)
class InputRequest:
    """A step's request for human (or external) input; answered on resume by ``id``."""

    id: str
    step: str
    payload: Any


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What is stored, once, for a completed step.

    Attributes:
        step: the step's identity (``name@index``).
        result: the step's return value, as it was at completion.
        writes: state keys set by the step, committed with it.
        deletes: state keys deleted by the step.
        cleared: the step cleared the state before its writes.
        fingerprint: hash of the step's arguments, checked on replay.
        seq: completion order within the run (state is folded in this order).
        epoch: the lease epoch of the worker that wrote it.
    """

    step: str
    result: Any
    writes: Mapping[str, Any] = field(default_factory=dict)
    deletes: tuple[str, ...] = ()
    cleared: bool = False
    fingerprint: str = ""
    seq: int = 0
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A full checkpoint of a run: state, pending input, status and output.

    Attributes:
        run_id: the run.
        checkpoint_id: the checkpoint's sequence number in the run, as a string.
        status: ``"paused"``, ``"completed"`` or ``"failed"`` (or a caller's own word).
        state: the committed state at the time of the checkpoint.
        pending: input requests that the run waits for.
        output: the run's output when completed.
        error: a one-line description of the failure when failed.
        metadata: free-form data of the caller.
        parent_id: the previous checkpoint of the run, if any.
        created_at: wall-clock time of the save (seconds since the epoch).
        steps: how many step records the run had at the time.
    """

    run_id: str
    checkpoint_id: str
    status: str
    state: Mapping[str, Any] = field(default_factory=dict)
    pending: tuple[InputRequest, ...] = ()
    output: Any = None
    error: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    parent_id: str | None = None
    created_at: float = 0.0
    steps: int = 0


@dataclass(frozen=True, slots=True)
class Lease:
    """Ownership of a run by one worker, with a fencing epoch.

    Every write that the store makes for a lease holder first checks
    :meth:`check`; the head's compare-and-swap rejects a stale holder even
    when clocks disagree.
    """

    run_id: str
    owner: str
    epoch: int
    ttl: float
    version: str
    deadline: float
    """``time.monotonic()`` after which this worker no longer trusts the lease."""
    head_seq: int = 0
    created_at: float = 0.0

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease may have expired."""
        if time.monotonic() >= self.deadline:
            raise LeaseLost(
                f"lease on run {self.run_id!r} (epoch {self.epoch}) expired; "
                "another worker may own the run now"
            )


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class CheckpointStore:
    """Runs, step records, checkpoints and leases on a :class:`Storage`.

    Args:
        storage: where the bytes go; any adapter.
        codec: values to envelopes and back; the shared default if None.
        namespace: a key prefix that keeps several applications apart in one
            storage (a ``/``-free word, or a path of such words).
    """

    def __init__(
        self, storage: Storage, *, codec: Codec | None = None, namespace: str = ""
    ) -> None:
        self.storage = storage
        self.codec = codec if codec is not None else default_codec()
        ns = namespace.strip("/")
        self._ns = f"{ns}/" if ns else ""

    def __repr__(self) -> str:
        return f"CheckpointStore({self.storage!r}, namespace={self._ns.rstrip('/')!r})"

    # -- keys --------------------------------------------------------------------------
    def run_prefix(self, run_id: str) -> str:
        """The key prefix under which every key of ``run_id`` lives."""
        return f"{self._ns}runs/{validate_run_id(run_id)}/"

    def step_key(self, run_id: str, step: str) -> str:
        """The key of a step record."""
        return f"{self.run_prefix(run_id)}s/{quote(step, safe='@')}"

    def _checkpoint_key(self, run_id: str, seq: int) -> str:
        return f"{self.run_prefix(run_id)}c/{_MAX_SEQ - seq:016x}"

    def _head_key(self, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}head"

    def _input_key(self, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}input"

    def _response_key(self, run_id: str, request_id: str) -> str:
        return f"{self.run_prefix(run_id)}r/{quote(request_id, safe='@')}"

    def _index_key(self, run_id: str) -> str:
        return f"{self._ns}index/{validate_run_id(run_id)}"

    # -- runs ----------------------------------------------------------------------------
    async def create_run(self, run_id: str, input: Any) -> bool:
        """Register a new run and store its input once; return False if it existed."""
        data = self.codec.encode(input, path="input")
        try:
            await self.storage.put(self._input_key(run_id), data, mode="create")
        except PreconditionFailed:
            return False
        try:
            await self.storage.put(self._index_key(run_id), b"", mode="create")
        except PreconditionFailed:
            pass
        return True

    async def load_input(self, run_id: str) -> Any:
        """The input the run was started with.

        Raises:
            NotFound: there is no such run.
        """
        key = self._input_key(run_id)
        try:
            data, _ = await self.storage.get(key)
        except NotFound:
            raise NotFound(f"run {run_id!r} not found (no {key!r})") from None
        return self.codec.decode(data, key=key)

    async def run_exists(self, run_id: str) -> bool:
        """Whether the run was created."""
        try:
            await self.storage.get(self._input_key(run_id))
        except NotFound:
            return False
        return True

    async def list_runs(
        self, *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        """Run ids in ascending order, from the run index (one listing, no scan of runs)."""
        prefix = f"{self._ns}index/"
        after = None if start_after is None else prefix + start_after
        return [
            key[len(prefix) :]
            async for key in self.storage.list(prefix, start_after=after, limit=limit)
        ]

    async def delete_run(self, run_id: str) -> int:
        """Delete every key of the run, then its index entry; return the keys deleted."""
        prefix = self.run_prefix(run_id)
        keys = [key async for key in self.storage.list(prefix)]
        deleted = 0
        for key in keys:
            deleted += await self.storage.delete(key)
        deleted += await self.storage.delete(self._index_key(run_id))
        return deleted

    # -- step records ----------------------------------------------------------------
    def encode_step(self, record: StepRecord) -> bytes:
        """Encode a step record to envelope bytes, synchronously (the G1 snapshot)."""
        body = {
            "step": record.step,
            "result": record.result,
            "writes": dict(record.writes),
            "deletes": list(record.deletes),
            "cleared": record.cleared,
            "fp": record.fingerprint,
            "seq": record.seq,
            "epoch": record.epoch,
        }
        return self.codec.encode(body, path=f"step {record.step!r}")

    def decode_step(self, data: bytes, *, key: str | None = None) -> StepRecord:
        """Decode bytes made by :meth:`encode_step`."""
        body = self.codec.decode(data, key=key)
        return StepRecord(
            step=body["step"],
            result=body["result"],
            writes=body["writes"],
            deletes=tuple(body["deletes"]),
            cleared=body["cleared"],
            fingerprint=body["fp"],
            seq=body["seq"],
            epoch=body["epoch"],
        )

    async def save_step(
        self, run_id: str, step: str, data: bytes, *, lease: Lease | None = None
    ) -> None:
        """Store a step record once (create-only).

        Raises:
            LeaseLost: ``lease`` expired (checked before writing).
            PreconditionFailed: a record for this step exists already.
        """
        if lease is not None:
            lease.check()
        await self.storage.put(self.step_key(run_id, step), data, mode="create")

    async def load_steps(self, run_id: str, *, concurrency: int = 32) -> dict[str, StepRecord]:
        """Every step record of the run, by step identity."""
        prefix = f"{self.run_prefix(run_id)}s/"
        keys = [key async for key in self.storage.list(prefix)]
        records: dict[str, StepRecord] = {}
        limit = asyncio.Semaphore(concurrency)

        async def load(key: str) -> None:
            async with limit:
                data, _ = await self.storage.get(key)
            record = self.decode_step(data, key=key)
            records[record.step] = record

        async with asyncio.TaskGroup() as tg:
            for key in keys:
                tg.create_task(load(key))
        return records

    # -- input responses ---------------------------------------------------------------
    async def save_response(self, run_id: str, request_id: str, value: Any) -> bool:
        """Store the response to an input request once; False if one was stored before."""
        data = self.codec.encode(value, path=f"response {request_id!r}")
        try:
            await self.storage.put(self._response_key(run_id, request_id), data, mode="create")
        except PreconditionFailed:
            return False
        return True

    async def load_responses(self, run_id: str) -> dict[str, Any]:
        """Every stored input response of the run, by request id."""
        prefix = f"{self.run_prefix(run_id)}r/"
        responses: dict[str, Any] = {}
        async for key in self.storage.list(prefix):
            data, _ = await self.storage.get(key)
            responses[unquote(key[len(prefix) :])] = self.codec.decode(data, key=key)
        return responses

    # -- leases -------------------------------------------------------------------------
    async def _read_head(self, run_id: str) -> tuple[dict[str, Any], str] | None:
        key = self._head_key(run_id)
        try:
            data, version = await self.storage.get(key)
        except NotFound:
            return None
        head: dict[str, Any] = self.codec.decode(data, key=key)
        return head, version

    async def _write_head(
        self, run_id: str, head: dict[str, Any], version: str | None
    ) -> str:
        data = self.codec.encode(head, path="head")
        mode: PutMode = "create" if version is None else IfMatch(version)
        return await self.storage.put(self._head_key(run_id), data, mode=mode)

    async def acquire(self, run_id: str, *, owner: str | None = None, ttl: float = 30.0) -> Lease:
        """Take ownership of a run for ``ttl`` seconds, with the next fencing epoch.

        Raises:
            RunBusy: another worker holds an unexpired lease, or won the race.
        """
        if ttl <= 0:
            raise ValueError(f"lease ttl must be positive, not {ttl!r}")
        owner = owner or _default_owner()
        current = await self._read_head(run_id)
        now = time.time()
        start = time.monotonic()
        if current is None:
            head: dict[str, Any] = {"owner": owner, "epoch": 1, "expires": now + ttl, "seq": 0}
            version = None
        else:
            old, version = current
            if old["expires"] > now and old["owner"] != owner:
                raise RunBusy(
                    f"run {run_id!r} is owned by {old['owner']} (epoch {old['epoch']}) "
                    f"for {old['expires'] - now:.1f} s more"
                )
            head = {**old, "owner": owner, "epoch": old["epoch"] + 1, "expires": now + ttl}
        try:
            new_version = await self._write_head(run_id, head, version)
        except PreconditionFailed:
            raise RunBusy(f"run {run_id!r} was taken by another worker just now") from None
        return Lease(
            run_id=run_id,
            owner=owner,
            epoch=head["epoch"],
            ttl=ttl,
            version=new_version,
            deadline=start + ttl * 0.9,
            head_seq=head["seq"],
            created_at=now,
        )

    async def renew(self, lease: Lease, *, head_seq: int | None = None) -> Lease:
        """Extend the lease by its ttl (and move the head to ``head_seq``).

        Raises:
            LeaseLost: the lease expired or another worker took the run.
        """
        lease.check()
        now = time.time()
        start = time.monotonic()
        seq = lease.head_seq if head_seq is None else head_seq
        head = {"owner": lease.owner, "epoch": lease.epoch, "expires": now + lease.ttl, "seq": seq}
        try:
            version = await self._write_head(lease.run_id, head, lease.version)
        except PreconditionFailed:
            raise LeaseLost(
                f"lease on run {lease.run_id!r} (epoch {lease.epoch}) was taken over"
            ) from None
        return replace(
            lease, version=version, deadline=start + lease.ttl * 0.9, head_seq=seq
        )

    async def release(self, lease: Lease) -> None:
        """Give the run up so another worker can resume it at once (keeps the head)."""
        head = {"owner": lease.owner, "epoch": lease.epoch, "expires": 0.0, "seq": lease.head_seq}
        try:
            await self._write_head(lease.run_id, head, lease.version)
        except PreconditionFailed:
            pass  # someone else owns it already: nothing of ours to release

    # -- checkpoints ------------------------------------------------------------------
    def encode_checkpoint(self, checkpoint: Checkpoint) -> bytes:
        """Encode a checkpoint to envelope bytes."""
        body = {
            "run": checkpoint.run_id,
            "id": checkpoint.checkpoint_id,
            "status": checkpoint.status,
            "state": dict(checkpoint.state),
            "pending": [[r.id, r.step, r.payload] for r in checkpoint.pending],
            "output": checkpoint.output,
            "error": checkpoint.error,
            "meta": dict(checkpoint.metadata),
            "parent": checkpoint.parent_id,
            "t": checkpoint.created_at,
            "steps": checkpoint.steps,
        }
        return self.codec.encode(body, path="checkpoint")

    def decode_checkpoint(self, data: bytes, *, key: str | None = None) -> Checkpoint:
        """Decode bytes made by :meth:`encode_checkpoint`."""
        body = self.codec.decode(data, key=key)
        return Checkpoint(
            run_id=body["run"],
            checkpoint_id=body["id"],
            status=body["status"],
            state=body["state"],
            pending=tuple(InputRequest(i, s, p) for i, s, p in body["pending"]),
            output=body["output"],
            error=body["error"],
            metadata=body["meta"],
            parent_id=body["parent"],
            created_at=body["t"],
            steps=body["steps"],
        )

    async def save_checkpoint(
        self,
        run_id: str,
        *,
        status: str,
        state: Mapping[str, Any] | None = None,
        pending: tuple[InputRequest, ...] = (),
        output: Any = None,
        error: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        steps: int = 0,
        lease: Lease | None = None,
    ) -> tuple[Checkpoint, Lease | None]:
        """Commit a new checkpoint: move the head (CAS), then write the checkpoint once.

        With a lease, the head's compare-and-swap is the fence: a worker whose
        lease was taken over fails here and writes nothing. Returns the
        checkpoint and the renewed lease.

        Raises:
            LeaseLost: the lease expired or was taken over.
            EncodeError: a value cannot be encoded (nothing is written).
        """
        if lease is not None:
            seq = lease.head_seq + 1
            parent = str(lease.head_seq) if lease.head_seq else None
            checkpoint = self._checkpoint(
                run_id, seq, status, state, pending, output, error, metadata, parent, steps
            )
            data = self.encode_checkpoint(checkpoint)  # encode before moving the head
            lease = await self.renew(lease, head_seq=seq)
            await self.storage.put(self._checkpoint_key(run_id, seq), data, mode="create")
            return checkpoint, lease
        while True:
            current = await self._read_head(run_id)
            if current is None:
                head: dict[str, Any] = {"owner": "", "epoch": 0, "expires": 0.0, "seq": 0}
                version = None
            else:
                head, version = current
            seq = head["seq"] + 1
            parent = str(head["seq"]) if head["seq"] else None
            checkpoint = self._checkpoint(
                run_id, seq, status, state, pending, output, error, metadata, parent, steps
            )
            data = self.encode_checkpoint(checkpoint)
            if head["expires"] > time.time():
                raise RunBusy(
                    f"run {run_id!r} is owned by {head['owner']}; save through its lease"
                )
            try:
                await self._write_head(run_id, {**head, "seq": seq}, version)
            except PreconditionFailed:
                continue  # another writer moved the head: take the next number
            await self.storage.put(self._checkpoint_key(run_id, seq), data, mode="create")
            return checkpoint, None

    @staticmethod
    def _checkpoint(
        run_id: str,
        seq: int,
        status: str,
        state: Mapping[str, Any] | None,
        pending: tuple[InputRequest, ...],
        output: Any,
        error: str | None,
        metadata: Mapping[str, Any] | None,
        parent: str | None,
        steps: int,
    ) -> Checkpoint:
        return Checkpoint(
            run_id=run_id,
            checkpoint_id=str(seq),
            status=status,
            state=dict(state or {}),
            pending=tuple(pending),
            output=output,
            error=error,
            metadata=dict(metadata or {}),
            parent_id=parent,
            created_at=time.time(),
            steps=steps,
        )

    async def load_checkpoint(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        """One checkpoint of a run by id.

        Raises:
            NotFound: no such checkpoint.
            ValueError: ``checkpoint_id`` is not a checkpoint number.
        """
        try:
            seq = int(checkpoint_id)
        except (TypeError, ValueError):
            raise ValueError(
                f"invalid checkpoint id {checkpoint_id!r} for run {run_id!r}: "
                "checkpoint ids are numbers (1, 2, ...)"
            ) from None
        if not 0 < seq <= _MAX_SEQ:
            raise ValueError(f"invalid checkpoint id {checkpoint_id!r} for run {run_id!r}")
        key = self._checkpoint_key(run_id, seq)
        try:
            data, _ = await self.storage.get(key)
        except NotFound:
            raise NotFound(f"checkpoint {checkpoint_id} of run {run_id!r} not found") from None
        return self.decode_checkpoint(data, key=key)

    async def latest(self, run_id: str) -> Checkpoint | None:
        """The newest checkpoint of the run, or None: two gets, however many exist."""
        current = await self._read_head(run_id)
        if current is not None and current[0]["seq"] > 0:
            key = self._checkpoint_key(run_id, current[0]["seq"])
            try:
                data, _ = await self.storage.get(key)
            except NotFound:
                pass  # the head moved but its checkpoint never landed: fall back
            else:
                return self.decode_checkpoint(data, key=key)
        async for key in self.storage.list(f"{self.run_prefix(run_id)}c/", limit=1):
            data, _ = await self.storage.get(key)
            return self.decode_checkpoint(data, key=key)
        return None

    async def list_checkpoints(self, run_id: str, *, limit: int | None = None) -> list[str]:
        """Checkpoint ids of the run, newest first (one listing, no reads)."""
        prefix = f"{self.run_prefix(run_id)}c/"
        return [
            str(_MAX_SEQ - int(key[len(prefix) :], 16))
            async for key in self.storage.list(prefix, limit=limit)
        ]

    async def prune(self, run_id: str, *, keep_last: int) -> int:
        """Delete all but the newest ``keep_last`` checkpoints; return how many went."""
        if not isinstance(keep_last, int) or keep_last < 0:
            raise ValueError(f"keep_last must be a non-negative int, not {keep_last!r}")
        prefix = f"{self.run_prefix(run_id)}c/"
        old = [key async for key in self.storage.list(prefix)][keep_last:]
        deleted = 0
        for key in old:
            deleted += await self.storage.delete(key)
        return deleted

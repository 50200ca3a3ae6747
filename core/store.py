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

Writes whose outcome is unknown (see `checkpointkit.storage`): the store
never overwrites anything unconditionally. Records (inputs, step records,
responses, checkpoints, index entries) are create-only, and a conflict is
reconciled by reading what is stored: the same bytes, or a complete record of
the same step with the same argument fingerprint written by an earlier owner,
is success. The head moves by compare-and-swap only; after a conflict or an
indeterminate write the store re-reads it and keeps going if the owner and
epoch are its own (a late-landing renewal of its own, say). Writes that raise
`OutcomeUnknown` are retried, which is safe for
the same reasons. A late landing can therefore fail its precondition or repeat
what is stored, never clobber.

Rollback detection: the head carries the number and a digest of the newest
checkpoint (and of its parent), so `CheckpointStore.latest` refuses a
checkpoint whose content is not the one the head names. The digest covers the
content, not the envelope bytes, so re-encrypting (``rekey``) keeps it valid. A writer who can also
roll the head back is not detected.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from . import observe, reconcile
from .codec import Codec, default_codec
from .envelope import content_digest
from .errors import (
    CheckpointCorrupted,
    DecodeError,
    InvalidKey,
    LeaseLost,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    RunBusy,
)
from .storage import GetResult, IfMatch, PutMode, Storage, delete_many

log = logging.getLogger("checkpointkit.store")

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "InputRequest",
    "Lease",
    "RunInfo",
    "StepRecord",
    "validate_run_id",
]

T = TypeVar("T")

_MAX_SEQ = 2**64 - 1
_RETRIES = reconcile.ATTEMPTS
_TERMINAL = frozenset({"completed", "failed"})
_MAX_RUN_ID = 200
_BAD_RUN_CHARS = re.compile(r"[\x00-\x1f\x7f/\\]")
_SAFE_STEP = re.compile(r"[\w.~@-]*", re.ASCII)  # what quote(step, safe="@") leaves as it is
_PREFIX_CACHE = 1024


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
    `check`; the head's compare-and-swap rejects a stale holder even
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
    head: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The head as this worker last wrote it (rebased on by later writes)."""

    def check(self) -> None:
        """Raise `LeaseLost` if the lease may have expired."""
        if time.monotonic() >= self.deadline:
            raise LeaseLost(
                f"lease on run {self.run_id!r} (epoch {self.epoch}) expired; "
                "another worker may own the run now"
            )


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What the run head says about a run, without reading its checkpoints.

    Attributes:
        run_id: the run.
        status: ``"running"`` (started or resumed, not yet concluded),
            ``"paused"``, ``"completed"``, ``"failed"``, or ``"created"`` when no
            worker ever took the run.
        owner: the worker that holds or last held the lease ("" if none).
        epoch: the fencing epoch of that lease.
        lease_expires: wall-clock expiry of the lease (0 when released).
        checkpoint: the number of the newest checkpoint (0 if none).
        updated_at: wall-clock time of the newest checkpoint (0 if none).
        pruned_to: checkpoints up to this number were deleted on purpose by
            `CheckpointStore.prune` (0 if none).
    """

    run_id: str
    status: str
    owner: str = ""
    epoch: int = 0
    lease_expires: float = 0.0
    checkpoint: int = 0
    updated_at: float = 0.0
    pruned_to: int = 0

    @property
    def live(self) -> bool:
        """Whether a worker holds an unexpired lease on the run (by this machine's clock)."""
        return self.lease_expires > time.time()


_CREATION_STALE = 10.0
"""Seconds after which an index entry without an input is an interrupted creation."""


def _stale_creation(token: bytes) -> bool:
    """Whether an index entry's creation token is older than `_CREATION_STALE`."""
    try:
        made = float(token.split(b" ", 1)[0]) if token else 0.0
    except ValueError:
        made = 0.0
    return time.time() - made >= _CREATION_STALE


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class CheckpointStore:
    """Runs, step records, checkpoints and leases on a `Storage`.

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
        self._prefixes: dict[str, str] = {}  # run id -> run_prefix(run id), validated

    def __repr__(self) -> str:
        return f"CheckpointStore({self.storage!r}, namespace={self._ns.rstrip('/')!r})"

    # -- keys --------------------------------------------------------------------------
    def run_prefix(self, run_id: str) -> str:
        """The key prefix under which every key of ``run_id`` lives."""
        prefix = self._prefixes.get(run_id)
        if prefix is None:
            prefix = f"{self._ns}runs/{validate_run_id(run_id)}/"
            if len(self._prefixes) >= _PREFIX_CACHE:
                self._prefixes.clear()
            self._prefixes[run_id] = prefix
        return prefix

    def step_key(self, run_id: str, step: str) -> str:
        """The key of a step record."""
        if _SAFE_STEP.fullmatch(step) is None:
            step = quote(step, safe="@")
        return f"{self.run_prefix(run_id)}s/{step}"

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
    # -- writes safe under unknown outcomes -------------------------------------------
    async def _create(self, key: str, data: bytes) -> GetResult | None:
        """Create ``key`` once; None if this call stored ``data``, else what is stored."""
        return await reconcile.create(self.storage, key, data)

    async def _ensure(self, key: str, data: bytes) -> None:
        """Create ``key`` unless it exists (with any content): idempotent markers."""
        await self._create(key, data)

    async def create_run(self, run_id: str, input: Any) -> bool:
        """Register a new run and store its input once; return False if it existed.

        The index entry is written first, create-only, holding a token unique
        to this call: finding its own token after a write whose outcome was
        unknown tells this call from another creator of the same run id (equal
        inputs could not). The input follows. A process killed between the two
        leaves an index entry without an input: a later ``create_run`` of that
        id takes the entry over (compare-and-swap) and completes the creation,
        once the entry is older than 10 seconds (younger, it is another call
        creating the run right now, and this call returns False). After its
        input, a call checks that the entry still holds its token: a creator
        stalled past that bound and taken over returns False.
        Runs created before this order (input first) are put back in the index
        by `ensure_listed`, which every resume calls.
        """
        index = self._index_key(run_id)
        key = self._input_key(run_id)
        data = self.codec.encode(input, path="input", key=key)
        token = f"{time.time()!r} {uuid.uuid4().hex}".encode()
        stored = await self._create(index, token)
        if stored is not None and stored.data != token:
            if await self.run_exists(run_id) or not _stale_creation(stored.data):
                return False  # another creator's run, or one being created right now
            try:  # an interrupted creation: take its index entry over, then finish it
                await reconcile.put(self.storage, index, token, IfMatch(stored.version))
            except PreconditionFailed:
                return False  # another creator took it over first
        stored = await self._create(key, data)
        if stored is not None and stored.data != data:
            return False
        # A creator stalled for longer than the staleness bound may have been taken over
        # meanwhile: the run is the creator's whose token the index entry holds now.
        try:
            now, _ = await self.storage.get(index)
        except NotFound:
            return False  # deleted meanwhile
        return now == token

    async def creation_pending(self, run_id: str) -> float | None:
        """Seconds until an index entry without an input counts as an interrupted creation.

        Returns None if the run has no index entry, or its input exists, or
        its creation is interrupted (stale) already; else the seconds left, during
        which another caller may still be creating the run.
        """
        try:
            data, _ = await self.storage.get(self._index_key(run_id))
        except NotFound:
            return None
        if await self.run_exists(run_id) or _stale_creation(data):
            return None
        made = float(data.split(b" ", 1)[0])
        return max(made + _CREATION_STALE - time.time(), 0.0)

    async def ensure_listed(self, run_id: str) -> None:
        """Put the run in the index if it is missing there (repairs an interrupted create)."""
        await self._ensure(self._index_key(run_id), b"")

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
        self,
        *,
        start_after: str | None = None,
        limit: int | None = None,
        status: str | Collection[str] | None = None,
        older_than: float | timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        concurrency: int = 16,
    ) -> list[str]:
        """Run ids in ascending order, from the run index, optionally filtered.

        Without a filter: one listing, no read of any run. With filters: one
        listing, then one get per run (its head, ``concurrency`` at a time),
        stopping once ``limit`` runs matched. A run matches when it passes
        every filter given.

        Args:
            start_after: list the runs after this run id.
            limit: at most this many run ids (that match).
            status: a status or several (as `run_info` reports them:
                ``"running"``, ``"paused"``, ``"completed"``, ``"failed"``,
                ``"created"``, or a caller's own word).
            older_than: seconds (or a ``timedelta``) since the run's newest
                checkpoint was saved; a run without any checkpoint has no age
                and never matches.
            metadata: key-value pairs that the ``metadata`` of the run's newest
                checkpoint must all hold (equal values).
            concurrency: heads read at once.

        Raises:
            ValueError: a filter of the wrong type, an empty ``status``, a
                negative ``older_than``, or ``concurrency`` below 1.
        """
        prefix = f"{self._ns}index/"
        after = None if start_after is None else prefix + start_after
        if status is None and older_than is None and metadata is None:
            return [
                key[len(prefix) :]
                async for key in self.storage.list(prefix, start_after=after, limit=limit)
            ]
        match = self._run_filter(status, older_than, metadata)
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, not {concurrency!r}")
        ids = [key[len(prefix) :] async for key in self.storage.list(prefix, start_after=after)]
        found: list[str] = []
        for start in range(0, len(ids), concurrency):
            chunk = ids[start : start + concurrency]
            hits = await _gather_all([match(run_id) for run_id in chunk])
            found.extend(run_id for run_id, hit in zip(chunk, hits, strict=True) if hit)
            if limit is not None and len(found) >= limit:
                return found[:limit]
        return found

    def _run_filter(
        self,
        status: str | Collection[str] | None,
        older_than: float | timedelta | None,
        metadata: Mapping[str, Any] | None,
    ) -> Callable[[str], Awaitable[bool]]:
        """A check of one run against the filters of `list_runs` (one get per run)."""
        statuses: frozenset[str] | None = None
        if isinstance(status, str):
            statuses = frozenset({status})
        elif status is not None:
            if not isinstance(status, Collection) or not all(isinstance(s, str) for s in status):
                raise ValueError(f"status must be a str or a collection of str, not {status!r}")
            if not status:
                raise ValueError("status must name at least one status, not an empty collection")
            statuses = frozenset(status)
        cutoff = None if older_than is None else time.time() - _seconds(older_than, "older_than")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ValueError(f"metadata must be a mapping, not {type(metadata).__name__}")
        wanted = dict(metadata or {})

        async def match(run_id: str) -> bool:
            current = await self._read_head(run_id)
            info = RunInfo(run_id, "created") if current is None else self._info(run_id, current[0])
            if statuses is not None and info.status not in statuses:
                return False
            if cutoff is not None and not 0 < info.updated_at < cutoff:
                return False
            if wanted:
                if current is None:
                    return False
                meta = current[0].get("meta")
                if meta is None:  # a head written before it kept the metadata: read it
                    latest = await self.latest(run_id)
                    meta = {} if latest is None else latest.metadata
                if any(k not in meta or meta[k] != v for k, v in wanted.items()):
                    return False
            return True

        return match

    async def delete_run(self, run_id: str) -> int:
        """Delete every key of the run, then its index entry; return the keys deleted.

        The keys go in batches (`delete_many`).
        """
        prefix = self.run_prefix(run_id)
        keys = [key async for key in self.storage.list(prefix)]
        deleted = await delete_many(self.storage, keys) if keys else 0
        deleted += await self.storage.delete(self._index_key(run_id))
        return deleted

    async def run_info(self, run_id: str) -> RunInfo | None:
        """What the run's head says (status, owner, lease, newest checkpoint); one get.

        Returns None if the run does not exist. A run created but never taken
        by a worker has the status ``"created"``.
        """
        current = await self._read_head(run_id)
        if current is None:
            return RunInfo(run_id, "created") if await self.run_exists(run_id) else None
        return self._info(run_id, current[0])

    @staticmethod
    def _info(run_id: str, head: Mapping[str, Any]) -> RunInfo:
        return RunInfo(
            run_id=run_id,
            status=head.get("status", "running"),
            owner=head["owner"],
            epoch=head["epoch"],
            lease_expires=head["expires"],
            checkpoint=head["seq"],
            updated_at=head.get("t", 0.0),
            pruned_to=head.get("floor", 0),
        )

    async def abandoned_runs(self, *, limit: int | None = None, concurrency: int = 16) -> list[str]:
        """Runs whose owner is gone: started, not concluded, and with no live lease.

        A worker killed mid-run leaves its run ``"running"`` with a lease that
        expires after its ttl; a cancelled run releases its lease at once.
        A pool of workers takes such runs over with ``Workflow.resume``.
        A run whose creator died after storing its input but before taking it
        (no head, status ``"created"``) is listed too, once its creation is
        older than the 10-second creation bound of `create_run`.
        Paused, completed and failed runs are not listed (they wait for input,
        or ended). Costs one listing and one get per run (two more for a run
        without a head).
        """
        found: list[str] = []
        gate = asyncio.Semaphore(concurrency)

        async def check(run_id: str) -> None:
            async with gate:
                current = await self._read_head(run_id)
                if current is None:
                    if await self._creator_gone(run_id):
                        found.append(run_id)
                    return
            info = self._info(run_id, current[0])
            if info.status == "running" and not info.live:
                found.append(run_id)

        runs = await self.list_runs()
        await _gather_all([check(r) for r in runs])
        found.sort()
        return found if limit is None else found[:limit]

    async def _creator_gone(self, run_id: str) -> bool:
        """Whether the run was created (its input is stored) by a creator that never took it."""
        try:
            token, _ = await self.storage.get(self._index_key(run_id))
        except NotFound:
            return False
        return _stale_creation(token) and await self.run_exists(run_id)

    # -- step records ----------------------------------------------------------------
    def encode_step(self, record: StepRecord, *, run_id: str) -> bytes:
        """Encode a step record to envelope bytes, synchronously (the G1 snapshot).

        The envelope is bound to the record's key in ``run_id``, so it is
        refused if it is ever found under another key.
        """
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
        return self.codec.encode(
            body, path=f"step {record.step!r}", key=self.step_key(run_id, record.step)
        )

    def decode_step(self, data: bytes, *, key: str | None = None) -> StepRecord:
        """Decode bytes made by `encode_step`."""
        body = self.codec.decode(data, key=key)
        try:
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
        except (KeyError, TypeError, IndexError) as exc:
            raise DecodeError(
                f"the step record at key {key!r} is malformed: {type(exc).__name__}: {exc}"
            ) from exc

    async def save_step(
        self, run_id: str, step: str, data: bytes, *, lease: Lease | None = None
    ) -> bool:
        """Store a step record once (create-only); return False if one was adopted.

        If a record of this step is stored already, it is adopted when it is
        the same bytes (an earlier attempt of this save whose outcome was
        unknown) or a complete record of the same step called with the same
        arguments (an earlier owner of the run executed it too: steps run at
        least once, and the first stored record is the one replayed).

        Raises:
            LeaseLost: ``lease`` expired (checked before writing).
            PreconditionFailed: a record of this step with other arguments is
                stored.
        """
        if lease is not None:
            lease.check()
        key = self.step_key(run_id, step)
        stored = await self._create(key, data)
        log.debug("run %r: step %r saved (%d bytes)", run_id, step, len(data))
        if stored is None or stored.data == data:
            return True
        mine = self.decode_step(data, key=key)
        theirs = self.decode_step(stored.data, key=key)
        if theirs.step == mine.step and theirs.fingerprint == mine.fingerprint:
            return False
        raise PreconditionFailed(
            f"step {step!r} of run {run_id!r} is recorded already, called with other "
            f"arguments (fingerprint {theirs.fingerprint!r}, not {mine.fingerprint!r})"
        )

    async def load_steps(self, run_id: str, *, concurrency: int = 32) -> dict[str, StepRecord]:
        """Every step record of the run, by step identity.

        Raises:
            CheckpointCorrupted, DecodeError, StorageError: the first error of a
                record (never an ``ExceptionGroup``); the rest are cancelled.
        """
        prefix = f"{self.run_prefix(run_id)}s/"
        keys = [key async for key in self.storage.list(prefix)]
        records: dict[str, StepRecord] = {}
        limit = asyncio.Semaphore(concurrency)

        async def load(key: str) -> None:
            async with limit:
                data, _ = await self.storage.get(key)
            record = self.decode_step(data, key=key)
            records[record.step] = record

        await _gather_all([load(key) for key in keys])
        return records

    async def completed_steps(self, run_id: str) -> list[str]:
        """The identities (``name@index``) of the run's completed steps, in completion order.

        The steps a resume replays instead of executing: those of a failed run
        too. Reads every step record (one listing, one get per step).

        Raises:
            NotFound: there is no such run.
        """
        if not await self.run_exists(run_id):
            raise NotFound(f"run {run_id!r} not found")
        records = await self.load_steps(run_id)
        return [r.step for r in sorted(records.values(), key=lambda r: (r.seq, r.step))]

    # -- input responses ---------------------------------------------------------------
    async def save_response(self, run_id: str, request_id: str, value: Any) -> bool:
        """Store the response to an input request once; False if one was stored before."""
        key = self._response_key(run_id, request_id)
        data = self.codec.encode(value, path=f"response {request_id!r}", key=key)
        stored = await self._create(key, data)
        return stored is None or stored.data == data

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

    async def _write_head(self, run_id: str, head: Mapping[str, Any], version: str | None) -> str:
        key = self._head_key(run_id)
        data = self.codec.encode(dict(head), path="head", key=key)
        mode: PutMode = "create" if version is None else IfMatch(version)
        return await self.storage.put(key, data, mode=mode)

    async def _move_head(
        self, lease: Lease, changes: Mapping[str, Any]
    ) -> tuple[dict[str, Any], str]:
        """Apply ``changes`` to the run head by compare-and-swap, as the lease holder.

        After a conflict or an unknown outcome the head is read again: if its
        owner and epoch are still this lease's, the change is applied on top of
        what is there (one of this worker's own writes landed, or ``prune``
        moved its floor), or found applied already. Else the lease is lost.

        Raises:
            LeaseLost: another worker took the run (or the head is gone).
        """
        base: Mapping[str, Any] = lease.head or {
            "owner": lease.owner,
            "epoch": lease.epoch,
            "expires": 0.0,
            "seq": lease.head_seq,
        }
        version = lease.version
        for attempt in range(_RETRIES + 2):
            head = {**base, **changes}
            try:
                return head, await self._write_head(lease.run_id, head, version)
            except (PreconditionFailed, OutcomeUnknown) as exc:
                if isinstance(exc, OutcomeUnknown) and attempt >= _RETRIES:
                    raise
            current = await self._read_head(lease.run_id)
            if (
                current is None
                or current[0]["owner"] != lease.owner
                or current[0]["epoch"] != lease.epoch
            ):
                raise LeaseLost(
                    f"lease on run {lease.run_id!r} (epoch {lease.epoch}) was taken over"
                )
            base, version = current
            if {**base, **changes} == base:
                return dict(base), version  # this very change landed; its reply was lost
        raise LeaseLost(
            f"lease on run {lease.run_id!r} (epoch {lease.epoch}): the head kept moving"
        )

    async def acquire(self, run_id: str, *, owner: str | None = None, ttl: float = 30.0) -> Lease:
        """Take ownership of a run for ``ttl`` seconds, with the next fencing epoch.

        A write of the head whose outcome is unknown is reconciled by reading
        the head back: if it names this owner and epoch, the run is taken.

        Raises:
            RunBusy: another worker holds an unexpired lease, or won the race;
                its ``retry_after`` says when that lease expires.
        """
        lease = await self._acquire(run_id, owner, ttl, unless_completed=False)
        assert lease is not None
        return lease

    async def acquire_unless_completed(
        self, run_id: str, *, owner: str | None = None, ttl: float = 30.0
    ) -> Lease | None:
        """As `acquire`, but return None if the run has completed.

        The check and the take are one compare-and-swap on the head, so a run
        that completes meanwhile is never taken (and never marked running) again.
        """
        return await self._acquire(run_id, owner, ttl, unless_completed=True)

    async def _acquire(
        self, run_id: str, owner: str | None, ttl: float, *, unless_completed: bool
    ) -> Lease | None:
        if ttl <= 0:
            raise ValueError(f"lease ttl must be positive, not {ttl!r}")
        owner = owner or _default_owner()
        current = await self._read_head(run_id)
        now = time.time()
        start = time.monotonic()
        if current is None:
            head: dict[str, Any] = {
                "owner": owner,
                "epoch": 1,
                "expires": now + ttl,
                "seq": 0,
                "status": "running",
            }
            version = None
        else:
            old, version = current
            if unless_completed and old.get("status") == "completed":
                return None
            if old["expires"] > now and old["owner"] != owner:
                left = old["expires"] - now
                raise RunBusy(
                    f"run {run_id!r} is owned by {old['owner']} (epoch {old['epoch']}) "
                    f"for {left:.1f} s more",
                    retry_after=left,
                )
            head = {
                **old,
                "owner": owner,
                "epoch": old["epoch"] + 1,
                "expires": now + ttl,
                "status": "running",
            }
        new_version = await self._take_head(run_id, head, version)
        return Lease(
            run_id=run_id,
            owner=owner,
            epoch=head["epoch"],
            ttl=ttl,
            version=new_version,
            deadline=start + ttl * 0.9,
            head_seq=head["seq"],
            created_at=now,
            head=head,
        )

    async def _take_head(self, run_id: str, head: dict[str, Any], version: str | None) -> str:
        """Write a head that takes the run; reconcile a conflict or an unknown outcome.

        After either, the head is read back: if it is this very head, the write
        landed (its reply was lost); if it is still the one this write replaces,
        nothing landed yet and the write is repeated (a compare-and-swap, so the
        first attempt can no longer land after it); else another worker won.
        """
        for attempt in range(_RETRIES):
            try:
                return await self._write_head(run_id, head, version)
            except (PreconditionFailed, OutcomeUnknown) as exc:
                again = await self._read_head(run_id)
                if again is not None and again[0] == head:
                    return again[1]  # it was this very write
                unchanged = (
                    again is None
                    if version is None
                    else (again is not None and again[1] == version)
                )
                if isinstance(exc, PreconditionFailed) or not unchanged:
                    raise RunBusy(
                        f"run {run_id!r} was taken by another worker just now", retry_after=0.0
                    ) from None
                if attempt == _RETRIES - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def renew(self, lease: Lease, *, head_seq: int | None = None) -> Lease:
        """Extend the lease by its ttl.

        Raises:
            LeaseLost: the lease expired or another worker took the run.
        """
        lease.check()
        start = time.monotonic()
        changes: dict[str, Any] = {"expires": time.time() + lease.ttl}
        if head_seq is not None:
            changes["seq"] = head_seq
        head, version = await self._move_head(lease, changes)
        return replace(
            lease,
            version=version,
            deadline=start + lease.ttl * 0.9,
            head_seq=head["seq"],
            head=head,
        )

    async def release(self, lease: Lease) -> None:
        """Give the run up so another worker can resume it at once (keeps the head).

        If the release's outcome is unknown and it lands later, it can only
        release this lease's own epoch (a compare-and-swap on its version).
        """
        try:
            await self._move_head(lease, {"expires": 0.0})
        except LeaseLost:
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
        key = self._checkpoint_key(checkpoint.run_id, int(checkpoint.checkpoint_id))
        return self.codec.encode(body, path="checkpoint", key=key)

    def decode_checkpoint(self, data: bytes, *, key: str | None = None) -> Checkpoint:
        """Decode bytes made by `encode_checkpoint`."""
        body = self.codec.decode(data, key=key)
        try:
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
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise DecodeError(
                f"the checkpoint at key {key!r} is malformed: {type(exc).__name__}: {exc}"
            ) from exc

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
            lease.check()
            seq = lease.head_seq + 1
            parent = str(lease.head_seq) if lease.head_seq else None
            checkpoint = self._checkpoint(
                run_id, seq, status, state, pending, output, error, metadata, parent, steps
            )
            data = self.encode_checkpoint(checkpoint)  # encode before moving the head
            start = time.monotonic()
            changes = self._head_changes(
                lease.head, seq, self._digest(run_id, seq, data), checkpoint, lease.ttl
            )
            moved, moved_version = await self._move_head(lease, _unsettled(changes))
            lease = replace(
                lease,
                version=moved_version,
                deadline=start + lease.ttl * 0.9,
                head_seq=seq,
                head=moved,
            )
            await self._put_checkpoint(run_id, seq, data)
            if changes["status"] != moved["status"]:  # settled only once the checkpoint is stored
                moved, moved_version = await self._move_head(lease, {"status": changes["status"]})
                lease = replace(lease, version=moved_version, head=moved)
            return checkpoint, lease
        for _ in range(64):
            current = await self._read_head(run_id)
            if current is None:
                base: dict[str, Any] = {"owner": "", "epoch": 0, "expires": 0.0, "seq": 0}
                version = None
            else:
                base, version = current
            seq = base["seq"] + 1
            parent = str(base["seq"]) if base["seq"] else None
            checkpoint = self._checkpoint(
                run_id, seq, status, state, pending, output, error, metadata, parent, steps
            )
            data = self.encode_checkpoint(checkpoint)
            if base["expires"] > time.time():
                left = base["expires"] - time.time()
                raise RunBusy(
                    f"run {run_id!r} is owned by {base['owner']}; save through its lease",
                    retry_after=left,
                )
            digest = self._digest(run_id, seq, data)
            changes = self._head_changes(base, seq, digest, checkpoint, None)
            head = {**base, **_unsettled(changes)}
            try:
                version = await self._write_head(run_id, head, version)
            except (PreconditionFailed, OutcomeUnknown):
                again = await self._read_head(run_id)
                if again is None or again[0] != head:
                    continue  # another writer moved the head: take the next number
                version = again[1]
            await self._put_checkpoint(run_id, seq, data)
            if changes["status"] != head["status"]:
                await self._settle_status(run_id, head, version, changes["status"])
            return checkpoint, None
        raise OutcomeUnknown(f"run {run_id!r}: the head kept moving; no checkpoint was saved")

    async def _settle_status(
        self, run_id: str, head: dict[str, Any], version: str, status: str
    ) -> None:
        """Set the head's status once its checkpoint is stored (a save without a lease).

        A compare-and-swap from ``version``; after a conflict the head is read
        again, and the status set only while the head still names the same
        checkpoint (a later save, or ``prune`` raising the floor, may have moved it).
        """
        seq = head["seq"]
        for _ in range(16):
            try:
                await self._write_head(run_id, {**head, "status": status}, version)
                return
            except (PreconditionFailed, OutcomeUnknown):
                pass
            current = await self._read_head(run_id)
            if current is None or current[0]["seq"] != seq or current[0].get("status") == status:
                return
            head, version = current
        raise OutcomeUnknown(
            f"run {run_id!r}: the head kept moving; checkpoint {seq} is stored, but the head "
            f"does not say {status!r} yet"
        )

    @staticmethod
    def _head_changes(
        base: Mapping[str, Any], seq: int, digest: str, checkpoint: Checkpoint, ttl: float | None
    ) -> dict[str, Any]:
        """The head fields that a new checkpoint sets (with its digest, and its parent's)."""
        changes: dict[str, Any] = {
            "seq": seq,
            "digest": digest,
            "pdigest": base.get("digest", "") if base.get("seq") == seq - 1 else "",
            "status": checkpoint.status,
            "t": checkpoint.created_at,
            "meta": dict(checkpoint.metadata),  # for list_runs(metadata=...), one get per run
        }
        if ttl is not None:
            changes["expires"] = time.time() + ttl
        return changes

    def _digest(self, run_id: str, seq: int, data: bytes) -> str:
        """The digest of checkpoint ``seq`` that the head keeps: of its content, so that
        re-encrypting it (``rekey``) keeps it (see `content_digest`).
        """
        key = self._checkpoint_key(run_id, seq)
        return content_digest(data, key=key, encryption=self.codec.encryption)

    async def _put_checkpoint(self, run_id: str, seq: int, data: bytes) -> None:
        key = self._checkpoint_key(run_id, seq)
        observe.note_size(len(data))
        stored = await self._create(key, data)
        log.debug("run %r: checkpoint %d saved (%d bytes)", run_id, seq, len(data))
        if stored is not None and stored.data != data:
            raise CheckpointCorrupted(
                f"checkpoint {seq} of run {run_id!r} ({key!r}) holds other bytes than the "
                "head names: it was written by something other than this run's owner"
            )

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
        """The newest checkpoint of the run, or None: two gets, however many exist.

        The head names the newest checkpoint and its digest. If that checkpoint
        is not there yet (its writer is between moving the head and writing it,
        or crashed there), the previous one is returned, checked against the
        digest the head keeps of it. A run pruned to no checkpoint returns None
        (its status stays readable through `run_info`).

        Raises:
            CheckpointCorrupted: the stored checkpoint is not the one the head
                names (replaced by other bytes, or rolled back).
        """
        current = await self._read_head(run_id)
        if current is None:  # no head (data of an older layout): the newest listed
            async for key in self.storage.list(f"{self.run_prefix(run_id)}c/", limit=1):
                data, _ = await self.storage.get(key)
                return self.decode_checkpoint(data, key=key)
            return None
        head = current[0]
        seq = head["seq"]
        if seq <= head.get("floor", 0):
            return None
        for number, digest in ((seq, head.get("digest")), (seq - 1, head.get("pdigest"))):
            if number <= head.get("floor", 0):
                break
            key = self._checkpoint_key(run_id, number)
            try:
                data, _ = await self.storage.get(key)
            except NotFound:
                continue  # not written yet, or its writer crashed: the previous one
            if digest and self._digest(run_id, number, data) != digest:
                raise CheckpointCorrupted(
                    f"checkpoint {number} of run {run_id!r} ({key!r}) is not the one the "
                    "run head names (its digest differs): it was replaced or rolled back"
                )
            return self.decode_checkpoint(data, key=key)
        # Neither is there: fall back to the newest listed checkpoint older than those.
        after = self._checkpoint_key(run_id, max(seq - 1, 1))
        async for key in self.storage.list(
            f"{self.run_prefix(run_id)}c/", start_after=after, limit=1
        ):
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

    async def checkpoints_older_than(self, run_id: str, older_than: float | timedelta) -> list[str]:
        """Ids of the run's checkpoints saved more than ``older_than`` ago, newest first.

        What ``prune(run_id, older_than=...)`` deletes. Checkpoints are numbered
        in the order they are saved, so the boundary is found by bisection: one
        listing and about log2(checkpoints) gets (one get, the head, when the
        newest checkpoint is old already).

        Raises:
            ValueError: ``older_than`` is not a non-negative number of seconds
                or a ``timedelta``.
        """
        cutoff = time.time() - _seconds(older_than, "older_than")
        prefix = f"{self.run_prefix(run_id)}c/"
        keys = [key async for key in self.storage.list(prefix)]
        old = await self._older(run_id, keys, cutoff)
        return [str(_MAX_SEQ - int(key[len(prefix) :], 16)) for key in old]

    async def _older(self, run_id: str, keys: list[str], cutoff: float) -> list[str]:
        """The tail of ``keys`` (newest first) saved before ``cutoff``."""
        if not keys:
            return []
        current = await self._read_head(run_id)
        if current is not None and 0 < current[0].get("t", 0.0) < cutoff:
            return keys  # the newest checkpoint is old: so is every other one
        low, high = 0, len(keys)  # keys[:low] are new, keys[high:] old
        while low < high:
            middle = (low + high) // 2
            try:
                data, _ = await self.storage.get(keys[middle])
                created = self.decode_checkpoint(data, key=keys[middle]).created_at
            except NotFound:
                created = 0.0  # deleted meanwhile: as old as can be
            if created < cutoff:
                high = middle
            else:
                low = middle + 1
        return keys[low:]

    async def prune(
        self,
        run_id: str,
        *,
        keep_last: int | None = None,
        older_than: float | timedelta | None = None,
    ) -> int:
        """Delete old checkpoints of the run; return how many went.

        Give one of ``keep_last`` (delete all but the newest ``keep_last``) or
        ``older_than`` (seconds, or a ``timedelta``: delete every checkpoint
        saved longer ago; see `checkpoints_older_than`). Step records
        stay, and the run head keeps the number, status and time of the newest
        checkpoint, so `run_info` still tells how a run ended once every
        checkpoint is gone.

        Raises:
            ValueError: neither or both given, or a bad value.
        """
        if (keep_last is None) == (older_than is None):
            raise ValueError("prune takes one of keep_last or older_than")
        prefix = f"{self.run_prefix(run_id)}c/"
        if older_than is not None:
            cutoff = time.time() - _seconds(older_than, "older_than")
            keys = [key async for key in self.storage.list(prefix)]
            old = await self._older(run_id, keys, cutoff)
        elif not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0:
            raise ValueError(f"keep_last must be a non-negative int, not {keep_last!r}")
        else:
            old = [key async for key in self.storage.list(prefix)][keep_last:]
        if not old:
            return 0
        newest_gone = _MAX_SEQ - int(old[0][len(prefix) :], 16)
        await self._raise_floor(run_id, newest_gone)
        return await delete_many(self.storage, old)

    async def _raise_floor(self, run_id: str, floor: int) -> None:
        """Record in the head that checkpoints up to ``floor`` are pruned on purpose."""
        for _ in range(16):
            current = await self._read_head(run_id)
            if current is None or current[0].get("floor", 0) >= floor:
                return
            head, version = current
            try:
                await self._write_head(run_id, {**head, "floor": floor}, version)
                return
            except (PreconditionFailed, OutcomeUnknown):
                continue  # the owner moved the head meanwhile: read it again
        raise OutcomeUnknown(f"run {run_id!r}: the head kept moving; nothing was pruned")


def _unsettled(changes: dict[str, Any]) -> dict[str, Any]:
    """The head changes of a new checkpoint before it is stored: its status stays "running".

    The head moves first (the compare-and-swap is the fence), then the
    checkpoint is written. A worker killed between the two leaves a head that
    names a checkpoint that is not there; if the head already said
    ``"completed"`` (or paused, or failed), the run would read as ended with no
    output, and no pool would take it. So the head says ``"running"`` until the
    checkpoint is stored, and only then the checkpoint's own status: killed in
    between, the run is an abandoned running run, which a pool resumes.
    """
    return {**changes, "status": "running"}


def _seconds(value: float | timedelta, name: str) -> float:
    """``value`` (seconds, or a ``timedelta``) as a non-negative finite number of seconds."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ValueError(f"{name} must be seconds (a number) or a timedelta, not {value!r}")
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"{name} must be a non-negative, finite duration, not {value!r}")
    return seconds


async def _gather_all(coros: list[Awaitable[T]]) -> list[T]:
    """Await every coroutine and return their results in order.

    On the first error (or a cancellation) the others are cancelled and awaited,
    then that error is raised as it is: never an ``ExceptionGroup``, no task left
    running, no exception left unretrieved.
    """
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise

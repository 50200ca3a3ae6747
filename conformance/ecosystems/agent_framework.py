"""The conformance groups for an agent-framework ``CheckpointStorage``.

A storage joins with one fixture and one empty class::

    class TestMyStorage(CheckpointStorageConformance):
        @pytest.fixture
        def checkpoint_storage_factory(self):
            return my_storage_factory  # or an EcosystemTarget

Groups (each a mixin, all in `CheckpointStorageConformance`):
``semantics`` (the ``CheckpointStorage`` protocol as agent-framework
documents it), ``cancellation``, ``concurrency``, ``isolation``,
``durability``, ``hygiene`` (as for savers, see
`checkpointkit.conformance.ecosystems.langgraph`) and ``scenarios``:
agent-framework's own runner (a functional workflow and a graph workflow)
over the storage wrapped in three save styles (inline, task-spawning,
gather-based).

Where agent-framework's runner fails a scenario whatever the storage, the
test is marked as an expected failure whose reason starts with ``the runner
failed, not the storage`` and gives the evidence: the same scenario on
agent-framework's own ``InMemoryCheckpointStorage`` fails too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum
from functools import partial
from typing import Any, ClassVar, Final, Literal

import pytest

try:
    from agent_framework import (
        Executor,
        InMemoryCheckpointStorage,
        RunContext,
        WorkflowBuilder,
        WorkflowCheckpoint,
        WorkflowCheckpointException,
        WorkflowContext,
        WorkflowEvent,
        WorkflowMessage,
        handler,
        step,
        workflow,
    )
    from agent_framework._feature_stage import ExperimentalWarning
    from agent_framework._workflows._runner_context import MessageType
except ModuleNotFoundError as _exc:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        f"the agent-framework groups need agent-framework ({_exc}); "
        'install it with: pip install "checkpointkit[agent-framework]"',
        name=_exc.name,
    ) from _exc

from ..checks import fail, joined
from ..fixtures import slow
from ..settings import NOT_EXERCISED
from ..together import together
from .coverage import STORAGE_READS_AFTER, implemented, lengths, writes_before
from .harness import (
    LENGTHS_HINT,
    PAGES_HINT,
    SIZES_HINT,
    VALUE_SHAPES,
    EcosystemFixtures,
    cancel_a_read_then_read_again,
    cancel_at_each_step,
    cancel_while_held,
    counted,
    crash_writer,
    finish,
    held,
    judge,
    library,
    need,
    no_hold_reason,
    read_back_wrong,
    same_value,
    sized_values,
    threads_running,
)
from .ids import ID_GROUPS
from .target import EcosystemTarget

__all__ = [
    "SAVE_STYLES",
    "CheckpointStorageCancellationTests",
    "CheckpointStorageConcurrencyTests",
    "CheckpointStorageConformance",
    "CheckpointStorageDurabilityTests",
    "CheckpointStorageFixtures",
    "CheckpointStorageHygieneTests",
    "CheckpointStorageIsolationTests",
    "CheckpointStorageScenarioTests",
    "CheckpointStorageSemanticsTests",
    "StyledStorage",
    "checkpoint",
    "save_one",
]

HELD_SAVE_WAIT: Final = 10.0
"""Seconds a save that the backend held may take to end once released."""

SaveStyle = Literal["inline", "task-spawning", "gather"]
SAVE_STYLES: tuple[SaveStyle, ...] = ("inline", "task-spawning", "gather")


def checkpoint(
    workflow_name: str, state: dict[str, Any], *, at: datetime | None = None
) -> WorkflowCheckpoint:
    """A new checkpoint of ``workflow_name`` holding ``state`` (a fresh id, now or ``at``)."""
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash="conformance",
        checkpoint_id=str(uuid.uuid4()),
        timestamp=(at or datetime.now(UTC)).isoformat(),
        state=state,
    )


async def save_one(storage: Any, workflow_name: str, state: dict[str, Any]) -> str:
    """Save a new checkpoint of ``state``; its id."""
    return str(await storage.save(checkpoint(workflow_name, state)))


async def load_or_none(storage: Any, checkpoint_id: str) -> WorkflowCheckpoint | None:
    """``load``, or None when it raises ``WorkflowCheckpointException``."""
    try:
        return await storage.load(checkpoint_id)  # type: ignore[no-any-return]
    except WorkflowCheckpointException:
        return None


def every_field(workflow_name: str, checkpoint_id: str, n: int) -> WorkflowCheckpoint:
    """A checkpoint with every field set, to values that differ for each ``n`` (1, 2...).

    The values are of the kinds agent-framework's runner stores and its encoding
    (``encode_checkpoint_value``) keeps: JSON values as they are, and tuples, sets,
    bytes, datetimes, decimals, UUIDs, integers past 64 bits, enums, types and the
    framework's own objects (a ``WorkflowMessage`` in flight, a pending
    ``request_info`` event) pickled. Dictionary keys are strings: the encoding makes
    every key a string.
    """
    at = datetime.now(UTC) + timedelta(seconds=n)
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash=f"graph-{n}-{uuid.uuid4().hex}",
        checkpoint_id=checkpoint_id,
        previous_checkpoint_id=str(uuid.uuid4()),
        timestamp=at.isoformat(),
        messages={
            f"executor-{n}": [
                WorkflowMessage(
                    data={"n": n, "pair": (n, f"{n}")},
                    source_id=f"executor-{n}",
                    target_id=f"executor-{n + 1}",
                    type=MessageType.RESPONSE if n % 2 else MessageType.STANDARD,
                    trace_contexts=[{"traceparent": f"00-{n:032x}-{n:016x}-01"}],
                    source_span_ids=[f"span-{n}"],
                )
            ]
        },
        state={
            "text": f"v{n} \u00e9 \U0001f389",
            "int": n,
            "big": 2**70 + n,
            "float": n + 0.5,
            "bool": n % 2 == 1,
            "none": None,
            "list": [n, "two", [3.0, None]],
            "tuple": (n, "two"),
            "set": {n, n + 1},
            "frozenset": frozenset({"a", f"{n}"}),
            "bytes": bytes([0, 255, n]),
            "datetime": datetime(2025, 1, n, 12, 30, 45, 123456, tzinfo=UTC),
            "date": date(2025, 1, n),
            "timedelta": timedelta(seconds=n),
            "decimal": Decimal(f"{n}.10"),
            "uuid": uuid.UUID(int=n),
            "nested": {"deep": {"list": [{"k": n}]}},
            "_executor_state": {f"executor-{n}": {"count": n}},
        },
        pending_request_info_events={
            f"request-{n}": WorkflowEvent.request_info(
                f"request-{n}", f"executor-{n}", {"question": f"approve {n}?"}, bool
            )
        },
        iteration_count=2 + n,
        metadata={"superstep": 2 + n, "tags": [f"t{n}"], "at": at},
        version=f"1.{n}0",  # "1.10": a version read as a number is "1.1"
    )


def _plain(value: Any) -> Any:
    """``value`` as nested tuples that compare equal when the values are the same, types
    included (``True`` is not ``1``, a tuple not a list), objects by their fields."""
    if isinstance(value, Enum):
        return ("enum", type(value).__qualname__, value.name)
    if isinstance(value, type):
        return ("type", f"{value.__module__}:{value.__qualname__}")
    if value is None or isinstance(value, str | int | float):
        return (type(value).__name__, value)
    if isinstance(value, dict):
        items = [(_plain(k), _plain(v)) for k, v in value.items()]
        return (type(value).__qualname__, tuple(sorted(items, key=repr)))
    if isinstance(value, list | tuple):
        return (type(value).__qualname__, tuple(_plain(v) for v in value))
    if isinstance(value, set | frozenset):
        return (type(value).__qualname__, tuple(sorted((_plain(v) for v in value), key=repr)))
    if dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return (type(value).__qualname__, _plain(fields))
    if hasattr(value, "__dict__"):
        return (type(value).__qualname__, _plain(vars(value)))
    return (type(value).__qualname__, repr(value))


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def differences(expected: WorkflowCheckpoint, got: WorkflowCheckpoint) -> list[str]:
    """The fields (and keys of dictionary fields) in which ``got`` is not ``expected``."""
    wrong: list[str] = []
    for f in dataclasses.fields(WorkflowCheckpoint):
        want, have = getattr(expected, f.name), getattr(got, f.name)
        if _plain(want) == _plain(have):
            continue
        if isinstance(want, dict) and isinstance(have, dict) and want and have:
            for key in sorted({*want, *have}, key=repr):
                if key not in have:
                    wrong.append(f"{f.name}[{key!r}] missing")
                elif key not in want:
                    wrong.append(f"{f.name}[{key!r}] not saved, {_short(have[key])}")
                elif _plain(want[key]) != _plain(have[key]):
                    wrong.append(f"{f.name}[{key!r}] {_short(have[key])}, not {_short(want[key])}")
        else:
            wrong.append(f"{f.name} {_short(have)}, not {_short(want)}")
    return wrong


# -- save styles and hangs ----------------------------------------------------------------------
class StyledStorage:
    """Delegates to ``inner``; ``save`` runs in one of three styles, and can be held.

    Args:
        inner: the storage under test.
        style: ``inline`` (awaited directly), ``task-spawning`` (in a task the
            storage creates and awaits) or ``gather`` (gathered with a mirror
            copy into an in-memory storage).

    Attributes:
        hang: while true, a save waits for `release` (or its cancel).
        gate: when set, the next save signals `entered` and waits for
            `release` before going on.
    """

    def __init__(self, inner: Any, style: SaveStyle = "inline") -> None:
        self.inner = inner
        self.style = style
        self.mirror = InMemoryCheckpointStorage()
        self.hang = False
        self.gate = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def _save(self, cp: WorkflowCheckpoint) -> str:
        if self.hang:
            self.entered.set()
            await self.release.wait()
        if self.gate:
            self.gate = False
            self.entered.set()
            await self.release.wait()
        return str(await self.inner.save(cp))

    async def save(self, cp: WorkflowCheckpoint) -> str:
        if self.style == "task-spawning":
            return await asyncio.ensure_future(self._save(cp))
        if self.style == "gather":
            first, _ = await asyncio.gather(self._save(cp), self.mirror.save(cp))
            return first
        return await self._save(cp)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        return await self.inner.load(checkpoint_id)  # type: ignore[no-any-return]

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return await self.inner.list_checkpoints(workflow_name=workflow_name)  # type: ignore[no-any-return]

    async def delete(self, checkpoint_id: str) -> bool:
        return bool(await self.inner.delete(checkpoint_id))

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return await self.inner.get_latest(workflow_name=workflow_name)  # type: ignore[no-any-return]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return await self.inner.list_checkpoint_ids(workflow_name=workflow_name)  # type: ignore[no-any-return]


# -- fixtures --------------------------------------------------------------------------------------
class CheckpointStorageFixtures(EcosystemFixtures):
    """Fixtures of the storage groups; override ``checkpoint_storage_factory``."""

    @pytest.fixture
    def checkpoint_storage_factory(self) -> EcosystemTarget | Callable[..., Any]:
        """The storage class or factory (or an `EcosystemTarget`); override this.

        Raises:
            NotImplementedError: until a subclass overrides it.
        """
        raise NotImplementedError(
            "override the checkpoint_storage_factory fixture: return a storage class, a factory "
            "of storages or an EcosystemTarget"
        )

    @pytest.fixture
    def eco_target(self, checkpoint_storage_factory: Any) -> EcosystemTarget:
        """The target made from ``checkpoint_storage_factory``."""
        if isinstance(checkpoint_storage_factory, EcosystemTarget):
            return checkpoint_storage_factory
        return EcosystemTarget("agent-framework", checkpoint_storage_factory)

    @pytest.fixture
    def name(self) -> str:
        """A workflow name of its own for the test."""
        return f"wf-{uuid.uuid4().hex[:12]}"


# -- semantics -------------------------------------------------------------------------------------
class CheckpointStorageSemanticsTests(CheckpointStorageFixtures):
    """The ``CheckpointStorage`` protocol, as agent-framework documents it."""

    conformance_group: ClassVar[str | None] = "semantics"

    async def test_save_then_load_returns_an_equal_checkpoint(
        self, instance: Any, name: str
    ) -> None:
        cp = checkpoint(name, {"k": [1, 2], "nested": {"a": "b"}})
        returned = await instance.save(cp)
        if returned != cp.checkpoint_id:
            fail(
                "save returns the checkpoint's id",
                expected=cp.checkpoint_id,
                observed=f"{returned!r}",
            )
        got = await load_or_none(instance, cp.checkpoint_id)
        if got is None or got.to_dict() != cp.to_dict():
            fail(
                "load returns the checkpoint that was saved",
                expected=f"{cp.to_dict()}",
                observed="nothing" if got is None else f"{got.to_dict()}",
            )

    async def test_load_of_a_missing_id_raises_workflow_checkpoint_exception(
        self, instance: Any
    ) -> None:
        try:
            await instance.load(str(uuid.uuid4()))
        except WorkflowCheckpointException:
            return
        except Exception as exc:
            fail(
                "load of an id never saved raises WorkflowCheckpointException",
                expected="WorkflowCheckpointException",
                observed=f"{type(exc).__name__}: {exc}",
            )
        fail(
            "load of an id never saved raises WorkflowCheckpointException",
            expected="an error",
            observed="it returned",
        )

    async def test_listings_filter_by_workflow(self, instance: Any, name: str) -> None:
        mine = [await save_one(instance, name, {"i": i}) for i in range(3)]
        for other in (f"{name}-other", f"{name}0", f"{name}/x"):  # names it is a prefix of
            await save_one(instance, other, {"i": 9})
        ids = await instance.list_checkpoint_ids(workflow_name=name)
        listed = [c.checkpoint_id for c in await instance.list_checkpoints(workflow_name=name)]
        if sorted(ids) != sorted(mine) or sorted(listed) != sorted(mine):
            fail(
                "list_checkpoint_ids and list_checkpoints give exactly the workflow's checkpoints",
                expected=f"{sorted(mine)}",
                observed=f"ids {sorted(ids)}, checkpoints {sorted(listed)}",
            )

    async def test_delete_returns_whether_it_existed(self, instance: Any, name: str) -> None:
        checkpoint_id = await save_one(instance, name, {})
        first, second = await instance.delete(checkpoint_id), await instance.delete(checkpoint_id)
        if (first, second) != (True, False) or await load_or_none(
            instance, checkpoint_id
        ) is not None:
            fail(
                "delete removes the checkpoint and says whether it existed",
                expected="True, then False, then load fails",
                observed=f"{first}, then {second}",
            )

    async def test_get_latest_is_the_newest_by_timestamp(self, instance: Any, name: str) -> None:
        if await instance.get_latest(workflow_name=name) is not None:
            fail(
                "get_latest of a workflow without checkpoints",
                expected="None",
                observed="a checkpoint",
            )
        now = datetime.now(UTC)
        order = [2, 0, 3, 1]
        ids = {}
        for i in order:
            cp = checkpoint(name, {"i": i}, at=now + timedelta(seconds=i))
            ids[i] = await instance.save(cp)
        # newer checkpoints of workflows whose names start with this one's
        for other in (f"{name}-2", f"{name}0", f"{name}/x"):
            await instance.save(checkpoint(other, {"other": other}, at=now + timedelta(hours=1)))
        latest = await instance.get_latest(workflow_name=name)
        if latest is None or latest.checkpoint_id != ids[3]:
            fail(
                "get_latest returns the checkpoint with the newest timestamp, the workflow's own",
                expected=f"{ids[3]} (saved second to last; newer ones are of the workflows "
                f"{name}-2, {name}0 and {name}/x)",
                observed="None" if latest is None else latest.checkpoint_id,
                detail="match the workflow name whole, never as a prefix",
            )

    async def test_saving_an_id_again_replaces_it(self, instance: Any, name: str) -> None:
        """A save of an existing id replaces that checkpoint: under the same workflow name,
        and under another one (a store keyed by workflow and id keeps two records)."""
        cp = checkpoint(name, {"v": 1})
        await instance.save(cp)
        cp.state = {"v": 2}
        await instance.save(cp)
        got = await load_or_none(instance, cp.checkpoint_id)
        ids = await instance.list_checkpoint_ids(workflow_name=name)
        if got is None or got.state != {"v": 2} or ids.count(cp.checkpoint_id) != 1:
            fail(
                "saving a checkpoint id again replaces it",
                expected="state {'v': 2}, listed once",
                observed=f"{None if got is None else got.state}, "
                f"listed {ids.count(cp.checkpoint_id)} times",
            )
        other = f"{name}-moved"
        cp.workflow_name, cp.state = other, {"v": 3}
        await instance.save(cp)
        got = await load_or_none(instance, cp.checkpoint_id)
        before = await instance.list_checkpoint_ids(workflow_name=name)
        after = await instance.list_checkpoint_ids(workflow_name=other)
        latest = await instance.get_latest(workflow_name=name)
        if (
            got is None
            or (got.workflow_name, got.state) != (other, {"v": 3})
            or cp.checkpoint_id in before
            or after.count(cp.checkpoint_id) != 1
            or _id(latest) == cp.checkpoint_id
        ):
            fail(
                "saving a checkpoint id again under another workflow name replaces it",
                expected=f"load to give workflow {other!r} and state {{'v': 3}}, the id listed "
                f"once under {other!r} and no longer under {name!r}",
                observed=f"load gave {None if got is None else (got.workflow_name, got.state)}"
                f", listed {before.count(cp.checkpoint_id)} times under {name!r} and "
                f"{after.count(cp.checkpoint_id)} under {other!r}, and get_latest of {name!r} "
                f"{'is' if _id(latest) == cp.checkpoint_id else 'is not'} it",
                detail="a checkpoint id names one checkpoint whatever its workflow: key the "
                "record by the id alone (a store partitioned by workflow name must delete the "
                "record in the old partition)",
            )

    async def test_every_field_comes_back_from_every_read(self, instance: Any, name: str) -> None:
        """A checkpoint with every field set (`every_field`), read back by ``load``,
        ``get_latest`` and ``list_checkpoints``; then the same id saved again with every
        field changed (its workflow name too), read back again."""
        checkpoint_id = str(uuid.uuid4())
        wrong: list[str] = []
        for n, when, workflow in (
            (1, "after save", name),
            (2, "after saving the id again", f"{name}-again"),
        ):
            cp = every_field(workflow, checkpoint_id, n)
            await instance.save(cp)
            listed = [
                c
                for c in await instance.list_checkpoints(workflow_name=workflow)
                if c.checkpoint_id == checkpoint_id
            ]
            for read, got in (
                ("load", await load_or_none(instance, checkpoint_id)),
                ("get_latest", await instance.get_latest(workflow_name=workflow)),
                ("list_checkpoints", listed[0] if len(listed) == 1 else None),
            ):
                if got is None:
                    wrong.append(
                        f"{read} {when}: {'listed ' + str(len(listed)) if listed else 'nothing'}"
                    )
                    continue
                found = differences(cp, got)
                if found:
                    wrong.append(f"{read} {when}: {joined(found, 4)}")
        if wrong:
            fail(
                "every field of a checkpoint comes back as saved, from every read",
                expected="load, get_latest and list_checkpoints each to give the checkpoint "
                "whole (workflow_name, graph_signature_hash, previous_checkpoint_id, "
                "timestamp, messages, state, pending_request_info_events, iteration_count, "
                "metadata, version), also after the id is saved again with every field changed",
                observed=" | ".join(wrong),
                detail="store checkpoint.to_dict() whole, encoded with agent-framework's "
                "encode_checkpoint_value (it keeps tuples, sets, datetimes and objects) and "
                "decoded with decode_checkpoint_value, not json.dumps; a save of an existing "
                "id replaces every field; list_checkpoints gives whole checkpoints, as load does",
            )

    async def test_deleting_a_checkpoint_keeps_the_rest_of_its_chain(
        self, instance: Any, name: str
    ) -> None:
        """Three checkpoints linked by ``previous_checkpoint_id``, as the runner links them;
        deleting the oldest (pruning a workflow's history) leaves the other two, and the
        newest is still the latest."""
        now = datetime.now(UTC)
        chain: list[WorkflowCheckpoint] = []
        for i in range(3):
            cp = checkpoint(name, {"i": i}, at=now + timedelta(seconds=i))
            cp.previous_checkpoint_id = chain[-1].checkpoint_id if chain else None
            await instance.save(cp)
            chain.append(cp)
        await instance.delete(chain[0].checkpoint_id)
        left = [c.checkpoint_id for c in chain[1:]]
        ids = await instance.list_checkpoint_ids(workflow_name=name)
        got = [await load_or_none(instance, c) for c in left]
        loaded = [_id(g) for g in got]
        links = [g.previous_checkpoint_id for g in got if g is not None]
        saved_links = [c.previous_checkpoint_id for c in chain[1:]]
        latest = await instance.get_latest(workflow_name=name)
        if (
            sorted(ids) != sorted(left)
            or loaded != left
            or _id(latest) != left[-1]
            or links != saved_links
        ):
            fail(
                "deleting a checkpoint leaves the checkpoints that name it as their previous "
                "one, each with its previous_checkpoint_id",
                expected=f"{left} listed and loaded (previous ids {saved_links}), and "
                f"{left[-1]} the latest, after the oldest of the chain "
                f"({chain[0].checkpoint_id}) was deleted",
                observed=f"listed {sorted(ids)}, loaded {[i for i in loaded if i]} (previous "
                f"ids {links}), latest {_id(latest)}",
                detail="previous_checkpoint_id is a name, not a reference the store enforces: "
                "no ON DELETE CASCADE (nor SET NULL) on it",
            )

    async def test_latest_is_the_newest_to_the_microsecond(self, instance: Any, name: str) -> None:
        """Three checkpoints 300 µs apart, in one millisecond of one second, the newest saved
        first and holding the smallest id (a runner's supersteps of quick executors are that
        close): ``get_latest`` gives the newest. A storage that orders by a timestamp kept
        to the millisecond or the second gives one of the others (the greatest id, or the
        one saved last)."""
        base = datetime.now(UTC).replace(microsecond=0)
        made = []
        for n, prefix in enumerate(("c", "b", "a")):
            cp = checkpoint(name, {"n": n}, at=base + timedelta(microseconds=100 + 300 * n))
            cp.checkpoint_id = f"{prefix}-{cp.checkpoint_id}"
            made.append(cp)
        for cp in (made[2], made[0], made[1]):  # the newest first, the middle one last
            await instance.save(cp)
        latest = await instance.get_latest(workflow_name=name)
        if _id(latest) != made[2].checkpoint_id:
            fail(
                "get_latest gives the checkpoint with the newest timestamp, to the microsecond",
                expected=f"{made[2].checkpoint_id} ({made[2].timestamp}), of three 300 µs apart",
                observed=f"{_id(latest)} ({latest.timestamp if latest else None})",
                detail="order by the whole timestamp (a datetime with microseconds, or the ISO "
                "text of one offset), not by a millisecond score, a second-precision column "
                "or the order of saves; break no tie by checkpoint id",
            )

    async def test_latest_is_the_newest_whatever_its_utc_offset(
        self, instance: Any, name: str
    ) -> None:
        """Three checkpoints whose timestamps are written with different UTC offsets (a
        ``WorkflowCheckpoint``'s ``timestamp`` is any ISO 8601 text: one made on a host
        that writes its local offset, or ``Z``): ``get_latest`` gives the newest instant,
        as agent-framework's own storages do (``max`` by ``datetime.fromisoformat``), and
        ``load`` gives each timestamp back as saved. The oldest holds the greatest text
        (``+02:00``), the newest the least (``-05:00``): a storage that orders by the
        text, or by the wall-clock time with the offset dropped, gives the oldest."""
        base = datetime.now(UTC).replace(microsecond=0)
        stamps = {
            "oldest": (base - timedelta(minutes=30)).astimezone(timezone(timedelta(hours=2))),
            "middle": base,
            "newest": (base + timedelta(minutes=45)).astimezone(timezone(timedelta(hours=-5))),
        }
        made: dict[str, WorkflowCheckpoint] = {}
        for which, at in stamps.items():
            cp = checkpoint(name, {"which": which})
            cp.timestamp = at.isoformat().replace("+00:00", "Z")
            made[which] = cp
            await instance.save(cp)
        latest = await instance.get_latest(workflow_name=name)
        wrong: list[str] = []
        if _id(latest) != made["newest"].checkpoint_id:
            given = next((w for w, c in made.items() if c.checkpoint_id == _id(latest)), "no")
            wrong.append(f"get_latest gave the {given} checkpoint")
        for which, cp in made.items():
            got = await load_or_none(instance, cp.checkpoint_id)
            if got is None or got.timestamp != cp.timestamp:
                wrong.append(
                    f"load of the {which}: timestamp {None if got is None else got.timestamp!r}"
                )
        if wrong:
            fail(
                "get_latest gives the newest instant, whatever UTC offset each timestamp is "
                "written with",
                expected=f"{made['newest'].checkpoint_id} ({made['newest'].timestamp}), of "
                f"{', '.join(c.timestamp for c in made.values())}; each timestamp loaded as saved",
                observed="; ".join(wrong),
                detail="order by the instant (datetime.fromisoformat, or the timestamp "
                "converted to UTC in a sort key of its own), not by the ISO text or a "
                "wall-clock time without its offset; store the text as given",
            )


# -- cancellation ----------------------------------------------------------------------------------
class CheckpointStorageCancellationTests(CheckpointStorageFixtures):
    """A cancelled save ends promptly, lands never after, and leaves the storage healthy."""

    conformance_group: ClassVar[str | None] = "cancellation"

    async def _cancel_held_save(
        self,
        target: EcosystemTarget,
        location: str | None,
        name: str,
        bound: float,
        watch: Callable[[str], Awaitable[None]] | None = None,
    ) -> tuple[Any, str, bool]:
        """Cancel a save while held, release, then save again on the same instance.

        With ``watch``, a cancelled save's checkpoint is watched (``watch(its id)``) once
        the hold is released, while the instance is still open: a write that goes on in a
        thread or a task may land then, and not once the instance is closed.

        Returns the outcome, the cancelled checkpoint's id and whether the next
        save got its own answer.
        """
        async with held(target, location) as h:
            need(h is not None, no_hold_reason(target))
            assert h is not None
            cp = checkpoint(name, {"v": "cancelled"})
            outcome = await cancel_while_held(
                lambda: h.instance.save(cp), wait=max(5.0, 10 * bound)
            )
            await h.release()
            await finish(outcome.task)
            if watch is not None and outcome.result == "cancelled":
                await watch(cp.checkpoint_id)
            next_id = await save_one(h.instance, name, {"v": "next"})
            got = await load_or_none(h.instance, next_id)
        return outcome, cp.checkpoint_id, got is not None and got.state == {"v": "next"}

    async def test_cancelled_save_ends_promptly_while_held(
        self, eco_target: EcosystemTarget, location: str | None, name: str, cancel_bound: float
    ) -> None:
        outcome, _, _ = await self._cancel_held_save(eco_target, location, name, cancel_bound)
        if outcome.seconds > cancel_bound or outcome.result != "cancelled":
            fail(
                "a cancelled save must raise CancelledError promptly while the backend is held",
                expected=f"CancelledError within {cancel_bound:g} s",
                observed=f"the call {outcome.result} after {outcome.seconds:.2f} s",
                detail="do not catch CancelledError (re-raise it after cleanup), and do not "
                "wait for the backend inside a shield or a thread join",
            )

    async def test_cancelled_save_does_not_land_later(
        self,
        eco_target: EcosystemTarget,
        location: str | None,
        name: str,
        cancel_bound: float,
        settle_window: float,
    ) -> None:
        need(
            location is not None,
            NOT_EXERCISED + "the factory takes no location: no second instance to watch through",
        )

        async def watch(checkpoint_id: str, when: str) -> None:
            changed = await _changes_within(
                eco_target, location, checkpoint_id, present=False, window=settle_window
            )
            if changed is not None:
                fail(
                    "a cancelled save must not land after CancelledError",
                    expected=f"checkpoint {checkpoint_id} never to appear",
                    observed=f"a second instance loaded it {changed:.2f} s after it began "
                    f"to watch, {when}",
                    detail="the write went on after the cancel (a thread, a task, bytes "
                    "already sent): wait for it before raising CancelledError, or fence it",
                )

        outcome, checkpoint_id, _ = await self._cancel_held_save(
            eco_target,
            location,
            name,
            cancel_bound,
            lambda i: watch(i, "the hold released, the cancelled instance still open"),
        )
        if outcome.result != "cancelled":
            pytest.skip(f"the cancelled save {outcome.result} (see the promptness test)")
        await watch(checkpoint_id, "the cancelled instance closed")

    async def test_saves_held_then_released_store_what_they_were_given(
        self, eco_target: EcosystemTarget, location: str | None, name: str, second: Any
    ) -> None:
        """Two saves on one instance while the backend is held, not cancelled: the first
        waits in the backend, the second behind it; the caller then changes both
        checkpoints' state, and the backend is released. Each save returns and stores
        the checkpoint as it was when save was called (a copy taken at the call, as
        ``InMemoryCheckpointStorage`` takes it), or raises: a save that returns having
        stored nothing (an error swallowed: a busy database logged and skipped) or
        stores the state as changed afterwards (encoded when its turn came) fails."""
        calls: list[tuple[WorkflowCheckpoint, asyncio.Task[Any]]] = []
        async with held(eco_target, location) as h:
            need(h is not None, no_hold_reason(eco_target))
            assert h is not None
            for n in (1, 2):
                cp = checkpoint(name, {"items": [f"first {n}"], "n": n})
                calls.append((cp, asyncio.ensure_future(h.instance.save(cp))))
                await asyncio.sleep(0.05)  # it reaches the held backend, or waits behind
            for cp, _ in calls:
                cp.state["items"].append("changed after the call")
                cp.state["n"] = -1
            await h.release()
            done, _ = await asyncio.wait([t for _, t in calls], timeout=HELD_SAVE_WAIT)
            wrong: list[str] = []
            for n, (cp, task) in enumerate(calls, 1):
                if task not in done:
                    wrong.append(f"save {n} still running {HELD_SAVE_WAIT:g} s after the release")
                    continue
                if task.cancelled() or task.exception() is not None:
                    continue  # it raised: the caller knows it did not store
                for who, reader in (("this instance", h.instance), ("another", second)):
                    got = await load_or_none(reader, cp.checkpoint_id)
                    if got is None:
                        wrong.append(f"save {n} returned, and {who} finds nothing stored")
                    elif got.state != {"items": [f"first {n}"], "n": n}:
                        wrong.append(f"save {n} stored {got.state} ({who})")
            for _, task in calls:
                await finish(task)
        if wrong:
            fail(
                "a save held by the backend, then released, stores the checkpoint as it was "
                "given, or raises",
                expected="each save to return and the checkpoint to load with the state it had "
                "when save was called, or the save to raise",
                observed=joined(wrong),
                detail="encode (or copy) the checkpoint in save before its first await, not "
                "when a worker gets to it; let an error of the backend (locked, busy) raise "
                "from save, never log it and return the id",
            )

    async def test_cancelled_delete_does_not_land_later(
        self,
        eco_target: EcosystemTarget,
        location: str | None,
        name: str,
        cancel_bound: float,
        settle_window: float,
    ) -> None:
        """A checkpoint's ``delete`` cancelled while the backend is held: once it raised
        ``CancelledError`` and the backend answers again, a second instance still loads
        the checkpoint for the whole settle window (the delete may have landed before its
        ``CancelledError``, never after)."""
        need(
            location is not None,
            NOT_EXERCISED + "the factory takes no location: no second instance to watch through",
        )
        async with eco_target.open(location=location) as setup:
            kept = await save_one(setup, name, {"v": "kept"})
        async with held(eco_target, location) as h:
            need(h is not None, no_hold_reason(eco_target))
            assert h is not None
            outcome = await cancel_while_held(
                lambda: h.instance.delete(kept), wait=max(5.0, 10 * cancel_bound)
            )
            await h.release()
            await finish(outcome.task)
            if outcome.result != "cancelled":
                pytest.skip(f"the cancelled delete {outcome.result} (see the write sweep)")
        # Held, it could not land before its CancelledError: gone now is gone later.
        changed = await _changes_within(
            eco_target, location, kept, present=True, window=settle_window
        )
        if changed is not None:
            fail(
                "a cancelled delete must not land after CancelledError",
                expected=f"checkpoint {kept} to stay",
                observed=f"a second instance no longer loaded it {changed:.2f} s after the "
                "hold was released",
                detail="the delete went on after the cancel (a thread, a task, a request "
                "already sent): wait for it before raising CancelledError, or fence it",
            )

    async def test_call_after_cancel_gets_its_own_answer(
        self, eco_target: EcosystemTarget, location: str | None, name: str
    ) -> None:
        _, _, ok = await self._cancel_held_save(eco_target, location, name, 0.5)
        if not ok:
            fail(
                "after a cancelled call, the same instance's next call must get its own answer",
                expected="the next save's checkpoint, loaded back with its values",
                observed="it is missing or has other values",
                detail="a cancelled call must leave no half-sent request or unread reply behind",
            )

    async def test_cancel_at_each_step_is_whole_or_absent(
        self, instance: Any, second: Any, name: str, settle_window: float, two_instances: bool
    ) -> None:
        made: list[WorkflowCheckpoint] = []

        def make() -> Coroutine[Any, Any, Any]:
            cp = checkpoint(name, {"n": len(made), "w": [len(made)] * 3})
            made.append(cp)
            return instance.save(cp)  # type: ignore[no-any-return]

        async def visible(k: int) -> bool:
            return await load_or_none(second, made[k].checkpoint_id) is not None

        outcomes = await cancel_at_each_step(make, steps=40, visible=visible)
        for k, outcome, _ in outcomes:
            if outcome == "swallowed":
                fail(
                    "a cancelled save must raise CancelledError",
                    expected="CancelledError",
                    observed=f"it returned normally when cancelled after {k} loop iterations",
                    detail="never swallow CancelledError: re-raise it after cleanup",
                )
            if outcome.startswith("raised"):
                fail(
                    "a cancelled save must raise CancelledError, not another error",
                    expected="CancelledError",
                    observed=f"it {outcome} when cancelled after {k} loop iterations",
                )
        await asyncio.sleep(min(settle_window, 0.5))
        for k, outcome, seen in outcomes:
            cp = made[k]
            got = await load_or_none(second, cp.checkpoint_id)
            if outcome == "completed" and got is None:
                fail(
                    "a save that returned must be stored",
                    expected=cp.checkpoint_id,
                    observed="it is missing",
                )
            if got is not None and got.state != cp.state:
                fail(
                    "a cancelled save must leave the checkpoint whole or absent",
                    expected=f"absent, or {cp.state}",
                    observed=f"{got.state} after a cancel at step {k}",
                    detail="write the checkpoint in one atomic write",
                )
            if two_instances and outcome == "cancelled" and not seen and got is not None:
                fail(
                    "a cancelled save must not land after CancelledError",
                    expected=f"checkpoint {cp.checkpoint_id}, absent when the cancel returned, "
                    "to stay absent",
                    observed=f"a second instance loaded it later (cancelled after {k} loop "
                    "iterations)",
                    detail="the write went on after the cancel (a worker thread, a task): wait "
                    "for it to end before raising CancelledError",
                )
        disagree = await _reads_disagree(second, name, [made[k] for k, _, _ in outcomes])
        if disagree:
            fail(
                "a cancelled save leaves the checkpoint whole or absent in every read: load, "
                "the listings and get_latest agree",
                expected="each checkpoint that load finds listed by list_checkpoint_ids and "
                "list_checkpoints, none listed that load does not find, and get_latest the "
                "newest that load finds",
                observed=joined(disagree),
                detail="a checkpoint kept as several writes (the data, an index, a sorted set "
                "of the workflow's) is half-saved when a cancel falls between them: write it "
                "in one atomic write (a transaction, MULTI/EXEC), or the index last and read "
                "through it only",
            )

    async def test_a_delete_cancelled_at_each_step_leaves_reads_that_agree(
        self, instance: Any, second: Any, name: str
    ) -> None:
        """A checkpoint saved, then its ``delete`` cancelled after 0, 1, 2... loop
        iterations (a new checkpoint each time): the delete may have happened or not, but
        no listing lists a checkpoint that ``load`` does not find, and ``get_latest`` is
        the newest listed. (One that loads but is listed nowhere is allowed: a delete
        that removes the listing entry first and is cancelled before the data.) A
        checkpoint kept as several records (the data, an index) and deleted data first,
        with listings read from the index alone, stays listed but cannot be loaded."""
        made: list[WorkflowCheckpoint] = []

        async def prepare(k: int) -> None:
            cp = checkpoint(name, {"k": k})
            await instance.save(cp)
            made.append(cp)

        def make() -> Coroutine[Any, Any, Any]:
            return instance.delete(made[-1].checkpoint_id)  # type: ignore[no-any-return]

        outcomes = await cancel_at_each_step(make, steps=40, prepare=prepare)
        swallowed = [k for k, outcome, _ in outcomes if outcome == "swallowed"]
        disagree = await _reads_disagree(second, name, made, unlisted_ok=True)
        if swallowed or disagree:
            fail(
                "a delete cancelled at any step raises CancelledError and never leaves a "
                "checkpoint listed that does not load",
                expected="CancelledError, then each listed checkpoint loading, and "
                "get_latest the newest listed",
                observed=joined(
                    [f"returned when cancelled after {k} loop iterations" for k in swallowed]
                    + disagree
                ),
                detail="delete a checkpoint in one atomic write, or remove it from the index "
                "first and the data last, or list only what load finds",
            )

    async def test_a_cancelled_save_of_an_existing_id_keeps_the_old_or_the_new(
        self, instance: Any, second: Any, name: str
    ) -> None:
        """A checkpoint saved, then saved again with other state and cancelled after 0, 1,
        2... loop iterations: after each cancel it loads as the last save that completed
        or as the cancelled one, never missing (a cancel that "rolls back" by deleting the
        key destroys the checkpoint it was replacing)."""
        cp = checkpoint(name, {"v": 0})
        await instance.save(cp)
        current = {"v": 0}
        attempts: list[dict[str, Any]] = []

        def make() -> Coroutine[Any, Any, Any]:
            state = {"v": len(attempts) + 1}
            attempts.append(state)
            return instance.save(dataclasses.replace(cp, state=state))  # type: ignore[no-any-return]

        wrong: list[str] = []

        async def check(k: int) -> bool:
            nonlocal current
            got = await load_or_none(second, cp.checkpoint_id)
            if got is None:
                wrong.append(f"missing after a cancel at step {k}")
                await instance.save(dataclasses.replace(cp, state=current))
                return False
            if got.state not in (current, attempts[k]):
                wrong.append(f"{got.state} after a cancel at step {k} (last saved {current})")
            current = dict(got.state)
            return got.state == attempts[k]

        await cancel_at_each_step(make, steps=40, visible=check)
        if wrong:
            fail(
                "a cancelled save of an existing id leaves the old checkpoint or the new one",
                expected="the checkpoint loaded after every cancel, as saved before or by the "
                "cancelled save",
                observed=joined(wrong),
                detail="on CancelledError, do not delete what the save was replacing: replace "
                "the checkpoint in one atomic write and leave it as that write left it",
            )


# -- concurrency -----------------------------------------------------------------------------------
class CheckpointStorageConcurrencyTests(CheckpointStorageFixtures):
    """Two instances on one workflow: nothing lost, one newest, nothing torn."""

    conformance_group: ClassVar[str | None] = "concurrency"

    async def test_two_instances_keep_every_checkpoint(
        self, instance: Any, second: Any, name: str, eco_target: EcosystemTarget
    ) -> None:
        n = eco_target.count(10)

        async def writer(storage: Any, tag: str) -> list[str]:
            ids = []
            for i in range(n):
                ids.append(await save_one(storage, name, {"v": f"{tag}{i}"}))
                await asyncio.sleep(0)
            return ids

        a, b = await together(writer(instance, "a"), writer(second, "b"))
        listed = set(await second.list_checkpoint_ids(workflow_name=name))
        lost = [i for i in a + b if i not in listed]
        if lost:
            fail(
                "two instances saving checkpoints of one workflow must lose none",
                expected=f"all {2 * n} listed",
                observed=f"{len(lost)} missing (first {lost[0]})",
                detail="store each checkpoint under its own id; never rewrite a shared index",
            )

    async def test_latest_is_the_newest_under_two_instances(
        self, instance: Any, second: Any, name: str, eco_target: EcosystemTarget
    ) -> None:
        n = eco_target.count(12)
        base = datetime.now(UTC)
        newest: tuple[str, str] | None = None
        for i in range(0, n, 2):
            a = checkpoint(name, {"i": i}, at=base + timedelta(milliseconds=i))
            b = checkpoint(name, {"i": i + 1}, at=base + timedelta(milliseconds=i + 1))
            await asyncio.gather(instance.save(b), second.save(a))
            newest = (b.timestamp, b.checkpoint_id)
            for who, storage in (("first", instance), ("second", second)):
                latest = await storage.get_latest(workflow_name=name)
                if latest is None or latest.checkpoint_id != newest[1]:
                    fail(
                        "get_latest returns the newest checkpoint, whoever saved it",
                        expected=f"{newest[1]} (timestamp {newest[0]})",
                        observed=f"the {who} instance gave "
                        f"{None if latest is None else latest.checkpoint_id}",
                        detail="order by timestamp, not by write time; move a shared head "
                        "only forward",
                    )

    async def test_saves_of_one_id_at_once_keep_it_once(
        self, instance: Any, second: Any, name: str, eco_target: EcosystemTarget
    ) -> None:
        """Two instances save the same checkpoint id at once, ``n`` times over (a save
        retried after a timeout while the first attempt is still in flight, or two
        workers that resume one run and save its superstep): each id is listed once by
        ``list_checkpoint_ids`` and ``list_checkpoints``, and loads as one of the two
        saves, whole. A storage that keeps a workflow's ids in an index it appends to
        after checking, in another round trip, whether the id is there lists it twice."""
        n = eco_target.count(10)
        wrong: list[str] = []
        for i in range(n):
            a = checkpoint(name, {"i": i, "by": "a"})
            b = dataclasses.replace(a, state={"i": i, "by": "b"})
            await asyncio.gather(instance.save(a), second.save(b))
            got = await load_or_none(instance, a.checkpoint_id)
            if got is None or got.state not in (a.state, b.state):
                wrong.append(f"load of save {i + 1}: {None if got is None else got.state}")
        for who, storage in (("first", instance), ("second", second)):
            ids = await storage.list_checkpoint_ids(workflow_name=name)
            listed = [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=name)]
            for method, got_ids in (("list_checkpoint_ids", ids), ("list_checkpoints", listed)):
                twice = len(got_ids) - len(set(got_ids))
                if twice or len(got_ids) != n:
                    wrong.append(
                        f"{method} through the {who} instance: {len(got_ids)} ids, {twice} "
                        f"listed more than once, of {n}"
                    )
        if wrong:
            fail(
                "a checkpoint id saved twice at once is stored, and listed, once",
                expected=f"{n} ids each listed once, each loading as one of its two saves",
                observed="; ".join(wrong),
                detail="key the record by its id and make the save one atomic write (an "
                "upsert, a put of one key); an index of a workflow's ids must be a set "
                "(SADD, a unique key), not a list appended to after a check",
            )

    async def test_read_during_writes_is_never_torn(
        self, instance: Any, second: Any, name: str, eco_target: EcosystemTarget
    ) -> None:
        n = eco_target.count(15)
        done = asyncio.Event()

        async def writer() -> None:
            try:
                for i in range(n):
                    await save_one(instance, name, {"a": i, "b": i, "blob": str(i) * 200})
                    await asyncio.sleep(0)
            finally:
                done.set()

        async def reader() -> None:
            while not done.is_set():
                latest = await second.get_latest(workflow_name=name)
                if latest is not None:
                    s = latest.state
                    if s.get("a") != s.get("b") or s.get("blob") != str(s.get("a")) * 200:
                        fail(
                            "a checkpoint read while another is written must be whole",
                            expected="the state of one checkpoint",
                            observed=f"a={s.get('a')!r}, b={s.get('b')!r}",
                            detail="write each checkpoint in one atomic write",
                        )
                await asyncio.sleep(0)

        await together(writer(), reader())

    async def test_a_checkpoint_saved_again_reads_whole_throughout(
        self, instance: Any, second: Any, name: str, eco_target: EcosystemTarget
    ) -> None:
        """One checkpoint id saved again and again (100 KB of state, each save different),
        while a second instance loads it: every load finds it (it exists before, during and
        after each save) and whole. A save of an existing id done as a delete and an insert,
        or a file rewritten in place, shows a reader no checkpoint or half of one."""
        n = eco_target.count(15)
        cp = checkpoint(name, _resaved(0))
        await instance.save(cp)
        done = asyncio.Event()
        wrong: list[str] = []

        async def writer() -> None:
            try:
                for i in range(1, n + 1):
                    again = dataclasses.replace(cp, state=_resaved(i))
                    await instance.save(again)
                    await asyncio.sleep(0)
            finally:
                done.set()

        async def reader() -> None:
            while not done.is_set() and len(wrong) < 3:
                try:
                    got = await second.load(cp.checkpoint_id)
                except Exception as exc:
                    wrong.append(f"load raised {_raised(exc)}")
                else:
                    i = got.state.get("i")
                    if not isinstance(i, int) or got.state != _resaved(i):
                        wrong.append(f"load gave a state of no save (i={i!r})")
                await asyncio.sleep(0)

        await together(writer(), reader())
        if wrong:
            fail(
                "a checkpoint saved again is found whole by every read meanwhile",
                expected=f"checkpoint {cp.checkpoint_id} loaded whole every time, as one of "
                "its saves",
                observed=joined(wrong),
                detail="replace a checkpoint in one atomic write (an upsert, a rename over "
                "the old file), never as a delete then an insert, nor by rewriting a file in "
                "place",
            )


def _resaved(i: int) -> dict[str, Any]:
    """The state of save ``i`` of `test_a_checkpoint_saved_again_reads_whole_throughout`."""
    return {"i": i, "blob": str(i % 10) * 100_000, "j": i}


# -- isolation ------------------------------------------------------------------------------------
class CheckpointStorageIsolationTests(CheckpointStorageFixtures):
    """Mutating what was saved or loaded changes nothing stored."""

    conformance_group: ClassVar[str | None] = "isolation"

    async def test_mutating_after_save_changes_nothing_stored(
        self, instance: Any, name: str
    ) -> None:
        cp = checkpoint(name, {"items": [1, 2, 3], "nested": {"k": "v"}})
        await instance.save(cp)
        cp.state["items"].append(4)
        cp.state["nested"]["k"] = "changed"
        cp.metadata["added"] = True
        got = await load_or_none(instance, cp.checkpoint_id)
        if got is None or got.state != {"items": [1, 2, 3], "nested": {"k": "v"}} or got.metadata:
            fail(
                "mutating a checkpoint after save must change nothing stored",
                expected="{'items': [1, 2, 3], 'nested': {'k': 'v'}} and no metadata",
                observed="nothing" if got is None else f"{got.state} and metadata {got.metadata}",
                detail="encode (or deep-copy) the checkpoint inside save; never keep the "
                "caller's object",
            )

    async def test_mutating_a_loaded_checkpoint_changes_nothing_stored(
        self, instance: Any, name: str
    ) -> None:
        saved = {"items": [1, 2, 3], "tags": {"a"}, "pair": ([1], "x")}
        checkpoint_id = await save_one(instance, name, saved)
        saved = {"items": [1, 2, 3], "tags": {"a"}, "pair": ([1], "x")}  # as it was saved

        def mutate(state: dict[str, Any], n: int) -> None:
            state["items"].append(n)
            state["tags"].add(f"added {n}")  # a set and a tuple: values agent-framework
            state["pair"][0].append(n)  # encodes apart from JSON (pickled)

        first = await load_or_none(instance, checkpoint_id)
        assert first is not None
        mutate(first.state, 4)
        first.state["extra"] = 1
        latest = await instance.get_latest(workflow_name=name)
        if latest is not None:
            mutate(latest.state, 5)
        for listed in await instance.list_checkpoints(workflow_name=name):
            mutate(listed.state, 6)
        again = await load_or_none(instance, checkpoint_id)
        if again is None or again.state != saved:
            fail(
                "mutating a loaded checkpoint must change nothing stored",
                expected=f"{saved}",
                observed="nothing" if again is None else f"{again.state}",
                detail="decode a new object on every load, get_latest and list_checkpoints; "
                "never return the stored one, nor values shared between loads (a cache of "
                "decoded values)",
            )


# -- durability ------------------------------------------------------------------------------------
class CheckpointStorageDurabilityTests(CheckpointStorageFixtures):
    """What was acknowledged is there after reopening, and after a SIGKILL."""

    conformance_group: ClassVar[str | None] = "durability"

    async def test_checkpoint_survives_reopen(
        self, eco_target: EcosystemTarget, location: str | None, name: str
    ) -> None:
        need(bool(eco_target.durable), f"{eco_target.name} does not say it is durable")
        need(
            location is not None,
            NOT_EXERCISED + "the factory takes no location: it cannot be reopened",
        )
        async with eco_target.open(location=location) as storage:
            checkpoint_id = await save_one(storage, name, {"v": "kept"})
        async with eco_target.open(location=location) as storage:
            got = await load_or_none(storage, checkpoint_id)
            latest = await storage.get_latest(workflow_name=name)
        if (
            got is None
            or got.state != {"v": "kept"}
            or latest is None
            or latest.checkpoint_id != checkpoint_id
        ):
            fail(
                "a checkpoint must survive closing and reopening a durable storage",
                expected=f"{checkpoint_id} with {{'v': 'kept'}}, and as the latest",
                observed="it is missing" if got is None else "it differs",
            )

    async def test_sigkill_mid_write_keeps_every_acknowledged_checkpoint(
        self, eco_target: EcosystemTarget, location: str | None
    ) -> None:
        need(bool(eco_target.durable), f"{eco_target.name} does not say it is durable")
        need(
            location is not None,
            NOT_EXERCISED + "the factory takes no location: it cannot be reopened",
        )
        need(
            eco_target.spec is not None,
            NOT_EXERCISED + "the target has no importable MODULE:ATTR for a subprocess",
        )
        assert location is not None
        async with crash_writer(eco_target, location, acks=eco_target.count(20)) as acked:
            pass
        async with eco_target.open(location=location) as storage:
            for line in acked:
                checkpoint_id, _, n = line.partition(" ")
                got = await load_or_none(storage, checkpoint_id)
                if got is None or got.state != {"n": int(n), "pad": "x" * 4096}:
                    fail(
                        "every checkpoint acknowledged before a SIGKILL must be there, whole",
                        expected=f"checkpoint {checkpoint_id} (#{n})",
                        observed="it is missing" if got is None else "it is damaged",
                        detail="make save return only after the write is durable (fsync the file "
                        "and its directory)",
                    )
            try:
                await storage.get_latest(workflow_name="crash")
            except Exception as exc:
                fail(
                    "after a SIGKILL mid-write the storage must still read",
                    expected="get_latest to work",
                    observed=f"{type(exc).__name__}: {exc}",
                    detail="a half-written checkpoint must never be visible: write to a temporary "
                    "file and rename it",
                )


# -- hygiene ---------------------------------------------------------------------------------------
class CheckpointStorageHygieneTests(CheckpointStorageFixtures):
    """Every operation, then close: nothing left behind (checked around the test)."""

    conformance_group: ClassVar[str | None] = "hygiene"

    async def test_every_operation_then_close_leaves_nothing_behind(
        self, eco_target: EcosystemTarget, location: str | None, name: str
    ) -> None:
        """Every operation, then close; the threads the storage started have ended when
        its close returns (the checks around every test give a thread a moment more)."""
        before = threads_running()
        async with eco_target.open(location=location) as storage:
            checkpoint_id = await save_one(storage, name, {"v": 1})
            await storage.load(checkpoint_id)
            await storage.list_checkpoints(workflow_name=name)
            await storage.list_checkpoint_ids(workflow_name=name)
            await storage.get_latest(workflow_name=name)
            await storage.delete(checkpoint_id)
            task = asyncio.ensure_future(save_one(storage, name, {"v": 2}))
            await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        left = threads_running() - before
        if left:
            fail(
                "close ends every thread the storage started before it returns",
                expected="no thread of the storage running once its close returned",
                observed=f"still running: {', '.join(sorted(t.name for t in left))}",
                detail="join the worker thread in close/aclose (after telling it to stop): "
                "until it ends, its connection and files are open, and a process that "
                "removes or reopens them next finds them in use",
            )


# -- scenarios: agent-framework's runner over the storage ------------------------------------------
PROBE: dict[str, Any] = {"calls": [], "fail": True, "storage": None}
"""What the scenario workflows record (the steps are module-level, as agent-framework needs)."""

with warnings.catch_warnings():  # agent-framework's functional workflows are experimental
    warnings.simplefilter("ignore", ExperimentalWarning)

    @step
    async def _completed(x: int) -> int:
        PROBE["calls"].append("completed")
        storage = PROBE["storage"]
        if storage is not None:
            storage.gate = True  # hold this step's save in flight until the sibling fails
        return x + 1

    @step
    async def _failing(x: int) -> int:
        storage = PROBE["storage"]
        if storage is not None and PROBE["fail"]:
            await asyncio.wait_for(storage.entered.wait(), 5)
        PROBE["calls"].append("failing")
        if PROBE["fail"]:
            if storage is not None:
                # Released a moment after the failure: a runner that cancels the in-flight
                # save on failure loses it; one that lets it finish keeps it.
                asyncio.get_running_loop().call_later(0.05, storage.release.set)
            raise RuntimeError("sibling step failed")
        return x

    @workflow(name="ck-siblings")
    async def _siblings(x: int) -> int:
        a, b = await asyncio.gather(_completed(x), _failing(x))
        return a + b

    @step
    async def _first(x: int) -> int:
        PROBE["calls"].append("first")
        return x * 2

    @workflow(name="ck-pause")
    async def _pause(x: int, ctx: RunContext) -> str:
        a = await _first(x)
        ok = await ctx.request_info({"value": a}, bool, request_id="approve")
        return f"{a}:{ok}"


class _Start(Executor):
    @handler
    async def go(self, x: int, ctx: WorkflowContext[int]) -> None:
        PROBE["calls"].append("start")
        await ctx.send_message(x + 1)


class _Good(Executor):
    @handler
    async def go(self, x: int, ctx: WorkflowContext[Any, int]) -> None:
        PROBE["calls"].append("good")
        await ctx.yield_output(x * 10)


class _Bad(Executor):
    @handler
    async def go(self, x: int, ctx: WorkflowContext[Any, int]) -> None:
        await asyncio.sleep(0.01)
        PROBE["calls"].append("bad")
        if PROBE["fail"]:
            raise RuntimeError("sibling executor failed")
        await ctx.yield_output(x)


def _graph() -> Any:
    start, good, bad = _Start(id="start"), _Good(id="good"), _Bad(id="bad")
    return (
        WorkflowBuilder(name="ck-graph", start_executor=start)
        .add_fan_out_edges(start, [good, bad])
        .build()
    )


def _reset(storage: StyledStorage | None) -> None:
    PROBE.update(calls=[], fail=True, storage=storage)


Scenario = Callable[[StyledStorage, Any], Awaitable[None]]


async def _functional_sibling(storage: StyledStorage, reader: Any) -> None:
    _reset(storage)
    try:
        await _siblings.build().run(1, checkpoint_storage=storage)
    except RuntimeError:
        pass
    else:
        fail(
            "a failing step fails the workflow run",
            expected="RuntimeError",
            observed="the run succeeded",
        )
    PROBE["storage"] = None
    latest = await reader.get_latest(workflow_name="ck-siblings")
    if latest is None:
        fail(
            "a completed step's checkpoint must survive a sibling step's failure",
            expected="a checkpoint holding the completed step",
            observed="no checkpoint of the workflow is stored",
            detail=f"the completed step's save was in flight ({storage.style} style) when the "
            "sibling failed: the save must be let finish",
        )
    PROBE["fail"] = False
    resumed = await _siblings.build().run(
        checkpoint_id=latest.checkpoint_id, checkpoint_storage=reader
    )
    if resumed.get_outputs() != [3]:
        fail(
            "a run resumed from a checkpoint finishes the work it holds",
            expected="output 3 (the completed step's 2 and the failed step's 1)",
            observed=f"outputs {resumed.get_outputs()}, calls {PROBE['calls']}",
            detail="load must give back every field that save was given (the state holds "
            "the completed step's result)",
        )
    if PROBE["calls"].count("completed") != 1:
        fail(
            "a resume must not run a completed step again",
            expected="the completed step once",
            observed=f"calls {PROBE['calls']}",
        )


async def _graph_sibling(storage: StyledStorage, reader: Any) -> None:
    _reset(None)
    try:
        await _graph().run(1, checkpoint_storage=storage)
    except RuntimeError:
        pass
    else:
        fail(
            "a failing executor fails the workflow run",
            expected="RuntimeError",
            observed="it succeeded",
        )
    latest = await reader.get_latest(workflow_name="ck-graph")
    if latest is None:
        fail(
            "a completed superstep's checkpoint must survive a later failure",
            expected="a checkpoint after the start executor",
            observed="none is stored",
        )
    PROBE["fail"] = False
    resumed = await _graph().run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=reader)
    calls = PROBE["calls"]
    if 2 not in resumed.get_outputs() or calls.count("bad") != 2:
        # checked first: a storage that lost the messages in flight resumes into a run that
        # does nothing, which runs no completed executor again either
        fail(
            "a run resumed from a checkpoint delivers the messages it holds in flight",
            expected="the failed executor run again, with output 2",
            observed=f"outputs {resumed.get_outputs()}, calls {calls}",
            detail="load must give back every field that save was given: the checkpoint's "
            "messages are what the resumed superstep delivers",
        )
    if calls.count("start") != 1 or calls.count("good") != 1:
        fail(
            "a resume must not run a completed executor again",
            expected="start and good once each",
            observed=f"calls {calls}",
            detail="good completed beside the failing executor, in the same superstep",
        )


async def _cancel_while_hanging(
    storage: StyledStorage, run: Callable[[], Awaitable[Any]], bound: float, how: str
) -> None:
    storage.hang = True
    if how == "wait_for":
        start = time.monotonic()
        waiter = asyncio.ensure_future(asyncio.wait_for(run(), timeout=0.2))
        done, _ = await asyncio.wait({waiter}, timeout=0.2 + bound + 1.0)
        seconds = time.monotonic() - start - 0.2
        result = (
            "timed out" if done and isinstance(waiter.exception(), TimeoutError) else "did not end"
        )
        if done and waiter.exception() is None:
            result = "returned"
        storage.release.set()
        await finish(waiter)
        ok = result == "timed out" and seconds <= bound
    else:
        outcome = await cancel_while_held(run, entered=storage.entered.wait, wait=bound + 1.0)  # type: ignore[arg-type]
        storage.release.set()
        await finish(outcome.task)
        seconds, result, ok = (
            outcome.seconds,
            outcome.result,
            outcome.result == "cancelled" and outcome.seconds <= bound,
        )
    if not ok:
        fail(
            f"a caller's {'asyncio.wait_for' if how == 'wait_for' else 'task.cancel()'} "
            "must end the "
            "run promptly while a save hangs",
            expected=f"the run to end within {bound:g} s",
            observed=f"it {result} after {seconds:.2f} s ({storage.style} style)",
        )


class CheckpointStorageScenarioTests(CheckpointStorageFixtures):
    """agent-framework's runner over the storage, in three save styles."""

    conformance_group: ClassVar[str | None] = "scenarios"

    async def _judge(
        self, scenario: Scenario, instance: Any, second: Any, style: SaveStyle
    ) -> None:
        """Run ``scenario`` on the target; on failure, on agent-framework's own storage too."""

        @asynccontextmanager
        async def reference() -> AsyncIterator[tuple[Any, Any]]:
            storage = InMemoryCheckpointStorage()
            yield StyledStorage(storage, style), storage

        try:
            await judge(
                scenario,
                (StyledStorage(instance, style), second),
                reference,
                library("agent-framework-core"),
            )
        finally:
            PROBE["storage"] = None

    @pytest.mark.parametrize("style", SAVE_STYLES)
    async def test_functional_completed_step_survives_sibling_failure(
        self, instance: Any, second: Any, style: SaveStyle
    ) -> None:
        await self._judge(_functional_sibling, instance, second, style)

    @pytest.mark.parametrize("style", SAVE_STYLES)
    async def test_graph_completed_step_survives_sibling_failure(
        self, instance: Any, second: Any, style: SaveStyle
    ) -> None:
        await self._judge(_graph_sibling, instance, second, style)

    @pytest.mark.parametrize("how", ["cancel", "wait_for"])
    @pytest.mark.parametrize("style", SAVE_STYLES)
    async def test_functional_caller_cancel_ends_promptly_while_save_hangs(
        self, instance: Any, second: Any, style: SaveStyle, how: str, cancel_bound: float
    ) -> None:
        async def scenario(storage: StyledStorage, reader: Any) -> None:
            _reset(None)
            await _cancel_while_hanging(
                storage,
                lambda: _pause.build().run(3, checkpoint_storage=storage),
                max(1.0, 2 * cancel_bound),
                how,
            )

        await self._judge(scenario, instance, second, style)

    @pytest.mark.parametrize("style", SAVE_STYLES)
    async def test_graph_caller_cancel_ends_promptly_while_save_hangs(
        self, instance: Any, second: Any, style: SaveStyle, cancel_bound: float
    ) -> None:
        async def scenario(storage: StyledStorage, reader: Any) -> None:
            _reset(None)
            PROBE["fail"] = False
            await _cancel_while_hanging(
                storage,
                lambda: _graph().run(1, checkpoint_storage=storage),
                max(1.0, 2 * cancel_bound),
                "cancel",
            )

        await self._judge(scenario, instance, second, style)

    @pytest.mark.parametrize("style", SAVE_STYLES)
    async def test_pause_for_input_resumes_without_running_completed_steps(
        self, instance: Any, second: Any, style: SaveStyle
    ) -> None:
        async def scenario(storage: StyledStorage, reader: Any) -> None:
            _reset(None)
            first = await _pause.build().run(4, checkpoint_storage=storage)
            if [e.request_id for e in first.get_request_info_events()] != ["approve"]:
                fail(
                    "a request for input pauses the run",
                    expected="one request 'approve'",
                    observed="none",
                )
            latest = await reader.get_latest(workflow_name="ck-pause")
            if latest is None or "approve" not in latest.pending_request_info_events:
                fail(
                    "the paused run's checkpoint holds the pending request",
                    expected="a latest checkpoint with request 'approve'",
                    observed="none"
                    if latest is None
                    else f"requests {list(latest.pending_request_info_events)}",
                )
            resumed = await _pause.build().run(
                checkpoint_id=latest.checkpoint_id,
                checkpoint_storage=reader,
                responses={"approve": True},
            )
            if resumed.get_outputs() != ["8:True"] or PROBE["calls"].count("first") != 1:
                fail(
                    "a paused run resumed with the response continues without re-running "
                    "completed steps",
                    expected="output '8:True', step 'first' run once",
                    observed=f"outputs {resumed.get_outputs()}, calls {PROBE['calls']}",
                )

        await self._judge(scenario, instance, second, style)

    @pytest.mark.parametrize("style", SAVE_STYLES)
    async def test_caller_cancel_during_pause_ends_promptly(
        self, instance: Any, second: Any, style: SaveStyle, cancel_bound: float
    ) -> None:
        async def scenario(storage: StyledStorage, reader: Any) -> None:
            _reset(None)
            first = await _pause.build().run(4, checkpoint_storage=storage)
            latest = await reader.get_latest(workflow_name="ck-pause")
            assert latest is not None and first is not None
            await _cancel_while_hanging(
                storage,
                lambda: _pause.build().run(
                    checkpoint_id=latest.checkpoint_id,
                    checkpoint_storage=storage,
                    responses={"approve": True},
                ),
                max(1.0, 2 * cancel_bound),
                "cancel",
            )

        await self._judge(scenario, instance, second, style)


# -- sweeps: every cell of the coverage matrices --------------------------------------------------
def _with_id(workflow_name: str, checkpoint_id: str, state: dict[str, Any]) -> WorkflowCheckpoint:
    cp = checkpoint(workflow_name, state)
    cp.checkpoint_id = checkpoint_id
    return cp


async def _read_by(storage: Any, workflow: str, checkpoint_id: str, *, row: str) -> Any:
    """`_read_as`, ``row`` given last."""
    return await _read_as(storage, row, workflow, checkpoint_id)


async def _read_as(storage: Any, row: str, workflow: str, checkpoint_id: str) -> Any:
    """What ``row`` (one of `STORAGE_READS_AFTER`) reads: the ids it gives."""
    if row == "load":
        return _id(await load_or_none(storage, checkpoint_id))
    if row == "get_latest":
        return _id(await storage.get_latest(workflow_name=workflow))
    if row == "list_checkpoints":
        listed = await storage.list_checkpoints(workflow_name=workflow)
        return sorted(str(c.checkpoint_id) for c in listed)
    return sorted(str(i) for i in await storage.list_checkpoint_ids(workflow_name=workflow))


def _id(cp: WorkflowCheckpoint | None) -> str | None:
    return None if cp is None else str(cp.checkpoint_id)


async def _read_after(
    storage: Any, workflow: str, write: str, row: str, writer: Any = None
) -> str | None:
    """``row`` of a workflow of two checkpoints just before and right after ``write`` (a
    ``save`` of a newer one, a ``delete`` of the newest), through ``writer`` if given
    (another instance on the same data); what is wrong, or None."""
    by = storage if writer is None else writer
    at = datetime.now(UTC)
    made = [checkpoint(workflow, {"v": i}, at=at + timedelta(milliseconds=i)) for i in range(3)]
    for cp in made[:2]:
        await storage.save(cp)
    ids = [str(cp.checkpoint_id) for cp in made]
    read = ids[2] if write == "save" else ids[1]
    await _read_as(storage, row, workflow, read)  # what a storage may keep, as reads leave it
    if write == "save":
        await by.save(made[2])
    else:
        await by.delete(ids[1])
        ids = ids[:1]
    if row == "load":
        expected: Any = read if read in ids else None
    elif row == "get_latest":
        expected = ids[-1]
    else:
        expected = sorted(ids)
    got = await _read_as(storage, row, workflow, read)
    if got == expected:
        return None
    through = "" if writer is None else " through another instance"
    return f"{row} right after {write}{through}: expected {expected!r}, got {got!r}"


def _who(name: str) -> str:
    """A workflow name for a message (a long one shortened)."""
    return ascii(name) if len(name) <= 40 else ascii(f"{name[:16]}...{name[-8:]}")


async def _workflows_kept_apart(storage: Any, has: set[str], names: list[str]) -> list[str]:
    """Two checkpoints of each workflow of ``names``, each read back by every method that
    names a workflow; then the first workflow's deleted, the others read again. What is
    wrong, or []."""
    wrong: list[str] = []
    at = datetime.now(UTC)
    made: dict[str, list[str]] = {}  # workflow -> its checkpoint ids, oldest first
    for n, name in enumerate(names):
        cps = [
            checkpoint(name, {"name": name}, at=at + timedelta(milliseconds=2 * n + i))
            for i in range(2)
        ]
        for cp in cps:
            await storage.save(cp)
        made[name] = [str(cp.checkpoint_id) for cp in cps]

    async def check(name: str, expected: list[str], when: str) -> None:
        for method in ("list_checkpoint_ids", "list_checkpoints"):
            if method not in has:
                continue
            listed = await getattr(storage, method)(workflow_name=name)
            ids = sorted(str(getattr(c, "checkpoint_id", c)) for c in listed)
            names = {getattr(c, "workflow_name", name) for c in listed}
            if ids != sorted(expected) or names - {name}:
                others = sum(i not in expected for i in ids)
                wrong.append(
                    f"{method} of {_who(name)}{when}: {len(ids)} ids "
                    f"({others} of other workflows), not its {len(expected)}"
                )
        if "get_latest" in has:
            latest = await storage.get_latest(workflow_name=name)
            newest = expected[-1] if expected else None
            if _id(latest) != newest or (latest is not None and latest.workflow_name != name):
                wrong.append(f"get_latest of {_who(name)}{when}: {_id(latest)}, not {newest}")
        if "load" in has and expected:
            loaded = await load_or_none(storage, expected[-1])
            if loaded is None or loaded.workflow_name != name or loaded.state != {"name": name}:
                wrong.append(
                    f"load of a checkpoint of {_who(name)}{when}: "
                    f"{None if loaded is None else _who(loaded.workflow_name)}"
                )

    for name in names:
        await check(name, made[name], "")
    if "delete" in has:
        for cid in made[names[0]]:
            await storage.delete(cid)
        made[names[0]] = []
        for name in names:
            await check(
                name, made[name], f" after the checkpoints of {_who(names[0])} were deleted"
            )
    return wrong


def _names(exc: BaseException, text: str) -> bool:
    """Whether the message of ``exc`` names ``text`` (as it is, or escaped)."""
    message = str(exc)
    return any(form in message for form in (text, repr(text)[1:-1], ascii(text)[1:-1]))


async def _load_or_refused(storage: Any, checkpoint_id: str) -> WorkflowCheckpoint | None:
    """``load``, or None when it raises ``WorkflowCheckpointException`` or ``ValueError``
    (an id the storage refuses)."""
    try:
        return await storage.load(checkpoint_id)  # type: ignore[no-any-return]
    except (WorkflowCheckpointException, ValueError):
        return None


async def _checkpoints_kept_apart(
    storage: Any, has: set[str], workflow: str, ids: list[str]
) -> list[str]:
    """A checkpoint of ``workflow`` under each id of ``ids`` (a millisecond apart), each
    loaded back, the workflow listed and its latest read; then the first deleted, and the
    rest read again. What is wrong, or []."""
    wrong: list[str] = []
    at = datetime.now(UTC)
    kept: list[str] = []
    for i, cid in enumerate(ids):
        cp = _with_id(workflow, cid, {"id": cid})
        cp.timestamp = (at + timedelta(milliseconds=i)).isoformat()
        try:
            await storage.save(cp)
        except (ValueError, WorkflowCheckpointException) as exc:
            if not _names(exc, cid):
                wrong.append(
                    f"save of {_who(cid)} refused it with a {type(exc).__name__} that does "
                    f"not name it: {_short(str(exc))}"
                )
            continue
        except Exception as exc:
            wrong.append(
                f"save of {_who(cid)} raised {_raised(exc)} (not a ValueError or "
                "WorkflowCheckpointException naming the id)"
            )
            continue
        kept.append(cid)

    async def check(expected: list[str], when: str) -> None:
        for cid in ids:
            try:
                got = await _load_or_refused(storage, cid)
            except Exception as exc:
                wrong.append(f"load of {_who(cid)}{when} raised {_raised(exc)}")
                continue
            if cid in expected:
                if got is None or got.checkpoint_id != cid or got.state != {"id": cid}:
                    whose = (
                        "nothing"
                        if got is None
                        else f"the checkpoint of {_who(got.state.get('id', got.checkpoint_id))}"
                    )
                    wrong.append(f"load of {_who(cid)}{when}: {whose}")
            elif got is not None:
                wrong.append(
                    f"load of {_who(cid)}{when}: the checkpoint of "
                    f"{_who(got.state.get('id', got.checkpoint_id))}, where none is stored"
                )
        if "list_checkpoint_ids" in has:
            listed = sorted(
                str(i) for i in await storage.list_checkpoint_ids(workflow_name=workflow)
            )
            if listed != sorted(expected):
                wrong.append(
                    f"list_checkpoint_ids{when}: {len(listed)} ids "
                    f"({sum(i not in expected for i in listed)} not saved or deleted), not "
                    f"the {len(expected)} stored"
                )
        if "get_latest" in has:
            latest = _id(await storage.get_latest(workflow_name=workflow))
            newest = expected[-1] if expected else None
            if latest != newest:
                wrong.append(
                    f"get_latest{when}: {None if latest is None else _who(latest)}, not "
                    f"{None if newest is None else _who(newest)}"
                )

    await check(kept, "")
    if "delete" not in has:
        return wrong
    for cid in (c for c in ids if c not in kept):  # refused: there is nothing to delete
        try:
            deleted = await storage.delete(cid)
        except (ValueError, WorkflowCheckpointException) as exc:
            deleted = False if _names(exc, cid) else exc
        except Exception as exc:
            deleted = exc
        if deleted is not False:
            got = _raised(deleted) if isinstance(deleted, Exception) else repr(deleted)
            wrong.append(f"delete of {_who(cid)}, refused by save: {got}, not False")
    if kept:
        # The first id, and the first one a glob reads as a pattern (a Redis KEYS or SCAN
        # MATCH, fnmatch): deleted, each must take its own checkpoint alone.
        doomed = [kept[0], *[c for c in kept[1:] if set(c) & _GLOB][:1]]
        for cid in doomed:
            try:
                deleted = await storage.delete(cid)
            except Exception as exc:
                deleted = _raised(exc)
            if deleted is not True:
                wrong.append(f"delete of {_who(cid)}: {deleted}, not True")
        kept = [c for c in kept if c not in doomed]
        await check(kept, f" after {' and '.join(_who(c) for c in doomed)} was deleted")
    return wrong


_MISSING: Final = object()


_GLOB: Final = frozenset("*?[")
"""The characters a glob reads as a pattern."""


async def _changes_within(
    target: EcosystemTarget,
    location: str | None,
    checkpoint_id: str,
    *,
    present: bool,
    window: float,
) -> float | None:
    """Watch ``checkpoint_id`` through a new instance on ``location`` for ``window`` seconds
    (at least once): the seconds after which ``load`` first found it other than
    ``present`` (a cancelled write landing late), or None."""
    start = time.monotonic()
    async with target.open(location=location) as observer:
        while True:
            if (await load_or_none(observer, checkpoint_id) is not None) != present:
                return time.monotonic() - start
            if time.monotonic() - start >= window:
                return None
            await asyncio.sleep(0.02)


async def _reads_disagree(
    storage: Any, workflow: str, made: list[WorkflowCheckpoint], *, unlisted_ok: bool = False
) -> list[str]:
    """Where the reads of ``workflow`` disagree on which of ``made`` are stored (`load`
    against each listing, and `get_latest` against the newest loaded). What is wrong.

    ``unlisted_ok``: a checkpoint that loads but is listed nowhere is allowed (a delete
    cancelled half-way); one listed that does not load is not, and `get_latest` is then
    the newest of those both loaded and listed."""
    has = set(implemented(storage, "agent-framework")[0])
    loaded = [cp for cp in made if await load_or_none(storage, cp.checkpoint_id) is not None]
    found = {cp.checkpoint_id for cp in loaded}
    made_ids = {cp.checkpoint_id for cp in made}
    wrong: list[str] = []
    listings: dict[str, set[str]] = {}
    if "list_checkpoint_ids" in has:
        listings["list_checkpoint_ids"] = {
            str(i) for i in await storage.list_checkpoint_ids(workflow_name=workflow)
        }
    if "list_checkpoints" in has:
        listings["list_checkpoints"] = {
            c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=workflow)
        }
    for method, listed in listings.items():
        listed &= made_ids
        if listed - found:
            wrong.append(
                f"{method} lists {len(listed - found)} checkpoints that load does not find "
                f"({_who(min(listed - found))}...)"
            )
        if found - listed and not unlisted_ok:
            wrong.append(
                f"load finds {len(found - listed)} checkpoints that {method} does not list "
                f"({_who(min(found - listed))}...)"
            )
    if unlisted_ok:
        for listed in listings.values():
            loaded = [cp for cp in loaded if cp.checkpoint_id in listed]
    if "get_latest" in has and loaded:
        at = max(datetime.fromisoformat(cp.timestamp) for cp in loaded)
        newest = [cp for cp in loaded if datetime.fromisoformat(cp.timestamp) == at]
        latest = _id(await storage.get_latest(workflow_name=workflow))
        if latest not in {cp.checkpoint_id for cp in newest}:
            wrong.append(
                f"get_latest gives {None if latest is None else _who(latest)}, not the newest "
                f"that load finds ({_who(newest[0].checkpoint_id)})"
            )
    return wrong


def _raised(exc: BaseException) -> str:
    """An error for a message: its type and its message, shortened."""
    return f"{type(exc).__name__}: {_short(str(exc))}"


async def _reads_after_each_write(storage: Any, name: str, writer: Any = None) -> list[str]:
    """`_read_after` of each read after each write the storage implements (through
    ``writer``, another instance, if given); what is wrong."""
    has = set(implemented(storage, "agent-framework")[0])
    return [
        found
        for write in writes_before("agent-framework", has)
        for n, row in enumerate(STORAGE_READS_AFTER)
        if row in has
        and (found := await _read_after(storage, f"{name}-{write}-{n}", write, row, writer))
    ]


async def _every_call(storage: Any, workflow: str, a: str, b: str) -> None:
    """Each method once: reads of ``a`` and of ``workflow``, then a save of ``a`` and a
    delete of ``b`` (``a``, ``b`` and the workflow in the same state). Checks what the
    storage answers where agent-framework says what it must be."""
    loaded = await load_or_none(storage, a)
    ids = await storage.list_checkpoint_ids(workflow_name=workflow)
    listed = [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=workflow)]
    latest = await storage.get_latest(workflow_name=workflow)
    if (
        sorted(ids) != sorted(listed)
        or (latest is None) != (not ids)
        or (loaded is not None and a not in ids)
    ):
        fail(
            "list_checkpoint_ids, list_checkpoints, get_latest and load agree",
            expected="the same ids listed both ways, a latest one when any is listed, and a "
            "loaded checkpoint among them",
            observed=f"ids {sorted(ids)}, checkpoints {sorted(listed)}, latest "
            f"{None if latest is None else latest.checkpoint_id}, loaded {loaded is not None}",
        )
    await storage.save(_with_id(workflow, a, {"v": "sweep"}))
    got = await load_or_none(storage, a)
    if got is None or got.state != {"v": "sweep"}:
        fail("a saved checkpoint is loaded back", expected=a, observed="it is missing or differs")
    existed = await load_or_none(storage, b) is not None
    if await storage.delete(b) != existed:
        fail(
            "delete says whether the checkpoint existed",
            expected=f"{existed}",
            observed=f"{not existed}",
        )


class CheckpointStorageSweepTests(CheckpointStorageFixtures):
    """Every method of the storage in every state that its coverage matrices have
    (`checkpointkit.conformance.ecosystems.coverage`)."""

    conformance_group: ClassVar[str | None] = "semantics"

    async def test_sweep_every_call_in_every_state(self, instance: Any, name: str) -> None:
        storage = instance
        a, b = str(uuid.uuid4()), str(uuid.uuid4())
        await _every_call(storage, name, a, b)  # missing; then a exists
        await storage.save(_with_id(name, b, {"v": "b"}))
        await _every_call(storage, name, a, b)  # existing; then b is deleted
        await storage.delete(a)  # the workflow has no checkpoint left
        await _every_call(storage, name, a, b)  # after delete
        await storage.delete(a)

    async def test_sweep_every_read_after_every_kind_of_write(
        self, instance: Any, name: str
    ) -> None:
        """Each read (``load``, ``list_checkpoints``, ``list_checkpoint_ids``, ``get_latest``)
        right after a ``save`` of a newer checkpoint and after a ``delete`` of the newest,
        and once just before that write: a storage that caches what it read and forgets the
        cache on some writes answers from before them (a latest checkpoint kept past its
        ``delete`` resumes a workflow from a checkpoint that is gone)."""
        wrong = await _reads_after_each_write(instance, name)
        if wrong:
            fail(
                "every read answers what the last write left, whatever that write was",
                expected="each read right after each write to answer what the storage holds",
                observed="; ".join(wrong),
                detail="a storage that keeps what it read (a latest checkpoint, a listing) "
                "must forget it on every write: save and delete",
            )

    async def test_sweep_every_read_after_another_instances_write(
        self, eco_target: EcosystemTarget, location: str | None, name: str
    ) -> None:
        """The reads of the sweep before, through one instance, and a ``save`` or a
        ``delete`` through a second instance on the same data, in between: a storage that
        keeps what it read in the instance answers from before the other instance's write
        (two workers of one deployment)."""
        need(
            location is not None,
            "the factory takes no location: no second instance on the same data",
        )
        async with (
            eco_target.open(location=location) as storage,
            eco_target.open(location=location) as other,
        ):
            wrong = await _reads_after_each_write(storage, name, writer=other)
        if wrong:
            fail(
                "every read answers what the last write left, also one made through another "
                "instance",
                expected="each read right after each write of another instance on the same "
                "data to answer what the storage holds",
                observed="; ".join(wrong),
                detail="what an instance keeps of what it read must be checked against the "
                "backend, or kept where every instance's writes forget it: another process "
                "writes the same workflows",
            )

    async def test_sweep_workflow_names_of_every_shape(self, instance: Any, name: str) -> None:
        """Workflows whose names differ only where a backend's comparison does not look (a
        ``LIKE``, a glob or a regular expression; a collation that folds case or pads
        spaces; Unicode normalization; a 255-character column) or hold characters with a
        meaning in a key, a path or a query: each group side by side, every method that
        names a workflow on each, and one workflow's checkpoints deleted among them (the
        ``ids`` matrix). A workflow's name is the application's: a title, a file name."""
        has = set(implemented(instance, "agent-framework")[0])
        if "save" not in has:
            pytest.skip("the storage implements no save")
        wrong: list[str] = []
        for n, (row, suffixes) in enumerate(ID_GROUPS.items()):
            found = await _workflows_kept_apart(
                instance, has, [f"{name}.{n}-{s}" for s in suffixes]
            )
            wrong += [f"{row}: {w}" for w in found]
        if wrong:
            fail(
                "each workflow's checkpoints are its own, whatever characters its name holds",
                expected="every listing and get_latest to answer the workflow it names, "
                "exactly, and a delete to change that workflow alone",
                observed=joined(wrong),
                detail="compare workflow names as exact strings: never by a pattern (escape "
                "LIKE, glob and regular-expression characters), a collation that folds case "
                "or trailing spaces, a normalized form or a prefix cut to a column's length; "
                "escape query and path syntax",
            )

    async def test_sweep_checkpoint_ids_of_every_shape(self, instance: Any, name: str) -> None:
        """Checkpoint ids of the ``ids`` matrix's shapes, each group side by side in a
        workflow of its own: each saved, then loaded, listed and the workflow's latest
        read; then the first deleted and the others read again. agent-framework makes
        uuid ids, but users and other libraries name checkpoints (``cp-1``, a run's
        title): ids that differ only where a backend's comparison does not look (a
        collation folding case or padding spaces, a prefix of a key, a file name) must
        stay apart; so must whole ids that a column's type makes one (``7``, ``007`` and
        ``7.0`` under SQLite's numeric affinity; a uuid, its upper case and its hex under a
        PostgreSQL ``uuid`` column). A storage may refuse an id it cannot store, with a
        ``ValueError`` or a ``WorkflowCheckpointException`` naming it; it must never
        answer another."""
        has = set(implemented(instance, "agent-framework")[0])
        if not {"save", "load"} <= has:
            pytest.skip("the storage implements no save or no load")
        base = f"cp-{uuid.uuid4().hex[:12]}"
        wrong: list[str] = []
        for n, (row, suffixes) in enumerate(ID_GROUPS.items()):
            ids = [f"{base}.{n}-{s}" for s in suffixes]
            found = await _checkpoints_kept_apart(instance, has, f"{name}.{n}", ids)
            wrong += [f"{row}: {w}" for w in found]
        # Whole ids that a column's type would make one: a number's forms (SQLite's numeric
        # affinity keeps 007 as 7) and a uuid's (a PostgreSQL uuid column).
        digits, u = str(random.randrange(10**11, 10**12)), uuid.uuid4()
        forms = {
            "number forms": [digits, f"00{digits}", f"{digits}.0"],
            "uuid forms": [str(u), str(u).upper(), u.hex],
        }
        for row, ids in forms.items():
            found = await _checkpoints_kept_apart(instance, has, f"{name}.{row}", ids)
            wrong += [f"{row}: {w}" for w in found]
        if wrong:
            fail(
                "each checkpoint id names its own checkpoint, whatever characters it holds",
                expected="load to give the checkpoint saved under the id it names, exactly, "
                "the listings and get_latest to agree, and a delete to remove that "
                "checkpoint alone (or save to refuse the id with a ValueError or a "
                "WorkflowCheckpointException naming it)",
                observed=joined(wrong),
                detail="compare checkpoint ids as exact strings: never under a collation "
                "that folds case or trailing spaces, nor as the prefix of a key (delete the "
                "key of the id, not every key it begins); make a key or a file name of an "
                "id by escaping or hashing it, and refuse the ids you cannot store",
            )

    async def test_sweep_value_sizes(self, instance: Any, name: str) -> None:
        """State values of each size of the ``sizes`` matrix in one checkpoint, loaded back
        whole; three more checkpoints of 1 MiB in the workflow (8 MiB in four), each in
        every listing and the newest from ``get_latest``; then the first saved again with
        1 KiB, which loads back alone."""
        sized = sized_values()
        cp = checkpoint(name, dict(sized))
        await instance.save(cp)
        got = await load_or_none(instance, cp.checkpoint_id)
        state = {} if got is None else dict(got.state or {})
        wrong = [
            f"{key!r} loaded back as {found}"
            for key, value in sized.items()
            if (found := read_back_wrong(value, state.get(key)))
        ]
        if got is None or wrong:
            fail(
                "state values of 0 bytes, 1 KiB, 1 MiB and 4 MiB are loaded back whole",
                expected="each value as saved: "
                + ", ".join(f"{len(v):,} characters in {k!r}" for k, v in sized.items()),
                observed="nothing" if got is None else "; ".join(wrong),
                detail=SIZES_HINT,
            )
        # Three more checkpoints of 1 MiB: the workflow holds 8 MiB in four checkpoints,
        # past a query page of 1 MiB (DynamoDB's) and an item limit a listing may skip.
        at = datetime.fromisoformat(cp.timestamp)
        more = [
            checkpoint(name, {"mib": sized["mib"], "n": n}, at=at + timedelta(seconds=n))
            for n in range(1, 4)
        ]
        for c in more:
            await instance.save(c)
        made = [cp, *more]
        wrong = await _reads_disagree(instance, name, made)
        has = set(implemented(instance, "agent-framework")[0])
        if "list_checkpoint_ids" in has:
            ids = await instance.list_checkpoint_ids(workflow_name=name)
            if sorted(map(str, ids)) != sorted(c.checkpoint_id for c in made):
                wrong.append(f"list_checkpoint_ids gives {len(ids)} of the 4 checkpoints")
        # Saved again, small: nothing of the 5 MiB it held before comes back with it.
        small = dataclasses.replace(cp, state={"kib": sized["kib"]})
        await instance.save(small)
        try:
            again = await load_or_none(instance, cp.checkpoint_id)
        except Exception as exc:
            wrong.append(f"the 5 MiB checkpoint saved again with 1 KiB: load raised {_raised(exc)}")
        else:
            if again is None or again.state != small.state:
                found = "nothing" if again is None else f"keys {sorted(again.state or {})}"
                wrong.append(f"the 5 MiB checkpoint saved again with 1 KiB loads back as {found}")
        if wrong:
            fail(
                "a workflow holding megabytes lists every checkpoint, and a large checkpoint "
                "saved again small loads back small",
                expected="the 4 checkpoints (8 MiB) in every listing and the newest from "
                "get_latest; the 1 KiB state after the re-save",
                observed=joined(wrong),
                detail="follow every page of a listing (a query page ends at 1 MiB, not at "
                "the last item), never skip an item for its size, and delete a value's old "
                "parts when it is saved again with fewer",
            )

    async def test_sweep_state_values_of_every_shape(self, instance: Any, name: str) -> None:
        """Each shape of `VALUE_SHAPES` (special floats, integers past 2**53 and 64 bits,
        NUL and a lone surrogate in a string, keys with ``.`` and ``$``...) saved as the
        state of a checkpoint of its own and loaded back: exactly as saved (type, value,
        the sign of -0.0), or refused by ``save`` with an error. A backend that stores
        JSON in a database column, a document store or a 32-bit float changes some of
        them without a word: a resumed workflow then runs on other values."""
        wrong: list[str] = []
        for shape, value in VALUE_SHAPES.items():
            cp = checkpoint(name, {"v": value})
            try:
                await instance.save(cp)
            except Exception:
                refused = True  # refusing what it cannot store is right; check nothing stays
            else:
                refused = False
            try:
                got = await load_or_none(instance, cp.checkpoint_id)
            except Exception as exc:
                wrong.append(f"{shape}: saved, then load raised {_raised(exc)}")
                continue
            if got is None:
                if not refused:
                    wrong.append(f"{shape}: saved, then load found nothing")
                continue
            found = (got.state or {}).get("v", _MISSING)
            if not same_value(found, value):
                wrong.append(f"{shape}: {value!r} loaded back as {found!r}")
        if wrong:
            fail(
                "a state value comes back exactly as saved, or save refuses it",
                expected="each shape's value, of the same type (NaN, infinities and -0.0 "
                "included), or an error from save",
                observed=joined(wrong),
                detail="store the state with agent-framework's own encoding "
                "(encode_checkpoint_value) in a form that keeps every value: not a JSON "
                "column that turns NaN into null or strips NUL, not a document store that "
                "renames keys holding . or $, not a 32-bit float; refuse what cannot be "
                "stored",
            )

    @slow(300, LENGTHS_HINT)
    async def test_sweep_workflows_of_every_length(
        self, eco_target: EcosystemTarget, instance: Any, name: str
    ) -> None:
        """A workflow grows to each length of the ``lengths`` matrix (1 to the target's
        ``max_length``, past pages of 10, 100, 101 and 1,000 items), one checkpoint a
        millisecond newer than the one before: at each, ``list_checkpoints`` and
        ``list_checkpoint_ids`` give every checkpoint once, and ``get_latest`` the newest."""
        storage = instance
        start = datetime.now(UTC)
        made: list[str] = []
        for n in lengths(eco_target.max_length):
            while len(made) < n:
                at = start + timedelta(milliseconds=len(made))
                made.append(str(await storage.save(checkpoint(name, {"n": len(made)}, at=at))))
            listed = [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=name)]
            ids = [str(i) for i in await storage.list_checkpoint_ids(workflow_name=name)]
            latest = await storage.get_latest(workflow_name=name)
            wrong = [
                f"{what} gave {counted(sorted(got), sorted(made))}"
                for what, got in (("list_checkpoints", listed), ("list_checkpoint_ids", ids))
                if sorted(got) != sorted(made)
            ]
            if latest is None or latest.checkpoint_id != made[-1]:
                wrong.append(f"get_latest gave {'none' if latest is None else 'an older one'}")
            if wrong:
                fail(
                    f"every checkpoint of a workflow of {n} is listed and the newest is its "
                    "latest, however many pages the backend answers in",
                    expected=f"{n} checkpoints listed both ways, the newest as the latest",
                    observed="; ".join(wrong),
                    detail=PAGES_HINT,
                )

    async def test_sweep_other_instance_and_reopened(
        self, eco_target: EcosystemTarget, location: str | None, name: str
    ) -> None:
        need(
            location is not None,
            "the factory takes no location: no second instance on the same data",
        )
        ids = [str(uuid.uuid4()) for _ in range(4)]
        async with eco_target.open(location=location) as storage:
            for cid in ids[:2]:
                await storage.save(_with_id(name, cid, {"v": cid}))
            async with eco_target.open(location=location) as other:
                await _every_call(other, name, *ids[:2])  # written through another instance
            for cid in ids[2:]:
                await storage.save(_with_id(f"{name}-r", cid, {"v": cid}))
        if eco_target.durable:
            async with eco_target.open(location=location) as reopened:
                await _every_call(reopened, f"{name}-r", *ids[2:])


class CheckpointStorageHeldSweepTests(CheckpointStorageFixtures):
    """Every writing and reading method, cancelled while the backend is held."""

    conformance_group: ClassVar[str | None] = "cancellation"

    async def test_sweep_every_write_cancelled_while_held(
        self, eco_target: EcosystemTarget, location: str | None, name: str, cancel_bound: float
    ) -> None:
        need(eco_target.holds, no_hold_reason(eco_target))
        existing = str(uuid.uuid4())
        if location is not None:  # something for the delete to delete
            async with eco_target.open(location=location) as setup:
                await setup.save(_with_id(name, existing, {"v": "old"}))
        late = []

        def call(storage: Any, method: str) -> Coroutine[Any, Any, Any]:
            if method == "save":
                return storage.save(checkpoint(name, {"v": "held"}))  # type: ignore[no-any-return]
            return storage.delete(existing)  # type: ignore[no-any-return]

        for method in ("save", "delete"):
            async with held(eco_target, location) as h:
                assert h is not None
                outcome = await cancel_while_held(
                    partial(call, h.instance, method), wait=max(5.0, 10 * cancel_bound)
                )
                await h.release()
                await finish(outcome.task)
            if outcome.late(cancel_bound):
                late.append(f"{method} {outcome.result} after {outcome.seconds:.2f} s")
        if late:
            fail(
                "a cancelled call must raise CancelledError promptly while the backend is held",
                expected=f"CancelledError within {cancel_bound:g} s from save and delete",
                observed="; ".join(late),
                detail="do not catch CancelledError (re-raise it after cleanup), and do not "
                "wait for the backend inside a shield or a thread join",
            )

    async def test_sweep_every_read_cancelled_while_held(
        self, eco_target: EcosystemTarget, location: str | None, name: str, cancel_bound: float
    ) -> None:
        """``load``, ``list_checkpoints``, ``list_checkpoint_ids`` and ``get_latest``, each
        cancelled while the backend is held: each raises ``CancelledError`` within the
        bound, and once the backend answers again the same instance's next calls (a
        ``save`` of another workflow, then the same read of it) get their own answers (a
        storage with one connection that leaves a cancelled read's reply on it hands that
        reply to the next read)."""
        need(eco_target.holds, no_hold_reason(eco_target))
        wrong: list[str] = []
        for n, row in enumerate(STORAGE_READS_AFTER):
            cancelled, after = f"{name}-{n}-cancelled", f"{name}-{n}-after"
            known = str(uuid.uuid4())
            if location is not None:  # something for the cancelled read to find
                async with eco_target.open(location=location) as setup:
                    known = str(await setup.save(_with_id(cancelled, known, {"v": "old"})))
            outcome, mine, got = await cancel_a_read_then_read_again(
                eco_target,
                location,
                partial(_read_by, row=row),
                partial(save_one, state={"v": "after"}),
                (cancelled, after),
                known,
                cancel_bound,
            )
            if outcome.late(cancel_bound):
                wrong.append(f"{row} {outcome.result} after {outcome.seconds:.2f} s")
            expected = [mine] if row.startswith("list") else mine
            if got != expected:
                wrong.append(
                    f"the {row} that followed answered {got!r} for workflow {after!r}, "
                    f"expected {expected!r}"
                )
        if wrong:
            fail(
                "a cancelled read must raise CancelledError promptly while the backend is "
                "held, and leave the next call its own answer",
                expected=f"CancelledError within {cancel_bound:g} s from every read, then "
                "the next read's own answer",
                observed="; ".join(wrong),
                detail="a read cancelled before its reply came must leave no unread reply on "
                "the connection (close or reset it), nor wait for the reply inside a shield",
            )


class CheckpointStorageConformance(
    CheckpointStorageSemanticsTests,
    CheckpointStorageCancellationTests,
    CheckpointStorageConcurrencyTests,
    CheckpointStorageIsolationTests,
    CheckpointStorageDurabilityTests,
    CheckpointStorageHygieneTests,
    CheckpointStorageScenarioTests,
    CheckpointStorageSweepTests,
    CheckpointStorageHeldSweepTests,
):
    """Every group for an agent-framework storage; subclass it and override the factory."""

"""Coverage of an ecosystem target: which cells of a saver's or storage's API a run exercised.

The storage suite measures what it did over the storage protocol
(`checkpointkit.conformance.coverage`); this module does the same over the
interfaces of the ecosystem suites, and records into the same `Coverage`, so
the report shows it the same way (text, JSON, JUnit properties, HTML) and a
reachable cell that no test exercised keeps a target from ``full``.

Every instance that `EcosystemTarget.open` gives is a probe
(`probe`) that delegates to the saver or storage and classifies each call into
cells of these matrices:

``state`` (both)
    each method against the state of what it names (a LangGraph thread, an
    agent-framework checkpoint id or workflow): ``missing`` (never written),
    ``existing`` (written through this instance), ``after delete``,
    ``other instance`` (written through another open instance on the same
    location) and ``reopened`` (written through an instance closed since).
    A saver's sync twins (``put``, ``get_tuple``...) have the first three;
    ``adelete_for_runs`` names runs: ``missing`` or ``existing``.
``after`` (both)
    each reading method against the kind of write that last changed what it
    reads: a LangGraph thread's ``aget_tuple`` (by id, latest) and ``alist``
    after ``aput``, ``aput_writes``, ``adelete_thread``, ``acopy_thread`` (into
    it), ``aprune``, ``adelete_for_runs`` (of a run that wrote its newest
    checkpoint), ``adelete_thread`` of the thread it was copied from
    (``source deleted``), and ``acopy_thread`` into it or ``aput`` on it after
    ``adelete_thread`` deleted it (``deleted, then copied again``, ``deleted,
    then put again``: a delete that leaves pending writes behind shows them
    there), and the sync twins of each against the sync twins
    of each and the async methods (LangGraph's sync runner, ``get_state`` and
    ``update_state`` call them on the saver an async run uses); an
    agent-framework checkpoint's ``load`` and a workflow's listings and
    ``get_latest`` after ``save`` and ``delete``; and `BY_ANOTHER_INSTANCE`,
    a read through an instance that read the same thread or checkpoint before
    another instance on the same data changed it. A saver that caches what it
    read and forgets the cache on some writes only answers from before the
    others.
``namespaces`` (LangGraph)
    ``aput``, ``aput_writes``, ``aget_tuple`` (by id, latest) and ``alist``, and
    the sync reads ``get_tuple`` and ``list``, by the shape of the namespace they
    name (`NAMESPACE_COLUMNS`): the root, a subgraph's, a nested subgraph's, one
    that shares a prefix with another of the same thread (marked only while both
    are known to the location), one holding query syntax.
``ids`` (both)
    the thread ids (LangGraph) or workflow names and checkpoint ids
    (agent-framework) a call names, by shape (`ID_ROWS`): twins that a
    ``LIKE``, a glob or a regular expression, a case-folding or space-padding
    collation, Unicode normalization or a 255-character column takes for one
    id (marked only while both twins are known to the location), and ids
    holding path or key separators, query syntax, control characters or
    non-ASCII characters; against each method that names one (LangGraph's
    async methods, and ``alist every thread``: a tuple of ``alist(None)``
    naming it; agent-framework's methods naming a workflow, and ``save
    checkpoint id``, ``load`` and ``delete`` by the checkpoint id they name).
``filters`` (LangGraph)
    ``alist``'s ``filter`` by the shape of its key (`FILTER_ROWS`: LangGraph's
    ``source`` and ``step``, an application's key, one with a dot, one with a
    hyphen, one with a quote, a space and a non-ASCII letter) against the kind
    of its value (`FILTER_COLUMNS`), a filter of two keys, a filter of
    ``alist(None)`` (every thread), and a filter of the synchronous ``list``.
``listing`` (LangGraph)
    ``alist`` (and ``list``) of every thread (config None), of one thread,
    with ``filter``, ``before`` and ``limit``, and with each combination of
    them; and of a config naming a checkpoint (``checkpoint_id``), alone and
    with each of the three.
``sizes`` (both)
    a channel value, write or state value of 0 bytes, 1 KiB, 1 MiB and
    4 MiB put and read back.
``lifecycle`` (both)
    each writing and reading method cancelled while the backend is held;
    unreachable for a method that returned while held (the target's hold does
    not hold it: a hold of writes alone, a read served from a cache).
``lengths`` (both)
    how many checkpoints a call must go through, at each of `lengths`: a
    LangGraph thread's ``alist`` (whole, with ``limit``, with ``before``: the
    row is how many it must yield), ``aget_tuple`` of its latest, the same
    reads through the sync twins (``list``, ``get_tuple``), its
    ``adelete_thread``, ``acopy_thread`` and ``aprune``, and ``pending
    writes`` (``aget_tuple`` of a checkpoint holding that many writes); an
    agent-framework workflow's ``list_checkpoints``, ``list_checkpoint_ids``
    and ``get_latest``. A backend that answers a query a page at a time (100
    items, 1,000, 1 MB) loses the rest when the continuation is not followed.
    A thread or workflow is counted only while every write to it went through
    a probe and none is in flight or failed (a cell is only ever left out,
    never claimed).

A cell is reachable when the instance and the target make it possible: a
method the saver's class does not implement (LangGraph's base raises
``NotImplementedError``) has no reachable cell, and the report says so
(`EcosystemReach.unreachable`); ``other instance`` needs a factory that takes
``location``, ``reopened`` a durable one too, ``cancelled while held`` a hold
(or the stalling proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from ..coverage import Cell, CoverageRecorder, Readers, active_recorder, size_label
from .filters import FILTER_ROWS, column_of, columns_of, row_of
from .ids import ID_ROWS, IdShapes
from .namespaces import NAMESPACE_COLUMNS, NamespaceShapes

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "LENGTH_LIMITS",
    "SAVER_ASYNC",
    "SAVER_SYNC",
    "SIZES",
    "STATES",
    "STORAGE_METHODS",
    "EcosystemReach",
    "closed",
    "implemented",
    "is_probe",
    "lengths",
    "probe",
    "set_held",
    "writes_before",
]

STATES = ("missing", "existing", "after delete", "other instance", "reopened")
"""The ``state`` matrix's columns."""
SYNC_STATES = STATES[:3]
RUN_STATES = STATES[:2]
SAVER_ASYNC = (
    "aput",
    "aput_writes",
    "aget_tuple",
    "alist",
    "adelete_thread",
    "adelete_for_runs",
    "acopy_thread",
    "aprune",
)
"""A LangGraph saver's async methods (the last three are optional in LangGraph)."""
SAVER_SYNC = tuple(m[1:] for m in SAVER_ASYNC)
"""Their sync twins (``put``, ``put_writes``, ...)."""
SAVER_WRITES = (
    "aput",
    "aput_writes",
    "adelete_thread",
    "adelete_for_runs",
    "acopy_thread",
    "aprune",
)
SAVER_HELD = (*SAVER_WRITES, "aget_tuple", "alist")
"""The rows of a saver's ``lifecycle`` matrix: each writing and reading method."""
STORAGE_METHODS = (
    "save",
    "load",
    "delete",
    "list_checkpoints",
    "list_checkpoint_ids",
    "get_latest",
)
"""An agent-framework ``CheckpointStorage``'s methods."""
STORAGE_WRITES = ("save", "delete")
NAMESPACED = (
    "aput",
    "aput_writes",
    "aget_tuple by id",
    "aget_tuple latest",
    "alist",
    "get_tuple by id",
    "get_tuple latest",
    "list",
)
"""The rows of ``namespaces``: each method naming a namespace (the sync reads too: a saver
with a sync and an async path builds its query twice)."""
_SAVER_READS = ("aget_tuple by id", "aget_tuple latest", "alist")
SAVER_READS_AFTER = (*_SAVER_READS, *(read[1:] for read in _SAVER_READS))
"""The rows of a saver's ``after`` matrix: each read, async and sync."""
_SAVER_WRITES = ("aput", "aput_writes", "adelete_thread", "acopy_thread", "aprune")
SAVER_WRITES_BEFORE = (
    *_SAVER_WRITES,
    "adelete_for_runs",
    "source deleted",
    "deleted, then copied again",
    "deleted, then put again",
    *(write[1:] for write in (*_SAVER_WRITES, "adelete_for_runs")),
)
"""The columns of a saver's ``after`` matrix: the write that last changed a thread, async
and sync (``adelete_for_runs``: of a run that wrote its newest checkpoint; ``source
deleted``: ``adelete_thread`` of the thread it was copied from; ``deleted, then copied
again`` and ``deleted, then put again``: ``acopy_thread`` into a thread, or ``aput`` on
it, after ``adelete_thread`` deleted it, so that what the delete left behind shows)."""
SAVER_SEQUENCES = ("source deleted", "deleted, then copied again", "deleted, then put again")
"""The columns of ``after`` that name a sequence of async writes, not one method."""
BY_ANOTHER_INSTANCE = "by another instance"
"""The column of ``after`` of a read through an instance that read the same thread or
checkpoint before another instance on the same data changed it (a cache kept in the
instance answers from before that write)."""
STORAGE_READS_AFTER = ("load", "list_checkpoints", "list_checkpoint_ids", "get_latest")
"""The rows of a storage's ``after`` matrix."""
LIST_OPTIONS = (
    "config None",
    "thread",
    "filter",
    "before",
    "limit",
    "filter + before",
    "filter + limit",
    "before + limit",
    "filter + before + limit",
    "checkpoint id",
    "checkpoint id + filter",
    "checkpoint id + before",
    "checkpoint id + limit",
)
"""The columns of ``listing``: what an ``alist`` (or ``list``) selects by, each option and
each combination of them (a saver that applies ``limit`` before a ``filter`` it checks
itself answers fewer checkpoints than the limit), and a config naming a checkpoint
(``checkpoint_id``: that checkpoint alone), alone and with each option (a saver that
builds its query from the thread and namespace lists the whole thread)."""
SIZES = (0, 1024, 1024 * 1024, 4 * 1024 * 1024)
"""The value sizes of the ``sizes`` matrix: 4 MiB is past the common item limits (1 MiB,
DynamoDB's 400 KB) and past ten parts of 256 KiB (parts read back in the text order of
their keys, ``part10`` before ``part2``, come back out of order)."""
HELD = "cancelled while held"
DEFAULT_MAX_LENGTH = 1025
"""The most checkpoints the ``lengths`` matrix puts in one thread or workflow, unless the
target sets fewer (`EcosystemTarget.max_length`)."""
LENGTH_LIMITS: dict[int, str] = {
    10: "Elasticsearch's default search size, Redis SCAN's default COUNT",
    100: "a Cosmos DB query page, DynamoDB's BatchGetItem",
    101: "MongoDB's first cursor batch",
    1000: "an S3 or Azure Table listing page, PostgREST's default row cap",
}
"""The most items one answer of some common backends holds: the ``lengths`` matrix has
each and one more (a saver must follow the continuation to the end)."""
SAVER_LENGTH_COLUMNS = (
    "alist",
    "alist limit",
    "alist before",
    "aget_tuple latest",
    "pending writes",
    "adelete_thread",
    "acopy_thread",
    "aprune",
    "list",
    "list limit",
    "list before",
    "get_tuple latest",
)
STORAGE_LENGTH_COLUMNS = ("list_checkpoints", "list_checkpoint_ids", "get_latest")
SAVER_ID_COLUMNS = (
    "aput",
    "aput_writes",
    "aget_tuple",
    "alist",
    "alist every thread",
    "adelete_thread",
    "acopy_thread",
    "aprune",
)
"""The columns of a saver's ``ids`` matrix: each async method naming a thread, and a tuple
of ``alist(None)`` naming one."""
STORAGE_ID_COLUMNS = (
    "save",
    "list_checkpoints",
    "list_checkpoint_ids",
    "get_latest",
    "save checkpoint id",
    "load",
    "delete",
)
"""The columns of a storage's ``ids`` matrix: the methods naming a workflow, and those
naming a checkpoint id (``save checkpoint id``: the id of the checkpoint a ``save``
stores), whose rows are of the checkpoint ids alone (a checkpoint id and a workflow name
are never twins)."""
_SIZE_LABELS = {size: size_label(size) for size in SIZES}


def lengths(cap: int) -> list[int]:
    """The rows of the ``lengths`` matrix up to ``cap``: 1, 2, each power of two and one
    more, each of `LENGTH_LIMITS` and one more, and ``cap``."""
    out = {1, 2, cap}
    out |= {2**k + 1 for k in range(1, cap.bit_length()) if 2**k + 1 <= cap}
    out |= {n for limit in LENGTH_LIMITS for n in (limit, limit + 1) if n <= cap}
    return sorted(n for n in out if n <= cap)


def writes_before(ecosystem: str, has: AbstractSet[str]) -> list[str]:
    """The columns of ``after`` that the methods an instance implements (``has``) allow."""
    if ecosystem != "langgraph":
        return [w for w in STORAGE_WRITES if w in has]
    needs = {
        "source deleted": ("acopy_thread", "adelete_thread"),
        "deleted, then copied again": ("acopy_thread", "adelete_thread"),
        "deleted, then put again": ("aput", "adelete_thread"),
    }
    return [w for w in SAVER_WRITES_BEFORE if all(m in has for m in needs.get(w, (w,)))]


def _length_columns(ecosystem: str, has: AbstractSet[str]) -> list[str]:
    """The ``lengths`` columns of the methods an instance implements."""
    if ecosystem != "langgraph":
        return [m for m in STORAGE_LENGTH_COLUMNS if m in has]
    need = {"pending writes": ("aput_writes", "aget_tuple"), "aget_tuple latest": ("aget_tuple",)}
    return [
        c
        for c in SAVER_LENGTH_COLUMNS
        if "aput" in has and all(m in has for m in need.get(c, (c.split()[0],)))
    ]


def _rows(method: str) -> list[str]:
    """The ``state`` rows of a method (``aget_tuple`` reads by id and the latest)."""
    if method in ("aget_tuple", "get_tuple"):
        return [f"{method} by id", f"{method} latest"]
    return [method]


@dataclass(frozen=True)
class EcosystemReach:
    """What makes the cells of a saver's or storage's matrices reachable.

    Attributes:
        ecosystem: ``"langgraph"`` or ``"agent-framework"``.
        implemented: the methods the instance's class implements.
        absent: ``(method, why)`` for each method it does not.
        reopens: the factory takes ``location`` (a second instance on the same data).
        durable: the target says its data outlives the instance.
        holds: the target can hold its backend (a hold, or the stalling proxy).
        kind: the class of the instance, for the report.
        max_length: the largest row of ``lengths`` (`EcosystemTarget.max_length`).
    """

    ecosystem: str
    implemented: tuple[str, ...]
    absent: tuple[tuple[str, str], ...] = ()
    reopens: bool = False
    durable: bool = False
    holds: bool = False
    kind: str = ""
    max_length: int = DEFAULT_MAX_LENGTH

    @property
    def matrices(self) -> tuple[str, ...]:
        """The matrices of the ecosystem, in report order."""
        if self.ecosystem == "langgraph":
            return (
                "state",
                "after",
                "namespaces",
                "listing",
                "filters",
                "ids",
                "sizes",
                "lengths",
                "lifecycle",
            )
        return ("state", "after", "ids", "sizes", "lengths", "lifecycle")

    def _deletes(self) -> bool:
        """Whether the instance can delete (a thread or a checkpoint)."""
        return bool({"adelete_thread", "delete_thread", "delete"} & set(self.implemented))

    def _states(self, method: str) -> tuple[str, ...]:
        if method in ("adelete_for_runs", "delete_for_runs"):
            return RUN_STATES
        states = SYNC_STATES if method in SAVER_SYNC else STATES
        return tuple(
            s
            for s in states
            if not (s == "other instance" and not self.reopens)
            and not (s == "reopened" and not (self.reopens and self.durable))
            and not (s == "after delete" and not self._deletes())
        )

    def cells(self) -> list[Cell]:
        """Every reachable cell, in report order."""
        has = set(self.implemented)
        out: list[Cell] = []
        methods = (*SAVER_ASYNC, *SAVER_SYNC) if self.ecosystem == "langgraph" else STORAGE_METHODS
        for method in methods:
            if method in has:
                for row in _rows(method):
                    out += [("state", row, s) for s in self._states(method)]
        reads = SAVER_READS_AFTER if self.ecosystem == "langgraph" else STORAGE_READS_AFTER
        writes = writes_before(self.ecosystem, has)
        if self.reopens:
            writes = [*writes, BY_ANOTHER_INSTANCE]
        for row in reads:
            if row.split()[0] in has:
                out += [("after", row, write) for write in writes]
        if self.ecosystem == "langgraph":
            for row in NAMESPACED:
                if row.split()[0] in has:
                    out += [("namespaces", row, ns) for ns in NAMESPACE_COLUMNS]
            for method in ("alist", "list"):
                if method in has:
                    out += [("listing", method, option) for option in LIST_OPTIONS]
            if "alist" in has:
                out += [
                    ("filters", r, c)
                    for r in FILTER_ROWS
                    for c in columns_of(r)
                    if c != "sync list" or "list" in has
                ]
            named = [c for c in SAVER_ID_COLUMNS if c.split()[0] in has]
            columns: tuple[str, ...] = ("aput", "aput_writes", "aget_tuple")
        else:
            named = [c for c in STORAGE_ID_COLUMNS if c.split()[0] in has]
            columns = ("save", "load")
        out += [("ids", row, column) for row in ID_ROWS for column in named]
        for size in SIZES:
            out += [("sizes", _SIZE_LABELS[size], m) for m in columns if m in has]
        for n in lengths(self.max_length):
            out += [("lengths", str(n), c) for c in _length_columns(self.ecosystem, has)]
        if self.holds:
            for method in SAVER_HELD if self.ecosystem == "langgraph" else STORAGE_METHODS:
                if method in has:
                    out.append(("lifecycle", method, HELD))
        return out

    def reachable(self, exercised: AbstractSet[Cell]) -> list[Cell]:
        """`cells`, without the held cells of a method that the hold did not hold.

        A method that returned while the backend was held (the
        ``("held", method, "returned")`` marker) and was never cancelled while
        held is not stopped by the target's hold (it holds other requests, or
        the method needs no round trip): it cannot be in flight under it.
        """
        not_held = set(_not_held(exercised))
        return [c for c in self.cells() if c not in not_held]

    def unreachable(self, exercised: AbstractSet[Cell] = frozenset()) -> list[str]:
        """Why rows and columns are unreachable: absent methods, what the target lacks."""
        notes = [f"{m}: {why}" for m, why in self.absent]
        notes += [
            f"{row} {HELD}: it returned while the backend was held (the target's hold does "
            "not hold it)"
            for _, row, _ in _not_held(exercised)
        ]
        if not self._deletes():
            notes.append("after delete: the instance implements no delete")
        if not self.reopens:
            notes.append(
                "other instance, reopened: the factory takes no location (no second instance "
                "on the same data)"
            )
        elif not self.durable:
            notes.append("reopened: the target does not say it is durable")
        if self.max_length < DEFAULT_MAX_LENGTH:
            notes.append(
                f"lengths above {self.max_length}: the target's max_length (the default is "
                f"{DEFAULT_MAX_LENGTH})"
            )
        if not self.holds:
            notes.append(
                f"{HELD}: the target has no hold (give the EcosystemTarget a hold, or a factory "
                "taking endpoint= with upstream= set)"
            )
        return notes


def _not_held(exercised: AbstractSet[Cell]) -> list[Cell]:
    """The held cells that the markers in ``exercised`` make unreachable."""
    return [
        ("lifecycle", row, HELD)
        for kind, row, column in sorted(exercised)
        if kind == "held" and column == "returned" and ("lifecycle", row, HELD) not in exercised
    ]


def implemented(
    instance: Any, ecosystem: str
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The methods ``instance``'s class implements, and ``(method, why)`` for the others.

    A LangGraph method is implemented when the class overrides
    ``BaseCheckpointSaver``'s (whose own raises ``NotImplementedError``), which
    is also how ``langgraph-checkpoint-conformance`` detects capabilities. An
    agent-framework method is implemented when it is there and is not the
    ``CheckpointStorage`` protocol's empty body. A method that the installed
    version's ``BaseCheckpointSaver`` or ``CheckpointStorage`` does not define
    (``aprune`` before LangGraph had it) is neither: it is not part of the API.
    """
    cls = type(instance)
    has: list[str] = []
    absent: list[tuple[str, str]] = []
    if ecosystem == "langgraph":
        from langgraph.checkpoint.base import BaseCheckpointSaver

        for method in (*SAVER_ASYNC, *SAVER_SYNC):
            base = getattr(BaseCheckpointSaver, method, None)
            if base is None:  # not in the installed LangGraph's saver API
                continue
            if getattr(cls, method, None) is base:
                absent.append(
                    (
                        method,
                        f"{cls.__name__} does not implement it (BaseCheckpointSaver's raises "
                        "NotImplementedError)",
                    )
                )
            else:
                has.append(method)
        return tuple(has), tuple(absent)
    from agent_framework import CheckpointStorage

    for method in STORAGE_METHODS:
        if not hasattr(CheckpointStorage, method):  # not in the installed protocol
            continue
        own = getattr(cls, method, None)
        if not callable(own):
            absent.append((method, f"{cls.__name__} has no {method}()"))
        elif own is getattr(CheckpointStorage, method, None):
            absent.append((method, f"{cls.__name__} keeps the protocol's empty {method}()"))
        else:
            has.append(method)
    return tuple(has), tuple(absent)


# -- what the probes of one location saw --------------------------------------------------
@dataclass
class _Scope:
    state: dict[Any, str] = field(default_factory=dict)  # name -> "present" | "deleted"
    writer: dict[Any, int] = field(default_factory=dict)  # name -> probe that wrote it
    closed_at: dict[int, int] = field(default_factory=dict)  # probe -> order it closed in
    runs: dict[str, set[str]] = field(default_factory=dict)  # a run id put -> its threads
    readers: Readers = field(default_factory=Readers)  # who read each name since its write
    members: dict[str, set[str]] = field(default_factory=dict)  # workflow -> checkpoint ids
    # what is known exactly, for ``lengths``: a thread -> namespace -> checkpoint ids, a
    # (thread, namespace, checkpoint id) -> its writes' (task, index), workflows counted
    threads: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    writes: dict[tuple[str, str, str], set[tuple[str, int]]] = field(default_factory=dict)
    counted: set[str] = field(default_factory=set)
    busy: dict[Any, int] = field(default_factory=dict)  # name -> its writes in flight
    changed_by: dict[Any, str] = field(default_factory=dict)  # name -> its last write
    copied_from: dict[str, str] = field(default_factory=dict)  # a copy -> its source thread
    lost: set[Any] = field(default_factory=set)  # names no longer counted (`forget`)
    ids: IdShapes = field(default_factory=IdShapes)  # thread ids, workflow names: their rows
    checkpoint_ids: IdShapes = field(default_factory=IdShapes)  # agent-framework's: their rows
    namespaces: NamespaceShapes = field(default_factory=NamespaceShapes)  # of each thread


_SCOPES: dict[str, _Scope] = {}
_order = itertools.count()


class _Classifier:
    """Records the cells of one instance's calls; shared by both ecosystems' probes."""

    def __init__(self, name: str, reach: EcosystemReach, location: str | None) -> None:
        self.name = name
        self.rec: CoverageRecorder = active_recorder()
        self.rec.target(name, reach)
        self.scope = _Scope() if location is None else _SCOPES.setdefault(location, _Scope())
        self.rec_reach = reach
        self.id = next(_order)
        self.held = False

    def mark(self, matrix: str, row: str, column: str) -> None:
        self.rec.record(self.name, (matrix, row, column))

    def state_of(self, name: Any) -> str:
        state = self.scope.state.get(name)
        if state is None:
            return "missing"
        if state == "deleted":
            return "after delete"
        writer = self.scope.writer.get(name, self.id)
        if writer == self.id:
            return "existing"
        closed_at = self.scope.closed_at.get(writer)
        return "reopened" if closed_at is not None and closed_at < self.id else "other instance"

    def states(self, row: str, names: Iterable[Any], allowed: tuple[str, ...] = STATES) -> None:
        for state in {self.state_of(n) for n in names}:
            if state in allowed:
                self.mark("state", row, state)

    def held_call(self, method: str, held: bool, cancelled: bool) -> None:
        """A call of ``method`` ended (``cancelled`` or returned); ``held``: the backend was
        held when it began. Cancelled while held, it exercises its ``lifecycle`` cell;
        returned with the backend held from start to end, it shows that the target's hold
        does not hold it (the ``("held", method, "returned")`` marker)."""
        if cancelled and (held or self.held):
            self.mark("lifecycle", method, HELD)
        elif not cancelled and held and self.held:
            self.mark("held", method, "returned")

    def changed(self, name: Any, write: str | None) -> None:
        """``name`` was last changed by ``write`` (None: by a write not classified), through
        this instance: the instances that read it before read it again after another's."""
        self.scope.readers.wrote(name, self.id)
        if write is None:
            self.scope.changed_by.pop(name, None)
        else:
            self.scope.changed_by[name] = write

    def after(self, row: str, name: Any) -> None:
        """The ``after`` cells of reading ``name`` by ``row``: of its last write, if known,
        and `BY_ANOTHER_INSTANCE` if this instance read it before another one's write."""
        write = self.scope.changed_by.get(name)
        if write is not None:
            self.mark("after", row, write)
        if self.scope.readers.used(name, self.id):
            self.mark("after", row, BY_ANOTHER_INSTANCE)

    def ids(self, column: str, name: str | None) -> None:
        """The ``ids`` cells of a call of ``column`` naming ``name`` (a thread, a workflow)."""
        if isinstance(name, str):
            for row in self.scope.ids.rows(name):
                self.mark("ids", row, column)

    def checkpoint_ids(self, column: str, checkpoint_id: str) -> None:
        """The ``ids`` cells of a call of ``column`` naming an agent-framework checkpoint id."""
        for row in self.scope.checkpoint_ids.rows(checkpoint_id):
            self.mark("ids", row, column)

    def namespaces(self, row: str, thread: str | None, ns: str) -> None:
        """The ``namespaces`` cells of a call of ``row`` naming ``ns`` of ``thread``."""
        if thread is not None:
            for column in self.scope.namespaces.columns(thread, ns):
                self.mark("namespaces", row, column)

    def wrote(self, name: Any) -> None:
        self.scope.state[name] = "present"
        self.scope.writer[name] = self.id

    def deleted(self, name: Any) -> None:
        self.scope.state[name] = "deleted"
        self.scope.writer.pop(name, None)

    def length(self, column: str, n: int | None) -> None:
        """Mark ``("lengths", n, column)`` when ``n`` is one of the rows."""
        if n is not None and n in self.length_rows:
            self.mark("lengths", str(n), column)

    @functools.cached_property
    def length_rows(self) -> frozenset[int]:
        return frozenset(lengths(self.rec_reach.max_length))

    def begin(self, name: Any) -> None:
        """A write of ``name`` starts: nothing of it is counted until it ends."""
        self.scope.busy[name] = self.scope.busy.get(name, 0) + 1

    def end(self, name: Any, ok: bool) -> None:
        """A write of ``name`` ended; one that failed or was cancelled may land later, so
        what is known of ``name`` is dropped."""
        left = self.scope.busy.pop(name, 1) - 1
        if left:
            self.scope.busy[name] = left
        if not ok:
            self.forget(name)

    def forget(self, name: Any) -> None:
        """Stop counting ``name`` (a thread or a workflow), for good."""
        self.scope.lost.add(name)
        self.scope.threads.pop(name, None)
        self.scope.counted.discard(name)
        for key in [k for k in self.scope.writes if k[0] == name]:
            del self.scope.writes[key]

    def counts(self, name: Any) -> bool:
        """Whether ``name`` is counted exactly now (known, and no write of it in flight)."""
        return not self.scope.busy.get(name)

    def sizes(self, column: str, values: Iterable[Any]) -> None:
        for value in values:
            if isinstance(value, str | bytes) and len(value) in _SIZE_LABELS:
                self.mark("sizes", _SIZE_LABELS[len(value)], column)

    def close(self) -> None:
        self.scope.closed_at.setdefault(self.id, next(_order))


# -- LangGraph --------------------------------------------------------------------------------
def _thread(config: Any) -> tuple[str | None, str]:
    conf = (config or {}).get("configurable", {}) if isinstance(config, dict) else {}
    thread = conf.get("thread_id")
    return (None if thread is None else str(thread)), str(conf.get("checkpoint_ns") or "")


def _tuple_values(t: Any) -> list[Any]:
    if t is None:
        return []
    values = list(t.checkpoint.get("channel_values", {}).values())
    return values + [w[2] for w in (t.pending_writes or [])]


class _SaverCalls:
    """The classification of each saver method, before and after the inner call."""

    def __init__(self, c: _Classifier, sync: bool) -> None:
        self.c = c
        self.sync = sync
        self.writing: list[str] = []  # the threads this call writes (`_Classifier.begin`)
        self.after: Callable[[Any], None] | None = None  # learns from the answer
        self.each: Callable[[Any], None] | None = None  # learns from each tuple listed

    def row(self, method: str) -> str:
        return method[1:] if self.sync else method

    def named(self, method: str, *threads: str | None) -> None:
        """The ``ids`` cells of an async call of ``method`` naming ``threads``."""
        if not self.sync:
            for thread in threads:
                self.c.ids(method, thread)

    def allowed(self) -> tuple[str, ...]:
        return SYNC_STATES if self.sync else STATES

    def begin(self, *threads: str) -> None:
        for thread in threads:
            self.c.begin(thread)
            self.writing.append(thread)

    def end(self, ok: bool) -> None:
        """The call ended (``ok``: it returned): end the writes it began."""
        for thread in self.writing:
            self.c.end(thread, ok)

    def counted(self, thread: str | None) -> dict[str, set[str]] | None:
        """The namespaces and checkpoint ids of ``thread`` when it is counted exactly."""
        c = self.c
        if thread is None or not c.counts(thread):
            return None
        return c.scope.threads.get(thread)

    def length(self, column: str, thread: str, n: int | None) -> None:
        """The ``lengths`` cell of ``column`` (an async method's; a sync call marks its
        twin's column, where there is one) when ``thread`` is counted."""
        if self.sync:
            column = column[1:]
            if column not in SAVER_LENGTH_COLUMNS:
                return
        if self.counted(thread) is not None:
            self.c.length(column, n)

    def changed(self, thread: str, method: str) -> None:
        """``thread`` was changed by ``method`` (its sync twin's name, for a sync call)."""
        self.c.changed(thread, self.row(method))

    def read(self, row: str, thread: str) -> None:
        """The ``after`` cell of a read of ``thread`` (``row`` names it, sync or async)."""
        self.c.after(row, thread)

    def put(self, config: Any, checkpoint: Any, metadata: Any) -> Any:
        thread, ns = _thread(config)
        c, row = self.c, self.row("aput")
        if thread is not None:
            c.states(row, [thread], self.allowed())
            self.begin(thread)
        self.named("aput", thread)
        if not self.sync:
            c.namespaces("aput", thread, ns)
            c.sizes("aput", (checkpoint or {}).get("channel_values", {}).values())
        scope = c.scope
        counts = thread is not None and thread not in scope.lost
        fresh = counts and scope.state.get(thread) in (None, "deleted")
        again = not self.sync and thread is not None and scope.state.get(thread) == "deleted"
        made = (checkpoint or {}).get("id") if isinstance(checkpoint, dict) else None

        def after(_: Any) -> None:
            if thread is not None:
                c.wrote(thread)
                if again:
                    c.changed(thread, "deleted, then put again")
                else:
                    self.changed(thread, "aput")
                if counts and made is not None and (fresh or thread in scope.threads):
                    scope.threads.setdefault(thread, {}).setdefault(ns, set()).add(str(made))
            run = (metadata or {}).get("run_id") if isinstance(metadata, dict) else None
            if run is not None and thread is not None:
                c.scope.runs.setdefault(str(run), set()).add(thread)

        return after

    def put_writes(self, config: Any, writes: Any, task_id: Any) -> Any:
        thread, ns = _thread(config)
        c = self.c
        if thread is not None:
            c.states(self.row("aput_writes"), [thread], self.allowed())
            self.begin(thread)
        self.named("aput_writes", thread)
        if not self.sync:
            c.namespaces("aput_writes", thread, ns)
            c.sizes("aput_writes", (w[1] for w in writes or () if len(w) > 1))
        made = (config or {}).get("configurable", {}).get("checkpoint_id")
        if thread is None or made is None:
            return None
        from langgraph.checkpoint.base import WRITES_IDX_MAP

        given = {(str(task_id), WRITES_IDX_MAP.get(w[0], i)) for i, w in enumerate(writes or ())}

        def after(_: Any) -> None:
            self.changed(thread, "aput_writes")
            if str(made) in c.scope.threads.get(thread, {}).get(ns, ()):
                c.scope.writes.setdefault((thread, ns, str(made)), set()).update(given)

        return after

    def get_tuple(self, config: Any) -> Any:
        thread, ns = _thread(config)
        made = (config or {}).get("configurable", {}).get("checkpoint_id")
        row = f"{self.row('aget_tuple')} {'by id' if made else 'latest'}"
        c = self.c
        self.named("aget_tuple", thread)
        if thread is not None:
            c.states(row, [thread], self.allowed())
            self.read(row, thread)
            known = self.counted(thread)
            if known is not None and made is None:
                self.length("aget_tuple latest", thread, len(known.get(ns, ())))
            elif known is not None and str(made) in known.get(ns, ()):
                writes = c.scope.writes.get((thread, ns, str(made)), ())
                self.length("pending writes", thread, len(writes))
        c.namespaces(row, thread, ns)
        if not self.sync:
            return lambda t: c.sizes("aget_tuple", _tuple_values(t))
        return None

    def list(self, config: Any, filter: Any, before: Any, limit: Any) -> Any:
        thread, ns = _thread(config)
        c, row = self.c, self.row("alist")
        self.named("alist", thread)
        if config is None:
            c.mark("listing", row, "config None")
            if not self.sync:
                self.each = lambda t: c.ids("alist every thread", _thread(t.config)[0])
        only = (config or {}).get("configurable", {}).get("checkpoint_id")
        if thread is not None:
            c.states(row, [thread], self.allowed())
            self.read(row, thread)
            c.mark("listing", row, "checkpoint id" if only else "thread")
            if "checkpoint_ns" in (config or {}).get("configurable", {}):
                c.namespaces(row, thread, ns)
            known = self.counted(thread)
            if known is not None and not filter:
                every = "checkpoint_ns" not in (config or {}).get("configurable", {})
                ids = [i for n, got in known.items() if every or n == ns for i in got]
                if only:
                    ids = [i for i in ids if i == str(only)]
                end = (before or {}).get("configurable", {}).get("checkpoint_id")
                if end is not None:
                    ids = [i for i in ids if i < str(end)]
                n = len(ids) if limit is None else min(len(ids), int(limit))
                column = "alist before" if end else "alist limit" if limit is not None else "alist"
                self.length(column, thread, n)
        given = [
            option
            for option, value in (("filter", filter), ("before", before), ("limit", limit))
            if value is not None
        ]
        if isinstance(filter, dict):
            self.filters(filter, every=config is None, sync=self.sync)
        for option in given:
            c.mark("listing", row, option)
            if thread is not None and only:
                c.mark("listing", row, f"checkpoint id + {option}")
        if len(given) > 1:
            c.mark("listing", row, " + ".join(given))
        return None

    def filters(self, given: dict[Any, Any], every: bool, sync: bool = False) -> None:
        """The ``filters`` cells of an ``alist`` filter (``every``: of every thread;
        ``sync``: of the synchronous ``list``, which marks its column only)."""
        for key, value in given.items():
            row, column = row_of(key), column_of(value)
            if row is None:
                continue
            if sync:
                self.c.mark("filters", row, "sync list")
                continue
            if column in columns_of(row):
                self.c.mark("filters", row, column)
            if len(given) > 1:
                self.c.mark("filters", row, "with another key")
            if every:
                self.c.mark("filters", row, "every thread")

    def _total(self, thread: str) -> int | None:
        known = self.counted(thread)
        return None if known is None else sum(len(ids) for ids in known.values())

    def delete_thread(self, thread_id: Any) -> Any:
        c, thread = self.c, str(thread_id)
        c.states(self.row("adelete_thread"), [thread], self.allowed())
        self.named("adelete_thread", thread)
        self.length("adelete_thread", thread, self._total(thread))
        self.begin(thread)

        def after(_: Any) -> None:
            c.deleted(thread)
            self.changed(thread, "adelete_thread")
            for copy, source in list(c.scope.copied_from.items()):
                if source == thread:  # the column is the async delete's
                    c.changed(copy, None if self.sync else "source deleted")
            for key in [k for k in c.scope.writes if k[0] == thread]:
                del c.scope.writes[key]
            if thread not in c.scope.lost:
                c.scope.threads[thread] = {}

        return after

    def delete_for_runs(self, run_ids: Any) -> Any:
        c = self.c
        runs = [str(r) for r in run_ids or ()]
        column = "existing" if any(r in c.scope.runs for r in runs) else "missing"
        c.mark("state", self.row("adelete_for_runs"), column)
        # the threads of the runs' checkpoints put with a run id in their metadata; others
        # may hold some (a run id from the config), so nothing is counted or classified after
        threads = {t for r in runs for t in c.scope.runs.get(r, ())}
        for thread in list(c.scope.threads):
            c.forget(thread)
        self.begin(*threads)

        def after(_: Any) -> None:
            c.scope.changed_by.clear()
            for thread in threads:
                self.changed(thread, "adelete_for_runs")
            for run in runs:
                c.scope.runs.pop(run, None)

        return after

    def copy_thread(self, source: Any, target: Any) -> Any:
        c, source, target = self.c, str(source), str(target)
        c.states(self.row("acopy_thread"), [source], self.allowed())
        self.named("acopy_thread", source, target)
        self.length("acopy_thread", source, self._total(source))
        existed = c.state_of(source) not in ("missing", "after delete")
        known = self.counted(source)
        empty = c.scope.state.get(target) in (None, "deleted") and target not in c.scope.lost
        again = not self.sync and c.scope.state.get(target) == "deleted"
        self.begin(target)

        def after(_: Any) -> None:
            if again:
                c.changed(target, "deleted, then copied again")
            else:
                self.changed(target, "acopy_thread")
            c.scope.copied_from[target] = source
            for threads in c.scope.runs.values():  # the copy holds the source's runs too
                if source in threads:
                    threads.add(target)
            if existed:
                c.wrote(target)
            if known is None or not empty:
                c.forget(target)
                return
            c.scope.threads[target] = {ns: set(ids) for ns, ids in known.items()}
            for (thread, ns, made), writes in list(c.scope.writes.items()):
                if thread == source:
                    c.scope.writes[(target, ns, made)] = set(writes)

        return after

    def prune(self, thread_ids: Any, strategy: str) -> Any:
        c = self.c
        threads = [str(t) for t in thread_ids or ()]
        c.states(self.row("aprune"), threads, self.allowed())
        self.named("aprune", *threads)
        for thread in threads:
            self.length("aprune", thread, self._total(thread))
        self.begin(*threads)

        def after(_: Any) -> None:
            for thread in threads:
                self.changed(thread, "aprune")
                if strategy == "delete":
                    c.deleted(thread)
                known = c.scope.threads.get(thread)
                if known is None:
                    continue
                kept = {ns: {max(ids)} for ns, ids in known.items() if ids}
                c.scope.threads[thread] = {} if strategy == "delete" else kept
                for key in [k for k in c.scope.writes if k[0] == thread]:
                    if key[2] not in c.scope.threads[thread].get(key[1], ()):
                        del c.scope.writes[key]

        return after


def _saver_method(method: str) -> Any:
    """The probe's ``method``: classify, call the inner saver's, learn from the answer."""
    sync = method in SAVER_SYNC
    name = method if sync else method[1:]

    def classify(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _SaverCalls:
        calls = _SaverCalls(self._ck, sync)
        try:
            bound = _SIGNATURES[name](*args, **kwargs)
            calls.after = _quiet(getattr(calls, name)(*bound))
        except Exception:  # input the saver is to refuse: nothing to classify
            calls.end(False)
            calls.writing.clear()
            calls.after = None
        return calls

    if method == "alist":

        async def alist(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            each = _quiet(classify(self, args, kwargs).each)
            c: _Classifier = self._ck
            held = c.held
            try:
                async for item in self._inner.alist(*args, **kwargs):
                    if each is not None:
                        each(item)
                    yield item
            except asyncio.CancelledError:
                c.held_call(method, held, cancelled=True)
                raise
            c.held_call(method, held, cancelled=False)

        return alist
    if method == "list":

        def list_(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            classify(self, args, kwargs)
            yield from self._inner.list(*args, **kwargs)

        list_.__name__ = "list"
        return list_
    if sync:

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls = classify(self, args, kwargs)
            try:
                result = getattr(self._inner, method)(*args, **kwargs)
            except BaseException:
                calls.end(False)
                raise
            if calls.after is not None:
                calls.after(result)
            calls.end(True)
            return result

        call.__name__ = method
        return call

    async def acall(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls = classify(self, args, kwargs)
        c: _Classifier = self._ck
        held = c.held
        try:
            result = await getattr(self._inner, method)(*args, **kwargs)
        except BaseException as exc:
            calls.end(False)
            if isinstance(exc, asyncio.CancelledError):
                c.held_call(method, held, cancelled=True)
            raise
        c.held_call(method, held, cancelled=False)
        if calls.after is not None:
            calls.after(result)
        calls.end(True)
        return result

    acall.__name__ = method
    return acall


def _quiet(after: Any) -> Any:
    """``after`` (what a call taught), never raising: the probe must not change an answer."""
    if after is None:
        return None

    def learn(result: Any) -> None:
        with contextlib.suppress(Exception):
            after(result)

    return learn


def _sig_put(
    config: Any, checkpoint: Any, metadata: Any, new_versions: Any = None
) -> tuple[Any, ...]:
    return config, checkpoint, metadata


def _sig_put_writes(
    config: Any, writes: Any, task_id: Any = None, task_path: str = ""
) -> tuple[Any, ...]:
    return config, writes, task_id


def _sig_get_tuple(config: Any) -> tuple[Any, ...]:
    return (config,)


def _sig_list(
    config: Any = None, *, filter: Any = None, before: Any = None, limit: Any = None
) -> tuple[Any, ...]:
    return config, filter, before, limit


def _sig_delete_thread(thread_id: Any) -> tuple[Any, ...]:
    return (thread_id,)


def _sig_delete_for_runs(run_ids: Any) -> tuple[Any, ...]:
    return (run_ids,)


def _sig_copy_thread(source_thread_id: Any, target_thread_id: Any) -> tuple[Any, ...]:
    return source_thread_id, target_thread_id


def _sig_prune(thread_ids: Any, *, strategy: str = "keep_latest") -> tuple[Any, ...]:
    return thread_ids, strategy


_SIGNATURES: dict[str, Any] = {
    "put": _sig_put,
    "put_writes": _sig_put_writes,
    "get_tuple": _sig_get_tuple,
    "list": _sig_list,
    "delete_thread": _sig_delete_thread,
    "delete_for_runs": _sig_delete_for_runs,
    "copy_thread": _sig_copy_thread,
    "prune": _sig_prune,
}

_CLASSES: dict[tuple[type, tuple[str, ...]], type] = {}


def _with_signature_of(original: Any, wrapper: Any) -> Any:
    """``wrapper``, showing ``original``'s signature: LangGraph reads a saver's
    (``put_writes_accepts_task_path``) to decide what it passes, so a probe with a bare
    ``*args, **kwargs`` would be called without ``task_path``, unlike the saver."""
    with contextlib.suppress(TypeError, ValueError):
        wrapper.__signature__ = inspect.signature(original)
    return wrapper


def _saver_probe_class(cls: type, has: tuple[str, ...]) -> type:
    """A ``BaseCheckpointSaver`` that overrides exactly the methods ``cls`` implements."""
    known = _CLASSES.get((cls, has))
    if known is not None:
        return known
    from langgraph.checkpoint.base import BaseCheckpointSaver

    def __init__(self: Any, inner: Any, ck: _Classifier) -> None:
        BaseCheckpointSaver.__init__(self, serde=inner.serde)
        self.__dict__["_inner"] = inner
        self.__dict__["_ck"] = ck
        self.serde = inner.serde

    def __getattr__(self: Any, name: str) -> Any:  # the saver's own attributes
        if name in ("_inner", "_ck") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self: Any) -> str:
        return f"probe({self._inner!r})"

    def config_specs(self: Any) -> list[Any]:
        return list(self._inner.config_specs)

    def get_next_version(self: Any, current: Any, channel: None) -> Any:
        return self._inner.get_next_version(current, channel)

    def get_delta_channel_history(self: Any, **kwargs: Any) -> Any:
        return self._inner.get_delta_channel_history(**kwargs)

    async def aget_delta_channel_history(self: Any, **kwargs: Any) -> Any:
        return await self._inner.aget_delta_channel_history(**kwargs)

    namespace: dict[str, Any] = {
        "__init__": __init__,
        "__getattr__": __getattr__,
        "__repr__": __repr__,
        "config_specs": property(config_specs),
        "get_next_version": get_next_version,
        "get_delta_channel_history": get_delta_channel_history,
        "aget_delta_channel_history": aget_delta_channel_history,
        "__module__": __name__,
    }
    namespace.update({m: _with_signature_of(getattr(cls, m), _saver_method(m)) for m in has})
    made = type(f"SaverProbe_{cls.__name__}", (BaseCheckpointSaver,), namespace)
    _CLASSES[(cls, has)] = made
    return made


# -- agent-framework --------------------------------------------------------------------------
class _StorageProbe:
    """Delegates to an agent-framework storage and records the cells of each call."""

    def __init__(self, inner: Any, ck: _Classifier) -> None:
        self._inner = inner
        self._ck = ck

    def __getattr__(self, name: str) -> Any:
        if name in ("_inner", "_ck") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"probe({self._inner!r})"

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        c = self._ck
        held = c.held
        try:
            result = await getattr(self._inner, method)(*args, **kwargs)
        except asyncio.CancelledError:
            c.held_call(method, held, cancelled=True)
            raise
        c.held_call(method, held, cancelled=False)
        return result

    async def _writing(self, method: str, names: list[str], *args: Any) -> Any:
        """``method``, with the workflows it changes not counted while it runs, and no longer
        counted if it fails (a cancelled save may land later)."""
        c = self._ck
        for name in names:
            c.begin(name)
        ok = False
        try:
            result = await self._call(method, *args)
            ok = True
            return result
        finally:
            for name in names:
                c.end(name, ok)

    async def save(self, checkpoint: Any) -> Any:
        c = self._ck
        try:
            cid, workflow = str(checkpoint.checkpoint_id), str(checkpoint.workflow_name)
            state = dict(checkpoint.state or {})
        except Exception:  # not a checkpoint: the storage's to refuse
            return await self._call("save", checkpoint)
        c.states("save", [cid])
        c.ids("save", workflow)
        c.checkpoint_ids("save checkpoint id", cid)
        c.sizes("save", state.values())
        scope = c.scope
        fresh = scope.state.get(("workflow", workflow)) in (None, "deleted")
        others = [w for w, ids in scope.members.items() if cid in ids and w != workflow]
        result = await self._writing("save", [workflow, *others], checkpoint)
        c.wrote(cid)
        c.wrote(("workflow", workflow))
        for name in (cid, ("workflow", workflow), *(("workflow", o) for o in others)):
            c.changed(name, "save")
        scope.members.setdefault(workflow, set()).add(cid)
        for other in others:  # the id moved to this workflow
            c.forget(other)
        if workflow not in scope.lost and (fresh or workflow in scope.counted):
            scope.counted.add(workflow)
        return result

    async def load(self, checkpoint_id: Any) -> Any:
        c = self._ck
        c.states("load", [str(checkpoint_id)])
        c.checkpoint_ids("load", str(checkpoint_id))
        c.after("load", str(checkpoint_id))
        result = await self._call("load", checkpoint_id)
        state = getattr(result, "state", None)
        if isinstance(state, dict):
            c.sizes("load", state.values())
        return result

    async def delete(self, checkpoint_id: Any) -> Any:
        c = self._ck
        cid = str(checkpoint_id)
        c.states("delete", [cid])
        c.checkpoint_ids("delete", cid)
        of = [w for w, ids in c.scope.members.items() if cid in ids]
        result = await self._writing("delete", of, checkpoint_id)
        c.changed(cid, "delete")
        for workflow in of:
            c.changed(("workflow", workflow), "delete")
        if result or c.scope.state.get(cid) == "present":
            c.deleted(cid)
        for workflow in of:
            ids = c.scope.members[workflow]
            ids.discard(cid)
            if not ids:
                c.deleted(("workflow", workflow))
        return result

    async def _by_workflow(self, method: str, workflow_name: str) -> Any:
        c, workflow = self._ck, str(workflow_name)
        c.states(method, [("workflow", workflow)])
        c.ids(method, workflow)
        c.after(method, ("workflow", workflow))
        if workflow in c.scope.counted and c.counts(workflow):
            c.length(method, len(c.scope.members.get(workflow, ())))
        return await self._call(method, workflow_name=workflow_name)

    async def list_checkpoints(self, *, workflow_name: str) -> Any:
        return await self._by_workflow("list_checkpoints", workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> Any:
        return await self._by_workflow("list_checkpoint_ids", workflow_name)

    async def get_latest(self, *, workflow_name: str) -> Any:
        return await self._by_workflow("get_latest", workflow_name)


# -- the probe ----------------------------------------------------------------------------------
def probe(
    instance: Any,
    ecosystem: str,
    target: str,
    *,
    location: str | None,
    reopens: bool,
    durable: bool,
    holds: bool,
    max_length: int = DEFAULT_MAX_LENGTH,
) -> Any:
    """``instance`` wrapped in a probe that records its calls' cells under ``target``.

    A saver's probe is a ``BaseCheckpointSaver`` overriding exactly the methods
    the saver's class implements (so that LangGraph, and its conformance suite's
    capability detection, see the same saver); a storage's probe has the
    ``CheckpointStorage`` methods. Other attributes are the instance's own.
    """
    has, absent = implemented(instance, ecosystem)
    reach = EcosystemReach(
        ecosystem,
        has,
        absent,
        reopens=reopens,
        durable=durable,
        holds=holds,
        kind=type(instance).__name__,
        max_length=max_length,
    )
    ck = _Classifier(target, reach, location)
    if ecosystem == "langgraph":
        return _saver_probe_class(type(instance), has)(instance, ck)
    return _StorageProbe(instance, ck)


def is_probe(instance: Any) -> bool:
    """Whether ``instance`` is a probe made by `probe`."""
    return isinstance(getattr(instance, "__dict__", {}).get("_ck"), _Classifier)


def set_held(instance: Any, held: bool) -> None:
    """Say that the backend of ``instance`` (a probe) is held, or no longer."""
    ck = getattr(instance, "__dict__", {}).get("_ck")
    if isinstance(ck, _Classifier):
        ck.held = held


def closed(instance: Any) -> None:
    """Say that ``instance`` (a probe) was closed: a later instance on its data reopens it."""
    ck = getattr(instance, "__dict__", {}).get("_ck")
    if isinstance(ck, _Classifier):
        ck.close()

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
``namespaces`` (LangGraph)
    ``aput``, ``aput_writes``, ``aget_tuple`` and ``alist`` in the root
    namespace and in a child one.
``listing`` (LangGraph)
    ``alist`` (and ``list``) of every thread (config None), of one thread,
    with ``filter``, ``before`` and ``limit``.
``sizes`` (both)
    a channel value, write or state value of 0 bytes, 1 KiB and 1 MiB put
    and read back.
``lifecycle`` (both)
    each writing method cancelled while the backend is held; unreachable for
    a method that returned while held (the target's hold does not hold it).

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
import itertools
from collections.abc import AsyncIterator, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from ..coverage import Cell, CoverageRecorder, active_recorder, size_label

__all__ = [
    "SAVER_ASYNC",
    "SAVER_SYNC",
    "SIZES",
    "STATES",
    "STORAGE_METHODS",
    "EcosystemReach",
    "closed",
    "implemented",
    "is_probe",
    "probe",
    "set_held",
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
NAMESPACED = ("aput", "aput_writes", "aget_tuple by id", "aget_tuple latest", "alist")
NAMESPACES = ("root", "child")
LIST_OPTIONS = ("config None", "thread", "filter", "before", "limit")
SIZES = (0, 1024, 1024 * 1024)
"""The value sizes of the ``sizes`` matrix."""
HELD = "cancelled while held"
_SIZE_LABELS = {size: size_label(size) for size in SIZES}


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
    """

    ecosystem: str
    implemented: tuple[str, ...]
    absent: tuple[tuple[str, str], ...] = ()
    reopens: bool = False
    durable: bool = False
    holds: bool = False
    kind: str = ""

    @property
    def matrices(self) -> tuple[str, ...]:
        """The matrices of the ecosystem, in report order."""
        if self.ecosystem == "langgraph":
            return ("state", "namespaces", "listing", "sizes", "lifecycle")
        return ("state", "sizes", "lifecycle")

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
        if self.ecosystem == "langgraph":
            for row in NAMESPACED:
                if row.split()[0] in has:
                    out += [("namespaces", row, ns) for ns in NAMESPACES]
            for method in ("alist", "list"):
                if method in has:
                    out += [("listing", method, option) for option in LIST_OPTIONS]
            columns: tuple[str, ...] = ("aput", "aput_writes", "aget_tuple")
        else:
            columns = ("save", "load")
        for size in SIZES:
            out += [("sizes", _SIZE_LABELS[size], m) for m in columns if m in has]
        if self.holds:
            for method in SAVER_WRITES if self.ecosystem == "langgraph" else STORAGE_WRITES:
                if method in has:
                    out.append(("lifecycle", method, HELD))
        return out

    def reachable(self, exercised: AbstractSet[Cell]) -> list[Cell]:
        """`cells`, without the held cells of a method that the hold did not hold.

        A writing method that returned while the backend was held (the
        ``("held", method, "returned")`` marker) and was never cancelled while
        held is not stopped by the target's hold (it holds other requests, or
        the method needs no round trip): it cannot be in flight under it.
        """
        return [c for c in self.cells() if c not in _not_held(exercised)]

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
    runs: set[str] = field(default_factory=set)  # run ids put (LangGraph)
    members: dict[str, set[str]] = field(default_factory=dict)  # workflow -> checkpoint ids


_SCOPES: dict[str, _Scope] = {}
_order = itertools.count()


class _Classifier:
    """Records the cells of one instance's calls; shared by both ecosystems' probes."""

    def __init__(self, name: str, reach: EcosystemReach, location: str | None) -> None:
        self.name = name
        self.rec: CoverageRecorder = active_recorder()
        self.rec.target(name, reach)
        self.scope = _Scope() if location is None else _SCOPES.setdefault(location, _Scope())
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

    def wrote(self, name: Any) -> None:
        self.scope.state[name] = "present"
        self.scope.writer[name] = self.id

    def deleted(self, name: Any) -> None:
        self.scope.state[name] = "deleted"
        self.scope.writer.pop(name, None)

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


def _ns_column(ns: str) -> str:
    return "child" if ns else "root"


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

    def row(self, method: str) -> str:
        return method[1:] if self.sync else method

    def allowed(self) -> tuple[str, ...]:
        return SYNC_STATES if self.sync else STATES

    def put(self, config: Any, checkpoint: Any, metadata: Any) -> Any:
        thread, ns = _thread(config)
        c, row = self.c, self.row("aput")
        if thread is not None:
            c.states(row, [thread], self.allowed())
        if not self.sync:
            c.mark("namespaces", "aput", _ns_column(ns))
            c.sizes("aput", (checkpoint or {}).get("channel_values", {}).values())

        def after(_: Any) -> None:
            if thread is not None:
                c.wrote(thread)
            run = (metadata or {}).get("run_id") if isinstance(metadata, dict) else None
            if run is not None:
                c.scope.runs.add(str(run))

        return after

    def put_writes(self, config: Any, writes: Any) -> Any:
        thread, ns = _thread(config)
        c = self.c
        if thread is not None:
            c.states(self.row("aput_writes"), [thread], self.allowed())
        if not self.sync:
            c.mark("namespaces", "aput_writes", _ns_column(ns))
            c.sizes("aput_writes", (w[1] for w in writes or () if len(w) > 1))
        return None

    def get_tuple(self, config: Any) -> Any:
        thread, ns = _thread(config)
        by_id = "checkpoint_id" in (config or {}).get("configurable", {})
        row = f"{self.row('aget_tuple')} {'by id' if by_id else 'latest'}"
        c = self.c
        if thread is not None:
            c.states(row, [thread], self.allowed())
        if not self.sync:
            c.mark("namespaces", f"aget_tuple {'by id' if by_id else 'latest'}", _ns_column(ns))
            return lambda t: c.sizes("aget_tuple", _tuple_values(t))
        return None

    def list(self, config: Any, filter: Any, before: Any, limit: Any) -> Any:
        thread, ns = _thread(config)
        c, row = self.c, self.row("alist")
        if config is None:
            c.mark("listing", row, "config None")
        if thread is not None:
            c.states(row, [thread], self.allowed())
            c.mark("listing", row, "thread")
            if not self.sync:
                c.mark("namespaces", "alist", _ns_column(ns))
        for option, value in (("filter", filter), ("before", before), ("limit", limit)):
            if value is not None:
                c.mark("listing", row, option)
        return None

    def delete_thread(self, thread_id: Any) -> Any:
        c = self.c
        c.states(self.row("adelete_thread"), [str(thread_id)], self.allowed())
        return lambda _: c.deleted(str(thread_id))

    def delete_for_runs(self, run_ids: Any) -> Any:
        c = self.c
        runs = [str(r) for r in run_ids or ()]
        column = "existing" if any(r in c.scope.runs for r in runs) else "missing"
        c.mark("state", self.row("adelete_for_runs"), column)
        return lambda _: c.scope.runs.difference_update(runs)

    def copy_thread(self, source: Any, target: Any) -> Any:
        c = self.c
        c.states(self.row("acopy_thread"), [str(source)], self.allowed())
        existed = c.state_of(str(source)) not in ("missing", "after delete")
        return lambda _: c.wrote(str(target)) if existed else None

    def prune(self, thread_ids: Any, strategy: str) -> Any:
        c = self.c
        threads = [str(t) for t in thread_ids or ()]
        c.states(self.row("aprune"), threads, self.allowed())

        def after(_: Any) -> None:
            if strategy == "delete":
                for t in threads:
                    c.deleted(t)

        return after


def _saver_method(method: str) -> Any:
    """The probe's ``method``: classify, call the inner saver's, learn from the answer."""
    sync = method in SAVER_SYNC
    name = method if sync else method[1:]

    def classify(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        calls = _SaverCalls(self._ck, sync)
        try:
            bound = _SIGNATURES[name](*args, **kwargs)
            after = getattr(calls, name)(*bound)
        except Exception:  # input the saver is to refuse: nothing to classify
            return None
        return _quiet(after)

    if method == "alist":

        async def alist(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            classify(self, args, kwargs)
            async for item in self._inner.alist(*args, **kwargs):
                yield item

        return alist
    if method == "list":

        def list_(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            classify(self, args, kwargs)
            yield from self._inner.list(*args, **kwargs)

        list_.__name__ = "list"
        return list_
    if sync:

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            after = classify(self, args, kwargs)
            result = getattr(self._inner, method)(*args, **kwargs)
            if after is not None:
                after(result)
            return result

        call.__name__ = method
        return call

    async def acall(self: Any, *args: Any, **kwargs: Any) -> Any:
        after = classify(self, args, kwargs)
        c: _Classifier = self._ck
        held = c.held
        try:
            result = await getattr(self._inner, method)(*args, **kwargs)
        except asyncio.CancelledError:
            if held or c.held:
                c.mark("lifecycle", method, HELD)
            raise
        if held and c.held and method in SAVER_WRITES:
            c.mark("held", method, "returned")
        if after is not None:
            after(result)
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
    return config, writes


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
    namespace.update({m: _saver_method(m) for m in has})
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
            if held or c.held:
                c.mark("lifecycle", method, HELD)
            raise
        if held and c.held and method in STORAGE_WRITES:
            c.mark("held", method, "returned")
        return result

    async def save(self, checkpoint: Any) -> Any:
        c = self._ck
        try:
            cid, workflow = str(checkpoint.checkpoint_id), str(checkpoint.workflow_name)
            state = dict(checkpoint.state or {})
        except Exception:  # not a checkpoint: the storage's to refuse
            return await self._call("save", checkpoint)
        c.states("save", [cid])
        c.sizes("save", state.values())
        result = await self._call("save", checkpoint)
        c.wrote(cid)
        c.wrote(("workflow", workflow))
        c.scope.members.setdefault(workflow, set()).add(cid)
        return result

    async def load(self, checkpoint_id: Any) -> Any:
        c = self._ck
        c.states("load", [str(checkpoint_id)])
        result = await self._call("load", checkpoint_id)
        state = getattr(result, "state", None)
        if isinstance(state, dict):
            c.sizes("load", state.values())
        return result

    async def delete(self, checkpoint_id: Any) -> Any:
        c = self._ck
        cid = str(checkpoint_id)
        c.states("delete", [cid])
        result = await self._call("delete", checkpoint_id)
        if result or c.scope.state.get(cid) == "present":
            c.deleted(cid)
        for workflow, ids in c.scope.members.items():
            if cid in ids:
                ids.discard(cid)
                if not ids:
                    c.deleted(("workflow", workflow))
        return result

    async def _by_workflow(self, method: str, workflow_name: str) -> Any:
        self._ck.states(method, [("workflow", str(workflow_name))])
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

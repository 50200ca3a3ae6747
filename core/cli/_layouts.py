"""What a store holds, told by its key layout: checkpointkit runs, LangGraph threads,
agent-framework workflows.

The one place where the command line recognises data. Each kind is found by
a listing of ``limit=1`` under the prefixes where it is written, and its key
is parsed, so a key that merely starts the same way is not taken for it:

- checkpointkit runs: ``{ns}runs/`` and ``{ns}index/`` (`CheckpointStore`);
- LangGraph threads (`CheckpointkitSaver`): ``{p}c/`` and ``{p}w/`` where
  ``{p}`` is ``{ns}langgraph/`` (the saver's default prefix) or ``{ns}``
  itself (a saver made with ``prefix=NS``, as ``migrate --prefix NS`` does);
- agent-framework workflows (`CheckpointkitCheckpointStorage`): ``{p}wf/`` and
  ``{p}cp/``, ``{p}`` being ``{ns}agent-framework/`` or ``{ns}``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import CheckpointkitError
from ..integrations._agent_framework_layout import AgentFrameworkLayout
from ..integrations._langgraph_layout import LangGraphLayout
from ..storage import Storage

__all__ = [
    "KINDS",
    "Holdings",
    "Kind",
    "Target",
    "namespace_prefix",
    "nothing_found",
    "recognise",
    "resolve",
]

if TYPE_CHECKING:  # pragma: no cover
    from ..crypto import Encryption
    from ._agent_framework import AgentFrameworkData
    from ._langgraph import LangGraphData

Kind = Literal["run", "thread", "workflow"]
"""What a command acts on: a checkpointkit run, a LangGraph thread, an agent-framework workflow."""

KINDS: dict[Kind, str] = {
    "run": "checkpointkit run",
    "thread": "LangGraph thread",
    "workflow": "agent-framework workflow",
}
"""Each kind as the messages name it."""

_LANGGRAPH_PREFIX = "langgraph"
_AGENT_FRAMEWORK_PREFIX = "agent-framework"


def namespace_prefix(namespace: str) -> str:
    """``--namespace`` as a key prefix: ``""`` or ``"ns/"``."""
    ns = namespace.strip("/")
    return f"{ns}/" if ns else ""


def _where(namespace: str) -> str:
    ns = namespace.strip("/")
    return f"namespace {ns!r}" if ns else "the store's root"


@dataclass(slots=True)
class Holdings:
    """What a store holds under a namespace.

    Attributes:
        runs: checkpointkit runs are stored (``runs/`` or ``index/`` keys).
        langgraph: the layouts (one per prefix) under which LangGraph data is stored.
        agent_framework: the layouts under which agent-framework data is stored.
    """

    runs: bool = False
    langgraph: list[LangGraphLayout] = field(default_factory=list)
    agent_framework: list[AgentFrameworkLayout] = field(default_factory=list)

    @property
    def integrations(self) -> bool:
        """Whether LangGraph or agent-framework data is stored."""
        return bool(self.langgraph or self.agent_framework)

    @property
    def nothing(self) -> bool:
        """Whether none of the three kinds is stored."""
        return not (self.runs or self.integrations)

    def data(
        self, storage: Storage, encryption: Encryption | None = None
    ) -> list[LangGraphData | AgentFrameworkData]:
        """A reader of each saver's threads and each storage's workflows found."""
        from ._agent_framework import AgentFrameworkData
        from ._langgraph import LangGraphData

        found: list[LangGraphData | AgentFrameworkData] = [
            LangGraphData(storage, lg, encryption) for lg in self.langgraph
        ]
        return found + [AgentFrameworkData(storage, af, encryption) for af in self.agent_framework]


async def _first(storage: Storage, prefix: str) -> str | None:
    async for key in storage.list(prefix, limit=1):
        return key
    return None


async def _shaped(storage: Storage, prefix: str, parse: Callable[[str], Any]) -> bool:
    """Whether the first key under ``prefix`` parses (so it is that layout's, not a look-alike)."""
    key = await _first(storage, prefix)
    if key is None:
        return False
    try:
        parse(key)
    except ValueError:
        return False
    return True


async def recognise(storage: Storage, namespace: str) -> Holdings:
    """Find which kinds of data ``storage`` holds under ``namespace`` (a few listings).

    Raises:
        StorageError: The storage failed.
    """
    ns = namespace_prefix(namespace)
    found = Holdings()
    found.runs = (await _first(storage, f"{ns}runs/")) is not None or (
        await _first(storage, f"{ns}index/")
    ) is not None
    for p in (f"{ns}{_LANGGRAPH_PREFIX}/", ns):
        lg = LangGraphLayout(p)
        if await _shaped(storage, lg.kind_prefix("c"), lg.parse_checkpoint_key) or await _shaped(
            storage, lg.kind_prefix("w"), lg.parse_writes_key
        ):
            found.langgraph.append(lg)
    for p in (f"{ns}{_AGENT_FRAMEWORK_PREFIX}/", ns):
        af = AgentFrameworkLayout(p)
        if await _shaped(storage, af.workflows, af.workflow_of) or await _shaped(
            storage, af.checkpoints, af.checkpoint_id_of
        ):
            found.agent_framework.append(af)
    return found


_SAMPLE_KEYS = 1000


async def nothing_found(storage: Storage, namespace: str) -> dict[str, Any]:
    """What to say about a store where `recognise` found nothing: ``{"keys", "message"}``.

    Reads at most 1000 keys, to say how many keys there are and how they start.
    """
    ns = namespace_prefix(namespace)
    keys: list[str] = []
    async for key in storage.list(ns):
        keys.append(key)
        if len(keys) >= _SAMPLE_KEYS:
            break
    where = _where(namespace)
    head = (
        f"no checkpointkit runs, LangGraph threads or agent-framework workflows found under {where}"
    )
    if not keys:
        return {"keys": 0, "message": f"{head}: it holds no key at all (check --storage and -n)"}
    firsts = sorted({key[len(ns) :].split("/", 1)[0] for key in keys})
    counted = f"{len(keys)}{'+' if len(keys) >= _SAMPLE_KEYS else ''} key(s)"
    shown = ", ".join(repr(f) for f in firsts[:5]) + (", ..." if len(firsts) > 5 else "")
    return {
        "keys": len(keys),
        "message": f"{head}: it holds {counted} whose first segments are {shown} "
        "(check -n: a saver's or storage's prefix is a namespace here)",
    }


@dataclass(frozen=True, slots=True)
class Target:
    """The run, thread or workflow that a command names.

    Attributes:
        kind: What it is.
        name: The run id, thread id or workflow name.
        layout: Where a thread or workflow is stored (None for a run).
    """

    kind: Kind
    name: str
    layout: LangGraphLayout | AgentFrameworkLayout | None = None

    @property
    def prefix(self) -> str:
        """The saver's or storage's key prefix (without ``/``); ``""`` for a run."""
        return "" if self.layout is None else self.layout.p.rstrip("/")

    def data(
        self, storage: Storage, encryption: Encryption | None = None
    ) -> LangGraphData | AgentFrameworkData:
        """The reader of this thread's saver or this workflow's storage.

        Raises:
            TypeError: The target is a run.
        """
        from ._agent_framework import AgentFrameworkData
        from ._langgraph import LangGraphData

        if isinstance(self.layout, LangGraphLayout):
            return LangGraphData(storage, self.layout, encryption)
        if isinstance(self.layout, AgentFrameworkLayout):
            return AgentFrameworkData(storage, self.layout, encryption)
        raise TypeError("a checkpointkit run has no integration data")

    @property
    def described(self) -> str:
        """``LangGraph thread 't1'`` and so on."""
        return f"{KINDS[self.kind]} {self.name!r}"


async def _thread_in(storage: Storage, lg: LangGraphLayout, name: str) -> bool:
    for kind in ("c", "w", "h", "b"):
        if await _first(storage, lg.kind_prefix(kind, name)) is not None:
            return True
    return False


async def _workflow_in(storage: Storage, af: AgentFrameworkLayout, name: str) -> bool:
    if await _first(storage, af.workflow_prefix(name)) is not None:
        return True
    return await _first(storage, af.head_key(name)) is not None


async def resolve(
    storage: Storage,
    namespace: str,
    name: str,
    *,
    kind: Kind | None = None,
    run_exists: Callable[[str], Any],
) -> Target:
    """The one run, thread or workflow called ``name`` (of ``kind`` if given).

    Args:
        storage: The storage.
        namespace: ``--namespace``.
        name: What the user typed.
        kind: ``--kind``, or None to look for all three.
        run_exists: An async function telling whether a checkpointkit run exists.

    Raises:
        CheckpointkitError: Nothing of that name (``run 'x' not found``, and
            which kinds were looked for), or several things of that name and no
            ``kind`` to choose (the message says how to choose).
    """
    found: list[Target] = []
    invalid: CheckpointkitError | None = None
    if kind in (None, "run"):
        try:
            exists = await run_exists(name)
        except CheckpointkitError as exc:  # not a valid run id: it may be a thread id
            if kind == "run":
                raise
            exists, invalid = False, exc
        if exists:
            found.append(Target("run", name))
    holdings = await recognise(storage, namespace) if kind != "run" else Holdings()
    if kind in (None, "thread"):
        for lg in holdings.langgraph:
            if await _thread_in(storage, lg, name):
                found.append(Target("thread", name, lg))
    if kind in (None, "workflow"):
        for af in holdings.agent_framework:
            if await _workflow_in(storage, af, name):
                found.append(Target("workflow", name, af))
    if len(found) == 1:
        return found[0]
    if not found:
        if invalid is not None and not holdings.integrations:
            raise invalid
        if kind is not None:
            raise CheckpointkitError(
                f"{KINDS[kind]} {name!r} not found under {_where(namespace)}"
                if kind != "run"
                else f"run {name!r} not found"
            )
        if holdings.integrations:
            raise CheckpointkitError(
                f"run {name!r} not found, nor a LangGraph thread or agent-framework workflow "
                f"of that name under {_where(namespace)}"
            )
        raise CheckpointkitError(f"run {name!r} not found")
    listed = ", ".join(
        t.described + (f" (prefix {t.prefix!r})" if t.layout is not None else "") for t in found
    )
    kinds = sorted({t.kind for t in found})
    if len(kinds) == 1:
        raise CheckpointkitError(
            f"{name!r} names {listed}: pass -n with the prefix of the one you mean"
        )
    raise CheckpointkitError(
        f"{name!r} names {listed}: pass --kind {' or --kind '.join(kinds)} to say which"
    )

"""The target of an ecosystem run: a LangGraph saver or an agent-framework storage.

``checkpointkit conformance langgraph:MODULE:ATTR`` and
``checkpointkit conformance agent-framework:MODULE:ATTR`` name the thing under
test; ATTR is any of:

- a saver (or storage) class whose constructor takes no argument
  (``langgraph.checkpoint.memory:InMemorySaver``);
- a callable returning one, or an awaitable of one;
- an async context manager factory yielding one (an async generator function,
  or a function returning an async context manager, such as
  ``AsyncSqliteSaver.from_conn_string`` bound to a path);
- an `EcosystemTarget`, which says more (durability, a hold, a proxy).

Like a storage factory (`checkpointkit.conformance.target`), the callable
may take ``location: str``: two instances opened with the same location see
the same data. The suite needs that for a second instance (concurrency, a
late landing seen by another client) and for reopening (durability). It may
also take ``endpoint: tuple[str, int]``, with `EcosystemTarget.upstream`
set, for the stalling TCP proxy.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from ...errors import ConfigurationError
from ..settings import DEFAULT_CANCEL_BOUND, DEFAULT_SETTLE_WINDOW, check_count, check_seconds
from .coverage import DEFAULT_MAX_LENGTH, closed, probe

__all__ = [
    "ECOSYSTEMS",
    "Ecosystem",
    "EcosystemTarget",
    "Hold",
    "ecosystem_of",
    "resolve_ecosystem_target",
]

Ecosystem = Literal["langgraph", "agent-framework"]
ECOSYSTEMS: tuple[Ecosystem, ...] = ("langgraph", "agent-framework")
"""The ecosystems whose interfaces the suite tests, by their SPEC prefix."""

Hold = Callable[[str | None], AbstractAsyncContextManager[None]]
"""Given a location (or None), a context manager inside which the backend stops answering."""

_KINDS = {
    "langgraph": ("a LangGraph checkpointer", ("aput", "aput_writes", "aget_tuple", "alist")),
    "agent-framework": (
        "an agent-framework checkpoint storage",
        ("save", "load", "list_checkpoints", "delete", "get_latest", "list_checkpoint_ids"),
    ),
}


def _accepts(factory: Callable[..., Any], name: str) -> bool:
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return False
    for param in sig.parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            return True
        if param.name == name and param.kind in (
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            return True
    return False


def _is_instance(obj: Any, ecosystem: Ecosystem) -> bool:
    return all(callable(getattr(obj, m, None)) for m in _KINDS[ecosystem][1])


@dataclass
class EcosystemTarget:
    """A LangGraph saver or agent-framework storage under test, and what it supports.

    Attributes:
        ecosystem: ``"langgraph"`` or ``"agent-framework"``.
        factory: gives a fresh instance on every call (see the module
            documentation for the forms accepted and the keywords).
        name: shown in reports.
        durable: the instance's data outlives the process that wrote it, so
            the durability group reopens it and kills a writer with SIGKILL
            mid-write. None: read the factory's ``checkpointkit_durable``
            attribute (False when it has none).
        spec: an importable ``MODULE:ATTR`` naming this target, for the
            SIGKILL test's subprocess (set when resolved from a SPEC string).
        hold: makes the backend stop answering while it is entered (given the
            location): the cancellation group cancels calls held by it.
        upstream: the real server's ``(host, port)`` when the factory takes
            ``endpoint``: the cancellation group then holds calls with the
            stalling TCP proxy.
        scale: multiplies the request counts of the heavier tests.
        max_length: the most checkpoints the ``lengths`` sweep puts in one thread or
            workflow (1,025 by default: past the pages of 10, 100, 101 and 1,000 items of
            common backends); lower it for a slow server, at the cost of the rows above.
        settle_window: seconds a cancelled call is watched for a late landing.
        cancel_bound: seconds within which a cancelled call must end.
        cleanup: called once when the suite is done with the target.
    """

    ecosystem: Ecosystem
    factory: Callable[..., Any]
    name: str = ""
    durable: bool | None = None
    spec: str | None = None
    hold: Hold | None = None
    upstream: tuple[str, int] | None = None
    scale: float = 1.0
    max_length: int = DEFAULT_MAX_LENGTH
    settle_window: float = DEFAULT_SETTLE_WINDOW
    cancel_bound: float = DEFAULT_CANCEL_BOUND
    cleanup: Callable[[], None] | None = None
    _kw: dict[str, bool] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.ecosystem not in ECOSYSTEMS:
            raise ConfigurationError(
                f"unknown ecosystem {self.ecosystem!r}; the ecosystems are: {', '.join(ECOSYSTEMS)}"
            )
        if not callable(self.factory):
            raise ConfigurationError(
                f"an ecosystem target needs a callable factory, got {self.factory!r}"
            )
        if not self.name:
            self.name = getattr(self.factory, "__qualname__", None) or repr(self.factory)
        if self.durable is None:
            self.durable = bool(getattr(self.factory, "checkpointkit_durable", False))
        if not (self.scale > 0):
            raise ConfigurationError(f"scale must be positive, not {self.scale!r}")
        check_seconds("settle_window", self.settle_window, zero=True)
        check_seconds("cancel_bound", self.cancel_bound)
        check_count("max_length", self.max_length, least=1, what="a positive number of checkpoints")
        for kw in ("location", "endpoint"):
            self._kw[kw] = _accepts(self.factory, kw)

    def with_options(self, **overrides: Any) -> EcosystemTarget:
        """A copy with these fields set (``scale=0.2``...)."""
        return replace(self, **overrides) if overrides else self

    @property
    def kind(self) -> str:
        """What the target is, in words (``a LangGraph checkpointer``)."""
        return _KINDS[self.ecosystem][0]

    @property
    def reopens(self) -> bool:
        """The factory takes ``location``: a second instance can see the same data."""
        return self._kw["location"]

    @property
    def proxyable(self) -> bool:
        """The factory takes ``endpoint`` and the real server's address is known."""
        return self._kw["endpoint"] and self.upstream is not None

    def count(self, n: int, *, minimum: int = 2) -> int:
        """``n`` scaled by `scale`, at least ``minimum``."""
        return max(minimum, round(n * self.scale))

    @asynccontextmanager
    async def open(
        self, *, location: str | None = None, endpoint: tuple[str, int] | None = None
    ) -> AsyncIterator[Any]:
        """Open one instance; close it on exit (``aclose``, ``close`` or its context).

        The instance comes wrapped in a coverage probe (`coverage.probe`), which
        delegates every call and records which cells of the target's matrices
        it exercised.

        Args:
            location: open at this location (requires `reopens`).
            endpoint: connect through this address (requires `proxyable`).

        Raises:
            ConfigurationError: a keyword that the factory does not take.
            TypeError: the factory gave something that is not the target's kind.
        """
        kwargs: dict[str, Any] = {}
        for kw, value in (("location", location), ("endpoint", endpoint)):
            if value is None:
                continue
            if not self._kw[kw]:
                raise ConfigurationError(f"the factory of {self.name!r} takes no {kw!r} keyword")
            kwargs[kw] = value
        factory = self.factory
        if inspect.isasyncgenfunction(factory):
            made: Any = asynccontextmanager(factory)(**kwargs)
        else:
            made = factory(**kwargs)
            if inspect.isawaitable(made):
                made = await made
        if _is_instance(made, self.ecosystem):
            probed = self._probe(made, location)
            try:
                yield probed
            finally:
                try:
                    await _close(made)
                finally:
                    closed(probed)
            return
        if not hasattr(made, "__aenter__"):
            raise TypeError(
                f"the factory of {self.name!r} returned {made!r}, which is neither {self.kind} "
                "nor an async context manager yielding one"
            )
        async with cast(AbstractAsyncContextManager[Any], made) as instance:
            if not _is_instance(instance, self.ecosystem):
                missing = [m for m in _KINDS[self.ecosystem][1] if not hasattr(instance, m)]
                raise TypeError(
                    f"the factory of {self.name!r} gave {instance!r}, which is not {self.kind} "
                    f"(no {', '.join(missing)})"
                )
            probed = self._probe(instance, location)
            try:
                yield probed
            finally:
                closed(probed)

    @property
    def holds(self) -> bool:
        """The cancellation group can hold the backend (a hold, or the stalling proxy)."""
        return self.hold is not None or self.proxyable

    def _probe(self, instance: Any, location: str | None) -> Any:
        """``instance`` in a coverage probe recording under this target's name."""
        return probe(
            instance,
            self.ecosystem,
            self.name,
            location=location,
            reopens=self.reopens,
            durable=bool(self.durable),
            holds=self.holds,
            max_length=self.max_length,
        )


async def _close(instance: Any) -> None:
    """Close an instance that was not given as a context: ``aclose``, else ``close``."""
    aclose = getattr(instance, "aclose", None)
    if callable(aclose):
        result = aclose()
        if inspect.isawaitable(result):
            await result
        return
    close = getattr(instance, "close", None)
    if callable(close):
        result = close()
        if inspect.isawaitable(result):
            await result


def ecosystem_of(spec: object) -> Ecosystem | None:
    """The ecosystem a SPEC string or target names (``langgraph:...``), or None."""
    if isinstance(spec, EcosystemTarget):
        return spec.ecosystem
    if isinstance(spec, str):
        head, sep, _ = spec.strip().partition(":")
        if sep and head in ECOSYSTEMS:
            return head
    return None


def resolve_ecosystem_target(
    spec: str | EcosystemTarget, *, ecosystem: Ecosystem | None = None, **overrides: Any
) -> EcosystemTarget:
    """Turn ``langgraph:MODULE:ATTR`` (or ``agent-framework:...``) into a target.

    Args:
        spec: the SPEC string, or a target (returned with the overrides set).
        ecosystem: for a callable given directly: which ecosystem it belongs to.
        **overrides: `EcosystemTarget` fields to set (``scale``...).

    Raises:
        ConfigurationError: the SPEC is malformed, names nothing importable,
            or names something that is neither a factory nor a target.
    """
    if isinstance(spec, EcosystemTarget):
        return spec.with_options(**overrides)
    if callable(spec) and not isinstance(spec, str):
        if ecosystem is None:
            raise ConfigurationError(
                "a callable ecosystem target needs its ecosystem: "
                f"ecosystem='langgraph' or 'agent-framework' ({spec!r})"
            )
        return EcosystemTarget(ecosystem, spec, **overrides)
    kind = ecosystem_of(spec)
    if kind is None or not isinstance(spec, str):
        raise ConfigurationError(
            f"{spec!r} names no ecosystem target: give langgraph:MODULE:ATTR or "
            "agent-framework:MODULE:ATTR"
        )
    rest = spec.strip().partition(":")[2]
    module_name, sep, attr = rest.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"{spec!r}: expected {kind}:MODULE:ATTR (a module, a colon, a class or factory name)"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} (from {spec!r}): {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(f"{module_name!r} has no attribute {attr!r}") from None
    if isinstance(obj, EcosystemTarget):
        if obj.ecosystem != kind:
            raise ConfigurationError(
                f"{spec!r} names a target of {obj.ecosystem!r}, not of {kind!r}"
            )
        return obj.with_options(**{"spec": obj.spec or rest, **overrides})
    if not callable(obj):
        raise ConfigurationError(f"{spec!r} is {obj!r}, neither a factory nor an EcosystemTarget")
    return EcosystemTarget(kind, obj, **{"name": spec.strip(), "spec": rest, **overrides})

"""Tracing and metrics with OpenTelemetry, and the library's logging conventions.

Off by default: this module imports nothing of OpenTelemetry until it is
enabled, and a run that is not observed pays one ``is None`` check per step.
Turn it on for every workflow with `enable` (it then uses the global
tracer and meter providers, as OpenTelemetry instrumentations do), or for one
workflow with ``Workflow(..., tracer_provider=..., meter_provider=...)``.

Spans (all ``SpanKind.INTERNAL``):

- ``checkpointkit.run``: one call of ``Workflow.run`` or ``Workflow.resume``,
  from the first step to the final checkpoint;
- ``checkpointkit.step``: one executed step (a replayed step gets none), the
  current span while the step's body runs, so the user's own spans nest in it;
- ``checkpointkit.save``: one step record written (a child of the run's span);
- ``checkpointkit.checkpoint``: one checkpoint written (completed, paused, failed).

Metrics:

- ``checkpointkit.save.duration`` (histogram, seconds), per save;
- ``checkpointkit.save.size`` (histogram, bytes), the encoded record's size.

Attributes carry identities and sizes only: ``checkpointkit.run_id``,
``checkpointkit.step``, ``checkpointkit.resumed``, ``checkpointkit.status``,
``checkpointkit.storage`` (the adapter's class name, never its URL),
``checkpointkit.save.kind`` (``step`` or ``checkpoint``), ``checkpointkit.save.bytes``
and, on failure, ``error.type`` (the exception's class name: its message may hold
data, so it is never recorded). No state, input, output or storage URL is ever
put in a span, a metric or a log record.

Logging uses the standard `logging` module under ``checkpointkit.*``
(``checkpointkit.runner``, ``checkpointkit.store``, ``checkpointkit.adapters.*``,
``checkpointkit.integrations.*``): INFO for a run's lifecycle (started,
resumed, completed, paused, failed), DEBUG for every save, WARNING for what
degrades a run. The library adds no handler.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["Observer", "disable", "enable", "enabled"]

log = logging.getLogger("checkpointkit.runner")

_INSTRUMENTATION = "checkpointkit"
_global: Observer | None = None
_sizes: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "checkpointkit_saved_sizes", default=None
)


def _import_otel() -> tuple[Any, Any]:
    try:
        from opentelemetry import metrics, trace
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "tracing and metrics need OpenTelemetry's API; install it with: "
            'pip install "checkpointkit[otel]"'
        ) from exc
    return trace, metrics


class Observer:
    """Emits checkpointkit's spans and metrics through OpenTelemetry's API.

    Built by `enable` or by ``Workflow(tracer_provider=..., meter_provider=...)``;
    users rarely make one themselves.

    Args:
        tracer_provider: where spans go; None uses the global tracer provider.
        meter_provider: where metrics go; None uses the global meter provider.

    Raises:
        ConfigurationError: OpenTelemetry's API is not installed (the ``otel`` extra).
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        from . import __version__

        trace, metrics = _import_otel()
        self._trace = trace
        self.tracer = trace.get_tracer(
            _INSTRUMENTATION, __version__, tracer_provider=tracer_provider
        )
        meter = metrics.get_meter(_INSTRUMENTATION, __version__, meter_provider=meter_provider)
        self.save_duration = meter.create_histogram(
            "checkpointkit.save.duration", unit="s", description="Duration of one checkpoint save."
        )
        self.save_size = meter.create_histogram(
            "checkpointkit.save.size", unit="By", description="Encoded size of one saved record."
        )

    # -- spans ------------------------------------------------------------------------------
    def start_run(self, run_id: str, resumed: bool, storage: str) -> Span:
        """Start a run's span (not made current: the runner makes it its tasks' parent)."""
        return self.tracer.start_span(  # type: ignore[no-any-return]
            "checkpointkit.run",
            attributes={
                "checkpointkit.run_id": run_id,
                "checkpointkit.resumed": resumed,
                "checkpointkit.storage": storage,
            },
        )

    def activate(self, span: Span) -> None:
        """Make ``span`` the current span of the calling context (a copied one, never detached)."""
        from opentelemetry import context as otel_context

        otel_context.attach(self._trace.set_span_in_context(span))

    def end(self, span: Span, status: str | None, error: BaseException | None = None) -> None:
        """End ``span`` with its outcome; an error is recorded by type only, never its message."""
        if status is not None:
            span.set_attribute("checkpointkit.status", status)
        if error is not None:
            name = type(error).__qualname__
            span.set_attribute("error.type", name)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, name))
        span.end()

    def start_step(self, run_span: Span | None, run_id: str, step: str) -> tuple[Span, object]:
        """Start a step's span as the current span; returns it and the token to `end_step`."""
        from opentelemetry import context as otel_context

        parent = self._trace.set_span_in_context(run_span) if run_span is not None else None
        span = self.tracer.start_span(
            "checkpointkit.step",
            context=parent,
            attributes={"checkpointkit.run_id": run_id, "checkpointkit.step": step},
        )
        token = otel_context.attach(self._trace.set_span_in_context(span))
        return span, token

    def end_step(self, span: Span, token: object, error: BaseException | None) -> None:
        """Detach and end a step's span."""
        from opentelemetry import context as otel_context

        otel_context.detach(token)  # type: ignore[arg-type]
        if error is None:
            self.end(span, "completed")
        elif type(error).__name__ == "_PauseRequested":  # asked for input: not a failure
            self.end(span, "paused")
        elif isinstance(error, asyncio.CancelledError):
            self.end(span, "cancelled")
        else:
            self.end(span, "failed", error)

    # -- saves ------------------------------------------------------------------------------
    async def save_step(
        self, run_span: Span | None, run_id: str, step: str, size: int, save: Any
    ) -> Any:
        """Await ``save`` (a step record's save) inside a save span, and record its metrics."""
        return await self._save(run_span, run_id, "step", {"checkpointkit.step": step}, size, save)

    async def save_checkpoint(
        self, run_span: Span | None, run_id: str, status: str, save: Any
    ) -> Any:
        """Await ``save`` (a checkpoint's save) inside a checkpoint span, with its metrics."""
        cell: list[int] = []
        token = _sizes.set(cell)  # the store reports the encoded size through note_size
        try:
            return await self._save(
                run_span, run_id, "checkpoint", {"checkpointkit.status": status}, cell, save
            )
        finally:
            _sizes.reset(token)

    async def _save(
        self,
        run_span: Span | None,
        run_id: str,
        kind: str,
        attributes: dict[str, Any],
        size: int | list[int],
        save: Any,
    ) -> Any:
        parent = self._trace.set_span_in_context(run_span) if run_span is not None else None
        span = self.tracer.start_span(
            "checkpointkit.save" if kind == "step" else "checkpointkit.checkpoint",
            context=parent,
            attributes={
                "checkpointkit.run_id": run_id,
                "checkpointkit.save.kind": kind,
                **attributes,
            },
        )
        start = time.perf_counter()
        error: BaseException | None = None
        try:
            return await save
        except BaseException as exc:
            error = exc
            raise
        finally:
            elapsed = time.perf_counter() - start
            outcome = "error" if error is not None else "ok"
            labels = {"checkpointkit.save.kind": kind, "checkpointkit.save.outcome": outcome}
            self.save_duration.record(elapsed, labels)
            n = size if isinstance(size, int) else sum(size)
            if error is None:
                span.set_attribute("checkpointkit.save.bytes", n)
                self.save_size.record(n, labels)
            if error is not None:
                name = type(error).__qualname__
                span.set_attribute("error.type", name)
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, name))
            span.end()


def note_size(size: int) -> None:
    """Report the encoded size of a checkpoint being saved (the store's hook; cheap when off)."""
    cell = _sizes.get()
    if cell is not None:
        cell.append(size)


def enable(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> None:
    """Emit spans and metrics for every workflow that was not given providers of its own.

    Args:
        tracer_provider: None uses OpenTelemetry's global tracer provider (the
            one ``opentelemetry.trace.set_tracer_provider`` or the
            ``opentelemetry-instrument`` launcher configures).
        meter_provider: None uses the global meter provider.

    Raises:
        ConfigurationError: OpenTelemetry's API is not installed (the ``otel`` extra).
    """
    global _global
    _global = Observer(tracer_provider, meter_provider)


def disable() -> None:
    """Stop emitting spans and metrics for workflows without providers of their own."""
    global _global
    _global = None


def enabled() -> bool:
    """Whether `enable` is in effect."""
    return _global is not None


def current() -> Observer | None:
    """The observer enabled globally, or None (read once per run by the runner)."""
    return _global

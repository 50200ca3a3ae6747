"""Tracing, metrics and logging: spans of runs, steps and saves, off by default, no secret leaks."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from checkpointkit import Workflow, context, observe, open_storage, step
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.servers.redis import valkey_standalone
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

PASSWORD = "hunter2-Pa55word"
SECRET = "sk-live-7f3a9c0de1b2"
USER_PROVIDER: list[Any] = [None]  # the provider the application's own spans go to


class Telemetry:
    """An SDK tracer provider and meter provider that keep everything in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    yield t
    observe.disable()
    t.shutdown()


@step(name="fetch")
async def fetch(x: int) -> int:
    context().state.set("token", SECRET)
    return x * 2


@step(name="publish")
async def publish(x: int) -> int:
    tracer = trace.get_tracer("user", tracer_provider=USER_PROVIDER[0])
    with tracer.start_as_current_span("user.http"):
        return x + 1


async def pipeline(x: int) -> int:
    return await publish(await fetch(x))


@step(name="boom")
async def boom(x: int) -> int:
    raise RuntimeError(f"upstream refused key {SECRET}")


async def failing(x: int) -> int:
    await fetch(x)
    return await boom(x)


async def test_run_step_save_and_checkpoint_spans_nest_under_the_run(
    telemetry: Telemetry,
) -> None:
    USER_PROVIDER[0] = telemetry.tracer_provider
    async with MemoryStorage() as storage:
        wf = Workflow(
            pipeline,
            storage=storage,
            tracer_provider=telemetry.tracer_provider,
            meter_provider=telemetry.meter_provider,
        )
        result = await wf.run(20, run_id="r1")
    assert result.output == 41
    (run,) = telemetry.named("checkpointkit.run")
    steps = telemetry.named("checkpointkit.step")
    saves = telemetry.named("checkpointkit.save")
    (checkpoint,) = telemetry.named("checkpointkit.checkpoint")
    assert run.attributes is not None and run.context is not None
    assert run.attributes["checkpointkit.run_id"] == "r1"
    assert run.attributes["checkpointkit.status"] == "completed"
    assert run.attributes["checkpointkit.storage"] == "MemoryStorage"
    assert [s.attributes["checkpointkit.step"] for s in steps if s.attributes] == [
        "fetch@0",
        "publish@0",
    ]
    assert sorted(s.attributes["checkpointkit.step"] for s in saves if s.attributes) == [
        "fetch@0",
        "publish@0",
    ]
    for span in [*steps, *saves, checkpoint]:
        assert span.parent is not None and span.parent.span_id == run.context.span_id
        assert span.context is not None and span.context.trace_id == run.context.trace_id
    assert all(s.attributes and s.attributes["checkpointkit.save.bytes"] > 0 for s in saves)
    assert checkpoint.attributes and checkpoint.attributes["checkpointkit.status"] == "completed"
    assert checkpoint.attributes["checkpointkit.save.bytes"] > 0
    # The user's own span inside a step is a child of the step's span.
    (user,) = telemetry.named("user.http")
    publish_span = next(
        s for s in steps if s.attributes and s.attributes["checkpointkit.step"] == "publish@0"
    )
    assert user.parent is not None and publish_span.context is not None
    assert user.parent.span_id == publish_span.context.span_id
    # Metrics: one duration and one size per save, by kind.
    durations = {
        p.attributes["checkpointkit.save.kind"]: p
        for p in telemetry.points("checkpointkit.save.duration")
    }
    sizes = {
        p.attributes["checkpointkit.save.kind"]: p
        for p in telemetry.points("checkpointkit.save.size")
    }
    assert durations["step"].count == 2 and durations["checkpoint"].count == 1
    assert durations["step"].sum > 0
    assert sizes["step"].count == 2
    step_bytes = sum(s.attributes["checkpointkit.save.bytes"] for s in saves if s.attributes)
    assert sizes["step"].sum == step_bytes
    assert sizes["checkpoint"].sum == checkpoint.attributes["checkpointkit.save.bytes"]


async def test_replayed_steps_get_no_span_and_a_resumed_run_says_so(telemetry: Telemetry) -> None:
    async with MemoryStorage() as storage:
        wf = Workflow(failing, storage=storage, tracer_provider=telemetry.tracer_provider)
        with pytest.raises(RuntimeError):
            await wf.run(1, run_id="r2")
        telemetry.exporter.clear()
        with pytest.raises(RuntimeError):
            await wf.resume("r2")
    (run,) = telemetry.named("checkpointkit.run")
    assert run.attributes and run.attributes["checkpointkit.resumed"] is True
    steps = [
        s.attributes["checkpointkit.step"]
        for s in telemetry.named("checkpointkit.step")
        if s.attributes
    ]
    assert steps == ["boom@0"]  # fetch@0 was replayed, not executed


async def test_failures_record_the_error_type_never_its_message(telemetry: Telemetry) -> None:
    async with MemoryStorage() as storage:
        wf = Workflow(failing, storage=storage, tracer_provider=telemetry.tracer_provider)
        with pytest.raises(RuntimeError):
            await wf.run(1, run_id="r3")
    (run,) = telemetry.named("checkpointkit.run")
    failed = [
        s
        for s in telemetry.named("checkpointkit.step")
        if s.attributes and s.attributes["checkpointkit.step"] == "boom@0"
    ]
    for span in [run, *failed]:
        assert span.attributes is not None
        assert span.attributes["error.type"] == "RuntimeError"
        assert span.attributes["checkpointkit.status"] == "failed"
        assert span.status.status_code == trace.StatusCode.ERROR
        assert span.status.description == "RuntimeError"
        assert not span.events  # no recorded exception: its message may hold data


async def test_enable_observes_every_workflow_and_disable_stops(telemetry: Telemetry) -> None:
    async with MemoryStorage() as storage:
        wf = Workflow(pipeline, storage=storage)
        observe.enable(
            tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
        )
        assert observe.enabled()
        await wf.run(1, run_id="on")
        observe.disable()
        assert not observe.enabled()
        await wf.run(1, run_id="off")
    runs = [
        s.attributes["checkpointkit.run_id"]
        for s in telemetry.named("checkpointkit.run")
        if s.attributes
    ]
    assert runs == ["on"]


def test_nothing_of_opentelemetry_is_imported_unless_enabled() -> None:
    code = (
        "import asyncio, sys\n"
        "from checkpointkit import Workflow, step, observe\n"
        "from checkpointkit.adapters.memory import MemoryStorage\n"
        "@step(name='s')\n"
        "async def s(x): return x\n"
        "async def main(x): return await s(x)\n"
        "async def go():\n"
        "    async with MemoryStorage() as st:\n"
        "        assert (await Workflow(main, storage=st).run(1)).output == 1\n"
        "asyncio.run(go())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


async def test_lifecycle_logs_at_info_and_saves_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="checkpointkit")
    async with MemoryStorage() as storage:
        await Workflow(pipeline, storage=storage).run(1, run_id="logged")
    ours = [r for r in caplog.records if r.name.startswith("checkpointkit.")]
    info = [r.getMessage() for r in ours if r.levelno == logging.INFO]
    debug = [(r.name, r.getMessage()) for r in ours if r.levelno == logging.DEBUG]
    assert info == ["run 'logged' started", "run 'logged' completed"]
    assert {r.name for r in ours if r.levelno == logging.INFO} == {"checkpointkit.runner"}
    assert ("checkpointkit.store", "run 'logged': step 'fetch@0' saved") in [
        (n, m.split(" (")[0]) for n, m in debug
    ]
    assert any(m.startswith("run 'logged': checkpoint 1 saved") for _, m in debug)


@pytest.fixture(scope="module")
def redis_with_password() -> Iterator[str]:
    with valkey_standalone(password=PASSWORD) as url:
        yield url


async def test_no_secret_in_any_span_attribute_metric_or_log_record(
    telemetry: Telemetry, redis_with_password: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert PASSWORD in redis_with_password  # the URL itself carries the password
    async with open_storage(redis_with_password, prefix="obs") as storage:
        wf = Workflow(
            failing,
            storage=storage,
            tracer_provider=telemetry.tracer_provider,
            meter_provider=telemetry.meter_provider,
        )
        with pytest.raises(RuntimeError, match=SECRET):
            await wf.run(1, run_id="secretive")
        ok = Workflow(
            pipeline,
            storage=storage,
            tracer_provider=telemetry.tracer_provider,
            meter_provider=telemetry.meter_provider,
        )
        assert (await ok.run(1, run_id="fine")).output == 3
    spans = telemetry.spans()
    assert {s.name for s in spans} >= {
        "checkpointkit.run",
        "checkpointkit.step",
        "checkpointkit.save",
    }
    seen: list[str] = []
    for span in spans:
        seen += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        seen.append(span.status.description or "")
        seen += [f"{e.name} {dict(e.attributes or {})}" for e in span.events]
    for name in ("checkpointkit.save.duration", "checkpointkit.save.size"):
        seen += [str(dict(p.attributes)) for p in telemetry.points(name)]
    records = [r for r in caplog.records if r.name.startswith("checkpointkit")]
    assert records  # the run was logged
    seen += [r.getMessage() for r in records]
    assert seen
    for text in seen:
        assert PASSWORD not in text and SECRET not in text, text

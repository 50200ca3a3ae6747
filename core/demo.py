"""``checkpointkit demo``: a short real workflow that fails, resumes, and shows what replayed."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

from .cli import EXIT_OK, EXIT_USAGE, CliError, Output, command
from .errors import CheckpointkitError, ConfigurationError
from .events import (
    Event,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepCompleted,
    StepReplayed,
    StepStarted,
)
from .registry import open_storage
from .runner import Workflow, context, step

__all__ = ["demo_command", "demo_workflow"]


class FlakyError(Exception):
    """The demo's deliberate first-attempt failure."""


_attempts: dict[str, int] = {}
_siblings_done: dict[str, asyncio.Event] = {}
"""Per run id: set by the demo once the other fetches have completed (see ``fetch``)."""


@step(name="fetch")
async def fetch(source: str) -> dict[str, Any]:
    """Pretend to fetch a source; the 'flaky' source fails on its first attempt."""
    await asyncio.sleep(0.05)
    run = context().run_id
    if source == "flaky":
        _attempts[run] = _attempts.get(run, 0) + 1
        if _attempts[run] == 1:
            # Fail only once the siblings have completed, so that the demo always shows
            # them replayed (a sibling still running when the run fails is cancelled).
            gate = _siblings_done.get(run)
            if gate is not None:
                await gate.wait()
            raise FlakyError("the flaky source timed out (first attempt)")
    return {"source": source, "items": len(source)}


@step(name="summarize")
async def summarize(results: list[dict[str, Any]]) -> str:
    """Combine the fetched results and record a total in the run's state."""
    total = sum(r["items"] for r in results)
    context().state.set("total", total)
    return f"{len(results)} sources, {total} items"


async def demo_workflow(sources: list[str]) -> str:
    """Fetch every source in parallel, then summarize."""
    results = await asyncio.gather(*(fetch(s) for s in sources))
    return await summarize(list(results))


def _row(t0: float, event: Event, attempt: int) -> dict[str, Any] | None:
    """One line of the timeline: time, attempt, step, what happened (None: not shown)."""
    if isinstance(event, RunStarted):
        step_name, what = "run", "resumed" if event.resumed else "started"
    elif isinstance(event, StepStarted):
        step_name, what = event.step, "executing"
    elif isinstance(event, StepCompleted):
        step_name, what = event.step, "completed"
    elif isinstance(event, StepReplayed):
        step_name, what = event.step, "replayed from checkpoint"
    elif isinstance(event, RunFailed):
        step_name, what = "run", f"failed: {event.error}"
    elif isinstance(event, RunCompleted):
        step_name, what = "run", f"completed: {event.output}"
    else:
        return None
    return {
        "time_ms": round((time.monotonic() - t0) * 1000, 1),
        "attempt": attempt,
        "step": step_name,
        "what": what,
    }


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage",
        "-s",
        metavar="URL",
        default="./.checkpoints",
        help="storage URL (default: ./.checkpoints; created if missing)",
    )


@command(
    "demo",
    help="Run a workflow with parallel steps; one fails, the run resumes from its checkpoints.",
    arguments=_demo_arguments,
    storage=False,
)
def demo_command(args: argparse.Namespace, out: Output) -> int:
    """Run a workflow with parallel steps; one fails, the run resumes from its checkpoints.

    Prints the timeline of both attempts: the steps that completed before the
    failure are replayed from their checkpoints on resume, not executed again.
    """
    storage: str = args.storage
    rows: list[dict[str, Any]] = []

    async def go() -> dict[str, Any]:
        async with open_storage(storage) as backend:
            wf = Workflow(demo_workflow, storage=backend, namespace="demo")
            run_id = f"demo-{uuid.uuid4().hex[:8]}"
            t0 = time.monotonic()
            sources = ["alpha", "beta", "flaky", "gamma"]
            gate = _siblings_done[run_id] = asyncio.Event()
            fetched = 0
            async for event in wf.stream(sources, run_id=run_id):
                if (row := _row(t0, event, 1)) is not None:
                    rows.append(row)
                if isinstance(event, StepCompleted) and event.step.startswith("fetch"):
                    fetched += 1
                    if fetched == len(sources) - 1:
                        gate.set()
            gate.set()  # whatever happened, nothing waits on it any more
            del _siblings_done[run_id]
            async for event in wf.stream(run_id=run_id, resume=True):
                if (row := _row(t0, event, 2)) is not None:
                    rows.append(row)
            latest = await wf.store.latest(run_id)
            if latest is None or latest.status != "completed":
                raise CheckpointkitError(f"the demo run {run_id!r} did not complete")
            return {
                "run_id": run_id,
                "storage": storage,
                "namespace": "demo",
                "status": latest.status,
                "output": latest.output,
                "state": dict(latest.state),
                "timeline": rows,
            }

    try:
        result = asyncio.run(go())
    except ConfigurationError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except CheckpointkitError as exc:
        raise CliError(str(exc)) from None
    if out.json:
        out.document(result)
        return EXIT_OK
    out.print(f"run {result['run_id']} on {storage}")
    out.table(
        ("time", "attempt", "step", "what happened"),
        [(f"{r['time_ms']:.1f} ms", str(r["attempt"]), r["step"], r["what"]) for r in rows],
        right=(0,),
    )
    out.print(f"completed steps were replayed, not executed again; state: {result['state']}")
    out.print(f"inspect it: checkpointkit ls {result['run_id']} -s {storage} -n demo")
    return EXIT_OK

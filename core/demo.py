"""``checkpointkit demo``: a short real workflow that fails, resumes, and shows what replayed."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from .errors import CheckpointkitError
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

console = Console()


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


def _row(table: Table, t0: float, event: Event, attempt: int) -> None:
    at = f"{(time.monotonic() - t0) * 1000:7.1f} ms"
    if isinstance(event, RunStarted):
        table.add_row(at, str(attempt), "run", "[bold]resumed[/]" if event.resumed else "started")
    elif isinstance(event, StepStarted):
        table.add_row(at, str(attempt), event.step, "[yellow]executing[/]")
    elif isinstance(event, StepCompleted):
        table.add_row(at, str(attempt), event.step, "[green]completed[/]")
    elif isinstance(event, StepReplayed):
        table.add_row(at, str(attempt), event.step, "[cyan]replayed from checkpoint[/]")
    elif isinstance(event, RunFailed):
        table.add_row(at, str(attempt), "run", f"[red]failed: {event.error}[/]")
    elif isinstance(event, RunCompleted):
        table.add_row(at, str(attempt), "run", f"[bold green]completed: {event.output}[/]")


def demo_command(
    storage: Annotated[
        str, typer.Option("--storage", "-s", help="Storage URL (default: ./.checkpoints).")
    ] = "./.checkpoints",
) -> None:
    """Run a workflow with parallel steps; one fails, the run resumes from its checkpoints."""

    async def go() -> None:
        async with open_storage(storage) as backend:
            wf = Workflow(demo_workflow, storage=backend, namespace="demo")
            run_id = f"demo-{uuid.uuid4().hex[:8]}"
            table = Table(title=f"run {run_id} on {storage}")
            for col in ("time", "attempt", "step", "what happened"):
                table.add_column(col)
            t0 = time.monotonic()
            sources = ["alpha", "beta", "flaky", "gamma"]
            gate = _siblings_done[run_id] = asyncio.Event()
            fetched = 0
            async for event in wf.stream(sources, run_id=run_id):
                _row(table, t0, event, 1)
                if isinstance(event, StepCompleted) and event.step.startswith("fetch"):
                    fetched += 1
                    if fetched == len(sources) - 1:
                        gate.set()
            gate.set()  # whatever happened, nothing waits on it any more
            del _siblings_done[run_id]
            async for event in wf.stream(run_id=run_id, resume=True):
                _row(table, t0, event, 2)
            console.print(table)
            latest = await wf.store.latest(run_id)
            if latest is None or latest.status != "completed":
                raise CheckpointkitError(f"the demo run {run_id!r} did not complete")
            console.print(
                f"completed steps were replayed, not executed again; state: {dict(latest.state)}"
            )
            console.print(f"inspect it: checkpointkit ls {run_id} -s {storage} -n demo")

    try:
        asyncio.run(go())
    except CheckpointkitError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1) from None

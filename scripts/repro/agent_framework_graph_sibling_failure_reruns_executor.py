"""agent-framework: a graph workflow's resume re-runs an executor that had completed.

Standalone reproduction (agent-framework-core; no checkpointkit needed):

    pip install agent-framework-core
    python agent_framework_graph_sibling_failure_reruns_executor.py

A graph workflow (``WorkflowBuilder``) fans out from ``start`` to ``good`` and
``bad``, which run in the same superstep. ``good`` completes (it yields its
output); ``bad`` waits until it has (an event, so no guessed sleep), then
raises, and the run fails. Checkpoints go to agent-framework's own
``InMemoryCheckpointStorage``. Resuming from the latest checkpoint (the one
after ``start``'s superstep: checkpoints are per superstep) delivers both
messages again, so ``good`` runs a second time and yields its output again,
although it had completed. Exit status 1 when the resume runs ``good`` again
(0 when not; 2 when the first run did not fail or stored no checkpoint).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from agent_framework import (
    Executor,
    InMemoryCheckpointStorage,
    WorkflowBuilder,
    WorkflowContext,
    handler,
)

CALLS: list[str] = []
FAIL = [True]
GOOD_DONE = asyncio.Event()


class Start(Executor):
    @handler
    async def go(self, x: int, ctx: WorkflowContext[int]) -> None:
        CALLS.append("start")
        await ctx.send_message(x + 1)


class Good(Executor):
    @handler
    async def go(self, x: int, ctx: WorkflowContext[Any, int]) -> None:
        CALLS.append("good")
        await ctx.yield_output(x * 10)
        GOOD_DONE.set()


class Bad(Executor):
    @handler
    async def go(self, x: int, ctx: WorkflowContext[Any, int]) -> None:
        CALLS.append("bad")
        if FAIL[0]:
            await GOOD_DONE.wait()  # good, in the same superstep, has completed
            raise RuntimeError("sibling executor failed")
        await ctx.yield_output(x)


def graph() -> Any:
    start, good, bad = Start(id="start"), Good(id="good"), Bad(id="bad")
    return (
        WorkflowBuilder(name="graph", start_executor=start)
        .add_fan_out_edges(start, [good, bad])
        .build()
    )


async def main() -> int:
    storage = InMemoryCheckpointStorage()
    try:
        await graph().run(1, checkpoint_storage=storage)
    except RuntimeError as exc:
        print(f"the first run failed: {exc!r}; calls so far: {CALLS}")
    else:
        print("the first run did not fail; nothing to show")
        return 2
    stored = await storage.list_checkpoints(workflow_name="graph")
    latest = await storage.get_latest(workflow_name="graph")
    if latest is None:
        print("no checkpoint is stored; nothing to resume")
        return 2
    print(f"{len(stored)} checkpoint(s) stored; resuming from the latest, {latest.checkpoint_id}")
    FAIL[0] = False
    result = await graph().run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage)
    print(f"the resumed run's outputs: {result.get_outputs()}; calls: {CALLS}")
    if CALLS.count("good") > 1:
        print(f"BUG: good completed in the failed run, and the resume ran it again: {CALLS}")
        return 1
    print("ok: the resume did not run good again")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

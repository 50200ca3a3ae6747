"""agent-framework: a completed step's in-flight checkpoint save is lost when a sibling fails.

Standalone reproduction (agent-framework-core; no checkpointkit needed):

    pip install agent-framework-core
    python agent_framework_functional_sibling_failure_loses_save.py

A functional workflow (``@workflow``) runs two ``@step`` functions with
``asyncio.gather``. The first completes; the runner then saves a checkpoint of
it. The storage is agent-framework's own ``InMemoryCheckpointStorage``,
subclassed only so that this save stays in flight (as any storage doing I/O
does) until the script lets it go. The second step waits until that save has
begun (an event, so no guessed sleep), then raises. The run fails, and the
runner cancels the in-flight save instead of letting it finish: ``save`` gets
``CancelledError``, no checkpoint of the workflow is stored, and a resume can
only run the workflow again from the start, running the completed step again.
Exit status 1 when the completed step's checkpoint is not stored (or a resume
runs the step again).
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from typing import Any

from agent_framework import InMemoryCheckpointStorage, step, workflow

BOUND = 2.0
"""Seconds to wait for the failed run to end while the save is still held."""

CALLS: list[str] = []
FAIL = [True]


class HeldSaveStorage(InMemoryCheckpointStorage):
    """InMemoryCheckpointStorage whose next save, once armed, waits for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.hold_next = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.ended = asyncio.Event()
        self.outcome = "not started"

    async def save(self, checkpoint: Any) -> Any:
        if not self.hold_next:
            return await super().save(checkpoint)
        self.hold_next = False
        self.entered.set()
        try:
            await self.release.wait()
            saved = await super().save(checkpoint)
            self.outcome = "stored"
            return saved
        except asyncio.CancelledError:
            self.outcome = "cancelled (CancelledError in save)"
            raise
        finally:
            self.ended.set()


STORAGE = HeldSaveStorage()

with warnings.catch_warnings():  # functional workflows are experimental in agent-framework 1.x
    warnings.simplefilter("ignore")

    @step
    async def completed(x: int) -> int:
        CALLS.append("completed")
        STORAGE.hold_next = FAIL[0]  # the checkpoint saved after this step stays in flight
        return x + 1

    @step
    async def failing(x: int) -> int:
        CALLS.append("failing")
        if FAIL[0]:
            await STORAGE.entered.wait()  # the completed step's save has begun
            raise RuntimeError("sibling step failed")
        return x

    @workflow(name="siblings")
    async def siblings(x: int) -> int:
        a, b = await asyncio.gather(completed(x), failing(x))
        return a + b


async def main() -> int:
    run = asyncio.ensure_future(siblings.build().run(1, checkpoint_storage=STORAGE))
    await STORAGE.entered.wait()
    done, _ = await asyncio.wait({run}, timeout=BOUND)
    if done:
        print(f"the run ended while the completed step's save was in flight: {run.exception()!r}")
    else:
        print(f"the run waits for the in-flight save ({BOUND:g} s); letting the save go")
    STORAGE.release.set()
    await asyncio.wait_for(STORAGE.ended.wait(), 30)
    await asyncio.gather(run, return_exceptions=True)
    print(f"the completed step's save: {STORAGE.outcome}")
    latest = await STORAGE.get_latest(workflow_name="siblings")
    FAIL[0] = False
    before = CALLS.count("completed")
    if latest is None:
        print("no checkpoint of the workflow is stored: a resume can only start over")
        await siblings.build().run(1, checkpoint_storage=STORAGE)
    else:
        print(f"resuming from checkpoint {latest.checkpoint_id}")
        await siblings.build().run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=STORAGE)
    again = CALLS.count("completed") - before
    print(f"calls: {CALLS}")
    if latest is None or again:
        print(f"BUG: the completed step's checkpoint was lost; the resume ran it {again} more time")
        return 1
    print("ok: the completed step's checkpoint survived the sibling's failure")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

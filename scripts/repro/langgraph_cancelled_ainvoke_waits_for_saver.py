"""A cancelled graph.ainvoke does not end while the checkpointer's write hangs.

Standalone reproduction (langgraph; no checkpointkit needed):

    pip install langgraph
    python langgraph_cancelled_ainvoke_waits_for_saver.py

The checkpointer is LangGraph's own ``InMemorySaver``, subclassed so that its
``aput`` and ``aput_writes`` wait on an event (a database that stopped
answering). ``ainvoke`` of a one-node graph is started; once a checkpoint write
has begun (the event the subclass sets, so no guessed sleep) the ``ainvoke``
task is cancelled. It is still running 2 s after ``task.cancel()``: LangGraph's
loop waits for its pending checkpoint writes on exit, and does not cancel them.
It ends only when the writes are let go. For contrast, the same cancel while a
node (not the saver) is waiting ends at once. Exit status 1 when the cancelled
``ainvoke`` is still running 2 s after its cancel.
"""

from __future__ import annotations

import asyncio
import operator
import sys
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

BOUND = 2.0
"""Seconds after ``task.cancel()`` past which the ainvoke counts as not ending promptly."""


class HangingSaver(InMemorySaver):
    """InMemorySaver whose ``aput`` and ``aput_writes`` wait for ``released`` while ``hang``."""

    def __init__(self, hang: bool) -> None:
        super().__init__()
        self.hang = hang
        self.entered = asyncio.Event()
        self.released = asyncio.Event()
        self.hung: list[str] = []

    async def _maybe_hang(self, method: str) -> None:
        if self.hang:
            self.hung.append(method)
            self.entered.set()
            await self.released.wait()

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        await self._maybe_hang("aput")
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        await self._maybe_hang("aput_writes")
        await super().aput_writes(config, writes, task_id, task_path)


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def graph(saver: InMemorySaver, node_entered: asyncio.Event, node_waits: bool) -> Any:
    async def node(state: State) -> dict[str, list[str]]:
        node_entered.set()
        if node_waits:
            await asyncio.Event().wait()  # a node that waits forever
        return {"log": ["node"]}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder.compile(checkpointer=saver)


async def cancel_ainvoke(saver_hangs: bool) -> tuple[str, bool]:
    """Cancel an ainvoke once the saver (or else the node) is waiting; (report, late)."""
    loop = asyncio.get_running_loop()
    saver = HangingSaver(hang=saver_hangs)
    node_entered = asyncio.Event()
    app = graph(saver, node_entered, node_waits=not saver_hangs)
    config = {"configurable": {"thread_id": "t"}}
    task = asyncio.ensure_future(app.ainvoke({"log": []}, config))
    waiting = saver.entered if saver_hangs else node_entered
    await asyncio.wait_for(waiting.wait(), 30)
    cancelled_at = loop.time()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=BOUND)
    late = not done
    what = (
        f"the saver's {' and '.join(saver.hung)} hang" if saver_hangs else "a node waits (control)"
    )
    if late:
        saver.released.set()  # let the hung writes go
        done, _ = await asyncio.wait({task}, timeout=30)
        seconds = loop.time() - cancelled_at
        ended = "ended" if done else "was still running"
        report = (
            f"{what}: still running {BOUND:g} s after cancel; {ended} {seconds:.2f} s after "
            "cancel, once the saver's writes were released"
        )
    else:
        seconds = loop.time() - cancelled_at
        report = f"{what}: ended {seconds:.2f} s after cancel"
    if task.done():
        outcome = "CancelledError" if task.cancelled() else repr(task.exception())
        report += f" ({outcome})"
    else:
        task.cancel()
    return report, late


async def main() -> int:
    control, _ = await cancel_ainvoke(saver_hangs=False)
    print(control)
    report, late = await cancel_ainvoke(saver_hangs=True)
    print(report)
    if late:
        print(f"BUG: the cancelled ainvoke did not end within {BOUND:g} s while the saver hung")
        return 1
    print(f"ok: the cancelled ainvoke ended within {BOUND:g} s while the saver hung")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

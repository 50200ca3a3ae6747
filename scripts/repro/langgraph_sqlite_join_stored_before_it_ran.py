"""AsyncSqliteSaver stores a join's live set under an older version: history shows the
joined node ready before the nodes it waits for ran.

Standalone reproduction (langgraph and langgraph-checkpoint-sqlite; no checkpointkit):

    pip install langgraph langgraph-checkpoint-sqlite
    python langgraph_sqlite_join_stored_before_it_ran.py

A graph ``first -> p1..p5 -> last`` (``last`` joins the five) runs twice on one
thread, with LangGraph's default ``durability="async"``. LangGraph hands ``aput`` its
live channel objects and starts each put after the previous one ended; meanwhile the
next steps change the join's set of finished nodes in place. ``AsyncSqliteSaver``
stores every channel's value with every checkpoint (``InMemorySaver`` and
``AsyncPostgresSaver`` store a value once per channel version), so the second run's
checkpoints after its ``first`` step hold the first run's finished set under the
join's old version, and ``get_state_history`` shows ``last`` in ``next`` beside
``first`` or the parallel nodes: resumed from one of them, ``last`` runs before
``p1..p5``. Prints the ``next`` of each checkpoint of the second run; exit status 1
when ``last`` shows up early. ``--control`` runs the same graph on ``InMemorySaver``
(which stores each channel version's value once): no checkpoint shows ``last`` early.
"""

from __future__ import annotations

import asyncio
import operator
import sys
import tempfile
from pathlib import Path
from typing import Annotated, TypedDict

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

PARALLEL = [f"p{i}" for i in range(1, 6)]


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def node(name: str):  # type: ignore[no-untyped-def]
    async def run(state: State) -> dict[str, list[str]]:
        return {"items": [name]}

    return run


def build(saver: AsyncSqliteSaver):  # type: ignore[no-untyped-def]
    builder = StateGraph(State)
    builder.add_node("first", node("first"))
    builder.add_node("last", node("last"))
    builder.add_edge(START, "first")
    for name in PARALLEL:
        builder.add_node(name, node(name))
        builder.add_edge("first", name)
    builder.add_edge(PARALLEL, "last")
    builder.add_edge("last", END)
    return builder.compile(checkpointer=saver)


async def history_of(saver: object) -> list:  # type: ignore[type-arg]
    graph = build(saver)  # type: ignore[arg-type]
    config = {"configurable": {"thread_id": "t"}}
    await graph.ainvoke({"items": ["run 1"]}, config)
    await graph.ainvoke({"items": ["run 2"]}, config)
    return [s async for s in graph.aget_state_history(config)]


async def main() -> int:
    if "--control" in sys.argv:
        from langgraph.checkpoint.memory import InMemorySaver

        history = await history_of(InMemorySaver())
    else:
        with tempfile.TemporaryDirectory() as folder:
            path = str(Path(folder) / "g.sqlite")
            async with AsyncSqliteSaver.from_conn_string(path) as saver:
                history = await history_of(saver)
    second_run = list(reversed(history))[len(history) // 2 :]
    early = 0
    for snapshot in second_run:
        nexts = tuple(snapshot.next)
        wrong = "last" in nexts and len(nexts) > 1
        early += wrong
        print(
            f"step {snapshot.metadata['step']}: next {nexts}"
            + ("  <- last too early" if wrong else "")
        )
    if early:
        print(f"BUG: {early} checkpoints of the second run schedule 'last' early")
    else:
        print("no checkpoint of the second run schedules 'last' early")
    return 1 if early else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

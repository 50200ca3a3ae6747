"""LangGraph's graph step on PostgreSQL: where its time goes, wall and CPU, saver by saver.

Run: ``.venv/bin/python benchmarks/postgres_graph_cpu.py [--rounds 5] [--graphs 100]``

``bench_postgres.py`` times the graph step (a 10-node ``StateGraph`` run with ``ainvoke``)
for ``CheckpointkitSaver`` and ``AsyncPostgresSaver``. This script times the same graph,
round by round and interleaved, with the process's CPU time beside the wall time, for:

- no checkpointer (the floor: LangGraph's own work per step);
- LangGraph's ``InMemorySaver`` (its serializer and bookkeeping, no I/O);
- ``CheckpointkitSaver`` on ``memory://`` (its records, envelopes and keys, no I/O);
- ``CheckpointkitSaver`` on ``postgres://`` and ``AsyncPostgresSaver``, on one PostgreSQL
  server with its durable defaults.

A step is CPU-bound where its CPU time is close to its wall time: LangGraph saves a step's
writes and checkpoint in the background while the next step runs, so a saver's share of a
step is mostly the CPU it spends per call (its own code, the driver, the event loop and
the kernel's loopback send). Figures are medians over the rounds, in microseconds per
step; the ratio is ``AsyncPostgresSaver``'s wall time over each row's.

Each checkpointer runs the graph twice over: with the benchmark's nodes, plain functions,
which LangGraph runs in a worker thread of the event loop's executor, and with the same
nodes as ``async def`` functions, which run on the event loop itself. ``switches`` is the
process's voluntary context switches per step (``getrusage``): a thread that blocks, on
the event loop's poll or on the interpreter's lock that the node's worker thread holds.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
import uuid
from typing import Any

from bench_integrations import chain_graph, logging_quiet, ten_step_graph
from bench_postgres import OURS, PEER, savers
from checkpointkit.conformance.servers.postgres import postgres_server
from checkpointkit.integrations.langgraph import CheckpointkitSaver

STEPS = 10
"""Nodes of the graph: steps per run."""


def async_step_graph() -> Any:
    """`ten_step_graph` with ``async def`` nodes: LangGraph runs them on the event loop."""

    async def node(state: dict[str, Any]) -> dict[str, int]:
        return {"n": state["n"] + 1}

    return chain_graph(node, STEPS)


async def _steps(graph: Any, runs: int) -> tuple[float, float, float]:
    """Wall and CPU seconds and voluntary context switches per step over ``runs`` runs of
    ``graph``, each on a new thread."""
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(runs):
        config = {"configurable": {"thread_id": f"graph-{uuid.uuid4().hex[:8]}"}}
        await graph.ainvoke({"n": 0, "payload": "x" * 1000}, config)
    steps = runs * STEPS
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches
    return wall / steps, cpu / steps, switches / steps


Figures = dict[tuple[str, str], tuple[float, float, float]]
"""(nodes, checkpointer) -> wall and CPU seconds and voluntary context switches per step."""


async def bench(url: str, rounds: int, graphs: int) -> Figures:
    from langgraph.checkpoint.memory import InMemorySaver

    builders = {"plain functions": ten_step_graph(), "async def": async_step_graph()}
    async with (
        savers(url) as found,
        CheckpointkitSaver.from_url("memory://") as on_memory,
    ):
        checkpointers: dict[str, Any] = {
            "no checkpointer (floor)": None,
            "InMemorySaver": InMemorySaver(),
            "ckk memory": on_memory,
            OURS: found[OURS],
            PEER: found[PEER],
        }
        compiled = {
            (nodes, name): builder.compile(checkpointer=c)
            for nodes, builder in builders.items()
            for name, c in checkpointers.items()
        }
        for graph in compiled.values():  # warm-up
            await _steps(graph, max(2, graphs // 10))
        figures: dict[tuple[str, str], list[tuple[float, float, float]]] = {
            row: [] for row in compiled
        }
        for _ in range(rounds):
            for row, graph in compiled.items():
                figures[row].append(await _steps(graph, graphs))
    return {
        row: (
            statistics.median(w for w, _, _ in runs),
            statistics.median(c for _, c, _ in runs),
            statistics.median(s for _, _, s in runs),
        )
        for row, runs in figures.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--graphs", type=int, default=100, help="graph runs per round")
    args = parser.parse_args()
    logging_quiet()
    with postgres_server(fast=False) as server:
        medians = asyncio.run(bench(server.url, args.rounds, args.graphs))
    for nodes in ("plain functions", "async def"):
        peer = medians[nodes, PEER][0]
        print(
            f"\nGraph step, {STEPS} nodes ({nodes}), medians of {args.rounds} rounds of "
            f"{args.graphs} runs (µs per step)"
        )
        print(f"{'':<26}{'wall':>8}{'CPU':>8}{'CPU/wall':>10}{'switches':>10}{PEER + ' / row':>28}")
        for (of, name), (wall, cpu, switches) in medians.items():
            if of == nodes:
                print(
                    f"{name:<26}{wall * 1e6:8.0f}{cpu * 1e6:8.0f}{cpu / wall:10.0%}"
                    f"{switches:10.1f}{peer / wall:27.2f}x"
                )


if __name__ == "__main__":
    main()

"""LangGraph's graph run on PostgreSQL, in three phases: before its first node, between its
nodes, after its last.

Run: ``.venv/bin/python benchmarks/postgres_graph_phases.py [--rounds 3] [--graphs 100]
[--nodes 10]``

``bench_postgres.py``'s graph-step row is a whole ``ainvoke`` of a 10-node graph over its
10 steps. LangGraph saves each step's writes and checkpoint in the background (its
checkpoints one after another, each waiting for the one before) and waits for every save
at the end of the run; so a run is: the time before its first node runs (the thread's
lookup and the first saves), 9 steps between nodes, and the time after its last node
(the saves still under way). This script runs the benchmark's graph, its nodes plain
functions as there, each node noting when it starts, and prints the medians of the three
phases, in microseconds, for ``CheckpointkitSaver`` on ``memory://`` (no I/O), on
``postgres://``, and ``AsyncPostgresSaver``, on one PostgreSQL server with its durable
defaults, interleaved round by round. ``--nodes N`` runs a graph of N nodes instead (the
benchmark's has 10): the last column, the whole run over its steps, is what the
benchmark's row would be for such a graph.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from bench_integrations import chain_graph, logging_quiet
from bench_postgres import OURS, PEER, savers
from checkpointkit.conformance.servers.postgres import postgres_server
from checkpointkit.integrations.langgraph import CheckpointkitSaver

STEPS = 10
"""Nodes of the graph (``--nodes``)."""

Phases = tuple[float, float, float]
"""Seconds before the first node, per step between nodes, after the last node."""


def noted_graph(starts: list[float]) -> Any:
    """The benchmark's graph (plain-function nodes), of `STEPS` nodes, each node appending
    the time it starts to ``starts``."""

    def node(state: dict[str, Any]) -> dict[str, int]:
        starts.append(time.perf_counter())
        return {"n": state["n"] + 1}

    return chain_graph(node, STEPS)


async def _phases(graph: Any, starts: list[float], runs: int) -> list[Phases]:
    """The phases of each of ``runs`` runs of ``graph``, each on a new thread."""
    found: list[Phases] = []
    for _ in range(runs):
        starts.clear()
        config = {"configurable": {"thread_id": f"graph-{uuid.uuid4().hex[:8]}"}}
        begun = time.perf_counter()
        await graph.ainvoke({"n": 0, "payload": "x" * 1000}, config)
        ended = time.perf_counter()
        found.append(
            (starts[0] - begun, (starts[-1] - starts[0]) / (STEPS - 1), ended - starts[-1])
        )
    return found


async def bench(url: str, rounds: int, graphs: int) -> dict[str, Phases]:
    starts: list[float] = []
    builder = noted_graph(starts)
    async with savers(url) as found, CheckpointkitSaver.from_url("memory://") as on_memory:
        compiled = {
            name: builder.compile(checkpointer=c)
            for name, c in (("ckk memory", on_memory), (OURS, found[OURS]), (PEER, found[PEER]))
        }
        for graph in compiled.values():  # warm-up
            await _phases(graph, starts, max(2, graphs // 10))
        runs: dict[str, list[Phases]] = {name: [] for name in compiled}
        for _ in range(rounds):
            for name, graph in compiled.items():
                runs[name] += await _phases(graph, starts, graphs)
    return {
        name: (
            statistics.median(p[0] for p in found_runs),
            statistics.median(p[1] for p in found_runs),
            statistics.median(p[2] for p in found_runs),
        )
        for name, found_runs in runs.items()
    }


def main() -> None:
    global STEPS
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--graphs", type=int, default=100, help="graph runs per round")
    parser.add_argument("--nodes", type=int, default=STEPS, help="nodes of the graph (>= 2)")
    args = parser.parse_args()
    if args.nodes < 2:
        parser.error(f"--nodes must be at least 2, not {args.nodes}")
    STEPS = args.nodes
    logging_quiet()
    with postgres_server(fast=False) as server:
        medians = asyncio.run(bench(server.url, args.rounds, args.graphs))
    print(
        f"\nA run of the {STEPS}-node graph in phases: medians of {args.rounds} rounds of "
        f"{args.graphs} runs (µs)"
    )
    print(
        f"{'':<22}{'before node 1':>15}{'per step':>10}{'after the last':>16}"
        f"{f'whole / {STEPS}':>12}"
    )
    for name, (head, step, tail) in medians.items():
        whole = (head + (STEPS - 1) * step + tail) / STEPS
        print(
            f"{name:<22}{head * 1e6:15.0f}{step * 1e6:10.0f}{tail * 1e6:16.0f}{whole * 1e6:12.0f}"
        )


if __name__ == "__main__":
    main()

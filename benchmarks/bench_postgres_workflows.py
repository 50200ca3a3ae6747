"""agent-framework's save and load, and checkpointkit's runner per step, on one PostgreSQL server.

Run: ``.venv/bin/python benchmarks/bench_postgres_workflows.py [--runs 9] [--quick]
[--only agent-framework|runner]``

The rest of issue 19's benchmarks (``bench_postgres.py`` has LangGraph's). Starts one
PostgreSQL 15 server on a loopback port with its durable defaults (``fsync`` and
``synchronous_commit`` on) and measures, interleaved run by run (`in_turn`: the systems
take turns at going first):

- ``agent-framework``: ``CheckpointkitCheckpointStorage`` on ``postgres://``: ``save`` and
  ``load`` of a checkpoint of 1 KiB / 64 KiB / 1 MiB of state, and 16 workflows saving at
  once (wall time per save). agent-framework has no storage on PostgreSQL; beside it are its
  own ``FileCheckpointStorage`` (one JSON file per checkpoint, written with ``os.replace``,
  never synced: not durable, on the machine's disk) and the floor, one autocommitted
  ``INSERT`` of a row of the same size through asyncpg (one log flush, as a save's commit).
- ``runner``: checkpointkit's ``Workflow`` on ``postgres://``, a run of 200 sequential no-op
  steps, per step; beside it LangGraph's functional API (``@entrypoint``/``@task``, its
  default durability) with ``AsyncPostgresSaver`` on the same server, and the floor of a
  step's record (an ``INSERT`` of 120 bytes).

Each system has its own database. Figures are medians of ``--runs`` runs; the ratios are
the other system's time over checkpointkit's, run by run, with the median of those ratios
and its distribution-free interval (`median_interval`; 96% or more from 9 runs up).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import uuid
import warnings
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench_integrations import (
    CONCURRENT,
    SIZES,
    WARM_UP,
    _load,
    af_checkpoint,
    af_saves_at_once,
    fmt,
    in_turn,
    logging_quiet,
    median_interval,
    payload_size,
    timed,
)
from bench_postgres import Floor, _database
from checkpointkit import Workflow, step
from checkpointkit.adapters.postgres import PostgresStorage
from checkpointkit.conformance.servers.postgres import postgres_server
from checkpointkit.integrations.agent_framework import CheckpointkitCheckpointStorage

OURS = "ckk postgres"
FLOOR = "floor postgres"
STEPS = 200
STEP_RECORD = 120
"""Bytes of a no-op step's record, about: the size of the runner's floor."""


def ratios(
    times: dict[str, list[float]], peer: str, ours: str = OURS
) -> tuple[float, float, float, float]:
    """The median of the runs' ratios ``peer / ours`` and its interval (`median_interval`)."""
    return median_interval([p / o for p, o in zip(times[peer], times[ours], strict=True)])


def width(name: str) -> int:
    return max(14, len(name) + 2)


def header(names: list[str]) -> str:
    return f"{'operation':<30}" + "".join(f"{n:>{width(n)}}" for n in names) + "   ratios"


def row(op: str, times: dict[str, list[float]], names: list[str], peers: list[str]) -> str:
    cells = "".join(
        f"{fmt(statistics.median(times[n])) if n in times else '-':>{width(n)}}" for n in names
    )
    for peer in peers:
        low, median, high, confidence = ratios(times, peer)
        cells += f"   {peer} / ours {median:.2f}x ({low:.2f} to {high:.2f}, {confidence:.0%})"
    return f"{op:<30}{cells}"


# -- agent-framework -------------------------------------------------------------------------


async def bench_agent_framework(url: str, base: str, runs: int, quick: bool) -> None:
    from agent_framework import FileCheckpointStorage

    theirs_name = "FileCheckpointStorage"
    counts = {"1 KiB": 200, "64 KiB": 60, "1 MiB": 10}
    if quick:
        counts = {k: max(4, v // 4) for k, v in counts.items()}
    clock = iter(datetime(2025, 1, 1, tzinfo=UTC) + timedelta(milliseconds=i) for i in range(10**7))
    ours_url = await _database(url, "af_ckk")
    lines: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        floor = await stack.enter_async_context(Floor.on(url))
        stores: dict[str, Any] = {
            OURS: await stack.enter_async_context(
                CheckpointkitCheckpointStorage.from_url(ours_url)
            ),
            theirs_name: FileCheckpointStorage(f"{base}/af-theirs"),
        }
        for store in stores.values():
            for i in range(WARM_UP):
                await store.save(af_checkpoint("warm-up", 1 << 10, i, next(clock)))
        names = [OURS, theirs_name, FLOOR]
        for label, size in SIZES.items():
            n = counts[label]
            saves: dict[str, list[float]] = {k: [] for k in names}
            loads: dict[str, list[float]] = {k: [] for k in stores}
            for run in range(runs):
                for key, store in in_turn(stores, run):
                    batch = [af_checkpoint(f"save-{label}", size, i, next(clock)) for i in range(n)]
                    saves[key].append(await timed(n, lambda i, b=batch, s=store: s.save(b[i])))
                    loads[key].append(
                        await timed(n, lambda i, b=batch, s=store: s.load(b[i].checkpoint_id))
                    )
                saves[FLOOR].append(await floor.per_commit(payload_size(size), n))
            lines.append(row(f"save, {label}", saves, names, [theirs_name, FLOOR]))
            lines.append(row(f"load, {label}", loads, names, [theirs_name]))
        at_once: dict[str, list[float]] = {k: [] for k in stores}
        k = max(4, counts["1 KiB"] // 16)
        for run in range(runs):
            for key, store in in_turn(stores, run):
                at_once[key].append(await af_saves_at_once(store, k, clock))
        lines.append(row(f"save, 1 KiB, {CONCURRENT} workflows", at_once, names, [theirs_name]))
    print(f"\nagent-framework on one PostgreSQL server: CheckpointkitCheckpointStorage ({OURS})")
    print(header(names))
    print("\n".join(lines))
    print(
        f"{theirs_name}: agent-framework's own storage, a JSON file per checkpoint on the "
        f"machine's disk, never synced (not durable); {FLOOR}: one autocommitted INSERT of a "
        "row of the state's size (asyncpg, one connection)"
    )


# -- the runner ------------------------------------------------------------------------------


@step(name="noop")
async def noop(i: int) -> int:
    return i


async def sequential(n: int) -> int:
    for i in range(n):
        await noop(i)
    return n


class Runner:
    """checkpointkit's runner on one storage: a new run of ``STEPS`` steps per call."""

    def __init__(self, storage: PostgresStorage) -> None:
        self.workflow = Workflow(sequential, storage=storage)

    async def per_step(self) -> float:
        start = asyncio.get_running_loop().time()
        result = await self.workflow.run(STEPS, run_id=f"bench-{uuid.uuid4().hex[:12]}")
        seconds = asyncio.get_running_loop().time() - start
        assert result.output == STEPS, result
        return seconds / STEPS


class Functional:
    """LangGraph's functional API with ``AsyncPostgresSaver``: a new thread per call."""

    def __init__(self, saver: Any) -> None:
        from langgraph.func import entrypoint, task

        @task
        async def lg_noop(i: int) -> int:
            return i

        @entrypoint(checkpointer=saver)
        async def workflow(count: int) -> int:
            for i in range(count):
                await lg_noop(i)
            return count

        self.workflow = workflow

    async def per_step(self) -> float:
        config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex[:12]}"}}
        start = asyncio.get_running_loop().time()
        out = await self.workflow.ainvoke(STEPS, config)
        seconds = asyncio.get_running_loop().time() - start
        assert out == STEPS, out
        return seconds / STEPS


async def bench_runner(url: str, runs: int) -> None:
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row

    peer = "LangGraph functional API"
    ours_url = await _database(url, "runner_ckk")
    peer_url = await _database(url, "runner_peer")
    async with contextlib.AsyncExitStack() as stack:
        floor = await stack.enter_async_context(Floor.on(url))
        storage = PostgresStorage(ours_url)
        stack.push_async_callback(storage.aclose)
        conn = await psycopg.AsyncConnection.connect(
            peer_url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        await stack.enter_async_context(conn)
        saver = AsyncPostgresSaver(conn)
        await saver.setup()
        systems: dict[str, Runner | Functional] = {OURS: Runner(storage), peer: Functional(saver)}
        for system in systems.values():
            await system.per_step()  # warm-up: a run of its own
        times: dict[str, list[float]] = {OURS: [], peer: [], FLOOR: []}
        for run in range(runs):
            for name, system in in_turn(systems, run):
                times[name].append(await system.per_step())
            times[FLOOR].append(await floor.per_commit(STEP_RECORD, STEPS))
    names = [OURS, peer, FLOOR]
    print(
        "\ncheckpointkit's runner on one PostgreSQL server, per step "
        f"({STEPS} sequential no-op steps)"
    )
    print(header(names))
    print(row("per step", times, names, [peer, FLOOR]))
    print(
        f"{peer}: @entrypoint and @task with AsyncPostgresSaver (langgraph-checkpoint-postgres, "
        f"psycopg 3, one connection, autocommit), its default durability; {FLOOR}: one "
        f"autocommitted INSERT of {STEP_RECORD} bytes (a step's record), asyncpg"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="fewer operations per run")
    parser.add_argument("--only", choices=["agent-framework", "runner"])
    args = parser.parse_args()
    logging_quiet()
    print(f"medians of {args.runs} runs; {_load()}")
    base = tempfile.mkdtemp(prefix=".bench-postgres-workflows-")
    try:
        with warnings.catch_warnings(), postgres_server(fast=False) as server:
            warnings.simplefilter("ignore")  # agent-framework's experimental-feature notes
            jobs: list[Callable[[], Awaitable[None]]] = []
            if args.only in (None, "agent-framework"):
                jobs.append(lambda: bench_agent_framework(server.url, base, args.runs, args.quick))
            if args.only in (None, "runner"):
                jobs.append(lambda: bench_runner(server.url, args.runs))

            async def run_all() -> None:
                for job in jobs:
                    await job()

            asyncio.run(run_all())
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

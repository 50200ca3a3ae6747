"""One durable 1 KiB write at a time on ``sqlite://``, each system beside the floor, finely
interleaved.

Run: ``.venv/bin/python benchmarks/small_puts.py [--rounds 9] [--ops 50] [--dir PATH]``

Where ``bench_integrations.py`` times each system for a whole run before the next, this
script alternates every ``--ops`` operations, round after round, so that every system and
the floor see the same moments of a shared machine (another process's disk writes, say):

- floor: one SQLite commit of a 1 KiB row with its log sync, from the event loop through a
  worker thread (``benchmarks/floors.py``);
- ``SQLiteStorage.put``: checkpointkit's storage alone (create-only, 1 KiB);
- ``CheckpointkitSaver.aput`` (LangGraph, 1 KiB state) and LangGraph's ``AsyncSqliteSaver``;
- ``CheckpointkitCheckpointStorage.save`` (agent-framework, 1 KiB state); then, after
  the interleaved rounds, agent-framework's ``FileCheckpointStorage`` (which does not sync:
  interleaved, the journal work its files leave behind lands on the next fsync of whoever
  syncs next, so it would inflate the others' figures).

Figures are medians over the rounds of the mean time per operation; the ratio is each
figure over the floor's. The last line gives the CPU time of one LangGraph put on the
memory storage: the saver's own work, which a durable put adds to the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench_integrations import WARM_UP, af_checkpoint, chain_of, put_chain, put_checkpoints
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.integrations.agent_framework import CheckpointkitCheckpointStorage
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from floors import Floors


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ops", type=int, default=50)
    parser.add_argument("--dir", default=None, help="where to make a scratch directory")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("agent_framework").setLevel(logging.WARNING)
    from agent_framework import FileCheckpointStorage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    base = tempfile.mkdtemp(prefix=".bench-small-puts-", dir=args.dir)
    floors = Floors(base)
    clock = iter(datetime(2025, 1, 1, tzinfo=UTC) + timedelta(milliseconds=i) for i in range(10**7))
    with open("/proc/loadavg") as f:
        print(f"load average before: {' '.join(f.read().split()[:3])}")
    try:
        async with (
            SQLiteStorage(f"{base}/storage.db") as storage,
            CheckpointkitSaver.from_url(f"sqlite:///{base}/lg-ckk.db") as lg_ours,
            AsyncSqliteSaver.from_conn_string(f"{base}/lg-sqlite.db") as lg_theirs,
            CheckpointkitCheckpointStorage.from_url(f"sqlite:///{base}/af-ckk.db") as af_ours,
        ):
            await lg_theirs.setup()
            af_theirs = FileCheckpointStorage(f"{base}/af-theirs")
            row = bytes(1024)
            for i in range(WARM_UP):
                await storage.put(f"warm/{i}", row)
            for saver in (lg_ours, lg_theirs):
                await put_chain(saver, "warm-up", 1 << 10, WARM_UP)
            for af in (af_ours, af_theirs):
                for i in range(WARM_UP):
                    await af.save(af_checkpoint("warm-up", 1 << 10, i, next(clock)))
            await floors.sqlite(1024, 20)
            n = args.ops
            counter = iter(range(10**9))

            async def puts() -> float:
                start = time.perf_counter()
                for _ in range(n):
                    await storage.put(f"k/{next(counter):09d}", row, mode="create")
                return (time.perf_counter() - start) / n

            def lg(saver: Any) -> Callable[[], Awaitable[float]]:
                async def run() -> float:
                    per_put, _ = await put_chain(saver, uuid.uuid4().hex[:8], 1 << 10, n)
                    return per_put

                return run

            def af(store: Any) -> Callable[[], Awaitable[float]]:
                async def run() -> float:
                    batch = [af_checkpoint("w", 1 << 10, i, next(clock)) for i in range(n)]
                    start = time.perf_counter()
                    for cp in batch:
                        await store.save(cp)
                    return (time.perf_counter() - start) / n

                return run

            async def floor() -> float:
                return await floors.sqlite(1024, n)

            systems: dict[str, Callable[[], Awaitable[float]]] = {
                "floor: SQLite commit of 1 KiB via a thread": floor,
                "SQLiteStorage.put (create, 1 KiB)": puts,
                "LangGraph: CheckpointkitSaver.aput": lg(lg_ours),
                "LangGraph: AsyncSqliteSaver.aput": lg(lg_theirs),
                "agent-framework: CheckpointkitCheckpointStorage.save": af(af_ours),
            }
            times: dict[str, list[float]] = {name: [] for name in systems}
            for i in range(args.rounds):
                order = list(systems) if i % 2 == 0 else list(reversed(systems))
                for name in order:
                    times[name].append(await systems[name]())
            # Not interleaved: its unsynced files leave the file system's journal work
            # that the next fsync of any process pays for (ext4 commits it then).
            unsynced = "agent-framework: FileCheckpointStorage.save (no fsync), after"
            times[unsynced] = [await af(af_theirs)() for _ in range(args.rounds)]
        # The saver's own work per put, as CPU time, on the memory storage (nothing waits).
        async with CheckpointkitSaver(MemoryStorage()) as on_memory:
            await put_chain(on_memory, "warm-up", 1 << 10, 200)
            chain = chain_of(on_memory, 1 << 10, 2000)
            start = time.process_time()
            await put_checkpoints(on_memory, "cpu", chain)
            saver_cpu = (time.process_time() - start) / 2000
            bare = MemoryStorage()
            start = time.process_time()
            for i in range(2000):
                await bare.put(f"k/{i}", row)
            put_cpu = (time.process_time() - start) / 2000
        med = {name: statistics.median(v) for name, v in times.items()}
        floor_t = next(iter(med.values()))
        print(
            f"one 1 KiB durable write at a time, medians of {args.rounds} interleaved rounds of {n}"
        )
        for name, t in med.items():
            print(f"{name:<56}{t * 1e6:8.0f} µs{t / floor_t:8.2f}x floor")
        print(
            f"CPU per LangGraph put of 1 KiB on the memory storage (the saver's own work; the "
            f"checkpoints are made before): {saver_cpu * 1e6:.1f} µs; per "
            f"bare memory put: {put_cpu * 1e6:.1f} µs"
        )
        with open("/proc/loadavg") as f:
            print(f"load average after: {' '.join(f.read().split()[:3])}")
    finally:
        floors.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

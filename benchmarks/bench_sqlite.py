"""Embedded durable storage side by side, in one run: checkpointkit on ``sqlite://`` and on the
file adapter against LangGraph's ``AsyncSqliteSaver`` (the targets of issue 11).

Run: ``.venv/bin/python benchmarks/bench_sqlite.py [--runs 5] [--steps 1000] [--dir PATH]
[--out FILE] [--only WORKLOAD ...]``

Every system runs at full durability: checkpointkit's SQLite adapter with WAL and
``synchronous=FULL`` (one log sync per group commit), its file adapter with file and
directory ``fsync``, and LangGraph's ``AsyncSqliteSaver`` (WAL, SQLite's default
``synchronous=FULL``: one log sync per commit). Runs are interleaved (run 1 of every
system, then run 2...) and each figure is the median of ``--runs`` runs.

Workloads:

- ``sequential``: a workflow of ``--steps`` sequential no-op steps, per step; LangGraph's
  functional API (``@entrypoint``/``@task``) with its default durability. Bytes reaching
  the disk per step: the ``write_bytes`` of ``/proc/self/io`` (pages this process sent
  to the block layer, data and WAL and checkpoint copies alike; the file system's own
  journal is not counted) from before the run to after the storage is closed.
- ``fanout``: one workflow of ``--steps`` parallel no-op steps (``asyncio.gather``), per step.
- ``list_runs``: ``CheckpointStore.list_runs(limit=10)`` with 100, 1,000 and 10,000 runs.
- ``prune``: ``CheckpointStore.prune(run, keep_last=0)`` of a run of 10,000 checkpoints,
  and ``delete_many`` of the same 10,000 keys (one transaction on SQLite, one directory
  flush on file).

The scratch directory is made under ``--dir`` (default: the system's temporary directory)
and removed at the end; ``--out`` writes the figures as JSON there (default: nowhere).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench_runner import load, write_bytes  # the same measures, side by side
from checkpointkit import CheckpointStore, Workflow, step
from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.storage import StorageBase
from floors import Floors


@step(name="noop")
async def noop(i: int) -> int:
    return i


def sequential(n: int) -> Callable[[Any], Awaitable[int]]:
    async def main(_: Any) -> int:
        for i in range(n):
            await noop(i)
        return n

    return main


def fanout(n: int) -> Callable[[Any], Awaitable[int]]:
    async def main(_: Any) -> int:
        return len(await asyncio.gather(*(noop(i) for i in range(n))))

    return main


def open_ckk(kind: str, where: str, *, fsync: bool = True) -> StorageBase:
    if kind == "sqlite":
        return SQLiteStorage(f"{where}.db", fsync=fsync)
    return FileStorage(where, fsync=fsync)


async def ckk_workflow(kind: str, where: str, shape: str, n: int) -> tuple[float, int]:
    """Seconds for one run of the workflow, and bytes to the disk (including the close)."""
    fn = sequential(n) if shape == "sequential" else fanout(n)
    before = write_bytes()
    storage = open_ckk(kind, where)
    try:
        wf = Workflow(fn, storage=storage)
        t0 = time.perf_counter()
        result = await wf.run(None, run_id="bench")
        took = time.perf_counter() - t0
        assert result.output == n, result
    finally:
        await storage.aclose()
    return took, write_bytes() - before


async def langgraph_workflow(where: str, shape: str, n: int) -> tuple[float, int]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.func import entrypoint, task

    @task
    async def lg_noop(i: int) -> int:
        return i

    before = write_bytes()
    async with AsyncSqliteSaver.from_conn_string(f"{where}.db") as saver:
        await saver.setup()

        @entrypoint(checkpointer=saver)
        async def wf(count: int) -> int:
            if shape == "sequential":
                for i in range(count):
                    await lg_noop(i)
                return count
            return len(await asyncio.gather(*(lg_noop(i) for i in range(count))))

        t0 = time.perf_counter()
        out = await wf.ainvoke(n, {"configurable": {"thread_id": "bench"}})
        took = time.perf_counter() - t0
        assert out == n, out
    return took, write_bytes() - before


STEP_RECORD = 120
"""Bytes of a no-op step's record, about: the size of the floor's commit."""


async def bench_steps(base: str, runs: int, n: int, shape: str, results: dict[str, Any]) -> None:
    systems = ["ckk sqlite", "ckk file", "langgraph sqlite"]
    times: dict[str, list[float]] = {s: [] for s in systems}
    sizes: dict[str, list[int]] = {s: [] for s in systems}
    # The floor: one commit of a step record's size (about 120 B) on each backend, via a
    # worker thread, timed between the runs. A step below it shares commits (group commit,
    # or fsyncs running at once in the file adapter's threads).
    floors = Floors(base)
    floor: dict[str, list[float]] = {"sqlite": [], "file": []}
    try:
        for run in range(runs):
            for system in systems:
                where = f"{base}/{shape}-{system.replace(' ', '-')}-{run}"
                if system == "langgraph sqlite":
                    took, written = await langgraph_workflow(where, shape, n)
                else:
                    took, written = await ckk_workflow(system.split()[1], where, shape, n)
                times[system].append(took / n)
                sizes[system].append(written // n)
            floor["sqlite"].append(await floors.sqlite(STEP_RECORD, 100))
            floor["file"].append(await floors.file(STEP_RECORD, 100))
    finally:
        floors.close()
    med = {s: statistics.median(v) for s, v in times.items()}
    byt = {s: statistics.median(v) for s, v in sizes.items()}
    flo = {k: statistics.median(v) for k, v in floor.items()}
    print(f"\n{shape}: {n:,} no-op steps, per step (medians of {runs} interleaved runs; {load()})")
    print(
        f"{'system':<20}{'per step':>12}{'bytes/step':>12}{'vs ckk sqlite':>16}"
        f"{'floor':>12}{'vs floor':>10}"
    )
    for s in systems:
        ratio = med[s] / med["ckk sqlite"]
        f = flo["file" if s == "ckk file" else "sqlite"]
        print(
            f"{s:<20}{med[s] * 1e6:>9.0f} µs{byt[s]:>10.0f} B{ratio:>15.2f}x"
            f"{f * 1e6:>9.0f} µs{med[s] / f:>9.2f}x"
        )
    print(
        f"floor: one commit of {STEP_RECORD} B on the same backend (SQLite row with its log "
        "sync; file written, synced, renamed, directory synced) from the event loop via a "
        "worker thread"
    )
    results[shape] = {"steps": n, "per_step_us": {s: v * 1e6 for s, v in med.items()}}
    results[shape]["bytes_per_step"] = byt
    results[shape]["floor_us"] = {k: v * 1e6 for k, v in flo.items()}


async def fill_runs(storage: StorageBase, count: int) -> None:
    store = CheckpointStore(storage)
    for start in range(0, count, 500):
        await asyncio.gather(
            *(store.create_run(f"run-{i:06d}", None) for i in range(start, min(count, start + 500)))
        )


async def timed_calls(m: int, fn: Callable[[], Awaitable[object]]) -> float:
    samples = []
    for _ in range(m):
        t0 = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


async def bench_list_runs(base: str, runs: int, results: dict[str, Any]) -> None:
    counts = (100, 1000, 10_000)
    figures: dict[str, dict[int, float]] = {}
    for kind in ("sqlite", "file"):
        figures[kind] = {}
        for count in counts:
            where = f"{base}/runs-{kind}-{count}"
            async with open_ckk(kind, where, fsync=False) as filler:
                await fill_runs(filler, count)
            # Let a freshly written directory age past the racy window of the file
            # adapter's listing cache (50 ms), as an index that is not being written is.
            await asyncio.sleep(0.1)
            async with open_ckk(kind, where) as storage:
                store = CheckpointStore(storage)
                first = await store.list_runs(limit=10)
                assert first == [f"run-{i:06d}" for i in range(10)], first
                samples = [
                    await timed_calls(200, lambda s=store: s.list_runs(limit=10))
                    for _ in range(runs)
                ]
                figures[kind][count] = statistics.median(samples)
    print(f"\nlist_runs(limit=10), median per call ({runs} runs of 200 calls; {load()})")
    print(f"{'storage':<10}" + "".join(f"{c:>12,}" for c in counts) + f"{'10,000/100':>13}")
    for kind, f in figures.items():
        row = "".join(f"{f[c] * 1e6:>9.0f} µs" for c in counts)
        print(f"{kind:<10}{row}{f[10_000] / f[100]:>12.2f}x")
    results["list_runs_limit_10_us"] = {
        k: {str(c): t * 1e6 for c, t in f.items()} for k, f in figures.items()
    }


async def fill_checkpoints(storage: StorageBase, run: str, count: int) -> list[str]:
    store = CheckpointStore(storage)
    keys = [f"{store.run_prefix(run)}c/{(2**63 - i):016x}" for i in range(count)]
    for start in range(0, count, 1000):
        await asyncio.gather(*(storage.put(k, b"x" * 200) for k in keys[start : start + 1000]))
    return keys


async def bench_prune(base: str, runs: int, results: dict[str, Any]) -> None:
    count = 10_000
    figures: dict[str, dict[str, list[float]]] = {
        k: {"prune": [], "delete_many": []} for k in ("sqlite", "file")
    }
    for run in range(runs):
        for kind in ("sqlite", "file"):
            for how in ("prune", "delete_many"):
                where = f"{base}/prune-{kind}-{how}-{run}"
                async with open_ckk(kind, where, fsync=False) as filler:
                    keys = await fill_checkpoints(filler, "r", count)
                async with open_ckk(kind, where) as storage:
                    t0 = time.perf_counter()
                    if how == "prune":
                        gone = await CheckpointStore(storage).prune("r", keep_last=0)
                    else:
                        gone = await storage.delete_many(keys)
                    figures[kind][how].append(time.perf_counter() - t0)
                    assert gone == count, gone
                    assert [k async for k in storage.list("runs/")] == []
    print(f"\nprune of {count:,} checkpoints, with fsync ({runs} runs; {load()})")
    print(f"{'storage':<10}{'store.prune':>14}{'delete_many':>14}")
    for kind, f in figures.items():
        p, d = statistics.median(f["prune"]), statistics.median(f["delete_many"])
        print(f"{kind:<10}{p:>12.3f} s{d:>12.3f} s")
    results["prune_10000_s"] = {
        k: {h: statistics.median(v) for h, v in f.items()} for k, f in figures.items()
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--dir", default=None, help="where to make the scratch directory")
    parser.add_argument("--out", default=None, help="write the figures as JSON to this file")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=["sequential", "fanout", "list_runs", "prune"],
        default=["sequential", "fanout", "list_runs", "prune"],
    )
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="bench-sqlite-", dir=args.dir)
    results: dict[str, Any] = {"python": sys.version.split()[0], "load_before": load()}
    print(f"scratch directory {base}; {load()}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for shape in ("sequential", "fanout"):
                if shape in args.only:
                    await bench_steps(base, args.runs, args.steps, shape, results)
            if "list_runs" in args.only:
                await bench_list_runs(base, args.runs, results)
            if "prune" in args.only:
                await bench_prune(base, args.runs, results)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results["load_after"] = load()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")  # noqa: ASYNC240
        print(f"written {args.out}")
    print(f"\n{load()}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    asyncio.run(main())

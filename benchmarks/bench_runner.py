"""Runner and store benchmarks, side by side with the floor and the peers, in one run.

    .venv/bin/python benchmarks/bench_runner.py            # full run (about a minute)
    .venv/bin/python benchmarks/bench_runner.py --quick    # smaller counts

Measures (medians of repeated runs):
- per-step cost of N sequential no-op steps on the memory storage (N = 100, 1,000),
  against a bare ``await`` loop (the floor) and, when installed, LangGraph's
  functional API with InMemorySaver and agent-framework's functional workflow
  with InMemoryCheckpointStorage;
- per-step cost on the file storage with fsync, against one raw FileStorage put
  of the same record;
- bytes written per step for 100 and 1,000 steps (linear growth);
- store overhead over a raw put+get of the same 1 KiB on the memory adapter;
- ``latest(run)`` on the file store with 10, 1,000 and 10,000 checkpoints.

Results are printed as a table and written to benchmarks/results/runner.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from checkpointkit import CheckpointStore, Workflow, step
from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.memory import MemoryStorage
from rich.console import Console
from rich.table import Table

console = Console(width=150)
RESULTS = Path(__file__).parent / "results"


def median_time(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    async def once() -> float:
        t0 = time.perf_counter()
        await fn()
        return time.perf_counter() - t0

    times = [asyncio.run(once()) for _ in range(repeat)]
    return statistics.median(times)


@step(name="noop")
async def noop(i: int) -> int:
    return i


def chain(n: int) -> Callable[[Any], Awaitable[int]]:
    async def main(_: Any) -> int:
        for i in range(n):
            await noop(i)
        return n

    return main


async def bare(n: int) -> None:
    async def f(i: int) -> int:
        return i

    for i in range(n):
        await f(i)


def per_step_memory(n: int, repeat: int) -> float:
    async def go() -> None:
        async with MemoryStorage() as storage:
            await Workflow(chain(n), storage=storage).run()

    return median_time(go, repeat) / n


def per_step_file(n: int, repeat: int) -> tuple[float, int]:
    sizes: list[int] = []

    async def go() -> None:
        with tempfile.TemporaryDirectory(dir=".") as root:
            async with FileStorage(root) as storage:
                await Workflow(chain(n), storage=storage).run()
            files = [p for p in Path(root).rglob("*") if p.is_file()]  # noqa: ASYNC240
            sizes.append(sum(p.stat().st_size for p in files))

    return median_time(go, repeat) / n, sizes[-1]


def raw_file_put(count: int) -> float:
    record = CheckpointStore(MemoryStorage()).encode_step(
        __import__("checkpointkit").store.StepRecord("noop@0", 1, fingerprint="x", seq=1),
        run_id="r",
    )

    async def go() -> None:
        with tempfile.TemporaryDirectory(dir=".") as root:
            async with FileStorage(root) as storage:
                for i in range(count):
                    await storage.put(f"runs/r/s/noop@{i}", record, mode="create")

    return median_time(go, 3) / count


def per_step_langgraph(n: int, repeat: int) -> float | None:
    try:
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.func import entrypoint, task
    except ImportError:
        return None

    @task
    async def lg_noop(i: int) -> int:
        return i

    async def go() -> None:
        @entrypoint(checkpointer=InMemorySaver())
        async def wf(count: int) -> int:
            for i in range(count):
                await lg_noop(i)
            return count

        await wf.ainvoke(n, {"configurable": {"thread_id": "t"}})

    return median_time(go, repeat) / n


def per_step_agent_framework(n: int, repeat: int) -> float | None:
    try:
        from agent_framework import InMemoryCheckpointStorage, workflow
        from agent_framework import step as af_step
    except ImportError:
        return None

    @af_step
    async def af_noop(i: int) -> int:
        return i

    @workflow
    async def wf(count: int) -> int:
        for i in range(count):
            await af_noop(i)
        return count

    async def go() -> None:
        await wf.build(checkpoint_storage=InMemoryCheckpointStorage()).run(n)

    try:
        return median_time(go, repeat) / n
    except Exception as exc:  # an experimental API: report, do not crash the run
        console.print(f"agent-framework run failed: {exc!r}")
        return None


def store_overhead(count: int) -> tuple[float, float]:
    payload = os.urandom(1024)
    value = {"blob": payload}

    async def raw() -> None:
        async with MemoryStorage() as storage:
            for i in range(count):
                await storage.put(f"k{i}", payload)
                await storage.get(f"k{i}")

    async def via_store() -> None:
        async with MemoryStorage() as storage:
            store = CheckpointStore(storage)
            for i in range(count):
                from checkpointkit.store import StepRecord

                data = store.encode_step(StepRecord(f"s@{i}", value, seq=i), run_id="r")
                await store.save_step("r", f"s@{i}", data)
                key = store.step_key("r", f"s@{i}")
                got, _ = await storage.get(key)
                store.decode_step(got, key=key)

    return median_time(raw, 5) / count, median_time(via_store, 5) / count


def big_state() -> dict[str, Any]:
    """About 1 MiB of encoded records: strings, ints, floats, lists, a datetime each."""
    import datetime
    import random

    rnd = random.Random(1)
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return {
        "records": [
            {
                "id": i,
                "name": f"user-{i}",
                "email": f"user{i}@example.com",
                "score": rnd.random(),
                "tags": ["alpha", "beta", "gamma"][: i % 3 + 1],
                "nested": {"k": [i, i + 1, i + 2], "note": "lorem ipsum dolor sit amet " * 3},
                "t": when,
            }
            for i in range(4500)
        ]
    }


def save_load_big(repeat: int = 9) -> tuple[int, float, float, float]:
    """Save and latest() of a ~1 MiB state on the file store with fsync; codec MB/s."""
    state = big_state()
    store_codec = CheckpointStore(MemoryStorage()).codec
    size = len(store_codec.encode_payload(state))
    saves: list[float] = []
    loads: list[float] = []

    async def go() -> None:
        with tempfile.TemporaryDirectory(dir=".") as root:
            async with FileStorage(root) as storage:
                store = CheckpointStore(storage)
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    await store.save_checkpoint("r", status="paused", state=state)
                    saves.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    await store.latest("r")
                    loads.append(time.perf_counter() - t0)

    asyncio.run(go())
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        store_codec.decode(store_codec.encode(state))
        rounds.append(time.perf_counter() - t0)
    return size, statistics.median(saves), statistics.median(loads), statistics.median(rounds)


def latest_times(counts: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for n in counts:
        with tempfile.TemporaryDirectory(dir=".") as root:

            async def fill(n: int = n, root: str = root) -> None:
                async with FileStorage(root, fsync=False) as storage:
                    store = CheckpointStore(storage)
                    lease = await store.acquire("r")
                    for i in range(n):
                        _, lease = await store.save_checkpoint(  # type: ignore[assignment]
                            "r", status="paused", state={"i": i}, lease=lease
                        )
                    await store.release(lease)  # type: ignore[arg-type]

            asyncio.run(fill())

            async def measure(root: str = root) -> float:
                async with FileStorage(root) as storage:
                    store = CheckpointStore(storage)
                    await store.latest("r")  # warm
                    samples = []
                    for _ in range(200):
                        t0 = time.perf_counter()
                        await store.latest("r")
                        samples.append(time.perf_counter() - t0)
                    return statistics.median(samples)

            out[n] = asyncio.run(measure())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    repeat = 3 if args.quick else 5
    latest_counts = [10, 1000] if args.quick else [10, 1000, 10000]
    us = 1e6
    results: dict[str, Any] = {"python": sys.version.split()[0]}
    table = Table(title="runner and store (per step, medians)")
    for col in ("workload", "checkpointkit", "reference", "ratio", "target"):
        table.add_column(col)

    floor = median_time(lambda: bare(1000), repeat) / 1000
    for n in (100, 1000):
        ck = per_step_memory(n, repeat)
        lg = per_step_langgraph(n, repeat)
        af = per_step_agent_framework(n, repeat)
        results[f"memory_per_step_{n}_us"] = ck * us
        results[f"langgraph_per_step_{n}_us"] = lg * us if lg else None
        results[f"agent_framework_per_step_{n}_us"] = af * us if af else None
        table.add_row(
            f"{n} no-op steps, memory", f"{ck * us:.1f} µs", f"bare await {floor * us:.2f} µs",
            f"{ck / floor:.0f}x floor", "≤ 20 µs",
        )
        if lg:
            table.add_row(f"  vs LangGraph InMemorySaver ({n})", f"{ck * us:.1f} µs",
                          f"{lg * us:.1f} µs", f"{lg / ck:.1f}x faster", "")
        if af:
            table.add_row(f"  vs agent-framework in-memory ({n})", f"{ck * us:.1f} µs",
                          f"{af * us:.1f} µs", f"{af / ck:.1f}x faster", "")

    raw = raw_file_put(200)
    results["raw_file_put_us"] = raw * us
    for n in (100, 1000):
        ck, size = per_step_file(n, 3)
        results[f"file_per_step_{n}_us"] = ck * us
        results[f"file_bytes_per_step_{n}"] = size / n
        table.add_row(f"{n} no-op steps, file + fsync", f"{ck * us:.0f} µs",
                      f"one raw put {raw * us:.0f} µs", f"{ck / raw:.2f}x put", "≤ 3x, ≤ 500 µs")
        table.add_row(f"  bytes written per step ({n})", f"{size / n:.0f} B", "", "", "linear")

    raw_us, store_us = store_overhead(2000)
    results["raw_put_get_1k_us"] = raw_us * us
    results["store_put_get_1k_us"] = store_us * us
    table.add_row("1 KiB put+get, memory", f"{store_us * us:.1f} µs (store)",
                  f"{raw_us * us:.1f} µs (raw)", f"+{(store_us - raw_us) * us:.1f} µs",
                  "overhead < 20 µs")

    size, save, load, codec_round = save_load_big()
    results["big_state_bytes"] = size
    results["big_state_save_ms"] = save * 1e3
    results["big_state_load_ms"] = load * 1e3
    results["big_state_codec_mb_s"] = size / codec_round / 1e6
    table.add_row(f"save {size / 2**20:.2f} MiB state, file + fsync", f"{save * 1e3:.1f} ms", "",
                  "", "≤ 10 ms")
    table.add_row("  latest() of it (get + decode)", f"{load * 1e3:.1f} ms", "", "", "≤ 5 ms")
    table.add_row("  encode + decode of it", f"{size / codec_round / 1e6:.0f} MB/s", "", "",
                  "≥ 200 MB/s")

    lat = latest_times(latest_counts)
    for n, t in lat.items():
        results[f"file_latest_{n}_ms"] = t * 1e3
        table.add_row(f"latest(run), file, {n} checkpoints", f"{t * 1e3:.3f} ms", "",
                      f"{t / lat[latest_counts[0]]:.2f}x of 10", "≤ 0.2 ms, flat")
    console.print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "runner.json").write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"written {RESULTS / 'runner.json'}")


if __name__ == "__main__":
    main()

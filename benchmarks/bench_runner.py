"""Runner and store benchmarks, side by side with the floor and the peers, in one run.

    .venv/bin/python benchmarks/bench_runner.py                  # full run (a few minutes)
    .venv/bin/python benchmarks/bench_runner.py --quick          # smaller counts
    .venv/bin/python benchmarks/bench_runner.py --out r.json     # also write the figures

Measures (medians of repeated runs):
- per-step cost of N sequential no-op steps on the memory storage (N = 100, 1,000,
  10,000), wall and CPU time (``time.process_time``), against a bare ``await`` loop
  (the floor) and, when installed, LangGraph's functional API with InMemorySaver and
  agent-framework's functional workflow with InMemoryCheckpointStorage (both at 100 and
  1,000);
- per-step cost on the SQLite and file storages with fsync (N = 100, 1,000, 10,000),
  only the run timed (the scratch directory is made and the storage opened before the
  clock starts), against one raw create-only put of the same step record, one at a time,
  and against the floor: one commit of the record's size on the same backend through a
  worker thread (``benchmarks/floors.py``);
- per step, the bytes stored (the values' sizes) and the bytes reaching the disk
  (``write_bytes`` of ``/proc/self/io``, from before the run to after the close);
- store overhead over a raw put+get of the same 1 KiB on the memory adapter;
- save (with a lease, as the runner saves) and ``latest()`` of a 0.84 MiB state on
  the file store with fsync; its encode + decode through the envelope and through
  msgspec alone, measured here;
- ``latest(run)`` on the file store with 10, 1,000 and 10,000 checkpoints.

Results are printed as a table; ``--out FILE`` also writes them as JSON. Scratch
directories go under ``--dir`` (default: the system's temporary directory).
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
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.storage import StorageBase
from floors import file_floor, sqlite_floor
from rich.console import Console
from rich.table import Table

console = Console(width=150)
SCRATCH: str | None = None  # --dir


def write_bytes() -> int:
    """Bytes this process has caused to be sent to the block layer so far."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def load() -> str:
    try:
        return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "load average unknown"


def durable(kind: str, root: str, *, fsync: bool = True) -> StorageBase:
    if kind == "sqlite":
        return SQLiteStorage(f"{root}/ck.db", fsync=fsync)
    return FileStorage(root, fsync=fsync)


async def stored_bytes(storage: StorageBase) -> int:
    return sum([len((await storage.get(key)).data) async for key in storage.list()])


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


def per_step_memory(n: int, repeat: int) -> tuple[float, float]:
    """Per step on the memory storage: wall seconds and CPU seconds (medians)."""

    walls: list[float] = []
    cpus: list[float] = []

    async def go() -> None:  # timed inside the event loop: not its creation and closing
        c0, t0 = time.process_time(), time.perf_counter()
        async with MemoryStorage() as storage:
            await Workflow(chain(n), storage=storage).run()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)

    for _ in range(repeat):
        asyncio.run(go())
    return statistics.median(walls) / n, statistics.median(cpus) / n


def per_step_durable(kind: str, n: int, repeat: int) -> tuple[float, float, float]:
    """Per step: seconds, bytes stored, bytes to the disk; only the run is timed."""
    times: list[float] = []
    disk: list[int] = []
    stored: list[int] = []

    async def once(root: str) -> None:
        before = write_bytes()
        storage = durable(kind, root)
        try:
            wf = Workflow(chain(n), storage=storage)
            t0 = time.perf_counter()
            await wf.run(None, run_id="bench")
            times.append(time.perf_counter() - t0)
            stored.append(await stored_bytes(storage))
        finally:
            await storage.aclose()
        disk.append(write_bytes() - before)

    for _ in range(repeat):
        with tempfile.TemporaryDirectory(dir=SCRATCH) as root:
            asyncio.run(once(root))
    return (
        statistics.median(times) / n,
        statistics.median(stored) / n,
        statistics.median(disk) / n,
    )


def raw_put(kind: str, count: int) -> tuple[float, int]:
    """One create-only put of the runner's step record at a time: seconds per put, its size."""
    from checkpointkit.store import StepRecord

    record = CheckpointStore(MemoryStorage()).encode_step(
        StepRecord("noop@0", 1, fingerprint="x", seq=1), run_id="r"
    )
    times: list[float] = []

    async def once(root: str) -> None:
        async with durable(kind, root) as storage:
            await storage.put("runs/r/s/warm", record)
            t0 = time.perf_counter()
            for i in range(count):
                await storage.put(f"runs/r/s/noop@{i}", record, mode="create")
            times.append(time.perf_counter() - t0)

    for _ in range(3):
        with tempfile.TemporaryDirectory(dir=SCRATCH) as root:
            asyncio.run(once(root))
    return statistics.median(times) / count, len(record)


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


def save_load_big(repeat: int = 9) -> tuple[int, float, float, float, float]:
    """Save (with a lease) and latest() of a ~1 MiB state, file store with fsync; codec times."""
    import msgspec

    state = big_state()
    store_codec = CheckpointStore(MemoryStorage()).codec
    size = len(store_codec.encode_payload(state))
    saves: list[float] = []
    loads: list[float] = []

    async def go() -> None:
        with tempfile.TemporaryDirectory(dir=SCRATCH) as root:
            async with FileStorage(root) as storage:
                store = CheckpointStore(storage)
                lease: Any = await store.acquire("r")
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    _, lease = await store.save_checkpoint(
                        "r", status="paused", state=state, lease=lease
                    )
                    saves.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    await store.latest("r")
                    loads.append(time.perf_counter() - t0)
                await store.release(lease)

    asyncio.run(go())
    rounds = []
    plain = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        store_codec.decode(store_codec.encode(state))
        rounds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        msgspec.msgpack.decode(msgspec.msgpack.encode(state))
        plain.append(time.perf_counter() - t0)
    return (
        size,
        statistics.median(saves),
        statistics.median(loads),
        statistics.median(rounds),
        statistics.median(plain),
    )


def latest_times(counts: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for n in counts:
        with tempfile.TemporaryDirectory(dir=SCRATCH) as root:

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
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    parser.add_argument("--dir", default=None, help="where scratch directories go")
    args = parser.parse_args()
    global SCRATCH
    SCRATCH = args.dir
    repeat = 3 if args.quick else 5
    latest_counts = [10, 1000] if args.quick else [10, 1000, 10000]
    us = 1e6
    results: dict[str, Any] = {"python": sys.version.split()[0], "load_before": load()}
    console.print(load())
    table = Table(title="runner and store (per step, medians)")
    for col in ("workload", "checkpointkit", "reference", "ratio", "target"):
        table.add_column(col)

    floor = median_time(lambda: bare(1000), repeat) / 1000
    for n in (100, 1000) if args.quick else (100, 1000, 10_000):
        ck, ck_cpu = per_step_memory(n, repeat)
        lg = per_step_langgraph(n, repeat) if n <= 1000 else None
        af = per_step_agent_framework(n, repeat) if n <= 1000 else None
        results[f"memory_per_step_{n}_us"] = ck * us
        results[f"memory_cpu_per_step_{n}_us"] = ck_cpu * us
        results[f"langgraph_per_step_{n}_us"] = lg * us if lg else None
        results[f"agent_framework_per_step_{n}_us"] = af * us if af else None
        table.add_row(
            f"{n} no-op steps, memory",
            f"{ck * us:.1f} µs ({ck_cpu * us:.1f} µs CPU)",
            f"bare await {floor * us:.2f} µs",
            f"{ck / floor:.0f}x floor",
            "≤ 20 µs CPU",
        )
        if lg:
            table.add_row(
                f"  vs LangGraph InMemorySaver ({n})",
                f"{ck * us:.1f} µs",
                f"{lg * us:.1f} µs",
                f"{lg / ck:.1f}x faster",
                "",
            )
        if af:
            table.add_row(
                f"  vs agent-framework in-memory ({n})",
                f"{ck * us:.1f} µs",
                f"{af * us:.1f} µs",
                f"{af / ck:.1f}x faster",
                "",
            )

    for kind in ("sqlite", "file"):
        raw, record = raw_put(kind, 200)
        results[f"{kind}_raw_put_us"] = raw * us
        with tempfile.TemporaryDirectory(dir=SCRATCH) as root:
            commit = sqlite_floor if kind == "sqlite" else file_floor
            floor_put = commit(root, record, n=200, runs=3).via_thread
        results[f"{kind}_floor_us"] = floor_put * us
        table.add_row(
            f"  floor: one {kind} commit of {record} B via a thread",
            f"{floor_put * us:.0f} µs",
            f"raw put {raw * us:.0f} µs",
            f"{raw / floor_put:.2f}x floor",
            "",
        )
        for n in (100, 1000) if args.quick else (100, 1000, 10_000):
            ck, stored, disk = per_step_durable(kind, n, 3)
            results[f"{kind}_per_step_{n}_us"] = ck * us
            results[f"{kind}_stored_bytes_per_step_{n}"] = stored
            results[f"{kind}_disk_bytes_per_step_{n}"] = disk
            table.add_row(
                f"{n} no-op steps, {kind} + fsync",
                f"{ck * us:.0f} µs",
                f"one raw {record} B put at a time {raw * us:.0f} µs",
                f"{ck / raw:.2f}x put, {ck / floor_put:.2f}x floor",
                "≤ 500 µs, flat",
            )
            table.add_row(
                f"  bytes per step ({n}): stored / to the disk",
                f"{stored:.0f} B / {disk:.0f} B",
                "",
                "",
                "linear; ≤ 2 KiB to disk",
            )

    raw_us, store_us = store_overhead(2000)
    results["raw_put_get_1k_us"] = raw_us * us
    results["store_put_get_1k_us"] = store_us * us
    table.add_row(
        "1 KiB put+get, memory",
        f"{store_us * us:.1f} µs (store)",
        f"{raw_us * us:.1f} µs (raw)",
        f"+{(store_us - raw_us) * us:.1f} µs",
        "overhead < 20 µs",
    )

    size, save, load_t, codec_round, plain_round = save_load_big()
    results["big_state_bytes"] = size
    results["big_state_save_ms"] = save * 1e3
    results["big_state_load_ms"] = load_t * 1e3
    results["big_state_codec_mb_s"] = size / codec_round / 1e6
    results["big_state_msgspec_mb_s"] = size / plain_round / 1e6
    with tempfile.TemporaryDirectory(dir=SCRATCH) as root:
        big_floor = file_floor(root, size, n=20, runs=3).via_thread
    results["big_state_floor_ms"] = big_floor * 1e3
    table.add_row(
        f"save {size / 2**20:.2f} MiB state, file + fsync, with a lease",
        f"{save * 1e3:.1f} ms",
        f"floor: one file write of it {big_floor * 1e3:.1f} ms",
        f"{save / big_floor:.2f}x floor",
        "≤ 10 ms",
    )
    table.add_row("  latest() of it (get + decode)", f"{load_t * 1e3:.1f} ms", "", "", "≤ 5 ms")
    table.add_row(
        "  encode + decode of it",
        f"{size / codec_round / 1e6:.0f} MB/s",
        f"msgspec alone {size / plain_round / 1e6:.0f} MB/s",
        "",
        "≥ 200 MB/s",
    )

    lat = latest_times(latest_counts)
    for n, t in lat.items():
        results[f"file_latest_{n}_ms"] = t * 1e3
        table.add_row(
            f"latest(run), file, {n} checkpoints",
            f"{t * 1e3:.3f} ms",
            "",
            f"{t / lat[latest_counts[0]]:.2f}x of 10",
            "≤ 0.2 ms, flat",
        )
    console.print(table)
    results["load_after"] = load()
    console.print(load())
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        console.print(f"written {args.out}")


if __name__ == "__main__":
    main()

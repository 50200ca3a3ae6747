"""The plots of docs/performance.md: measured here, drawn with matplotlib, in one run.

    .venv/bin/python benchmarks/plots.py             # measure, then draw (about 3 minutes)
    .venv/bin/python benchmarks/plots.py --quick     # smaller counts (about 1 minute)
    .venv/bin/python benchmarks/plots.py --redraw    # draw again from docs/images/bench-plots.json

Three plots, each of medians, all measured in the same run on this machine:

- **per step against steps**: seconds per sequential no-op step of a workflow of N steps on
  in-memory storage, for checkpointkit (`Workflow` on `MemoryStorage`), LangGraph's functional
  API (`InMemorySaver`) and agent-framework's functional workflow
  (`InMemoryCheckpointStorage`). A cost per step that grows with N is a total that grows
  with N squared (a checkpoint that holds every earlier step);
- **latest against checkpoints**: `CheckpointStore.latest(run)` with N checkpoints stored
  for the run, on memory, `sqlite://` and `file://`, beside LangGraph's `aget_tuple` of the
  thread's latest checkpoint with `InMemorySaver` and `AsyncSqliteSaver`;
- **put against value size**: one durable `put` of a new key on `sqlite://` and `file://`
  (fsync on), beside the floor: a new file of the same size written and fsynced from a
  worker thread in the same folder.

The figures go to ``docs/images/bench-plots.json`` (with the command, the date and the load
average) and the plots to ``docs/images/bench-*.svg``; the SVG files are drawn from the JSON
alone, byte for byte the same each time (``tests/packaging/test_bench_plots.py`` draws them
again and compares).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
DATA = IMAGES / "bench-plots.json"
PLOTS = ("bench-per-step.svg", "bench-latest.svg", "bench-put-size.svg")
KiB, MiB = 1024, 1024 * 1024


# -- measuring ------------------------------------------------------------------------------
def _median(samples: list[float]) -> float:
    return statistics.median(samples)


def per_step(quick: bool) -> dict[str, dict[str, float]]:
    """Seconds per step by N, per system (name -> {str(N): seconds})."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_runner import per_step_agent_framework, per_step_langgraph, per_step_memory

    ours = [10, 30, 100, 300, 1000, 3000] + ([] if quick else [10000])
    peers = [10, 30, 100, 300] + ([] if quick else [1000])
    repeat = 3 if quick else 5
    out: dict[str, dict[str, float]] = {"checkpointkit (memory)": {}}
    for n in ours:
        out["checkpointkit (memory)"][str(n)] = per_step_memory(n, repeat)
    for name, fn in (
        ("LangGraph (InMemorySaver)", per_step_langgraph),
        ("agent-framework (InMemoryCheckpointStorage)", per_step_agent_framework),
    ):
        series: dict[str, float] = {}
        for n in peers:
            seconds = fn(n, repeat)
            if seconds is None:
                break
            series[str(n)] = seconds
        if series:
            out[name] = series
    return out


async def _latest_ours(url: str, n: int, samples: int) -> float:
    from checkpointkit import CheckpointStore
    from checkpointkit.registry import open_storage

    async with open_storage(url) as storage:
        store = CheckpointStore(storage)
        lease: Any = await store.acquire("r")
        for i in range(n):
            _, lease = await store.save_checkpoint(
                "r", status="paused", state={"i": i}, lease=lease
            )
        await store.release(lease)
        await store.latest("r")
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            await store.latest("r")
            times.append(time.perf_counter() - t0)
        return _median(times)


async def _latest_langgraph(saver: Any, n: int, samples: int) -> float:
    from langgraph.checkpoint.base import empty_checkpoint

    config: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for i in range(n):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"i": i}
        config = await saver.aput(config, checkpoint, {"source": "loop", "step": i}, {})
    latest = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    await saver.aget_tuple(latest)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        await saver.aget_tuple(latest)
        times.append(time.perf_counter() - t0)
    return _median(times)


def latest(quick: bool, scratch: str) -> dict[str, dict[str, float]]:
    """Seconds of one latest by the number of checkpoints, per system."""
    counts = [10, 100, 1000] + ([] if quick else [10000])
    samples = 50 if quick else 200
    out: dict[str, dict[str, float]] = {}
    for n in counts:
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            for name, url in (
                ("checkpointkit (memory)", "memory://"),
                ("checkpointkit (sqlite://)", f"sqlite:///{tmp}/ours.db?create=true&fsync=false"),
                ("checkpointkit (file://)", f"file://{tmp}/ours?fsync=false"),
            ):
                seconds = asyncio.run(_latest_ours(url, n, samples))
                out.setdefault(name, {})[str(n)] = seconds
            try:
                from langgraph.checkpoint.memory import InMemorySaver
                from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
            except ImportError:
                continue

            async def in_memory(n: int = n) -> float:
                return await _latest_langgraph(InMemorySaver(), n, samples)

            async def in_sqlite(n: int = n, tmp: str = tmp) -> float:
                async with AsyncSqliteSaver.from_conn_string(f"{tmp}/lg.db") as saver:
                    return await _latest_langgraph(saver, n, samples)

            out.setdefault("LangGraph (InMemorySaver)", {})[str(n)] = asyncio.run(in_memory())
            out.setdefault("LangGraph (AsyncSqliteSaver)", {})[str(n)] = asyncio.run(in_sqlite())
    return out


def _floor_write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.unlink(path)


async def _puts(url: str | None, folder: str, data: bytes, count: int) -> float:
    times = []
    if url is None:  # the floor
        await asyncio.to_thread(_floor_write, f"{folder}/floor-warm", data)
        for i in range(count):
            t0 = time.perf_counter()
            await asyncio.to_thread(_floor_write, f"{folder}/floor-{i}", data)
            times.append(time.perf_counter() - t0)
        return _median(times)
    from checkpointkit.registry import open_storage

    async with open_storage(url) as storage:
        await storage.put("warm", data)
        for i in range(count):
            t0 = time.perf_counter()
            await storage.put(f"k/{i}", data)
            times.append(time.perf_counter() - t0)
    return _median(times)


def put_by_size(quick: bool, scratch: str) -> dict[str, dict[str, float]]:
    """Seconds of one durable put by value size (bytes), per storage, and the floor."""
    sizes = [KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB] + (
        [] if quick else [16 * MiB]
    )
    out: dict[str, dict[str, float]] = {}
    for size in sizes:
        data = os.urandom(size)
        count = 5 if size >= 4 * MiB else 9 if quick else 21
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            for name, url in (
                ("floor: write + fsync of a new file", None),
                ("checkpointkit (sqlite://)", f"sqlite:///{tmp}/ours.db?create=true"),
                ("checkpointkit (file://)", f"file://{tmp}/ours"),
            ):
                out.setdefault(name, {})[str(size)] = asyncio.run(_puts(url, tmp, data, count))
    return out


# -- drawing --------------------------------------------------------------------------------
def draw(data: dict[str, Any], out_dir: Path) -> list[Path]:
    """Draw the three plots of ``data`` as SVG files in ``out_dir``; the same bytes each time."""
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams.update(
        {"svg.hashsalt": "checkpointkit", "svg.fonttype": "path", "font.size": 9}
    )
    made = f"{data['command']}  ({data['date']}, load average {data['load']})"
    specs = (
        (
            PLOTS[0],
            data["per_step"],
            "steps in the workflow",
            "time per step (µs)",
            "Per sequential step, on in-memory storage",
            1e6,
        ),
        (
            PLOTS[1],
            data["latest"],
            "checkpoints stored for the run",
            "latest (µs)",
            "Latest checkpoint of a run or thread",
            1e6,
        ),
        (
            PLOTS[2],
            data["put_by_size"],
            "value size (bytes)",
            "durable put (ms)",
            "One durable put of a new key, by value size",
            1e3,
        ),
    )
    paths = []
    for name, series, xlabel, ylabel, title, scale in specs:
        fig, ax = plt.subplots(figsize=(7.0, 4.2))
        for label, points in series.items():
            xs = [int(x) for x in points]
            ys = [points[x] * scale for x in points]
            style = "--" if label.startswith("floor") else "-"
            ax.plot(xs, ys, style, marker="o", markersize=3, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
        fig.text(0.01, 0.01, made, fontsize=6, color="#555555")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        path = out_dir / name
        fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    """Measure (unless ``--redraw``), write the JSON, draw the plots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--redraw", action="store_true", help="draw from the JSON only")
    parser.add_argument("--dir", default=None, help="where scratch directories go")
    args = parser.parse_args(argv)
    if args.redraw:
        data = json.loads(DATA.read_text())
    else:
        command = ".venv/bin/python benchmarks/plots.py" + (" --quick" if args.quick else "")
        measures: dict[str, Callable[[], dict[str, dict[str, float]]]] = {
            "per_step": lambda: per_step(args.quick),
            "latest": lambda: latest(args.quick, args.dir),
            "put_by_size": lambda: put_by_size(args.quick, args.dir),
        }
        data = {
            "command": command,
            "date": time.strftime("%Y-%m-%d"),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        }
        for key, measure in measures.items():
            t0 = time.perf_counter()
            data[key] = measure()
            print(f"{key}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        DATA.write_text(json.dumps(data, indent=1) + "\n")
    for path in draw(data, IMAGES):
        print(path.relative_to(IMAGES.parents[1]))


if __name__ == "__main__":
    main()

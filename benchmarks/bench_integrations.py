"""The integrations side by side with each library's own durable saver, in one run.

Run: ``.venv/bin/python benchmarks/bench_integrations.py [--runs 5] [--quick] [--dir PATH]``
(the scratch directory goes under ``--dir``, default the system's temporary directory)

Needs the peers, installed in the benchmark environment only (the ``test``
extra): ``langgraph-checkpoint-sqlite`` and ``agent-framework-core``.

LangGraph (state sizes 1 KiB, 64 KiB, 1 MiB: one channel whose value changes at
every checkpoint, plus a small counter channel):

- ``put``: ``aput`` of the next checkpoint of a thread, sequentially;
- ``latest``: ``aget_tuple`` without a checkpoint id, on a thread of 50 checkpoints;
- ``latest, N checkpoints``: the same (1 KiB state) on a thread of 10, 1,000 and
  5,000 checkpoints (checkpointkit only: filled without fsync, read with it);
- ``put, 1 KiB, 16 threads``: 16 threads each putting its next checkpoints,
  all at once (wall time per put: what a server with concurrent users sees);
- ``graph step``: a real ``StateGraph`` of 10 sequential nodes run with
  ``ainvoke`` (each step is ``put_writes`` plus ``put``), per step.

for ``CheckpointkitSaver`` on checkpointkit's SQLite storage (WAL,
``synchronous=FULL``, group commit) and file storage (fsync on, the default)
and, when a ``valkey-server`` can be started, on Redis, against LangGraph's
own ``AsyncSqliteSaver`` on a file in the same directory (WAL; its commit
syncs the log).

agent-framework (same state sizes):

- ``save`` and ``load`` of one checkpoint;
- ``save, 1 KiB, 16 workflows``: 16 workflows each saving its next
  checkpoints, all at once (wall time per save);
- ``get_latest`` with 10, 1,000 and 5,000 checkpoints of the workflow;

for ``CheckpointkitCheckpointStorage`` on checkpointkit's SQLite and file
storages (fsync on) against agent-framework's own ``FileCheckpointStorage`` (which does not
fsync) in the same directory.

Every saver and storage first writes ``WARM_UP`` checkpoints of 1 KiB, so that a SQLite
log has been copied into its database and started over at least once, as in a process
that has been running for a while (until then each commit makes the log file longer,
and such a sync costs about twice as much).

Every durable write is printed beside its floor (``benchmarks/floors.py``): the backend's
cheapest commit of the same size (a SQLite row with its log sync, WAL, ``synchronous=FULL``;
a file written, synced, renamed, its directory synced), made from the event loop through a
worker thread as the savers make theirs, timed between the savers' runs in the same process;
the ratio is the write's time over the floor's. The last lines give the 1 KiB SQLite floor
in the event loop's thread and through a worker thread (the thread hop is the difference).

Before each timed series of durable writes, ``os.sync()`` writes back what the unsynced
writers (``FileCheckpointStorage``, the ``nosync`` columns) left behind, outside the
timing: ext4 would otherwise charge it to the next ``fsync`` of whichever system runs next.

Figures are medians of ``--runs`` runs; the ratio column is the peer's time
divided by checkpointkit's (above 1 means checkpointkit is faster).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import math
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from checkpointkit.adapters.file import FileStorage
from checkpointkit.integrations.agent_framework import CheckpointkitCheckpointStorage
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from floors import Floors, sqlite_floor

T = TypeVar("T")

SIZES = {"1 KiB": 1 << 10, "64 KiB": 64 << 10, "1 MiB": 1 << 20}
WARM_UP = 600
"""Checkpoints of 1 KiB each saver writes before anything is timed."""
FLOORS = ("floor sqlite", "floor file")
"""The floors a durable write's row holds beside the savers' figures."""
CONCURRENT = 16
"""Threads (LangGraph) or workflows (agent-framework) written at once in the concurrent rows."""
GRAPH_RUNS = 20
"""Graphs of 10 nodes run one after the other per timed run of the graph-step row. Five graphs
(50 steps, about 30 ms on PostgreSQL) were too short a sample even on a quiet machine: in 16
runs of each saver on one server (2026-12-06, load average 0.2), the ratio of a run went from
0.60x to 2.14x; with 20 graphs, in 12 runs, from 1.47x to 1.71x."""
WORDS = [
    "".join(
        random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=random.Random(i).randint(2, 9))
    )
    for i in range(5000)
]


def state_of(size: int, seed: int) -> dict[str, Any]:
    """A chat-like state of about ``size`` bytes: messages of random words."""
    rng = random.Random(seed)
    messages: list[dict[str, str]] = []
    total = 0
    while total < size:
        text = " ".join(rng.choices(WORDS, k=min(60, max(4, (size - total) // 6))))
        messages.append({"role": rng.choice(["user", "assistant"]), "content": text})
        total += len(text) + 30
    return {"messages": messages}


async def timed(n: int, op: Callable[[int], Awaitable[object]]) -> float:
    start = time.perf_counter()
    for i in range(n):
        await op(i)
    return (time.perf_counter() - start) / n


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 0.01:
        return f"{seconds * 1e3:8.1f} ms"
    return f"{seconds * 1e6:8.0f} µs"


def median_interval(values: list[float]) -> tuple[float, float, float, float]:
    """The median of ``values`` and a distribution-free confidence interval for it:
    ``(low, median, high, confidence)``.

    The interval runs between the order statistics ``k`` and ``n + 1 - k`` (from 1), the
    widest pair whose chance of missing the true median is at most 5% under any
    distribution (the count of values below the median is binomial, n and one half). With
    5 values or fewer even the whole range falls short of 95%: the interval is then the
    whole range, and the confidence returned is its own, lower one.
    """
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median_interval needs at least one value")

    def below(k: int) -> float:  # P(at most k - 1 of n values fall below the median)
        return sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k + 1 <= n // 2 and 2 * below(k + 1) <= 0.05:
        k += 1
    return ordered[k - 1], statistics.median(ordered), ordered[n - k], 1 - 2 * below(k)


def ratio(peer: float | None, ours: float | None) -> str:
    if not peer or not ours:
        return ""
    return f"{peer / ours:6.2f}x"  # two decimals: 1.46x against a 1.5x target is not "1.5x"


# -- LangGraph ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def langgraph_savers(base: str, redis_url: str | None) -> AsyncIterator[dict[str, Any]]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    savers: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        savers["ckk file"] = await stack.enter_async_context(
            CheckpointkitSaver.from_url(f"file://{base}/lg-ckk")
        )
        savers["ckk sqlite"] = await stack.enter_async_context(
            CheckpointkitSaver.from_url(f"sqlite:///{base}/lg-ckk.db")
        )
        savers["ckk nosync"] = await stack.enter_async_context(
            CheckpointkitSaver.from_url(f"file://{base}/lg-ckk-nosync?fsync=false")
        )
        if redis_url is not None:
            savers["ckk redis"] = await stack.enter_async_context(
                CheckpointkitSaver.from_url(redis_url, storage_options={"prefix": "bench"})
            )
        sqlite = await stack.enter_async_context(
            AsyncSqliteSaver.from_conn_string(f"{base}/lg-sqlite.db")
        )
        await sqlite.setup()
        savers["sqlite"] = sqlite
        for saver in savers.values():
            await put_chain(saver, f"warm-up-{uuid.uuid4().hex[:6]}", 1 << 10, WARM_UP)
        yield savers


_CHAIN_STATES: dict[tuple[int, int], dict[str, Any]] = {}


def _chain_state(size: int, seed: int) -> dict[str, Any]:
    """`state_of`, made once per size and seed: the 16-thread row times its gather whole,
    and making 8 states per chain of 12 puts inside it added some 40 µs to each put
    (profiled) of both savers alike, shrinking their ratio."""
    state = _CHAIN_STATES.get((size, seed))
    if state is None:
        state = _CHAIN_STATES[(size, seed)] = state_of(size, seed)
    return state


Chain = list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]
"""The arguments of successive ``aput`` calls of one thread: checkpoint, metadata, new versions."""


def chain_of(saver: Any, size: int, n: int) -> Chain:
    """``n`` successive checkpoints of a thread whose state is ``size`` bytes, made before
    any clock starts (as the agent-framework rows make their checkpoints): what is timed is
    the saver's ``aput``, not the benchmark building its argument."""
    from langgraph.checkpoint.base import empty_checkpoint

    values = [_chain_state(size, seed) for seed in range(min(n, 8))]
    version: Any = None
    chain: Chain = []
    for i in range(n):
        version = saver.get_next_version(version, None)
        checkpoint: Any = empty_checkpoint()
        checkpoint["channel_values"] = {"state": values[i % len(values)], "step": i}
        checkpoint["channel_versions"] = {"state": version, "step": version}
        new_versions = {"state": version, "step": version}
        chain.append((checkpoint, {"source": "loop", "step": i}, new_versions))
    return chain


async def put_checkpoints(saver: Any, thread: str, chain: Chain) -> tuple[float, Any]:
    """Seconds per ``aput`` of the checkpoints of ``chain`` on one thread; the last config."""
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    start = time.perf_counter()
    for checkpoint, metadata, new_versions in chain:
        config = await saver.aput(config, checkpoint, metadata, new_versions)
    return (time.perf_counter() - start) / max(len(chain), 1), config


async def put_chain(saver: Any, thread: str, size: int, n: int) -> tuple[float, Any]:
    """Seconds per ``aput`` over ``n`` checkpoints of one thread (made before the clock
    starts, `chain_of`); the last config.

    The garbage is collected between making the chain and starting the clock: the ``n``
    checkpoints made at once (a real run makes one a step) would otherwise be traversed
    by the collections that the timed puts trigger, charged to whichever saver runs
    then (on ``postgres://``, about 20 µs of a 240 µs put, 2026-12-06)."""
    chain = chain_of(saver, size, n)
    gc.collect()
    return await put_checkpoints(saver, thread, chain)


async def latest_as_thread_grows(
    base: str, runs: int, savers: dict[str, Any]
) -> list[tuple[str, dict[str, float]]]:
    """``aget_tuple`` latest on one thread of 10, 1,000 and 5,000 checkpoints."""
    rows: list[tuple[str, dict[str, float]]] = []
    ours = {k: v for k, v in savers.items() if k in ("ckk file", "ckk redis")}
    fillers: dict[str, Any] = {
        "ckk file": CheckpointkitSaver(FileStorage(f"{base}/lg-ckk", fsync=False))
    }
    if "ckk redis" in ours:
        fillers["ckk redis"] = ours["ckk redis"]
    thread = f"grow-{uuid.uuid4().hex[:6]}"
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    parents = dict.fromkeys(ours, config)
    have = 0
    value = state_of(1 << 10, 0)
    from langgraph.checkpoint.base import empty_checkpoint

    for total in (10, 1000, 5000):
        while have < total:
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"state": value, "step": have}
            checkpoint["channel_versions"] = {"state": "1", "step": str(have + 1)}
            for name, filler in fillers.items():
                parents[name] = await filler.aput(
                    parents[name], checkpoint, {"step": have}, {"step": str(have + 1)}
                )
            have += 1
        m = max(20, min(200, 20_000 // total))
        figures = {
            name: statistics.median(
                [await timed(m, lambda _i, s=saver: s.aget_tuple(config)) for _ in range(runs)]
            )
            for name, saver in ours.items()
        }
        rows.append((f"latest, {total:,} checkpoints", figures))
    await fillers["ckk file"].aclose()
    await fillers["ckk file"].storage.aclose()
    return rows


def ten_step_graph() -> Any:
    """The benchmarks' graph: 10 nodes in a row, plain functions (`chain_graph`)."""
    return chain_graph(lambda s: {"n": s["n"] + 1}, 10)


def chain_graph(node: Callable[[Any], Any], steps: int) -> Any:
    """A ``StateGraph`` of ``steps`` nodes in a row, each ``node`` (a plain function or an
    ``async def`` one), on a state of ``n`` (each node adds one) and a ``payload``."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        n: int
        payload: str

    builder = StateGraph(S)
    names = [f"n{i}" for i in range(steps)]
    for name in names:
        builder.add_node(name, node)
    builder.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        builder.add_edge(a, b)
    builder.add_edge(names[-1], END)
    return builder


def in_turn(savers: dict[str, T], run: int) -> list[tuple[str, T]]:
    """The savers of run ``run`` in the order they run: as given in even runs, reversed in
    odd ones, so that none is always the one that runs first (after the floor's commits,
    or a sync) or always the one that runs after a given other."""
    order = list(savers.items())
    return order[::-1] if run % 2 else order


async def saver_rows(
    savers: dict[str, Any],
    runs: int,
    counts: dict[str, int],
    floor: FloorFn | None = None,
    per_run: dict[str, dict[str, list[float]]] | None = None,
) -> list[tuple[str, dict[str, float]]]:
    """Put and latest at each state size, puts of 16 threads at once and a 10-node graph
    step, for each saver (medians of ``runs`` interleaved runs): the rows of the table.

    Runs alternate the savers' order (`in_turn`): the first of a run starts after the
    floor's commits and the sync that `settle` makes, the next after another saver.

    A put row also holds the floors of its size that ``floor`` measures (``floor
    sqlite``, ``floor file``...), timed between the savers' runs. With ``per_run``, each
    row's figures of every run, in run order, are also kept there under the row's name
    (for ratios run by run: `median_interval`)."""
    rows: list[tuple[str, dict[str, float]]] = []

    def row(name: str, figures: dict[str, list[float]]) -> None:
        rows.append((name, {k: statistics.median(v) for k, v in figures.items()}))
        if per_run is not None:
            per_run[name] = figures

    for label, size in SIZES.items():
        puts: dict[str, list[float]] = {name: [] for name in savers}
        latest: dict[str, list[float]] = {name: [] for name in savers}
        for run in range(runs):
            for name, saver in in_turn(savers, run):
                thread = f"put-{label}-{run}-{uuid.uuid4().hex[:6]}"
                settle()
                per_put, _ = await put_chain(saver, thread, size, counts[label])
                puts[name].append(per_put)
            if floor is not None:
                for name, seconds in (await floor(payload_size(size), counts[label])).items():
                    puts.setdefault(name, []).append(seconds)
        configs: dict[str, Any] = {}
        for name, saver in savers.items():
            thread = f"latest-{label}-{uuid.uuid4().hex[:6]}"
            await put_chain(saver, thread, size, 50)
            configs[name] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        for run in range(runs):  # interleaved run by run, as the puts
            for name, saver in in_turn(savers, run):
                latest[name].append(
                    await timed(counts[label], lambda _i, s=saver, c=configs[name]: s.aget_tuple(c))
                )
        row(f"put, {label}", puts)
        row(f"latest, {label}", latest)
    # Many threads at once, as a server with concurrent users: per put, wall time.
    at_once: dict[str, list[float]] = {name: [] for name in savers}
    k = max(4, counts["1 KiB"] // 16)
    for run in range(runs):
        for name, saver in in_turn(savers, run):
            chains = [chain_of(saver, 1 << 10, k) for _ in range(CONCURRENT)]
            start = time.perf_counter()
            await asyncio.gather(
                *(
                    put_checkpoints(saver, f"many-{run}-{t}-{uuid.uuid4().hex[:6]}", chain)
                    for t, chain in enumerate(chains)
                )
            )
            at_once[name].append((time.perf_counter() - start) / (CONCURRENT * k))
    row(f"put, 1 KiB, {CONCURRENT} threads", at_once)
    steps: dict[str, list[float]] = {name: [] for name in savers}
    builder = ten_step_graph()
    for run in range(runs):
        for name, saver in in_turn(savers, run):
            graph = builder.compile(checkpointer=saver)
            start = time.perf_counter()
            for _ in range(GRAPH_RUNS):
                config = {"configurable": {"thread_id": f"graph-{uuid.uuid4().hex[:8]}"}}
                await graph.ainvoke({"n": 0, "payload": "x" * 1000}, config)
            steps[name].append((time.perf_counter() - start) / (10 * GRAPH_RUNS))
    row("graph step, 10 nodes", steps)
    return rows


async def bench_langgraph(
    base: str, runs: int, quick: bool, redis_url: str | None, floors: Floors
) -> None:
    counts = {"1 KiB": 200, "64 KiB": 60, "1 MiB": 12}
    if quick:
        counts = {k: max(4, v // 4) for k, v in counts.items()}
    async with langgraph_savers(base, redis_url) as savers:
        rows = await saver_rows(savers, runs, counts, local_floors(floors))
        rows.extend(await latest_as_thread_grows(base, runs, savers))

    names = [
        n
        for n in ("ckk sqlite", "ckk file", "ckk nosync", "ckk redis")
        if any(n in r for _, r in rows)
    ]
    print("\nLangGraph: CheckpointkitSaver vs LangGraph's AsyncSqliteSaver (same disk)")
    header = f"{'operation':<24}" + "".join(f"{n:>12}" for n in names) + f"{'sqlite':>12}"
    header += "".join(f"{'sqlite/' + n.split()[1]:>14}" for n in names)
    print(header)
    for op, figures in rows:
        line = f"{op:<24}" + "".join(f"{fmt(figures.get(n)):>12}" for n in names)
        line += f"{fmt(figures.get('sqlite')):>12}"
        line += "".join(f"{ratio(figures.get('sqlite'), figures.get(n)):>14}" for n in names)
        print(line)
    print(
        "ckk sqlite: checkpointkit's SQLite storage (WAL, synchronous=FULL, group commit); "
        "ckk file: its file storage (fsync of file and directory); ckk nosync: file, fsync "
        "off;\nsqlite: LangGraph's AsyncSqliteSaver, WAL journal, synchronous=FULL (one log "
        "sync per commit)"
    )
    print_floors(
        rows,
        [("ckk sqlite", "floor sqlite"), ("sqlite", "floor sqlite"), ("ckk file", "floor file")],
    )


def settle() -> None:
    """Write back what earlier, unsynced writes left (before a timed durable write).

    agent-framework's ``FileCheckpointStorage`` (and the ``nosync`` columns) do not sync:
    the data and journal work their files leave behind lands on the next ``fsync`` of any
    process (ext4 commits its journal then), which would charge it to whichever system
    runs next. ``os.sync()`` here, outside the timing, charges it to nobody.
    """
    os.sync()


FloorFn = Callable[[int, int], Awaitable[dict[str, float]]]
"""Measures floors: (bytes, commits) -> {"floor NAME": seconds per commit}."""


def local_floors(floors: Floors) -> FloorFn:
    """The SQLite and file floors, for `saver_rows`."""

    async def measure(size: int, n: int) -> dict[str, float]:
        return {
            "floor sqlite": await floors.sqlite(size, n),
            "floor file": await floors.file(size, n),
        }

    return measure


def payload_size(size: int) -> int:
    """Bytes a state of about ``size`` bytes takes serialized (``state_of`` is a little over)."""
    return size + size // 32


def print_floors(
    rows: list[tuple[str, dict[str, float]]],
    pairs: list[tuple[str, str]],
    how: str = "from an event loop via a worker thread",
) -> None:
    """Each durable write beside its floor, the same size's cheapest commit, and the ratio."""
    print(
        "\ndurable writes against the floor: one commit of the same size on the same backend "
        f"{how}, timed between the runs (ratio: time / floor)"
    )
    print(f"{'operation':<24}" + "".join(f"{f'{a} / {b}':>36}" for a, b in pairs))
    for op, figures in rows:
        if not any(b in figures for _, b in pairs):
            continue
        cells = []
        for a, b in pairs:
            ours, floor = figures.get(a), figures.get(b)
            cell = (
                ""
                if not ours or not floor
                else (f"{fmt(ours).strip()} / {fmt(floor).strip()} = {ours / floor:.2f}x")
            )
            cells.append(f"{cell:>36}")
        print(f"{op:<24}" + "".join(cells))


# -- agent-framework ------------------------------------------------------------------------


def af_checkpoint(name: str, size: int, seed: int, at: datetime) -> Any:
    from agent_framework import WorkflowCheckpoint

    cp = WorkflowCheckpoint(
        workflow_name=name, graph_signature_hash="bench", state=state_of(size, seed)
    )
    cp.timestamp = at.isoformat()
    return cp


async def af_saves_at_once(store: Any, k: int, clock: Iterator[datetime]) -> float:
    """Seconds per save (wall time) of `CONCURRENT` workflows saving ``k`` checkpoints of
    1 KiB each at once, one after the other in each workflow (made before the clock starts)."""
    batches = [
        [af_checkpoint(f"many-{w}", 1 << 10, i, next(clock)) for i in range(k)]
        for w in range(CONCURRENT)
    ]

    async def chain(batch: list[Any]) -> None:
        for cp in batch:
            await store.save(cp)

    start = time.perf_counter()
    await asyncio.gather(*(chain(b) for b in batches))
    return (time.perf_counter() - start) / (CONCURRENT * k)


async def bench_agent_framework(base: str, runs: int, quick: bool, floors: Floors) -> None:
    from agent_framework import FileCheckpointStorage

    logging_quiet()
    counts = {"1 KiB": 200, "64 KiB": 60, "1 MiB": 10}
    if quick:
        counts = {k: max(4, v // 4) for k, v in counts.items()}
    theirs = FileCheckpointStorage(f"{base}/af-theirs")
    rows: list[tuple[str, dict[str, float]]] = []
    clock = iter(datetime(2025, 1, 1, tzinfo=UTC) + timedelta(milliseconds=i) for i in range(10**7))
    async with contextlib.AsyncExitStack() as stack:
        stores: dict[str, Any] = {
            "ckk sqlite": await stack.enter_async_context(
                CheckpointkitCheckpointStorage.from_url(f"sqlite:///{base}/af-ckk.db")
            ),
            "ckk file": await stack.enter_async_context(
                CheckpointkitCheckpointStorage.from_url(f"file://{base}/af-ckk")
            ),
            "ckk nosync": await stack.enter_async_context(
                CheckpointkitCheckpointStorage.from_url(f"file://{base}/af-nosync?fsync=false")
            ),
            "theirs": theirs,
        }
        for store in stores.values():
            for i in range(WARM_UP):
                await store.save(af_checkpoint("warm-up", 1 << 10, i, next(clock)))
        for label, size in SIZES.items():
            n = counts[label]
            saves: dict[str, list[float]] = {k: [] for k in (*stores, *FLOORS)}
            loads: dict[str, list[float]] = {k: [] for k in stores}
            for _ in range(runs):
                for key, store in stores.items():
                    batch = [af_checkpoint(f"save-{label}", size, i, next(clock)) for i in range(n)]
                    settle()
                    saves[key].append(await timed(n, lambda i, b=batch, s=store: s.save(b[i])))
                    loads[key].append(
                        await timed(n, lambda i, b=batch, s=store: s.load(b[i].checkpoint_id))
                    )
                saves["floor sqlite"].append(await floors.sqlite(payload_size(size), n))
                saves["floor file"].append(await floors.file(payload_size(size), n))
            rows.append((f"save, {label}", {k: statistics.median(v) for k, v in saves.items()}))
            rows.append((f"load, {label}", {k: statistics.median(v) for k, v in loads.items()}))
        # Many workflows saving at once: per save, wall time.
        at_once: dict[str, list[float]] = {k: [] for k in stores}
        k = max(4, counts["1 KiB"] // 16)
        for _ in range(runs):
            for key, store in stores.items():
                at_once[key].append(await af_saves_at_once(store, k, clock))
        rows.append(
            (
                f"save, 1 KiB, {CONCURRENT} workflows",
                {k: statistics.median(v) for k, v in at_once.items()},
            )
        )
        # get_latest as the workflow grows (small checkpoints, as a run's steps would
        # be), each storage in a directory of its own holding only this workflow.
        name = "latest"
        have = 0
        theirs = FileCheckpointStorage(f"{base}/af-theirs-latest")
        ours = await stack.enter_async_context(
            CheckpointkitCheckpointStorage.from_url(f"file://{base}/af-ckk-latest")
        )
        fill = FileStorage(f"{base}/af-ckk-latest", fsync=False)  # fast filling, same files
        async with CheckpointkitCheckpointStorage(fill) as filler:
            for total in (10, 1000, 5000):
                while have < total:
                    batch = [af_checkpoint(name, 512, have + i, next(clock)) for i in range(50)]
                    batch = batch[: total - have]
                    await asyncio.gather(*(filler.save(cp) for cp in batch))
                    for cp in batch:
                        await theirs.save(cp)
                    have += len(batch)
                m = max(3, min(200, 20_000 // total))
                m_theirs = max(1, min(20, 2000 // total))
                o = statistics.median(
                    [
                        await timed(m, lambda _i: ours.get_latest(workflow_name=name))
                        for _ in range(runs)
                    ]
                )
                t = statistics.median(
                    [
                        await timed(m_theirs, lambda _i: theirs.get_latest(workflow_name=name))
                        for _ in range(max(1, runs if total < 5000 else 2))
                    ]
                )
                latest_o = await ours.get_latest(workflow_name=name)
                latest_t = await theirs.get_latest(workflow_name=name)
                assert latest_o is not None and latest_t is not None
                assert latest_o.checkpoint_id == latest_t.checkpoint_id
                rows.append((f"get_latest, {total:,} checkpoints", {"ckk file": o, "theirs": t}))
    names = ["ckk sqlite", "ckk file", "ckk nosync"]
    print("\nagent-framework: CheckpointkitCheckpointStorage vs its own FileCheckpointStorage")
    print(
        f"{'operation':<30}"
        + "".join(f"{n:>12}" for n in names)
        + f"{'theirs':>12}"
        + "".join(f"{'theirs/' + n.split()[1]:>14}" for n in names)
    )
    for op, figures in rows:
        print(
            f"{op:<30}"
            + "".join(f"{fmt(figures.get(n)):>12}" for n in names)
            + f"{fmt(figures.get('theirs')):>12}"
            + "".join(f"{ratio(figures.get('theirs'), figures.get(n)):>14}" for n in names)
        )
    print(
        "ckk sqlite: checkpointkit's SQLite storage (WAL, synchronous=FULL); ckk file: its "
        "file storage (fsync of file and directory); ckk nosync: file, fsync off;\ntheirs: "
        "agent-framework's FileCheckpointStorage (JSON file, os.replace, "
        "no fsync)"
    )
    print_floors(
        rows, [("ckk sqlite", "floor sqlite"), ("ckk file", "floor file"), ("theirs", "floor file")]
    )


def _load() -> str:
    with open("/proc/loadavg") as f:
        return "load average " + " ".join(f.read().split()[:3])


def logging_quiet() -> None:
    import logging

    logging.getLogger("agent_framework").setLevel(logging.WARNING)


@contextlib.contextmanager
def redis_server(enabled: bool) -> Iterator[str | None]:
    if not enabled:
        yield None
        return
    try:
        from checkpointkit.conformance.servers.redis import find_valkey_server, valkey_standalone
    except ImportError:
        yield None
        return
    if find_valkey_server() is None:
        print("(no valkey-server found: Redis column left out)")
        yield None
        return
    with valkey_standalone() as url:
        yield url


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fewer operations per run")
    parser.add_argument("--no-redis", action="store_true", help="leave the Redis column out")
    parser.add_argument("--only", choices=["langgraph", "agent-framework"])
    parser.add_argument(
        "--dir",
        default=None,
        help="where to make a scratch directory (default: the system's temporary "
        "directory; removed at the end)",
    )
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix=".bench-integrations-", dir=args.dir)
    print(f"medians of {args.runs} runs; scratch directory {base}; {_load()}")
    floors = Floors(base)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # agent-framework's experimental-feature notes
            if args.only in (None, "langgraph"):
                with redis_server(not args.no_redis) as redis_url:
                    await bench_langgraph(base, args.runs, args.quick, redis_url, floors)
            if args.only in (None, "agent-framework"):
                await bench_agent_framework(base, args.runs, args.quick, floors)
        one = await asyncio.to_thread(sqlite_floor, base, 1 << 10, runs=args.runs)
        print(
            f"\nfloor: one SQLite commit of 1 KiB with its log sync {fmt(one.inline).strip()} "
            f"in the calling thread, {fmt(one.via_thread).strip()} from an event loop via a "
            "worker thread"
        )
        print(_load())
    finally:
        floors.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

"""Large states on ``sqlite://``, each integration beside its peer, interleaved run by run, and
where a LangGraph latest of a large state goes.

Run: ``.venv/bin/python benchmarks/large_values.py [--size 1048576] [--runs 5] [--dir PATH]``

- agent-framework: ``CheckpointkitCheckpointStorage`` on ``sqlite://`` against
  ``FileCheckpointStorage`` (no sync): ``save`` then ``load`` of 10 checkpoints, per
  operation, both systems in turn in every run;
- LangGraph: ``CheckpointkitSaver`` on ``sqlite://`` against ``AsyncSqliteSaver``: ``aput`` of
  6 checkpoints (a new state each), then 10 ``aget_tuple`` of the latest (the thread's
  first 10 checkpoints were written before the runs, so the reads are in a steady state);
- then, 30 times in turn, the stages of checkpointkit's latest: the value's get, the
  envelope's check (CRC), LangGraph's ``loads_typed``, the record's get and the writes'
  listing; what zstd and the CRC-32 cost on the value; and the storage writes of 12
  checkpointkit puts (the value's, the record's), timed where the saver awaits them.

Every system first writes ``WARM_UP`` checkpoints of 1 KiB (as in ``bench_integrations.py``);
``os.sync()`` runs outside the timing before each timed series (see ``settle`` there). The
figures are medians; the ratio is the peer's time over checkpointkit's. It runs on an
earlier commit too (lay its package out and put it first on ``PYTHONPATH``, as
``compare_commits.py`` does): it uses no API newer than the integrations themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import tempfile
import time
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

from bench_integrations import WARM_UP, af_checkpoint, put_chain
from checkpointkit.envelope import open_envelope
from checkpointkit.integrations.agent_framework import CheckpointkitCheckpointStorage
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from floors import Floors


async def print_put_stages(saver: Any, size: int) -> None:
    """Where checkpointkit's LangGraph put of a large state goes: each storage write it
    makes (the value, then the record), timed where the saver awaits it, and the rest."""
    storage = saver.storage
    put = storage.put
    writes: dict[str, list[float]] = {"value (/b/)": [], "record (/c/)": [], "other": []}

    async def timed_put(key: str, data: bytes, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await put(key, data, **kwargs)
        finally:
            kind = "value (/b/)" if "/b/" in key else "record (/c/)" if "/c/" in key else "other"
            writes[kind].append(time.perf_counter() - start)

    storage.put = timed_put
    try:
        per_put, _ = await put_chain(saver, "stages", size, 12)
    finally:
        del storage.put  # the class's method again
    print(
        f"\nwhere a LangGraph put of {size:,} B goes (12 puts, sequential): "
        f"{per_put * 1e6:.0f} µs per put"
    )
    for kind, times in writes.items():
        if times:
            print(
                f"  {kind:<14} {len(times):>3} writes, median "
                f"{statistics.median(times) * 1e6:>7.0f} µs, max {max(times) * 1e6:>7.0f} µs, "
                "total per put "
                f"{sum(times) / 12 * 1e6:>7.0f} µs"
            )


def print_codec_costs(value: bytes) -> None:
    """What zstd (level 1, the envelope's default) and the CRC-32 cost on ``value``."""
    import zlib

    import zstandard

    def median_of(fn: Any, n: int = 20) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    packed = zstandard.ZstdCompressor(level=1).compress(value)
    unpack = zstandard.ZstdDecompressor()
    compress = median_of(lambda: zstandard.ZstdCompressor(level=1).compress(value))
    decompress = median_of(lambda: unpack.decompress(packed))
    print(
        f"\nthe value serialized: {len(value):,} B; zstd level 1: {len(packed):,} B in "
        f"{compress * 1e3:.2f} ms, back in {decompress * 1e3:.2f} ms; CRC-32: zlib "
        f"{median_of(lambda: zlib.crc32(value)) * 1e3:.3f} ms",
        end="",
    )
    try:
        from isal.isal_zlib import crc32
    except ImportError:
        print()
    else:
        print(f", ISA-L {median_of(lambda: crc32(value)) * 1e3:.3f} ms")


def _floor_reader(path: str, size: int) -> Any:
    """The cheapest read of ``size`` bytes on this disk through SQLite: a function that
    selects one row of that size by its key, on a connection of its own (WAL, as the
    adapter's), from a database written for it beside the benchmark's."""
    import sqlite3

    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID")
    conn.execute("INSERT INTO t VALUES ('k', ?)", (os.urandom(size),))

    def read() -> bytes:
        value: bytes = conn.execute("SELECT v FROM t WHERE k = 'k'").fetchone()[0]
        return value

    return read


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("agent_framework").setLevel(logging.WARNING)
    from agent_framework import FileCheckpointStorage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    size = args.size
    base = tempfile.mkdtemp(prefix=".bench-large-", dir=args.dir)
    clock = iter(datetime(2025, 1, 1, tzinfo=UTC) + timedelta(milliseconds=i) for i in range(10**7))
    with open("/proc/loadavg") as f:
        print(
            f"{size:,} B states; medians of {args.runs} runs; load average before: "
            f"{' '.join(f.read().split()[:3])}"
        )
    try:
        async with (
            CheckpointkitCheckpointStorage.from_url(f"sqlite:///{base}/af.db") as af_ours,
            CheckpointkitSaver.from_url(f"sqlite:///{base}/lg.db") as lg_ours,
            AsyncSqliteSaver.from_conn_string(f"{base}/lg-sqlite.db") as lg_theirs,
        ):
            await lg_theirs.setup()
            af_theirs = FileCheckpointStorage(f"{base}/af-theirs")
            afs: dict[str, Any] = {"ours": af_ours, "theirs": af_theirs}
            lgs: dict[str, Any] = {"ours": lg_ours, "theirs": lg_theirs}
            for af in afs.values():
                for i in range(WARM_UP):
                    await af.save(af_checkpoint("warm-up", 1 << 10, i, next(clock)))
            for lg in lgs.values():
                await put_chain(lg, "warm-up", 1 << 10, WARM_UP)
                await put_chain(lg, "latest", size, 10)
            rows: dict[str, dict[str, list[float]]] = {
                op: {"ours": [], "theirs": []}
                for op in (
                    "agent-framework save",
                    "agent-framework load",
                    "LangGraph put",
                    "LangGraph latest",
                )
            }
            latest: Any = {"configurable": {"thread_id": "latest", "checkpoint_ns": ""}}
            floors = Floors(base)
            commit_floor: list[float] = []
            for run in range(args.runs):
                os.sync()
                commit_floor.append(await floors.sqlite(size, 6))
                for who in ("ours", "theirs") if run % 2 == 0 else ("theirs", "ours"):
                    batch = [af_checkpoint("big", size, i, next(clock)) for i in range(10)]
                    os.sync()
                    start = time.perf_counter()
                    for cp in batch:
                        await afs[who].save(cp)
                    rows["agent-framework save"][who].append((time.perf_counter() - start) / 10)
                    start = time.perf_counter()
                    for cp in batch:
                        await afs[who].load(cp.checkpoint_id)
                    rows["agent-framework load"][who].append((time.perf_counter() - start) / 10)
                    os.sync()
                    per_put, _ = await put_chain(lgs[who], f"put-{run}", size, 6)
                    rows["LangGraph put"][who].append(per_put)
                    start = time.perf_counter()
                    for _ in range(10):
                        await lgs[who].aget_tuple(latest)
                    rows["LangGraph latest"][who].append((time.perf_counter() - start) / 10)
            print(f"{'operation':<24}{'checkpointkit':>16}{'peer':>12}{'peer / ckk':>12}")
            for op, by in rows.items():
                ours, theirs = statistics.median(by["ours"]), statistics.median(by["theirs"])
                print(
                    f"{op:<24}{ours * 1e6:>13.0f} µs{theirs * 1e6:>9.0f} µs{theirs / ours:>11.2f}x"
                )
            print(
                "peers: agent-framework's FileCheckpointStorage (no sync), LangGraph's "
                "AsyncSqliteSaver"
            )
            floors.close()
            one_commit = statistics.median(commit_floor)
            peer_put = statistics.median(rows["LangGraph put"]["theirs"])
            print(
                f"floor: one SQLite commit of a {size:,} B row via a worker thread "
                f"{one_commit * 1e6:.0f} µs (timed between the runs); 1.5x the peer's put "
                f"would take {peer_put / 1.5 * 1e6:.0f} µs"
            )

            # Stages of checkpointkit's latest, interleaved with the whole of both.
            storage = lg_ours.storage
            (record_key,) = [k async for k in storage.list("langgraph/c/_latest/", limit=1)]
            blob_keys = sorted([k async for k in storage.list("langgraph/b/_latest/")])
            tup = await lg_ours.aget_tuple(latest)
            assert tup is not None
            stages: dict[str, list[float]] = {
                k: []
                for k in (
                    "latest, checkpointkit",
                    "latest, AsyncSqliteSaver",
                    "  get of the value",
                    "  envelope check (CRC)",
                    "  LangGraph loads_typed",
                    "  record get + writes listing",
                    "floor: one SELECT of a row of the value's size, worker thread",
                )
            }
            blob_key = blob_keys[-1]
            stored, _ = await storage.get(blob_key)
            floor_read = _floor_reader(os.path.join(base, "floor.db"), len(stored))
            for _ in range(30):
                t0 = time.perf_counter()
                await lg_ours.aget_tuple(latest)
                stages["latest, checkpointkit"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await lg_theirs.aget_tuple(latest)
                stages["latest, AsyncSqliteSaver"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                data, _ = await storage.get(blob_key)
                stages["  get of the value"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                _, payload = open_envelope(data, key=blob_key)
                stages["  envelope check (CRC)"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                lg_ours.serde.loads_typed(("msgpack", payload))
                stages["  LangGraph loads_typed"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await storage.get(record_key)
                [k async for k in storage.list("langgraph/w/_latest/")]
                stages["  record get + writes listing"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await asyncio.to_thread(floor_read)
                stages["floor: one SELECT of a row of the value's size, worker thread"].append(
                    time.perf_counter() - t0
                )
            print(f"\nwhere a LangGraph latest of {size:,} B goes (medians of 30, interleaved)")
            for name, v in stages.items():
                print(f"{name:<32}{statistics.median(v) * 1e6:>9.0f} µs")
            floor = statistics.median(stages[list(stages)[-1]])
            decode = statistics.median(stages["  LangGraph loads_typed"])
            peer = statistics.median(stages["latest, AsyncSqliteSaver"])
            print(
                f"the floor of a latest (the cheapest read of the value's bytes and LangGraph's "
                f"own decoding of them): {(floor + decode) * 1e6:.0f} µs; 1.5x the peer's "
                f"speed would take {peer / 1.5 * 1e6:.0f} µs"
            )
            print_codec_costs(bytes(payload))
            await print_put_stages(lg_ours, size)
        with open("/proc/loadavg") as f:
            print(f"load average after: {' '.join(f.read().split()[:3])}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

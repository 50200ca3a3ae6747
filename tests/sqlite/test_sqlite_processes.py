"""Several processes on one database file, and writers killed with SIGKILL: create-only races
have one winner, compare-and-swap stays exact, and every acknowledged write is there."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkpointkit.adapters.sqlite import SQLiteStorage

WORKER = Path(__file__).with_name("_worker.py")
KILLS = 30


def run_workers(db: Path, jobs: list[list[str]]) -> list[dict[str, object]]:
    """Start one process per job, release them together, return their JSON results."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(db), "race", str(wid), *job],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for wid, job in enumerate(jobs)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line == "ready\n", line + (p.stderr.read() if p.stderr else "")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            results.append(json.loads(out))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


async def test_create_race_across_processes_has_exactly_one_winner(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    results = run_workers(db, [["create", n, "race/key"] for n in ("13", "13", "12", "12")])
    wins = [w for r in results for w in r["wins"]]  # type: ignore[attr-defined]
    assert sum(r["losses"] for r in results) == 49  # type: ignore[misc]
    assert all(r["other"] == 0 for r in results), results
    assert len(wins) == 1, wins
    value, version = wins[0]
    async with SQLiteStorage(db) as s:
        assert await s.get("race/key") == (value.encode(), version)
        assert [k async for k in s.list()] == ["race/key"]


async def test_cas_counter_across_processes_is_exact(tmp_path: Path) -> None:
    db = tmp_path / "cas.db"
    async with SQLiteStorage(db) as s:
        await s.put("n", b"0")
    run_workers(db, [["cas", "2", "10", "n"]] * 4)  # 4 processes x 2 tasks x 10 increments
    async with SQLiteStorage(db) as s:
        assert (await s.get("n")).data == b"80"


def check_value(key: str, value: bytes) -> int:
    (length,) = struct.unpack(">Q", value[:8])
    payload = value[40:]
    assert len(payload) == length, f"{key}: torn value, length {len(payload)} != {length}"
    assert hashlib.sha256(payload).digest() == value[8:40], f"{key}: torn value, bad checksum"
    header = json.loads(payload.split(b"\n", 1)[0])
    assert header["key"] == key, f"{key} holds the value of {header['key']}"
    return int(header["seq"])


def apply(state: dict[str, int], op: str, key: str, seq: int) -> dict[str, int]:
    after = dict(state)
    if op in ("create", "overwrite", "ifmatch"):
        after[key] = seq
    else:
        after.pop(key, None)
    return after


async def _spawn_writer(db: Path, first_seq: int, writers: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        str(db),
        "crash",
        str(first_seq),
        writers,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    ready = await proc.stdout.readline()
    if ready != b"ready\n":
        _, err = await proc.communicate()
        pytest.fail(f"the writer did not start: {err.decode()}")
    return proc


async def _kill_after(proc: asyncio.subprocess.Process, delay: float) -> bytes:
    """SIGKILL ``proc`` after ``delay`` seconds; return what it printed."""
    await asyncio.sleep(delay)  # a random moment to kill it
    proc.kill()  # SIGKILL
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == -signal.SIGKILL, err.decode()
    return out


def _acknowledged(
    out: bytes, model: dict[str, int], pending: dict[int, tuple[str, str]]
) -> dict[str, int]:
    """Apply the operations a killed writer acknowledged; leave the others in ``pending``."""
    issued: dict[int, tuple[str, str]] = {}
    for line in out.decode().splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        parts = line.split()
        if parts[0] == "I":
            issued[int(parts[1])] = (parts[2], parts[3])
        else:
            op, key = issued.pop(int(parts[1]))
            model = apply(model, op, key, int(parts[1]))
    pending.update(issued)
    return model


async def _check_against(
    reader: SQLiteStorage, model: dict[str, int], pending: dict[int, tuple[str, str]], round_: int
) -> dict[str, int]:
    """Acknowledged operations must be there; each key has at most one in flight."""
    keys = [k async for k in reader.list()]
    actual = {k: check_value(k, (await reader.get(k)).data) for k in keys}
    unsettled = {key: (seq, op) for seq, (op, key) in pending.items()}
    for key in set(model) | set(actual):
        allowed = [model.get(key)]
        if key in unsettled:
            seq, op = unsettled[key]
            allowed.append(apply(model, op, key, seq).get(key))
        assert actual.get(key) in allowed, (round_, key, actual.get(key), allowed)
    return actual


@pytest.mark.slow
async def test_sigkill_never_loses_an_acknowledged_write_or_tears_a_value(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    rng = random.Random(2026)
    model: dict[str, int] = {}  # key -> seq of its value, as the storage must hold it
    in_flight = 0
    started = time.monotonic()
    async with SQLiteStorage(db) as reader:
        for round_ in range(KILLS):
            proc = await _spawn_writer(db, round_ * 1_000_000, "0,1,2,3")
            out = await _kill_after(proc, rng.uniform(0.0, 0.1))
            pending: dict[int, tuple[str, str]] = {}
            model = _acknowledged(out, model, pending)
            in_flight += len(pending)
            model = await _check_against(reader, model, pending, round_)
    assert in_flight >= KILLS, "the writers were rarely killed mid-operation"
    assert time.monotonic() - started < 90


FOUR_PROCESS_ROUNDS = 12


async def test_sigkill_of_four_writer_processes_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """Four processes share the file, one writer each; all four are killed with SIGKILL,
    each at its own random moment (so some die while the others still commit), 12 times."""
    db = tmp_path / "crash4.db"
    rng = random.Random(4)
    model: dict[str, int] = {}
    in_flight = 0
    started = time.monotonic()
    async with SQLiteStorage(db) as reader:
        for round_ in range(FOUR_PROCESS_ROUNDS):
            procs = await asyncio.gather(
                *(_spawn_writer(db, round_ * 1_000_000 + w * 100_000, str(w)) for w in range(4))
            )
            outs = await asyncio.gather(
                *(_kill_after(proc, rng.uniform(0.02, 0.2)) for proc in procs)
            )
            pending: dict[int, tuple[str, str]] = {}
            for out in outs:
                model = _acknowledged(out, model, pending)
            in_flight += len(pending)
            model = await _check_against(reader, model, pending, round_)
    assert in_flight >= FOUR_PROCESS_ROUNDS, "the writers were rarely killed mid-operation"
    assert time.monotonic() - started < 60

"""Several processes on one root: create-only races and compare-and-swap stay exact."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from checkpointkit.adapters.file import FileStorage
from checkpointkit.errors import ConfigurationError, StorageUnavailable
from checkpointkit.storage import IfMatch

WORKER = Path(__file__).with_name("_race_worker.py")
KEYS = pytest.mark.parametrize(
    "key",
    ["race/key", "race/" + "Long" * 60 + "/" + "Key" * 80],  # the second: shortened names
    ids=["short", "long"],
)


def run_workers(root: Path, jobs: list[list[str]]) -> list[dict[str, object]]:
    """Start one process per job, release them together, return their JSON results."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(root), str(wid), *job],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for wid, job in enumerate(jobs)
    ]
    try:
        for p in procs:  # every worker has opened its storage
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line == "ready\n", line + (p.stderr.read() if p.stderr else "")
        for p in procs:  # go
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


@KEYS
async def test_create_race_across_processes_has_exactly_one_winner(
    tmp_path: Path, key: str
) -> None:
    root = tmp_path / "root"
    results = run_workers(root, [["create", n, key] for n in ("13", "13", "12", "12")])  # 50 puts
    wins = [w for r in results for w in r["wins"]]  # type: ignore[attr-defined]
    assert sum(r["losses"] for r in results) == 49  # type: ignore[misc]
    assert all(r["other"] == 0 for r in results), results
    assert len(wins) == 1, wins
    value, version = wins[0]
    async with FileStorage(root) as s:
        got = await s.get(key)
        assert [k async for k in s.list()] == [key]
    assert got == (value.encode(), version)
    assert not list(root.rglob("#*.tmp"))


@KEYS
async def test_cas_counter_across_processes_is_exact(tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    async with FileStorage(root) as s:
        await s.put(key, b"0")
    run_workers(root, [["cas", "2", "10", key]] * 4)  # 4 processes x 2 tasks x 10 increments
    async with FileStorage(root) as s:
        assert (await s.get(key)).data == b"80"
        assert [k async for k in s.list()] == [key]


_HOLDER = """
import fcntl, os, signal, sys, zlib
from checkpointkit.adapters.file import FileStorage, LOCK_DIR, LOCK_STRIPES
storage = FileStorage(sys.argv[1])
rel_dir = storage._map(sys.argv[2]).rel_dir
lock_dir = os.path.join(sys.argv[1], LOCK_DIR)
os.makedirs(lock_dir, exist_ok=True)
stripe = zlib.crc32(rel_dir.encode()) % LOCK_STRIPES
fd = os.open(os.path.join(lock_dir, f"{stripe:02d}"), os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)  # a process stopped while it holds the lock
"""


async def test_a_write_waits_for_another_processs_lock_at_most_lock_timeout(
    tmp_path: Path,
) -> None:
    """Another process stopped while it holds the lock of a key's directory: a write of
    that key raises StorageUnavailable, naming the lock and the timeout, within about
    ``lock_timeout`` (a blocking ``flock`` would wait for as long as the process is
    stopped), leaves the key as it was, and a write once the lock is free lands."""
    key = "locked/key"
    async with FileStorage(tmp_path, lock_timeout=0.2) as storage:
        version = await storage.put(key, b"before")
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(tmp_path), key],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(StorageUnavailable, match=r"lock_timeout=0\.2 s"):
                await asyncio.wait_for(storage.put(key, b"during", mode=IfMatch(version)), 30)
            assert loop.time() - started < 10  # about 0.2 s; never the wait for ever
            assert (await storage.get(key)).data == b"before"
        finally:
            holder.kill()  # a stopped process dies of SIGKILL, and its lock with it
            holder.wait()
            if holder.stdout is not None:
                holder.stdout.close()
        await storage.put(key, b"after", mode=IfMatch(version))
        assert (await storage.get(key)).data == b"after"


def test_lock_timeout_out_of_range_is_refused_by_name(tmp_path: Path) -> None:
    for bad in (-1, "5", True, 4000):
        with pytest.raises(ConfigurationError, match="lock_timeout"):
            FileStorage(tmp_path, lock_timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="lock_timeout"):
        FileStorage.from_url(f"file://{tmp_path}?lock_timeout=soon")
    assert FileStorage.from_url(f"file://{tmp_path}?lock_timeout=0.5").lock_timeout == 0.5

"""Several processes on one root: create-only races and compare-and-swap stay exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from checkpointkit.adapters.file import FileStorage

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

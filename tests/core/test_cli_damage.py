"""Listing commands over damaged and half-written runs (issue 20): every healthy run is
shown, a damaged one is marked with its own error, and a missing checkpoint is named."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from checkpointkit import Workflow, open_storage, step
from checkpointkit.cli import invoke
from checkpointkit.store import CheckpointStore


@step(name="work")
async def work(x: int) -> int:
    return x + 1


async def flow(x: int) -> int:
    return await work(x)


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = invoke(list(args), stdin=io.StringIO(), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


async def _two_runs(url: str) -> str:
    """Runs "good" and "bad", both completed; return the key of bad's checkpoint."""
    async with open_storage(url) as storage:
        wf = Workflow(flow, storage=storage)
        for run_id in ("bad", "good"):
            assert (await wf.run(1, run_id=run_id)).status == "completed"
        (key,) = [k async for k in storage.list("runs/bad/c/")]
        return key


async def _truncate(url: str, key: str) -> None:
    async with open_storage(url) as storage:
        data, _ = await storage.get(key)
        await storage.put(key, data[: len(data) // 2])


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_runs_shows_every_healthy_run_and_marks_the_damaged_one(url: str) -> None:
    key = asyncio.run(_two_runs(url))
    asyncio.run(_truncate(url, key))
    code, out, err = _cli("runs", "--storage", url)
    assert code == 1, (out, err)
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert set(rows) == {"bad", "good"}, out
    assert "completed" in rows["good"] and "damaged" in rows["bad"], out
    assert "run bad is damaged" in err and "CheckpointCorrupted" in err, err
    code, out, _ = _cli("runs", "--storage", url, "--json")
    runs = {r["run_id"]: r for r in json.loads(out)["runs"]}
    assert code == 1 and runs["good"]["status"] == "completed" and "error" not in runs["good"]
    assert runs["bad"]["status"] is None and "CheckpointCorrupted" in runs["bad"]["error"]


def test_ls_lists_every_checkpoint_and_marks_the_damaged_one(url: str) -> None:
    async def more(url: str) -> str:
        async with open_storage(url) as storage:
            wf = Workflow(flow, storage=storage)
            await wf.run(1, run_id="r")
            store = CheckpointStore(storage)
            await store.save_checkpoint("r", status="completed", output=2)  # checkpoint 2
            return [k async for k in storage.list("runs/r/c/")][1]  # checkpoint 1

    key = asyncio.run(more(url))
    asyncio.run(_truncate(url, key))
    code, out, err = _cli("ls", "r", "--storage", url)
    assert code == 1, (out, err)
    assert any(line.split()[:2] == ["2", "completed"] for line in out.splitlines()), out
    assert any(line.split()[:2] == ["1", "damaged"] for line in out.splitlines()), out
    assert "checkpoint 1 of run r is damaged" in err, err


def test_runs_names_a_checkpoint_that_the_head_names_but_is_missing(url: str) -> None:
    async def lose_checkpoint(url: str) -> None:
        async with open_storage(url) as storage:
            wf = Workflow(flow, storage=storage)
            await wf.run(1, run_id="r")
            keys = [k async for k in storage.list("runs/r/c/")]
            await storage.delete(keys[0])  # as if its writer died before writing it

    asyncio.run(lose_checkpoint(url))
    code, out, err = _cli("runs", "--storage", url)
    assert code == 0, (out, err)
    assert "checkpoint 1 missing" in out and "resume the run" in out, out
    assert "pruned" not in out, out
    _, out, _ = _cli("runs", "--storage", url, "--json")
    (entry,) = json.loads(out)["runs"]
    assert entry["missing_checkpoint"] is True and entry["pruned"] is False

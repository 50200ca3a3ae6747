"""``checkpointkit runs --status/--older-than/--meta`` and ``prune --older-than``.

Ages are set with a fake wall clock in the store module, never waited for.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import checkpointkit.store as store_module
import pytest
from checkpointkit.adapters.file import FileStorage
from checkpointkit.cli import invoke
from checkpointkit.store import CheckpointStore

DAY = 86400.0


class Clock:
    def __init__(self) -> None:
        self.now = time.time() - 30 * DAY
        self.monotonic = time.monotonic

    def time(self) -> float:
        return self.now


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def cli(*args: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = invoke(list(args), stdin=io.StringIO(), stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


def assert_usage_error(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


async def _make(root: Path, clock: Clock) -> None:
    """Runs 'a' (3 checkpoints 31, 30, 29 days old, completed), 'b' (failed 20 days ago,
    team search), 'c' (paused 1 day ago, team ads) and 'd' (created, no checkpoint)."""
    async with FileStorage(root) as storage:
        store = CheckpointStore(storage)
        for run_id in "abcd":
            await store.create_run(run_id, None)
        for status in ("paused", "paused", "completed"):
            await store.save_checkpoint("a", status=status)
            clock.now += DAY
        clock.now += 8 * DAY
        await store.save_checkpoint("b", status="failed", metadata={"team": "search"})
        clock.now += 19 * DAY
        await store.save_checkpoint("c", status="paused", metadata={"team": "ads", "tier": 2})
        clock.now += DAY


@pytest.fixture
def store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    clock = Clock()
    monkeypatch.setattr(store_module, "time", clock)
    root = tmp_path / "store"
    root.mkdir()
    asyncio.run(_make(root, clock))
    return str(root)


def run_ids(result: Result) -> list[str]:
    assert result.exit_code == 0, result.stderr
    return [r["run_id"] for r in result.json()["runs"]]


def test_runs_filters_by_status(store_url: str) -> None:
    assert run_ids(cli("runs", "-s", store_url, "--json", "--status", "failed")) == ["b"]
    both = cli("runs", "-s", store_url, "--json", "--status", "completed,paused")
    assert run_ids(both) == ["a", "c"]
    assert run_ids(cli("runs", "-s", store_url, "--json", "--status", "created")) == ["d"]
    text = cli("runs", "-s", store_url, "--status", "failed", "--status", "paused")
    assert [line.split()[0] for line in text.stdout.splitlines()[1:]] == ["b", "c"]
    assert cli("runs", "-s", store_url, "--status", "running").stdout == "no runs match\n"


def test_runs_filters_by_age_and_metadata_and_reports_the_filters(store_url: str) -> None:
    assert run_ids(cli("runs", "-s", store_url, "--json", "--older-than", "7d")) == ["a", "b"]
    assert run_ids(cli("runs", "-s", store_url, "--json", "--older-than", "25d")) == ["a"]
    assert run_ids(cli("runs", "-s", store_url, "--json", "--older-than", "2h")) == ["a", "b", "c"]
    doc = cli("runs", "-s", store_url, "--json", "--older-than", "2h", "--meta", "tier=2").json()
    assert [r["run_id"] for r in doc["runs"]] == ["c"]
    assert doc["filters"] == {"status": None, "older_than": 7200.0, "metadata": {"tier": 2}}
    assert run_ids(cli("runs", "-s", store_url, "--json", "--meta", "team=search")) == ["b"]
    assert "filters" not in cli("runs", "-s", store_url, "--json").json()


@pytest.mark.parametrize("bad", ["7", "7x", "abc", "-1d", "", "1.d", "d"])
def test_a_bad_duration_is_a_usage_error_naming_it(store_url: str, bad: str) -> None:
    for command in (["runs"], ["prune"]):
        result = cli(*command, "-s", store_url, f"--older-than={bad}")
        assert_usage_error(result, "--older-than", f"{bad!r} is not a duration", "30s, 10m")


def test_prune_older_than_across_runs_shows_then_deletes_what_is_old(store_url: str) -> None:
    dry = cli("prune", "--older-than", "10d", "--dry-run", "-s", store_url)
    assert dry.exit_code == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        "would prune 3 checkpoint(s) of run a older than 10d (ids: 3, 2, 1)",
        "would prune 1 checkpoint(s) of run b older than 10d (ids: 1)",
    ]
    assert_usage_error(cli("prune", "--older-than", "10d", "-s", store_url), "pass --yes")
    done = cli("prune", "--older-than", "10d", "--yes", "--json", "-s", store_url).json()
    assert done == {
        "older_than": 864000.0,
        "dry_run": False,
        "runs": [
            {"run_id": "a", "checkpoints": ["3", "2", "1"], "deleted": 3},
            {"run_id": "b", "checkpoints": ["1"], "deleted": 1},
        ],
        "deleted": 4,
    }
    runs = {r["run_id"]: r for r in cli("runs", "--json", "-s", store_url).json()["runs"]}
    assert (runs["a"]["status"], runs["a"]["pruned"]) == ("completed", True)
    assert (runs["b"]["status"], runs["b"]["pruned"]) == ("failed", True)
    assert (runs["c"]["status"], runs["c"]["pruned"]) == ("paused", False)
    again = cli("prune", "--older-than", "10d", "--yes", "-s", store_url)
    assert again.stdout == "no checkpoint older than 10d\n"


def test_prune_older_than_of_one_run_keeps_its_newer_checkpoints(store_url: str) -> None:
    doc = cli("prune", "a", "--older-than", "29.5d", "--yes", "--json", "-s", store_url).json()
    assert doc == {
        "run_id": "a",
        "older_than": 29.5 * DAY,
        "dry_run": False,
        "checkpoints": ["2", "1"],
        "deleted": 2,
    }
    ls = cli("ls", "a", "--json", "-s", store_url).json()
    assert [c["checkpoint_id"] for c in ls["checkpoints"]] == ["3"]


def test_prune_takes_keep_or_older_than_and_keep_needs_a_run(store_url: str) -> None:
    assert_usage_error(cli("prune", "--keep", "1", "--yes", "-s", store_url), "needs a RUN")
    assert_usage_error(cli("prune", "a", "--yes", "-s", store_url), "--keep", "--older-than")
    both = cli("prune", "a", "--keep", "1", "--older-than", "1d", "-s", store_url)
    assert_usage_error(both, "not allowed with")
    unknown = cli("prune", "zz", "--older-than", "1d", "--yes", "-s", store_url)
    assert unknown.exit_code == 1 and "run 'zz' not found" in unknown.stderr

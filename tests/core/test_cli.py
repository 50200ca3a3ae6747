"""The ``checkpointkit`` command line over a real file store, with runs made by the runner.

Every command is driven through :func:`checkpointkit.cli.invoke` with captured
streams (one through a real subprocess); every bad input must end with a
non-zero exit and a one-line error, never a traceback.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from checkpointkit import Workflow, context, open_storage, step
from checkpointkit.cli import COMMANDS, invoke
from checkpointkit.store import CheckpointStore


@step(name="draft")
async def draft(topic: str) -> str:
    context().state.set("topic", topic)
    return f"draft about {topic}"


@step(name="approve")
async def approve(text: str) -> str:
    verdict = await context().request_input({"text": text})
    return f"{text}: {verdict}"


async def review(topic: str) -> str:
    return await approve(await draft(topic))


async def _make_runs(url: str) -> None:
    async with open_storage(url) as storage:
        wf = Workflow(review, storage=storage)
        paused = await wf.run("cats", run_id="done")  # checkpoint 1: paused
        done = await wf.resume("done", responses={paused.pending[0].id: "approved"})
        assert done.status == "completed"  # checkpoint 2: completed
        waiting = await wf.run("dogs", run_id="waiting")
        assert waiting.status == "paused"
        await CheckpointStore(storage).create_run("fresh", None)  # no checkpoint yet


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A file store holding a completed run, a paused run and a run without a checkpoint."""
    url = str(tmp_path / "store")
    asyncio.run(_make_runs(url))
    return url


@dataclass
class Result:
    """What one command line did: its exit status and both streams."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def cli(
    *args: str, env: dict[str, str] | None = None, stdin: io.StringIO | None = None
) -> Result:
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        code = invoke(list(args), stdin=stdin or io.StringIO(), stdout=out, stderr=err)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Result(code, out.getvalue(), err.getvalue())


def assert_one_line_error(result: Result, *needles: str) -> None:
    """Non-zero exit, no traceback, and a single line on stderr naming what was wrong."""
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# -- inspecting runs -----------------------------------------------------------------------------
def test_runs_lists_every_run_with_its_latest_checkpoint(store_url: str) -> None:
    result = cli("runs", "--storage", store_url)
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert "completed" in rows["done"] and " 2 " in rows["done"]
    assert "paused" in rows["waiting"]
    assert "running or crashed" in rows["fresh"]


def test_runs_reads_the_storage_from_the_environment(store_url: str) -> None:
    result = cli("runs", env={"CHECKPOINTKIT_STORAGE": store_url})
    assert result.exit_code == 0, result.output
    assert "waiting" in result.stdout


def test_runs_on_an_empty_storage_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = cli("runs", "-s", f"file://{tmp_path / 'empty'}")
    assert result.exit_code == 0, result.output
    assert "no runs" in result.stdout


@pytest.mark.parametrize(
    "command",
    [["runs"], ["ls", "done"], ["show", "done"], ["rm", "done"], ["prune", "done", "--keep", "1"]],
)
@pytest.mark.parametrize("form", ["path", "url"])
def test_missing_storage_directory_is_an_error_and_is_not_created(
    tmp_path: Path, command: list[str], form: str
) -> None:
    typo = tmp_path / "stroe"
    url = str(typo) if form == "path" else f"file://{typo}"
    assert_one_line_error(cli(*command, "-s", url), repr(str(typo)), "does not exist")
    assert not typo.exists()


def test_ls_lists_checkpoints_newest_first_and_the_completed_steps(store_url: str) -> None:
    result = cli("ls", "done", "-s", store_url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.index("completed") < out.index("paused")  # newest first
    assert "approve@0:0" in out  # the pending request of checkpoint 1
    assert "draft@0" in out and "approve@0" in out and "topic" in out


def test_show_prints_the_latest_checkpoint_decoded(store_url: str) -> None:
    result = cli("show", "done", "-s", store_url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "checkpoint 2" in out and "status completed" in out
    assert "'draft about cats: approved'" in out
    assert "'topic': 'cats'" in out


def test_show_prints_one_checkpoint_by_id(store_url: str) -> None:
    result = cli("show", "done", "1", "-s", store_url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "checkpoint 1" in out and "status paused" in out
    assert "'approve@0:0'" in out and "'text': 'draft about cats'" in out


# -- changing runs -------------------------------------------------------------------------------
def test_prune_keeps_the_newest_checkpoints(store_url: str) -> None:
    result = cli("prune", "done", "--keep", "1", "--yes", "-s", store_url)
    assert result.exit_code == 0, result.output
    assert "pruned 1 checkpoint(s)" in result.stdout
    listing = cli("ls", "done", "-s", store_url).stdout
    assert "completed" in listing and "paused" not in listing
    assert_one_line_error(cli("show", "done", "1", "-s", store_url), "checkpoint 1", "not found")
    assert cli("show", "done", "-s", store_url).exit_code == 0  # the latest is still there
    again = cli("prune", "done", "--keep", "1", "--yes", "-s", store_url)
    assert again.exit_code == 0 and "pruned 0" in again.stdout


def test_rm_deletes_the_whole_run(store_url: str) -> None:
    result = cli("rm", "done", "--yes", "-s", store_url)
    assert result.exit_code == 0, result.output
    assert "deleted run done" in result.stdout
    runs = cli("runs", "-s", store_url).stdout
    assert "done" not in runs and "waiting" in runs
    assert_one_line_error(cli("show", "done", "-s", store_url), "run 'done' not found")


# -- help ----------------------------------------------------------------------------------------
def _commands() -> list[str]:
    return sorted(COMMANDS)


def test_every_documented_command_is_registered() -> None:
    assert {"runs", "ls", "show", "rm", "prune", "demo"} <= set(_commands())


@pytest.mark.parametrize("command", _commands())
def test_help_of_each_command(command: str) -> None:
    result = cli(command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout and "--help" in result.stdout
    assert "--storage" in result.stdout or command == "conformance"


def test_top_level_help_lists_the_commands() -> None:
    result = cli("--help")
    assert result.exit_code == 0
    for command in _commands():
        assert command in result.stdout


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["ls", "show", "rm"])
def test_unknown_run_is_a_one_line_error(store_url: str, command: str) -> None:
    assert_one_line_error(cli(command, "nope", "-s", store_url), "run 'nope' not found")


def test_prune_of_unknown_run_is_a_one_line_error(store_url: str) -> None:
    result = cli("prune", "nope", "--keep", "1", "-s", store_url)
    assert_one_line_error(result, "run 'nope' not found")


@pytest.mark.parametrize(
    ("checkpoint", "needle"),
    [
        ("abc", "checkpoint ids are numbers"),
        ("0", "invalid checkpoint id '0'"),
        ("99", "not found"),
    ],
)
def test_bad_checkpoint_id_is_a_one_line_error(
    store_url: str, checkpoint: str, needle: str
) -> None:
    assert_one_line_error(cli("show", "done", checkpoint, "-s", store_url), needle)


def test_run_without_checkpoint_is_a_one_line_error(store_url: str) -> None:
    assert_one_line_error(cli("show", "fresh", "-s", store_url), "no checkpoint yet")


def test_invalid_run_id_is_a_one_line_error(store_url: str) -> None:
    assert_one_line_error(cli("ls", "a\\b", "-s", store_url), "invalid run id")


@pytest.mark.parametrize("command", [["runs"], ["ls", "done"], ["show", "done"], ["rm", "done"]])
def test_bad_storage_url_is_a_one_line_error(command: list[str]) -> None:
    result = cli(*command, "--storage", "nosuch://somewhere")
    assert_one_line_error(result, "unknown storage scheme 'nosuch'", "known schemes")


def test_storage_url_password_is_not_printed() -> None:
    result = cli("runs", "--storage", "nosuch://alice:hunter2@host/x")
    assert_one_line_error(result, "unknown storage scheme")
    assert "hunter2" not in result.output + result.stderr


def test_negative_keep_is_refused_without_traceback(store_url: str) -> None:
    result = cli("prune", "done", "--keep", "-1", "-s", store_url)
    assert result.exit_code == 2  # a usage error
    assert "Traceback" not in result.output + result.stderr
    message = [line for line in result.stderr.splitlines() if "--keep" in line and "0" in line]
    assert len(message) == 1, result.stderr
    assert "greater than or equal to 0" in message[0]
    # and nothing was pruned
    assert "paused" in cli("ls", "done", "-s", store_url).stdout


MAIN = "from checkpointkit.cli import main; main()"


def test_error_through_the_console_script_has_no_traceback(store_url: str) -> None:
    """The installed entry point, in a real process: exit 1, one line on stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", MAIN, "show", "nope", "-s", store_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: run 'nope' not found"]


# -- demo ----------------------------------------------------------------------------------------
def test_demo_runs_fails_resumes_and_replays(tmp_path: Path) -> None:
    store = tmp_path / "demo"
    result = cli("demo", "--storage", str(store))
    assert result.exit_code == 0, result.output + result.stderr
    out: Any = result.stdout
    assert "replayed" in out
    assert "completed" in out
    runs = cli("runs", "-s", str(store), "-n", "demo")
    assert runs.exit_code == 0 and "completed" in runs.stdout

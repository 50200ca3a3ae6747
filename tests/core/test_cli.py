"""The ``checkpointkit`` command line over a real file store, with runs made by the runner.

Every command is driven through :func:`checkpointkit.cli.invoke` with captured
streams (one through a real subprocess); every bad input must end with a
non-zero exit and a one-line error, never a traceback.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
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


def cli(*args: str, env: dict[str, str] | None = None, stdin: io.StringIO | None = None) -> Result:
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
    assert {"runs", "ls", "show", "rm", "prune", "demo", "migrate"} <= set(_commands())


@pytest.mark.parametrize("command", _commands())
def test_help_of_each_command(command: str) -> None:
    result = cli(command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout and "--help" in result.stdout
    assert "--storage" in result.stdout or command in ("conformance", "migrate")


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


# -- scripting: --json, plain text, timestamps (issue 12, problem 5) ---------------------------
def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # exactly one JSON document, nothing else on stdout


def test_runs_json_is_one_document_with_the_documented_fields(store_url: str) -> None:
    doc = _json(cli("runs", "-s", store_url, "--json"))
    assert set(doc) == {"storage", "namespace", "runs"}
    runs = {r["run_id"]: r for r in doc["runs"]}
    assert list(runs) == ["done", "fresh", "waiting"]
    for entry in runs.values():
        assert set(entry) == {"run_id", "status", "checkpoint_id", "steps", "created_at", "pruned"}
    assert runs["done"]["status"] == "completed" and runs["done"]["checkpoint_id"] == "2"
    assert runs["done"]["steps"] == 2 and runs["done"]["pruned"] is False
    assert runs["fresh"]["status"] is None and runs["fresh"]["checkpoint_id"] is None
    assert runs["waiting"]["status"] == "paused"


def test_created_at_is_shown_by_runs_ls_and_show(store_url: str) -> None:
    async def stored() -> float:
        async with open_storage(store_url) as storage:
            latest = await CheckpointStore(storage).latest("done")
            assert latest is not None
            return latest.created_at

    when = datetime.fromtimestamp(asyncio.run(stored()), UTC)
    iso = when.isoformat()
    human = when.strftime("%Y-%m-%d %H:%M:%S UTC")
    runs = {r["run_id"]: r for r in _json(cli("runs", "-s", store_url, "--json"))["runs"]}
    assert runs["done"]["created_at"] == iso
    listing = _json(cli("ls", "done", "-s", store_url, "--json"))
    assert listing["checkpoints"][0]["created_at"] == iso
    assert _json(cli("show", "done", "-s", store_url, "--json"))["created_at"] == iso
    for command in (["runs"], ["ls", "done"], ["show", "done"]):
        assert human in cli(*command, "-s", store_url).stdout, command


@pytest.mark.parametrize(
    ("command", "fields"),
    [
        (["ls", "done"], {"run_id", "status", "pruned", "checkpoints", "steps"}),
        (
            ["show", "done"],
            {
                "run_id",
                "checkpoint_id",
                "status",
                "created_at",
                "state",
                "pending",
                "output",
                "error",
                "metadata",
                "parent_id",
                "steps",
                "pruned",
            },
        ),
        (["rm", "done", "--dry-run"], {"run_id", "dry_run", "keys", "deleted"}),
        (
            ["prune", "done", "--keep", "1", "--dry-run"],
            {"run_id", "keep", "dry_run", "checkpoints", "deleted"},
        ),
    ],
)
def test_every_run_command_prints_one_json_document(
    store_url: str, command: list[str], fields: set[str]
) -> None:
    doc = _json(cli(*command, "-s", store_url, "--json"))
    assert set(doc) == fields
    assert doc["run_id"] == "done"


def test_show_json_holds_the_decoded_checkpoint(store_url: str) -> None:
    doc = _json(cli("show", "done", "1", "-s", store_url, "--json"))
    assert doc["status"] == "paused" and doc["state"] == {"topic": "cats"}
    assert doc["pending"] == [
        {"id": "approve@0:0", "step": "approve@0", "payload": {"text": "draft about cats"}}
    ]


def test_demo_json_is_one_document_with_the_timeline(tmp_path: Path) -> None:
    doc = _json(cli("demo", "--storage", str(tmp_path / "demo"), "--json"))
    assert doc["status"] == "completed" and doc["output"] == "4 sources, 19 items"
    whats = [row["what"] for row in doc["timeline"]]
    assert whats.count("replayed from checkpoint") == 3


def test_an_error_with_json_is_a_json_document_and_one_line_on_stderr(store_url: str) -> None:
    result = cli("show", "nope", "-s", store_url, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"error": "run 'nope' not found", "exit_status": 1}
    assert result.stderr.strip() == "error: run 'nope' not found"


def test_json_values_that_json_lacks_are_converted(tmp_path: Path) -> None:
    url = str(tmp_path / "store")

    async def make() -> None:
        async with open_storage(url) as storage:
            store = CheckpointStore(storage)
            await store.create_run("odd", None)
            await store.save_checkpoint(
                "odd",
                status="paused",
                state={"raw": b"\x00\xff", "pair": (1, 2), 3: {"x"}, "when": datetime(2026, 1, 2)},
            )

    asyncio.run(make())
    doc = _json(cli("show", "odd", "-s", url, "--json"))
    assert doc["state"] == {
        "raw": "AP8=",  # base64
        "pair": [1, 2],
        "3": ["x"],
        "when": "2026-01-02T00:00:00",
    }


def test_output_is_plain_text_when_not_a_terminal(store_url: str) -> None:
    for command in (["runs"], ["ls", "done"], ["show", "done"]):
        out = cli(*command, "-s", store_url).output
        assert not any(c in out for c in "│┃━┏└"), out  # no box drawing
        assert "\x1b[" not in out  # no colour codes


def test_values_are_never_cut_at_a_narrow_terminal(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    long_id = "a-run-with-a-rather-long-identifier-" + "x" * 40

    async def make() -> None:
        async with open_storage(url) as storage:
            await Workflow(review, storage=storage).run("cats", run_id=long_id)

    asyncio.run(make())
    result = cli("runs", "-s", url, env={"COLUMNS": "40"})
    assert result.exit_code == 0
    assert long_id in result.stdout and "paused" in result.stdout


# -- guarded deleting (problem 6) --------------------------------------------------------------
class _Terminal(io.StringIO):
    """Standard input that a person types into."""

    def isatty(self) -> bool:
        return True


def _checkpoint_ids(url: str, run: str) -> list[str]:
    return [c["checkpoint_id"] for c in _json(cli("ls", run, "-s", url, "--json"))["checkpoints"]]


def test_rm_dry_run_lists_the_keys_and_deletes_nothing(store_url: str) -> None:
    result = cli("rm", "done", "--dry-run", "-s", store_url)
    assert result.exit_code == 0, result.output
    assert "would delete run done" in result.stdout and "runs/done/input" in result.stdout
    assert "done" in [r["run_id"] for r in _json(cli("runs", "-s", store_url, "--json"))["runs"]]


def test_prune_dry_run_names_the_checkpoints_and_deletes_nothing(store_url: str) -> None:
    result = cli("prune", "done", "--keep", "0", "--dry-run", "-s", store_url)
    assert result.exit_code == 0, result.output
    assert "would prune 2 checkpoint(s)" in result.stdout and "ids: 2, 1" in result.stdout
    assert _checkpoint_ids(store_url, "done") == ["2", "1"]


@pytest.mark.parametrize("command", [["rm", "done"], ["prune", "done", "--keep", "0"]])
def test_deleting_without_yes_off_a_terminal_is_refused(store_url: str, command: list[str]) -> None:
    result = cli(*command, "-s", store_url)
    assert_one_line_error(result, "--yes", "not confirmed")
    assert result.exit_code == 2
    assert _checkpoint_ids(store_url, "done") == ["2", "1"]  # nothing deleted


@pytest.mark.parametrize("command", [["rm", "done"], ["prune", "done", "--keep", "0"]])
def test_deleting_asks_and_an_answer_other_than_yes_keeps_everything(
    store_url: str, command: list[str]
) -> None:
    result = cli(*command, "-s", store_url, stdin=_Terminal("n\n"))
    assert result.exit_code == 1
    assert "[y/N]" in result.stderr and "nothing deleted" in result.stderr
    assert _checkpoint_ids(store_url, "done") == ["2", "1"]


def test_rm_asks_and_yes_deletes(store_url: str) -> None:
    result = cli("rm", "done", "-s", store_url, stdin=_Terminal("y\n"))
    assert result.exit_code == 0, result.output
    assert "delete run 'done'" in result.stderr and "deleted run done" in result.stdout
    assert_one_line_error(cli("show", "done", "-s", store_url), "run 'done' not found")


def test_prune_keep_zero_keeps_the_run_and_its_status_readable(store_url: str) -> None:
    result = cli("prune", "done", "--keep", "0", "--yes", "-s", store_url)
    assert result.exit_code == 0 and "pruned 2 checkpoint(s)" in result.stdout
    assert _checkpoint_ids(store_url, "done") == []
    runs = {r["run_id"]: r for r in _json(cli("runs", "-s", store_url, "--json"))["runs"]}
    assert runs["done"]["status"] == "completed" and runs["done"]["pruned"] is True
    assert runs["done"]["checkpoint_id"] == "2"
    listing = cli("runs", "-s", store_url).stdout
    row = next(line for line in listing.splitlines() if line.startswith("done "))
    assert "completed (checkpoints pruned)" in row and "running or crashed" not in row
    shown = cli("show", "done", "-s", store_url)
    assert shown.exit_code == 0, shown.output
    assert "status completed" in shown.stdout and "no checkpoint yet" not in shown.output
    doc = _json(cli("show", "done", "-s", store_url, "--json"))
    created = runs["done"]["created_at"]
    assert created is not None and created.startswith("20")  # the head keeps the time too
    assert doc == {
        "run_id": "done",
        "checkpoint_id": "2",
        "status": "completed",
        "created_at": created,
        "pruned": True,
    }
    assert _json(cli("ls", "done", "-s", store_url, "--json"))["status"] == "completed"


# -- exit status, --version, -h (problem 7) ----------------------------------------------------
def test_version_and_short_help() -> None:
    version = cli("--version")
    assert version.exit_code == 0 and version.stdout.strip() == f"checkpointkit {_version()}"
    for args in (["-h"], ["runs", "-h"]):
        result = cli(*args)
        assert result.exit_code == 0 and "Usage:" in result.stdout


def _version() -> str:
    from importlib.metadata import version

    return version("checkpointkit")


def test_no_command_prints_the_help_and_exits_two() -> None:
    result = cli()
    assert result.exit_code == 2 and "Usage:" in result.stderr


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["runs", "--bogus"], 2),  # bad command line
        (["runs", "-s", "nosuch://x"], 2),  # unknown scheme: environment
        (["show", "nope"], 1),  # the command ran and found nothing
        (["show", "done", "99"], 1),
    ],
)
def test_exit_status_follows_the_documented_table(
    store_url: str, args: list[str], status: int
) -> None:
    if "-s" not in args:
        args = [*args, "-s", store_url]
    result = cli(*args)
    assert result.exit_code == status, result.output
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1


def test_missing_storage_directory_exits_two(tmp_path: Path) -> None:
    assert cli("runs", "-s", str(tmp_path / "nope")).exit_code == 2


def test_every_exit_status_is_documented_in_one_table() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    table = doc[doc.index("## Exit status") :]
    for status in ("| 0 |", "| 1 |", "| 2 |"):
        assert status in table


# -- a missing extra is named, from the command line (problem 2) --------------------------------
BLOCKED_RUN = """
import sys

class Missing:
    # Imports of these packages fail as if they were not installed.
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing(sys.argv[1].split(",")))
del sys.argv[1]
from checkpointkit.cli import main
main()
"""


@pytest.mark.parametrize(
    ("missing", "args", "extra"),
    [
        ("aioboto3", ["runs", "-s", "s3://bucket/p"], "checkpointkit[s3]"),
        ("redis", ["runs", "-s", "redis://127.0.0.1:1/0"], "checkpointkit[redis]"),
        ("azure", ["runs", "-s", "az://container/p"], "checkpointkit[azure]"),
        ("pytest_asyncio", ["conformance", "memory"], "checkpointkit[conformance]"),
        ("pytest", ["conformance", "memory"], "checkpointkit[conformance]"),
    ],
)
def test_a_missing_extra_is_named_in_the_cli_error(
    missing: str, args: list[str], extra: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN, missing, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "40"},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f'pip install "{extra}"' in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr

"""The model group: it catches broken adapters that every other group passes, passes their
correct twin, prints a replayable seed and a script that replays the minimal program, and
keeps to its budget. (The built-in adapters run the group in their conformance files.)

CI runs one rotating seed per broken adapter; ``CHECKPOINTKIT_MODEL_PROOF=1`` runs ten.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkpointkit.conformance import GROUPS, Report, Target, run
from checkpointkit.conformance.model import PROGRAM_LIMIT, _Search, execute
from checkpointkit.conformance.programs import (
    CloseDuring,
    DeleteMany,
    List,
    Program,
    ProgramOptions,
    Put,
    replay_script,
)
from checkpointkit.conformance.seed import MODEL_SEED_ENV
from checkpointkit.errors import ConfigurationError

from .broken.adapters import IOMemoryStorage
from .broken.kv_dict import (
    BatchLandsAfterCancel,
    DeleteManyCutOffByClose,
    LockKeptByACancelledCall,
)
from .broken.model_bugs import (
    DeleteManyCountsRepeats,
    DeleteManyLeavesTombstones,
    ListSkipsAfterMissingStartAfter,
    OffsetPagedListing,
    Utf16Order,
    VersionsRestartAfterDeleteMany,
)

HERE = Path(__file__).parent
MODEL = "test_random_programs_fit_the_protocol_model"
PROOF = os.environ.get("CHECKPOINTKIT_MODEL_PROOF") == "1"
RUNS = 10 if PROOF else 1
BUDGET = 30.0
"""The budget of a run against a broken adapter: it stops at the first failure."""

BUGS = {
    "delete-many-counts-repeats": DeleteManyCountsRepeats,
    "list-skips-after-missing-start-after": ListSkipsAfterMissingStartAfter,
    "utf16-order": Utf16Order,
    "delete-many-leaves-tombstones": DeleteManyLeavesTombstones,
    "versions-restart-after-delete-many": VersionsRestartAfterDeleteMany,
    # since a delete_many may be cancelled at a drawn point (the other groups catch it too)
    "batch-delete-lands-after-cancel": BatchLandsAfterCancel,
}

MODEL_ONLY = ["versions-restart-after-delete-many"]
"""The broken adapters that every other group passes (semantics also catches list-skips and,
since the corpus's pitfall tests, delete-many-counts-repeats; since the key-shape sweep has
keys either side of U+FFFF, utf16-order)."""


def seeds() -> list[int]:
    """Ten seeds for the proof; else one, rotating by the day."""
    if PROOF:
        return list(range(RUNS))
    return [datetime.date.today().toordinal() % 1000]


@pytest.mark.parametrize("bug", list(BUGS))
async def test_model_group_fails_each_broken_adapter_within_a_minute(
    bug: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for seed in seeds():
        monkeypatch.setenv(MODEL_SEED_ENV, str(seed))
        start = time.monotonic()
        report = await run(Target(BUGS[bug], name=bug), groups=["model"], model_budget=BUDGET)
        took = time.monotonic() - start
        assert MODEL in report.failed_names(), f"seed {seed}:\n{report.summary()}"
        reason = report.result(MODEL).reason
        assert "--checkpointkit-model-seed " in reason and "python replay.py SPEC" in reason
        assert took < 60, f"seed {seed}: the failure took {took:.1f} s"


@pytest.mark.parametrize("bug", MODEL_ONLY)
async def test_other_groups_pass_the_broken_adapters_the_model_group_fails(bug: str) -> None:
    # Each is wrong only where the hand-written tests do not look: the proof that the
    # model group finds what they miss.
    if not PROOF and bug != MODEL_ONLY[datetime.date.today().toordinal() % len(MODEL_ONLY)]:
        pytest.skip("CI runs one broken adapter a day through the other groups")
    others = [g for g in GROUPS if g != "model"]
    report = await run(Target(BUGS[bug], name=bug), groups=others)
    assert report.ok, report.summary()


async def test_model_group_passes_the_correct_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in seeds():
        monkeypatch.setenv(MODEL_SEED_ENV, str(seed))
        budget = BUDGET if PROOF else 3.0
        report: Report = await run(
            Target(IOMemoryStorage, name="io-memory"), groups=["model"], model_budget=budget
        )
        assert report.ok, f"seed {seed}:\n{report.summary()}"
        assert report.result(MODEL).outcome == "passed"


def _script_of(reason: str) -> str:
    start = reason.index('"""Replay of a program')
    return reason[start:]


async def test_failure_prints_a_script_that_replays_the_minimal_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MODEL_SEED_ENV, "3")
    report = await run(
        Target(DeleteManyCountsRepeats, name="counts-repeats"), groups=["model"],
        model_budget=BUDGET,
    )  # fmt: skip
    reason = report.result(MODEL).reason
    assert "delete_many must return how many of the keys existed" in reason
    assert "seed 3: replay the search with --checkpointkit-model-seed 3" in reason
    script = tmp_path / "replay.py"
    script.write_text(_script_of(reason))
    program = re.search(r"PROGRAM = Program\(.*?\n\)\n", script.read_text(), re.S)
    assert program is not None and "DeleteMany(" in program.group(0)
    env = {**os.environ, "PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def replay(spec: str) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, str(script), spec]
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)

    broken = await asyncio.to_thread(replay, "broken.model_bugs:DeleteManyCountsRepeats")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "delete_many must return how many of the keys existed" in broken.stdout
    twin = await asyncio.to_thread(replay, "broken.adapters:IOMemoryStorage")
    assert twin.returncode == 0, twin.stdout + twin.stderr
    assert "every answer fit the model" in twin.stdout


def test_replay_script_is_python_that_builds_the_same_program() -> None:
    program = Program((Put("a", 3, "if-match", "stale", 2), DeleteMany(("a", "a"))), 2)
    script = replay_script(program, seed=7, why='a "quoted" """reason"""\nsecond line')
    compile(script, "replay.py", "exec")
    namespace: dict[str, object] = {}
    body = script.split("\nsys.exit(")[0]
    exec(body, namespace)
    assert namespace["PROGRAM"] == program


def test_model_seed_replays_the_same_programs() -> None:
    def programs_of(seed: int) -> list[Program]:
        drawn: list[Program] = []
        search = _Search(drawn.append, ProgramOptions(), seed, budget=0.5)
        search.search()
        return drawn

    first, again, other = programs_of(11), programs_of(11), programs_of(12)
    assert len(first) >= 10
    n = min(len(first), len(again))
    assert first[:n] == again[:n]
    assert first[:n] != other[: min(n, len(other))]


async def test_model_budget_bounds_the_run_and_zero_skips_it() -> None:
    start = time.monotonic()
    report = await run(Target(IOMemoryStorage, name="io"), groups=["model"], model_budget=2)
    took = time.monotonic() - start
    assert report.ok, report.summary()
    assert 2 <= took < 30, took  # the budget, and a generous bound on the rest
    skipped = await run(Target(IOMemoryStorage, name="io"), groups=["model"], model_budget=0)
    assert skipped.result(MODEL).outcome == "skipped"
    assert "budget is 0" in skipped.result(MODEL).reason


async def test_model_group_fails_a_storage_whose_calls_hang_and_stops_its_search() -> None:
    """A storage whose calls wait forever once one was cancelled (a lock the cancelled call
    kept): the model group fails it within its limit per program, saying that a program
    never finished, and no program of its search runs after the test (before, the search
    went on in its thread past the test's time limit, and the event loop's shutdown
    waited for it forever)."""
    start = time.monotonic()
    report = await run(
        Target(LockKeptByACancelledCall, name="lock-kept"), groups=["model"], model_budget=5
    )
    took = time.monotonic() - start
    result = report.result(MODEL)
    assert result.outcome == "failed", report.summary()
    assert f"a program did not finish within {PROGRAM_LIMIT:g} s" in result.reason
    assert took < PROGRAM_LIMIT + 30, took


async def test_model_budget_that_is_not_seconds_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="model_budget must be a number of seconds"):
        await run("memory", groups=["model"], model_budget=-1)
    with pytest.raises(ConfigurationError, match="model_budget"):
        Target(IOMemoryStorage, model_budget=float("nan"))


def test_cli_and_plugin_take_the_model_budget_and_seed(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cli = [sys.executable, "-c", "from checkpointkit.cli import main; main()", "conformance"]
    out = subprocess.run(
        [*cli, "memory", "--group", "model", "--model-budget", "0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "budget is 0" in out.stdout
    plugin = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
        "--checkpointkit-storage", "broken.model_bugs:DeleteManyCountsRepeats",
        "--checkpointkit-group", "model", "--checkpointkit-model-budget", "20",
        "--checkpointkit-model-seed", "5",
    ]  # fmt: skip
    out = subprocess.run(plugin, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "--checkpointkit-model-seed 5" in out.stdout


async def test_listing_check_names_a_skipped_key() -> None:
    # The smallest program of the start_after bug, run once: the model's listing check
    # names the key the listing left out.
    program = Program((Put("a/b", 1), List("", "a")), None)
    target = Target(ListSkipsAfterMissingStartAfter)
    with pytest.raises(AssertionError, match=r"'a/b' is missing"):
        await execute(program, target, ListSkipsAfterMissingStartAfter.capabilities)
    await execute(program, Target(IOMemoryStorage), IOMemoryStorage.capabilities)


async def test_failure_quoted_in_the_docs_is_what_the_model_reports() -> None:
    program = Program((Put("a", 1), DeleteMany(("a", "a"))), None)
    with pytest.raises(AssertionError) as raised:
        await execute(program, Target(DeleteManyCountsRepeats), IOMemoryStorage.capabilities)
    text = (HERE.parents[1] / "docs" / "conformance.md").read_text(encoding="utf-8")
    block = text.split("```text\ndelete_many must return", 1)[1].split("```", 1)[0]
    first, _, rest = ("delete_many must return" + block).partition("\n")
    assert str(raised.value).startswith(first.rstrip(".")), str(raised.value)
    quoted = rest.split("...\n", 1)[1]
    assert quoted in replay_script(program, seed=3, why="")


async def test_concurrency_group_fails_a_listing_that_pages_by_offset() -> None:
    name = "test_paged_listing_under_concurrent_writes_returns_each_lasting_key_once"
    for _ in range(RUNS if PROOF else 1):
        report = await run(Target(OffsetPagedListing, name="offset"), groups=["concurrency"],
                           pattern=name)  # fmt: skip
        assert name in report.failed_names(), report.summary()
        twin = await run(Target(IOMemoryStorage, name="io"), groups=["concurrency"], pattern=name)
        assert twin.ok, twin.summary()


async def test_a_delete_many_that_aclose_cuts_off_with_outcome_unknown_passes() -> None:
    # close.in-flight: a write that aclose() cut off may raise OutcomeUnknown. The model
    # group took a delete_many's OutcomeUnknown for the program's own error (a blind
    # round's psycopg adapter met it, 2026-12-06); a put's and a delete's it recorded.
    program = Program(
        (Put("a", 1), Put("b", 1), CloseDuring(((DeleteMany(("a", "b")),),), after=1)), None
    )
    target = Target(DeleteManyCutOffByClose, name="delete_many cut off by aclose")
    await execute(program, target, DeleteManyCutOffByClose.capabilities)

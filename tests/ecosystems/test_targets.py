"""The ecosystem targets: SPECs from the CLI, pytest and Python, and every factory form."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage
from checkpointkit.conformance import run
from checkpointkit.conformance.ecosystems import EcosystemTarget, resolve_ecosystem_target
from checkpointkit.conformance.ecosystems.langgraph import SaverIsolationTests
from checkpointkit.errors import ConfigurationError
from langgraph.checkpoint.memory import InMemorySaver

CLI = [sys.executable, "-c", "from checkpointkit.cli import main; main()", "conformance"]
LANGGRAPH = "langgraph:langgraph.checkpoint.memory:InMemorySaver"
AGENT_FRAMEWORK = "agent-framework:agent_framework:InMemoryCheckpointStorage"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_cli_prints_a_report_for_langgraphs_in_memory_saver(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = _run([*CLI, LANGGRAPH, "--group", "isolation", "--json", str(out)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Conformance of langgraph:langgraph.checkpoint.memory:InMemorySaver" in done.stdout
    assert "isolation" in done.stdout and "langgraph 1." in done.stdout
    report = json.loads(out.read_text())
    assert report["groups"]["isolation"]["passed"] == 3
    assert report["about"]["ecosystem"].startswith("langgraph")


def test_cli_prints_a_report_for_agent_frameworks_in_memory_storage(tmp_path: Path) -> None:
    done = _run([*CLI, AGENT_FRAMEWORK, "--group", "semantics", "--group", "isolation"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Conformance of agent-framework:agent_framework:InMemoryCheckpointStorage" in done.stdout
    assert "agent-framework-core 1." in done.stdout


def test_cli_rejects_a_bad_ecosystem_spec_with_exit_status_two(tmp_path: Path) -> None:
    done = _run([*CLI, "langgraph:no_such_module_x:Saver"], tmp_path)
    assert done.returncode == 2
    assert "cannot import 'no_such_module_x'" in done.stderr
    done = _run([*CLI, "langgraph:langgraph.checkpoint.memory"], tmp_path)
    assert done.returncode == 2 and "MODULE:ATTR" in done.stderr


def test_pytest_plugin_runs_the_saver_groups_against_a_spec(tmp_path: Path) -> None:
    done = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--checkpointkit-storage",
            LANGGRAPH,
            "--checkpointkit-group",
            "isolation",
            "-q",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


class TestSubclassOfTheSaverGroups(SaverIsolationTests):
    """A user's test file: one fixture, an empty class."""

    @pytest.fixture
    def saver_factory(self) -> Any:
        return InMemorySaver


def test_spec_resolves_a_class_and_names_what_is_wrong() -> None:
    target = resolve_ecosystem_target(LANGGRAPH)
    assert target.ecosystem == "langgraph" and target.factory is InMemorySaver
    assert target.spec == "langgraph.checkpoint.memory:InMemorySaver" and not target.reopens
    with pytest.raises(ConfigurationError, match="has no attribute 'Nope'"):
        resolve_ecosystem_target("agent-framework:agent_framework:Nope")
    with pytest.raises(ConfigurationError, match="neither a factory nor an EcosystemTarget"):
        resolve_ecosystem_target("langgraph:langgraph.checkpoint.memory:__name__")
    with pytest.raises(ConfigurationError, match="needs its ecosystem"):
        resolve_ecosystem_target(InMemorySaver)  # type: ignore[arg-type]


async def test_run_accepts_every_factory_form_and_location() -> None:
    stores: dict[str, InMemoryCheckpointStorage] = {}

    def shared(*, location: str) -> InMemoryCheckpointStorage:
        return stores.setdefault(location, InMemoryCheckpointStorage())

    async def generator() -> AsyncIterator[InMemoryCheckpointStorage]:
        yield InMemoryCheckpointStorage()

    @asynccontextmanager
    async def context() -> AsyncIterator[InMemoryCheckpointStorage]:
        yield InMemoryCheckpointStorage()

    async def awaitable() -> InMemoryCheckpointStorage:
        return InMemoryCheckpointStorage()

    for factory in (InMemoryCheckpointStorage, shared, generator, context, awaitable):
        report = await run(factory, groups=["semantics"], ecosystem="agent-framework")
        assert report.ok, report.summary()
        # ten protocol tests and the nine coverage sweeps (the two through a second
        # instance need a location)
        reopens = EcosystemTarget("agent-framework", factory).reopens
        assert report.groups()["semantics"].passed == (19 if reopens else 17)
    assert EcosystemTarget("agent-framework", shared).reopens and stores


async def test_run_reports_a_factory_giving_the_wrong_kind() -> None:
    report = await run(lambda: object(), groups=["semantics"], ecosystem="langgraph")
    assert not report.ok
    assert "neither a LangGraph checkpointer" in report.errors[0]


async def test_an_ecosystem_tests_time_limit_is_not_the_last_storage_targets() -> None:
    """A storage target's ``time_limit`` holds for its own run only: an ecosystem run after
    it in the same process keeps its own limit (60 s). Once, a storage run with a 0.3 s limit
    failed the next ecosystem run's tests as hung after 0.3 s."""
    from checkpointkit.adapters.memory import MemoryStorage
    from checkpointkit.conformance import Target

    from . import broken

    tight = Target(MemoryStorage, name="memory with a 0.3 s limit", time_limit=0.3)
    first = await run(tight, groups=["semantics"], pattern="test_small_value_round_trips")
    assert first.ok and first.results, first.summary()
    # watches the cancelled aput for its settle window (0.3 s) after the cancel: over 0.3 s
    second = await run(
        broken.target(broken.HeldSaver, "langgraph"),
        groups=["cancellation"],
        pattern="test_cancelled_aput_does_not_land_later",
    )
    assert second.ok and second.results, second.summary()

"""The four ways into the suite run the same tests: the pytest plugin, the command line,
the Python API and subclassing (the last in the adapters' own conformance files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from checkpointkit.conformance import GROUPS, Report, StorageConformance, Target, run
from checkpointkit.conformance.suite import GROUP_CLASSES
from checkpointkit.errors import ConfigurationError

HERE = Path(__file__).parent
CLI = [sys.executable, "-c", "from checkpointkit.cli import main; main()", "conformance"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "200"
    return env


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)


def test_every_group_has_a_mixin_and_the_suite_combines_them() -> None:
    assert tuple(GROUP_CLASSES) == GROUPS
    for cls in GROUP_CLASSES.values():
        assert issubclass(StorageConformance, cls)
        assert cls.conformance_group in GROUPS


def test_cli_reports_passes_writes_json_and_junit_and_exits_zero(tmp_path: Path) -> None:
    out = _run(
        [
            *CLI,
            "memory",
            "--group",
            "semantics",
            "-k",
            "round_trip",
            "--json",
            "r.json",
            "--junit-xml",
            "r.xml",
        ],
        tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "semantics" in out.stdout and "Conformance level" in out.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ok"] is True
    assert data["groups"]["semantics"]["failed"] == 0
    assert data["groups"]["semantics"]["passed"] >= 5
    assert {t["name"] for t in data["tests"]} >= {
        "test_empty_value_round_trips",
        "test_16_mib_value_round_trips",
    }
    assert "put" in data["latency_ms"]
    suites = ET.parse(tmp_path / "r.xml").getroot()
    assert suites.tag == "testsuites" and suites.get("failures") == "0"
    assert [s.get("name") for s in suites] == ["semantics"]


def test_cli_exits_non_zero_and_explains_a_failure(tmp_path: Path) -> None:
    out = _run(
        [
            *CLI,
            "broken.adapters:CreateOverwrites",
            "--group",
            "semantics",
            "-k",
            "create_only",
            "--json",
            "r.json",
        ],
        tmp_path,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "test_create_only_rejects_existing_key" in out.stdout
    assert "PreconditionFailed" in out.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    failed = {t["name"]: t for t in data["tests"] if t["outcome"] == "failed"}
    assert "test_create_only_rejects_existing_key" in failed
    assert "key 'c'" in failed["test_create_only_rejects_existing_key"]["reason"]
    assert data["level"] is None and data["rated"] is False  # one group ran: not rated
    assert data["level_reason"] == "not rated: only semantics ran"


def test_cli_rejects_a_bad_spec_with_exit_status_two(tmp_path: Path) -> None:
    out = _run([*CLI, "no such thing"], tmp_path)
    assert out.returncode == 2
    assert "module:factory" in out.stderr
    out = _run([*CLI, "memory", "--group", "nonsense"], tmp_path)
    assert out.returncode == 2
    assert "unknown conformance group 'nonsense'" in out.stderr


def test_cli_with_no_matching_test_exits_five_as_pytest_does(tmp_path: Path) -> None:
    out = _run([*CLI, "memory", "-k", "no_test_has_this_name"], tmp_path)
    assert out.returncode == 5  # pytest's "no tests collected"
    assert "no test was selected" in out.stderr


def test_pytest_plugin_runs_the_suite_against_a_spec(tmp_path: Path) -> None:
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--checkpointkit-storage",
        "file",
        "--checkpointkit-group",
        "capabilities",
    ]
    out = _run(args, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    # ttl (eleven tests) and indexed_list: not declared; the death of a writing process runs:
    # the file spec's child rebuilds a location's directory from the target's spec
    assert "6 passed, 14 skipped" in out.stdout


def test_pytest_plugin_fails_on_a_broken_factory(tmp_path: Path) -> None:
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--checkpointkit-storage",
        "broken.adapters:ListLeaksOutsidePrefix",
        "--checkpointkit-group",
        "semantics",
        "-k",
        "prefix",
    ]
    out = _run(args, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "test_list_prefix_isolates_keys" in out.stdout
    assert "list must return only keys under the prefix" in out.stdout


async def test_run_accepts_factories_of_every_form() -> None:
    from contextlib import asynccontextmanager

    from checkpointkit.adapters.memory import MemoryStorage

    async def agen() -> object:
        async with MemoryStorage() as s:
            yield s

    @asynccontextmanager
    async def cm() -> object:
        async with MemoryStorage() as s:
            yield s

    async def coro() -> MemoryStorage:
        return MemoryStorage()

    for factory in (MemoryStorage, agen, cm, coro, lambda: MemoryStorage()):
        report = await run(factory, groups=["semantics"], pattern="small_value")
        assert report.ok, report.summary()
        assert [r.name for r in report.results] == ["test_small_value_round_trips"]


async def test_run_reports_a_target_that_cannot_open() -> None:
    def broken() -> object:
        raise OSError("the backend is down")

    report = await run(Target(broken, name="down"), groups=["semantics"])
    assert not report.ok and report.level == "none"
    assert "could not be opened" in report.errors[0] and "the backend is down" in report.errors[0]
    assert "error" in report.to_junit_xml()


async def test_run_rejects_unknown_groups_and_specs() -> None:
    with pytest.raises(ConfigurationError, match="unknown conformance group"):
        await run("memory", groups=["semantic"])
    with pytest.raises(ConfigurationError, match="cannot import"):
        await run("no_such_module_here:factory")


def test_report_levels() -> None:
    from checkpointkit.conformance.report import TestResult

    def report(*outcomes: tuple[str, str]) -> Report:
        return Report(
            "t", results=[TestResult(f"test_{i}", g, o) for i, (g, o) in enumerate(outcomes)]
        )  # type: ignore[arg-type]

    every = [(g, "passed") for g in GROUPS]
    assert report(*every).level == "full"
    assert report(*every, ("capabilities", "skipped")).level == "full"
    assert report(*every, ("lifecycle", "failed")).level == "basic"
    assert report(("semantics", "passed"), ("bad-input", "passed")).level == "basic"
    assert report(*every, ("bad-input", "failed")).level == "none"
    assert report(("semantics", "passed")).level == "none"
    assert report().ok is False


SUBCLASSES = """
import pytest
import pytest_asyncio
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance import CapabilityTests, SemanticsTests


class TestOnlyStorageOverridden(SemanticsTests, CapabilityTests):
    @pytest_asyncio.fixture
    async def storage(self):
        async with MemoryStorage() as s:
            yield s


class TestNothingOverridden(SemanticsTests):
    pass
"""


def test_subclasses_may_override_storage_alone_and_are_told_what_to_override(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_subclasses.py").write_text(SUBCLASSES)
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "-k",
        "small_value or shared or durable",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    ]
    out = _run(args, tmp_path)
    assert "1 passed, 3 skipped" in out.stdout and "1 error" in out.stdout, out.stdout
    assert "overrides only the storage fixture" in out.stdout, out.stdout
    assert "override the storage_factory fixture" in out.stdout, out.stdout
    assert out.returncode == 1  # TestNothingOverridden errors: nothing to test against


def test_a_spec_is_recorded_for_a_child_process_and_never_shown() -> None:
    """`resolve_target` keeps the SPEC string (the durability test's child process rebuilds
    the target from it, through its environment, not its command line); a password in it
    appears in no repr."""
    from checkpointkit.conformance.target import resolve_target

    url = "postgresql://user:secret-pw@127.0.0.1:5/db"
    target = resolve_target(url)
    assert target.spec == url
    assert "secret-pw" not in repr(target) and "secret-pw" not in target.name
    assert resolve_target("memory").spec is None  # in-process data: nothing to rebuild

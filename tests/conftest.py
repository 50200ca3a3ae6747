"""Project-wide test configuration. Fixtures of one area live in that area's folder."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import pytest

BUILT_IN_TARGETS = (
    "memory",
    "sqlite",
    "file",
    "redis standalone",
    "redis cluster",
    "postgres",
    "s3 (moto, object_names=keys)",
    "s3 (seaweedfs, object_names=flat)",
    "azure (Azurite)",
)
"""The conformance targets of the built-in adapters: a whole run of the project's tests must
exercise every reachable coverage cell of each (issue 17)."""

_OUTPUT = "checkpointkit_coverage"


def _dump() -> str:
    # the storage targets' coverage (an ecosystem target's is checked by its own tests)
    from checkpointkit.conformance.coverage import Reach, coverage

    out: dict[str, Any] = {}
    for name in coverage.targets():
        snapshot = coverage.snapshot(name)
        if snapshot is not None and isinstance(snapshot[0], Reach):
            reach, cells = snapshot
            out[name] = {
                "reach": dataclasses.asdict(reach),  # capabilities as a dict too
                "cells": sorted(cells),
            }
    return json.dumps(out)


def _load(text: str) -> None:
    from checkpointkit.conformance.coverage import Reach, coverage
    from checkpointkit.storage import Capabilities

    for name, data in json.loads(text).items():
        fields = dict(data["reach"])
        fields["capabilities"] = Capabilities(**fields["capabilities"])
        coverage.merge(name, Reach(**fields), (tuple(c) for c in data["cells"]))


def _whole_run(config: pytest.Config) -> bool:
    """No selection: the default test paths, no -k, no -m."""
    opt = config.option
    explicit = [a for a in config.args if a not in ("tests", str(config.rootpath / "tests"))]
    return not (explicit or getattr(opt, "keyword", "") or getattr(opt, "markexpr", ""))


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown with -p no:xdist
def pytest_testnodedown(node: Any, error: Any) -> None:
    """A pytest-xdist worker ended: take the coverage it recorded."""
    output = getattr(node, "workeroutput", {})
    text = output.get(_OUTPUT)
    if text:
        _load(text)
    counts = output.get(_EXAMPLE_COUNTS)
    if counts:  # every worker collects every test: the same counts
        _example_counts[:] = counts


_EXAMPLE = "tests/conformance/test_sqlite_example.py::TestSQLiteConformance::"
"""The worked example's own conformance tests, whose output docs/writing-an-adapter.md shows."""
_EXAMPLE_COUNTS = "checkpointkit_example_counts"
_example_counts = [0, 0]  # the example's tests collected, and selected (-k, -m deselect some)
_example_outcomes: dict[str, str] = {}  # the example's tests that ended -> passed/skipped/failed


def _example_tests(items: list[pytest.Item]) -> int:
    return sum(item.nodeid.startswith(_EXAMPLE) for item in items)


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    _example_counts[0] = _example_tests(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    _example_counts[1] = _example_tests(session.items)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Tally the example's outcomes (on the pytest-xdist controller, every worker's)."""
    if not report.nodeid.startswith(_EXAMPLE):
        return
    if report.failed:
        _example_outcomes[report.nodeid] = "failed"
    elif report.skipped:
        _example_outcomes[report.nodeid] = "skipped"
    elif report.when == "call":
        _example_outcomes.setdefault(report.nodeid, "passed")


def _example_output() -> list[str]:
    """Where the example's whole suite ran and passed: what docs/writing-an-adapter.md shows
    of ``pytest -q`` in the example that differs from what it gave here."""
    collected, selected = _example_counts
    outcomes = list(_example_outcomes.values())
    if not collected or selected != collected or len(outcomes) != collected:
        return []  # not the whole example suite, or not all of it ended
    if "failed" in outcomes:
        return []  # the failures are the news
    import re
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs" / "writing-an-adapter.md").read_text()
    block = re.search(r"^\$ pytest -q\n(.*?)^```", page, re.S | re.M)
    text = block[1] if block else ""
    progress = "".join(re.findall(r"^([.s]+) +\[ *\d+%\]$", text, re.M))
    summary = re.search(r"^(\d+) passed, (\d+) skipped$", text, re.M)
    shown = summary[0] if summary else None
    passed, skipped = outcomes.count("passed"), outcomes.count("skipped")
    measured = f"{passed} passed, {skipped} skipped"
    lines = []
    if shown != measured:
        lines.append(f"docs/writing-an-adapter.md shows {shown!r}, measured {measured!r}")
    if (progress.count("."), progress.count("s")) != (passed, skipped):
        lines.append(
            f"docs/writing-an-adapter.md's progress lines show {progress.count('.')} passed "
            f"and {progress.count('s')} skipped, measured {passed} and {skipped}"
        )
    return lines


@pytest.hookimpl(tryfirst=True)  # a worker's output is sent by pytest-xdist's own hook
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Each built-in adapter's conformance run left no reachable coverage cell unexercised,
    and the worked example's output in the docs is what its suite gave."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: hand it to the controller
        workeroutput[_OUTPUT] = _dump()
        workeroutput[_EXAMPLE_COUNTS] = list(_example_counts)
        return
    example = _example_output()
    if example:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "the worked example's output (docs/writing-an-adapter.md)")
            for line in example:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    from checkpointkit.conformance.coverage import coverage

    # CHECKPOINTKIT_COVERAGE_CHECK=1: check the built-in targets that ran, in any selection
    partial = os.environ.get("CHECKPOINTKIT_COVERAGE_CHECK") == "1"
    if not (partial or _whole_run(session.config)) or exitstatus not in (0, 1):
        return
    lines, failing = [], False
    for name in BUILT_IN_TARGETS:
        result = coverage.result(name)
        if result is None and partial:
            continue
        if result is None:
            lines.append(f"{name}: its conformance suite did not run")
            failing = True
            continue
        done, total = result.counts()
        lines.append(f"{name}: {done} of {total} reachable cells exercised")
        for cell in result.missing:
            lines.append(f"  not exercised: {' / '.join(cell)}")
            failing = True
    shown = _coverage_table()
    for name in BUILT_IN_TARGETS:
        result = coverage.result(name)
        if result is not None and not partial:
            done, total = result.counts()
            if shown.get(name) != f"{done} of {total}":
                lines.append(
                    f"{name}: docs/conformance.md shows {shown.get(name)!r}, measured "
                    f"'{done} of {total}' (update the coverage table)"
                )
                failing = True
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "protocol coverage of the built-in adapters (issue 17)")
        for line in lines:
            reporter.write_line(line)
    if failing:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _coverage_table() -> dict[str, str]:
    """The built-in adapters' row of docs/conformance.md's coverage table: name -> 'N of M'."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs" / "conformance.md").read_text()
    table = re.search(r"<!-- coverage-table:.*?-->\n(.*?)<!-- /coverage-table -->", page, re.S)
    rows = re.findall(r"^\| (.+?) \| (\d+ of \d+) \|$", table[1] if table else "", re.M)
    return dict(rows)

"""The conformance report: per test, per group, a level, and operation latency.

Conformance levels (`Report.level`):

``full``
    Every group of the suite ran, no test failed, none was *not exercised*,
    and the run exercised every reachable cell of the protocol's coverage
    matrices (`coverage`). Tests skipped
    because the adapter does not declare a capability (or the target does not
    offer what a test needs, such as an endpoint for the stall proxy) do not
    lower the level; the report lists them with their reasons. A test is not
    exercised when the target does not give it what it needs to check its
    promise at all (a held-backend test of a target that supplies no hold):
    its reason starts with ``not exercised:`` and the report lists it, so a
    gap never passes as a pass.
``basic``
    The ``semantics`` and ``bad-input`` groups ran without a failure, but
    another group failed or was not run: the storage stores and refuses
    correctly, and is not proven safe under concurrency, cancellation or the
    runner's lifecycle.
``none``
    A ``semantics`` or ``bad-input`` test failed, or those groups were not run.

Outcomes of a test: ``passed``, ``failed``, ``skipped`` and ``indeterminate``.
A test is indeterminate when it saw a cancelled or failed write land late on
an adapter that does not declare ``settles_cancelled_writes``: the protocol
allows it (the write's outcome was unknown), so it neither passes nor fails
and does not lower the level; the reason says what landed, and when.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .coverage import Coverage
from .settings import NOT_EXERCISED
from .timing import OpLatency

__all__ = ["LEVELS", "GroupSummary", "Level", "Outcome", "Report", "TestResult"]

Outcome = Literal["passed", "failed", "skipped", "indeterminate"]
Level = Literal["full", "basic", "none"]
LEVELS: tuple[Level, ...] = ("full", "basic", "none")

ALL_GROUPS = (
    "semantics",
    "concurrency",
    "bad-input",
    "cancellation",
    "lifecycle",
    "hygiene",
    "capabilities",
    "linearizability",
    "model",
)
BASIC_GROUPS = ("semantics", "bad-input")


@dataclass
class TestResult:
    """One test of the suite.

    Attributes:
        name: the test's name with its parameters (``test_x[nul]``).
        group: its group.
        outcome: ``"passed"``, ``"failed"``, ``"skipped"`` or ``"indeterminate"``.
        reason: for a failure, one paragraph (the promise, the key, the
            expected and the observed); for a skip, why; for an
            indeterminate outcome, the late landings seen.
        duration: seconds, setup and teardown included.
        nodeid: the pytest node id.
    """

    __test__ = False  # not a pytest test class

    name: str
    group: str
    outcome: Outcome
    reason: str = ""
    duration: float = 0.0
    nodeid: str = ""


@dataclass
class GroupSummary:
    """Totals of one group."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    indeterminate: int = 0

    @property
    def total(self) -> int:
        """Every test of the group that ran or was skipped."""
        return self.passed + self.failed + self.skipped + self.indeterminate


@dataclass
class Report:
    """What a conformance run found.

    Attributes:
        target: the name of the storage under test.
        results: every test, in the order they ran.
        groups_run: the groups that were selected.
        latency: per storage operation (``put``, ``get``, ``delete``, ``list``):
            count, p50, p99 and max, in milliseconds, over every call the
            suite made.
        duration: seconds for the whole run.
        capabilities: what the adapter declared (None if it was never opened).
        errors: problems outside any test (a target that cannot be loaded,
            a collection error); any error makes the run fail.
        all_groups: every group of the suite that ran, in report order: a
            ``full`` level needs each of them (the storage groups, or the
            ecosystem groups for a LangGraph or agent-framework target).
        basic_groups: the groups a ``basic`` level needs.
        about: what else the reader needs, by name: the versions of the
            libraries under test, the level of an ecosystem's own suite
            (``langgraph-checkpoint-conformance``), runner findings.
        coverage: which reachable cells of the protocol's surface the run
            exercised (None where it was not measured).
    """

    target: str
    results: list[TestResult] = field(default_factory=list)
    groups_run: tuple[str, ...] = ALL_GROUPS
    latency: dict[str, OpLatency] = field(default_factory=dict)
    duration: float = 0.0
    capabilities: dict[str, bool] | None = None
    errors: list[str] = field(default_factory=list)
    all_groups: tuple[str, ...] = ALL_GROUPS
    basic_groups: tuple[str, ...] = BASIC_GROUPS
    about: dict[str, str] = field(default_factory=dict)
    coverage: Coverage | None = None

    # -- verdicts -------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        """True when every test that was not skipped passed, and tests ran."""
        return not self.errors and bool(self.results) and not self.failures

    @property
    def failures(self) -> list[TestResult]:
        """The failed tests."""
        return [r for r in self.results if r.outcome == "failed"]

    @property
    def skipped(self) -> list[TestResult]:
        """The skipped tests."""
        return [r for r in self.results if r.outcome == "skipped"]

    @property
    def indeterminate(self) -> list[TestResult]:
        """The tests that saw a write land late on an adapter that does not settle them."""
        return [r for r in self.results if r.outcome == "indeterminate"]

    @property
    def not_exercised(self) -> list[TestResult]:
        """The skipped tests that could not exercise their promise (``not exercised:``)."""
        return [r for r in self.skipped if r.reason.startswith(NOT_EXERCISED)]

    def groups(self) -> dict[str, GroupSummary]:
        """Totals per group, in the suite's order (groups that ran only)."""
        out: dict[str, GroupSummary] = {}
        order = {g: i for i, g in enumerate(self.all_groups)}
        for r in sorted(self.results, key=lambda r: order.get(r.group, len(order))):
            summary = out.setdefault(r.group, GroupSummary())
            setattr(summary, r.outcome, getattr(summary, r.outcome) + 1)
        return out

    @property
    def level(self) -> Level:
        """``full``, ``basic`` or ``none``; see the module documentation."""
        groups = self.groups()
        if self.errors:
            return "none"

        def clean(group: str) -> bool:
            s = groups.get(group)
            return s is not None and s.failed == 0 and s.passed + s.indeterminate > 0

        if not all(clean(g) for g in self.basic_groups):
            return "none"
        ran_all = all(g in groups for g in self.all_groups)
        uncovered = self.coverage is not None and bool(self.coverage.missing)
        if ran_all and not self.failures and not self.not_exercised and not uncovered:
            return "full"
        return "basic"

    @property
    def rated(self) -> bool:
        """Whether every group of the suite ran: a level is a verdict on all of them.

        A run of some groups (``groups=``, ``--group``) passes or fails, and its
        `to_dict` and `summary` say "not rated" instead of a level.
        """
        return set(self.all_groups) <= set(self.groups_run)

    @property
    def level_reason(self) -> str:
        """Why the level is what it is, in a few words."""
        groups = self.groups()
        if self.errors:
            return "the suite could not run"
        for g in self.basic_groups:
            s = groups.get(g)
            if s is None:
                return f"{g} was not run"
            if s.failed:
                return f"{s.failed} {g} test(s) failed"
            if not s.passed and not s.indeterminate:
                return f"no {g} test passed"
        failed = [g for g, s in groups.items() if s.failed]
        if failed:
            return "failures in " + ", ".join(failed)
        missing = [g for g in self.all_groups if g not in groups]
        if missing:
            return "not run: " + ", ".join(missing)
        if self.not_exercised:
            return f"{len(self.not_exercised)} test(s) not exercised"
        if self.coverage is not None and self.coverage.missing:
            return f"{len(self.coverage.missing)} reachable coverage cell(s) not exercised"
        return "every group passed"

    def result(self, name: str) -> TestResult:
        """The result of the test named ``name`` (parameters included).

        Raises:
            KeyError: no such test in the report.
        """
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def failed_names(self) -> set[str]:
        """Names of the failed tests, with parameters."""
        return {r.name for r in self.failures}

    # -- output ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Everything in the report as JSON-compatible data."""
        return {
            "target": self.target,
            "ok": self.ok,
            "level": self.level if self.rated else None,
            "rated": self.rated,
            "level_reason": (
                self.level_reason
                if self.rated
                else f"not rated: only {', '.join(self.groups_run)} ran"
            ),
            "duration_s": round(self.duration, 3),
            "capabilities": self.capabilities,
            "groups_run": list(self.groups_run),
            "groups": {g: {**asdict(s), "total": s.total} for g, s in self.groups().items()},
            "latency_ms": {op: dict(v) for op, v in self.latency.items()},
            "errors": list(self.errors),
            "about": dict(self.about),
            "not_exercised": [r.name for r in self.not_exercised],
            "coverage": None if self.coverage is None else self.coverage.to_dict(),
            "tests": [{**asdict(r), "duration": round(r.duration, 4)} for r in self.results],
        }

    def write_json(self, path: str | os.PathLike[str]) -> None:
        """Write `to_dict` as JSON to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2, ensure_ascii=False)
            f.write("\n")

    def to_html(self) -> str:
        """The report as one self-contained HTML page (`checkpointkit.conformance.html`)."""
        from .html import render

        return render(self)

    def write_html(self, path: str | os.PathLike[str]) -> None:
        """Write `to_html` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_html())

    def to_junit_xml(self) -> str:
        """The report as JUnit XML: one ``testsuite`` per group."""
        root = ET.Element(
            "testsuites",
            name=f"checkpointkit conformance: {self.target}",
            tests=str(len(self.results)),
            failures=str(len(self.failures)),
            errors=str(len(self.errors)),
            skipped=str(len(self.skipped)),
            time=f"{self.duration:.3f}",
        )
        by_group: dict[str, list[TestResult]] = {}
        for r in self.results:
            by_group.setdefault(r.group, []).append(r)
        for group, summary in self.groups().items():
            results = by_group.get(group, [])
            suite = ET.SubElement(
                root,
                "testsuite",
                name=group,
                tests=str(summary.total),
                failures=str(summary.failed),
                errors="0",
                skipped=str(summary.skipped),
                time=f"{sum(r.duration for r in results):.3f}",
            )
            for r in results:
                case = ET.SubElement(
                    suite,
                    "testcase",
                    classname=f"checkpointkit.conformance.{group}",
                    name=r.name,
                    time=f"{r.duration:.4f}",
                )
                if r.outcome == "failed":
                    node = ET.SubElement(case, "failure", message=_first_line(r.reason))
                    node.text = r.reason
                elif r.outcome == "skipped":
                    ET.SubElement(case, "skipped", message=r.reason)
                    if r.reason.startswith(NOT_EXERCISED):
                        props = ET.SubElement(case, "properties")
                        ET.SubElement(props, "property", name="outcome", value="not exercised")
                elif r.outcome == "indeterminate":
                    props = ET.SubElement(case, "properties")
                    ET.SubElement(props, "property", name="outcome", value="indeterminate")
                    out = ET.SubElement(case, "system-out")
                    out.text = f"INDETERMINATE: {r.reason}"
        suites = root.findall("testsuite")
        if self.coverage is not None and suites:
            # JUnit keeps properties on a testsuite: the coverage goes on the first one
            done, total = self.coverage.counts()
            props = ET.Element("properties")
            suites[0].insert(0, props)
            ET.SubElement(props, "property", name="coverage_exercised", value=str(done))
            ET.SubElement(props, "property", name="coverage_reachable", value=str(total))
            for cell in self.coverage.missing:
                ET.SubElement(props, "property", name="not_exercised", value=" / ".join(cell))
            for note in self.coverage.unreachable:
                ET.SubElement(props, "property", name="unreachable", value=note)
        if self.errors:
            suite = ET.SubElement(
                root,
                "testsuite",
                name="session",
                tests="1",
                failures="0",
                errors=str(len(self.errors)),
                skipped="0",
            )
            case = ET.SubElement(
                suite, "testcase", classname="checkpointkit.conformance", name="session"
            )
            for error in self.errors:
                node = ET.SubElement(case, "error", message=_first_line(error))
                node.text = error
        ET.indent(root)
        return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"

    def write_junit_xml(self, path: str | os.PathLike[str]) -> None:
        """Write `to_junit_xml` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_junit_xml())

    def summary(self) -> str:
        """A plain-text summary: level, per-group totals, failures with their reasons."""
        rating = (
            f"level {self.level} ({self.level_reason})"
            if self.rated
            else f"not rated (only {', '.join(self.groups_run)} ran)"
        )
        lines = [
            f"conformance of {self.target}: {rating}; "
            f"{'ok' if self.ok else 'FAILED'} in {self.duration:.1f} s"
        ]
        for group, s in self.groups().items():
            line = (
                f"  {group:<13} {s.passed:>3} passed  {s.failed:>3} failed  {s.skipped:>3} skipped"
            )
            if s.indeterminate:
                line += f"  {s.indeterminate:>3} indeterminate"
            lines.append(line)
        for error in self.errors:
            lines.append(f"  error: {error}")
        for r in self.failures:
            lines.append(f"  FAILED {r.group}::{r.name}: {r.reason}")
        for r in self.indeterminate:
            lines.append(f"  INDETERMINATE {r.group}::{r.name}: {r.reason}")
        for r in self.not_exercised:
            lines.append(
                f"  NOT EXERCISED {r.group}::{r.name}: {r.reason.removeprefix(NOT_EXERCISED)}"
            )
        if self.coverage is not None:
            done, total = self.coverage.counts()
            lines.append(f"coverage: {done} of {total} reachable cells exercised")
            for cell in self.coverage.missing:
                lines.append(f"  NOT EXERCISED cell {' / '.join(cell)}")
            for note in self.coverage.unreachable:
                lines.append(f"  unreachable: {note}")
        return "\n".join(lines)

    def coverage_text(self) -> str:
        """The coverage matrices as text (empty where coverage was not measured)."""
        return "" if self.coverage is None else self.coverage.text()


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def merge_reasons(reasons: Iterable[str]) -> str:
    """Join the failure reasons of a test's phases into one paragraph."""
    parts = [r.strip() for r in reasons if r and r.strip()]
    return " Also: ".join(parts)

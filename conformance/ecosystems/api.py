"""The Python API of the ecosystem groups (what `checkpointkit.conformance.run` calls).

It runs pytest in-process on the shipped test class of the target's
ecosystem, exactly as `run` does for a
storage, and returns the same `Report`,
with the ecosystem's groups, the versions of the libraries under test and,
for LangGraph, the level that ``langgraph-checkpoint-conformance`` gives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from ...errors import ConfigurationError
from ..api import Progress, _Collector, _run_pytest
from ..coverage import CoverageRecorder, recording
from ..report import Report
from ..settings import check_seconds
from ..target import new_location
from .groups import ECOSYSTEM_GROUPS
from .harness import RUNNER_FAILED
from .target import Ecosystem, EcosystemTarget, resolve_ecosystem_target

__all__ = ["DISTRIBUTIONS", "run_ecosystem"]

DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "langgraph": ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-conformance"),
    "agent-framework": ("agent-framework-core",),
}
"""The distributions whose versions a report of each ecosystem names."""


class _EcosystemCollector(_Collector):
    """Feeds the ecosystem target in (instead of a storage target)."""

    def __init__(
        self, target: EcosystemTarget, groups: tuple[str, ...], progress: Progress | None
    ) -> None:
        super().__init__(target, groups, progress)  # type: ignore[arg-type]
        self.eco = target

    def pytest_configure(self, config: Any) -> None:
        from ..plugin import ECOSYSTEM_TARGET_KEY

        config.stash[ECOSYSTEM_TARGET_KEY] = self.eco


def versions(ecosystem: str) -> dict[str, str]:
    """The installed version of each distribution of ``ecosystem`` (``-`` if missing)."""
    out = {}
    for dist in DISTRIBUTIONS[ecosystem]:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "-"
    return out


async def run_ecosystem(
    target: Any,
    groups: Iterable[str] | None = None,
    pattern: str | None = None,
    *,
    ecosystem: str | None = None,
    scale: float | None = None,
    progress: Progress | None = None,
    settle_window: float | None = None,
    cancel_bound: float | None = None,
) -> Report:
    """Run the ecosystem groups against a LangGraph saver or agent-framework storage.

    Args:
        target: an `EcosystemTarget`, a SPEC (``langgraph:MODULE:ATTR``,
            ``agent-framework:MODULE:ATTR``) or a class or factory (with
            ``ecosystem``).
        groups: run only these groups (default: all).
        pattern: run only tests matching this pytest ``-k`` expression.
        ecosystem: ``"langgraph"`` or ``"agent-framework"``, for a class or factory.
        scale: multiply the request counts of the heavier tests.
        progress: told the number of tests, then each result.
        settle_window: seconds a cancelled call is watched for a late landing.
        cancel_bound: seconds within which a cancelled call must end.

    Raises:
        ConfigurationError: the target cannot be resolved, an unknown group
            or ecosystem, or a bad number of seconds.
    """
    from ..plugin import ecosystem_suite_path, selected_groups

    if ecosystem is not None and ecosystem not in DISTRIBUTIONS:
        raise ConfigurationError(
            f"unknown ecosystem {ecosystem!r}; the ecosystems are: {', '.join(DISTRIBUTIONS)}"
        )
    overrides: dict[str, Any] = {}
    if scale is not None:
        overrides["scale"] = scale
    if settle_window is not None:
        overrides["settle_window"] = check_seconds("settle_window", settle_window, zero=True)
    if cancel_bound is not None:
        overrides["cancel_bound"] = check_seconds("cancel_bound", cancel_bound)
    resolved = resolve_ecosystem_target(
        target, ecosystem=ecosystem if ecosystem is None else _eco(ecosystem), **overrides
    )
    selected = (
        selected_groups(tuple(groups) if groups is not None else None, ECOSYSTEM_GROUPS)
        or ECOSYSTEM_GROUPS
    )
    start = time.perf_counter()
    report = Report(
        target=resolved.name,
        groups_run=selected,
        all_groups=ECOSYSTEM_GROUPS,
        basic_groups=("semantics",),
    )
    report.about = {
        "ecosystem": f"{resolved.ecosystem} ({resolved.kind})",
        "versions": ", ".join(f"{d} {v}" for d, v in versions(resolved.ecosystem).items()),
    }
    into = CoverageRecorder()
    try:
        try:
            with recording(into):
                async with resolved.open(location=new_location() if resolved.reopens else None):
                    pass
        except ConfigurationError:
            raise
        except Exception as exc:
            report.errors.append(
                f"the target {resolved.name!r} could not be opened: {type(exc).__name__}: {exc}"
            )
            return report
        collector = _EcosystemCollector(resolved, selected, progress)
        with recording(into):  # the thread below runs in a copy of this context
            await asyncio.to_thread(
                _run_pytest, collector, pattern, ecosystem_suite_path(resolved.ecosystem)
            )
        report.results = collector.results
        report.errors.extend(collector.errors)
        report.coverage = into.result(resolved.name)
        report.about.update(native_summary(report, resolved.ecosystem))
        return report
    finally:
        report.duration = time.perf_counter() - start
        if isinstance(target, str) and resolved.cleanup is not None:
            resolved.cleanup()


def _eco(name: str) -> Ecosystem:
    return "langgraph" if name == "langgraph" else "agent-framework"


def native_summary(report: Report, ecosystem: str) -> dict[str, str]:
    """The ecosystem's own suite's verdict, and the runner's failures, from the results."""
    out: dict[str, str] = {}
    runner = [r.name for r in report.skipped if r.reason.startswith(RUNNER_FAILED)]
    if runner:
        out["runner"] = (
            f"{len(runner)} scenario(s) fail on the library's own in-memory storage too, so the "
            f"runner is at fault, not the target (listed under Skipped): {', '.join(runner)}"
        )
    if ecosystem != "langgraph":
        return out
    from .langgraph import CAPABILITIES, native_level

    outcomes = {}
    for r in report.results:
        if r.name.startswith("test_langgraph_checkpoint_conformance["):
            outcomes[r.name.split("[", 1)[1].rstrip("]")] = r.outcome
    if set(outcomes) != set(CAPABILITIES):
        return out
    passed = [c for c, o in outcomes.items() if o == "passed"]
    out["langgraph-checkpoint-conformance"] = (
        f"{native_level(outcomes)} "
        f"({len(passed)} of {len(outcomes)} capabilities passed: {', '.join(passed) or 'none'})"
    )
    return out

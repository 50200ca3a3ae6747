"""The Python API: ``report = await checkpointkit.conformance.run(factory_or_url)``.

`run` runs pytest in-process, in a worker thread (pytest drives its own
event loops), on the suite's shipped test classes, with a plugin that feeds
the target in and collects the results into a `Report`. The tests are
the very ones that subclasses and the pytest plugin run: there is one
definition of each.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigurationError
from ..storage import Capabilities
from .checks import ConformanceFailure
from .coverage import CoverageRecorder, recording
from .ecosystems.target import EcosystemTarget
from .groups import GROUPS, group_of
from .hygiene import HygieneError, frozen_heap, hygiene
from .report import Report, TestResult, merge_reasons
from .settings import check_seconds
from .target import Factory, Target, resolve_target
from .timing import recorder

__all__ = ["Progress", "run"]

_RUN_LOCK = threading.Lock()  # runs share the latency recorder and pytest's global state

_INI = """\
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
python_classes = Test*
"""


class Progress(Protocol):
    """What `run` reports while it runs (called from pytest's worker thread)."""

    def collected(self, total: int) -> None:
        """The number of tests that will run."""

    def finished(self, result: TestResult) -> None:
        """One test finished."""


async def run(
    target: Target | EcosystemTarget | Factory | str,
    groups: Iterable[str] | None = None,
    pattern: str | None = None,
    *,
    scale: float | None = None,
    capabilities: Capabilities | None = None,
    progress: Progress | None = None,
    settle_window: float | None = None,
    cancel_bound: float | None = None,
    ecosystem: str | None = None,
    model_budget: float | None = None,
) -> Report:
    """Run the conformance suite against ``target`` and return the report.

    Args:
        target: a `Target`, a factory of fresh storages, or a SPEC
            string (a storage URL, ``module:factory``, ``file`` or ``memory``);
            or a LangGraph saver or agent-framework storage: an
            `EcosystemTarget`,
            ``langgraph:MODULE:ATTR``, ``agent-framework:MODULE:ATTR``, or a
            class or factory with ``ecosystem`` given.
        groups: run only these groups (default: all): ``semantics``,
            ``concurrency``, ``bad-input``, ``cancellation``, ``lifecycle``,
            ``hygiene``, ``capabilities``, ``linearizability``, ``model``.
        pattern: run only tests matching this pytest ``-k`` expression.
        scale: multiply the request counts of the heavier tests.
        capabilities: override what the adapter declares.
        progress: told the number of tests, then each result as it comes.
        settle_window: seconds a cancelled or failed write is watched for a
            late landing (default 2).
        cancel_bound: seconds within which a cancelled operation must raise
            ``CancelledError`` (default 0.5).
        ecosystem: ``"langgraph"`` or ``"agent-framework"`` when ``target``
            is a saver or storage class or factory: the ecosystem groups run
            (`checkpointkit.conformance.ecosystems`).
        model_budget: seconds the ``model`` group runs random programs
            (default 12; 0 skips it).

    Raises:
        ConfigurationError: the target cannot be resolved or opened for a
            reason of configuration (an unknown scheme, a bad URL, a missing
            extra, a directory that does not exist), an unknown group, or a
            settle window, cancel bound or model budget that is not a number
            of seconds.
        ImportError: pytest or pytest-asyncio is not installed
            (``pip install "checkpointkit[conformance]"``).
    """
    _require_pytest()
    from .ecosystems.target import ecosystem_of
    from .plugin import selected_groups

    if ecosystem is not None or ecosystem_of(target) is not None:
        from .ecosystems.api import run_ecosystem

        return await run_ecosystem(
            target,
            groups,
            pattern,
            ecosystem=ecosystem,
            scale=scale,
            progress=progress,
            settle_window=settle_window,
            cancel_bound=cancel_bound,
        )

    assert not isinstance(target, EcosystemTarget)  # delegated above
    overrides: dict[str, Any] = {}
    if scale is not None:
        overrides["scale"] = scale
    if settle_window is not None:
        overrides["settle_window"] = check_seconds("settle_window", settle_window, zero=True)
    if cancel_bound is not None:
        overrides["cancel_bound"] = check_seconds("cancel_bound", cancel_bound)
    if model_budget is not None:
        overrides["model_budget"] = check_seconds("model_budget", model_budget, zero=True)
    if capabilities is not None:
        overrides["capabilities"] = capabilities
    resolved = resolve_target(target, **overrides)
    selected = selected_groups(tuple(groups) if groups is not None else None) or GROUPS
    owns_cleanup = isinstance(target, str)
    start = time.perf_counter()
    report = Report(target=resolved.name, groups_run=selected)
    try:
        try:
            # What the adapter leaves behind here (an exception in a finalizer, say) is the
            # suite's to report in its hygiene tests, not to leak into the caller's process.
            async with hygiene(check=False), resolved.open() as storage:
                declared = resolved.capabilities or getattr(storage, "capabilities", None)
                if isinstance(declared, Capabilities):
                    report.capabilities = {
                        k: getattr(declared, k)
                        for k in (
                            "conditional_put",
                            "conditional_delete",
                            "durable",
                            "shared",
                            "ttl",
                            "settles_cancelled_writes",
                            "indexed_list",
                        )
                    }
        except ConfigurationError:
            raise  # an unknown scheme, a bad URL, a missing extra: the caller's to fix
        except Exception as exc:
            report.errors.append(
                f"the target {resolved.name!r} could not be opened: {type(exc).__name__}: {exc}"
            )
            return report
        collector = _Collector(resolved, selected, progress)
        into = CoverageRecorder()
        with recording(into):  # the thread below runs in a copy of this context
            await asyncio.to_thread(_run_pytest, collector, pattern)
        report.results = collector.results
        report.errors.extend(collector.errors)
        report.latency = collector.latency
        report.coverage = into.result(resolved.name)
        return report
    finally:
        report.duration = time.perf_counter() - start
        if owns_cleanup and resolved.cleanup is not None:
            resolved.cleanup()


def _require_pytest() -> None:
    """Raise the error naming the extra if pytest or pytest-asyncio is missing."""
    try:
        import pytest  # noqa: F401
        import pytest_asyncio  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"the conformance suite needs pytest and pytest-asyncio ({exc}); "
            'install them with: pip install "checkpointkit[conformance]"',
            name=exc.name,
        ) from exc


def _run_pytest(collector: _Collector, pattern: str | None, path: str | None = None) -> None:
    import pytest

    from .plugin import suite_path

    with _RUN_LOCK, tempfile.TemporaryDirectory(prefix="checkpointkit-conformance-run-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text(_INI)
        args = [
            path or suite_path(),
            "-c",
            str(ini),
            "--rootdir",
            tmp,
            "--import-mode=importlib",
            "--capture=no",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:terminal",
            "-p",
            "no:faulthandler",
            "-p",
            "no:timeout",  # pytest-timeout's signals work only in the main thread
            "-p",
            "no:randomly",
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",
        ]
        if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            args += ["-p", "pytest_asyncio.plugin"]
        if pattern:
            args += ["-k", pattern]
        recorder.clear()
        try:
            # pytest's unraisable-exception plugin collects garbage as the session ends: a
            # whole-heap collection of the caller's process (0.2 s and more inside a test
            # session, twice per run) unless what was there before the run is frozen
            with frozen_heap():
                code = pytest.main(args, plugins=[collector])
        finally:
            collector.latency = recorder.summary()
        if code not in (0, 1, 5) and not collector.errors:  # 5: no tests selected
            collector.errors.append(f"pytest ended with exit code {int(code)} ({code!r})")


class _Collector:
    """The pytest plugin of `run`: feeds the target in, collects results."""

    def __init__(self, target: Target, groups: tuple[str, ...], progress: Progress | None) -> None:
        self.target = target
        self.groups = groups
        self.progress = progress
        self.results: list[TestResult] = []
        self.errors: list[str] = []
        self.latency: dict[str, Any] = {}
        self._phases: dict[str, list[Any]] = {}
        self._reasons: dict[str, dict[str, str]] = {}
        self._group: dict[str, str] = {}
        self._name: dict[str, str] = {}

    def pytest_configure(self, config: Any) -> None:
        from .plugin import TARGET_KEY

        config.stash[TARGET_KEY] = self.target

    def pytest_pycollect_makeitem(self, collector: Any, name: str, obj: Any) -> list[Any] | None:
        # A test of a group not selected makes no item at all: building the items of every
        # group (their parameters and fixtures) cost most of a run of one group's test. The
        # deselection below still drops what this lets through (a test of no group).
        group = group_of(obj)
        if group is not None and group not in self.groups:
            return []
        return None

    def pytest_collection_modifyitems(self, config: Any, items: list[Any]) -> None:
        keep, drop = [], []
        for item in items:
            group = group_of(getattr(item, "function", None)) or "other"
            if group in self.groups:
                keep.append(item)
                self._group[item.nodeid] = group
                self._name[item.nodeid] = item.name
            else:
                drop.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep

    def pytest_collection_finish(self, session: Any) -> None:
        if self.progress is not None:
            self.progress.collected(len(session.items))

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.errors.append(
                f"collecting {report.nodeid or 'the suite'} failed: {report.longreprtext}"
            )

    def pytest_internalerror(self, excrepr: Any, excinfo: Any) -> None:
        self.errors.append(f"internal error: {excinfo.exconly()}")

    def pytest_runtest_makereport(self, item: Any, call: Any) -> None:
        # Called with the exception itself: remember a readable reason per phase.
        if call.excinfo is not None:
            self._reasons.setdefault(item.nodeid, {})[call.when] = _reason(call.excinfo)

    def pytest_runtest_logreport(self, report: Any) -> None:
        self._phases.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        from .plugin import indeterminate_reason

        reports = self._phases.pop(nodeid, [])
        reasons = self._reasons.pop(nodeid, {})
        duration = sum(getattr(r, "duration", 0.0) for r in reports)
        outcome = "passed"
        texts: list[str] = []
        for r in reports:
            if r.failed:
                outcome = "failed"
                texts.append(reasons.get(r.when) or _first_lines(r.longreprtext))
        if outcome == "passed" and any(r.skipped for r in reports):
            outcome = "skipped"
            skip = next(r for r in reports if r.skipped)
            texts.append(_skip_reason(skip))
        if outcome == "passed":
            for r in reports:
                text = indeterminate_reason(r) if r.when == "call" else None
                if text:
                    outcome = "indeterminate"
                    texts.append(text)
        result = TestResult(
            name=self._name.get(nodeid, nodeid.rsplit("::", 1)[-1]),
            group=self._group.get(nodeid, "other"),
            outcome=outcome,  # type: ignore[arg-type]
            reason=merge_reasons(texts),
            duration=duration,
            nodeid=nodeid,
        )
        self.results.append(result)
        if self.progress is not None:
            self.progress.finished(result)


def _reason(excinfo: Any) -> str:
    """One readable paragraph for an exception that ended a test phase."""
    exc = excinfo.value
    if isinstance(exc, ConformanceFailure):
        return str(exc)
    if isinstance(exc, HygieneError):
        findings = str(exc).split("\n- ")[1:] + list(getattr(exc, "__notes__", []))
        return "hygiene: the test left something behind: " + "; ".join(findings)
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if getattr(excinfo, "typename", "") in ("Skipped", "XFailed"):
        return str(exc)
    where = _where(excinfo.tb)
    return f"unexpected {text}{where}"


def _where(tb: Any) -> str:
    frames = traceback.extract_tb(tb)
    for frame in reversed(frames):
        if "/_pytest/" in frame.filename or "/pluggy/" in frame.filename:
            continue
        return f" (raised at {os.path.basename(frame.filename)}:{frame.lineno} in {frame.name})"
    return ""


def _skip_reason(report: Any) -> str:
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail:  # pytest.xfail(reason): an expected failure, shown as a skip with its reason
        return str(wasxfail).removeprefix("reason: ")
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text.removeprefix("Skipped: ")
    return str(longrepr)


def _first_lines(text: str, n: int = 12) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines[-n:])

"""``checkpointkit conformance SPEC``: run the suite with progress lines and a report.

SPEC is a storage URL (``redis://127.0.0.1:6379/0``; each test works under its
own random key prefix, deleted afterwards), ``module:factory`` (a factory or
a `Target`), ``file`` (a fresh temporary
directory per test) or ``memory``; or ``langgraph:MODULE:ATTR`` (a LangGraph
saver) or ``agent-framework:MODULE:ATTR`` (an agent-framework checkpoint
storage), which run the ecosystem groups
(`checkpointkit.conformance.ecosystems`).

Exit status, aligned with pytest's where it means the same: 0 when every test
that was not skipped passed; 1 when a test failed or the target could not be
opened; 5 when no test was selected (pytest's "no tests collected"); 2 for a
bad command line or environment (an unknown scheme or group, a directory that
does not exist, pytest or an adapter's extra not installed).

``MODULE:ATTR`` is imported as ``python -m`` would: from the working
directory first, so ``checkpointkit conformance pg_target:storage`` finds
``./pg_target.py`` without ``PYTHONPATH``.

This module imports neither pytest nor the suite until the command runs, so
that ``checkpointkit --help`` works after a base install.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import textwrap
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..cli import (
    EXIT_FAILED,
    EXIT_NO_TESTS,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Output,
    command,
    import_from_working_directory,
)
from ..errors import ConfigurationError
from ..urls import redact_url
from .groups import GROUPS

if TYPE_CHECKING:
    from .report import Report, TestResult

__all__ = ["PROGRESS_INTERVAL", "ProgressLines", "conformance_command", "print_report"]

PROGRESS_INTERVAL = 10.0
"""Seconds between two progress lines when standard error is not a terminal."""


class ProgressLines:
    """The suite's progress on standard error, fed from pytest's worker thread.

    On a terminal, one status line redrawn in place (each failure printed
    above it as it happens). Elsewhere (CI logs, a pipe), plain lines: the
    number of tests at the start, each failure as it happens, and a line
    every ``interval`` seconds, so a long run shows that it is alive.

    Args:
        out: where to write.
        name: the target's name.
        interval: seconds between two progress lines off a terminal.
        clock: the time source (``time.monotonic``).
    """

    def __init__(
        self,
        out: Output,
        name: str,
        *,
        interval: float = PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out
        self.name = name
        self.interval = interval
        self.clock = clock
        self.live = out.err_is_terminal
        self.total: int | None = None
        self.done = 0
        self.failed = 0
        self.started = clock()
        self.last_line = self.started
        self._drawn = False

    def collected(self, total: int) -> None:
        """Told the number of tests that will run."""
        self.total = total
        self.last_line = self.clock()
        if not self.live:
            self.out.info(f"conformance of {self.name}: running {total} tests")

    def finished(self, result: TestResult) -> None:
        """Told one test's result."""
        self.done += 1
        if result.outcome == "indeterminate":
            self._clear()
            self.out.info(
                f"{self.out.paint('INDETERMINATE', 'yellow', err=True)} "
                f"{result.group}::{result.name}"
            )
        if result.outcome == "failed":
            self.failed += 1
            self._clear()
            self.out.info(
                f"{self.out.paint('FAILED', 'red', err=True)} {result.group}::{result.name}"
            )
        now = self.clock()
        if self.live:
            self._draw(f"{result.group:<13} {result.name[:48]}")
        elif now - self.last_line >= self.interval:
            self.last_line = now
            self.out.info(self._counts(now))

    def close(self) -> None:
        """Remove the status line (on a terminal)."""
        self._clear()

    def _counts(self, now: float) -> str:
        total = "?" if self.total is None else str(self.total)
        failed = f", {self.failed} failed" if self.failed else ""
        return f"progress: {self.done}/{total} tests done{failed}, {now - self.started:.0f} s"

    def _draw(self, what: str) -> None:
        self.out.stderr.write(f"\r\x1b[K{self._counts(self.clock())}  {what}")
        self.out.stderr.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self.out.stderr.write("\r\x1b[K")
            self.out.stderr.flush()
            self._drawn = False


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "spec",
        nargs="?",  # so that "--json SPEC" can give it back (see _json_and_spec)
        metavar="SPEC",
        help="what to test: a storage URL, module:factory, 'file', 'memory', "
        "langgraph:MODULE:ATTR (a LangGraph saver) or agent-framework:MODULE:ATTR "
        "(an agent-framework checkpoint storage)",
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="write the report as JSON to FILE; without FILE (or with '-') print it on "
        "standard output, as the command's one document, instead of the table "
        "('--json SPEC' with no other SPEC is that too)",
    )
    parser.add_argument("--junit-xml", metavar="FILE", help="write the report as JUnit XML")
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="write the report as one self-contained HTML page (coverage, latency, timelines "
        "of failing histories)",
    )
    parser.add_argument(
        "-k", dest="pattern", metavar="PATTERN", help="run only tests matching this -k expression"
    )
    parser.add_argument(
        "--group",
        action="append",
        metavar="NAME",
        help=f"run only this group (repeatable): {', '.join(GROUPS)}",
    )
    parser.add_argument(
        "--scale",
        type=float,
        metavar="FACTOR",
        help="multiply request counts of the heavier tests (0.2 for a slow local server)",
    )
    parser.add_argument(
        "--settle-window",
        type=float,
        metavar="SECONDS",
        help="watch cancelled or failed writes this long for a late landing (default 2)",
    )
    parser.add_argument(
        "--cancel-bound",
        type=float,
        metavar="SECONDS",
        help="a cancelled operation must raise CancelledError within this (default 0.5)",
    )
    parser.add_argument(
        "--model-budget",
        type=float,
        metavar="SECONDS",
        help="run the model group's random programs this long (default 12; 0 skips it)",
    )


@command(
    "conformance",
    help="Run the conformance suite against a storage and report what holds.",
    arguments=_arguments,
    storage=False,
    json_flag=False,
)
def conformance_command(args: argparse.Namespace, out: Output) -> int:
    """Run the conformance suite against a storage and report what holds.

    SPEC is a storage URL (each test works under its own random key prefix,
    deleted afterwards), module:factory (your factory of fresh storages),
    'file' (a fresh temporary directory per test) or 'memory'; or
    langgraph:MODULE:ATTR (a LangGraph saver: a class, a factory or an async
    context manager factory) or agent-framework:MODULE:ATTR (an agent-framework
    checkpoint storage, likewise).
    """
    _json_and_spec(args)
    out.json = args.json == "-"
    _import_module_target(args.spec)
    try:
        import pytest  # noqa: F401
        import pytest_asyncio  # noqa: F401

        from .api import run
    except ImportError as exc:
        raise CliError(
            f"the conformance suite needs pytest and pytest-asyncio ({exc}); "
            'install them with: pip install "checkpointkit[conformance]"',
            EXIT_USAGE,
        ) from None
    progress = ProgressLines(out, redact_url(args.spec))  # a URL's password stays out of logs
    try:
        report = asyncio.run(
            run(
                args.spec,
                groups=args.group or None,
                pattern=args.pattern,
                scale=args.scale,
                progress=progress,
                settle_window=args.settle_window,
                cancel_bound=args.cancel_bound,
                model_budget=args.model_budget,
            )
        )
    except ConfigurationError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    finally:
        progress.close()
    if out.json:
        out.document(report.to_dict())
    else:
        print_report(report, out)
    if args.json not in (None, "-"):
        report.write_json(args.json)
        out.info(f"JSON report written to {args.json}")
    if args.junit_xml is not None:
        report.write_junit_xml(args.junit_xml)
        out.info(f"JUnit XML report written to {args.junit_xml}")
    if args.html is not None:
        report.write_html(args.html)
        out.info(f"HTML report written to {args.html}")
    if not report.results and not report.errors:
        out.info("no test was selected (check --group and -k)")
        return EXIT_NO_TESTS
    return EXIT_OK if report.ok else EXIT_FAILED


def _json_and_spec(args: argparse.Namespace) -> None:
    """Give SPEC back when ``--json`` took it as its FILE (``conformance --json memory``)."""
    if args.spec is None and args.json not in (None, "-"):
        args.spec, args.json = args.json, "-"
    if args.spec is None:
        raise CliError(
            "conformance needs a SPEC: a storage URL, MODULE:FACTORY, 'file' or 'memory' "
            "(see 'checkpointkit conformance --help')",
            EXIT_USAGE,
        )


def _import_module_target(spec: str) -> None:
    """Import the module of a ``MODULE:ATTR`` (or ``KIND:MODULE:ATTR``) SPEC, as ``python -m``."""
    if "://" in spec or ":" not in spec:
        return
    module_name = spec.split(":")[-2]
    if not module_name or not module_name.replace(".", "").replace("_", "").isalnum():
        return  # not a module name: resolve_target says what is wrong with the SPEC
    try:
        import_from_working_directory(module_name)
    except ImportError as exc:
        raise CliError(
            f"cannot import {module_name!r} (from {spec!r}) from {os.getcwd()!r} or "
            f"sys.path: {exc}",
            EXIT_USAGE,
        ) from None


def _reason(text: str, out: Output) -> str:
    """A failure's reason, indented; wrapped to the terminal's width on a terminal only."""
    if not out.color:
        return f"  {text}"
    width = shutil.get_terminal_size((100, 24)).columns
    return textwrap.fill(
        text,
        width=max(40, width - 1),
        initial_indent="  ",
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def print_report(report: Report, out: Output) -> None:
    """Print the report: per-group table, failures with reasons, skips, latency, verdict."""
    out.print(f"Conformance of {report.target}")
    rows: list[tuple[str, ...]] = []
    totals = [0, 0, 0, 0]
    for name, s in report.groups().items():
        counts = (s.passed, s.failed, s.skipped, s.indeterminate)
        rows.append((name, *map(str, counts)))
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
    rows.append(("total", *map(str, totals)))
    out.table(("group", "passed", "failed", "skipped", "indeterminate"), rows, right=(1, 2, 3, 4))

    for error in report.errors:
        out.print(f"{out.paint('error:', 'red')} {error}")
    if report.failures:
        out.print()
        out.print(out.paint("Failures", "bold"))
        order = {g: i for i, g in enumerate(report.groups())}
        for r in sorted(report.failures, key=lambda r: order.get(r.group, len(order))):
            out.print(out.paint(f"✗ {r.group}::{r.name}", "red"))
            out.print(_reason(r.reason, out))
    if report.indeterminate:
        out.print()
        out.print(
            out.paint("Indeterminate", "bold")
            + " (a write landed after CancelledError; the adapter does not declare "
            "settles_cancelled_writes, so the protocol allows it)"
        )
        for r in report.indeterminate:
            out.print(out.paint(f"? {r.group}::{r.name}", "yellow"))
            out.print(_reason(r.reason, out))
    skips: dict[str, list[str]] = {}
    for r in report.skipped:
        skips.setdefault(r.reason, []).append(r.name)
    if skips:
        out.print()
        out.print(out.paint("Skipped", "bold"))
        for reason, names in skips.items():
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            out.print(f"- {reason} ({shown})")
    if report.latency:
        out.print()
        out.print("Storage latency (ms)")
        out.table(
            ("operation", "count", "p50", "p99", "max"),
            [
                (
                    op,
                    str(int(v["count"])),
                    f"{v['p50_ms']:.3f}",
                    f"{v['p99_ms']:.3f}",
                    f"{v['max_ms']:.3f}",
                )
                for op, v in report.latency.items()
            ],
            right=(1, 2, 3, 4),
        )
    if report.coverage is not None:
        done, total = report.coverage.counts()
        out.print()
        out.print(
            out.paint("Protocol coverage", "bold")
            + f": {done} of {total} reachable cells exercised"
            + "  (x exercised, . not exercised, blank unreachable)"
        )
        out.print(report.coverage.text())
        idle = report.coverage.never_suspended
        if idle:
            out.print(
                f"never waited (so never in flight, cancelled or closed under): {', '.join(idle)}"
            )
        for cell in report.coverage.missing:
            out.print(out.paint(f"not exercised: {' / '.join(cell)}", "yellow"))
    if report.about:
        out.print()
        for name, text in report.about.items():
            out.print(f"{name}: {text}")
    verdict = out.paint("passed", "green") if report.ok else out.paint("FAILED", "red")
    tests = f"{len(report.results)} tests in {report.duration:.1f} s"
    out.print()
    if set(report.groups_run) == set(report.all_groups):
        out.print(
            f"Conformance level: {out.paint(report.level, 'bold')} ({report.level_reason})"
            f"  ·  {verdict}  ·  {tests}"
        )
    else:
        # A level is a verdict on every group: a run of some groups passes or fails, no level.
        out.print(
            f"Conformance level: not rated (only {', '.join(report.groups_run)} ran; "
            f"a level needs every group)  ·  {verdict}  ·  {tests}"
        )

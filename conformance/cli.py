"""``checkpointkit conformance SPEC``: run the suite with a progress display and a report.

SPEC is a storage URL (``redis://127.0.0.1:6379/0``; each test works under its
own random key prefix, deleted afterwards), ``module:factory`` (a factory or
a :class:`~checkpointkit.conformance.Target`), ``file`` (a fresh temporary
directory per test) or ``memory``.

Exit status: 0 when every test that was not skipped passed; 1 when a test
failed, the target could not be opened or no test was selected; 2 for a bad
command line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .report import Report, TestResult

__all__ = ["conformance_command", "print_report"]

_GROUP_HELP = (
    "run only this group (repeatable): semantics, concurrency, bad-input, cancellation, "
    "lifecycle, hygiene, capabilities"
)


class _Live:
    """Shows a progress bar on stderr and each failure as it happens."""

    def __init__(self, progress: Progress, name: str) -> None:
        self.progress = progress
        self.task = progress.add_task(f"conformance of {escape(name)}", total=None)
        self.failed = 0

    def collected(self, total: int) -> None:
        self.progress.update(self.task, total=total)

    def finished(self, result: TestResult) -> None:
        if result.outcome == "indeterminate":
            self.progress.console.print(
                f"[yellow]INDETERMINATE[/] {escape(result.group)}::{escape(result.name)}",
                highlight=False,
            )
        if result.outcome == "failed":
            self.failed += 1
            self.progress.console.print(
                f"[red]FAILED[/] {escape(result.group)}::{escape(result.name)}", highlight=False
            )
        suffix = f" [red]{self.failed} failed[/]" if self.failed else ""
        self.progress.update(
            self.task,
            advance=1,
            description=f"{escape(result.group):<13} {escape(result.name[:48])}{suffix}",
        )


def conformance_command(
    spec: Annotated[
        str,
        typer.Argument(
            metavar="SPEC",
            help="what to test: a storage URL, module:factory, 'file' or 'memory'",
            show_default=False,
        ),
    ],
    json_path: Annotated[
        Path | None, typer.Option("--json", metavar="FILE", help="write the report as JSON")
    ] = None,
    junit_xml: Annotated[
        Path | None,
        typer.Option("--junit-xml", metavar="FILE", help="write the report as JUnit XML"),
    ] = None,
    pattern: Annotated[
        str | None,
        typer.Option("-k", metavar="PATTERN", help="run only tests matching this -k expression"),
    ] = None,
    group: Annotated[
        list[str] | None, typer.Option("--group", metavar="NAME", help=_GROUP_HELP)
    ] = None,
    scale: Annotated[
        float | None,
        typer.Option(
            "--scale",
            metavar="FACTOR",
            help="multiply request counts of the heavier tests (0.2 for a slow local server)",
        ),
    ] = None,
    settle_window: Annotated[
        float | None,
        typer.Option(
            "--settle-window",
            metavar="SECONDS",
            help="watch cancelled or failed writes this long for a late landing (default 2)",
        ),
    ] = None,
    cancel_bound: Annotated[
        float | None,
        typer.Option(
            "--cancel-bound",
            metavar="SECONDS",
            help="a cancelled operation must raise CancelledError within this (default 0.5)",
        ),
    ] = None,
) -> None:
    """Run the conformance suite against a storage and report what holds."""
    try:
        from .api import run
    except ImportError as exc:
        Console(stderr=True).print(
            f"[red]error:[/] the conformance suite needs pytest and pytest-asyncio ({exc}); "
            'install them with: pip install "checkpointkit[conformance]"'
        )
        raise typer.Exit(2) from None
    err = Console(stderr=True)
    out = Console()
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, console=err, transient=True) as progress:
            live = _Live(progress, spec)
            report = asyncio.run(
                run(
                    spec,
                    groups=group or None,
                    pattern=pattern,
                    scale=scale,
                    progress=live,
                    settle_window=settle_window,
                    cancel_bound=cancel_bound,
                )
            )
    except ConfigurationError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    print_report(report, out)
    if json_path is not None:
        report.write_json(json_path)
        err.print(f"JSON report written to {escape(str(json_path))}")
    if junit_xml is not None:
        report.write_junit_xml(junit_xml)
        err.print(f"JUnit XML report written to {escape(str(junit_xml))}")
    if not report.results and not report.errors:
        err.print("[red]no test was selected[/] (check --group and -k)")
    raise typer.Exit(0 if report.ok else 1)


def print_report(report: Report, console: Console) -> None:
    """Print the report: per-group table, failures with reasons, skips, latency, level."""
    table = Table(title=f"Conformance of {escape(report.target)}", title_justify="left")
    table.add_column("group")
    table.add_column("passed", justify="right", style="green")
    table.add_column("failed", justify="right", style="red")
    table.add_column("skipped", justify="right", style="yellow")
    table.add_column("indeterminate", justify="right", style="yellow")
    totals = [0, 0, 0, 0]
    for name, s in report.groups().items():
        row = (s.passed, s.failed, s.skipped, s.indeterminate)
        table.add_row(name, *map(str, row))
        totals = [a + b for a, b in zip(totals, row, strict=True)]
    table.add_section()
    table.add_row("total", *map(str, totals), style="bold")
    console.print(table)

    for error in report.errors:
        console.print(f"[red bold]error:[/] {escape(error)}")
    if report.failures:
        console.print("\n[bold red]Failures[/]")
        order = {g: i for i, g in enumerate(report.groups())}
        for r in sorted(report.failures, key=lambda r: order.get(r.group, len(order))):
            console.print(f"[red]✗ {escape(r.group)}::{escape(r.name)}[/]")
            console.print(f"  {escape(r.reason)}", highlight=False)
    if report.indeterminate:
        console.print(
            "\n[bold yellow]Indeterminate[/] (a write landed after CancelledError; the adapter "
            "does not declare settles_cancelled_writes, so the protocol allows it)"
        )
        for r in report.indeterminate:
            console.print(f"[yellow]? {escape(r.group)}::{escape(r.name)}[/]")
            console.print(f"  {escape(r.reason)}", highlight=False)
    skips: dict[str, list[str]] = {}
    for r in report.skipped:
        skips.setdefault(r.reason, []).append(r.name)
    if skips:
        console.print("\n[bold yellow]Skipped[/]")
        for reason, names in skips.items():
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            console.print(
                f"[yellow]-[/] {escape(reason)} [dim]({escape(shown)})[/]", highlight=False
            )
    if report.latency:
        lat = Table(title="Storage latency (ms)", title_justify="left")
        for column in ("operation", "count", "p50", "p99", "max"):
            lat.add_column(column, justify="left" if column == "operation" else "right")
        for op, v in report.latency.items():
            lat.add_row(
                op,
                str(int(v["count"])),
                f"{v['p50_ms']:.3f}",
                f"{v['p99_ms']:.3f}",
                f"{v['max_ms']:.3f}",
            )
        console.print()
        console.print(lat)
    style = {"full": "green", "basic": "yellow", "none": "red"}[report.level]
    verdict = "[green]passed[/]" if report.ok else "[red]FAILED[/]"
    console.print(
        f"\nConformance level: [bold {style}]{report.level}[/] ({escape(report.level_reason)})"
        f"  ·  {verdict}  ·  "
        f"{len(report.results)} tests in {report.duration:.1f} s"
    )

"""The results page for the savers and storages people use: ``scripts/ecosystem-results``.

``python -m checkpointkit.conformance.ecosystems.results`` runs every row of
`ROWS` (starting the servers
they need) and writes ``docs/ecosystem-conformance.md`` between its generated
markers, and the full reasons as JSON beside it. ``--rows ID`` runs some rows;
``--quick`` runs the in-process rows only; ``--check`` compares the rows it ran
with the page instead of writing it (exit status 1 when they differ), which is
how the test suite keeps the page from drifting.

What the page shows is what does not change between two runs of the same
code: per row the level, its coverage (cells exercised of those reachable, each one
not exercised, and what is unreachable), each group's counts, and each failed or
runner-failed test with the promise it broke. The full reasons (ids, seconds) are in the
JSON file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from ..report import Report
from ..settings import NOT_EXERCISED
from .coverage import DEFAULT_MAX_LENGTH, EcosystemReach
from .groups import ECOSYSTEM_GROUPS
from .harness import RUNNER_FAILED
from .known import ROWS, Row

__all__ = ["QUICK", "main", "render_row", "run_rows"]

QUICK = (
    "langgraph-inmemory",
    "checkpointkit-saver-memory",
    "agent-framework-inmemory",
    "checkpointkit-storage-memory",
)
"""The rows the test suite runs (no server, no disk)."""

PAGE = Path("docs/ecosystem-conformance.md")
BEGIN, END = "<!-- results: begin -->", "<!-- results: end -->"
DISTRIBUTIONS = (
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-conformance",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "agent-framework-core",
)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _promise(reason: str) -> str:
    """The stable part of a failure's reason: the promise, before what was observed."""
    text = reason.removeprefix(RUNNER_FAILED + ": ")
    text = re.sub(r"^.*? fails this scenario on its own in-memory storage too \(", "", text)
    head = re.split(r": expected |; expected | \(key ", text, maxsplit=1)[0]
    if head.startswith("hygiene:"):
        head = "hygiene: " + re.sub(
            r"'Task-\d+'|0x[0-9a-f]+|fd \d+|:\d+\b", "…", head[8:].split(" - to fix")[0]
        )
    return head.strip().rstrip(".")


def render_row(row: Row, report: Report) -> str:
    """The generated text of one row: a heading, counts, failures with their promises."""
    groups = report.groups()
    lines = [f"<!-- row: {row.id} -->", f'<a id="{row.id}"></a>', "", f"### {row.title}", ""]
    level = report.level if not report.errors else "none"
    lines.append(f"Level **{level}** ({report.level_reason}).")
    lines += _coverage_lines(report)
    native = report.about.get("langgraph-checkpoint-conformance")
    if native:
        lines.append(f"langgraph-checkpoint-conformance: **{native.split(' ', 1)[0]}**.")
    lines += ["", "| group | passed | failed | skipped |", "| --- | ---: | ---: | ---: |"]
    for g in ECOSYSTEM_GROUPS:
        s = groups.get(g)
        if s is not None:
            lines.append(f"| {g} | {s.passed} | {s.failed} | {s.skipped} |")
    failures = sorted(report.failures, key=lambda r: (r.group, r.name))
    runner = sorted(
        (r for r in report.skipped if r.reason.startswith(RUNNER_FAILED)),
        key=lambda r: (r.group, r.name),
    )
    if report.errors:
        lines += ["", "Errors: " + "; ".join(_promise(e) for e in report.errors)]
    if failures:
        lines += ["", "Failed:", ""]
        lines += [f"- `{r.group}::{r.name}`: {_promise(r.reason)}." for r in failures]
    if runner:
        lines += ["", "The library's runner failed (on its own in-memory storage too):", ""]
        lines += [f"- `{r.group}::{r.name}`: {_promise(r.reason)}." for r in runner]
    lines += ["<!-- /row -->", ""]
    return "\n".join(lines)


def _coverage_lines(report: Report) -> list[str]:
    """The row's coverage: the count, each cell not exercised, and what is unreachable."""
    cov = report.coverage
    if cov is None:
        return []
    done, total = cov.counts()
    lines = [f"Coverage: **{done} of {total}** reachable cells exercised."]
    if cov.missing:
        cells = ", ".join(f"`{' / '.join(c)}`" for c in cov.missing)
        lines.append(f"Not exercised: {cells}.")
    reach = cov.reach
    if isinstance(reach, EcosystemReach):
        why = []
        if reach.absent:
            names = ", ".join(f"`{m}`" for m, _ in reach.absent)
            why.append(f"{names} (not implemented by `{reach.kind}`)")
            if not {"adelete_thread", "delete_thread", "delete"} & set(reach.implemented):
                why.append("after delete (no delete)")
        if not reach.reopens:
            why.append("other instance, reopened (the factory takes no location)")
        elif not reach.durable:
            why.append("reopened (not durable)")
        if not reach.holds:
            why.append("cancelled while held (no hold)")
        if reach.max_length < DEFAULT_MAX_LENGTH:
            why.append(f"lengths above {reach.max_length:,} (the row's `max_length`)")
        reachable = set(cov.reachable)
        free = [c[1] for c in reach.cells() if c not in reachable]
        if free:
            names = ", ".join(f"`{m}`" for m in free)
            why.append(f"{names} cancelled while held (the hold does not hold it)")
        if why:
            lines.append("Unreachable: " + "; ".join(why) + ".")
    return lines


def _rows(text: str) -> dict[str, str]:
    return {
        m.group(1): m.group(0) + "\n"
        for m in re.finditer(r"<!-- row: (\S+) -->.*?<!-- /row -->", text, flags=re.S)
    }


async def run_rows(ids: list[str]) -> dict[str, tuple[Row, Report]]:
    """Run the rows named ``ids`` (in `ROWS` order) and return their reports."""
    from ..api import run

    out: dict[str, tuple[Row, Report]] = {}
    for row in ROWS:
        if row.id not in ids:
            continue
        print(f"ecosystem-results: {row.id} ...", file=sys.stderr, flush=True)
        try:
            with row.open() as target:
                report = await run(target)
        except Exception as exc:  # a row that cannot run is a row that says why
            report = Report(target=row.title, errors=[f"{type(exc).__name__}: {exc}"])
        print(f"ecosystem-results: {row.id}: {report.level}", file=sys.stderr, flush=True)
        out[row.id] = (row, report)
    return out


def _summary(data: dict[str, dict[str, Any]]) -> str:
    """The table of every row's level, from the reports' JSON (`Report.to_dict`)."""
    versions = ", ".join(f"{d} {_version(d)}" for d in DISTRIBUTIONS)
    body = [f"Versions: {versions}; Python {sys.version.split()[0]}.", ""]
    body += ["| row | level | failed | not exercised | runner failed | coverage |"]
    body += ["| --- | --- | ---: | ---: | ---: | ---: |"]
    for row in ROWS:
        d = data.get(row.id)
        if d is None:
            continue
        tests = d.get("tests", [])
        failed = sum(1 for t in tests if t["outcome"] == "failed")
        gaps = sum(
            1 for t in tests if t["outcome"] == "skipped" and t["reason"].startswith(NOT_EXERCISED)
        )
        runner = sum(
            1 for t in tests if t["outcome"] == "skipped" and t["reason"].startswith(RUNNER_FAILED)
        )
        cov = d.get("coverage") or {}
        cells = f"{cov['exercised']} of {cov['reachable']}" if cov else "-"
        body.append(
            f"| [{row.title}](#{row.id}) | {d['level']} | {failed} | {gaps} | {runner} | {cells} |"
        )
    return "\n".join(body) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the rows, then write or check the page; the exit status."""
    parser = argparse.ArgumentParser(prog="scripts/ecosystem-results", description=__doc__)
    parser.add_argument("--rows", nargs="+", metavar="ID", help="run these rows only")
    parser.add_argument("--quick", action="store_true", help="run the in-process rows only")
    parser.add_argument("--check", action="store_true", help="compare with the page, write nothing")
    parser.add_argument(
        "--page", type=Path, default=PAGE, help="the page (docs/ecosystem-conformance.md)"
    )
    args = parser.parse_args(argv)
    known = [r.id for r in ROWS]
    ids = list(QUICK) if args.quick else (args.rows or known)
    unknown = [i for i in ids if i not in known]
    if unknown:
        parser.error(f"unknown row {unknown[0]!r}; the rows are: {', '.join(known)}")
    results = asyncio.run(run_rows(ids))
    page = args.page.read_text(encoding="utf-8") if args.page.exists() else ""
    if args.check:
        stored = _rows(page)
        drift = [
            i for i, (row, report) in results.items() if stored.get(i) != render_row(row, report)
        ]
        for i in drift:
            print(
                f"--- page\n{stored.get(i, '(missing)')}+++ now\n{render_row(*results[i])}",
                file=sys.stderr,
            )
        if drift:
            print(f"ecosystem-results: {', '.join(drift)} differ from {args.page}", file=sys.stderr)
            return 1
        print(f"ecosystem-results: {', '.join(results)} match {args.page}", file=sys.stderr)
        return 0
    json_path = args.page.with_suffix(".json")
    data = json.loads(json_path.read_text()) if json_path.exists() else {}
    data.update({i: report.to_dict() for i, (_, report) in results.items()})
    data = {r.id: data[r.id] for r in ROWS if r.id in data}
    old = _rows(page)
    sections = []
    for row in ROWS:
        if row.id in results:
            sections.append(render_row(*results[row.id]))
        elif row.id in old:
            sections.append(old[row.id])
    generated = "\n".join([BEGIN, "", _summary(data), *sections, END])
    if BEGIN in page and END in page:
        head, _, rest = page.partition(BEGIN)
        _, _, tail = rest.partition(END)
        page = head + generated + tail
    else:
        page = page + "\n" + generated + "\n"
    args.page.write_text(page, encoding="utf-8")
    json_path.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"ecosystem-results: wrote {args.page} and {json_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

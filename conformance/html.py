"""The conformance report as one self-contained HTML page (``--html FILE``).

No script, stylesheet, font or image is loaded from anywhere: the page is one
file that a browser shows offline. It holds the verdict, the groups, every
failure with its reason, the coverage matrices (exercised, not exercised,
unreachable), the latency of each operation as bars, and every failing
history drawn as a timeline: one lane per client, one bar per operation from
its invocation to its answer (an operation whose write may land later runs to
the right edge), as Porcupine and Knossos draw theirs.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .report import Report

__all__ = ["histories_in", "render"]

_ROW = re.compile(
    r"^\s*(?P<n>\d+)\s+(?P<client>\S+)\s+(?P<start>[\d.]+) ms\s+(?P<end>[\d.]+ ms|\.\.\.)"
    r"\s+(?P<call>\S.*?)\s{2,}(?P<outcome>\S.*)$"
)
_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px}
th{background:#f3f3f3;text-align:left}.x{background:#b7e4b7}.gap{background:#f7b2b2}
.no{background:#fafafa}.ok{color:#176f2c}.bad{color:#b00020}pre{white-space:pre-wrap}
.bar{display:inline-block;height:10px;background:#5b8def}svg text{font-size:11px}
"""


def histories_in(reason: str) -> list[list[dict[str, str | float | None]]]:
    """The minimal histories of a failure reason (the linearizability checker's tables)."""
    found: list[list[dict[str, str | float | None]]] = []
    current: list[dict[str, str | float | None]] = []
    for line in reason.splitlines():
        match = _ROW.match(line)
        if match is None:
            if current:
                found.append(current)
                current = []
            continue
        end = match["end"]
        current.append(
            {
                "n": match["n"],
                "client": match["client"],
                "start": float(match["start"]),
                "end": None if end == "..." else float(end.split()[0]),
                "call": match["call"],
                "outcome": match["outcome"],
            }
        )
    if current:
        found.append(current)
    return found


def _timeline(ops: list[dict[str, str | float | None]]) -> str:
    clients = list(dict.fromkeys(str(op["client"]) for op in ops))
    ends = [float(op["end"]) for op in ops if op["end"] is not None]
    span = max([float(op["start"]) for op in ops] + ends) or 1.0  # type: ignore[arg-type]
    width, lane, left = 720, 34, 110
    height = lane * len(clients) + 30
    parts = [f'<svg class="timeline" width="{width + left + 20}" height="{height}">']
    for i, client in enumerate(clients):
        y = 20 + i * lane
        parts.append(f'<text x="4" y="{y + 14}">{html.escape(client)}</text>')
        parts.append(f'<line x1="{left}" x2="{left + width}" y1="{y + 24}" y2="{y + 24}" '
                     'stroke="#ddd"/>')  # fmt: skip
    for op in ops:
        y = 20 + clients.index(str(op["client"])) * lane
        x0 = left + float(op["start"]) / span * width  # type: ignore[arg-type]
        done = op["end"] is not None
        x1 = left + (float(op["end"]) / span * width if done else width)  # type: ignore[arg-type]
        colour = "#5b8def" if done else "#f0a030"
        label = f"{op['n']}: {op['call']} -> {op['outcome']}"
        parts.append(
            f'<rect x="{x0:.1f}" y="{y + 4}" width="{max(x1 - x0, 3):.1f}" height="16" '
            f'fill="{colour}" opacity="0.8"><title>{html.escape(label)}</title></rect>'
        )
        parts.append(f'<text x="{x0 + 2:.1f}" y="{y + 16}">{html.escape(str(op["n"]))}</text>')
    parts.append("</svg>")
    rows = "".join(
        f"<tr><td>{html.escape(str(op['n']))}</td><td>{html.escape(str(op['client']))}</td>"
        f"<td>{op['start']} ms</td><td>{'...' if op['end'] is None else str(op['end']) + ' ms'}"
        f"</td><td>{html.escape(str(op['call']))}</td>"
        f"<td>{html.escape(str(op['outcome']))}</td></tr>"
        for op in ops
    )
    head = "<tr><th>#</th><th>client</th><th>invoked</th><th>completed</th><th>call</th>"
    return "".join(parts) + f"<table>{head}<th>outcome</th></tr>{rows}</table>"


def _coverage(report: Report) -> str:
    cov = report.coverage
    if cov is None:
        return ""
    done, total = cov.counts()
    reachable = set(cov.reachable)
    out = [f"<h2>Protocol coverage: {done} of {total} reachable cells exercised</h2>"]
    out.append(
        '<p><span class="x">&nbsp;exercised&nbsp;</span> '
        '<span class="gap">&nbsp;not exercised&nbsp;</span> '
        '<span class="no">&nbsp;unreachable&nbsp;</span></p>'
    )
    for matrix in cov.reach.matrices:
        cells = [c for c in cov.reach.cells() if c[0] == matrix]
        if not cells:
            continue
        rows = list(dict.fromkeys(c[1] for c in cells))
        columns = list(dict.fromkeys(c[2] for c in cells))
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = []
        for row in rows:
            tds = []
            for column in columns:
                cell = (matrix, row, column)
                kind = "no" if cell not in reachable else "x" if cell in cov.exercised else "gap"
                tds.append(f'<td class="{kind}" title="{html.escape(" / ".join(cell))}"></td>')
            body.append(f"<tr><th>{html.escape(row)}</th>{''.join(tds)}</tr>")
        out.append(f"<h3>{matrix}</h3><table><tr><th></th>{head}</tr>{''.join(body)}</table>")
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in cov.unreachable)
    if notes:
        out.append(f"<h3>Unreachable</h3><ul>{notes}</ul>")
    return "".join(out)


def _latency(report: Report) -> str:
    if not report.latency:
        return ""
    longest = max(v["p99_ms"] for v in report.latency.values()) or 1.0
    rows = "".join(
        f"<tr><td>{html.escape(op)}</td><td>{int(v['count'])}</td><td>{v['p50_ms']:.3f}</td>"
        f"<td>{v['p99_ms']:.3f}</td><td>{v['max_ms']:.3f}</td><td>"
        f'<span class="bar" style="width:{v["p50_ms"] / longest * 300:.0f}px"></span> p50<br>'
        f'<span class="bar" style="width:{v["p99_ms"] / longest * 300:.0f}px"></span> p99'
        "</td></tr>"
        for op, v in report.latency.items()
    )
    head = "<tr><th>operation</th><th>count</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th>"
    return f"<h2>Storage latency</h2><table>{head}<th></th></tr>{rows}</table>"


def render(report: Report) -> str:
    """The whole report as one HTML document that needs nothing else."""
    verdict = "ok" if report.ok else "FAILED"
    rating = (
        f"level {report.level} ({report.level_reason})"
        if report.rated
        else f"not rated (only {', '.join(report.groups_run)} ran)"
    )
    groups = "".join(
        f"<tr><td>{html.escape(g)}</td><td>{s.passed}</td><td>{s.failed}</td>"
        f"<td>{s.skipped}</td><td>{s.indeterminate}</td></tr>"
        for g, s in report.groups().items()
    )
    failures = []
    for r in report.failures:
        drawn = "".join(_timeline(h) for h in histories_in(r.reason))
        failures.append(
            f'<h3 class="bad">{html.escape(r.group)}::{html.escape(r.name)}</h3>'
            f"{drawn}<pre>{html.escape(r.reason)}</pre>"
        )
    errors = "".join(f'<p class="bad">error: {html.escape(e)}</p>' for e in report.errors)
    title = f"checkpointkit conformance: {html.escape(report.target)}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>{title}</h1>"
        f'<p class="{"ok" if report.ok else "bad"}"><b>{verdict}</b>: {html.escape(rating)}; '
        f"{len(report.results)} tests in {report.duration:.1f} s</p>{errors}"
        "<h2>Groups</h2><table><tr><th>group</th><th>passed</th><th>failed</th>"
        f"<th>skipped</th><th>indeterminate</th></tr>{groups}</table>"
        + (f"<h2>Failures</h2>{''.join(failures)}" if failures else "")
        + _coverage(report)
        + _latency(report)
        + "</body></html>\n"
    )

"""The HTML report (issue 21): one self-contained page, with the coverage and each failing history
drawn as a timeline, shown by a real headless Chromium without a console error."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from checkpointkit.conformance import Report, Target, run
from checkpointkit.conformance.html import histories_in

from .broken.nonlinear import CheckThenWrite

PAGE_SHOT = Path(__file__).parents[2] / "docs" / "images" / "conformance-report.png"


class _Refs(HTMLParser):
    """Every address a page would load: src, href, and url(...) in its style."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self.svgs = 0
        self.rects = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.svgs += tag == "svg"
        self.rects += tag == "rect"
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.loads.append(value)

    def handle_data(self, data: str) -> None:
        self.loads += re.findall(r"url\(([^)]*)\)", data)


async def _failing_report() -> Report:
    return await run(
        Target(CheckThenWrite, name="check-then-write"),
        groups=["linearizability", "semantics"],
        pattern="linearizable or round_trip",
    )


async def test_the_html_report_loads_nothing_and_draws_each_failing_history(
    tmp_path: Path,
) -> None:
    report = await _failing_report()
    assert report.failures, report.summary()
    reason = next(r.reason for r in report.failures if "minimal history" in r.reason)
    history = histories_in(reason)[0]
    assert history and {"client", "start", "end", "call", "outcome"} <= set(history[0])
    page = tmp_path / "report.html"
    report.write_html(page)
    refs = _Refs()
    refs.feed(page.read_text())
    assert refs.loads == []  # nothing from the network, nothing from another file
    assert refs.svgs >= 1 and refs.rects >= len(history)
    text = page.read_text()
    assert "Protocol coverage" in text and 'class="gap"' in text  # a partial run has gaps
    assert "check-then-write" in text and "FAILED" in text


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CHECKPOINTKIT_REQUIRE_BACKENDS") == "1":
            pytest.fail("no chromium: scripts/setup installs Debian's chromium")
        pytest.skip("no chromium (scripts/setup installs Debian's chromium)")
    return found


async def test_chromium_shows_the_html_report_without_a_console_error(tmp_path: Path) -> None:
    chromium = _chromium()
    report = await _failing_report()
    page = tmp_path / "report.html"
    report.write_html(page)
    shot = tmp_path / "report.png"
    proc = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console  # the page logs nothing: no script error, no failed load
    assert shot.stat().st_size > 10_000  # a picture with something drawn (kept in tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_docs_show_a_screenshot_of_the_html_report() -> None:
    assert PAGE_SHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (Path(__file__).parents[2] / "docs" / "conformance.md").read_text()
    assert "images/conformance-report.png" in page

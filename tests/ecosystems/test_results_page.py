"""docs/ecosystem-conformance.md is what scripts/ecosystem-results gives: the in-process rows
are run again and compared, and the comparison catches a page that drifted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from checkpointkit.conformance.ecosystems.known import ROWS

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "ecosystem-conformance.md"
RESULTS = [sys.executable, "-m", "checkpointkit.conformance.ecosystems.results"]


def _results(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RESULTS, *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_results_page_has_every_row() -> None:
    rows = re.findall(r"<!-- row: (\S+) -->", PAGE.read_text())
    assert rows == [r.id for r in ROWS]


def test_results_page_matches_the_quick_rows_run_now() -> None:
    done = _results("--quick", "--check")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "match" in done.stderr


def test_results_check_catches_a_page_that_drifted(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = PAGE.read_text()
    row = re.search(
        r"<!-- row: agent-framework-inmemory -->.*?<!-- /row -->", text, flags=re.S
    )
    assert row is not None
    page.write_text(text.replace(row.group(0), row.group(0).replace("| 6 |", "| 5 |", 1)))
    done = _results("--rows", "agent-framework-inmemory", "--check", "--page", str(page))
    assert done.returncode == 1
    assert "agent-framework-inmemory differ from" in done.stderr

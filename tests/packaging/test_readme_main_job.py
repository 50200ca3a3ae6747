"""The README's first command, the main job, works as written: the conformance suite against the
embedded default backend, level full (after scripts/setup, which CI has run)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.slow


def test_the_readmes_main_job_rates_sqlite_full() -> None:
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"^    (scripts/setup && .*checkpointkit conformance .*)$", readme, re.M)
    assert first, "the README must open with the main job's command"
    command = first[1].removeprefix("scripts/setup && ")
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    verdict = proc.stdout.strip().splitlines()[-1]
    assert verdict.startswith("Conformance level: full"), verdict
    assert "reachable cells exercised" in proc.stdout
    # docs/conformance.md quotes the coverage part of this output
    grid = re.search(r"^Protocol coverage:.*?^never waited.*?$", proc.stdout, re.M | re.S)
    page = (ROOT / "docs" / "conformance.md").read_text()
    quoted = re.search(r"<!-- coverage-sqlite:.*?-->\n```text\n(.*?)\n```", page, re.S)
    assert grid and quoted and quoted[1] == grid[0], "update docs/conformance.md's sqlite grid"

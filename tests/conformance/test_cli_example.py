"""The command-line example of docs/conformance.md ("4. The command line") is what the command
prints now: its groups' counts, each failure and its message, and its last line (the time
aside)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "conformance.md"


def _shown() -> list[str]:
    text = PAGE.read_text()
    block = re.search(r"<!-- cli-example:.*?-->\n```console\n(.*?)\n```", text, re.S)
    assert block is not None, "docs/conformance.md has no cli-example block"
    return block[1].splitlines()


def _timeless(line: str) -> str:
    return re.sub(r"in \d+\.\d+ s$", "in N s", line)


def test_the_command_line_example_is_what_the_command_prints() -> None:
    shown = _shown()
    command = shown[0].removeprefix("$ ").split()
    assert command[0] == "checkpointkit"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "checkpointkit"), *command[1:]],
        cwd=ROOT / "tests" / "conformance",
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "92"},
    )
    assert done.returncode == 1, done.stderr[-2000:]
    printed = done.stdout.splitlines()
    start = printed.index(shown[1])
    body = shown[1 : shown.index("...")]
    assert printed[start : start + len(body)] == body
    assert _timeless(shown[-1]) in [_timeless(line) for line in printed]

"""The examples of docs/integrations run as written (on a temporary directory), as scripts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations"


def run_example(page: str, blocks: int, store: str, tmp_path: Path) -> str:
    """Run the first ``blocks`` Python blocks of ``page`` as one script; return its output."""
    found = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)
    code = "\n".join(found[:blocks])
    code = re.sub(r'STORE = "[^"]*"', f'STORE = "{store}"', code)
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        # Show what warnings-as-errors would catch, without asyncio's debug mode
        # (which logs slow callbacks when the machine is busy).
        [
            sys.executable,
            "-W",
            "default::ResourceWarning",
            "-W",
            "default::RuntimeWarning",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for problem in ("ResourceWarning", "never awaited", "Task was destroyed", "Traceback"):
        assert problem not in done.stderr, done.stderr
    return done.stdout


def test_langgraph_page_example_runs(tmp_path: Path) -> None:
    out = run_example("langgraph.md", 2, f"file://{tmp_path}/graphs", tmp_path)
    assert "Publish this?" in out
    assert "['written', 'reviewed: yes', 'published']" in out


def test_agent_framework_page_example_runs(tmp_path: Path) -> None:
    out = run_example("agent-framework.md", 1, f"file://{tmp_path}/workflows", tmp_path)
    assert "['approve']" in out
    assert "['order 7: charged']" in out

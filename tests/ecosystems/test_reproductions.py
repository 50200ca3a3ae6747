"""The standalone reproductions in scripts/repro/ exit as docs/ecosystem-conformance.md says.

Each script shows one third-party defect with the third-party library alone (no
checkpointkit import) and exits with status 1 when the defect shows, 0 when not. The page
names each script in its section with the status it exits with here ("exits with status
N"); these tests run the scripts and compare. The PostgreSQL one runs against a server of
the project's launcher (skipped where none can start, as the other PostgreSQL tests are).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPRO = ROOT / "scripts" / "repro"
PAGE = ROOT / "docs" / "ecosystem-conformance.md"
NEEDS_SERVER = {
    "langgraph_postgres_cancelled_call_hangs.py",
    "langgraph_postgres_negative_zero.py",
}
TIMEOUT = 20.0
"""Seconds a script may take (the slowest, SQLite's busy timeout, takes about 5)."""


def _scripts() -> list[str]:
    return sorted(p.name for p in REPRO.glob("*.py"))


def _documented() -> dict[str, int]:
    """Script name -> the exit status its section of the page says it has here."""
    text = PAGE.read_text(encoding="utf-8")
    part = text.split("## Third-party failures", 1)[1].split("<!-- results: begin -->", 1)[0]
    found: dict[str, int] = {}
    for section in re.split(r"^### ", part, flags=re.M)[1:]:
        names = set(re.findall(r"scripts/repro/(\w+\.py)", section))
        statuses = re.findall(r"exits with status (\d)", section)
        assert len(names) <= 1, f"a section names {sorted(names)}: one script a section"
        if names:
            assert len(statuses) == 1, f"the section of {names} must say 'exits with status N'"
            found[names.pop()] = int(statuses[0])
    return found


def _run(script: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` from ``cwd`` (outside the repository, as its maintainers would)."""
    return subprocess.run(
        [sys.executable, str(REPRO / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_every_script_is_documented_with_its_exit_status() -> None:
    assert _scripts(), "no scripts in scripts/repro"
    assert sorted(_documented()) == _scripts()


@pytest.mark.parametrize("script", _scripts())
def test_script_needs_no_checkpointkit(script: str) -> None:
    text = (REPRO / script).read_text(encoding="utf-8")
    assert not re.search(r"^\s*(from|import)\s+checkpointkit", text, flags=re.M)
    assert "pip install" in text, "the docstring says what to install"


@pytest.mark.parametrize("script", sorted(set(_scripts()) - NEEDS_SERVER))
def test_script_exits_as_documented(script: str, tmp_path: Path) -> None:
    done = _run(script, tmp_path)
    expected = _documented()[script]
    assert done.returncode == expected, done.stdout + done.stderr[-3000:]
    if expected == 1:
        assert "BUG:" in done.stdout


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_SECONDS = re.compile(r"\b\d+\.\d+ s\b")
_THREAD = re.compile(r"\basyncio_\d+\b")


def _masked(line: str) -> str:
    """``line`` with its ids, its measured seconds and the numbers of asyncio's worker
    threads masked (they differ from run to run: which worker thread of the event loop's
    pool ran the call)."""
    return _THREAD.sub("asyncio_<n>", _SECONDS.sub("<t> s", _UUID.sub("<id>", line)))


def _quoted() -> dict[str, list[str]]:
    """Script name -> the output lines its section quotes under ``$ ... scripts/repro/X``."""
    text = PAGE.read_text(encoding="utf-8")
    found: dict[str, list[str]] = {}
    pattern = r"```console\n\$ \S+ scripts/repro/(\w+\.py)[^\n]*\n(.*?)```"
    for name, block in re.findall(pattern, text, flags=re.S):
        found[name] = block.splitlines()
    return found


@pytest.mark.parametrize("script", sorted(set(_quoted()) - NEEDS_SERVER))
def test_script_prints_what_its_section_quotes(script: str, tmp_path: Path) -> None:
    """The output a section quotes is the script's, line for line (ids and seconds
    masked)."""
    done = _run(script, tmp_path)
    printed = [_masked(line) for line in done.stdout.splitlines()]
    assert printed == [_masked(line) for line in _quoted()[script]], done.stdout


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    from checkpointkit.conformance.servers.postgres import postgres_server

    with postgres_server() as server:
        yield server.url


@pytest.mark.parametrize("script", sorted(NEEDS_SERVER))
def test_postgres_script_shows_its_help(script: str, tmp_path: Path) -> None:
    done = _run(script, tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert "DATABASE_URL" in done.stdout


@pytest.mark.parametrize("script", sorted(NEEDS_SERVER))
def test_postgres_script_exits_as_documented(
    script: str, postgres_url: str, tmp_path: Path
) -> None:
    done = _run(script, tmp_path, postgres_url)
    expected = _documented()[script]
    assert done.returncode == expected, done.stdout + done.stderr[-3000:]
    if expected == 1:
        assert "BUG:" in done.stdout
    printed = [_masked(line) for line in done.stdout.splitlines()]
    assert printed == [_masked(line) for line in _quoted()[script]], done.stdout

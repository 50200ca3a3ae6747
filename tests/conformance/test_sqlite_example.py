"""The worked example of docs/writing-an-adapter.md (docs/examples/sqlite_adapter) is tested
here: its own conformance test runs, its entry point opens it by URL, and the code shown in
the docs is the code tested."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from checkpointkit import ConfigurationError, open_storage
from checkpointkit.conformance import Target, new_location, run

pytest.importorskip("aiosqlite")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "sqlite_adapter"
sys.path.insert(0, str(EXAMPLE))

from checkpointkit_sqlite import SQLiteStorage  # noqa: E402

T = TypeVar("T")


def _load(path: Path, name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The example's own conformance test, collected here so that CI runs it.
TestSQLiteConformance = _load(
    EXAMPLE / "tests" / "test_conformance.py", "sqlite_example_tests"
).TestSQLiteConformance  # type: ignore[attr-defined]


@pytest.fixture
def registered(tmp_path: Path) -> Iterator[None]:
    """Install the example's entry points as pip would: a dist-info directory on sys.path."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    dist = tmp_path / "site" / f"checkpointkit_sqlite-{project['version']}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = []
    for group, eps in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {value}" for name, value in eps.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    sys.path.insert(0, str(tmp_path / "site"))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path / "site"))
        importlib.invalidate_caches()


async def test_entry_point_opens_the_sqlite_scheme(registered: None, tmp_path: Path) -> None:
    async with open_storage(f"aiosqlite://{tmp_path}/by-url.db?table=runs") as storage:
        assert isinstance(storage, SQLiteStorage)
        assert storage.table == "runs"
        version = await storage.put("a/b", b"through the entry point")
        assert await storage.get("a/b") == (b"through the entry point", version)


async def test_the_cli_spec_form_works_through_the_entry_point(
    registered: None, tmp_path: Path
) -> None:
    report = await run(
        f"aiosqlite://{tmp_path}/spec.db", groups=["semantics"], pattern="round_trip or prefix"
    )
    assert report.ok, report.summary()


def test_bad_urls_and_tables_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="plain identifier"):
        SQLiteStorage(tmp_path / "x.db", table='x"; DROP TABLE y; --')
    with pytest.raises(ConfigurationError, match="unknown aiosqlite URL parameter 'tabel'"):
        SQLiteStorage.from_url(f"aiosqlite://{tmp_path}/x.db?tabel=t")
    with pytest.raises(ConfigurationError, match="names no database file"):
        SQLiteStorage.from_url("aiosqlite://")


def test_the_docs_show_the_tested_code() -> None:
    doc = (ROOT / "docs" / "writing-an-adapter.md").read_text()
    blocks = re.findall(r"```python\n# checkpointkit_sqlite/__init__.py\n(.*?)```", doc, re.S)
    assert blocks, "docs/writing-an-adapter.md must show checkpointkit_sqlite/__init__.py"
    assert blocks[0] == (EXAMPLE / "checkpointkit_sqlite" / "__init__.py").read_text()
    tests = re.findall(r"```python\n# tests/test_conformance.py\n(.*?)```", doc, re.S)
    assert tests and tests[0] == (EXAMPLE / "tests" / "test_conformance.py").read_text()


def _sqlite_target(base: Path) -> Target:
    async def sqlite_storage(*, location: str | None = None) -> AsyncIterator[SQLiteStorage]:
        path = base / f"{location or new_location()}.db"
        async with SQLiteStorage(path) as storage:
            yield storage

    return Target(sqlite_storage, name="aiosqlite")


async def _plain_await(task: asyncio.Future[T]) -> T:
    """What the example would be without ``_finish``: a cancelled statement runs on."""
    return await task


@pytest.mark.parametrize("attempt", range(2))
async def test_sqlite_example_without_its_cancellation_handling_fails_the_cancellation_group(
    attempt: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import checkpointkit_sqlite

    monkeypatch.setattr(checkpointkit_sqlite, "_finish", _plain_await)
    report = await run(_sqlite_target(tmp_path), groups=["cancellation"])
    assert not report.ok, report.summary()
    # Which of the group's watched puts lands late first depends on the machine's timing
    # (a plain cancel of a put or a delete, or a put held in the backend by a 32 MiB value): any one
    # failing for landing late, with its fix, is the catch.
    late = [
        r for r in report.failures if "must not land later" in r.reason and "To fix it" in r.reason
    ]
    assert late, report.summary()
    assert {r.name for r in late} <= {
        "test_cancelled_put_does_not_land_later",
        "test_cancelled_delete_does_not_land_later",
        "test_put_cancelled_while_held_in_backend_raises_promptly_and_never_lands",
    }, report.summary()


async def test_sqlite_example_passes_the_cancellation_group(tmp_path: Path) -> None:
    # Through run() the held-in-backend test would hold a 32 MiB statement, which _finish
    # waits for (about 0.1 s idle, more under load); the example's own test class holds a
    # write transaction instead (its backend_stall fixture), and passes that test above.
    report = await run(
        _sqlite_target(tmp_path), groups=["cancellation"], pattern="not held_in_backend"
    )
    assert report.ok, report.summary()
    assert not report.indeterminate, report.summary()

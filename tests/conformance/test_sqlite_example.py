"""The worked example of docs/writing-an-adapter.md (docs/examples/sqlite_adapter) is tested
here: its own conformance test runs, its entry point opens it by URL, and the code shown in
the docs is the code tested."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkpointkit import ConfigurationError, open_storage
from checkpointkit.conformance import run

pytest.importorskip("aiosqlite")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "sqlite_adapter"
sys.path.insert(0, str(EXAMPLE))

from checkpointkit_sqlite import SQLiteStorage  # noqa: E402


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

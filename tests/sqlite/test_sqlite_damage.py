"""Damage inside a SQLite database file: ``checkpointkit verify`` lists all of it (issue 20).

The database is written through the runner, then damaged byte by byte the way a
bad disk or a bad copy does it: a B-tree page that is no longer a page, or one
byte of the key index flipped in place. A read through a damaged index entry
says "missing" without any error, so only SQLite's own structure check sees it.
"""

from __future__ import annotations

import asyncio
import io
import sqlite3
from pathlib import Path

from checkpointkit import Workflow, step
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.cli import invoke
from checkpointkit.verify import verify

PAGE = 4096
TABLE_LEAF, INDEX_LEAF = 13, 10
RUNS = 30


@step
async def double(x: int) -> int:
    return 2 * x


async def _flow(n: int) -> int:
    return await double(n) + await double(n + 1)


def _store(path: Path) -> None:
    """A store of RUNS completed runs, all in the main file (the log checkpointed)."""

    async def write() -> None:
        async with SQLiteStorage(path) as storage:
            wf = Workflow(_flow, storage=storage)
            for i in range(RUNS):
                await wf.run(i, run_id=f"run-{i:03d}")

    asyncio.run(write())
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _pages(data: bytes, kind: int) -> list[int]:
    """The numbers of the pages of B-tree ``kind`` (page 1's header is 100 bytes)."""
    return [
        n
        for n in range(2, len(data) // PAGE + 1)  # page 1 is the schema
        if data[(n - 1) * PAGE] == kind
    ]


def _verify_cli(path: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = invoke(["verify", f"sqlite:///{path}"], stdin=io.StringIO(), stdout=out, stderr=err)
    return code, out.getvalue() + err.getvalue()


def test_verify_lists_the_records_of_every_damaged_page_not_only_the_first(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    _store(path)
    data = bytearray(path.read_bytes())
    leaves = _pages(data, TABLE_LEAF)
    assert len(leaves) >= 3, leaves
    first, last = leaves[0], leaves[-1]
    for n in (first, last):
        data[(n - 1) * PAGE] = 0x55  # no longer a B-tree page of any kind
    path.write_bytes(data)

    code, text = _verify_cli(path)
    assert code == 1, text
    unreadable = [line for line in text.splitlines() if "unreadable" in line]
    runs = {line.split("runs/")[1].split("/")[0] for line in unreadable}
    # records on both damaged pages are named: runs from the start and the end of the file
    assert len(runs) >= 2 and min(runs) < max(runs), text
    assert all("SQLITE_CORRUPT" in line for line in unreadable), text
    assert "integrity check" in text, text


def test_verify_finds_a_key_index_entry_damaged_in_place(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    _store(path)
    data = bytearray(path.read_bytes())
    found = (data.find(b"runs/run-", (n - 1) * PAGE, n * PAGE) for n in _pages(data, INDEX_LEAF))
    at = next(i for i in found if i > 0)
    data[at + len("runs/run-") + 2] = ord("X")  # runs/run-00X/...: the entry names no row's key
    path.write_bytes(data)

    async def check() -> list[str]:
        async with SQLiteStorage(path, create=False) as storage:
            problems = await storage.check_integrity()
            report = await verify(storage)
        assert not report.ok
        return problems + [f.message for f in report.findings if f.kind == "storage"]

    problems = asyncio.run(check())
    assert any("missing from index" in p for p in problems), problems
    code, text = _verify_cli(path)
    assert code == 1 and "missing from index" in text, text


def test_a_sound_database_passes_the_integrity_check(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    _store(path)

    async def check() -> list[str]:
        async with SQLiteStorage(path, create=False) as storage:
            report = await verify(storage)
            assert report.ok, report.findings
            return await storage.check_integrity()

    assert asyncio.run(check()) == []

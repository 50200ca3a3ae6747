"""Opening a SQLite database (issue 20): read-only commands change nothing, a file that is
not a checkpointkit store is refused, a mistyped path creates nothing, and processes that
open one new database at once never fail for a race of their own."""

from __future__ import annotations

import asyncio
import hashlib
import io
import multiprocessing
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from checkpointkit import ConfigurationError, StorageUnavailable, Workflow, open_storage, step
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.cli import invoke


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = invoke(list(args), stdin=io.StringIO(), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _files(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and a digest of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _foreign_database(path: Path) -> None:
    """Another application's database: its own table, rollback journal (not WAL)."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()


READ_ONLY_COMMANDS = [["runs"], ["ls", "r"], ["show", "r"], ["verify"]]


@pytest.mark.parametrize("command", READ_ONLY_COMMANDS, ids=lambda c: c[0])
def test_read_only_commands_refuse_another_applications_database_and_change_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "app.db"
    _foreign_database(path)
    before = _files(tmp_path)
    code, out, err = _cli(*command, "--storage", f"sqlite:///{path}")
    assert code != 0, (out, err)
    assert "not a checkpointkit store" in err and "users" in err, err
    assert _files(tmp_path) == before  # no -wal, no new table, the journal mode kept
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["users"]
    conn.close()


@pytest.mark.parametrize("command", READ_ONLY_COMMANDS, ids=lambda c: c[0])
def test_an_empty_file_is_not_a_store_for_read_only_commands(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    code, out, err = _cli(*command, "--storage", f"sqlite:///{path}")
    assert code != 0 and "ok" not in out.lower(), (out, err)
    assert "empty file (0 bytes), not a checkpointkit store" in err, err
    assert _files(tmp_path) == {"empty.db": hashlib.sha256(b"").hexdigest()}


def test_create_false_refuses_a_foreign_database_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    _foreign_database(path)
    before = _files(tmp_path)
    with pytest.raises(ConfigurationError, match="not a checkpointkit store"):
        open_storage(f"sqlite:///{path}", create=False)
    assert _files(tmp_path) == before


@step(name="work")
async def work(x: int) -> int:
    return x + 1


async def flow(x: int) -> int:
    return await work(x)


def test_read_only_commands_on_a_store_write_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store.db"

    async def make() -> None:
        async with open_storage(f"sqlite:///{path}") as storage:
            await Workflow(flow, storage=storage).run(1, run_id="r")

    asyncio.run(make())
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file
    conn.close()
    before = _files(tmp_path)
    for command in READ_ONLY_COMMANDS:
        code, out, err = _cli(*command, "--storage", f"sqlite:///{path}")
        assert code == 0, (command, out, err)
    after = _files(tmp_path)
    assert after[path.name] == before[path.name]  # the database file itself: not one byte
    assert after.get(f"{path.name}-wal", hashlib.sha256(b"").hexdigest()) == before.get(
        f"{path.name}-wal", hashlib.sha256(b"").hexdigest()
    )


async def test_read_only_storage_reads_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with SQLiteStorage(path) as writer:
        await writer.put("k", b"value")
    async with SQLiteStorage(path, read_only=True) as reader:
        assert (await reader.get("k")).data == b"value"
        with pytest.raises(StorageUnavailable, match="readonly") as caught:
            await reader.put("k", b"other")
        assert isinstance(caught.value.__cause__, sqlite3.Error)
    async with SQLiteStorage(path) as writer:
        assert (await writer.get("k")).data == b"value"


def test_conformance_on_a_mistyped_sqlite_path_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "sub" / "store.db"
    code, out, err = _cli("conformance", f"sqlite:///{missing}", "--group", "semantics")
    assert code == 2, (out, err)
    assert "does not exist" in err and str(missing) in err, err
    assert list(tmp_path.iterdir()) == []


def test_lock_timeout_error_chains_the_sqlite_error(tmp_path: Path) -> None:
    path = tmp_path / "store.db"

    async def go() -> BaseException:
        async with SQLiteStorage(path, busy_timeout=0.05) as storage:
            await storage.put("k", b"1")
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # holds the write lock
            try:
                with pytest.raises(StorageUnavailable) as caught:
                    await storage.put("k", b"2")
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            return caught.value

    error = asyncio.run(go())
    assert isinstance(error.__cause__, sqlite3.OperationalError), repr(error.__cause__)
    assert "busy_timeout" in str(error)


# -- many processes, one new database --------------------------------------------------------
PROCESSES = 8
ROUNDS = 50


def _opener(folder: str, index: int, barrier: Any, errors: Any) -> None:
    async def one(path: str) -> None:
        async with SQLiteStorage(path) as storage:
            await storage.put(f"p{index}", b"x")

    for round_ in range(ROUNDS):
        path = os.path.join(folder, f"round{round_}", "new", "store.db")
        barrier.wait(timeout=30)  # all processes open the same new database at once
        try:
            asyncio.run(one(path))
        except Exception as exc:
            errors.put(f"round {round_}, process {index}: {type(exc).__name__}: {exc}")


def test_concurrent_first_opens_of_a_new_database_never_fail(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    errors = ctx.Queue()
    procs = [
        ctx.Process(target=_opener, args=(str(tmp_path), i, barrier, errors))
        for i in range(PROCESSES)
    ]
    started = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=max(1.0, 55 - (time.monotonic() - started)))
    alive = [p.pid for p in procs if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    found: list[str] = []
    while not errors.empty():
        found.append(errors.get())
    assert not alive, f"processes still opening after 55 s: {alive}"
    assert not found, f"{len(found)} of {PROCESSES * ROUNDS} opens failed: {found[:5]}"
    assert all(p.exitcode == 0 for p in procs)
    for round_ in range(ROUNDS):
        conn = sqlite3.connect(tmp_path / f"round{round_}" / "new" / "store.db")
        keys = {r[0] for r in conn.execute("SELECT key FROM checkpointkit_kv")}
        conn.close()
        assert keys == {f"p{i}" for i in range(PROCESSES)}, (round_, keys)

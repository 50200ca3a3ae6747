"""What the SQLite adapter promises beyond the conformance suite: versions that never come
back, group commit with a condition per write, cancelled writes still queued are dropped,
reads that never wait for the writer, bounded lock waits, clear configuration errors."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from checkpointkit import (
    ConfigurationError,
    IfMatch,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageUnavailable,
    open_storage,
)
from checkpointkit.adapters import sqlite as sqlite_adapter
from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.sqlite import SQLiteStorage


@contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Hold the database's write lock from another connection (as another process would)."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


def commits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the size of every batch the writer commits."""
    sizes: list[int] = []
    real = SQLiteStorage._commit

    def commit(self: SQLiteStorage, conn: sqlite3.Connection, batch: list[object]) -> int:
        sizes.append(len(batch))
        return real(self, conn, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(SQLiteStorage, "_commit", commit)
    return sizes


async def test_versions_never_come_back_same_bytes_recreate_or_restart(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    seen: list[str] = []
    async with SQLiteStorage(path) as s:
        seen.append(await s.put("k", b"same"))
        seen.append(await s.put("k", b"same"))  # the same bytes again
        await s.delete("k")
        seen.append(await s.put("k", b"same", mode="create"))  # deleted, then re-created
    async with SQLiteStorage(path) as again:  # a restart
        await again.delete("k")
        seen.append(await again.put("k", b"same"))
        assert (await again.get("k")).version == seen[-1]
    assert len(set(seen)) == len(seen), seen
    assert [int(v) for v in seen] == sorted(int(v) for v in seen)


async def test_concurrent_writes_share_commits_and_get_their_own_results(
    db: SQLiteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await db.put("cas", b"0")
    stale = (await db.get("cas")).version
    await db.put("cas", b"1")
    current = (await db.get("cas")).version
    await db.put("gone", b"x")
    sizes = commits(monkeypatch)
    results = await asyncio.gather(
        *(db.put("race", f"{i}".encode(), mode="create") for i in range(50)),
        *(db.put(f"own/{i:03d}", b"v") for i in range(200)),
        db.put("cas", b"stale", mode=IfMatch(stale)),
        db.put("cas", b"2", mode=IfMatch(current)),
        db.delete("gone", if_match=stale),
        db.delete("never"),
        return_exceptions=True,
    )
    creates, overwrites, tail = results[:50], results[50:250], results[250:]
    winners = [i for i, r in enumerate(creates) if isinstance(r, str)]
    assert len(winners) == 1
    assert all(isinstance(r, PreconditionFailed) for i, r in enumerate(creates) if i != winners[0])
    assert all(isinstance(r, str) for r in overwrites)
    assert isinstance(tail[0], PreconditionFailed)
    assert isinstance(tail[1], str)
    assert isinstance(tail[2], PreconditionFailed)
    assert tail[3] is False
    assert (await db.get("race")).data == str(winners[0]).encode()
    assert (await db.get("cas")) == (b"2", tail[1])
    assert len(sizes) < 20, f"{len(sizes)} commits for 254 concurrent writes"
    versions = [r for r in results if isinstance(r, str)]
    assert len(set(versions)) == len(versions)


async def test_cancelled_write_still_queued_never_lands(db: SQLiteStorage, tmp_path: Path) -> None:
    await db.put("first", b"x")  # the writer thread exists
    with write_lock(tmp_path / "ck.db"):  # the writer waits for the lock: nothing commits
        blocked = asyncio.ensure_future(db.put("blocked", b"queued first"))
        await asyncio.sleep(0.05)
        task = asyncio.ensure_future(db.put("cancelled", b"never"))
        await asyncio.sleep(0.05)
        task.cancel()
        async with asyncio.timeout(1):
            with pytest.raises(asyncio.CancelledError):
                await task
    await blocked
    await db.put("after", b"y")  # committed after the cancelled one would have been
    with pytest.raises(NotFound):
        await db.get("cancelled")
    assert [k async for k in db.list()] == ["after", "blocked", "first"]


async def test_reads_never_wait_for_the_writer(db: SQLiteStorage, tmp_path: Path) -> None:
    version = await db.put("k", b"v")
    with write_lock(tmp_path / "ck.db"):
        pending = asyncio.ensure_future(db.put("k", b"waits for the lock"))
        async with asyncio.timeout(1):
            assert await db.get("k") == (b"v", version)
            assert [k async for k in db.list()] == ["k"]
        assert not pending.done()
    assert (await pending) != version
    assert (await db.get("k")).data == b"waits for the lock"


async def test_a_lock_held_too_long_fails_with_the_path_named(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    async with SQLiteStorage(path, busy_timeout=0.2) as s:
        with write_lock(path), pytest.raises(StorageUnavailable, match=r"busy\.db.*=0\.2"):
            await s.put("k", b"v")
        assert await s.put("k", b"v")  # healthy once the lock is released


async def test_delete_many_is_one_transaction(
    db: SQLiteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.gather(*(db.put(f"runs/r/c/{i:04d}", b"x") for i in range(1000)))
    sizes = commits(monkeypatch)
    keys = [k async for k in db.list("runs/r/c/")]
    assert await db.delete_many([*keys, "runs/r/c/missing"]) == 1000
    assert sizes == [1]
    assert [k async for k in db.list()] == []


@pytest.mark.parametrize("size", [1000, 3000, 70_000])
async def test_the_log_starts_over_before_it_grows_far_past_the_checkpoint_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """The writer checkpoints by the pages a commit adds to the log, not by the value bytes:
    a 1 KiB value costs two or three 4 KiB pages. Once a checkpoint is done the log starts
    over at its beginning and later commits overwrite blocks the file already has, which
    is much cheaper to sync than making the file longer."""
    limit = 256 << 10
    monkeypatch.setattr(sqlite_adapter, "CHECKPOINT_BYTES", limit)
    path = tmp_path / "log.db"
    async with SQLiteStorage(path, fsync=False) as s:
        for i in range(8 * limit // size):  # about 8 checkpoints' worth of values
            await s.put(f"runs/r/c/{i:05d}", bytes([i % 251]) * size)
        wal = path.with_name(path.name + "-wal").stat().st_size
    assert wal <= 1.5 * limit + 2 * size, f"the log grew to {wal:,} bytes (limit {limit:,})"


async def test_listing_is_a_range_scan_of_the_key_index_alone(db: SQLiteStorage) -> None:
    await asyncio.gather(*(db.put(f"p/{i:04d}", b"x") for i in range(300)))
    await db.put("q", b"x")
    assert [k async for k in db.list("p/", start_after="p/0100", limit=3)] == [
        "p/0101",
        "p/0102",
        "p/0103",
    ]
    assert len([k async for k in db.list("p/")]) == 300
    conn = sqlite3.connect(db.path)
    try:
        plans = [
            row[-1]
            for sql in ("key >= ?1", "key > ?1")
            for row in conn.execute(
                f"EXPLAIN QUERY PLAN SELECT key FROM checkpointkit_kv WHERE {sql} "
                "ORDER BY key LIMIT ?2",
                ("p/", 10),
            )
        ]
    finally:
        conn.close()
    # the index holds the keys: a page of keys never reads a row, however large its value
    assert all("SEARCH" in plan and "COVERING INDEX" in plan for plan in plans), plans


async def test_a_database_of_the_first_layout_keeps_its_rows_and_versions(tmp_path: Path) -> None:
    """Keys used to sit in a ``WITHOUT ROWID`` table, where SQLite reads a large value
    several times slower; opening such a database moves its rows to the new table."""
    path = tmp_path / "old.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("PRAGMA journal_mode=WAL")
    old.execute(
        "CREATE TABLE checkpointkit_kv (key TEXT PRIMARY KEY NOT NULL, version INTEGER NOT NULL, "
        "data BLOB NOT NULL) WITHOUT ROWID"
    )
    old.execute(
        "CREATE TABLE checkpointkit_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) "
        "WITHOUT ROWID"
    )
    old.execute("INSERT INTO checkpointkit_meta VALUES ('version', 41)")
    old.executemany(
        "INSERT INTO checkpointkit_kv VALUES (?, ?, ?)",
        [("runs/a", 7, b"a"), ("runs/b", 41, b"b" * 300_000), ("x", 12, b"")],
    )
    old.close()
    async with SQLiteStorage(path) as s:
        assert await s.get("runs/a") == (b"a", "7")
        assert await s.get("runs/b") == (b"b" * 300_000, "41")
        assert [k async for k in s.list()] == ["runs/a", "runs/b", "x"]
        assert int(await s.put("runs/a", b"a")) > 41  # the counter stayed: no version comes back
        with pytest.raises(PreconditionFailed):
            await s.put("x", b"", mode="create")
    check = sqlite3.connect(path)
    try:
        tables = dict(check.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    finally:
        check.close()
    assert set(tables) == {"checkpointkit_kv", "checkpointkit_meta"}
    assert "WITHOUT ROWID" not in tables["checkpointkit_kv"].upper()


async def test_aclose_stops_every_thread_and_closes_every_connection(tmp_path: Path) -> None:
    s = SQLiteStorage(tmp_path / "c.db", threads=3)
    await asyncio.gather(*(s.put(f"k{i}", b"v") for i in range(20)))
    await asyncio.gather(*(s.get(f"k{i}") for i in range(20)))
    assert any(t.name.startswith("checkpointkit-sqlite") for t in threading.enumerate())
    await s.aclose()
    await s.aclose()
    assert not [t for t in threading.enumerate() if t.name.startswith("checkpointkit-sqlite")]
    assert s._connections == []


async def test_queued_writes_are_answered_before_aclose_returns(tmp_path: Path) -> None:
    s = SQLiteStorage(tmp_path / "q.db")
    puts = [asyncio.ensure_future(s.put(f"k{i}", b"v")) for i in range(100)]
    await asyncio.sleep(0)
    await s.aclose()
    versions = await asyncio.gather(*puts)
    async with SQLiteStorage(tmp_path / "q.db") as again:
        assert [(await again.get(f"k{i}")).version for i in range(100)] == versions


def test_bad_paths_are_configuration_errors_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"is a directory"):
        SQLiteStorage(tmp_path)
    (tmp_path / "text.db").write_text("not a database, just some text " * 100)
    with pytest.raises(ConfigurationError, match=r"text\.db.*not a database"):
        SQLiteStorage(tmp_path / "text.db")
    with pytest.raises(ConfigurationError, match=r"missing\.db.*create=False"):
        SQLiteStorage(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigurationError, match=r"afile.*not a directory"):
        SQLiteStorage(tmp_path / "afile" / "x.db")
    with pytest.raises(ConfigurationError, match="memory://"):
        SQLiteStorage(":memory:")
    with pytest.raises(ConfigurationError, match="busy_timeout"):
        SQLiteStorage(tmp_path / "x.db", busy_timeout=-1)
    with pytest.raises(ConfigurationError, match="threads"):
        SQLiteStorage(tmp_path / "x.db", threads=0)


async def test_url_forms_and_parameters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_storage(f"sqlite:///{tmp_path}/abs.db?fsync=false&busy_timeout=2") as s:
        assert isinstance(s, SQLiteStorage)
        assert (s.path, s.fsync, s.busy_timeout) == (str(tmp_path / "abs.db"), False, 2.0)
    async with open_storage("sqlite:///rel/x.db", threads=4) as s:
        assert isinstance(s, SQLiteStorage)
        assert (s.path, s.threads) == (str(tmp_path / "rel" / "x.db"), 4)
    with pytest.raises(ConfigurationError, match="unknown sqlite URL parameter 'fsnyc'"):
        open_storage(f"sqlite:///{tmp_path}/y.db?fsnyc=false")
    with pytest.raises(ConfigurationError, match="must be true or false"):
        open_storage(f"sqlite:///{tmp_path}/y.db?fsync=maybe")
    with pytest.raises(ConfigurationError, match="names no database file"):
        open_storage("sqlite://")
    with pytest.raises(ConfigurationError, match="unknown sqlite storage option"):
        open_storage(f"sqlite:///{tmp_path}/y.db", table="t")


async def test_a_plain_path_opens_sqlite_unless_it_is_a_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with FileStorage(tmp_path / "old") as old:  # file-adapter data from before
        await old.put("runs/a", b"kept")
    async with open_storage("./old") as s:
        assert isinstance(s, FileStorage)
        assert (await s.get("runs/a")).data == b"kept"
    async with open_storage("./checkpoints") as s:
        assert isinstance(s, SQLiteStorage)
        assert s.path == str(tmp_path / "checkpoints")
        await s.put("k", b"v")
    async with open_storage("checkpoints") as again:
        assert isinstance(again, SQLiteStorage)
        assert (await again.get("k")).data == b"v"
    async with open_storage("./fresh-dir/") as s:
        assert isinstance(s, FileStorage)


async def test_an_unexpected_error_in_the_writer_answers_its_batch_and_the_writer_goes_on(
    db: SQLiteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = SQLiteStorage._apply
    calls = [0]

    def apply(self: SQLiteStorage, conn: sqlite3.Connection, op: object, counter: int) -> int:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a bug in the writer")
        return real(self, conn, op, counter)  # type: ignore[arg-type]

    monkeypatch.setattr(SQLiteStorage, "_apply", apply)
    async with asyncio.timeout(5):
        with pytest.raises(OutcomeUnknown, match="a bug in the writer"):
            await db.put("k", b"lost")
        with pytest.raises(NotFound):
            await db.get("k")  # rolled back
        version = await db.put("k", b"v")
    assert await db.get("k") == (b"v", version)


async def test_sqlite_urls_read_as_sqlalchemy_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    absolute = tmp_path / "elsewhere" / "abs.db"
    cases = {
        "sqlite:///app.db": tmp_path / "app.db",
        "sqlite:///./dot.db": tmp_path / "dot.db",
        "sqlite:///sub/dir/x.db": tmp_path / "sub" / "dir" / "x.db",
        f"sqlite:///{absolute}": absolute,  # sqlite:////tmp/...: four slashes
    }
    for path in cases.values():
        async with open_storage(str(path)):
            pass
    for url, path in cases.items():  # create=false: a wrong reading creates nothing elsewhere
        async with open_storage(f"{url}?create=false") as s:
            assert isinstance(s, SQLiteStorage)
            assert s.path == str(path), url


def test_a_sqlite_url_with_a_host_is_refused_with_both_spellings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as caught:
        open_storage("sqlite://app.db")
    message = str(caught.value)
    assert "names a host ('app.db')" in message
    assert "sqlite:///app.db" in message and "sqlite:////app.db" in message
    assert list(tmp_path.iterdir()) == []


async def test_the_old_absolute_spelling_is_refused_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs" / "kept.db"
    async with open_storage(str(db)) as s:
        await s.put("runs/r1/x", b"stored", mode="create")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    old = f"sqlite://{db}"  # the old spelling of the absolute path: sqlite:///tmp/...
    with pytest.raises(ConfigurationError) as caught:
        open_storage(old)
    message = str(caught.value)
    assert f"{str(db)[1:]!r}" in message and f"{str(db)!r} exists" in message
    assert f"sqlite:///{db}" in message  # the spelling to use instead
    assert list(cwd.iterdir()) == []  # no new, empty database was created
    # ... nor when only the folder exists (a new database there, under the old spelling)
    with pytest.raises(ConfigurationError, match="is in an existing folder"):
        open_storage(f"sqlite://{tmp_path}/runs/new.db")
    assert list(cwd.iterdir()) == []
    async with open_storage(f"sqlite:///{db}") as s:
        assert (await s.get("runs/r1/x")).data == b"stored"
    # an explicit relative path is taken at its word
    (cwd / str(tmp_path)[1:]).mkdir(parents=True)
    async with open_storage(f"sqlite:///./{str(db)[1:]}") as s:
        assert s.path == str(cwd / str(db)[1:])

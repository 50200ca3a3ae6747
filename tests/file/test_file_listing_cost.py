"""Listing without cliffs: a page does not re-read what earlier pages read, an unchanged
directory is not re-read by a new listing, a changed one always is, and a batched delete
flushes each directory once."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from checkpointkit.adapters import file as file_adapter
from checkpointkit.adapters.file import FileStorage


class ListdirCounter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        real = os.listdir

        def listdir(path: str) -> list[str]:
            self.calls.append(path)
            return real(path)

        monkeypatch.setattr(file_adapter.os, "listdir", listdir)


def age(path: Path, seconds: float = 10) -> None:
    """Make a directory look last changed ``seconds`` ago (as a quiet directory would)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


@pytest.fixture
async def fast(tmp_path: Path) -> AsyncIterator[FileStorage]:
    """Without fsync: these tests are about reading directories, not about the disk."""
    async with FileStorage(tmp_path / "fast", fsync=False) as s:
        yield s


async def fill(fs: FileStorage, prefix: str, n: int) -> list[str]:
    keys = [f"{prefix}{i:05d}" for i in range(n)]
    await fs.delete_many([])  # nothing: a no-op
    for key in keys:
        await fs.put(key, b"x")
    return keys


async def test_pages_of_one_listing_read_each_directory_once(
    fast: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = await fill(fast, "big/", 2500)  # 3 pages of 1,000
    counter = ListdirCounter(monkeypatch)
    assert [k async for k in fast.list("big/")] == keys
    assert counter.calls == [f"{fast.root}/big@"]


async def test_an_unchanged_directory_is_not_read_again_by_a_new_listing(
    fast: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = await fill(fast, "idx/", 300)
    age(Path(fast.root) / "idx@")
    assert [k async for k in fast.list("idx/", limit=10)] == keys[:10]
    counter = ListdirCounter(monkeypatch)
    for _ in range(5):
        assert [k async for k in fast.list("idx/", limit=10)] == keys[:10]
        assert [k async for k in fast.list("idx/", start_after=keys[100], limit=3)] == keys[101:104]
    assert counter.calls == []


async def test_a_listing_sees_every_change_made_after_a_cached_snapshot(fast: FileStorage) -> None:
    keys = await fill(fast, "idx/", 300)
    age(Path(fast.root) / "idx@")
    assert [k async for k in fast.list("idx/", limit=5)] == keys[:5]  # cached now
    await fast.put("idx/0", b"new first key")
    assert [k async for k in fast.list("idx/", limit=2)] == ["idx/0", keys[0]]
    await fast.delete("idx/0")
    await fast.delete(keys[0])
    assert [k async for k in fast.list("idx/", limit=2)] == keys[1:3]


async def test_a_directory_changed_right_after_its_listing_is_listed_again(
    fast: FileStorage,
) -> None:
    # No aging: the snapshot is taken within the same clock tick as the last change,
    # and the next change may land in that tick too; it must still be seen.
    keys = await fill(fast, "hot/", 300)
    for i in range(20):
        assert len([k async for k in fast.list("hot/", limit=1)]) == 1
        await fast.put(f"hot/!{i:02d}", b"x")  # sorts first
        assert [k async for k in fast.list("hot/", limit=1)] == [f"hot/!{i:02d}"]
        await fast.delete(f"hot/!{i:02d}")
    assert [k async for k in fast.list("hot/", limit=1)] == keys[:1]


async def test_delete_many_flushes_each_directory_once(
    fs: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = await fill(fs, "runs/a/c/", 50)
    b = await fill(fs, "runs/b/c/", 30)
    flushed: list[str] = []
    real = FileStorage._flush_dir

    def flush(self: FileStorage, path: str) -> None:
        flushed.append(path)
        real(self, path)

    monkeypatch.setattr(FileStorage, "_flush_dir", flush)
    assert await fs.delete_many([*a, *b, "runs/a/c/missing"]) == 80
    assert sorted(flushed) == [f"{fs.root}/runs@/a@/c@", f"{fs.root}/runs@/b@/c@"]
    assert [k async for k in fs.list()] == []
    assert not (Path(fs.root) / "runs@").exists()  # emptied directories are removed

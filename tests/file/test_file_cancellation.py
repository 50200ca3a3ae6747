"""Cancellation and close: a cancelled put never lands later; aclose waits for the threads."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from checkpointkit import IfMatch, NotFound
from checkpointkit.adapters.file import FileStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.storage import PutMode


class HeldStorage(FileStorage):
    """Blocks the worker thread right before a put commits, until released."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.hold = False
        self.reached = threading.Event()
        self.release = threading.Event()

    def _before_commit(self, key: str) -> None:
        if self.hold:
            self.reached.set()
            assert self.release.wait(30), "the test never released the worker thread"


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("#*.tmp") if p.is_file()]


async def wait_for(event: threading.Event) -> None:
    """Wait for a thread's event without blocking the loop (bounded: fails after 10 s)."""
    assert await asyncio.to_thread(event.wait, 10)


@pytest.mark.parametrize("key", ["runs/r/k", "runs/r/" + "K" * 100], ids=["short", "long"])
@pytest.mark.parametrize("mode", ["overwrite", "create", "if-match"])
async def test_cancelled_put_never_lands_later(tmp_path: Path, mode: str, key: str) -> None:
    root = tmp_path / "root"
    s = HeldStorage(root)
    async with hygiene():
        if mode == "create":
            old = None
            put_mode: PutMode = "create"
        else:
            old = await s.put(key, b"old")
            put_mode = IfMatch(old) if mode == "if-match" else "overwrite"
        s.hold = True
        task = asyncio.create_task(s.put(key, b"new", mode=put_mode))
        await wait_for(s.reached)  # the thread has written the temp file, not committed
        assert temp_files(root)
        task.cancel()
        started = time.perf_counter()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.perf_counter() - started < 1.0  # prompt: did not wait for the thread
        s.release.set()
        await s.aclose()  # waits for the worker thread to finish its (abandoned) put
    async with FileStorage(root) as fresh:
        if old is None:
            with pytest.raises(NotFound):
                await fresh.get(key)
            assert [k async for k in fresh.list()] == []
        else:
            assert await fresh.get(key) == (b"old", old)
            assert [k async for k in fresh.list()] == [key]
    assert temp_files(root) == []
    # a shortened name's sidecar stays only while a stored key needs it
    assert len(list(root.rglob("#*.name"))) == (old is not None and "K" in key)


async def test_cancelled_put_queued_behind_busy_threads_never_runs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    s = HeldStorage(root)
    s.threads = 1
    s.hold = True
    first = asyncio.create_task(s.put("a", b"1"))
    await wait_for(s.reached)
    queued = asyncio.create_task(s.put("b", b"2"))
    await asyncio.sleep(0)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    s.release.set()
    assert await first
    await s.aclose()
    async with FileStorage(root) as fresh:
        assert [k async for k in fresh.list()] == ["a"]
    assert temp_files(root) == []


async def test_put_cancelled_after_commit_has_fully_happened(tmp_path: Path) -> None:
    """The other half of the promise: a put that committed stays, whole."""
    root = tmp_path / "root"
    committed = threading.Event()
    go_on = threading.Event()

    class AfterCommit(FileStorage):
        def _flush_dir(self, path: str) -> None:  # runs after the rename
            committed.set()
            go_on.wait(10)
            super()._flush_dir(path)

    s = AfterCommit(root)
    task = asyncio.create_task(s.put("k", b"landed"))
    await wait_for(committed)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    go_on.set()
    await s.aclose()
    async with FileStorage(root) as fresh:
        assert (await fresh.get("k")).data == b"landed"
    assert temp_files(root) == []


@pytest.mark.parametrize("if_match", [False, True])
async def test_cancelled_delete_never_lands_later(tmp_path: Path, if_match: bool) -> None:
    root = tmp_path / "root"
    reached = threading.Event()
    release = threading.Event()

    class HeldLock(FileStorage):
        hold = False

        @contextmanager
        def _locked(self, rel_dir: str) -> Iterator[None]:
            with super()._locked(rel_dir):
                if self.hold:
                    reached.set()
                    assert release.wait(30)
                yield

    s = HeldLock(root)
    v = await s.put("k", b"keep")
    s.hold = True
    task = asyncio.create_task(s.delete("k", if_match=v if if_match else None))
    await wait_for(reached)  # the thread holds the key's lock, right before the unlink
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await s.aclose()
    async with FileStorage(root) as fresh:
        assert await fresh.get("k") == (b"keep", v)


async def test_aclose_waits_for_in_flight_thread_work(tmp_path: Path) -> None:
    root = tmp_path / "root"
    s = HeldStorage(root)
    async with hygiene():  # no thread of the storage is left alive after aclose
        s.hold = True
        put = asyncio.create_task(s.put("k", b"v"))
        await wait_for(s.reached)
        closing = asyncio.create_task(s.aclose())
        done, _ = await asyncio.wait({closing}, timeout=0.2)
        assert not done, "aclose returned while a worker thread was still writing"
        s.release.set()
        await closing
        assert put.done()
        version = await put
    async with FileStorage(root) as fresh:
        assert (await fresh.get("k")).version == version
    assert not [t for t in threading.enumerate() if t.name.startswith("checkpointkit-file")]


async def test_cancelled_aclose_still_finishes_closing(tmp_path: Path) -> None:
    s = HeldStorage(tmp_path / "root")
    s.hold = True
    put = asyncio.create_task(s.put("k", b"v"))
    await wait_for(s.reached)
    closing = asyncio.create_task(s.aclose())
    await asyncio.sleep(0)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    s.release.set()
    await put
    deadline = time.monotonic() + 10  # the shutdown goes on in the background: poll for it

    def closed() -> bool:
        workers = [t for t in threading.enumerate() if t.name.startswith("checkpointkit-file")]
        return not workers and all(fd is None for fd in s._lock_fds)

    while not closed():
        assert time.monotonic() < deadline, "the cancelled aclose never finished closing"
        await asyncio.sleep(0.01)

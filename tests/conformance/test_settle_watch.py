"""The settle watch judges what a cancelled write did after it ended, and the backend stalls
hold a put where the suite can cancel it: each rule checked with a write that breaks it."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance import ConformanceFailure, Target, new_location, run
from checkpointkit.conformance.holds import MemoryPause
from checkpointkit.conformance.settle import INDETERMINATE, SettleWatch
from checkpointkit.conformance.stalls import FileLock, LargeValue

HELD = "test_put_cancelled_while_held_in_backend_raises_promptly_and_never_lands"


class _Node:
    def __init__(self) -> None:
        self.user_properties: list[tuple[str, object]] = []


async def _watch_while(
    settles: bool, change: Callable[[MemoryStorage], Any], **add: Any
) -> tuple[_Node, list[Any]]:
    """Watch key 'k' (holding b'old') while ``change`` runs 50 ms after the write ended."""
    storage = MemoryStorage()
    await storage.put("k", b"old")
    node = _Node()
    watch = SettleWatch(storage, window=0.3, settles=settles, node=node)
    watch.add(
        "k",
        add.pop("observed", b"old"),
        what="put",
        since=time.monotonic(),
        context="cancelled on purpose",
        allowed=add.pop("allowed", (b"old", b"new")),
        written=b"new",
        **add,
    )

    async def later() -> None:
        await asyncio.sleep(0.05)
        await change(storage)

    task = asyncio.ensure_future(later())
    try:
        landings = await watch.settle()
    finally:
        await task
    return node, landings


async def test_a_late_landing_fails_an_adapter_that_declares_it_settles() -> None:
    with pytest.raises(ConformanceFailure, match=r"must not land later.*'k'.* s later.*To fix"):
        await _watch_while(True, lambda s: s.put("k", b"new"))


async def test_a_late_landing_is_indeterminate_for_an_adapter_that_does_not_settle() -> None:
    node, landings = await _watch_while(False, lambda s: s.put("k", b"new"))
    assert len(landings) == 1 and landings[0].after == b"new"
    assert 0.04 < landings[0].delay < 0.3
    [(name, text)] = node.user_properties
    assert name == INDETERMINATE and "does not declare settles_cancelled_writes" in str(text)


async def test_a_torn_value_seen_later_fails_whatever_the_adapter_declares() -> None:
    with pytest.raises(ConformanceFailure, match="whole or absent, also later"):
        await _watch_while(False, lambda s: s.put("k", b"ne"))


async def test_a_write_seen_overwritten_and_back_again_took_effect_twice() -> None:
    with pytest.raises(ConformanceFailure, match=r"at most once.*applied twice"):
        await _watch_while(
            False,
            lambda s: s.put("k", b"new"),
            observed=b"after",
            allowed=(b"old", b"new", b"after"),
            seen_written=True,
        )


async def test_nothing_changing_passes_and_records_nothing() -> None:
    async def nothing(storage: MemoryStorage) -> None:
        await storage.get("k")

    node, landings = await _watch_while(True, nothing)
    assert landings == [] and node.user_properties == []


# -- the stalls --------------------------------------------------------------------------
class _UnguardedFile(FileStorage):
    """The file adapter without its commit guard: a cancelled put's worker commits anyway."""

    async def _call_guarded(self, what: str, op: str, fn: Any, *args: Any) -> Any:
        from checkpointkit.adapters.file import _Guard

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), lambda: fn(*args, _Guard()))


def _file_target(base: Path, cls: type[FileStorage]) -> Target:
    async def factory(*, location: str | None = None) -> AsyncIterator[FileStorage]:
        root = base / (location or new_location())
        async with cls(root) as storage:
            yield storage
        shutil.rmtree(root, ignore_errors=True)

    return Target(factory, name=cls.__name__, settle_window=0.5)


async def test_the_file_lock_stall_catches_a_file_adapter_without_its_commit_guard(
    tmp_path: Path,
) -> None:
    report = await run(
        _file_target(tmp_path, _UnguardedFile), groups=["cancellation"], pattern=HELD
    )
    result = report.result(HELD)
    assert result.outcome == "failed", report.summary()
    assert "must not land later" in result.reason and "held by the file adapter's" in result.reason


async def test_the_file_lock_stall_holds_the_real_file_adapter_and_it_passes(
    tmp_path: Path,
) -> None:
    report = await run(_file_target(tmp_path, FileStorage), groups=["cancellation"], pattern=HELD)
    assert report.result(HELD).outcome == "passed", report.summary()


async def test_large_value_stall_times_a_put_and_cancels_a_third_of_the_way_in() -> None:
    class Slow(MemoryStorage):
        async def _put(self, key: str, data: bytes, mode: Any) -> str:
            await asyncio.sleep(0.3 if len(data) > 1024 else 0)
            return await super()._put(key, data, mode)

    stall = LargeValue(size=4096)
    assert len(stall.value()) == 4096 and stall.value() is stall.value()
    async with Slow() as storage:
        await stall.prepare(storage, "k")
        assert 0.09 <= stall.hold_for <= 0.5
        with pytest.raises(KeyError):
            storage._data.values["k-timing"]  # the scratch key was deleted
    with pytest.raises(ValueError, match="positive int"):
        LargeValue(size=0)


class _FasterWhenHeld(MemoryStorage):
    """Large puts take 0.3 s, except the first held one (10 ms): as when the machine was
    busy while the stall timed its puts, and quiet when the held put ran."""

    def __init__(self) -> None:
        super().__init__()
        self.held_puts = 0

    async def _put(self, key: str, data: bytes, mode: Any) -> str:
        if len(data) > 1 << 20:
            slow = key.endswith("-timing") or self.held_puts > 0
            self.held_puts += not key.endswith("-timing")
            await asyncio.sleep(0.3 if slow else 0.01)
        return await super()._put(key, data, mode)


async def test_a_put_faster_than_its_timing_is_held_on_a_later_try() -> None:
    """A third of the timed put can outlast the held put; then the suite tries again,
    cancelling sooner, rather than skip the test."""
    made: list[_FasterWhenHeld] = []

    async def factory(*, location: str | None = None) -> AsyncIterator[MemoryStorage]:
        async with _FasterWhenHeld() as storage:
            made.append(storage)
            yield storage

    report = await run(
        Target(factory, name="faster-when-held", settle_window=0.5),
        groups=["cancellation"],
        pattern=HELD,
    )
    assert report.result(HELD).outcome == "passed", report.summary()
    assert max(s.held_puts for s in made) == 2  # finished once, then held and cancelled


def test_the_default_stall_follows_the_adapter(tmp_path: Path) -> None:
    from checkpointkit.conformance.stalls import default_stall

    assert isinstance(default_stall(FileStorage(tmp_path)), FileLock)
    assert isinstance(default_stall(MemoryStorage()), MemoryPause)

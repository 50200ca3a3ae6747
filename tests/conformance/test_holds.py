"""Holds: every built-in target supplies one, each hold stops what it says it stops, and a
target without one has its held-backend tests reported as not exercised, never passed."""

from __future__ import annotations

import asyncio
import bisect
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.conformance import Report, Target, TestResult, resolve_target, run
from checkpointkit.conformance.groups import GROUPS
from checkpointkit.conformance.holds import (
    FileLock,
    HeldLock,
    Hold,
    LargeValue,
    MemoryPause,
    PausedProcess,
    ProxyHold,
    SQLiteLock,
    default_hold,
)
from checkpointkit.conformance.servers.redis import redis_target
from checkpointkit.errors import ConfigurationError, OutcomeUnknown, StorageClosed

HELD_TESTS = [
    "test_put_cancelled_while_held_in_backend_raises_promptly_and_never_lands",
    "test_delete_cancelled_while_held_in_backend_raises_promptly_and_never_lands",
    "test_delete_many_cancelled_while_held_in_backend_raises_promptly_and_never_lands",
    "test_get_cancelled_while_held_in_backend_raises_promptly_and_client_recovers",
    "test_list_page_cancelled_while_held_in_backend_raises_promptly_and_client_recovers",
]
HELD = "held_in_backend"


def test_every_built_in_target_supplies_a_hold(tmp_path: Path) -> None:
    assert isinstance(resolve_target("memory").hold, MemoryPause)
    assert isinstance(resolve_target("file").hold, FileLock)
    asyncio.run(SQLiteStorage(tmp_path / "db.sqlite").aclose())  # the suite never creates one
    assert isinstance(resolve_target(f"sqlite:///{tmp_path}/db.sqlite").hold, SQLiteLock)
    assert isinstance(redis_target("redis://127.0.0.1:6399/0").hold, ProxyHold)
    s3 = resolve_target("s3://bucket/p?endpoint_url=http://127.0.0.1:9999")
    assert isinstance(s3.hold, ProxyHold)
    assert isinstance(default_hold(MemoryStorage()), MemoryPause)
    assert isinstance(default_hold(SQLiteStorage(tmp_path / "x.db")), SQLiteLock)


def test_a_target_hold_must_be_a_hold() -> None:
    with pytest.raises(ConfigurationError, match=r"Target\.hold must be a"):
        Target(MemoryStorage, hold=lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not lunch"):
        HeldLock(lambda: None, lambda: None, operations=["put", "lunch"])  # type: ignore[list-item]


async def test_memory_pause_holds_every_operation_until_released() -> None:
    async with MemoryStorage() as storage:
        await storage.put("k", b"old")
        resume = storage.pause()
        ops = [
            asyncio.ensure_future(storage.put("k", b"new")),
            asyncio.ensure_future(storage.get("k")),
            asyncio.ensure_future(storage.delete("other")),
            asyncio.ensure_future(anext(aiter(storage.list("")))),
        ]
        done, _ = await asyncio.wait(ops, timeout=0.2)
        assert not done  # none answers while paused
        cancelled = asyncio.ensure_future(storage.put("k", b"cancelled"))
        await asyncio.sleep(0)
        cancelled.cancel()
        resume()
        results = await asyncio.gather(*ops)
        assert results[2] is False and results[3] == "k"
        assert (await storage.get("k")).data == b"new"  # the cancelled put never happened
        assert cancelled.cancelled()
        resume()  # a second call does nothing
        assert (await storage.get("k")).data == b"new"


async def test_memory_calls_paused_at_aclose_end_with_storage_closed_before_it_returns() -> None:
    shared = f"paused-close-{id(object())}"
    other = MemoryStorage(name=shared)
    async with MemoryStorage(name=shared) as storage:
        await storage.put("k", b"old")
        resume = storage.pause()
        waiting = [
            asyncio.ensure_future(storage.put("k", b"new")),
            asyncio.ensure_future(storage.get("k")),
        ]
        elsewhere = asyncio.ensure_future(other.get("k"))  # another storage of the same data
        done, _ = await asyncio.wait([*waiting, elsewhere], timeout=0.05)
        assert not done
        await storage.aclose()
        assert all(call.done() for call in waiting)  # ended before aclose() returned
        for call in waiting:
            assert isinstance(call.exception(), StorageClosed)
        assert not elsewhere.done()  # closing one storage ends only its own calls
        resume()
        assert (await elsewhere).data == b"old"  # the put closed while paused did nothing
    await other.aclose()


async def test_a_target_without_a_hold_has_its_held_tests_reported_not_exercised() -> None:
    report = await run(
        Target(MemoryStorage, name="memory without a hold", hold=Hold()),
        groups=["cancellation"],
        pattern=HELD,
    )
    assert sorted(r.name for r in report.not_exercised) == sorted(HELD_TESTS), report.summary()
    for r in report.not_exercised:
        assert r.outcome == "skipped"
        assert "the target supplies no hold" in r.reason and "Target(hold=...)" in r.reason
    summary = report.summary()
    assert summary.count("NOT EXERCISED cancellation::") == len(HELD_TESTS), summary
    assert sorted(report.to_dict()["not_exercised"]) == sorted(HELD_TESTS)
    case = ET.fromstring(report.to_junit_xml()).find(f".//testcase[@name='{HELD_TESTS[0]}']")
    assert case is not None
    prop = case.find("properties/property")
    assert prop is not None and prop.get("value") == "not exercised"


async def test_closing_under_a_silent_call_is_not_exercised_without_a_hold_or_a_proxy() -> None:
    name = "test_aclose_with_a_call_the_backend_does_not_answer_leaves_nothing_running"
    report = await run(
        Target(MemoryStorage, name="memory without a hold", hold=Hold()),
        groups=["cancellation"],
        pattern=name,
    )
    result = report.result(name)
    assert result in report.not_exercised, report.summary()
    assert "takes no endpoint and timeout" in result.reason


class _DeletesManyWithoutWaiting(MemoryStorage):
    """A ``delete_many`` that the memory adapter's pause does not stop (its puts it does)."""

    async def _delete_many(self, keys: list[str]) -> int:
        data = self._data
        gone = 0
        for key in dict.fromkeys(keys):
            if data.values.pop(key, None) is not None:
                del data.keys[bisect.bisect_left(data.keys, key)]
                gone += 1
        return gone


async def test_an_operation_a_stopping_hold_does_not_stop_is_reported_at_once() -> None:
    """A hold that stops puts and says it stops ``delete_many`` too, which it does not: the
    held ``delete_many`` test reports it not exercised at once, rather than writing its keys
    again inside the hold, where the put waits for the hold until the time limit."""
    name = "test_delete_many_cancelled_while_held_in_backend_raises_promptly_and_never_lands"
    report = await run(
        Target(_DeletesManyWithoutWaiting, name="delete_many not held", hold=MemoryPause()),
        groups=["cancellation"],
        pattern=name,
    )
    result = report.result(name)
    assert result in report.not_exercised, report.summary()
    assert "did not hold the delete_many" in result.reason and "1 time" in result.reason
    assert result.duration < 10, result.duration


async def test_a_put_that_a_large_value_cannot_hold_is_reported_not_exercised() -> None:
    class Instant(MemoryStorage):  # not the built-in class: the default is a large value
        pass

    report = await run(Target(Instant, name="instant"), groups=["cancellation"], pattern=HELD)
    put = report.result(HELD_TESTS[0])
    assert put.outcome == "skipped" and put in report.not_exercised, report.summary()
    assert "did not hold the put" in put.reason
    # A large value holds only puts: the others are skipped naming it, not "not exercised".
    other = report.result(HELD_TESTS[1])
    assert other.outcome == "skipped" and other not in report.not_exercised
    assert "holds only put, not delete" in other.reason


def test_a_not_exercised_test_keeps_the_level_from_full() -> None:
    passed = [TestResult(f"test_{g}", g, "passed") for g in GROUPS]
    assert Report("t", passed).level == "full"
    gap = TestResult(HELD_TESTS[0], "cancellation", "skipped", "not exercised: no hold")
    report = Report("t", [*passed, gap])
    assert report.level == "basic"
    assert report.level_reason == "1 test(s) not exercised"
    skipped = TestResult("test_ttl", "capabilities", "skipped", "ttl is not declared")
    assert Report("t", [*passed, skipped]).level == "full"


async def test_memory_target_passes_every_held_test() -> None:
    report = await run("memory", groups=["cancellation"], pattern=HELD)
    assert [r.outcome for r in report.results] == ["passed"] * len(HELD_TESTS), report.summary()


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


async def _becomes(pid: int, states: set[str]) -> bool:
    """Whether the process reaches one of ``states`` within 5 s (a signal lands a moment later)."""
    for _ in range(500):
        if _state(pid) in states:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_paused_process_stops_the_process_until_released() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads the process state from /proc")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        hold = PausedProcess(proc.pid, name="a sleeper")
        async with hold.held(None, "k"):
            assert await _becomes(proc.pid, {"T", "t"}), _state(proc.pid)  # stopped
        assert await _becomes(proc.pid, {"S", "R"}), _state(proc.pid)
        assert PausedProcess(lambda: proc.pid).pid == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_large_value_holds_only_puts() -> None:
    hold = LargeValue(size=1024)
    assert hold.holds("put") and not hold.holds("get") and len(hold.value()) == 1024


async def test_writes_that_aclose_cuts_off_with_outcome_unknown_pass_the_in_flight_test() -> None:
    """``close.in-flight`` lets ``aclose()`` end the calls in flight instead of waiting for
    them, a write then answering ``OutcomeUnknown``: a client that cuts its held writes off
    (the server discarding them) passes the test that holds every operation in flight
    when ``aclose()`` is called; a write it cut off raises ``OutcomeUnknown`` and lands
    nothing."""
    from .broken import kv_dict

    cls = kv_dict.CutsWritesOffAtClose
    test = "test_aclose_with_every_operation_in_flight"
    target = Target(cls, name=cls.__name__, hold=kv_dict.WriteLock(), settle_window=0.3)
    report = await run(target, pattern=test)
    assert report.result(test).outcome == "passed", report.summary()

    storage = cls()
    storage.writable.clear()  # the server's write lock, taken
    put = asyncio.ensure_future(storage.put("k", b"v"))
    while not storage.held.waiting:
        await asyncio.sleep(0)
    await storage.aclose()
    storage.writable.set()
    with pytest.raises(OutcomeUnknown):
        await put
    assert "k" not in storage.values


async def test_close_in_flight_first_writes_cut_off_pass_the_opening_sweep() -> None:
    """``close.in-flight`` lets a write that ``aclose()`` ended after it was sent answer
    ``OutcomeUnknown``, also among a fresh storage's first calls: a client that drops its
    connection under the writes on the wire (the server discarding them) passes the test
    that closes a fresh storage while its first calls run. The sweep accepted only an
    answer or ``StorageClosed`` there before, and failed this correct client; its broken
    twin, whose cut writes go on and land after ``aclose()``, is in the mutation corpus
    (``cut-writes-go-on-after-close``)."""
    from .broken import kv_dict

    cls = kv_dict.CutsSentWritesOffAtClose
    test = "test_aclose_while_a_fresh_storage_opens"
    report = await run(Target(cls, name=cls.__name__), pattern=test)
    assert report.result(test).outcome == "passed", report.summary()

    storage = cls()
    put = asyncio.ensure_future(storage.put("k", b"v"))
    while not storage.on_wire.waiting:  # the put's request has left
        await asyncio.sleep(0)
    await storage.aclose()
    with pytest.raises(OutcomeUnknown):
        await put
    assert "k" not in storage.values

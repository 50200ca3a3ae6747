"""The suite's tools: the fault wrapper, targets and SPEC strings, the prefix view, timing."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from checkpointkit import ConfigurationError, NotFound, StorageUnavailable
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance import FaultyStorage, PrefixedStorage, Target, resolve_target
from checkpointkit.conformance.timing import LatencyRecorder, TimedStorage
from checkpointkit.storage import GetResult

from .broken.kv_dict import DictKV


async def _bounded(aw: object) -> object:
    async with asyncio.timeout(5):
        return await aw  # type: ignore[misc]


async def test_stall_before_holds_the_call_and_cancel_leaves_nothing_done() -> None:
    async with MemoryStorage() as inner:
        faulty = FaultyStorage(inner)
        stall = faulty.stall("put", when="before")
        task = asyncio.ensure_future(faulty.put("k", b"v"))
        await _bounded(stall.entered.wait())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stall.cancelled == ["k"]
        with pytest.raises(NotFound):
            await inner.get("k")
        await faulty.put("k", b"later")  # times=1: the next call passes
        assert (await inner.get("k")).data == b"later"


async def test_stall_after_holds_the_answer_of_a_call_that_happened() -> None:
    async with MemoryStorage() as inner:
        faulty = FaultyStorage(inner)
        stall = faulty.stall("put", when="after")
        task = asyncio.ensure_future(faulty.put("k", b"v"))
        await _bounded(stall.entered.wait())
        assert (await inner.get("k")).data == b"v"
        stall.release()
        assert isinstance(await _bounded(task), str)


async def test_fail_raises_storage_unavailable_by_default_and_matches_keys() -> None:
    async with MemoryStorage() as inner:
        faulty = FaultyStorage(inner)
        fault = faulty.fail("put", key=lambda key: key.startswith("bad/"), times=None)
        await faulty.put("good", b"x")
        for _ in range(2):
            with pytest.raises(StorageUnavailable, match="fault injected"):
                await faulty.put("bad/1", b"x")
        assert fault.hits == ["bad/1", "bad/1"]
        after = faulty.fail("get", when="after", error=TimeoutError("lost reply"))
        with pytest.raises(TimeoutError):
            await faulty.get("good")
        assert after.hits == ["good"]
        faulty.clear()
        assert (await faulty.get("good")).data == b"x"


async def test_faulty_listing_can_stall_and_aclose_releases_stalls() -> None:
    inner = MemoryStorage()
    faulty = FaultyStorage(inner)
    await faulty.put("a", b"1")
    stall = faulty.stall("list", when="before")
    listing = asyncio.ensure_future(_collect(faulty))
    await _bounded(stall.entered.wait())
    stall.release()
    assert await _bounded(listing) == ["a"]
    assert faulty.capabilities == inner.capabilities
    await faulty.aclose()


async def _collect(storage: FaultyStorage) -> list[str]:
    return [key async for key in storage.list()]


async def test_prefixed_storage_isolates_and_passes_leaks_through() -> None:
    async with MemoryStorage() as inner:
        view = PrefixedStorage(inner, "t1/")
        await view.put("a", b"1")
        await inner.put("t2/b", b"2")
        assert [k async for k in view.list()] == ["a"]
        assert await inner.get("t1/a") == await view.get("a")
        assert [k async for k in view.list("", start_after="a")] == []


def test_target_detects_the_keywords_its_factory_accepts() -> None:
    @asynccontextmanager
    async def full(
        *, location: str | None = None, endpoint: object = None, ttl: float | None = None
    ) -> AsyncIterator[MemoryStorage]:
        yield MemoryStorage()

    t = Target(full, upstream=("127.0.0.1", 1))
    assert t.reopens and t.proxyable and t.expires
    plain = Target(MemoryStorage)
    assert not plain.reopens and not plain.proxyable and not plain.expires
    assert plain.name == "MemoryStorage"
    assert Target(full).proxyable is False  # no upstream
    assert plain.count(100) == 100 and Target(MemoryStorage, scale=0.2).count(20) == 4
    with pytest.raises(ConfigurationError, match="scale"):
        Target(MemoryStorage, scale=0)
    with pytest.raises(ConfigurationError, match="callable"):
        Target("memory")  # type: ignore[arg-type]
    for bad in (1, 0, 2.5, True, "1000"):
        with pytest.raises(ConfigurationError, match=rf"max_batch must be .* not {bad!r}"):
            Target(MemoryStorage, max_batch=bad)  # type: ignore[arg-type]
    assert Target(MemoryStorage, max_batch=2).max_batch == 2


async def test_the_batches_matrix_stops_at_max_batch_and_at_2_without_a_delete_many() -> None:
    """A storage with a delete_many of its own has rows up to the target's max_batch; one
    without (a batch is one delete per key) stops at 2 keys, and the report says why."""
    from checkpointkit.conformance.coverage import batch_sizes
    from checkpointkit.conformance.target import has_own_delete_many
    from checkpointkit.storage import StorageBase

    class Batches(MemoryStorage):
        async def _delete_many(self, keys: list[str]) -> int:
            return await StorageBase._delete_many(self, keys)

    assert not has_own_delete_many(MemoryStorage()) and has_own_delete_many(Batches())
    assert batch_sizes(1025)[-3:] == [1001, 1024, 1025] and batch_sizes(2) == [0, 1, 2]
    for cls, cap, rows in ((Batches, 1025, 28), (MemoryStorage, 1025, 3)):
        async with Target(cls, max_batch=cap).open() as storage:
            reach = storage._rec.snapshot(storage._name)[0]  # type: ignore[attr-defined]
        batch_rows = [c for c in reach.cells() if c[0] == "batches"]
        assert len(batch_rows) == rows, batch_rows
        said = [u for u in reach.unreachable() if u.startswith("batches")]
        assert bool(said) == (cls is MemoryStorage), said


async def test_target_refuses_a_keyword_its_factory_lacks_and_a_non_storage() -> None:
    with pytest.raises(ConfigurationError, match="no 'location' keyword"):
        async with Target(MemoryStorage).open(location="x"):
            pass
    with pytest.raises(TypeError, match="neither a storage"):
        async with Target(lambda: 42).open():
            pass


class _EnterGivesNone(MemoryStorage):
    async def __aenter__(self) -> None:  # type: ignore[override]  # the mistake under test
        return None


async def test_target_names_an_aenter_that_does_not_return_the_storage() -> None:
    with pytest.raises(TypeError, match=r"whose __aenter__ returned None.*\(return self\)"):
        async with Target(_EnterGivesNone).open():
            pass


def test_resolve_target_understands_every_spec_form(tmp_path: Path) -> None:
    assert resolve_target("memory").name == "memory"
    file_target = resolve_target("file")
    assert file_target.reopens and file_target.cleanup is not None
    # a directory per location, which another process rebuilds from the spec
    assert file_target.spec is not None and file_target.spec.endswith("/{location}")
    assert resolve_target(file_target.spec).spec == file_target.spec
    file_target.cleanup()
    url = resolve_target("redis://user:secret@127.0.0.1:6390/0?password=hunter2")
    assert url.upstream == ("127.0.0.1", 6390) and url.reopens and url.proxyable
    assert "secret" not in url.name and "hunter2" not in url.name
    assert resolve_target("checkpointkit.adapters.memory:MemoryStorage").factory is MemoryStorage
    assert resolve_target(f"file://{tmp_path}").upstream is None
    with pytest.raises(ConfigurationError, match="no attribute"):
        resolve_target("checkpointkit.adapters.memory:Nothing")
    with pytest.raises(ConfigurationError, match="cannot tell"):
        resolve_target("C:/not a spec")


@pytest.mark.parametrize(
    ("url", "made"),
    [
        ("file://{base}/{{location}}", "{location}"),
        ("sqlite:///{base}/{{location}}.db", "{location}.db"),
    ],
)
async def test_a_url_with_location_opens_one_directory_or_database_per_location(
    tmp_path: Path, url: str, made: str
) -> None:
    """``{location}`` in a file or sqlite URL: each location a directory or database file of
    its own, the same one from a second target made of the same SPEC (as a child process
    makes it), removed when the last storage open on it closes."""
    spec = url.format(base=tmp_path)
    first, second = resolve_target(spec), resolve_target(spec)
    assert first.spec == spec and first.reopens
    async with first.open(location="a") as a, second.open(location="a") as again:
        version = await a.put("k", b"v")
        assert await again.get("k") == (b"v", version)
        async with first.open(location="b") as b:
            with pytest.raises(NotFound):
                await b.get("k")
        left = sorted(os.listdir(tmp_path))  # a's, with SQLite's -wal and -shm
        assert left[0] == made.format(location="a") and all(n.startswith(left[0]) for n in left)
    assert os.listdir(tmp_path) == []


def test_a_url_with_location_refuses_a_missing_folder_and_other_places() -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        resolve_target("sqlite:////no/such/folder/{location}.db")
    with pytest.raises(ConfigurationError, match="does not exist"):
        resolve_target("file:///no/such/folder/{location}")
    for url in ("file:///tmp/{location}/data", "redis://127.0.0.1:6390/0?prefix={location}"):
        with pytest.raises(ConfigurationError, match="last segment of the path"):
            resolve_target(url)


async def test_timed_storage_records_completed_operations_only() -> None:
    rec = LatencyRecorder()
    async with TimedStorage(MemoryStorage(), into=rec) as timed:
        await timed.put("a", b"1")
        await timed.get("a")
        with pytest.raises(NotFound):
            await timed.get("missing")
        assert [k async for k in timed.list()] == ["a"]
        await timed.delete("a")
    summary = rec.summary()
    assert {op: v["count"] for op, v in summary.items()} == {
        "delete": 1,
        "get": 1,
        "list": 1,
        "put": 1,
    }


def test_latency_percentiles_are_nearest_rank() -> None:
    rec = LatencyRecorder()
    for ms in range(1, 101):
        rec.record("put", ms / 1000)
    put = rec.summary()["put"]
    assert (put["p50_ms"], put["p99_ms"], put["max_ms"]) == (50.0, 99.0, 100.0)


def test_the_generic_target_does_not_import_the_test_servers() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from checkpointkit.conformance.target import resolve_target; "
        "t = resolve_target('redis://127.0.0.1:6390/0'); "  # builds the target, connects to none
        "print(t.name); print(sorted(m for m in sys.modules if '.servers' in m))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    name, servers = proc.stdout.splitlines()
    assert name.startswith("redis standalone") and servers == "[]"


class _Hangs:
    time_limit = 0.05

    async def test_random_programs(self, model_seed: int) -> None:
        await asyncio.Event().wait()  # a listing that never ends, say


async def test_a_model_test_past_the_time_limit_names_the_seed_that_replays_it() -> None:
    from checkpointkit.conformance.checks import ConformanceFailure
    from checkpointkit.conformance.fixtures import _time_limited

    test = _time_limited(_Hangs.test_random_programs, "model")
    with pytest.raises(ConformanceFailure) as failure:
        await test(_Hangs(), model_seed=4242)  # type: ignore[arg-type]
    message = str(failure.value)
    assert "did not finish within the suite's time limit of 0.05 s" in message
    assert "a listing never ended" in message
    assert message.endswith("its programs replay with --checkpointkit-model-seed 4242")


class _NeverAnswers(DictKV):
    """A get that never returns (a lock kept by an earlier call, a lost reply)."""

    async def _get(self, key: str) -> GetResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class _WaitsOnOneGet:
    time_limit = 0.2

    def __init__(self, storage: TimedStorage) -> None:
        self.storage = storage

    async def test_reads(self) -> None:
        await self.storage.put("p/done", b"answered")  # returns: not named
        await self.storage.get("p/done")


async def test_a_test_past_the_time_limit_names_the_calls_that_never_returned() -> None:
    """The failure of a test that ran out of time names each call through the suite's
    storage that had not returned (the call, its key, how long it waited), and none that
    returned: so a hung adapter's report says where it hung."""
    from checkpointkit.conformance.checks import ConformanceFailure
    from checkpointkit.conformance.fixtures import _time_limited

    test = _time_limited(_WaitsOnOneGet.test_reads, "semantics")
    async with TimedStorage(_NeverAnswers()) as storage:
        with pytest.raises(ConformanceFailure) as failure:
            await test(_WaitsOnOneGet(storage))  # type: ignore[arg-type]
    message = str(failure.value)
    assert "the calls that had not returned: get('p/done'), 0.2 s" in message, message
    assert "put(" not in message, message


async def test_a_slow_test_gets_its_own_time_limit_and_names_what_lowers_it() -> None:
    """``slow(seconds, hint)`` raises a test's limit above the class's ``time_limit``, and
    its failure when that runs out names the hint (the batch sweep's: ``max_batch``)."""
    import asyncio

    from checkpointkit.conformance.checks import ConformanceFailure
    from checkpointkit.conformance.fixtures import StorageFixtures, slow

    class Tests(StorageFixtures):
        time_limit = 0.01

        @slow(0.2, "lower Target(max_batch=...)")
        async def test_slow(self) -> None:
            await asyncio.sleep(0.05)  # past the class's limit, within its own

        @slow(0.05, "lower Target(max_batch=...)")
        async def test_hung(self) -> None:
            await asyncio.sleep(30)

    await Tests().test_slow()
    with pytest.raises(ConformanceFailure, match=r"time limit of 0\.05 s.*max_batch"):
        await Tests().test_hung()


class _GetsNeverReturn(MemoryStorage):
    """Every get waits forever, in every storage object (a lock that a cancelled call kept
    on the server, say): every test that reads runs into its time limit."""

    async def _get(self, key: str) -> GetResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_target_whose_calls_stop_returning_has_the_rest_of_its_tests_not_run() -> None:
    """After HUNG_STOP tests in a row ran into their time limit, the target's remaining
    tests are reported as not run, naming those tests, instead of each waiting out its
    limit (a run of hours); a test that ends otherwise starts the count again."""
    import time

    from checkpointkit.conformance import run
    from checkpointkit.conformance.fixtures import HUNG_STOP

    target = Target(_GetsNeverReturn, name="gets-never-return", time_limit=0.3)
    started = time.monotonic()
    report = await run(target, groups=["semantics"])
    took = time.monotonic() - started
    hung = [r for r in report.results if "did not finish within" in (r.reason or "")]
    not_run = [r for r in report.results if (r.reason or "").count("not run: the target's")]
    assert len(hung) >= HUNG_STOP, report.summary()
    assert len(not_run) > len(report.results) // 2, report.summary()
    assert f"last {HUNG_STOP} tests ran into their time limit" in (not_run[0].reason or "")
    assert all(r.outcome != "passed" for r in not_run)
    assert took < 120, f"{took:.0f} s for {len(report.results)} tests"

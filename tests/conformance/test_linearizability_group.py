"""The linearizability group: it catches a register that is wrong only under concurrency,
passes the same code without the bug, records cancelled writes as the model says, and
replays its seed. (File, Redis, S3 and Azure run the group in their conformance files.)"""

from __future__ import annotations

import asyncio
import random

import pytest
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance import (
    FaultyStorage,
    LinearizabilityTests,
    Report,
    StorageFixtures,
    Target,
    run,
)
from checkpointkit.conformance.histories import (
    SEED_ENV,
    HistoryPlan,
    HistoryRecorder,
    _Call,
    record_history,
    resolve_seed,
)
from checkpointkit.errors import ConfigurationError
from checkpointkit.storage import Capabilities

from .broken.adapters import IOMemoryStorage, LandsLater
from .broken.nonlinear import CheckThenWrite

RUNS = 10
GROUP = ["linearizability"]
PLAIN = "test_concurrent_history_is_linearizable"


class MemoryFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self) -> Target:
        return Target(MemoryStorage, name="memory")


class TestMemoryLinearizability(MemoryFixtures, LinearizabilityTests):
    pass


async def test_check_then_write_register_fails_the_group_in_ten_runs_of_ten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for seed in range(RUNS):
        monkeypatch.setenv(SEED_ENV, str(seed))
        report = await run(Target(CheckThenWrite, name="check-then-write"), groups=GROUP)
        assert PLAIN in report.failed_names(), f"seed {seed}:\n{report.summary()}"
        reason = report.result(PLAIN).reason
        assert "must be linearizable" in reason
        assert f"seed {seed}: replay with --checkpointkit-seed {seed}" in reason
        assert "a minimal history of" in reason and "invoked" in reason and "completed" in reason


async def test_correct_twin_of_the_check_then_write_register_passes_in_ten_runs_of_ten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for seed in range(RUNS):
        monkeypatch.setenv(SEED_ENV, str(seed))
        report: Report = await run(Target(IOMemoryStorage, name="io-memory"), groups=GROUP)
        assert report.ok, f"seed {seed}:\n{report.summary()}"
        assert report.result(PLAIN).outcome == "passed"


async def test_cancelled_write_of_a_settling_adapter_completes_when_cancelled_error_arrives() -> (
    None
):
    for settles in (True, False):
        async with MemoryStorage() as storage:
            faulty = FaultyStorage(storage)
            stall = faulty.stall("put", when="before")
            recorder = HistoryRecorder(settles=settles)
            task = asyncio.ensure_future(
                recorder.perform("c0", faulty, "k", _Call("put", "overwrite", b"v"), cancel_at=5)
            )
            await stall.entered.wait()  # the put is held, it will be cancelled
            op = await task
            assert op is not None and op.outcome == "unknown" and op.note == "cancelled"
            if settles:
                assert op.completed is not None and op.completed >= op.invoked
            else:
                assert op.completed is None


async def test_cancelled_get_is_left_out_of_the_history() -> None:
    async with MemoryStorage() as storage:
        faulty = FaultyStorage(storage)
        faulty.stall("get", when="before")
        recorder = HistoryRecorder(settles=True)
        op = await recorder.perform("c0", faulty, "k", _Call("get"), cancel_at=3)
        assert op is None and recorder.operations == []


async def test_same_seed_draws_the_same_calls() -> None:
    plan = HistoryPlan(clients=3, keys=2, ops_per_client=12, cancel_rate=0.0, final_read_after=0.0)

    async def calls(seed: int) -> list[tuple[str, str, str, bytes | None]]:
        async with MemoryStorage() as storage:
            ops = await record_history(
                [storage], plan, random.Random(seed), ["a", "b"], settles=True
            )
        return sorted((op.client, op.key, op.kind, op.data if op.kind == "put" else None)
                      for op in ops)  # fmt: skip

    first = await calls(7)
    assert len(first) == 36 + 2 * 2  # and each key read twice at the end
    assert await calls(7) == first
    assert await calls(8) != first


def test_seed_comes_from_the_option_then_the_environment() -> None:
    assert resolve_seed("12", {SEED_ENV: "34"}) == 12
    assert resolve_seed(None, {SEED_ENV: "34"}) == 34
    assert 0 <= resolve_seed(None, {}) < 2**32


@pytest.mark.parametrize(
    ("option", "env", "words"),
    [
        ("abc", {}, "--checkpointkit-seed must be a non-negative integer seed, not 'abc'"),
        (None, {SEED_ENV: "-3"}, f"{SEED_ENV} must be a non-negative integer seed, not -3"),
    ],
)
def test_bad_seed_is_refused_naming_where_it_came_from(
    option: str | None, env: dict[str, str], words: str
) -> None:
    with pytest.raises(ConfigurationError, match=words):
        resolve_seed(option, env)


async def test_settling_adapter_whose_cancelled_put_lands_later_fails_in_ten_runs_of_ten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LandsLater finishes a cancelled put in a detached task: fine for an adapter that
    promises nothing, a violation for one that declares settles_cancelled_writes."""
    settling = Capabilities(durable=False, shared=False, settles_cancelled_writes=True)
    for seed in range(RUNS):
        monkeypatch.setenv(SEED_ENV, str(seed))
        report = await run(
            Target(LandsLater, name="lands-later", capabilities=settling), groups=GROUP
        )
        assert PLAIN in report.failed_names(), f"seed {seed}:\n{report.summary()}"
        reason = report.result(PLAIN).reason
        assert "only before CancelledError reached the caller" in reason
        assert "unknown (cancelled)" in reason

"""A worker killed at any write of the store leaves runs that a pool finishes (issue 20).

The walk: one worker's life creates a run, executes its steps, pauses it for
input, resumes it to completion, prunes it, and runs a second workflow that
fails. It is replayed once per write of that life, killed just before the k-th
write (the walk covers every crash point between two writes, and after the
last). The kill is a fault at the exact write, in-process: the storage wrapper
raises :class:`Killed` from that write on, for every call, so nothing the dead
worker does afterwards reaches the storage, which is what SIGKILL does to a
process (the subprocess version, with SQLite and real SIGKILLs, is
``tests/sqlite/test_sqlite_kills.py``). Then the callers retry their own call
and a pool follows the loop of ``docs/store.md`` (``abandoned_runs`` then
``resume(wait=...)``); every run must end with its right outcome, and at no
point does a run read as ended (completed, paused, failed) while its
checkpoint is missing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from checkpointkit import RunBusy, RunExists
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.styles import StorageWrapper
from checkpointkit.runner import Workflow, context, step
from checkpointkit.storage import GetResult, PutMode, Storage
from checkpointkit.store import CheckpointStore

TTL = 0.15
"""The lease ttl of the workers: a dead worker's lease expires this soon."""


class Killed(Exception):
    """The worker was killed: no call of it reaches the storage any more."""


class KilledAt(StorageWrapper):
    """Kills the worker just before its ``at``-th write (put, delete); counts writes."""

    def __init__(self, inner: Storage, at: int | None = None) -> None:
        super().__init__(inner)
        self.at = at
        self.writes = 0
        self.dead = False

    def _write(self) -> None:
        self._alive()
        self.writes += 1
        if self.writes == self.at:
            self.dead = True
            raise Killed(f"killed before write {self.at}")

    def _alive(self) -> None:
        if self.dead:
            raise Killed("the worker is dead")

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        self._write()
        return await self.inner.put(key, data, mode=mode)

    async def get(self, key: str) -> GetResult:
        self._alive()
        return await self.inner.get(key)

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        self._write()
        return await self.inner.delete(key, if_match=if_match)

    def list(self, prefix: str = "", **kwargs: Any) -> Any:
        self._alive()
        return self.inner.list(prefix, **kwargs)


class Refused(Exception):
    """The failing workflow's own error."""


@step(name="double")
async def double(x: int) -> int:
    return 2 * x


@step(name="ask")
async def ask(value: int) -> int:
    answer: int = await context().request_input({"value": value})
    return answer


async def asks(input: dict[str, int]) -> int:
    doubled = await double(input["x"])
    answer = await ask(doubled)
    return doubled + answer


@step(name="refuse")
async def refuse(x: int) -> int:
    raise Refused(f"refused {x}")


async def fails(input: dict[str, int]) -> int:
    doubled = await double(input["x"])
    return await refuse(doubled)


ASKED = {"x": 3}
ANSWER = 10
OUTPUT = 2 * 3 + 10
FAILING = {"x": 4}


async def _life(storage: Storage) -> None:
    """One worker's life: every kind of write of the store, in order."""
    wf = Workflow(asks, storage=storage, lease_ttl=TTL)
    paused = await wf.run(ASKED, run_id="asks")
    assert paused.status == "paused"
    done = await wf.resume("asks", responses={paused.pending[0].id: ANSWER})
    assert done.status == "completed" and done.output == OUTPUT
    await wf.store.prune("asks", keep_last=1)
    with pytest.raises(Refused):
        await Workflow(fails, storage=storage, lease_ttl=TTL).run(FAILING, run_id="fails")


async def _never_ended_without_checkpoint(store: CheckpointStore, at: int) -> None:
    for run_id in ("asks", "fails"):
        info = await store.run_info(run_id)
        if info is not None and info.status in ("completed", "paused", "failed"):
            latest = await store.latest(run_id)
            assert latest is not None and latest.status == info.status, (
                f"killed before write {at}: run {run_id!r} reads as {info.status} "
                f"but its checkpoint is {latest and latest.status}"
            )


async def _recover(storage: Storage) -> None:
    """The callers retry their own calls; a pool resumes abandoned runs (docs/store.md)."""
    asks_wf = Workflow(asks, storage=storage, lease_ttl=TTL)
    fails_wf = Workflow(fails, storage=storage, lease_ttl=TTL)
    store = asks_wf.store
    for _ in range(20):
        for wf, run_id, input in ((asks_wf, "asks", ASKED), (fails_wf, "fails", FAILING)):
            try:
                await wf.run(input, run_id=run_id)
            except (RunExists, RunBusy, Refused):
                pass
        for run_id in await store.abandoned_runs():
            wf = asks_wf if run_id == "asks" else fails_wf
            try:
                await wf.resume(run_id, wait=4 * TTL)
            except (RunBusy, Refused):
                pass
        latest = await store.latest("asks")
        if latest is not None and latest.status == "paused":  # the responder answers again
            await asks_wf.resume("asks", responses={latest.pending[0].id: ANSWER}, wait=4 * TTL)
        asks_info, fails_info = await store.run_info("asks"), await store.run_info("fails")
        if (
            asks_info is not None
            and asks_info.status == "completed"
            and fails_info is not None
            and fails_info.status == "failed"
        ):
            return
        await asyncio.sleep(TTL)  # the pool's poll interval: it sweeps again later


def _writes_of_a_life() -> int:
    counter = KilledAt(MemoryStorage())
    asyncio.run(_life(counter))
    return counter.writes


WRITES = _writes_of_a_life()


@pytest.mark.parametrize("at", range(1, WRITES + 2))
async def test_pool_finishes_every_run_after_a_kill_at_any_write(
    at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An interrupted creation is taken over after 10 s in production; here after 0.1 s.
    monkeypatch.setattr("checkpointkit.store._CREATION_STALE", 0.1)
    storage = MemoryStorage()
    dying = KilledAt(storage, at)
    failure: Exception | None = None
    try:
        await _life(dying)
    except Exception as exc:  # the dead worker's own calls fail in whatever way
        failure = exc
    assert failure is None or dying.dead, f"the life failed before the kill: {failure!r}"
    store = CheckpointStore(storage)
    await _never_ended_without_checkpoint(store, at)
    await _recover(storage)
    await _never_ended_without_checkpoint(store, at)
    latest = await store.latest("asks")
    assert latest is not None and latest.status == "completed" and latest.output == OUTPUT
    failed = await store.latest("fails")
    assert failed is not None and failed.status == "failed"
    assert failed.error is not None and "refused 8" in failed.error

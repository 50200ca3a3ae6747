"""A chaos worker: drives the shared runs to completion until every run is done (a script).

Usage: ``python _worker.py CONFIG SLOT TOKEN``. ``CONFIG`` is the JSON file the
coordinator wrote (backend, runs and their inputs, lease ttl, log directory),
``SLOT`` numbers the worker (a replacement takes the slot of the one it
replaces) and ``TOKEN`` only marks the command line, so that the coordinator
can find any process of its own that outlived the test.

The worker loops: read the shared ``done`` hints, pick a run that is not known
to be completed (starting at its slot's share of the runs), ``run`` it (or
``resume`` it when it exists already), move on when another worker owns it
(``RunBusy``; its ``retry_after`` says when to look again). When every run
left is owned, it resumes the one whose lease expires first with
``resume(run_id, wait=...)``, which takes the run over once a dead owner's
lease has expired.
It exits 0 once every run is completed. Everything it does goes to
append-only files in the log directory, one line per write (``O_APPEND``, so a
SIGKILL never leaves half of another process's line):

- ``exec-<pid>.log``: ``exec RUN STEP PID T_START T_ATTEMPT`` when a step
  starts executing (``T_ATTEMPT``: when the ``run``/``resume`` call that
  executes it began; wall-clock seconds);
- ``begun-<pid>.log``: ``RUN PID T_ATTEMPT CALL`` when a ``run``/``resume`` call
  begins (a call cut short by a SIGKILL leaves only this line);
- ``attempts-<pid>.log``: one JSON object per ``run``/``resume`` call and its
  outcome;
- ``done.log`` (shared): ``RUN`` once a call returned the run as completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import sys
import time
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from checkpointkit import (
    CheckpointSaveError,
    LeaseLost,
    NotFound,
    RunBusy,
    Storage,
    StorageUnavailable,
    Workflow,
    context,
    parallel,
    step,
)

PID = os.getpid()
ATTEMPT_STARTED = 0.0  # wall-clock start of the run/resume call in progress
LOGS = Path(".")


def append(name: str, line: str) -> None:
    """Append one line to ``LOGS/name`` in one write(2) with O_APPEND."""
    fd = os.open(LOGS / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def record_execution() -> None:
    ctx = context()
    append(
        f"exec-{PID}.log",
        f"exec {ctx.run_id} {ctx.step} {PID} {time.time():.6f} {ATTEMPT_STARTED:.6f}",
    )


@step(name="part")
async def part(x: int, i: int) -> int:
    """One branch of the fan-out: records its execution, stages a state write."""
    record_execution()
    await asyncio.sleep(random.uniform(0.1, 0.4))
    value = x * 100 + i * i + 1
    context().state.set(f"p{i}", value)
    return value


@step(name="combine")
async def combine(parts: list[int]) -> dict[str, int]:
    """The joining step: the parts' sum, and the sum of the state the parts committed."""
    record_execution()
    await asyncio.sleep(random.uniform(0.05, 0.15))
    state = context().state.export()
    return {"sum": sum(parts), "state": sum(state.values()), "keys": len(state)}


async def fan_out(input: dict[str, int]) -> dict[str, int]:
    parts = await parallel(*(part(input["x"], i) for i in range(input["k"])))
    return await combine(parts)


@contextlib.asynccontextmanager
async def open_storage(cfg: dict[str, Any]) -> AsyncIterator[Storage]:
    backend = cfg["backend"]
    if backend == "file":
        from checkpointkit.adapters.file import FileStorage

        async with FileStorage(cfg["root"]) as fs:
            yield fs
    elif backend == "redis":
        from checkpointkit.adapters.redis import RedisStorage

        remap = {(k[0], int(k[1])): (v[0], int(v[1])) for k, v in cfg["remap"]}  # node -> proxy

        def via_proxy(address: tuple[str, int]) -> tuple[str, int]:
            return remap.get(address, address)

        async with RedisStorage.from_url(
            cfg["url"],
            prefix=cfg["prefix"],
            endpoint=tuple(cfg["endpoint"]),
            address_remap=via_proxy,
            timeout=cfg["timeout"],
        ) as rs:
            yield rs
    elif backend == "postgres":
        from checkpointkit.adapters.postgres import PostgresStorage

        async with PostgresStorage.from_url(
            cfg["url"],
            prefix=cfg["prefix"],
            endpoint=tuple(cfg["endpoint"]),
            timeout=cfg["timeout"],
        ) as ps:
            yield ps
    elif backend == "s3":
        from checkpointkit.adapters.s3 import S3Storage

        async with S3Storage(
            cfg["bucket"],
            cfg["prefix"],
            endpoint_url=cfg["endpoint_url"],
            endpoint=tuple(cfg["endpoint"]),
            region=cfg["region"],
            access_key_id=cfg["access_key_id"],
            secret_access_key=cfg["secret_access_key"],
            timeout=cfg["timeout"],
        ) as s3s:
            yield s3s
    else:
        raise ValueError(f"unknown backend {backend!r}")


def read_hints(seen: set[str]) -> None:
    with contextlib.suppress(FileNotFoundError):
        seen.update((LOGS / "done.log").read_text().split())


async def evidence(wf: Workflow, run_id: str, text: str) -> dict[str, Any]:
    """What the storage holds right after a call was told another worker took its run.

    The run's head (its owner, whose second field is the owner's pid, and its
    epoch) and, for a refused step record, that record's epoch: the
    coordinator checks that another worker really was involved.
    """
    found: dict[str, Any] = {}
    store = wf.store
    try:
        async with asyncio.timeout(10):
            head_key = f"runs/{run_id}/head"
            data, _ = await store.storage.get(head_key)
            head = store.codec.decode(data, key=head_key)
            found["head_owner"], found["head_epoch"] = head["owner"], head["epoch"]
            step_match = re.search(r"step '([^']+)' of run", text)
            if step_match is not None:
                step_key = store.step_key(run_id, step_match[1])
                data, _ = await store.storage.get(step_key)
                found["record_epoch"] = store.decode_step(data, key=step_key).epoch
    except Exception as exc:  # evidence is best effort: say why it is missing
        found["unavailable"] = f"{type(exc).__name__}: {exc}"
    return found


async def attempt(
    wf: Workflow, run_id: str, input: Any, fresh: bool, wait: float = 0.0
) -> dict[str, Any]:
    """One ``run`` (or ``resume``, waiting ``wait`` s for a lease) call; its outcome as a dict."""
    global ATTEMPT_STARTED
    ATTEMPT_STARTED = time.time()
    entry: dict[str, Any] = {"run": run_id, "pid": PID, "t0": ATTEMPT_STARTED}
    call = "run" if fresh else "resume"
    append(f"begun-{PID}.log", f"{run_id} {PID} {ATTEMPT_STARTED:.6f} {call}")  # a kill leaves this
    try:
        if fresh:
            try:
                result = await wf.run(input, run_id=run_id)
            except ValueError as exc:
                if "exists already" not in str(exc):
                    raise
                call = "resume"
                result = await wf.resume(run_id)
        else:
            result = await wf.resume(run_id, wait=wait)
    except NotFound as exc:  # created half-way by a killed worker: run() takes it over
        entry["outcome"] = "busy"
        entry["not_created"] = True
        entry["error"] = f"{type(exc).__name__}: {exc}"
    except RunBusy as exc:  # LeaseLost included
        entry["outcome"] = "lease_lost" if isinstance(exc, LeaseLost) else "busy"
        entry["retry_after"] = exc.retry_after
        entry["error"] = f"{type(exc).__name__}: {exc}"
    except (CheckpointSaveError, StorageUnavailable, TimeoutError) as exc:
        entry["outcome"] = "failed"
        entry["error"] = f"{type(exc).__name__}: {exc}"
        cause = exc.__cause__
        if cause is not None:
            entry["cause"] = f"{type(cause).__name__}: {cause}"
    except Exception as exc:  # anything else is a finding: keep the traceback
        entry["outcome"] = "unexpected"
        entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["traceback"] = traceback.format_exc()
    else:
        entry["outcome"] = "completed"
        entry["output"] = result.output
        entry["executed"] = list(result.executed)
        entry["replayed"] = list(result.replayed)
    entry["call"] = call
    entry["wait"] = wait
    entry["t1"] = time.time()
    text = f"{entry.get('error', '')} {entry.get('cause', '')}"
    if "taken over" in text or "recorded by another worker" in text:
        entry["evidence"] = await evidence(wf, run_id, text)
    append(f"attempts-{PID}.log", json.dumps(entry, sort_keys=True))
    return entry


async def main(cfg: dict[str, Any], slot: int) -> int:
    runs: dict[str, Any] = cfg["runs"]
    ids = sorted(runs)
    share = slot * len(ids) // cfg["slots"]
    order = ids[share:] + ids[:share]  # each slot starts at its own share of the runs
    done: set[str] = set()
    created: set[str] = set()  # runs this process knows to exist
    not_before: dict[str, float] = {}  # run -> monotonic time before which it is skipped
    ttl = float(cfg["lease_ttl"])
    async with open_storage(cfg) as storage:
        wf = Workflow(fan_out, storage=storage, lease_ttl=ttl)
        while True:
            read_hints(done)
            todo = [r for r in order if r not in done]
            if not todo:
                return 0
            now = time.monotonic()
            ready = [r for r in todo if not_before.get(r, 0.0) <= now]
            if ready:
                run_id, wait = ready[0], 0.0
            else:  # every run left is owned: wait for the lease that expires first
                run_id, wait = min(todo, key=lambda r: not_before[r]), ttl + 0.5
            entry = await attempt(wf, run_id, runs[run_id], run_id not in created, wait)
            created.add(run_id)
            if entry.get("not_created"):  # its creator died half-way: run() completes it
                created.discard(run_id)
            outcome = entry["outcome"]
            if outcome == "completed":
                done.add(run_id)
                append("done.log", run_id)
            elif outcome == "busy":  # owned by a live worker, or a dead one until its ttl
                left = entry.get("retry_after") or ttl / 2
                not_before[run_id] = time.monotonic() + left + random.uniform(0.05, 0.3)
            else:
                not_before[run_id] = time.monotonic() + random.uniform(0.1, 0.3)


if __name__ == "__main__":
    config = json.loads(Path(sys.argv[1]).read_text())
    LOGS = Path(config["logs"])
    sys.exit(asyncio.run(main(config, int(sys.argv[2]))))

"""Many workers, real backends, chaos: 6 processes complete 100 fan-out runs on one store.

The coordinator (this test) starts 6 worker processes (``_worker.py``) that
share one storage, then, on a seeded random schedule, SIGKILLs a worker (and
starts a replacement in its slot), SIGSTOPs one for longer than the lease ttl
(when it wakes it is a stale owner) and stalls the TCP proxy in front of a
network backend. An observer scans the storage directly all along and keeps
the first content and version of every write-once key. At the end it checks:

- every run completed with the right output, and is listed by ``list_runs``;
- every step record holds the right result, and no write-once key ever
  changed content or version;
- no step executed in a ``run``/``resume`` call that began after the step's
  record was stored (the call loads the records first, so it must replay it);
- every worker process has ended, within a bounded time.

Replay a schedule with ``CHECKPOINTKIT_CHAOS_SEED=<seed>``; the figures are
printed (``-s``) and appended as JSON lines to ``$CHECKPOINTKIT_CHAOS_FIGURES``
when set. See docs/chaos.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from checkpointkit import CheckpointStore, NotFound, Storage
from checkpointkit.conformance.proxy import StallProxy

from .conftest import ChaosBackend

WORKER = Path(__file__).with_name("_worker.py")
WORKERS = 6
RUNS = 100
LEASE_TTL = 3.0
TIME_LIMIT = 150.0  # seconds per backend before the test fails with a dump of stuck runs
MAX_KILLS = 8
MAX_STOPS = 3
MAX_STALLS = 6
SEED_ENV = "CHECKPOINTKIT_CHAOS_SEED"
FIGURES_ENV = "CHECKPOINTKIT_CHAOS_FIGURES"


# -- the workload -----------------------------------------------------------------------
def expected_steps(input: dict[str, int]) -> dict[str, Any]:
    """Each step of a run and its result, as ``_worker.fan_out`` computes them."""
    parts = [input["x"] * 100 + i * i + 1 for i in range(input["k"])]
    steps: dict[str, Any] = {f"part@{i}": v for i, v in enumerate(parts)}
    steps["combine@0"] = {"sum": sum(parts), "state": sum(parts), "keys": input["k"]}
    return steps


def expected_output(input: dict[str, int]) -> Any:
    return expected_steps(input)["combine@0"]


# -- the observer ------------------------------------------------------------------------

OBSERVE_EVERY = 0.1
"""Seconds between two scans of the observer, on every backend."""


@dataclass(frozen=True)
class Seen:
    """A write-once key as the observer first read it."""

    digest: str
    version: str
    at: float
    """Wall-clock time at which the key certainly existed (the end of the listing)."""
    data: bytes


def write_once(key: str) -> bool:
    """Every key of the store is written at most once, except those moved by compare-and-swap.

    Those are a run's head and its index entry (a creation claim: a run whose creator
    was killed between the entry and the input is taken over by swapping the claim).
    """
    return not key.endswith("/head") and not key.startswith("index/")


class Observer:
    """Scans a storage directly and keeps the first sight of every write-once key."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.first: dict[str, Seen] = {}
        self.scans = 0

    async def scan(self) -> None:
        keys = [key async for key in self.storage.list("")]
        at = time.time()
        new = [k for k in keys if write_once(k) and k not in self.first]
        limit = asyncio.Semaphore(8)

        async def read(key: str) -> None:
            async with limit:
                data, version = await self.storage.get(key)
            self.first[key] = Seen(hashlib.sha256(data).hexdigest(), version, at, data)

        async with asyncio.TaskGroup() as tg:
            for key in new:
                tg.create_task(read(key))
        self.scans += 1

    async def watch(self, every: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.scan()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)

    async def changed(self) -> list[str]:
        """Keys whose content or version now differs from the first sight (or that vanished)."""
        problems: list[str] = []
        limit = asyncio.Semaphore(8)

        async def check(key: str, seen: Seen) -> None:
            async with limit:
                try:
                    data, version = await self.storage.get(key)
                except NotFound:
                    problems.append(f"{key}: deleted after it was seen")
                    return
            digest = hashlib.sha256(data).hexdigest()
            if digest != seen.digest:
                problems.append(
                    f"{key}: overwritten with different content (first {len(seen.data)} bytes "
                    f"sha256 {seen.digest[:12]}, now {len(data)} bytes sha256 {digest[:12]})"
                )
            elif version != seen.version:
                problems.append(f"{key}: same bytes, version moved {seen.version} -> {version}")

        async with asyncio.TaskGroup() as tg:
            for key, seen in self.first.items():
                tg.create_task(check(key, seen))
        return sorted(problems)


# -- the coordinator ---------------------------------------------------------------------
@dataclass
class Worker:
    slot: int
    proc: subprocess.Popen[bytes]
    log: Path
    killed: bool = False


@dataclass
class Chaos:
    """Starts the workers, kills, stops and stalls on a seeded schedule, until all are done."""

    config: Path
    logs: Path
    token: str
    rng: random.Random
    proxies: list[StallProxy]
    workers: dict[int, Worker] = field(default_factory=dict)  # slot -> current process
    ended: list[Worker] = field(default_factory=list)
    kills: int = 0
    stops: int = 0
    stalls: int = 0
    stopped: tuple[Worker, float] | None = None
    stalled_until: float | None = None
    events: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    spawned: int = 0

    def spawn(self, slot: int) -> None:
        self.spawned += 1
        log = self.logs / f"worker-{slot}-{self.spawned}.err"
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), str(self.config), str(slot), self.token],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=subprocess.STDOUT,
            )
        self.workers[slot] = Worker(slot, proc, log)

    def note(self, t0: float, what: str) -> None:
        self.events.append(f"{time.monotonic() - t0:6.2f}s {what}")

    async def drive(self, time_limit: float) -> bool:
        """Run until every worker exited by itself; False if ``time_limit`` passed first."""
        t0 = time.monotonic()
        for slot in range(WORKERS):
            self.spawn(slot)
        self.events.append(f"  0.00s start, wall clock {time.time():.3f}")
        budget = MAX_KILLS + MAX_STOPS + (MAX_STALLS if self.proxies else 0)
        acted = 0
        next_event = t0 + self.rng.uniform(0.5, 1.5)
        while self.workers:
            now = time.monotonic()
            if now - t0 > time_limit:
                return False
            self.reap(t0)
            if self.stopped is not None and now >= self.stopped[1]:
                worker = self.stopped[0]
                self.stopped = None
                if worker.proc.poll() is None:
                    os.kill(worker.proc.pid, signal.SIGCONT)
                    self.note(t0, f"SIGCONT slot {worker.slot} pid {worker.proc.pid}")
            if self.stalled_until is not None and now >= self.stalled_until:
                self.stalled_until = None
                for proxy in self.proxies:
                    proxy.resume()
                self.note(t0, "proxy resumed")
            # The events are spread over the workload: the i-th waits until 90 % * i /
            # budget of the runs are done, so slow and fast backends get the same chaos.
            if (
                now >= next_event
                and self.workers
                and acted < budget
                and self.done() >= RUNS * 0.9 * acted / budget
            ):
                acted += self.act(t0, now)
                next_event = now + self.rng.uniform(0.3, 1.0)
            await asyncio.sleep(0.05)  # a coordinator tick: reap, wake, resume, act
        return True

    def reap(self, t0: float) -> None:
        for slot, worker in list(self.workers.items()):
            code = worker.proc.poll()
            if code is None:
                continue
            del self.workers[slot]
            self.ended.append(worker)
            if code != 0:
                tail = worker.log.read_text(errors="replace")[-2000:]
                self.failures.append(
                    f"worker slot {slot} pid {worker.proc.pid} exited with status {code}:\n{tail}"
                )
                self.spawn(slot)  # keep the pool at strength; the test fails at the end
            else:
                self.note(t0, f"slot {slot} pid {worker.proc.pid} done")

    def done(self) -> int:
        """How many runs the workers have reported completed (the shared hints)."""
        try:
            return len(set((self.logs / "done.log").read_text().split()))
        except FileNotFoundError:
            return 0

    def act(self, t0: float, now: float) -> int:
        """Kill, stop or stall (by the remaining budgets); return 1 if something was done."""
        weights = {
            "kill": MAX_KILLS - self.kills,
            "stop": MAX_STOPS - self.stops if self.stopped is None else 0,
            "stall": MAX_STALLS - self.stalls if self.proxies and not self.stalled_until else 0,
        }
        choices = [a for a, n in weights.items() for _ in range(n)]
        if not choices:
            return 0
        action = self.rng.choice(choices)
        slot = self.rng.choice(sorted(self.workers))
        worker = self.workers[slot]
        if action == "kill":
            if worker.proc.poll() is not None:
                return 0  # it just exited by itself; reaped at the next tick
            os.kill(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait()
            worker.killed = True
            self.kills += 1
            del self.workers[slot]
            self.ended.append(worker)
            if self.stopped is not None and self.stopped[0] is worker:
                self.stopped = None
            self.note(t0, f"SIGKILL slot {slot} pid {worker.proc.pid}")
            self.spawn(slot)
        elif action == "stop":
            if worker.proc.poll() is not None:
                return 0
            duration = self.rng.uniform(LEASE_TTL + 0.5, LEASE_TTL + 2.0)
            os.kill(worker.proc.pid, signal.SIGSTOP)
            self.stopped = (worker, now + duration)
            self.stops += 1
            self.note(t0, f"SIGSTOP slot {slot} pid {worker.proc.pid} for {duration:.1f} s")
        else:
            duration = self.rng.uniform(0.3, 2.5)
            direction = self.rng.choice(["request", "response", "both"])
            partial = self.rng.random() < 0.5
            which = self.rng.sample(self.proxies, self.rng.randint(1, len(self.proxies)))
            for proxy in which:
                proxy.stall(direction, partial=partial)  # type: ignore[arg-type]
            self.stalled_until = now + duration
            self.stalls += 1
            self.note(
                t0,
                f"stall {len(which)}/{len(self.proxies)} proxies ({direction}, "
                f"partial={partial}) for {duration:.1f} s",
            )
        return 1

    def kill_all(self) -> None:
        """End every process still running (after a failure): SIGKILL by pid, then reap."""
        for worker in list(self.workers.values()):
            if worker.proc.poll() is None:
                os.kill(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait()
            self.ended.append(worker)
        self.workers.clear()
        for proxy in self.proxies:
            proxy.resume()


def leftover_processes(token: str) -> list[str]:
    """Processes whose command line holds ``token``: workers that outlived the test."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if token.encode() in cmdline:
            found.append(f"pid {entry.name}: {b' '.join(cmdline).decode(errors='replace')}")
    return found


# -- reading the logs -----------------------------------------------------------------------
def read_lines(logs: Path, pattern: str) -> list[str]:
    lines: list[str] = []
    for path in sorted(logs.glob(pattern)):
        lines += [line for line in path.read_text().splitlines() if line]
    return lines


def read_attempts(logs: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in read_lines(logs, "attempts-*.log")]


@dataclass(frozen=True)
class Execution:
    run: str
    step: str
    pid: int
    started: float
    attempt: float


def read_executions(logs: Path) -> list[Execution]:
    executions = []
    for line in read_lines(logs, "exec-*.log"):
        _, run, step_id, pid, started, attempt = line.split()
        executions.append(Execution(run, step_id, int(pid), float(started), float(attempt)))
    return executions


def first_calls(logs: Path, run_ids: list[str], chaos: Chaos) -> list[str]:
    """The first call of each run: who made it, when, and how it ended (or was killed)."""
    killed = {w.proc.pid for w in chaos.ended if w.killed}
    ended = {(a["run"], a["pid"], round(a["t0"], 6)) for a in read_attempts(logs)}
    found = []
    for run_id in run_ids:
        begun = sorted(
            (float(t), int(pid))
            for line in read_lines(logs, "begun-*.log")
            for r, pid, t, _call in [line.split()]
            if r == run_id
        )
        if not begun:
            found.append(f"{run_id}: no call logged")
            continue
        t, pid = begun[0]
        if (run_id, pid, round(t, 6)) in ended:
            how = "ended (see its attempts log)"
        elif pid in killed:
            how = "never ended: the process was SIGKILLed during the call"
        else:
            how = "never ended"
        found.append(f"{run_id}: first call by pid {pid} at {t:.3f}, {how}")
    return found


def error_kinds(attempts: list[dict[str, Any]]) -> Counter[str]:
    """How many calls failed, by error type and the gist of its message."""
    kinds: Counter[str] = Counter()
    for a in attempts:
        if a["outcome"] in ("completed", "busy"):
            continue
        text = f"{a.get('error', '')} {a.get('cause', '')}"
        gist = next(
            (g for g in ("taken over", "expired", "recorded by another worker") if g in text),
            text.split(":", 1)[0],
        )
        kinds[f"{a['error'].split(':', 1)[0]}: {gist}"] += 1
    return kinds


def false_takeovers(attempts: list[dict[str, Any]]) -> list[str]:
    """Calls told that another worker took their run, while the storage says none did.

    Right after such an error the worker read the run's head (and the refused
    step record). If the head still names this worker's pid at the epoch of
    the call's lease, nobody acquired the run in between: the call lost its
    own lease to a write of its own (a renewal that landed although its reply
    was lost, a retried create that found its first attempt).
    """
    problems = []
    for a in attempts:
        found = a.get("evidence")
        if not found or "head_owner" not in found:
            continue
        text = f"{a.get('error', '')} {a.get('cause', '')}"
        owner_pid = int(str(found["head_owner"]).split(":")[-2])
        if owner_pid != a["pid"]:
            continue  # another process holds the head now: a real takeover
        epoch = re.search(r"\(epoch (\d+)\) was taken over", text)
        if epoch is not None:
            own = int(epoch[1]) == found["head_epoch"]
        else:
            own = found.get("record_epoch") == found["head_epoch"]
        if own:
            problems.append(
                f"run {a['run']}: pid {a['pid']} {a['call']} was told another worker took the "
                f"run, but the head still names pid {owner_pid} at epoch {found['head_epoch']}"
                f"{'' if epoch else ' and the refused record has that epoch'} "
                f"(nobody acquired it in between): {text.strip()[:300]}"
            )
    return problems


async def dump_stuck(store: CheckpointStore, runs: dict[str, Any], logs: Path) -> str:
    """Which runs are not completed, who holds them, and their last attempts."""
    done = set((logs / "done.log").read_text().split()) if (logs / "done.log").exists() else set()
    attempts = read_attempts(logs)
    now = time.time()
    lines = []
    for run_id in sorted(set(runs) - done):
        try:
            head_key = f"runs/{run_id}/head"
            data, _ = await store.storage.get(head_key)
            head = store.codec.decode(data, key=head_key)
            holder = (
                f"owner {head['owner']} epoch {head['epoch']} "
                f"expires in {head['expires'] - now:+.1f} s, head seq {head['seq']}"
            )
        except NotFound:
            holder = "no head"
        latest = await store.latest(run_id)
        status = latest.status if latest is not None else "no checkpoint"
        last = [
            f"{a['outcome']} by pid {a['pid']}: {a.get('error', '')}"[:200]
            for a in attempts
            if a["run"] == run_id
        ][-3:]
        lines.append(f"  {run_id}: {status}; {holder}; last attempts: {last}")
    return "\n".join(lines) or "  (every run is marked done)"


# -- the test -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(TIME_LIMIT + 60)
async def test_many_workers_complete_every_run_under_chaos(
    chaos_backend: ChaosBackend, tmp_path: Path
) -> None:
    backend = chaos_backend
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**32))
    tag = f"chaos[{backend.name}] seed={seed} ({SEED_ENV}={seed} replays the schedule)"
    print(f"\n{tag}")
    rng = random.Random(seed)
    runs = {f"r{i:03d}": {"x": rng.randrange(1000), "k": rng.randint(2, 4)} for i in range(RUNS)}
    logs = tmp_path / "logs"
    logs.mkdir()
    config = tmp_path / "worker.json"
    config.write_text(
        json.dumps(
            {
                **backend.config,
                "runs": runs,
                "slots": WORKERS,
                "lease_ttl": LEASE_TTL,
                "logs": str(logs),
            }
        )
    )
    token = f"chaos-{uuid.uuid4().hex}"
    chaos = Chaos(config, logs, token, rng, backend.proxies)
    failures: list[str] = []
    async with backend.direct() as direct:
        store = CheckpointStore(direct)
        observer = Observer(direct)
        stop = asyncio.Event()
        watcher = asyncio.create_task(observer.watch(OBSERVE_EVERY, stop))
        started = time.monotonic()
        try:
            finished = await chaos.drive(TIME_LIMIT)
            wall = time.monotonic() - started
            if not finished:
                stuck = await dump_stuck(store, runs, logs)
                live = [f"slot {w.slot} pid {w.proc.pid}" for w in chaos.workers.values()]
                failures.append(
                    f"not done within {TIME_LIMIT:.0f} s; live workers {live}; stuck runs:\n{stuck}"
                )
        finally:
            chaos.kill_all()
            stop.set()
            await watcher
        checks_started = time.monotonic()
        await observer.scan()  # the final sight of every key
        failures += chaos.failures
        leftovers = leftover_processes(token)
        if leftovers:
            failures.append(f"worker processes outlived the test: {leftovers}")

        # Every run completed with the right output, and is listed.
        for run_id, input in sorted(runs.items()):
            latest = await store.latest(run_id)
            if latest is None or latest.status != "completed":
                status = "no checkpoint" if latest is None else latest.status
                failures.append(f"run {run_id} is not completed (latest: {status})")
            elif latest.output != expected_output(input):
                failures.append(
                    f"run {run_id} completed with {latest.output!r}, "
                    f"expected {expected_output(input)!r}"
                )
        listed = await store.list_runs()
        if sorted(listed) != sorted(runs):
            failures.append(
                f"list_runs is missing {sorted(set(runs) - set(listed))} "
                f"and has extra {sorted(set(listed) - set(runs))}; the first calls of the "
                f"missing runs: {first_calls(logs, sorted(set(runs) - set(listed)), chaos)}"
            )

        # Every step record is right; no write-once key changed.
        for run_id, input in sorted(runs.items()):
            want = expected_steps(input)
            prefix = f"runs/{run_id}/s/"
            have = {k[len(prefix) :]: s for k, s in observer.first.items() if k.startswith(prefix)}
            if set(have) != set(want):
                failures.append(
                    f"run {run_id}: step records {sorted(have)}, expected {sorted(want)}"
                )
            for step_id, seen in have.items():
                record = store.decode_step(seen.data, key=prefix + step_id)
                if step_id in want and record.result != want[step_id]:
                    failures.append(
                        f"run {run_id}: record of {step_id} holds {record.result!r}, "
                        f"expected {want[step_id]!r}"
                    )
        failures += await observer.changed()

        # No step executed in a call that began after the step's record was stored.
        executions = read_executions(logs)
        calls = {  # (pid, call start) -> "run" or "resume"
            (int(pid), t): call
            for line in read_lines(logs, "begun-*.log")
            for _run, pid, t, call in [line.split()]
        }
        per_step = Counter((e.run, e.step) for e in executions)
        raced = 0
        for e in executions:
            landed = observer.first.get(f"runs/{e.run}/s/{e.step}")
            if landed is None:
                failures.append(f"run {e.run}: step {e.step} executed (pid {e.pid}) but no record")
                continue
            if e.attempt > landed.at:
                call = calls.get((e.pid, f"{e.attempt:.6f}"), "call")
                failures.append(
                    f"run {e.run}: step {e.step} executed again by pid {e.pid} at {e.started:.3f} "
                    f"in a {call} begun at {e.attempt:.3f}, {e.attempt - landed.at:.3f} s after "
                    f"its record was stored (seen at {landed.at:.3f}, epoch "
                    f"{store.decode_step(landed.data, key=f'runs/{e.run}/s/{e.step}').epoch})"
                )
            elif e.started > landed.at:
                raced += 1  # the record landed while this call was running: allowed
        steps = sum(len(expected_steps(i)) for i in runs.values())
        missing = [
            f"{r}/{s}" for r, i in runs.items() for s in expected_steps(i) if not per_step[(r, s)]
        ]
        if missing:
            failures.append(f"steps with a record but no execution logged: {missing[:10]}")

        # Calls that ended in an error nobody expects, or completed with a wrong output,
        # or were told that another worker took their run when none did.
        attempts = read_attempts(logs)
        outcomes = Counter(a["outcome"] for a in attempts)
        failures += false_takeovers(attempts)
        for a in attempts:
            if a["outcome"] == "unexpected":
                failures.append(
                    f"run {a['run']}: pid {a['pid']} {a['call']} raised {a['error']}\n"
                    f"{a.get('traceback', '')}"
                )
            elif a["outcome"] == "completed" and a["output"] != expected_output(runs[a["run"]]):
                failures.append(f"run {a['run']}: pid {a['pid']} returned {a['output']!r}")

        # Figures. A run driven again after it completed (its lease taken after the
        # completion, every step replayed) writes one more "completed" checkpoint.
        completions = Counter(
            key.split("/")[1]
            for key, seen in observer.first.items()
            if "/c/" in key and store.decode_checkpoint(seen.data, key=key).status == "completed"
        )
        driven_again = sum(n - 1 for n in completions.values() if n > 1)
        epochs = 0
        for run_id in runs:
            with contextlib.suppress(NotFound):
                data, _ = await direct.get(f"runs/{run_id}/head")
                epochs += int(store.codec.decode(data, key=f"runs/{run_id}/head")["epoch"])
    figures = {
        "backend": backend.name,
        "seed": seed,
        "wall_s": round(wall, 1),
        "checks_s": round(time.monotonic() - checks_started, 1),
        "kills": chaos.kills,
        "stops": chaos.stops,
        "stalls": chaos.stalls,
        "takeovers": epochs - len(runs),
        "steps": steps,
        "executions": len(executions),
        "re_executions": len(executions) - steps,
        "raced": raced,
        "driven_again": driven_again,
        "outcomes": dict(sorted(outcomes.items())),
        "errors": dict(sorted(error_kinds(attempts).items())),
        "processes": chaos.spawned,
        "observer_scans": observer.scans,
        "passed": not failures,
    }
    (logs / "events.log").write_text("\n".join(chaos.events) + "\n")
    print(f"{tag}: {json.dumps(figures)}")
    if os.environ.get(FIGURES_ENV):
        with open(os.environ[FIGURES_ENV], "a") as out:
            out.write(json.dumps(figures) + "\n")
    schedule = "\n".join(chaos.events)
    assert not failures, (
        f"{tag}: {len(failures)} invariant(s) broken:\n"
        + "\n".join(failures[:40])
        + f"\nfigures: {json.dumps(figures)}\nschedule:\n{schedule}"
    )

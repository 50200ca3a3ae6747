"""What the hygiene check's record of creation sites costs: per coroutine and per task.

Run: ``.venv/bin/python benchmarks/hygiene_origins.py [--rounds 5]``

While a `checkpointkit.conformance.hygiene` block runs (around every test of the suite),
the interpreter records where each coroutine was created
(``sys.set_coroutine_origin_tracking_depth``), and a task factory records where each task
was. A client SDK makes dozens of coroutines a request, so these costs fall on every call
the suite makes. Interleaved round by round, medians over the rounds:

- coroutines: a chain of 7 nested coroutine calls, per coroutine, with tracking off (the
  floor) and at each depth;
- tasks: the creator's frames taken by ``traceback.extract_stack`` (which reads each
  frame's source line) beside the hygiene module's own ``_creator_frames`` (code objects
  and line numbers only), per task, with a bare ``create_task`` as the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import checkpointkit.conformance.hygiene as hygiene

CHAIN = 7
"""Coroutines made per awaited chain."""


async def _leaf() -> int:
    return 1


async def _chain(n: int) -> int:
    return await _chain(n - 1) if n else await _leaf()


def coroutine_ns(depth: int, n: int) -> float:
    """Nanoseconds per coroutine made and run, origins tracked at ``depth``."""

    async def main() -> float:
        start = time.perf_counter()
        for _ in range(n):
            await _chain(CHAIN - 2)
        return (time.perf_counter() - start) / (n * CHAIN) * 1e9

    old = sys.get_coroutine_origin_tracking_depth()
    sys.set_coroutine_origin_tracking_depth(depth)
    try:
        return asyncio.run(main())
    finally:
        sys.set_coroutine_origin_tracking_depth(old)


def task_ns(record: Callable[[], Any] | None, n: int) -> float:
    """Nanoseconds per task created and run, with ``record`` called by its task factory."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        if record is not None:

            def factory(the_loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Task[Any]:
                record()
                return asyncio.Task(coro, loop=the_loop)

            loop.set_task_factory(factory)  # type: ignore[arg-type]
        start = time.perf_counter()
        for _ in range(n):
            await loop.create_task(_leaf())
        return (time.perf_counter() - start) / n * 1e9

    return asyncio.run(main())


def _extract_stack() -> Any:
    return traceback.extract_stack(limit=hygiene.ORIGIN_DEPTH)[:-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=20000, help="chains (and tasks) per round")
    args = parser.parse_args()
    depths = sorted({0, 1, hygiene.COROUTINE_ORIGIN_DEPTH, hygiene.ORIGIN_DEPTH})
    tasks: dict[str, Callable[[], Any] | None] = {
        "floor: no record": None,
        "traceback.extract_stack": _extract_stack,
        "hygiene's _creator_frames": hygiene._creator_frames,
    }
    coro: dict[int, list[float]] = {d: [] for d in depths}
    task: dict[str, list[float]] = {name: [] for name in tasks}
    for _ in range(args.rounds):
        for d in depths:
            coro[d].append(coroutine_ns(d, args.n))
        for name, record in tasks.items():
            task[name].append(task_ns(record, args.n))
    floor = statistics.median(coro[0])
    print(f"per coroutine (a chain of {CHAIN}), medians of {args.rounds} rounds")
    for d in depths:
        ns = statistics.median(coro[d])
        label = "floor: not tracked" if d == 0 else f"origins tracked at depth {d}"
        note = " (the hygiene check's)" if d == hygiene.COROUTINE_ORIGIN_DEPTH else ""
        print(f"  {label:32s} {ns:7.0f} ns  {ns / floor:5.2f}x{note}")
    floor = statistics.median(task["floor: no record"])
    print("per task created and run")
    for name in tasks:
        ns = statistics.median(task[name])
        print(f"  {name:32s} {ns:7.0f} ns  {ns / floor:5.2f}x")


if __name__ == "__main__":
    main()

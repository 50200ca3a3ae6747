"""A pytest plugin that records each test's CPU and wall time, for `scripts/cpu-report`.

The CPU is that of the pytest process's whole tree (the worker, the servers it started,
the programs a test runs and their children), read from ``/proc`` before and after the
test: on a machine whose cores the suite keeps busy, CPU, not wall time, says what a test
costs the run. Writes one JSON line per test to ``$CPU_PER_TEST_OUT.<worker>.jsonl``.
Linux only; it adds about 20 ms a test (two reads of ``/proc``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from typing import Any

import pytest

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """Seconds of CPU used by ``root`` and every process below it (those that ended and were
    waited for included)."""
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(name))
        used[int(name)] = sum(int(v) for v in fields[11:15]) / _TICK  # utime..cstime
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += used.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, None, None]:
    out = os.environ.get("CPU_PER_TEST_OUT")
    if not out:
        yield
        return
    cpu, start = tree_cpu(os.getpid()), time.time()
    yield
    record = {
        "id": item.nodeid,
        "cpu": tree_cpu(os.getpid()) - cpu,
        "start": start,
        "end": time.time(),
    }
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{out}.{worker}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")

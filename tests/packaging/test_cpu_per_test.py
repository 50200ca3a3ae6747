"""scripts/cpu_per_test.py, behind scripts/cpu-report, counts a test's CPU where it is spent:
in this process and in the processes it starts, not in unrelated ones."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cpu_per_test.py"
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def _tree_cpu() -> object:
    spec = importlib.util.spec_from_file_location("cpu_per_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tree_cpu


def test_a_child_processs_cpu_counts_and_an_unrelated_processs_does_not() -> None:
    tree_cpu = _tree_cpu()
    stranger = subprocess.Popen(  # not a child of this process: started by a shell that exits
        ["sh", "-c", f"{sys.executable} -c '{BURN.format(s=5)}' >/dev/null & echo $!"],
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = int((stranger.communicate()[0]).strip())
    try:
        before = tree_cpu(os.getpid())  # type: ignore[operator]
        started = time.monotonic()
        child = subprocess.Popen(  # burns half a second, says so, and runs on until stdin ends
            [sys.executable, "-c", BURN.format(s=0.5) + "print('burnt', flush=True)\ninput()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        used = tree_cpu(os.getpid()) - before  # type: ignore[operator]
        took = time.monotonic() - started
        child.communicate("")
    finally:
        os.kill(pid, 9)
    assert used >= 0.45, used  # the running child's half second
    assert used <= took + 0.25, (used, took)  # and not the stranger's CPU beside it

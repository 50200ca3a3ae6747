"""The runner's per-step CPU cost at an earlier commit and in the working tree, interleaved.

Run: ``.venv/bin/python benchmarks/compare_commits.py REV [--rounds 7] [--steps 100,1000,10000]``

``REV`` is any commit git knows (``HEAD~3``, a hash, a branch). Its ``core/``, ``adapters/``
and ``conformance/`` are exported with ``git archive`` and laid out as the ``checkpointkit``
package (the mapping of ``[tool.setuptools.package-dir]``) in a scratch directory, beside a
copy of the working tree's, made the same way; both run with this virtualenv's other
packages. Each round runs one child process per tree, in alternating order, so that both
see the same machine load; every child times ``N`` sequential no-op steps on the memory
storage for each ``N`` of ``--steps`` (after one warm-up run) as CPU time
(``time.process_time``) and wall time per step, from inside the event loop (the run with
its storage opened and closed, not the loop's creation). The figures are medians over the rounds;
the ratio is the working tree's over ``REV``'s (below 1: the working tree is cheaper).

This is a measurement to run by hand, not a test: CPU time is steadier than wall time on a
shared machine, but not exact.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = {
    "core": "checkpointkit",
    "adapters": "checkpointkit/adapters",
    "conformance": "checkpointkit/conformance",
}
"""Source folder -> its place in the package (``core/integrations`` and ``core/cli`` follow
``core``)."""

CHILD = r"""
import asyncio, json, sys, time
import checkpointkit
from checkpointkit import Workflow, step
from checkpointkit.adapters.memory import MemoryStorage

@step(name="noop")
async def noop(i):
    return i

def chain(n):
    async def main(_):
        for i in range(n):
            await noop(i)
        return n
    return main

async def go(n):
    # Timed inside the event loop: the run, the storage opened and closed, not the loop.
    c0, t0 = time.process_time(), time.perf_counter()
    async with MemoryStorage() as storage:
        await Workflow(chain(n), storage=storage).run()
    return ((time.process_time() - c0) / n, (time.perf_counter() - t0) / n)

out = {"file": checkpointkit.__file__}
for n in json.loads(sys.argv[1]):
    asyncio.run(go(n))  # warm-up
    out[str(n)] = asyncio.run(go(n))
print(json.dumps(out))
"""


def lay_out(files: dict[str, bytes], into: Path) -> None:
    """Write a tree's source folders (path -> bytes) as the ``checkpointkit`` package."""
    for path, data in files.items():
        top, _, rest = path.partition("/")
        if top not in LAYOUT or not rest:
            continue
        target = into / LAYOUT[top] / rest
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def files_at(rev: str) -> dict[str, bytes]:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, *LAYOUT],
        check=True,
        capture_output=True,
    ).stdout
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                f = tar.extractfile(member)
                assert f is not None
                files[member.name] = f.read()
    return files


def files_in_working_tree() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for top in LAYOUT:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                files[str(path.relative_to(ROOT))] = path.read_bytes()
    return files


def run_child(lib: Path, steps: list[int]) -> dict[str, object]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(lib) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(steps)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    result: dict[str, object] = json.loads(done.stdout)
    if not str(result["file"]).startswith(str(lib)):
        raise SystemExit(f"the child imported {result['file']}, not the tree in {lib}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("rev", help="the earlier commit to compare with (HEAD~1, a hash...)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", default="100,1000,10000")
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix=".bench-compare-"))
    try:
        trees = {args.rev: scratch / "rev", "working tree": scratch / "work"}
        lay_out(files_at(args.rev), trees[args.rev])
        lay_out(files_in_working_tree(), trees["working tree"])
        cpu: dict[str, dict[int, list[float]]] = {t: {n: [] for n in steps} for t in trees}
        wall: dict[str, dict[int, list[float]]] = {t: {n: [] for n in steps} for t in trees}
        with open("/proc/loadavg") as f:
            print(f"load average before: {' '.join(f.read().split()[:3])}")
        for i in range(args.rounds):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for name in order:
                got = run_child(trees[name], steps)
                for n in steps:
                    c, w = got[str(n)]  # type: ignore[misc]
                    cpu[name][n].append(c)
                    wall[name][n].append(w)
        print(
            f"per sequential no-op step on the memory storage, medians of {args.rounds} "
            "interleaved rounds (CPU time; wall time in brackets)"
        )
        print(f"{'steps':>8}{args.rev:>24}{'working tree':>24}{'ratio':>8}")
        for n in steps:
            old = statistics.median(cpu[args.rev][n])
            new = statistics.median(cpu["working tree"][n])
            old_w = statistics.median(wall[args.rev][n])
            new_w = statistics.median(wall["working tree"][n])
            print(
                f"{n:>8,}{f'{old * 1e6:.1f} µs ({old_w * 1e6:.1f})':>24}"
                f"{f'{new * 1e6:.1f} µs ({new_w * 1e6:.1f})':>24}{new / old:>7.2f}x"
            )
        with open("/proc/loadavg") as f:
            print(f"load average after: {' '.join(f.read().split()[:3])}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

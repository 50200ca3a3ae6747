"""G8 one owner per run: two processes resume the same run; one gets RunBusy."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

from checkpointkit.adapters.file import FileStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.runner import Workflow, step

WORKER = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from pathlib import Path
    from checkpointkit import RunBusy
    from checkpointkit.adapters.file import FileStorage
    from checkpointkit.runner import Workflow, step

    root, marker = Path(sys.argv[1]), Path(sys.argv[2])

    @step(name="first")
    async def first() -> str:
        return "first"

    @step(name="gate")
    async def gate() -> str:
        if os.environ.get("FAIL"):
            raise RuntimeError("fail the first attempt")
        deadline = time.monotonic() + 30
        while not marker.exists():  # hold the run until the other worker was refused
            if time.monotonic() > deadline:
                raise TimeoutError("the other worker never reported RunBusy")
            await asyncio.sleep(0.01)
        return f"gate by {os.getpid()}"

    async def main(_):
        return [await first(), await gate()]

    async def go() -> int:
        async with FileStorage(root) as storage:
            wf = Workflow(main, storage=storage)
            if os.environ.get("FAIL"):
                try:
                    await wf.run(run_id="shared")
                except RuntimeError:
                    return 0
            try:
                await wf.resume("shared")
            except RunBusy as exc:
                marker.write_text(str(exc))
                return 3
            return 0

    sys.exit(asyncio.run(go()))
    """
)


async def test_g8_two_processes_resume_same_run_one_gets_run_busy(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    root, marker = tmp_path / "store", tmp_path / "busy"
    import os

    env = {**os.environ, "FAIL": "1"}
    subprocess.run([sys.executable, str(script), str(root), str(marker)], env=env, check=True)
    procs = [
        subprocess.Popen([sys.executable, str(script), str(root), str(marker)]) for _ in range(2)
    ]
    codes = sorted(await asyncio.gather(*(asyncio.to_thread(p.wait, 60) for p in procs)))
    assert codes == [0, 3], codes
    assert "owned by" in marker.read_text() or "taken by another worker" in marker.read_text()

    @step(name="first")
    async def first() -> str:
        raise AssertionError("replayed steps must not execute")

    @step(name="gate")
    async def gate() -> str:
        raise AssertionError("replayed steps must not execute")

    async def main(_: object) -> list[str]:
        return [await first(), await gate()]

    async with hygiene(), FileStorage(root) as storage:
        wf = Workflow(main, storage=storage)
        result = await wf.resume("shared")
        assert result.status == "completed"
        assert result.output[0] == "first" and result.output[1].startswith("gate by ")
        records = await wf.store.load_steps("shared")
        assert set(records) == {"first@0", "gate@0"}

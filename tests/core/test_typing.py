"""``Workflow[In, Out]`` and ``RunResult[Out]`` are typed from the workflow function.

mypy (strict) checks a small example and must infer the types, and report a
wrong input, as a user's type checker would.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")

EXAMPLE = textwrap.dedent(
    """
    from checkpointkit import RunResult, Workflow, step
    from checkpointkit.storage import Storage


    @step
    async def double(x: int) -> int:
        return x * 2


    async def main(n: int) -> str:
        return str(await double(n))


    async def go(storage: Storage) -> None:
        wf = Workflow(main, storage=storage)
        reveal_type(wf)
        result = await wf.run(3, run_id="r")
        reveal_type(result)
        reveal_type(result.output)
        again = await wf.resume("r")
        reveal_type(again.output)
        if result.output is not None:
            text: str = result.output
            print(text)
        await wf.run("three")  # WRONG-INPUT
        wrong: RunResult[int] = result  # WRONG-OUTPUT
        print(wrong)
    """
)


def _line(marker: str) -> int:
    return next(i for i, line in enumerate(EXAMPLE.splitlines(), 1) if marker in line)


def _mypy(tmp_path: Path) -> str:
    path = tmp_path / "typed_example.py"
    path.write_text(EXAMPLE)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2 would be a mypy crash
    return done.stdout


def test_run_result_output_is_typed_from_the_workflow_function(tmp_path: Path) -> None:
    out = _mypy(tmp_path)
    lines = out.splitlines()
    revealed = [line.split("Revealed type is ")[1] for line in lines if "Revealed" in line]
    assert revealed == [
        '"checkpointkit.runner.Workflow[builtins.int, builtins.str]"',
        '"checkpointkit.runner.RunResult[builtins.str]"',
        '"builtins.str | None"',
        '"builtins.str | None"',
    ] or revealed == [
        '"checkpointkit.runner.Workflow[int, str]"',
        '"checkpointkit.runner.RunResult[str]"',
        '"str | None"',
        '"str | None"',
    ], out
    errors = [line for line in lines if ": error:" in line]
    assert len(errors) == 2, out
    wrong_input, wrong_output = _line("WRONG-INPUT"), _line("WRONG-OUTPUT")
    assert f':{wrong_input}: error: Argument 1 to "run" of "Workflow"' in errors[0]
    assert 'incompatible type "str"; expected "int"' in errors[0]
    assert f":{wrong_output}: error: Incompatible types in assignment" in errors[1]
    assert "RunResult[str]" in errors[1] and "RunResult[int]" in errors[1]

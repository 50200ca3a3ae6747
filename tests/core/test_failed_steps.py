"""A failed run tells which steps completed: a note on its error, and ``completed_steps``."""

from __future__ import annotations

import pytest
from checkpointkit import Workflow, parallel, step
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.errors import NotFound
from checkpointkit.store import CheckpointStore

calls: dict[str, int] = {}


@step(name="fetch")
async def fetch(n: int) -> int:
    return n


@step(name="parse")
async def parse(values: list[int]) -> int:
    calls["parse"] = calls.get("parse", 0) + 1
    if calls["parse"] == 1:
        raise ValueError("bad input on the first attempt")
    return sum(values)


async def pipeline(n: int) -> int:
    values = await parallel(*(fetch(i) for i in range(n)))
    return await parse(values)


def _notes(exc: BaseException) -> list[str]:
    return [n for n in getattr(exc, "__notes__", []) if n.startswith("checkpointkit:")]


async def test_failed_run_error_notes_its_completed_steps() -> None:
    calls.clear()
    async with MemoryStorage() as storage:
        wf = Workflow(pipeline, storage=storage)
        with pytest.raises(ValueError, match="bad input") as caught:
            await wf.run(3, run_id="r1")
        (note,) = _notes(caught.value)
        assert "run 'r1' failed after 3 completed step(s)" in note
        assert note.endswith("fetch@0, fetch@1, fetch@2")  # the failed step is not listed
        assert await wf.store.completed_steps("r1") == ["fetch@0", "fetch@1", "fetch@2"]


async def test_completed_steps_after_resume_list_replayed_and_new_steps_in_order() -> None:
    calls.clear()
    async with MemoryStorage() as storage:
        wf = Workflow(pipeline, storage=storage)
        with pytest.raises(ValueError, match="bad input"):
            await wf.run(2, run_id="r2")
        result = await wf.resume("r2")
        assert result.output == 1
        assert result.replayed == ("fetch@0", "fetch@1")
        steps = await CheckpointStore(storage).completed_steps("r2")
        assert steps == ["fetch@0", "fetch@1", "parse@0"]


async def test_note_names_at_most_twenty_steps_and_counts_the_rest() -> None:
    calls.clear()
    async with MemoryStorage() as storage:
        wf = Workflow(pipeline, storage=storage)
        with pytest.raises(ValueError, match="bad input") as caught:
            await wf.run(25, run_id="big")
        (note,) = _notes(caught.value)
        assert "after 25 completed step(s)" in note
        assert "fetch@19, ... (5 more)" in note and "fetch@20" not in note


async def test_completed_steps_of_an_unknown_run_raise_not_found() -> None:
    async with MemoryStorage() as storage:
        with pytest.raises(NotFound, match="run 'nope' not found"):
            await CheckpointStore(storage).completed_steps("nope")

"""LangGraph's own conformance suite passes at its highest level on every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from .conftest import Location


async def test_langgraph_conformance_is_full_on_every_backend(location: Location) -> None:
    made: list[Location] = []

    @checkpointer_test(name=f"CheckpointkitSaver[{location.backend}]")
    async def saver() -> AsyncIterator[CheckpointkitSaver]:
        # A fresh saver, on a fresh prefix, for each capability suite.
        made.append(location)
        async with CheckpointkitSaver(location.open(), prefix=f"suite{len(made)}") as s:
            try:
                yield s
            finally:
                await s.storage.aclose()

    async with hygiene():
        report = await validate(saver)

    failures = [f for result in report.results.values() for f in result.failures]
    assert report.conformance_level() == "FULL", failures
    assert {name for name, r in report.results.items() if r.detected} == {
        c.value for c in ALL_CAPABILITIES
    }, "every capability, base and extended, must be implemented and tested"
    assert all(r.tests_passed > 0 and r.tests_failed == 0 for r in report.results.values())

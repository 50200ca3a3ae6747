"""LangGraph's own conformance suite passes at its highest level on every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

from checkpointkit import Storage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.late import LateLanding
from checkpointkit.conformance.styles import StorageWrapper
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from .conftest import Location


class DeletesAfterLateWrites(StorageWrapper):
    """Over :class:`LateLanding`: a delete first waits until every late write has landed.

    LangGraph's suite deletes checkpoints right after putting them and expects
    them gone. A put whose outcome was unknown may still land after such a
    delete and bring the checkpoint back: the storage model allows it (S3 and
    Azure say how long it can take), and no saver can prevent it. Here a delete
    comes after the writes before it have landed, as a delete issued later
    than ``max_delay`` would; every other late landing stays.
    """

    def __init__(self, inner: LateLanding) -> None:
        super().__init__(inner)
        self.late = inner
        self.__dict__["capabilities"] = inner.capabilities

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        await self.late.settle()
        return await super().delete(key, if_match=if_match)


def _open(location: Location) -> Storage:
    storage = location.open()
    return DeletesAfterLateWrites(storage) if isinstance(storage, LateLanding) else storage


async def test_langgraph_conformance_is_full_on_every_backend(location: Location) -> None:
    made: list[Location] = []

    @checkpointer_test(name=f"CheckpointkitSaver[{location.backend}]")
    async def saver() -> AsyncIterator[CheckpointkitSaver]:
        # A fresh saver, on a fresh prefix, for each capability suite.
        made.append(location)
        async with CheckpointkitSaver(_open(location), prefix=f"suite{len(made)}") as s:
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

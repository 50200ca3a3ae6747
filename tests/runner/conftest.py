"""Fixtures for the runner's lifecycle tests: every test runs over each save style,
on the memory, file and SQLite adapters, and over memory with writes whose
outcome is unknown (late landings, late replies), inside the hygiene checker (G5)."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.late import LateLanding, LateReply
from checkpointkit.conformance.styles import STYLES
from checkpointkit.storage import Storage

HAVE_FILE = importlib.util.find_spec("checkpointkit.adapters.file") is not None

BACKENDS = [
    "memory-inline",
    "memory-task-spawning",
    "memory-gather",
    pytest.param("file-inline", marks=pytest.mark.skipif(not HAVE_FILE, reason="no file adapter")),
    "sqlite-inline",
    "late-inline",
    "latereply-inline",
]


def _seed(tmp_path: Path) -> int:
    """A seed per test, stable across runs (from the test's own directory name)."""
    return sum(tmp_path.name.encode())


def _make(kind: str, tmp_path: Path) -> Storage:
    backend, _, style = kind.partition("-")
    inner: Storage
    if backend == "file":
        from checkpointkit.adapters.file import FileStorage

        inner = FileStorage(tmp_path / "store")
    elif backend == "sqlite":
        from checkpointkit.adapters.sqlite import SQLiteStorage

        inner = SQLiteStorage(tmp_path / "store.db")
    elif backend == "late":  # cancelled and timed-out writes land up to 50 ms later
        inner = LateLanding(MemoryStorage(), seed=_seed(tmp_path), max_delay=0.05)
    elif backend == "latereply":  # writes land at once, replies come up to 20 ms late
        inner = LateReply(MemoryStorage(), seed=_seed(tmp_path), max_delay=0.02)
    else:
        inner = MemoryStorage()
    return STYLES[style](inner)


@pytest.fixture(params=BACKENDS)
def make_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
    """A factory of the test's base storage (one dataset per test)."""
    made: list[Storage] = []
    kind: str = request.param

    def factory() -> Storage:
        if not made:
            made.append(_make(kind, tmp_path))
        return made[0]

    return factory


@pytest.fixture
async def storage(make_storage: Callable[[], Storage]) -> AsyncIterator[Storage]:
    s = make_storage()
    yield s
    await s.aclose()


@pytest.fixture(autouse=True)
async def _hygiene() -> AsyncIterator[None]:
    """G5 around every runner test: no never-awaited coroutine, no pending task, ..."""
    async with hygiene():
        yield

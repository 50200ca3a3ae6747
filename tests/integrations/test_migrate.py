"""Migration from LangGraph's savers and agent-framework's storages: real sources, real resumes."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage, InMemoryCheckpointStorage
from checkpointkit import PutMode, Storage, open_storage
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.cli import invoke
from checkpointkit.conformance.styles import StorageWrapper
from checkpointkit.integrations.agent_framework import CheckpointkitCheckpointStorage
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from checkpointkit.migrate import MigrationReport, migrate_agent_framework, migrate_langgraph
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from .test_agent_framework import CALLS, pipeline
from .test_langgraph_saver import build_graph

pytestmark = pytest.mark.filterwarnings(
    "ignore::agent_framework._feature_stage.ExperimentalWarning"
)

TARGETS = ["file", "sqlite", "memory"]


class Target:
    """Where a migration writes: a file directory or one shared memory storage."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.url = {
            "file": (tmp_path / "target").as_uri(),
            "sqlite": f"sqlite:///{tmp_path / 'target.db'}",  # sqlite:////absolute/path.db
            "memory": "memory://",
        }[kind]
        self.memory = MemoryStorage() if kind == "memory" else None

    def open(self) -> Storage:
        if self.memory is not None:
            return self.memory  # the same data each time; closed at the end of the test
        return open_storage(self.url)


@pytest.fixture(params=TARGETS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    t = Target(str(request.param), tmp_path)
    yield t
    if t.memory is not None:
        await t.memory.aclose()


@asynccontextmanager
async def saver_on(target: Target) -> AsyncIterator[CheckpointkitSaver]:
    storage = target.open()
    async with CheckpointkitSaver(storage) as saver:
        yield saver
    if target.memory is None:
        await storage.aclose()


# -- LangGraph ------------------------------------------------------------------------------
@contextmanager
def sqlite_source(tmp_path: Path) -> Iterator[tuple[BaseCheckpointSaver[Any], Path]]:
    db = tmp_path / "graphs.db"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        yield saver, db


@contextmanager
def memory_source(tmp_path: Path) -> Iterator[tuple[BaseCheckpointSaver[Any], Path]]:
    yield InMemorySaver(), tmp_path / "unused.db"


SOURCES: dict[str, Callable[[Path], Any]] = {"sqlite": sqlite_source, "memory": memory_source}


def run_graphs(saver: BaseCheckpointSaver[Any]) -> tuple[str, str]:
    """One thread paused at review (interrupt pending), one run to the end."""
    calls: list[str] = []
    graph = build_graph(calls).compile(checkpointer=saver)
    paused, done = f"paused-{uuid.uuid4().hex[:6]}", f"done-{uuid.uuid4().hex[:6]}"
    graph.invoke({"topic": "tides", "log": []}, {"configurable": {"thread_id": paused}})
    graph.invoke({"topic": "moons", "log": []}, {"configurable": {"thread_id": done}})
    graph.invoke(Command(resume="no"), {"configurable": {"thread_id": done}})
    return paused, done


def comparable(tup: CheckpointTuple | None) -> dict[str, Any]:
    assert tup is not None
    return {
        "config": tup.config["configurable"],
        "parent": tup.parent_config["configurable"] if tup.parent_config else None,
        "checkpoint": tup.checkpoint,
        "metadata": tup.metadata,
        "writes": sorted(tup.pending_writes or (), key=repr),
    }


async def assert_same_as_source(
    source: BaseCheckpointSaver[Any], saver: CheckpointkitSaver, threads: tuple[str, ...]
) -> None:
    for thread in threads:
        config: Any = {"configurable": {"thread_id": thread}}
        expected = [comparable(t) for t in source.list(config)]
        got = [comparable(t) async for t in saver.alist(config)]
        assert [g["config"]["checkpoint_id"] for g in got] == [
            e["config"]["checkpoint_id"] for e in expected
        ]
        assert got == expected
        assert comparable(await saver.aget_tuple(config)) == comparable(source.get_tuple(config))


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_langgraph_checkpoints_are_copied_exactly_and_the_graph_resumes(
    kind: str, target: Target, tmp_path: Path
) -> None:
    with SOURCES[kind](tmp_path) as (source, _):
        paused, done = run_graphs(source)
        async with saver_on(target) as saver:
            report = await migrate_langgraph(source, saver)
            assert report.copied == report.checkpoints > 8 and report.skipped == 0
            assert report.writes > 0  # the parallel branches' and the interrupt's writes
            await assert_same_as_source(source, saver, (paused, done))
            # Resuming the paused thread from the migrated store continues at review.
            calls: list[str] = []
            graph = build_graph(calls).compile(checkpointer=saver)
            config: Any = {"configurable": {"thread_id": paused}}
            final = await graph.ainvoke(Command(resume="yes"), config)
    assert calls == ["review", "publish"]
    assert final["verdict"] == "yes" and final["log"][0] == "draft:tides"
    assert final["log"][-2:] == ["review:yes", "published"]


async def test_langgraph_migration_run_again_copies_nothing_and_changes_nothing(
    target: Target, tmp_path: Path
) -> None:
    with sqlite_source(tmp_path) as (source, _):
        threads = run_graphs(source)
        async with saver_on(target) as saver:
            first = await migrate_langgraph(source, saver)
            again = await migrate_langgraph(source, saver)
            await assert_same_as_source(source, saver, threads)
    assert again.copied == 0 and again.skipped == first.copied == first.checkpoints


class Interrupted(Exception):
    pass


async def test_an_interrupted_langgraph_migration_leaves_no_hole_and_resumes(
    target: Target, tmp_path: Path
) -> None:
    def stop_after_three(report: MigrationReport) -> None:
        if report.copied == 3:
            raise Interrupted

    with sqlite_source(tmp_path) as (source, _):
        threads = run_graphs(source)
        async with saver_on(target) as saver:
            with pytest.raises(Interrupted):
                await migrate_langgraph(source, saver, progress=stop_after_three)
            # Oldest first: what was copied is a history without holes (every parent is there).
            copied = [t async for t in saver.alist(None)]
            assert len(copied) == 3
            ids = {t.config["configurable"]["checkpoint_id"] for t in copied}
            assert all(
                t.parent_config is None or t.parent_config["configurable"]["checkpoint_id"] in ids
                for t in copied
            )
            rest = await migrate_langgraph(source, saver)
            await assert_same_as_source(source, saver, threads)
    assert rest.skipped == 3 and rest.copied == rest.checkpoints - 3


class FailingWrites(StorageWrapper):
    """Memory whose second write of pending writes fails once (a crash mid-checkpoint)."""

    capabilities = MemoryStorage.capabilities

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.writes_seen = 0
        self.failed = False

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        if "/w/" in key and not self.failed:
            self.writes_seen += 1
            if self.writes_seen == 2:
                self.failed = True
                raise Interrupted(key)
        return await self.inner.put(key, data, mode=mode)


async def test_a_checkpoint_whose_writes_failed_is_copied_again_with_them(tmp_path: Path) -> None:
    with sqlite_source(tmp_path) as (source, _):
        threads = run_graphs(source)
        async with MemoryStorage() as memory:
            failing = FailingWrites(memory)
            async with CheckpointkitSaver(failing) as saver:
                with pytest.raises(Interrupted):
                    await migrate_langgraph(source, saver)
                assert failing.failed
                rest = await migrate_langgraph(source, saver)
                await assert_same_as_source(source, saver, threads)
    assert rest.copied > 0 and rest.skipped > 0


async def test_a_dry_run_counts_and_writes_nothing(tmp_path: Path) -> None:
    with sqlite_source(tmp_path) as (source, _):
        run_graphs(source)
        async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
            report = await migrate_langgraph(source, saver, dry_run=True)
            assert [k async for k in storage.list("")] == []
    assert report.dry_run and report.copied == report.checkpoints > 0 and report.groups == 2


@pytest.mark.parametrize("scheme", ["file", "sqlite"])
def test_cli_migrates_a_sqlite_database_with_progress_and_a_json_summary(
    scheme: str, tmp_path: Path
) -> None:
    with sqlite_source(tmp_path) as (source, db):
        threads = run_graphs(source)
        target = tmp_path / "cli-target"
        url = target.as_uri() if scheme == "file" else f"sqlite:///{target}.db"
        out, err = io.StringIO(), io.StringIO()
        code = invoke(
            ["migrate", "langgraph-sqlite", str(db), "--to", url, "--json"], stdout=out, stderr=err
        )
        assert code == 0, err.getvalue()
        summary = json.loads(out.getvalue())
        assert summary["source"] == "langgraph" and summary["groups"] == 2
        assert summary["copied"] == summary["checkpoints"] > 0 and summary["skipped"] == 0
        assert (
            err.getvalue()
            .splitlines()[-1]
            .startswith(f"migrate: {summary['checkpoints']}/{summary['checkpoints']} checkpoint(s)")
        )
        out2 = io.StringIO()
        assert (
            invoke(
                ["migrate", "langgraph-sqlite", str(db), "--to", url],
                stdout=out2,
                stderr=io.StringIO(),
            )
            == 0
        )
        assert f"copied 0, skipped {summary['checkpoints']}" in out2.getvalue()

        async def check() -> None:
            async with CheckpointkitSaver.from_url(url) as saver:
                await assert_same_as_source(source, saver, threads)

        asyncio.run(check())


def test_cli_refuses_a_missing_source_with_a_usage_error(tmp_path: Path) -> None:
    err = io.StringIO()
    missing = str(tmp_path / "nope.db")
    code = invoke(
        ["migrate", "langgraph-sqlite", missing, "--to", "memory://"],
        stdout=io.StringIO(),
        stderr=err,
    )
    assert (
        code == 2 and "no SqliteSaver database at" in err.getvalue() and missing in err.getvalue()
    )
    assert not Path(missing).exists()  # never created
    err = io.StringIO()
    code = invoke(
        ["migrate", "agent-framework-file", missing, "--to", "memory://"],
        stdout=io.StringIO(),
        stderr=err,
    )
    assert code == 2 and "no FileCheckpointStorage directory" in err.getvalue()


def test_the_sqlite_database_is_left_unchanged(tmp_path: Path) -> None:
    with sqlite_source(tmp_path) as (source, db):
        run_graphs(source)
    before = db.read_bytes()
    assert (
        invoke(
            ["migrate", "langgraph-sqlite", str(db), "--to", "memory://"],
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
        == 0
    )
    assert db.read_bytes() == before
    with sqlite3.connect(db) as conn:  # still a valid database
        assert conn.execute("select count(*) from checkpoints").fetchone()[0] > 0


# -- agent-framework ------------------------------------------------------------------------
async def run_pipeline(source: Any) -> None:
    CALLS.clear()
    first = await pipeline.build().run(21, checkpoint_storage=source)
    assert [e.request_id for e in first.get_request_info_events()] == ["approve"]
    assert CALLS == ["fetch", "enrich"]


async def assert_same_workflows(source: Any, storage: CheckpointkitCheckpointStorage) -> None:
    expected = sorted(
        await source.list_checkpoints(workflow_name="pipeline"),
        key=lambda c: (c.timestamp, c.checkpoint_id),
    )
    got = await storage.list_checkpoints(workflow_name="pipeline")
    assert [c.checkpoint_id for c in got] == [c.checkpoint_id for c in expected]
    assert [af_fields(c) for c in got] == [af_fields(c) for c in expected]
    latest = await storage.get_latest(workflow_name="pipeline")
    assert af_fields(latest) == af_fields(await source.get_latest(workflow_name="pipeline"))


def af_fields(checkpoint: Any) -> dict[str, Any]:
    """Every field of a WorkflowCheckpoint; its events (equal by identity only) by content."""
    assert checkpoint is not None
    fields = {f: getattr(checkpoint, f) for f in checkpoint.__dataclass_fields__}
    fields["pending_request_info_events"] = {
        k: (e.type, e.request_id, e.data) for k, e in checkpoint.pending_request_info_events.items()
    }
    return fields


async def resume_pipeline(storage: CheckpointkitCheckpointStorage) -> None:
    CALLS.clear()
    latest = await storage.get_latest(workflow_name="pipeline")
    assert latest is not None
    resumed = await pipeline.build().run(
        checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage, responses={"approve": True}
    )
    assert resumed.get_outputs() == ["42:('a', 'b'):True"]
    assert CALLS == ["finish"]  # completed steps were not run again


@asynccontextmanager
async def af_storage_on(target: Target) -> AsyncIterator[CheckpointkitCheckpointStorage]:
    storage = target.open()
    async with CheckpointkitCheckpointStorage(storage) as af:
        yield af
    if target.memory is None:
        await storage.aclose()


async def test_agent_framework_file_storage_is_copied_exactly_and_the_workflow_resumes(
    target: Target, tmp_path: Path
) -> None:
    source = FileCheckpointStorage(str(tmp_path / "af"))
    await run_pipeline(source)
    async with af_storage_on(target) as storage:
        report = await migrate_agent_framework(source, storage)
        assert report.groups == 1 and report.copied == report.checkpoints >= 3
        await assert_same_workflows(source, storage)
        again = await migrate_agent_framework(source, storage)
        assert again.copied == 0 and again.skipped == report.checkpoints
        await assert_same_workflows(source, storage)
        await resume_pipeline(storage)


async def test_an_interrupted_agent_framework_migration_leaves_no_hole_and_resumes(
    target: Target,
) -> None:
    def stop_after_two(report: MigrationReport) -> None:
        if report.copied == 2:
            raise Interrupted

    source = InMemoryCheckpointStorage()
    await run_pipeline(source)
    async with af_storage_on(target) as storage:
        with pytest.raises(Interrupted):
            await migrate_agent_framework(source, storage, progress=stop_after_two)
        copied = await storage.list_checkpoints(workflow_name="pipeline")
        assert len(copied) == 2
        ids = {c.checkpoint_id for c in copied}
        assert all(c.previous_checkpoint_id in (None, *ids) for c in copied)  # no hole
        rest = await migrate_agent_framework(source, storage)
        assert rest.skipped == 2 and rest.copied == rest.checkpoints - 2
        await assert_same_workflows(source, storage)
        await resume_pipeline(storage)


async def test_a_source_that_cannot_list_its_workflows_needs_their_names() -> None:
    class Opaque:
        async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
            return []

    async with MemoryStorage() as memory, CheckpointkitCheckpointStorage(memory) as storage:
        with pytest.raises(ValueError, match="pass workflow_names"):
            await migrate_agent_framework(Opaque(), storage)
        report = await migrate_agent_framework(Opaque(), storage, workflow_names=["x"])
    assert report.groups == 1 and report.checkpoints == 0


@pytest.mark.parametrize("scheme", ["file", "sqlite"])
def test_cli_migrates_an_agent_framework_directory(scheme: str, tmp_path: Path) -> None:

    source = FileCheckpointStorage(str(tmp_path / "af"))
    asyncio.run(run_pipeline(source))
    target = tmp_path / "cli-target"
    url = target.as_uri() if scheme == "file" else f"sqlite:///{target}.db"
    out, err = io.StringIO(), io.StringIO()
    code = invoke(
        ["migrate", "agent-framework-file", str(tmp_path / "af"), "--to", url, "--json"],
        stdout=out,
        stderr=err,
    )
    assert code == 0, err.getvalue()
    summary = json.loads(out.getvalue())
    assert (
        summary["source"] == "agent-framework" and summary["copied"] == summary["checkpoints"] >= 3
    )

    async def check() -> None:
        async with CheckpointkitCheckpointStorage.from_url(url) as storage:
            await assert_same_workflows(source, storage)
            await resume_pipeline(storage)

    asyncio.run(check())

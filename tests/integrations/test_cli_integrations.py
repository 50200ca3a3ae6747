"""The operator commands on the integrations' data (issue 21): ``runs``, ``ls``, ``show``,
``verify``, ``prune`` and ``rm`` on LangGraph threads and agent-framework workflows.

The data is made by the real libraries: a LangGraph graph run on LangGraph's own
``AsyncSqliteSaver``, moved with ``checkpointkit migrate langgraph-sqlite``
(the path of the issue's report), or run on `CheckpointkitSaver` directly; an
agent-framework workflow run on `CheckpointkitCheckpointStorage`. Every command
goes through `checkpointkit.cli.invoke`; every bad input must change nothing stored.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import operator
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import msgspec
import pytest
from checkpointkit import open_storage
from checkpointkit.cli import invoke
from checkpointkit.envelope import open_envelope, seal
from checkpointkit.integrations.agent_framework import CheckpointkitCheckpointStorage
from checkpointkit.integrations.langgraph import CODEC_LANGGRAPH_HEAD, CheckpointkitSaver
from checkpointkit.store import CheckpointStore
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from .test_agent_framework import CALLS, pipeline
from .test_langgraph_saver import BIG, build_graph
from .test_migrate import resume_pipeline

pytestmark = pytest.mark.filterwarnings(
    "ignore::agent_framework._feature_stage.ExperimentalWarning"
)


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)  # exactly one document on standard output


def cli(*args: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = invoke(list(args), stdin=io.StringIO(), stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


def one_line_error(result: Result, code: int, *needles: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def snapshot(url: str) -> dict[str, bytes]:
    """Every key of the store and its bytes."""

    async def read() -> dict[str, bytes]:
        async with open_storage(url) as storage:
            return {key: (await storage.get(key))[0] async for key in storage.list("")}

    return asyncio.run(read())


def flip_a_byte(url: str, key: str) -> None:
    async def flip() -> None:
        async with open_storage(url) as storage:
            data = bytearray((await storage.get(key))[0])
            data[-1] ^= 0x01
            await storage.put(key, bytes(data))

    asyncio.run(flip())


def delete(url: str, *keys: str) -> None:
    async def go() -> None:
        async with open_storage(url) as storage:
            for key in keys:
                assert await storage.delete(key)

    asyncio.run(go())


# -- LangGraph: the data of the report --------------------------------------------------
async def _run_graphs(db: Path) -> dict[str, list[Any]]:
    """A thread paused at review (interrupt pending) and one run to the end, on
    LangGraph's own AsyncSqliteSaver; returns each thread's checkpoint tuples, newest first."""
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = build_graph([]).compile(checkpointer=saver)
        await graph.ainvoke(
            {"topic": "tides", "log": []}, {"configurable": {"thread_id": "paused"}}
        )
        await graph.ainvoke({"topic": "moons", "log": []}, {"configurable": {"thread_id": "done"}})
        await graph.ainvoke(Command(resume="no"), {"configurable": {"thread_id": "done"}})
        return {
            thread: [t async for t in saver.alist({"configurable": {"thread_id": thread}})]
            for thread in ("paused", "done")
        }


@dataclass
class Migrated:
    url: str
    source: dict[str, list[Any]]


def _migrate(tmp_path: Path, url: str, *extra: str) -> dict[str, list[Any]]:
    db = tmp_path / "lg.db"
    source = asyncio.run(_run_graphs(db))
    done = cli("migrate", "langgraph-sqlite", str(db), "--to", url, *extra)
    assert done.exit_code == 0, done.stderr
    return source


@pytest.fixture(params=["sqlite", "file"])
def migrated(request: pytest.FixtureRequest, tmp_path: Path) -> Migrated:
    """LangGraph's SqliteSaver data migrated into a SQLite store (no heads: indexed listing)
    or a file store (heads kept)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'target.db'}"
    else:
        url = (tmp_path / "target").as_uri()
    return Migrated(url, _migrate(tmp_path, url))


def _ids(tuples: list[Any]) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in tuples]


def test_after_migrate_runs_lists_every_langgraph_thread_with_its_checkpoints(
    migrated: Migrated,
) -> None:
    doc = cli("runs", "-s", migrated.url, "--json").json()
    assert doc["runs"] == [] and "workflows" not in doc
    threads = {t["thread_id"]: t for t in doc["threads"]}
    assert list(threads) == ["done", "paused"]
    for thread, tuples in migrated.source.items():
        entry = threads[thread]
        assert entry["prefix"] == "langgraph" and entry["namespaces"] == [""]
        assert entry["checkpoints"] == len(tuples) and entry["checkpoint_id"] == _ids(tuples)[0]
        assert entry["step"] == tuples[0].metadata["step"]
        assert entry["created_at"] == tuples[0].checkpoint["ts"]
    text = cli("runs", "-s", migrated.url)
    assert text.exit_code == 0
    assert "LangGraph threads (prefix 'langgraph')" in text.stdout
    assert "no runs" not in text.stdout
    assert _ids(migrated.source["done"])[0] in text.stdout


def test_ls_lists_a_threads_checkpoints_newest_first_with_parents_and_writes(
    migrated: Migrated,
) -> None:
    source = migrated.source["done"]
    doc = cli("ls", "done", "-s", migrated.url, "--json").json()
    assert doc["kind"] == "thread" and doc["thread_id"] == "done"
    assert [c["checkpoint_id"] for c in doc["checkpoints"]] == _ids(source)
    for entry, tup in zip(doc["checkpoints"], source, strict=True):
        parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
        assert entry["parent_id"] == parent
        assert entry["step"] == tup.metadata["step"] and entry["source"] == tup.metadata["source"]
        assert (entry["write_records"] > 0) == bool(tup.pending_writes)
    limited = cli("ls", "done", "--limit", "2", "-s", migrated.url, "--json").json()
    assert [c["checkpoint_id"] for c in limited["checkpoints"]] == _ids(source)[:2]
    assert "checkpoints of LangGraph thread done" in cli("ls", "done", "-s", migrated.url).stdout


def test_show_gives_a_checkpoints_channels_and_pending_writes_decoded_without_running_code(
    migrated: Migrated,
) -> None:
    latest = migrated.source["paused"][0]
    doc = cli("show", "paused", "-s", migrated.url, "--json").json()
    assert doc["checkpoint_id"] == _ids(migrated.source["paused"])[0]
    assert doc["metadata"]["step"] == latest.metadata["step"]
    channels = {c["channel"]: c for c in doc["channels"]}
    assert channels["topic"]["value"] == "tides" and channels["topic"]["stored"] == "inline"
    assert channels["log"]["value"] == latest.checkpoint["channel_values"]["log"]
    big = channels["attachment"]
    assert big["stored"] == "apart" and big["bytes"] > len(BIG) and big["decoded"] is False
    assert big["version"] == latest.checkpoint["channel_versions"]["attachment"]
    (interrupt,) = doc["pending_writes"]
    assert interrupt["channel"] == "__interrupt__"
    assert interrupt["value"][0]["$type"] == "langgraph.types.Interrupt"  # data, not an object
    assert interrupt["value"][0]["$args"]["value"]["question"] == "publish?"
    older = _ids(migrated.source["done"])[2]
    assert cli("show", "done", older, "-s", migrated.url, "--json").json()["checkpoint_id"] == older
    text = cli("show", "paused", "-s", migrated.url)
    assert text.exit_code == 0
    assert "msgpack" in text.stdout and "not decoded" in text.stdout
    assert "__interrupt__" in text.stdout


def test_verify_checks_every_migrated_record_and_says_ok(migrated: Migrated) -> None:
    doc = cli("verify", migrated.url, "--json").json()
    assert doc["ok"] is True and doc["threads"] == 2 and doc["runs"] == 0
    assert doc["records"] == len(snapshot(migrated.url)) and doc["findings"] == []
    text = cli("verify", migrated.url)
    assert text.exit_code == 0
    assert text.stdout.startswith(f"ok: {doc['records']} record(s) of 0 run(s), 2 LangGraph")


def _checkpoint_key(url: str, thread: str, position: int) -> str:
    keys = sorted(k for k in snapshot(url) if k.startswith(f"langgraph/c/_{thread}/"))
    return keys[position]  # newest first


def test_verify_names_a_damaged_checkpoint_record_and_exits_1(migrated: Migrated) -> None:
    key = _checkpoint_key(migrated.url, "done", 1)
    flip_a_byte(migrated.url, key)
    result = cli("verify", migrated.url, "--json")
    assert result.exit_code == 1
    doc = result.json()
    assert doc["ok"] is False and doc["damaged"] == 1
    (finding,) = [f for f in doc["findings"] if f["severity"] == "damage"]
    assert finding["key"] == key and finding["kind"] == "corrupted"
    text = cli("verify", migrated.url)
    assert text.exit_code == 1 and text.stdout.startswith("DAMAGED") and key in text.stdout
    listed = cli("ls", "done", "-s", migrated.url, "--json")
    assert listed.exit_code == 1
    damaged_id = _ids(migrated.source["done"])[1]
    (bad,) = [c for c in listed.json()["checkpoints"] if "error" in c]
    assert bad["checkpoint_id"] == damaged_id
    one_line_error(cli("show", "done", damaged_id, "-s", migrated.url), 1, key)


def test_verify_reports_a_missing_channel_value_as_damage_of_the_checkpoints_needing_it(
    migrated: Migrated,
) -> None:
    (blob,) = [k for k in snapshot(migrated.url) if k.startswith("langgraph/b/_paused/")]
    delete(migrated.url, blob)
    result = cli("verify", migrated.url, "--json")
    assert result.exit_code == 1
    missing = [f for f in result.json()["findings"] if f["kind"] == "missing"]
    assert missing and all(f["severity"] == "damage" and blob in f["message"] for f in missing)
    assert all(f["key"].startswith("langgraph/c/_paused/") for f in missing)
    shown = cli("show", "paused", "-s", migrated.url, "--json").json()
    assert "not found" in {c["channel"]: c for c in shown["channels"]}["attachment"]["error"]


def test_verify_warns_of_writes_left_without_their_checkpoint_and_of_a_hole_but_passes(
    migrated: Migrated,
) -> None:
    source = migrated.source["done"]
    with_writes = next(
        i for i, t in enumerate(source) if t.pending_writes and 0 < i < len(source) - 1
    )
    delete(migrated.url, _checkpoint_key(migrated.url, "done", with_writes))
    result = cli("verify", migrated.url, "--json")
    assert result.exit_code == 0, result.stdout
    doc = result.json()
    assert doc["ok"] is True and doc["damaged"] == 0 and doc["warnings"] >= 2
    messages = [f["message"] for f in doc["findings"] if f["kind"] == "orphan"]
    gone = _ids(source)[with_writes]
    assert any("pending writes of checkpoint" in m and gone in m for m in messages)
    assert any("a hole in the history" in m and gone in m for m in messages)


def test_prune_keeps_the_newest_checkpoints_of_a_thread_and_the_graph_still_resumes(
    migrated: Migrated,
) -> None:
    before = snapshot(migrated.url)
    dry = cli("prune", "paused", "--keep", "1", "--dry-run", "-s", migrated.url, "--json")
    assert dry.exit_code == 0
    plan = dry.json()
    assert plan["kind"] == "thread" and plan["dry_run"] is True and plan["deleted"] == 0
    assert plan["checkpoints"] == _ids(migrated.source["paused"])[1:]
    assert snapshot(migrated.url) == before
    refused = cli("prune", "paused", "--keep", "1", "-s", migrated.url)
    one_line_error(refused, 2, "pass --yes")
    assert snapshot(migrated.url) == before
    done = cli("prune", "paused", "--keep", "1", "--yes", "-s", migrated.url, "--json").json()
    assert done["deleted"] == len(plan["keys"])
    after = snapshot(migrated.url)
    assert set(after) == set(before) - set(plan["keys"])
    assert not any(k.startswith("langgraph/b/") and k in plan["keys"] for k in before)  # still used
    listed = cli("ls", "paused", "-s", migrated.url, "--json").json()
    assert [c["checkpoint_id"] for c in listed["checkpoints"]] == _ids(migrated.source["paused"])[
        :1
    ]
    verified = cli("verify", migrated.url, "--json").json()
    assert verified["ok"] is True and verified["findings"] == []

    async def resume() -> dict[str, Any]:
        async with CheckpointkitSaver.from_url(migrated.url) as saver:
            graph = build_graph(calls := []).compile(checkpointer=saver)
            state = await graph.ainvoke(
                Command(resume="yes"), {"configurable": {"thread_id": "paused"}}
            )
            assert calls == ["review", "publish"]  # the pruned steps were not run again
            return state

    state = asyncio.run(resume())
    assert state["verdict"] == "yes" and state["attachment"] == BIG


def test_rm_deletes_one_thread_and_nothing_else(migrated: Migrated) -> None:
    before = snapshot(migrated.url)
    one_line_error(cli("rm", "done", "-s", migrated.url), 2, "pass --yes")
    assert snapshot(migrated.url) == before
    dry = cli("rm", "done", "--dry-run", "-s", migrated.url, "--json").json()
    assert dry["kind"] == "thread" and dry["deleted"] == 0
    assert set(dry["keys"]) == {k for k in before if k.split("/")[2] == "_done"}
    assert snapshot(migrated.url) == before
    done = cli("rm", "done", "--yes", "-s", migrated.url)
    assert done.exit_code == 0 and f"deleted LangGraph thread done ({len(dry['keys'])} keys)" in (
        done.stdout
    )
    assert snapshot(migrated.url) == {k: v for k, v in before.items() if k not in dry["keys"]}
    doc = cli("runs", "-s", migrated.url, "--json").json()
    assert [t["thread_id"] for t in doc["threads"]] == ["paused"]
    assert cli("verify", migrated.url).exit_code == 0


@pytest.mark.parametrize(
    ("args", "code", "needles"),
    [
        (["show", "done", "no-such-id"], 1, ["checkpoint 'no-such-id' of LangGraph thread 'done'"]),
        (["ls", "nope"], 1, ["run 'nope' not found, nor a LangGraph thread"]),
        (["ls", "done", "--kind", "workflow"], 1, ["agent-framework workflow 'done' not found"]),
        (["rm", "done", "--kind", "run", "--yes"], 1, ["run 'done' not found"]),
        (["prune", "done", "--older-than", "1d", "--yes"], 2, ["use --keep N"]),
        (["prune", "done", "--keep", "-1", "--yes"], 2, ["--keep", "greater than or equal to 0"]),
        (["ls", "done", "--kind", "graph"], 2, ["--kind", "invalid choice"]),
    ],
)
def test_a_bad_input_names_what_was_wrong_and_changes_nothing(
    tmp_path: Path, args: list[str], code: int, needles: list[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'target.db'}"
    _migrate(tmp_path, url)
    before = snapshot(url)
    one_line_error(cli(*args, "-s", url), code, *needles)
    assert snapshot(url) == before


def test_a_name_that_is_a_run_and_a_thread_needs_kind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'both.db'}"

    async def make() -> None:
        async with CheckpointkitSaver.from_url(url) as saver:
            graph = build_graph([]).compile(checkpointer=saver)
            await graph.ainvoke({"topic": "x", "log": []}, {"configurable": {"thread_id": "t1"}})
        async with open_storage(url) as storage:
            store = CheckpointStore(storage)
            await store.create_run("t1", None)
            await store.save_checkpoint("t1", status="completed", state={"n": 1})

    asyncio.run(make())
    one_line_error(
        cli("ls", "t1", "-s", url), 1, "checkpointkit run 't1'", "LangGraph thread 't1'", "--kind"
    )
    assert cli("ls", "t1", "--kind", "thread", "-s", url, "--json").json()["kind"] == "thread"
    assert cli("ls", "t1", "--kind", "run", "-s", url, "--json").json()["run_id"] == "t1"
    doc = cli("runs", "-s", url, "--json").json()
    assert [r["run_id"] for r in doc["runs"]] == ["t1"]
    assert [t["thread_id"] for t in doc["threads"]] == ["t1"]
    verified = cli("verify", url, "--json").json()
    assert verified["ok"] is True and verified["runs"] == 1 and verified["threads"] == 1


def test_a_savers_own_prefix_is_found_through_the_namespace(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'target.db'}"
    _migrate(tmp_path, url, "--prefix", "graphs")
    unseen = cli("verify", url)
    one_line_error(
        unseen, 1, "no checkpointkit runs, LangGraph threads or agent-framework", "'graphs'"
    )
    doc = cli("runs", "-s", url, "-n", "graphs", "--json").json()
    assert {t["prefix"] for t in doc["threads"]} == {"graphs"}
    assert cli("verify", url, "-n", "graphs").exit_code == 0
    assert cli("show", "paused", "-s", url, "-n", "graphs", "--json").json()["prefix"] == "graphs"


# -- agent-framework ------------------------------------------------------------------------------
async def _run_pipeline(url: str) -> list[str]:
    CALLS.clear()
    async with CheckpointkitCheckpointStorage.from_url(url) as storage:
        first = await pipeline.build().run(21, checkpoint_storage=storage)
        assert [e.request_id for e in first.get_request_info_events()] == ["approve"]
        return await storage.list_checkpoint_ids(workflow_name="pipeline")  # oldest first


@pytest.mark.parametrize("scheme", ["sqlite", "file"])
def test_agent_framework_workflows_are_listed_shown_verified_pruned_and_removed(
    scheme: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'af.db'}" if scheme == "sqlite" else (tmp_path / "af").as_uri()
    if scheme == "file":
        (tmp_path / "af").mkdir()
    ids = asyncio.run(_run_pipeline(url))
    assert len(ids) >= 3
    runs = cli("runs", "-s", url, "--json").json()
    assert "threads" not in runs
    (workflow,) = runs["workflows"]
    assert workflow["workflow"] == "pipeline" and workflow["checkpoints"] == len(ids)
    assert workflow["checkpoint_id"] == ids[-1] and workflow["prefix"] == "agent-framework"
    assert "agent-framework workflows (prefix 'agent-framework')" in cli("runs", "-s", url).stdout

    listed = cli("ls", "pipeline", "-s", url, "--json").json()
    assert [c["checkpoint_id"] for c in listed["checkpoints"]] == ids[::-1]
    assert listed["checkpoints"][0]["pending_requests"] == ["approve"]
    assert listed["checkpoints"][0]["previous_checkpoint_id"] == ids[-2]

    shown = cli("show", "pipeline", "-s", url, "--json").json()
    assert shown["checkpoint_id"] == ids[-1] and shown["state"]["_original_message"] == 21
    event = shown["pending_request_info_events"]["approve"]
    assert event["$pickled"].endswith(":WorkflowEvent") and event["bytes"] > 0  # not unpickled
    assert cli("show", "pipeline", ids[0], "-s", url, "--json").json()["checkpoint_id"] == ids[0]

    verified = cli("verify", url, "--json").json()
    assert verified["ok"] is True and verified["workflows"] == 1 and verified["findings"] == []
    assert verified["records"] == len(snapshot(url))

    before = snapshot(url)
    pruned = cli("prune", "pipeline", "--keep", "1", "--yes", "-s", url, "--json").json()
    assert pruned["kind"] == "workflow" and pruned["checkpoints"] == ids[-2::-1]
    assert set(snapshot(url)) == set(before) - set(pruned["keys"])
    assert cli("verify", url, "--json").json()["findings"] == []

    async def resume() -> None:
        async with CheckpointkitCheckpointStorage.from_url(url) as storage:
            assert await storage.list_checkpoint_ids(workflow_name="pipeline") == ids[-1:]
            await resume_pipeline(storage)  # the kept checkpoint resumes the workflow

    asyncio.run(resume())
    removed = cli("rm", "pipeline", "--yes", "-s", url, "--json").json()
    assert removed["deleted"] == len(removed["keys"]) > 0
    assert not [k for k in snapshot(url) if k.startswith("agent-framework/wf/")]


def test_verify_names_a_damaged_workflow_checkpoint_and_warns_of_a_stale_marker(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'af.db'}"
    ids = asyncio.run(_run_pipeline(url))
    keys = snapshot(url)
    damaged = f"agent-framework/cp/_{ids[-1]}"
    flip_a_byte(url, damaged)
    (lost,) = [k for k in keys if k == f"agent-framework/cp/_{ids[0]}"]
    delete(url, lost)
    result = cli("verify", url, "--json")
    assert result.exit_code == 1
    findings = {(f["key"], f["kind"], f["severity"]) for f in result.json()["findings"]}
    assert (damaged, "corrupted", "damage") in findings
    (marker,) = [k for k in keys if k.startswith("agent-framework/wf/") and k.endswith(ids[0])]
    assert (marker, "orphan", "warning") in findings
    listed = cli("ls", "pipeline", "-s", url, "--json")
    assert listed.exit_code == 1 and "error" in listed.json()["checkpoints"][0]


# -- namespaces, heads, encryption, a base install ----------------------------------------------
class Log(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _graph_with_a_subgraph() -> StateGraph[Log]:
    """An outer graph whose node is a subgraph that asks a human: checkpoints in two namespaces."""

    def first(state: Log) -> Log:
        return {"log": ["a"]}

    def ask(state: Log) -> Log:
        return {"log": [f"b:{interrupt('ok?')}"]}

    inner = StateGraph(Log)
    inner.add_node("first", first)
    inner.add_node("ask", ask)
    inner.add_edge(START, "first")
    inner.add_edge("first", "ask")
    inner.add_edge("ask", END)
    outer = StateGraph(Log)
    outer.add_node("child", inner.compile())
    outer.add_edge(START, "child")
    outer.add_edge("child", END)
    return outer


def test_prune_keeps_the_newest_checkpoints_of_each_namespace_of_a_thread(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()
    config: Any = {"configurable": {"thread_id": "nested"}}

    async def start() -> None:
        async with CheckpointkitSaver.from_url(url) as saver:
            await _graph_with_a_subgraph().compile(checkpointer=saver).ainvoke({"log": []}, config)

    asyncio.run(start())
    (thread,) = cli("runs", "-s", url, "--json").json()["threads"]
    assert len(thread["namespaces"]) == 2 and thread["namespaces"][0] == ""
    child = thread["namespaces"][1]
    assert child.startswith("child:")
    listed = cli("ls", "nested", "-s", url, "--json").json()["checkpoints"]
    per_ns = {ns: [c for c in listed if c["checkpoint_ns"] == ns] for ns in thread["namespaces"]}
    assert all(len(entries) >= 2 for entries in per_ns.values())

    pruned = cli("prune", "nested", "--keep", "1", "--yes", "-s", url, "--json").json()
    assert sorted(pruned["checkpoints"]) == sorted(
        c["checkpoint_id"] for entries in per_ns.values() for c in entries[1:]
    )
    left = cli("ls", "nested", "-s", url, "--json").json()["checkpoints"]
    assert sorted((c["checkpoint_ns"], c["checkpoint_id"]) for c in left) == sorted(
        (ns, entries[0]["checkpoint_id"]) for ns, entries in per_ns.items()
    )
    assert cli("verify", url, "--json").json()["findings"] == []

    async def resume() -> Log:
        async with CheckpointkitSaver.from_url(url) as saver:
            graph = _graph_with_a_subgraph().compile(checkpointer=saver)
            return await graph.ainvoke(Command(resume="yes"), config)  # type: ignore[return-value]

    assert asyncio.run(resume())["log"] == ["a", "b:yes"]


@pytest.mark.parametrize(("scheme", "severity"), [("file", "damage"), ("sqlite", "warning")])
def test_a_head_behind_the_newest_checkpoint_is_damage_where_readers_use_heads(
    scheme: str, severity: str, tmp_path: Path
) -> None:
    url = (tmp_path / "t").as_uri() if scheme == "file" else f"sqlite:///{tmp_path / 't.db'}"
    source = _migrate(tmp_path, url)
    older = _ids(source["done"])[2]
    key = "langgraph/h/_done/_"

    async def roll_back() -> None:
        async with open_storage(url) as storage:
            await storage.put(key, seal(older.encode(), codec_tag=CODEC_LANGGRAPH_HEAD, key=key))

    asyncio.run(roll_back())
    result = cli("verify", url, "--json")
    (finding,) = result.json()["findings"]
    assert finding["key"] == key and finding["kind"] == "head"
    assert finding["severity"] == severity and older in finding["message"]
    assert result.exit_code == (1 if severity == "damage" else 0)


def test_verify_reads_encrypted_langgraph_records_with_the_keys_file(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    from checkpointkit.crypto import Encryption

    key = bytes(range(32))
    url = f"sqlite:///{tmp_path / 'secret.db'}"

    async def run() -> None:
        async with CheckpointkitSaver.from_url(
            url, encryption=Encryption({"k1": key}, active="k1")
        ) as saver:
            graph = build_graph([]).compile(checkpointer=saver)
            await graph.ainvoke({"topic": "x", "log": []}, {"configurable": {"thread_id": "s"}})

    asyncio.run(run())
    blind = cli("verify", url, "--json")
    assert blind.exit_code == 1
    kinds = {f["kind"] for f in blind.json()["findings"]}
    assert kinds == {"undecryptable"}  # every record but the heads (kept in clear)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"active": "k1", "keys": {"k1": base64.b64encode(key).decode()}}))
    seen = cli("verify", url, "--keys", str(keys), "--json")
    assert seen.exit_code == 0 and seen.json()["findings"] == [] and seen.json()["threads"] == 1
    listed = cli("ls", "s", "-s", url, "--json")  # no keys here: listed, each with its error
    assert listed.exit_code == 1 and all("error" in c for c in listed.json()["checkpoints"])


BLOCKED = """
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("langgraph", "langchain_core", "agent_framework"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from checkpointkit.cli import main
main()
"""


@pytest.mark.parametrize(
    "command",
    [["runs"], ["ls", "done"], ["show", "paused"], ["verify"], ["prune", "done", "--keep", "1"]],
)
def test_the_commands_read_integration_data_without_langgraph_or_agent_framework(
    tmp_path: Path, command: list[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'target.db'}"
    _migrate(tmp_path, url)
    args = [*command, url] if command == ["verify"] else [*command, "-s", url]
    if command[0] == "prune":
        args += ["--dry-run"]
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "100"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc.get("threads") or doc.get("kind") == "thread", doc


def test_runs_marks_a_thread_whose_newest_checkpoint_is_damaged_and_exits_1(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'target.db'}"
    source = _migrate(tmp_path, url)
    flip_a_byte(url, _checkpoint_key(url, "paused", 0))
    result = cli("runs", "-s", url, "--json")
    assert result.exit_code == 1
    threads = {t["thread_id"]: t for t in result.json()["threads"]}
    assert "corrupted" in threads["paused"]["error"] and "error" not in threads["done"]
    assert threads["paused"]["checkpoint_id"] == _ids(source["paused"])[0]
    text = cli("runs", "-s", url)
    assert text.exit_code == 1 and "damaged, see below" in text.stdout
    assert "error: LangGraph thread paused is damaged: " in text.stderr


def test_verify_shows_progress_for_each_savers_and_storages_records(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'target.db'}"
    _migrate(tmp_path, url)
    asyncio.run(_run_pipeline(url))
    result = cli("verify", url)
    assert result.exit_code == 0
    lg, af = result.stderr.splitlines()  # off a terminal: one line per part, when it starts
    assert lg.startswith("verifying ") and lg.endswith(
        " records of LangGraph threads (prefix 'langgraph')"
    )
    assert af.endswith(" records of agent-framework workflows (prefix 'agent-framework')")
    counted = int(lg.split()[1]) + int(af.split()[1])
    assert result.stdout.startswith(
        f"ok: {counted} record(s) of 0 run(s), 2 LangGraph thread(s), 1"
    )


def test_after_migrate_agent_framework_file_runs_and_verify_see_the_workflow(
    tmp_path: Path,
) -> None:
    from agent_framework import FileCheckpointStorage

    from .test_migrate import run_pipeline

    source = FileCheckpointStorage(str(tmp_path / "af"))
    asyncio.run(run_pipeline(source))
    url = f"sqlite:///{tmp_path / 'target.db'}"
    moved = cli("migrate", "agent-framework-file", str(tmp_path / "af"), "--to", url, "--json")
    assert moved.exit_code == 0, moved.stderr
    copied = moved.json()["copied"]
    (workflow,) = cli("runs", "-s", url, "--json").json()["workflows"]
    assert workflow["workflow"] == "pipeline" and workflow["checkpoints"] == copied
    verified = cli("verify", url, "--json").json()
    assert verified["ok"] is True and verified["workflows"] == 1 and verified["findings"] == []


def test_verify_names_a_checkpoint_that_is_its_own_parent(tmp_path: Path) -> None:
    from checkpointkit.integrations._langgraph_layout import (
        CODEC_LANGGRAPH_RECORD,
        LangGraphLayout,
        decode_record,
        encode,
    )

    url = f"sqlite:///{tmp_path / 'target.db'}"
    source = _migrate(tmp_path, url)
    cid = _ids(source["done"])[1]
    key = LangGraphLayout.of("langgraph").checkpoint_key("done", "", cid)

    async def loop() -> None:  # a well-formed, correctly sealed record whose parent is itself
        async with open_storage(url) as storage:
            tag, payload = open_envelope((await storage.get(key))[0], key=key)
            record = msgspec.structs.replace(decode_record(payload, key), parent=cid)
            await storage.put(key, seal(encode(record), codec_tag=tag, key=key))
            assert tag == CODEC_LANGGRAPH_RECORD

    asyncio.run(loop())
    result = cli("verify", url, "--json")
    assert result.exit_code == 1
    damage = [f for f in result.json()["findings"] if f["severity"] == "damage"]
    assert [(f["key"], f["kind"]) for f in damage] == [(key, "mismatch")]
    assert "names itself as its parent" in damage[0]["message"]

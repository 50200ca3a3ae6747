"""The LangGraph saver with real graphs, and its promises on keys, costs and lifecycle."""

from __future__ import annotations

import asyncio
import operator
import os
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from checkpointkit import CheckpointCorrupted, DecryptionError, GetResult, PutMode
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.hygiene import hygiene
from checkpointkit.conformance.styles import StorageWrapper
from checkpointkit.crypto import Encryption
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import INTERRUPT
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from .conftest import Location

BIG = "x" * (200 * 1024)  # above the default inline limit: stored once per version


class State(TypedDict, total=False):
    topic: str
    attachment: str
    log: Annotated[list[str], operator.add]
    verdict: str


def build_graph(calls: list[str]) -> StateGraph[State]:
    """draft -> (spell, facts in parallel) -> review (asks a human) -> publish."""

    def draft(state: State) -> State:
        calls.append("draft")
        return {"attachment": BIG, "log": [f"draft:{state['topic']}"]}

    def spell(state: State) -> State:
        calls.append("spell")
        return {"log": ["spell"]}

    def facts(state: State) -> State:
        calls.append("facts")
        return {"log": ["facts"]}

    def review(state: State) -> State:
        calls.append("review")
        answer = interrupt({"question": "publish?", "log": state["log"]})
        return {"verdict": answer, "log": [f"review:{answer}"]}

    def publish(state: State) -> State:
        calls.append("publish")
        return {"log": ["published"]}

    builder = StateGraph(State)
    for name, fn in [
        ("draft", draft),
        ("spell", spell),
        ("facts", facts),
        ("review", review),
        ("publish", publish),
    ]:
        builder.add_node(name, fn)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "spell")
    builder.add_edge("draft", "facts")
    builder.add_edge(["spell", "facts"], "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder


async def test_graph_interrupted_for_input_resumes_in_a_new_saver(location: Location) -> None:
    calls: list[str] = []
    config: Any = {"configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:6]}"}}
    async with hygiene():
        async with CheckpointkitSaver(location.open()) as saver:
            graph = build_graph(calls).compile(checkpointer=saver)
            first = await graph.ainvoke({"topic": "tides", "log": []}, config)
            assert first["__interrupt__"][0].value["question"] == "publish?"
            state = await graph.aget_state(config)
            assert state.next == ("review",)
            await saver.storage.aclose()

        # A second process: a new storage object and saver on the same data.
        async with CheckpointkitSaver(location.open()) as saver:
            graph = build_graph(calls).compile(checkpointer=saver)
            final = await graph.ainvoke(Command(resume="yes"), config)
            history = [s async for s in graph.aget_state_history(config)]
            blobs = [k async for k in saver.storage.list("langgraph/b/")]
            await saver.storage.aclose()

    assert final["verdict"] == "yes"
    assert final["attachment"] == BIG
    assert final["log"][0] == "draft:tides"
    assert sorted(final["log"][1:3]) == ["facts", "spell"]
    assert final["log"][3:] == ["review:yes", "published"]
    # Completed nodes never ran again; the interrupted node re-ran from its start.
    assert sorted(calls) == sorted(["draft", "spell", "facts", "review", "review", "publish"])
    assert len(history) >= 5
    assert history[0].next == ()
    # The 200 KiB attachment was written once, though every later checkpoint has it.
    assert len(blobs) == 1


async def test_subgraph_interrupt_resumes_through_its_own_namespace(
    local_location: Location,
) -> None:
    class Inner(TypedDict, total=False):
        verdict: str

    def ask(state: Inner) -> Inner:
        return {"verdict": interrupt("inner question")}

    inner = StateGraph(Inner)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)
    outer = StateGraph(State)
    outer.add_node("prepare", lambda s: {"log": ["prepared"]})
    outer.add_node("inner", inner.compile())
    outer.add_edge(START, "prepare")
    outer.add_edge("prepare", "inner")
    outer.add_edge("inner", END)
    config: Any = {"configurable": {"thread_id": "sub"}}
    async with hygiene():
        async with CheckpointkitSaver(local_location.open()) as saver:
            graph = outer.compile(checkpointer=saver)
            first = await graph.ainvoke({"log": []}, config)
            namespaces = {
                t.config["configurable"]["checkpoint_ns"]
                async for t in saver.alist({"configurable": {"thread_id": "sub"}})
            }
            await saver.storage.aclose()
        async with CheckpointkitSaver(local_location.open()) as saver:
            graph = outer.compile(checkpointer=saver)
            final = await graph.ainvoke(Command(resume="from below"), config)
            await saver.storage.aclose()
    assert first["__interrupt__"][0].value == "inner question"
    assert "" in namespaces and any(ns.startswith("inner:") for ns in namespaces)
    assert final["verdict"] == "from below" and final["log"] == ["prepared"]


async def test_saver_from_url_closes_the_storage_it_opened(local_location: Location) -> None:
    async with CheckpointkitSaver.from_url(
        local_location.url, storage_options=local_location.options
    ) as saver:
        storage = saver.storage
        await saver.aput(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {},
            {},
        )
    with pytest.raises(Exception, match="closed"):
        await storage.get("anything")


async def test_saver_leaves_a_storage_passed_in_open() -> None:
    async with MemoryStorage() as storage:
        async with CheckpointkitSaver(storage) as saver:
            await saver.aput(
                {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                empty_checkpoint(),
                {},
                {},
            )
        assert [k async for k in storage.list("langgraph/c/")]


def test_sync_graph_runs_on_the_savers_private_loop(tmp_path: Any) -> None:
    calls: list[str] = []
    config: Any = {"configurable": {"thread_id": "sync"}}
    # LangGraph may use a copy of the saver (with_allowlist, for a serializer with
    # an allow-list); the copy shares the saver's loop, which the original closes.
    serde = JsonPlusSerializer(allowed_msgpack_modules=[("collections", "OrderedDict")])
    with CheckpointkitSaver.from_url(f"file://{tmp_path}/store", serde=serde) as saver:
        copy = saver.with_allowlist([("decimal", "Decimal")])
        assert copy is not saver
        graph = build_graph(calls).compile(checkpointer=copy)
        graph.invoke({"topic": "sync", "log": []}, config)
        final = graph.invoke(Command(resume="ok"), config)
        assert graph.get_state(config).values["verdict"] == "ok"
        assert len(list(saver.list(config))) >= 5
    assert final["log"][-1] == "published"
    assert saver._rt.private is not None and saver._rt.private.loop.is_closed()


async def test_sync_call_on_the_event_loop_thread_raises_instead_of_deadlocking() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
        with pytest.raises(asyncio.InvalidStateError, match="aget_tuple"):
            saver.get_tuple({"configurable": {"thread_id": "t"}})


async def test_sync_calls_from_another_thread_run_on_the_savers_loop() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stored = await asyncio.to_thread(saver.put, config, empty_checkpoint(), {}, {})
        found = await asyncio.to_thread(saver.get_tuple, stored)
        assert found is not None
        assert found.config == stored
        assert saver._rt.private is None  # no second loop was needed


# -- keys and costs ------------------------------------------------------------------------


class Counting(StorageWrapper):
    """Counts the requests made through it.

    Its capabilities are the protocol's defaults, without ``indexed_list``, so
    an integration on it keeps heads; with ``mirror=True`` they are the inner
    storage's (no heads on SQLite or memory).
    """

    def __init__(self, inner: Any, *, mirror: bool = False) -> None:
        super().__init__(inner)
        if mirror:
            self.__dict__["capabilities"] = inner.capabilities
        self.counts: dict[str, int] = {"put": 0, "get": 0, "delete": 0, "list": 0}
        self.put_bytes = 0

    def reset(self) -> None:
        self.counts = dict.fromkeys(self.counts, 0)
        self.put_bytes = 0

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        self.counts["put"] += 1
        self.put_bytes += len(data)
        return await super().put(key, data, mode=mode)

    async def get(self, key: str) -> GetResult:
        self.counts["get"] += 1
        return await super().get(key)

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        self.counts["delete"] += 1
        return await super().delete(key, if_match=if_match)

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        self.counts["list"] += 1
        return super().list(prefix, start_after=start_after, limit=limit)


def _checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


async def _put_chain(saver: CheckpointkitSaver, thread: str, n: int) -> list[Any]:
    configs: list[Any] = []
    parent: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for i in range(n):
        version = saver.get_next_version(None if i == 0 else str(i), None)
        parent = await saver.aput(
            parent, _checkpoint({"n": i}, {"n": version}), {"step": i}, {"n": version}
        )
        configs.append(parent)
    return configs


async def test_latest_costs_the_same_requests_however_many_checkpoints() -> None:
    storage = Counting(MemoryStorage())
    async with CheckpointkitSaver(storage) as saver:
        costs = []
        for n in (3, 300):
            thread = f"t{n}"
            configs = await _put_chain(saver, thread, n)
            storage.reset()
            tup = await saver.aget_tuple({"configurable": {"thread_id": thread}})
            assert tup is not None and tup.config == configs[-1]
            assert tup.checkpoint["channel_values"] == {"n": n - 1}
            costs.append(dict(storage.counts))
    # 1 get of the head, then 1 get of the record and 1 listing of its writes.
    assert costs[0] == costs[1] == {"put": 0, "get": 2, "delete": 0, "list": 1}


async def test_put_is_two_requests_when_values_are_small() -> None:
    storage = Counting(MemoryStorage())
    async with CheckpointkitSaver(storage) as saver:
        await _put_chain(saver, "t", 1)
        # The first put of a thread reads the head and lists the thread once.
        assert storage.counts == {"put": 2, "get": 1, "delete": 0, "list": 1}
        storage.reset()
        await _put_chain(saver, "t", 5)
    # Then the head's compare-and-swap (its version is remembered) and the record.
    assert storage.counts == {"put": 10, "get": 0, "delete": 0, "list": 0}


async def test_large_unchanged_value_is_written_once_and_referenced() -> None:
    storage = Counting(MemoryStorage())
    async with CheckpointkitSaver(storage, inline_limit=1024) as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        big = os.urandom(64 * 1024)
        config = await saver.aput(
            config, _checkpoint({"big": big, "n": 0}, {"big": 1, "n": 1}), {}, {"big": 1, "n": 1}
        )
        first = storage.put_bytes
        for i in range(2, 12):
            config = await saver.aput(
                config, _checkpoint({"big": big, "n": i}, {"big": 1, "n": i}), {}, {"n": i}
            )
        later = (storage.put_bytes - first) / 10
        tup = await saver.aget_tuple({"configurable": {"thread_id": "t"}})
    assert first > 64 * 1024
    assert later < 1024, "an unchanged large value must not be written again"
    assert tup is not None and tup.checkpoint["channel_values"] == {"big": big, "n": 11}
    assert storage.counts["put"] == 23  # one blob, one record and one head per checkpoint


async def test_checkpoint_keys_list_newest_first() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage, prefix="p") as saver:
        configs = await _put_chain(saver, "t", 20)
        listed = [
            tup.config["configurable"]["checkpoint_id"]
            async for tup in saver.alist({"configurable": {"thread_id": "t"}})
        ]
        keys = [k async for k in storage.list("p/c/")]
    ids = [c["configurable"]["checkpoint_id"] for c in configs]
    assert listed == ids[::-1]
    assert keys == sorted(keys) and len(keys) == 20
    assert [saver._parse_checkpoint_key(k)[2] for k in keys] == ids[::-1]


async def test_concurrent_put_writes_never_lose_a_write(local_location: Location) -> None:
    async with CheckpointkitSaver(local_location.open()) as saver:
        config = (await _put_chain(saver, "t", 1))[0]
        tasks = [f"task-{i}" for i in range(24)]
        # Every task writes twice at once (a retry racing the original).
        await asyncio.gather(
            *(
                saver.aput_writes(config, [("a", f"{t}-a"), ("b", f"{t}-b")], t)
                for t in tasks
                for _ in range(2)
            )
        )
        tup = await saver.aget_tuple(config)
        await saver.storage.aclose()
    assert tup is not None and tup.pending_writes is not None
    assert sorted(tup.pending_writes) == sorted(
        [(t, ch, f"{t}-{ch}") for t in tasks for ch in ("a", "b")]
    )


async def test_regular_writes_are_write_once_and_special_writes_replace() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
        config = (await _put_chain(saver, "t", 1))[0]
        await saver.aput_writes(config, [("ch", "first")], "task")
        await saver.aput_writes(config, [("ch", "second")], "task")
        await saver.aput_writes(config, [(INTERRUPT, "old")], "task")
        await saver.aput_writes(config, [(INTERRUPT, "new")], "task")
        tup = await saver.aget_tuple(config)
    assert tup is not None
    assert sorted(tup.pending_writes or []) == [("task", INTERRUPT, "new"), ("task", "ch", "first")]


async def test_a_call_that_repeats_writes_with_more_appended_keeps_all_once() -> None:
    # LangGraph saves its null task's writes again, with the new ones appended.
    storage = Counting(MemoryStorage())
    async with CheckpointkitSaver(storage) as saver:
        config = (await _put_chain(saver, "t", 1))[0]
        storage.reset()
        await saver.aput_writes(config, [("a", "first"), ("b", 1)], "task")
        assert storage.counts["put"] == 1  # one record per call
        await saver.aput_writes(config, [("a", "changed"), ("b", 1), ("c", 2)], "task")
        tup = await saver.aget_tuple(config)
    assert tup is not None
    assert tup.pending_writes == [("task", "a", "first"), ("task", "b", 1), ("task", "c", 2)]


async def test_pending_writes_come_back_in_task_path_order() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
        config = (await _put_chain(saver, "t", 1))[0]
        await saver.aput_writes(config, [("ch", 1), ("ch", 2)], "zz", task_path="~a")
        await saver.aput_writes(config, [("ch", 3)], "aa", task_path="~b")
        tup = await saver.aget_tuple(config)
    assert tup is not None
    assert [w[2] for w in tup.pending_writes or []] == [1, 2, 3]


async def test_prefixes_keep_savers_apart() -> None:
    async with (
        MemoryStorage() as storage,
        CheckpointkitSaver(storage, prefix="a") as a,
        CheckpointkitSaver(storage, prefix="b") as b,
    ):
        await _put_chain(a, "t", 2)
        assert await b.aget_tuple({"configurable": {"thread_id": "t"}}) is None
        assert await a.aget_tuple({"configurable": {"thread_id": "t"}}) is not None


async def test_odd_thread_ids_and_namespaces_round_trip() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
        for thread, ns in [("..", ""), ("a/b", "x|y:z"), ("ünï cødé", "."), ("%2F", "a//b")]:
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            stored = await saver.aput(config, empty_checkpoint(), {"k": thread}, {})
            tup = await saver.aget_tuple(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            )
            assert tup is not None and tup.config == stored
            assert tup.metadata["k"] == thread
        all_threads = {t.config["configurable"]["thread_id"] async for t in saver.alist(None)}
    assert all_threads == {"..", "a/b", "ünï cødé", "%2F"}


async def test_encrypted_records_are_opaque_and_need_the_key() -> None:
    encryption = Encryption({"k1": os.urandom(32)}, active="k1")
    secret = "the launch codes"
    async with MemoryStorage() as storage:
        async with CheckpointkitSaver(storage, encryption=encryption) as saver:
            config = await saver.aput(
                {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                _checkpoint({"s": secret}, {"s": 1}),
                {},
                {"s": 1},
            )
            tup = await saver.aget_tuple(config)
            assert tup is not None and tup.checkpoint["channel_values"] == {"s": secret}
        for key in [k async for k in storage.list("")]:
            assert secret.encode() not in (await storage.get(key)).data
        async with CheckpointkitSaver(storage) as no_key:
            with pytest.raises(DecryptionError):
                await no_key.aget_tuple(config)


async def test_a_corrupted_record_raises_checkpoint_corrupted_naming_its_key() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
        config = (await _put_chain(saver, "t", 1))[0]
        [key] = [k async for k in storage.list("langgraph/c/")]
        data = bytearray((await storage.get(key)).data)
        data[-1] ^= 0x01
        await storage.put(key, bytes(data))
        with pytest.raises(CheckpointCorrupted, match="langgraph/c/"):
            await saver.aget_tuple(config)


def test_bad_options_are_named() -> None:
    storage = MemoryStorage()
    with pytest.raises(ValueError, match="inline_limit"):
        CheckpointkitSaver(storage, inline_limit=-1)
    with pytest.raises(ValueError, match="prefix"):
        CheckpointkitSaver(storage, prefix="a/../b")
    with pytest.raises(TypeError, match="from_url"):
        CheckpointkitSaver("memory://")  # type: ignore[arg-type]


async def test_prune_keep_latest_keeps_the_values_the_latest_checkpoint_needs() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage, inline_limit=16) as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        big_a, big_b = "a" * 100, "b" * 100
        config = await saver.aput(config, _checkpoint({"x": big_a}, {"x": 1}), {}, {"x": 1})
        config = await saver.aput(
            config, _checkpoint({"x": big_a, "y": big_b}, {"x": 1, "y": 1}), {}, {"y": 1}
        )
        config = await saver.aput(
            config, _checkpoint({"x": "small", "y": big_b}, {"x": 2, "y": 1}), {}, {"x": 2}
        )
        await saver.aprune(["t"])
        tup = await saver.aget_tuple({"configurable": {"thread_id": "t"}})
        blobs = [k async for k in storage.list("langgraph/b/")]
        checkpoints = [k async for k in storage.list("langgraph/c/")]
    assert tup is not None and tup.checkpoint["channel_values"] == {"x": "small", "y": big_b}
    assert len(checkpoints) == 1
    assert len(blobs) == 1  # x@1 went with the pruned checkpoints; y@1 is still used
    with pytest.raises(ValueError, match="strategy"):
        await CheckpointkitSaver(MemoryStorage()).aprune(["t"], strategy="shred")


class _GatedGets(StorageWrapper):
    """A storage whose gets wait for ``gate`` once it is cleared; ``waiting`` counts them."""

    def __init__(self, inner: MemoryStorage) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0
        self.sixteen = asyncio.Event()

    async def get(self, key: str) -> GetResult:
        if not self.gate.is_set():
            self.waiting += 1
            if self.waiting == 16:
                self.sixteen.set()
            await self.gate.wait()
        return await super().get(key)


async def test_a_copy_cancelled_while_its_reads_wait_leaves_no_coroutine_never_awaited() -> None:
    # acopy_thread copies 16 records at a time: cancelled while the first 16 reads wait,
    # the copies that never got their turn must be closed, not left never awaited
    storage = _GatedGets(MemoryStorage())
    saver = CheckpointkitSaver(storage)
    config: Any = {"configurable": {"thread_id": "source", "checkpoint_ns": ""}}
    for step in range(40):
        checkpoint = empty_checkpoint()
        config = await saver.aput(config, checkpoint, {"step": step}, {})
    async with hygiene():
        storage.gate.clear()
        copying = asyncio.ensure_future(saver.acopy_thread("source", "target"))
        await storage.sixteen.wait()
        copying.cancel()
        with pytest.raises(asyncio.CancelledError):
            await copying
    storage.gate.set()
    await saver.aclose()


class _Items(TypedDict):
    items: Annotated[list[str], operator.add]


class _SlowPuts(MemoryStorage):
    """A memory storage whose puts take a few event-loop turns, as any storage with I/O does:
    LangGraph's background saves then run while its next steps go on."""

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        for _ in range(20):
            await asyncio.sleep(0)
        return await super().put(key, data, mode=mode)


async def test_a_join_never_looks_ready_before_the_nodes_it_waits_for_ran() -> None:
    """A graph ``first -> p1..p5 -> last`` run twice on one thread (``durability="async"``,
    saves slower than steps): no checkpoint's ``next`` holds ``last`` beside another node.
    LangGraph hands ``aput`` its live channel objects and changes the join's set of finished
    nodes in place before a delayed save runs; the saver stores a channel that kept its
    version with the value it stored for that version, not with the live set (which it
    did: the second run's checkpoints then showed ``last`` ready before ``p1..p5`` ran, as
    ``AsyncSqliteSaver``'s do, ``scripts/repro/langgraph_sqlite_join_stored_before_it_ran.py``)."""
    parallel = [f"p{i}" for i in range(1, 6)]

    def node(name: str) -> Any:
        async def run(state: _Items) -> dict[str, list[str]]:
            return {"items": [name]}

        return run

    builder = StateGraph(_Items)
    builder.add_node("first", node("first"))
    builder.add_node("last", node("last"))
    builder.add_edge(START, "first")
    for name in parallel:
        builder.add_node(name, node(name))
        builder.add_edge("first", name)
    builder.add_edge(parallel, "last")
    builder.add_edge("last", END)
    async with CheckpointkitSaver(_SlowPuts()) as saver:
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "joined"}}
        for run in ("run 1", "run 2"):
            await graph.ainvoke({"items": [run]}, config)
        early = [
            (s.metadata or {}).get("step")
            async for s in graph.aget_state_history(config)
            if "last" in s.next and len(s.next) > 1
        ]
    assert early == [], f"checkpoints of steps {early} schedule 'last' before p1..p5 ran"

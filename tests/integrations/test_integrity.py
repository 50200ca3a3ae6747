"""The integrations keep issue 13's promises: records bound to their key, and corruption
raised as ``CheckpointCorrupted`` (never wrapped in an ``ExceptionGroup``)."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from checkpointkit import CheckpointCorrupted
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance.styles import Inline
from checkpointkit.crypto import Encryption
from checkpointkit.envelope import read_header
from checkpointkit.integrations.agent_framework import (
    CheckpointkitCheckpointStorage,
    WorkflowCheckpointCorrupted,
)
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from langgraph.checkpoint.base import empty_checkpoint

BIG = "x" * (200 * 1024)  # stored as a separate value record


def _lg_checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


async def _put(saver: CheckpointkitSaver, thread: str, value: Any) -> Any:
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    version = saver.get_next_version(None, None)
    stored = await saver.aput(
        config, _lg_checkpoint({"v": value}, {"v": version}), {}, {"v": version}
    )
    await saver.aput_writes(stored, [("v", value)], task_id="task-1")
    return stored


async def test_langgraph_records_are_bound_to_their_key() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
        await _put(saver, "t", "small")
        for key in [k async for k in storage.list("langgraph/")]:
            assert read_header((await storage.get(key)).data).bound, key


async def test_langgraph_checkpoint_copied_between_threads_is_corrupted() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
        a = await _put(saver, "a", "value of a")
        b = await _put(saver, "b", "value of b")
        [a_key] = [k async for k in storage.list("langgraph/c/_a/")]
        [b_key] = [k async for k in storage.list("langgraph/c/_b/")]
        await storage.put(b_key, (await storage.get(a_key)).data)
        assert a["configurable"]["checkpoint_id"] != b["configurable"]["checkpoint_id"]
        with pytest.raises(CheckpointCorrupted, match="does not belong"):
            await saver.aget_tuple(b)


async def test_langgraph_corrupted_writes_raise_checkpoint_corrupted_not_a_group() -> None:
    async with MemoryStorage() as storage, CheckpointkitSaver(storage) as saver:
        config = await _put(saver, "t", BIG)  # the record, its writes and a value at once
        [key] = [k async for k in storage.list("langgraph/w/")]
        data = bytearray((await storage.get(key)).data)
        data[-1] ^= 0x01
        await storage.put(key, bytes(data))
        for read in (
            saver.aget_tuple(config),
            saver.aget_tuple({"configurable": {"thread_id": "t"}}),
        ):
            with pytest.raises(CheckpointCorrupted) as info:
                await read
            assert key in str(info.value)


async def test_langgraph_copy_thread_reseals_records_for_their_new_keys() -> None:
    encryption = Encryption({"k1": os.urandom(32)}, active="k1")
    async with (
        MemoryStorage() as storage,
        CheckpointkitSaver(storage, encryption=encryption) as saver,
    ):
        await _put(saver, "src", BIG)
        await saver.acopy_thread("src", "dst")
        tup = await saver.aget_tuple({"configurable": {"thread_id": "dst"}})
        assert tup is not None and tup.checkpoint["channel_values"] == {"v": BIG}
        assert tup.pending_writes == [("task-1", "v", BIG)]


async def test_langgraph_heads_stay_readable_when_encryption_refuses_plaintext(
    caplog: pytest.LogCaptureFixture,
) -> None:
    encryption = Encryption({"k1": os.urandom(32)}, active="k1")
    async with MemoryStorage() as storage:
        keeps_heads = Inline(storage)  # hides indexed_list: memory alone keeps no heads
        async with CheckpointkitSaver(keeps_heads, encryption=encryption) as saver:
            await _put(saver, "t", "v")
        assert [k async for k in storage.list("langgraph/h/")]  # heads are written in clear
        with caplog.at_level(logging.WARNING, logger="checkpointkit"):
            async with CheckpointkitSaver(keeps_heads, encryption=encryption) as reader:
                tup = await reader.aget_tuple({"configurable": {"thread_id": "t"}})
    assert tup is not None and tup.checkpoint["channel_values"] == {"v": "v"}
    assert "unreadable head" not in caplog.text


async def test_agent_framework_corruption_is_both_exception_types() -> None:
    async with MemoryStorage() as storage, CheckpointkitCheckpointStorage(storage) as ours:
        cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state={"x": 1})
        other = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state={"x": 2})
        await ours.save(cp)
        await ours.save(other)
        key = f"agent-framework/cp/_{cp.checkpoint_id}"
        other_key = f"agent-framework/cp/_{other.checkpoint_id}"
        await storage.put(key, (await storage.get(other_key)).data)
        with pytest.raises(WorkflowCheckpointCorrupted) as info:
            await ours.load(cp.checkpoint_id)
        assert isinstance(info.value, CheckpointCorrupted)
        assert isinstance(info.value, WorkflowCheckpointException)
        assert key in str(info.value) and "does not belong" in str(info.value)

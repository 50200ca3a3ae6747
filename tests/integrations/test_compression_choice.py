"""Issue 22: the integrations choose compression by storage, and read records written either way.

On a local storage (memory, file, SQLite) records are stored uncompressed by default; on any
other they are compressed above 16 KiB, as every record was before. A record written the old
way (compressed) must still be read by a saver that no longer compresses, and the other way
round. agent-framework's checkpoints without a pickled value skip its decoding walk, which must
give the same checkpoint as the walk.
"""

from __future__ import annotations

import enum
import sys
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from agent_framework import WorkflowCheckpoint
from agent_framework._workflows._checkpoint_encoding import (
    decode_checkpoint_value,
    encode_checkpoint_value,
)
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.envelope import COMPRESSION_NONE, COMPRESSION_ZSTD, read_header
from checkpointkit.integrations import NETWORK_COMPRESS_THRESHOLD, compress_threshold_for
from checkpointkit.integrations.agent_framework import CheckpointkitCheckpointStorage, _json_native
from checkpointkit.integrations.langgraph import CheckpointkitSaver
from checkpointkit.storage import Capabilities
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint

LARGE = {"messages": [{"role": "user", "content": "word " * 40} for _ in range(2000)]}
"""About 400 KB of compressible text: a separate value record in LangGraph."""


class RemoteLike(MemoryStorage):
    """A memory storage that says it is not local (as S3, Azure, Redis, PostgreSQL)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=False, settles_cancelled_writes=True, indexed_list=True
    )


def test_compress_threshold_for_chooses_by_storage_unless_given() -> None:
    assert compress_threshold_for(MemoryStorage(), None) == sys.maxsize
    assert compress_threshold_for(RemoteLike(), None) == NETWORK_COMPRESS_THRESHOLD
    assert compress_threshold_for(MemoryStorage(), 1024) == 1024
    assert compress_threshold_for(RemoteLike(), 0) == 0


async def _compressions(storage: MemoryStorage, prefix: str) -> set[int]:
    found = [(await storage.get(key)).data async for key in storage.list(prefix)]
    return {read_header(data).compression for data in found if data}  # markers are empty


async def _lg_put(saver: CheckpointkitSaver, thread: str, value: Any, n: int) -> Any:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    version = str(n)
    checkpoint["channel_values"] = {"state": value}
    checkpoint["channel_versions"] = {"state": version}
    return await saver.aput(config, checkpoint, {"step": n}, {"state": version})


@pytest.mark.parametrize(
    ("storage_class", "compressed"), [(MemoryStorage, False), (RemoteLike, True)]
)
async def test_langgraph_compresses_large_values_only_off_a_local_storage(
    storage_class: type[MemoryStorage], compressed: bool
) -> None:
    async with storage_class() as storage, CheckpointkitSaver(storage) as saver:
        await _lg_put(saver, "t", LARGE, 1)
        got = await _compressions(storage, "langgraph/b/")
        assert got == ({COMPRESSION_ZSTD} if compressed else {COMPRESSION_NONE})


async def test_langgraph_reads_records_written_compressed_before_issue_22() -> None:
    """A thread written with the old default (16 KiB) reads with the new one, and grows."""
    async with MemoryStorage() as storage:
        async with CheckpointkitSaver(storage, compress_threshold=16 * 1024) as old:
            await _lg_put(old, "t", LARGE, 1)
        assert await _compressions(storage, "langgraph/b/") == {COMPRESSION_ZSTD}
        async with CheckpointkitSaver(storage) as new:
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            found = await new.aget_tuple(config)
            assert found is not None
            assert found.checkpoint["channel_values"]["state"] == LARGE
            await _lg_put(new, "t", {"messages": LARGE["messages"][:-1]}, 2)
            assert await _compressions(storage, "langgraph/b/") == {
                COMPRESSION_ZSTD,
                COMPRESSION_NONE,
            }
            latest = await new.aget_tuple(config)
            assert latest is not None
            assert (
                latest.checkpoint["channel_values"]["state"]["messages"] == LARGE["messages"][:-1]
            )


_OPAQUE = f"{__name__}:_Opaque"


class _Key(str):
    """A str subclass: agent-framework stringifies it as a key."""


class _Level(enum.IntEnum):
    HIGH = 2


class _Opaque:
    """Not JSON-native: agent-framework pickles it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Opaque) and other.n == self.n

    def __hash__(self) -> int:
        return self.n


def _af(state: dict[str, Any], n: int) -> WorkflowCheckpoint:
    cp = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", state=state)
    cp.timestamp = datetime(2025, 1, 1, 0, 0, n, tzinfo=UTC).isoformat()
    return cp


async def test_agent_framework_reads_checkpoints_written_compressed_before_issue_22() -> None:
    async with MemoryStorage() as storage:
        old = CheckpointkitCheckpointStorage(storage, compress_threshold=16 * 1024)
        saved = await old.save(_af(LARGE, 1))
        assert await _compressions(storage, "agent-framework/") >= {COMPRESSION_ZSTD}
        new = CheckpointkitCheckpointStorage(storage)
        loaded = await new.load(saved)
        assert loaded.state == LARGE
        again = await new.save(_af({"n": 2, **LARGE}, 2))
        assert (await new.load(again)).state == {"n": 2, **LARGE}
        latest = await new.get_latest(workflow_name="w")
        assert latest is not None and latest.checkpoint_id == again


@pytest.mark.parametrize(
    "state",
    [
        {"plain": [1, 2.5, "three", None, True, {"nested": ["a"]}]},
        {"text that names the marker": "__pickled__ and __type__", "n": 1},
        {"opaque": _Opaque(7), "list": [_Opaque(8), {"deep": _Opaque(9)}], "plain": "x"},
        {"tuple": (1, 2), "set": {3}, "int keys": {1: "a"}},
        {"__pickled__": "a user key that is the marker", "__type__": "x"},
        {"deep": {"__type__": "only the type key"}, "ok": [1]},
        {"big int": 2**70, "list": [1, 2]},
        {"str subclass key": {_Key("k"): 1}, "int subclass": _Level.HIGH},
        {"nested": [[[[{"a": [1.5, None, True]}]]]], "empty": {}, "none": []},
    ],
)
@pytest.mark.parametrize("storage_class", [MemoryStorage, RemoteLike])
async def test_agent_framework_load_gives_what_its_own_decoding_gives(
    state: dict[str, Any], storage_class: type[MemoryStorage]
) -> None:
    async with storage_class() as storage:
        ours = CheckpointkitCheckpointStorage(
            storage, allowed_checkpoint_types=[_OPAQUE, f"{__name__}:_Level"]
        )
        cp = _af(state, 1)
        loaded = await ours.load(await ours.save(cp))
        # What agent-framework's own encoding and decoding give (int keys become str).
        theirs = decode_checkpoint_value(
            encode_checkpoint_value(cp.to_dict()),
            allowed_types=frozenset([_OPAQUE, f"{__name__}:_Level"]),
        )
        assert loaded.to_dict() == WorkflowCheckpoint.from_dict(theirs).to_dict()
        assert type(loaded.state) is dict


JSON_LIKE = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=8),
        st.binary(max_size=4),
        st.tuples(st.integers()),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=4),
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=8), JSON_LIKE, max_size=4))
def test_json_native_means_agent_frameworks_encoding_changes_nothing(root: dict[str, Any]) -> None:
    if _json_native(root):
        assert encode_checkpoint_value(root) == root


def test_json_native_tells_plain_structures_from_the_rest() -> None:
    assert _json_native({"a": [1, 2.5, "x", None, True, {"b": []}], "c": {}})
    assert not _json_native({"a": {1: "int key"}})
    assert not _json_native({"a": [(1, 2)]})
    assert not _json_native({"a": b"bytes"})
    assert not _json_native({"a": _Level.HIGH})
    cycle: list[Any] = []
    cycle.append(cycle)
    assert not _json_native({"a": cycle})


class FailsFirstValue(MemoryStorage):
    """Fails the first put of a large value (a ``/b/`` key), as a network error would."""

    failed = False

    async def _put(self, key: str, data: bytes, mode: Any) -> str:
        if "/b/" in key and not self.failed:
            self.failed = True
            raise OSError("the first value's upload fails")
        return await super()._put(key, data, mode)


async def test_langgraph_a_failed_value_upload_is_not_referenced_unwritten_later() -> None:
    """A put whose large value failed to upload raises; the next put that keeps that value
    (not a new version) writes it, so its record never names a missing value."""
    async with FailsFirstValue() as storage, CheckpointkitSaver(storage) as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        first = empty_checkpoint()
        first["channel_values"] = {"state": LARGE}
        first["channel_versions"] = {"state": "1"}
        with pytest.raises(OSError, match="upload fails"):
            await saver.aput(config, first, {"step": 1}, {"state": "1"})
        second = empty_checkpoint()
        second["channel_values"] = {"state": LARGE, "n": 2}
        second["channel_versions"] = {"state": "1", "n": "2"}
        await saver.aput(config, second, {"step": 2}, {"n": "2"})
        found = await saver.aget_tuple(config)
        assert found is not None
        assert found.checkpoint["channel_values"]["state"] == LARGE

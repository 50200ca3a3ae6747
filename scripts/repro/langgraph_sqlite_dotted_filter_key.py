"""AsyncSqliteSaver.alist(filter=...) on a metadata key holding a dot finds nothing.

Standalone reproduction (langgraph-checkpoint-sqlite; no checkpointkit needed):

    pip install langgraph-checkpoint-sqlite
    python langgraph_sqlite_dotted_filter_key.py

A checkpoint is put with the metadata key ``user.id`` (a flat key, as OpenTelemetry
names attributes), and ``alist`` is asked for ``filter={"user.id": "u-1"}``.
LangGraph's ``InMemorySaver`` gives the checkpoint. ``AsyncSqliteSaver`` accepts
the key (its filter-key check allows letters, digits, ``_``, ``.`` and ``-``) and
reads it as the JSON path ``$.user.id``: the field ``id`` of an object ``user``,
which the metadata does not have. It answers nothing, and raises nothing. A key
with a hyphen (``user-id``) is found. Exit status 1 when the dotted key finds
nothing.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver


async def found(saver: Any, key: str) -> int:
    """Put one checkpoint whose metadata holds ``key``, and count what the filter finds."""
    thread = {"configurable": {"thread_id": f"thread-{key}", "checkpoint_ns": ""}}
    metadata = {"source": "loop", "step": 1, key: "u-1"}
    await saver.aput(thread, empty_checkpoint(), metadata, {})
    return len([t async for t in saver.alist(None, filter={key: "u-1"})])


async def main() -> int:
    memory = {key: await found(InMemorySaver(), key) for key in ("user-id", "user.id")}
    print(
        f"InMemorySaver: filter on 'user-id' finds {memory['user-id']}, "
        f"on 'user.id' finds {memory['user.id']}"
    )
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "graph.sqlite")
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            sqlite = {key: await found(saver, key) for key in ("user-id", "user.id")}
    print(
        f"AsyncSqliteSaver: filter on 'user-id' finds {sqlite['user-id']}, "
        f"on 'user.id' finds {sqlite['user.id']}"
    )
    if sqlite["user.id"] != memory["user.id"]:
        print(
            "BUG: AsyncSqliteSaver's filter on the metadata key 'user.id' finds nothing "
            "(read as the nested path $.user.id), with no error"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""AsyncPostgresSaver gives a channel value of -0.0 back as 0.0, without an error.

Standalone reproduction (langgraph-checkpoint-postgres and a PostgreSQL server you can
reach; no checkpointkit needed):

    pip install langgraph-checkpoint-postgres "psycopg[binary]"
    python langgraph_postgres_negative_zero.py postgresql://user:pw@127.0.0.1:5432/db

(or set ``DATABASE_URL`` instead of giving the URL). The script creates LangGraph's
tables in that database if they are not there (``setup()``), and writes one checkpoint
on a thread named ``repro-...``.

``AsyncPostgresSaver`` keeps a checkpoint's primitive channel values (strings, numbers,
booleans, None) inside its ``checkpoint`` column, of type ``jsonb``, and the rest as
the serializer's bytes in ``checkpoint_blobs``. ``jsonb`` stores a number as a
``numeric``, which has no negative zero: a float channel holding -0.0 (a sign that
``math.copysign`` and ``1 / x`` read) comes back 0.0. The same value as a pending write
(kept as the serializer's bytes) comes back -0.0, and so does the channel value from
LangGraph's own ``InMemorySaver``. Exit status 1 when the channel value comes back
without its sign.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import uuid

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver


async def main(url: str) -> int:
    async with AsyncPostgresSaver.from_conn_string(url) as saver:
        await saver.setup()
        thread = f"repro-{uuid.uuid4().hex[:8]}"
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        version = saver.get_next_version(None, None)
        checkpoint["channel_values"] = {"x": -0.0}
        checkpoint["channel_versions"] = {"x": version}
        stored = await saver.aput(config, checkpoint, {}, {"x": version})
        await saver.aput_writes(stored, [("x", -0.0)], task_id="task")
        got = await saver.aget_tuple(stored)
        assert got is not None
        value = got.checkpoint["channel_values"]["x"]
        write = got.pending_writes[0][2]
        print(f"channel value: put -0.0, read back {value!r}")
        print(f"pending write: put -0.0, read back {write!r}")
    if math.copysign(1.0, value) > 0:
        print("BUG: the channel value -0.0 came back as 0.0 (jsonb has no negative zero)")
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "url",
        nargs="?",
        default=os.environ.get("DATABASE_URL"),
        help="the server's postgresql:// URL (default: $DATABASE_URL)",
    )
    args = parser.parse_args()
    if not args.url:
        parser.error("give a postgresql:// URL or set DATABASE_URL")
    sys.exit(asyncio.run(main(args.url)))

"""A cancelled AsyncPostgresSaver call is still running while the server does not answer.

Standalone reproduction (langgraph-checkpoint-postgres and a PostgreSQL server
you can reach over TCP; no checkpointkit needed):

    pip install langgraph-checkpoint-postgres "psycopg[binary]"
    python langgraph_postgres_cancelled_call_hangs.py postgresql://user:pw@127.0.0.1:5432/db

(or set ``DATABASE_URL`` instead of giving the URL). The script creates
LangGraph's tables in that database if they are not there (``setup()``), and
writes a few checkpoints on threads named ``repro-...``.

Each saver talks to the server through a small TCP proxy in this script, which
listens on 127.0.0.1 and forwards to the server. After a checkpoint has been put
through it, the proxy stops forwarding (bytes are read and held, never
delivered: a server, or a network, that stopped answering). Then each of
``aput``, ``aput_writes``, ``adelete_thread`` and ``aprune`` (when the saver
has it), and the reads ``aget_tuple`` and ``alist``, is started on its own
saver and proxy, and cancelled as soon as the proxy holds its request (an
event, so no guessed sleep). Each is still running
2 s after ``task.cancel()``: psycopg answers the cancel by sending the server a
cancel request and then waiting for the query to end (up to 5 s each), both
through the same unanswering path, before it lets ``CancelledError`` through.
The proxy then drops the connections, and the calls end. ``--hold SECONDS``
keeps the server unanswering that long after the cancel instead of 2 s, to see
when a call ends on its own (about 10 s). Exit status 1 when a cancelled call is
still running 2 s after its cancel (0 when not, 2 when no TCP URL is given).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.conninfo import conninfo_to_dict, make_conninfo

BOUND = 2.0
"""Seconds after ``task.cancel()`` past which a call counts as not ending promptly."""


class StallingProxy:
    """Forwards TCP connections from 127.0.0.1 to ``upstream`` until `stall`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.forwarding = True
        self.stalled = asyncio.Event()  # set once bytes are held
        self.writers: list[asyncio.StreamWriter] = []
        self.handlers: set[asyncio.Task[Any]] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def stall(self) -> None:
        """From now on, read and hold every byte in both directions."""
        self.forwarding = False

    async def close(self) -> None:
        """Stop listening, drop every connection (with a reset) and wait for their handlers."""
        if self.server is not None:
            self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.writers.append(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self.writers.append(up_writer)
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            w.transport.abort()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while chunk := await src.read(65536):
                if self.forwarding:
                    dst.write(chunk)
                    await dst.drain()
                else:
                    self.stalled.set()  # held forever: never delivered
        finally:
            dst.transport.abort()  # one side closed: the connection is over


def config(thread: str, checkpoint_id: str | None = None) -> dict:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def call(saver: AsyncPostgresSaver, method: str, thread: str, checkpoint_id: str) -> Any:
    if method == "aput":
        return saver.aput(config(thread), empty_checkpoint(), {}, {})
    if method == "aput_writes":
        return saver.aput_writes(config(thread, checkpoint_id), [("ch", "v")], task_id="task")
    if method == "adelete_thread":
        return saver.adelete_thread(thread)
    if method == "aget_tuple":
        return saver.aget_tuple(config(thread))
    if method == "alist":
        return _listed(saver, thread)
    return saver.aprune([thread])


async def _listed(saver: AsyncPostgresSaver, thread: str) -> list[Any]:
    return [t async for t in saver.alist(config(thread))]


async def cancel_while_stalled(
    url: str, upstream: tuple[str, int], method: str, hold: float
) -> tuple[str, bool]:
    """Cancel ``method`` while the proxy holds its request; (report, late)."""
    loop = asyncio.get_running_loop()
    proxy = StallingProxy(upstream)
    port = await proxy.start()
    proxied = make_conninfo(url, host="127.0.0.1", hostaddr="127.0.0.1", port=str(port))
    thread = f"repro-{method}-{uuid.uuid4().hex[:8]}"
    report, late = f"{method}: ", False
    try:
        async with AsyncPostgresSaver.from_conn_string(proxied) as saver:
            first = await saver.aput(config(thread), empty_checkpoint(), {}, {})
            await saver.aput(config(thread), empty_checkpoint(), {}, {})
            proxy.stall()
            task = asyncio.ensure_future(
                call(saver, method, thread, first["configurable"]["checkpoint_id"])
            )
            await asyncio.wait_for(proxy.stalled.wait(), 30)  # its request is held
            cancelled_at = loop.time()
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=BOUND)
            late = not done
            if not done and hold > BOUND:
                report += f"still running {BOUND:g} s after cancel; "
                done, _ = await asyncio.wait({task}, timeout=hold - BOUND)
            if not done:
                report += (
                    f"still running {loop.time() - cancelled_at:.2f} s after cancel, when the "
                    "proxy dropped the connections; then it "
                )
                await proxy.close()  # the path "answers" with a reset: let the call end
                await asyncio.wait({task}, timeout=30)
            report += f"{outcome(task)} {loop.time() - cancelled_at:.2f} s after cancel"
            if not task.done():
                task.cancel()
    except Exception as exc:  # closing a saver whose connection was dropped may raise
        report += f" (closing the saver then raised {type(exc).__name__})"
    finally:
        await proxy.close()
    return report, late


def outcome(task: asyncio.Future[Any]) -> str:
    if not task.done():
        return "was still running"
    if task.cancelled():
        return "raised CancelledError"
    if task.exception() is not None:
        return f"raised {type(task.exception()).__name__}"
    return "returned"


async def main(url: str, hold: float) -> int:
    params = conninfo_to_dict(url)
    host = str(params.get("hostaddr") or params.get("host") or "")
    if not host or host.startswith("/"):
        print("give a TCP URL (postgresql://user:pw@HOST:PORT/db): the proxy forwards TCP")
        return 2
    upstream = (host.split(",")[0], int(str(params.get("port") or 5432).split(",")[0]))
    async with AsyncPostgresSaver.from_conn_string(url) as saver:
        await saver.setup()  # LangGraph's tables, once, without the proxy
        methods = [
            m
            for m in ("aput", "aput_writes", "adelete_thread", "aprune", "aget_tuple", "alist")
            if hasattr(saver, m)
        ]
    results = await asyncio.gather(*(cancel_while_stalled(url, upstream, m, hold) for m in methods))
    for line, _ in results:
        print(line)
    late = [m for m, (_, is_late) in zip(methods, results, strict=True) if is_late]
    if late:
        print(f"BUG: cancelled {', '.join(late)} did not end within {BOUND:g} s of the cancel")
        return 1
    print(f"ok: every cancelled call ended within {BOUND:g} s")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "url", nargs="?", default=os.environ.get("DATABASE_URL"), help="default: $DATABASE_URL"
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=BOUND,
        metavar="SECONDS",
        help=f"keep the server unanswering this long after the cancel (default {BOUND:g})",
    )
    args = parser.parse_args()
    if not args.url:
        parser.error("give the server's URL, or set DATABASE_URL")
    sys.exit(asyncio.run(main(args.url, args.hold)))

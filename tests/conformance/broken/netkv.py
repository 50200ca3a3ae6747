"""A tiny key-value server over TCP and two adapters for it: one correct, one broken.

The server runs in a thread of its own with its own event loop, like a
separate server process, on 127.0.0.1 and a free port. Frames are a 4-byte
big-endian length and a msgpack map; a request is applied only once its whole
frame has arrived, so a cut-off request never happens (as on a real server).

:class:`NetKVStorage` keeps one connection and, when a call is cancelled in
the middle of its exchange, drops that connection (its reply, if any, will
never be read). :class:`NetKVStaleReply` keeps the connection instead: the
next call reads the reply meant for the cancelled one. The suite must catch
that through the stall proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar

import msgspec
from checkpointkit.conformance import Target, new_location
from checkpointkit.errors import (
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageClosed,
    StorageError,
    StorageUnavailable,
)
from checkpointkit.storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


async def _read_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    body: dict[str, Any] = _decode(await reader.readexactly(size))
    return body


def _frame(body: dict[str, Any]) -> bytes:
    data = _encode(body)
    return struct.pack(">I", len(data)) + data


_WRITES = frozenset({"put", "delete", "delete_many"})


def _late(request: dict[str, Any]) -> dict[str, Any] | None:
    """The server's answer to a request that arrived past its deadline, if it did."""
    deadline = request.get("deadline")
    if deadline is not None and time.monotonic() > deadline:
        return {"error": "late", "message": "the request arrived after its deadline"}
    return None


NETKV_BATCH = 100
"""The most keys one ``delete_many`` request of the netkv server takes."""


class NetKVServer:
    """The server: namespaces of ``key -> (data, version)``; ``with NetKVServer() as s``."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, tuple[bytes, str]]] = {}
        self.counter = 0
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="netkv-server", daemon=True)

    def __enter__(self) -> NetKVServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the netkv server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.address = server.sockets[0].getsockname()[:2]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        staged: dict[str, Any] | None = None  # a staged write dies with its connection
        try:
            while True:
                try:
                    request = await _read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # a cut-off request is never applied
                await asyncio.sleep(0.001)  # the server's own latency
                op = request["op"]
                if op == "stage":  # a transaction's statement: nothing changes yet
                    late = _late(request)
                    staged = None if late else request["write"]
                    reply = late or {"value": True}
                elif op == "commit":  # ... and its COMMIT: the staged write, now
                    late = _late(request)
                    if staged is None:
                        reply = {"error": "unknown", "message": "nothing is staged"}
                    else:
                        reply = late or self._apply(staged)
                    staged = None
                else:
                    reply = self._apply(request)
                writer.write(_frame(reply))
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _apply(self, r: dict[str, Any]) -> dict[str, Any]:
        late = _late(r)
        if late is not None:
            return late
        ns = self.data.setdefault(r["ns"], {})
        op, key = r["op"], r.get("key")
        current = ns.get(key) if key is not None else None
        if op == "put":
            mode = r["mode"]
            if mode == "create" and current is not None:
                return {"error": "precondition", "message": f"key {key!r} exists"}
            if mode not in ("create", "overwrite") and (current is None or current[1] != mode):
                return {"error": "precondition", "message": f"key {key!r} is not at version {mode}"}
            self.counter += 1
            ns[key] = (r["data"], str(self.counter))
            return {"value": str(self.counter)}
        if op == "get":
            if current is None:
                return {"error": "notfound", "message": f"key {key!r} not found"}
            return {"value": [current[0], current[1]]}
        if op == "delete":
            if current is None:
                return {"value": False}
            if r.get("if_match") is not None and current[1] != r["if_match"]:
                return {"error": "precondition", "message": f"key {key!r} is not at version"}
            del ns[key]
            return {"value": True}
        if op == "delete_many":
            names = r["keys"]
            if len(names) > NETKV_BATCH:
                return {"error": "unknown", "message": f"{len(names)} keys in one request"}
            return {"value": sum(ns.pop(name, None) is not None for name in names)}
        if op == "list":
            keys = sorted(k for k in ns if k.startswith(r["prefix"]))
            after = r.get("after")
            if after is not None:
                keys = [k for k in keys if k > after]
            page = keys[: r["limit"]]
            return {"value": [page, len(keys) > len(page)]}
        if op == "ping":
            return {"value": True}
        if op == "quit":
            return {"value": True}
        if op == "drop":
            self.data.pop(r["ns"], None)
            return {"value": True}
        return {"error": "unknown", "message": f"unknown op {op!r}"}


class NetKVStorage(StorageBase):
    """A correct client: one connection, dropped when a call is cancelled mid-exchange,
    and by ``aclose()`` once a call under way has had the grace to end."""

    capabilities: ClassVar[Capabilities] = Capabilities(durable=False, shared=True)
    timeout: float | None = None
    """The deadline of one exchange (None: none); the target's factory sets it."""
    grace: ClassVar[float] = 0.2
    """Seconds a cancelled call waits for the answer of a request already sent (well
    under the suite's 0.5 s cancel bound)."""

    def __init__(self, host: str, port: int, namespace: str) -> None:
        self.host, self.port, self.ns = host, port, namespace
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._conn is not None and self._closed_by_the_server(self._conn[0]):
            await self._drop()  # closed while idle (a restart, an idle timeout): a new one
        if self._conn is None:
            try:
                self._conn = await asyncio.open_connection(self.host, self.port)
            except OSError as exc:
                raise StorageUnavailable(f"cannot connect to {self.host}:{self.port}") from exc
        return self._conn

    def _closed_by_the_server(self, reader: asyncio.StreamReader) -> bool:
        """Whether the kept connection's close has arrived (its reader is at end of file)."""
        return reader.at_eof()

    async def _drop(self) -> None:
        """Abort the connection: unsent bytes of an unfinished request are dropped, never
        flushed later (a graceful close waits to send them, for as long as the link
        takes)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn[1].transport.abort()
            with contextlib.suppress(Exception):
                await conn[1].wait_closed()

    async def _call(self, op: str, **fields: Any) -> Any:
        async with self._lock:
            self._check_open()  # aclose() came while this call waited for its turn
            reader, writer = await self._connection()
            request = {"op": op, "ns": self.ns, **fields, **self._fence(op)}
            exchange = asyncio.ensure_future(self._exchange(reader, writer, request))
            try:
                async with asyncio.timeout(self.timeout):
                    reply = await asyncio.shield(exchange)
            except asyncio.CancelledError:
                await self._settle_cancelled(exchange)
                raise
            except TimeoutError as exc:
                await self._timed_out(exchange)
                raise self._lost(op, exc) from exc
            except (OSError, asyncio.IncompleteReadError) as exc:
                await self._drop()
                if self._closed:  # aclose() dropped the connection under this call
                    raise self._closed_under(op, exc) from exc
                raise self._lost(op, exc) from exc
            finally:
                if self._closed:  # aclose() stopped waiting for this call: drop what it used
                    await self._ended_after_aclose()
        error = reply.get("error")
        if error == "notfound":
            raise NotFound(reply["message"])
        if error == "precondition":
            raise PreconditionFailed(reply["message"])
        if error is not None:
            raise StorageUnavailable(reply["message"])
        return reply["value"]

    async def _ended_after_aclose(self) -> None:
        """A call ended after ``aclose()`` stopped waiting for it: drop its connection."""
        await self._drop()

    def _fence(self, op: str) -> dict[str, Any]:
        """Fields that the request of ``op`` carries beside its own (none here)."""
        return {}

    def _closed_under(self, op: str, exc: BaseException) -> StorageError:
        """The error of a call whose connection ``aclose()`` dropped under it: a write had
        been sent, so it may have happened (`OutcomeUnknown`); a read did not happen."""
        if op in _WRITES:
            return OutcomeUnknown(f"netkv {op}: cut off by aclose(), it may have happened")
        return StorageClosed(f"netkv {op}: the storage was closed")

    @staticmethod
    def _lost(op: str, exc: BaseException) -> StorageUnavailable:
        """The error of a call whose connection failed after its request was handed to it:
        a write may have happened (never resent: a repeat would answer for its own effect)."""
        if op in _WRITES:
            return OutcomeUnknown(
                f"netkv {op}: the connection failed, it may have happened: {exc!r}"
            )
        return StorageUnavailable(f"netkv {op} failed: {exc!r}")

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: dict[str, Any]
    ) -> dict[str, Any]:
        """Send ``request`` and read its reply (a subclass may make it several exchanges)."""
        writer.write(_frame(request))
        await writer.drain()
        return await _read_frame(reader)

    async def _timed_out(self, exchange: asyncio.Future[dict[str, Any]]) -> None:
        """No answer within the timeout: the answer may still come, so the connection goes
        (never read by another call)."""
        exchange.cancel()
        await asyncio.gather(exchange, return_exceptions=True)
        await self._drop()

    async def _settle_cancelled(self, exchange: asyncio.Future[dict[str, Any]]) -> None:
        """The caller cancelled: the request may already be on its way.

        Give its answer a bounded grace, so that a write the server applies
        anyway is whole before CancelledError is raised; if no answer comes,
        drop the connection so that the late answer is never read by another call.
        """
        try:
            await asyncio.wait({exchange}, timeout=self.grace)
        finally:
            if not exchange.done():
                exchange.cancel()
                await asyncio.gather(exchange, return_exceptions=True)
                await self._drop()
            elif exchange.cancelled() or exchange.exception() is not None:
                await self._drop()

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        m = mode.version if isinstance(mode, IfMatch) else mode
        version: str = await self._call("put", key=key, data=data, mode=m)
        return version

    async def _get(self, key: str) -> GetResult:
        data, version = await self._call("get", key=key)
        return GetResult(data, version)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        existed: bool = await self._call("delete", key=key, if_match=if_match)
        return existed

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after
        keys, more = await self._call("list", prefix=prefix, after=after, limit=limit)
        return ListPage(keys, keys[-1] if more and keys else None)

    async def drop_namespace(self) -> None:
        """Delete every key of this storage's namespace (cleanup)."""
        await self._call("drop")

    async def _aclose(self) -> None:
        """A call under way gets the grace to end with its own answer (a write it answers
        is then in place when aclose() returns), as a cancelled one does; then the
        connection is dropped, and a call still under way raises StorageClosed."""
        try:
            async with asyncio.timeout(self.grace), self._lock:
                pass
        except TimeoutError:
            pass  # the server does not answer: nothing more to wait for
        finally:
            await self._drop()


class NetKVStaleReply(NetKVStorage):
    """Bug: a call cancelled mid-exchange stops reading but keeps the connection; the
    next call reads the reply meant for the cancelled one."""

    async def _settle_cancelled(self, exchange: asyncio.Future[dict[str, Any]]) -> None:
        exchange.cancel()
        await asyncio.gather(exchange, return_exceptions=True)


class NetKVRawErrors(NetKVStorage):
    """Bug: lets the socket's own errors escape (ConnectionResetError, IncompleteReadError,
    ConnectionRefusedError) instead of raising StorageUnavailable from them."""

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._conn is None:
            self._conn = await asyncio.open_connection(self.host, self.port)
        return self._conn

    async def _call(self, op: str, **fields: Any) -> Any:
        request = {"op": op, "ns": self.ns, **fields}
        async with self._lock:
            reader, writer = await self._connection()
            exchange = asyncio.ensure_future(self._exchange(reader, writer, request))
            try:
                reply = await asyncio.shield(exchange)
            except asyncio.CancelledError:
                await self._settle_cancelled(exchange)
                raise
            except BaseException:
                await self._drop()  # a new connection next time, but the error goes up as is
                raise
        error = reply.get("error")
        if error == "notfound":
            raise NotFound(reply["message"])
        if error == "precondition":
            raise PreconditionFailed(reply["message"])
        if error is not None:
            raise StorageUnavailable(reply["message"])
        return reply["value"]


class NetKVRefusedConnectEscapes(NetKVStorage):
    """Bug: translates what goes wrong on a connection (a reset, a short read) but not a
    connect that is refused: ``ConnectionRefusedError`` leaves the adapter as it is (the
    author tried a server that went away, never one whose port is closed)."""

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._conn is None:
            self._conn = await asyncio.open_connection(self.host, self.port)
        return self._conn


class NetKVUnsentWriteIsOutcomeUnknown(NetKVStorage):
    """Bug: a write whose connect failed raises OutcomeUnknown ("it may have happened"),
    though nothing was sent (the fifth blind round's aiomysql adapter b25); reads raise
    StorageUnavailable as they should."""

    _op = ""

    async def _call(self, op: str, **fields: Any) -> Any:
        self._op = op
        return await super()._call(op, **fields)

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await super()._connection()
        except StorageUnavailable as exc:
            if self._op not in _WRITES:
                raise
            raise OutcomeUnknown(f"netkv {self._op} failed, it may have happened: {exc}") from exc


class NetKVClosesGracefully(NetKVStorage):
    """Bug: drops a connection with a graceful ``close()``, not ``abort()``: a connection
    whose large request is still in its buffers (the server, or the link, not reading)
    stays open until they are sent, after ``aclose()`` returned, and the rest of the
    request goes out then (the fifth blind round's aiomysql adapter b26)."""

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn[1].close()  # "it closes once the buffer is flushed": not awaited
            _FORGOTTEN.append(conn[1])  # kept referenced: closed after the run


class NetKVResendsWrites(NetKVStorage):
    """Bug: a client that resends a request once on a new connection when the first one
    failed, writes included (redis-py's ``Retry`` does so for every command): a delete
    whose reply was lost after the server applied it is resent, finds nothing and answers
    ``False``; a create-only put answers ``PreconditionFailed``, beaten by itself."""

    async def _call(self, op: str, **fields: Any) -> Any:
        try:
            return await super()._call(op, **fields)
        except OutcomeUnknown:
            return await super()._call(op, **fields)


class NetKVRepeatTakesAConflictForItsOwn(NetKVStorage):
    """Bug: a conditional put sent again after a lost connection that meets "the key
    exists" or "another version" takes it for its own first attempt, and answers the
    version it reads back: but the first attempt may never have arrived, and the key
    holds another client's write."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        try:
            return await super()._put(key, data, mode)
        except OutcomeUnknown:
            if mode == "overwrite":
                raise
            try:
                return await super()._put(key, data, mode)
            except PreconditionFailed:
                return (await self._get(key)).version  # "it must have been mine"


class NetKVRepeatTakesNothingForItsOwn(NetKVStorage):
    """Bug: a delete sent again after a lost connection that finds nothing answers
    ``True`` ("my first attempt deleted it"): but the first attempt may never have
    arrived, and another client's delete, answered ``True`` too, deleted the value."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        try:
            return await super()._delete(key, if_match)
        except OutcomeUnknown:
            await super()._delete(key, if_match)
            return True


class NetKVTimeoutKeepsTheConnection(NetKVStorage):
    """Bug: a call that times out stops waiting but keeps its connection: the reply that
    comes late is read by the next call on it, as its own answer."""

    async def _timed_out(self, exchange: asyncio.Future[dict[str, Any]]) -> None:
        exchange.cancel()
        await asyncio.gather(exchange, return_exceptions=True)


class NetKVCursorRestartsAfterReconnect(NetKVStorage):
    """Bug: pages through a cursor that lives on its connection (a server-side cursor, as a
    SQL ``DECLARE CURSOR`` is) and, when the connection was replaced between two pages,
    opens the cursor again from the start of the range on a new connection: the first
    keys come twice."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        last, on = cursor if cursor is not None else (start_after, None)
        try:
            page = await super()._list_page(prefix, last, None, limit)
            moved = on is not None and self._conn is not on
        except StorageUnavailable:
            if on is None:
                raise
            moved = True
        if moved:  # the connection is gone, and its cursor with it: a new one, from the start
            page = await super()._list_page(prefix, start_after, None, limit)
        more = page.cursor is not None
        return ListPage(page.keys, (page.keys[-1], self._conn) if more else None)


class NetKVFencedStorage(NetKVStorage):
    """A correct client that settles cancelled writes: each write carries a deadline (the
    server runs in this process, on the same monotonic clock) past which the server does
    nothing; a cancelled write waits out the grace, which ends past the deadline, so a
    request that arrives later is refused. A write refused as late (a slow server) is
    sent again with a new deadline."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=False, shared=True, settles_cancelled_writes=True
    )
    window: ClassVar[float] = 0.1
    """Seconds a write's request has to reach the server (under the grace, 0.2 s)."""

    def _fence(self, op: str) -> dict[str, Any]:
        return {"deadline": time.monotonic() + self.window} if op in _WRITES else {}

    async def _call(self, op: str, **fields: Any) -> Any:
        for _ in range(8):
            try:
                return await super()._call(op, **fields)
            except StorageUnavailable as exc:
                if "after its deadline" not in str(exc):
                    raise
        raise StorageUnavailable(f"netkv {op}: the server ran it after its deadline 8 times")


class NetKVClaimsToSettle(NetKVStorage):
    """Bug: declares ``settles_cancelled_writes`` on the strength of its grace (a cancelled
    call waits for its answer, then drops the connection), with no deadline the server
    checks: a request still on its way when the call gave up is applied when it arrives."""

    capabilities: ClassVar[Capabilities] = NetKVFencedStorage.capabilities


class NetKVTwoStepStorage(NetKVFencedStorage):
    """Correct: a write is two exchanges on one connection, as a SQL transaction's statement
    and its ``COMMIT`` are: the write is staged (nothing changes), then committed. The
    commit carries the deadline, past which the server commits nothing; a staged write
    dies with its connection, so a cancelled call whose commit never arrives in time
    leaves nothing behind."""

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: dict[str, Any]
    ) -> dict[str, Any]:
        if request["op"] not in _WRITES:
            return await super()._exchange(reader, writer, request)
        fence = {"deadline": request.pop("deadline")}
        stage = {"op": "stage", "write": request, **self._stage_fence(fence)}
        staged = await super()._exchange(reader, writer, stage)
        if "error" in staged:
            return staged
        commit = {"op": "commit", **self._commit_fence(fence)}
        return await super()._exchange(reader, writer, commit)

    def _stage_fence(self, fence: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _commit_fence(self, fence: dict[str, Any]) -> dict[str, Any]:
        return fence


class NetKVTwoStepKeepsItsConnection(NetKVTwoStepStorage):
    """Bug: a two-exchange write (a statement, then its ``COMMIT``) cancelled between them
    stops waiting but keeps the connection, as a pool that takes back a connection whose
    transaction is still open: the ``COMMIT`` that was on its way arrives and commits the
    cancelled write after ``CancelledError``, and its reply waits for the next call."""

    async def _settle_cancelled(self, exchange: asyncio.Future[dict[str, Any]]) -> None:
        exchange.cancel()
        await asyncio.gather(exchange, return_exceptions=True)


class NetKVTwoStepFencedApart(NetKVTwoStepStorage):
    """Bug: a two-exchange write whose deadline the server checks at the first exchange (the
    statement), not at the commit (as a fence run as a statement of its own, or one that
    reads ``now()``, the transaction's start, does): a commit still on its way when the
    cancelled call gave up commits when it arrives."""

    def _stage_fence(self, fence: dict[str, Any]) -> dict[str, Any]:
        return fence

    def _commit_fence(self, fence: dict[str, Any]) -> dict[str, Any]:
        return {}


class NetKVTwoStepResendsWrites(NetKVTwoStepStorage):
    """Bug: a two-exchange write sent again, both exchanges, on a new connection when its
    connection failed: right when the statement's reply was lost (its staged write died
    with the connection), wrong when the commit's was: the repeat then meets the commit
    it repeats (a create-only put answers ``PreconditionFailed``, a delete ``False``)."""

    async def _call(self, op: str, **fields: Any) -> Any:
        try:
            return await super()._call(op, **fields)
        except OutcomeUnknown:
            return await super()._call(op, **fields)


class NetKVSendsOnAClosedConnection(NetKVStorage):
    """Bug: keeps its connection for the next call without looking at it: after the server
    closed it while it was idle (a restart, an idle timeout), the next call is sent on it
    and fails (a write with an outcome it cannot know), where a new connection answers."""

    def _closed_by_the_server(self, reader: asyncio.StreamReader) -> bool:
        return False


class NetKVClosedCallsAnswerStorageClosed(NetKVStorage):
    """Bug: a call that ``aclose()`` cut off raises ``StorageClosed`` ("it did not happen")
    whatever it had sent: a write whose request had reached the server, and whose reply
    the close cut off, is reported as not done."""

    def _closed_under(self, op: str, exc: BaseException) -> StorageError:
        return StorageClosed(f"netkv {op}: the storage was closed")


class NetKVForgetsTheBusyConnection(NetKVStorage):
    """Bug: ``aclose()`` closes the connection only when no call is using it; a busy one is
    left to its call to give back, to a pool that nobody closes again: the socket stays
    open after the call ends."""

    async def _aclose(self) -> None:
        if self._lock.locked():  # in use: its call "gives it back" when it ends
            if self._conn is not None:
                _FORGOTTEN.append(self._conn[1])  # ...to a pool nobody closes
            self._conn = None
            return
        await self._drop()


class NetKVAcloseDropNotInFinally(NetKVStorage):
    """Bug: ``aclose()`` drops the connection after the call under way has ended, but not
    in a ``finally``: when that call outlives the grace (the server does not answer), the
    wait's ``TimeoutError`` is swallowed and the drop skipped. The call stays blocked on a
    socket nothing will ever close."""

    async def _aclose(self) -> None:
        try:
            async with asyncio.timeout(self.grace), self._lock:
                pass
            await self._drop()
        except TimeoutError:
            pass  # "the server does not answer: nothing more to do"


class NetKVLeavesTheConnectionToAclose(NetKVStorage):
    """Correct: a call that ends after ``aclose()`` leaves its connection where it was, as
    a call gives its connection back to a pool: ``aclose()`` drops it, in a ``finally``,
    also when it is cancelled while it waits for the call."""

    async def _ended_after_aclose(self) -> None:
        pass


class NetKVAcloseDropSkippedWhenCancelled(NetKVLeavesTheConnectionToAclose):
    """Bug: ``aclose()`` waits for the call under way, then drops the connection, one
    after the other, not in a ``finally``: an ``aclose()`` cancelled during that wait never
    drops it, and since the storage is marked closed, a second ``aclose()`` returns at
    once. The connection stays open as long as the storage is referenced (the fifth
    blind round's aiomysql adapter b22)."""

    async def _aclose(self) -> None:
        try:
            async with asyncio.timeout(self.grace), self._lock:
                pass
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            if self._conn is not None:  # left open, kept referenced: closed after the run
                _FORGOTTEN.append(self._conn[1])
            raise
        await self._drop()


_FORGOTTEN: list[asyncio.StreamWriter] = []
"""The connections that the leaking netkv clients left open, kept referenced so that
no later test meets them being collected; `close_forgotten` closes them after a run."""


def close_forgotten() -> None:
    """Close the sockets the leaking netkv clients left open (their event loop is
    closed by now: the socket itself is closed, and its transport marked closed, so that
    nothing warns when it is collected)."""
    while _FORGOTTEN:
        writer = _FORGOTTEN.pop()  # referenced until marked closed: its __del__ checks
        transport = writer.transport
        sock = getattr(transport, "_sock", None)
        if sock is not None:
            sock.close()
        transport._sock = None  # type: ignore[attr-defined]
        transport._closing = True  # type: ignore[attr-defined]


class NetKVGetInTwoRequests(NetKVStorage):
    """A get asks for the key's version first and for its bytes by a second request, as an
    adapter that reads a value's row and then its parts by a second statement (a MariaDB
    adapter of the fifth blind round): a write of another client between the two requests
    makes it return one put's version with another put's bytes."""

    async def _get(self, key: str) -> GetResult:
        _, version = await self._call("get", key=key)
        data, _ = await self._call("get", key=key)
        return GetResult(data, version)


class NetKVChecksThenWrites(NetKVStorage):
    """A conditional put or delete reads the key's version by one request, decides, and then
    writes by another, unconditional one: a write of another client between the two is
    undone (an if-match put over it, a create-only put over a key just created)."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if mode == "overwrite":
            return await super()._put(key, data, mode)
        current = await self._version(key)
        wanted = None if mode == "create" else getattr(mode, "version", None)
        if current != wanted:
            raise PreconditionFailed(f"put of {key!r}: the version is not the one asked for")
        return await super()._put(key, data, "overwrite")

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if if_match is None:
            return await super()._delete(key, None)
        if await self._version(key) != if_match:
            return False
        return await super()._delete(key, None)

    async def _version(self, key: str) -> str | None:
        try:
            return (await self._get(key)).version
        except NotFound:
            return None


class NetKVDeleteChecksFirst(NetKVStorage):
    """A delete asks whether the key exists by one request, then deletes it by another, and
    answers what the first said: a delete of another client between the two makes both
    answer that they found the value."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        if if_match is not None:
            return await super()._delete(key, if_match)
        try:
            await self._get(key)
        except NotFound:
            return False
        await super()._delete(key, None)
        return True


class NetKVListsEveryPageByOffsetFirst(NetKVStorage):
    """A listing fetches all its pages at its start, page n by its offset (a request for the
    first n + 1 pages' keys, of which it keeps the last page), and yields them afterwards: a
    key created or deleted before the cursor between two page requests shifts the pages,
    so a key comes twice or not at all. No write between the keys it yields can reach
    that window: every request is made before the first key comes."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        keys: list[str] = []
        while True:
            got, more = await self._call(
                "list", prefix=prefix, after=start_after, limit=len(keys) + self.page_size
            )
            page = got[len(keys) :]
            keys += page
            if not more or not page:
                return ListPage(keys, None)


class NetKVPutReadsItsVersionBack(NetKVStorage):
    """A put writes, then asks for the key's version by a second request and answers that,
    as an adapter on a store whose write answers no version (a read of the ETag or the
    version id after a PUT): a write of another client between the two makes the put
    answer that write's version, with which a later if-match put overwrites it."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await super()._put(key, data, mode)
        return (await self._get(key)).version


class NetKVDeadlineForTheReplyOnly(NetKVStorage):
    """The storage's ``timeout`` bounds waiting for the reply, not sending the request (a
    driver's ``read_timeout``, the fifth blind round's asyncmy adapter b19): a call that
    times out while its request is still being sent waits for that first, and on a link
    that stopped moving it never ends."""

    _sending = False

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: dict[str, Any]
    ) -> dict[str, Any]:
        self._sending = True
        try:
            writer.write(_frame(request))
            await writer.drain()
        finally:
            self._sending = False
        return await _read_frame(reader)

    async def _timed_out(self, exchange: asyncio.Future[dict[str, Any]]) -> None:
        if self._sending:  # "the deadline is the reply's": the request is sent in full first
            exchange.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved
            await asyncio.wait({exchange})
        await super()._timed_out(exchange)


class NetKVLostWriteIsUnavailable(NetKVStorage):
    """Bug: a write whose connection failed after its request left raises plain
    ``StorageUnavailable`` ("nothing happened"), though the server may have applied it."""

    @staticmethod
    def _lost(op: str, exc: BaseException) -> StorageUnavailable:
        return StorageUnavailable(f"netkv {op} failed: {exc!r}")


class NetKVLaterPageErrorEndsListing(NetKVStorage):
    """Bug: a paginator that takes a failed continuation for the end of the listing
    (``except ClientError: break`` around the next page's request): with the backend down
    after the first page, the listing ends cut short, as if it were whole."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        try:
            return await super()._list_page(prefix, start_after, cursor, limit)
        except StorageUnavailable:
            if cursor is None:
                raise
            return ListPage([], None)


class NetKVConditionalErrorsAsPrecondition(NetKVStorage):
    """Bug: a create-only or if-match put reads any failure of its request as its
    condition failing (``except Exception: raise PreconditionFailed``, as a client of a
    backend that answers a failed condition with an error it does not tell apart): with
    the backend down, it answers PreconditionFailed, as if another writer had won."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        try:
            return await super()._put(key, data, mode)
        except StorageUnavailable as exc:
            if mode == "overwrite":
                raise
            raise PreconditionFailed(f"key {key!r}: the conditional put failed") from exc


class NetKVConditionalDeleteDownIsFalse(NetKVStorage):
    """Bug: an if-match delete answers False ("not deleted: missing or another version")
    when its request fails: with the backend down, it says the key was not at the version."""

    async def _delete(self, key: str, if_match: str | None) -> bool:
        try:
            return await super()._delete(key, if_match)
        except StorageUnavailable:
            if if_match is None:
                raise
            return False


class NetKVGoodbyeOnClose(NetKVStorage):
    """Bug: ``aclose()`` says goodbye to the server (a ``QUIT``, its answer awaited) before
    it closes the connection (in a ``finally:``): with the server gone, the goodbye's error
    goes up to the caller of ``aclose()``."""

    async def _aclose(self) -> None:
        try:
            if self._conn is not None:
                reader, writer = self._conn
                await self._exchange(reader, writer, {"op": "quit", "ns": self.ns})
        finally:
            await self._drop()


class NetKVKeepsAFailedSetup(NetKVStorage):
    """Bug: the first call starts the storage's setup (a ``ping`` that checks the server, as
    a schema check or an authentication handshake would) as one task that every call
    awaits, and keeps it: when the first call finds the server down, every later call
    awaits the failed setup and raises, also once the server is back."""

    def __init__(self, host: str, port: int, namespace: str) -> None:
        super().__init__(host, port, namespace)
        self._setup: asyncio.Future[Any] | None = None

    async def _ready(self) -> None:
        if self._setup is None:
            self._setup = asyncio.ensure_future(self._call("ping"))
        await asyncio.shield(self._setup)

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        await self._ready()
        return await super()._put(key, data, mode)

    async def _get(self, key: str) -> GetResult:
        await self._ready()
        return await super()._get(key)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        await self._ready()
        return await super()._delete(key, if_match)

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        await self._ready()
        return await super()._list_page(prefix, start_after, cursor, limit)


class NetKVSetsUpAgain(NetKVKeepsAFailedSetup):
    """Correct: as `NetKVKeepsAFailedSetup`, but a setup that failed is started again by
    the next call."""

    async def _ready(self) -> None:
        setup = self._setup
        if setup is not None and setup.done() and setup.exception() is not None:
            self._setup = None
        await super()._ready()


class _Client:
    """A client of one server, shared by storage objects (`NetKVSharedClient`)."""

    def __init__(self) -> None:
        self.conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.lock = asyncio.Lock()
        self.closed = False


class NetKVSharedClient(NetKVStorage):
    """Bug: storage objects of one server share one client (kept per server address, as a
    module-level cache of clients per URL is), and ``aclose()`` closes it: another storage
    object still open then fails every call ("the client is closed", as an aiohttp
    session closed under it says)."""

    _clients: ClassVar[dict[tuple[str, int], _Client]] = {}

    def __init__(self, host: str, port: int, namespace: str) -> None:
        super().__init__(host, port, namespace)
        client = self._clients.get((host, port))
        if client is None or client.closed:
            client = self._clients[host, port] = _Client()
        self._client = client
        self._lock = client.lock

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        client = self._client
        if client.closed:
            raise RuntimeError("the client is closed")
        if client.conn is None:
            try:
                client.conn = await asyncio.open_connection(self.host, self.port)
            except OSError as exc:
                raise StorageUnavailable(f"cannot connect to {self.host}:{self.port}") from exc
        return client.conn

    async def _drop(self) -> None:
        conn, self._client.conn = self._client.conn, None
        if conn is not None:
            conn[1].close()
            with contextlib.suppress(Exception):
                await conn[1].wait_closed()

    async def _aclose(self) -> None:
        await self._drop()
        self._client.closed = True


NETKV_PART = 64 * 1024
"""The size of the parts that `NetKVPartsStorage` stores a larger value in."""


class NetKVPoolSlots(NetKVStorage):
    """Correct: a connection holds one of `slots` slots of a pool while it is open, taken
    before its connect (a call waits up to `slot_wait` seconds for a free one, then raises
    StorageUnavailable) and given back when it is dropped, or at once when its connect
    fails."""

    slots: ClassVar[int] = 4
    slot_wait: ClassVar[float] = 0.2

    def __init__(self, host: str, port: int, namespace: str) -> None:
        super().__init__(host, port, namespace)
        self._free = asyncio.Semaphore(self.slots)

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._conn is not None and self._closed_by_the_server(self._conn[0]):
            await self._drop()
        if self._conn is None:
            try:
                async with asyncio.timeout(self.slot_wait):
                    await self._free.acquire()
            except TimeoutError:
                raise StorageUnavailable("no free slot in the connection pool") from None
            try:
                self._conn = await self._connect()
            except BaseException as exc:
                self._failed_connect()
                if isinstance(exc, OSError | asyncio.IncompleteReadError):
                    raise StorageUnavailable(f"cannot connect to {self.host}:{self.port}") from exc
                raise
        return self._conn

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A new connection, and its handshake (a ping), as a database driver's connect."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            await self._exchange(reader, writer, {"op": "ping", "ns": self.ns})
        except BaseException:
            writer.close()
            raise
        return reader, writer

    def _failed_connect(self) -> None:
        self._free.release()

    async def _drop(self) -> None:
        had = self._conn is not None
        await super()._drop()
        if had:
            self._free.release()


class NetKVPoolSlotLostToAFailedConnect(NetKVPoolSlots):
    """Bug: the slot taken for a new connection is given back when the connection is
    dropped, but not when its connect fails: every connect that fails while the server is
    down loses a slot, and once the pool's slots are gone every call waits for one that
    never comes, the server back or not (the fifth blind round's aiomysql adapter b10)."""

    def _failed_connect(self) -> None:
        pass


class NetKVPartsStorage(NetKVStorage):
    """Correct: a value of more than `NETKV_PART` bytes is stored in parts, one request
    each, under keys of a namespace of their own named by a fresh token, and then the key
    is switched to them in one request (a manifest); a get reads the manifest, then every
    part, and raises if one fails."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if len(data) <= NETKV_PART:
            return await super()._put(key, b"\x00" + data, mode)
        token = secrets.token_hex(8)
        parts = range(0, len(data), NETKV_PART)
        for i, offset in enumerate(parts):
            await self._parts("put", key=f"{token}/{i}", data=data[offset : offset + NETKV_PART])
        manifest = b"\x01" + f"{token}/{len(parts)}/{len(data)}".encode()
        return await super()._put(key, manifest, mode)

    async def _get(self, key: str) -> GetResult:
        got = await super()._get(key)
        if got.data[:1] == b"\x00":
            return GetResult(got.data[1:], got.version)
        token, count, size = got.data[1:].decode().split("/")
        data = b"".join([await self._part(f"{token}/{i}") for i in range(int(count))])
        if len(data) != int(size):
            raise StorageUnavailable(f"key {key!r}: a part of its value is missing")
        return GetResult(data, got.version)

    async def _part(self, name: str) -> bytes:
        part: bytes = (await self._parts("get", key=name))[0]
        return part

    async def _parts(self, op: str, **fields: Any) -> Any:
        """A request to the namespace of the parts (the frame's ``ns`` field, overridden)."""
        mode = {"mode": "overwrite"} if op == "put" else {}
        return await self._call(op, ns=self.ns + "#parts", **mode, **fields)


class NetKVPartsManifestFirst(NetKVPartsStorage):
    """Bug: a value in parts is switched to before its parts are stored (the manifest put
    first, then the parts): a put cut after the manifest leaves the key naming parts that
    were never stored, neither the old value nor the new one."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if len(data) <= NETKV_PART:
            return await super()._put(key, data, mode)
        token = secrets.token_hex(8)
        parts = range(0, len(data), NETKV_PART)
        manifest = b"\x01" + f"{token}/{len(parts)}/{len(data)}".encode()
        version = await NetKVStorage._put(self, key, manifest, mode)
        for i, offset in enumerate(parts):
            await self._parts("put", key=f"{token}/{i}", data=data[offset : offset + NETKV_PART])
        return version


class NetKVPartsReadUntilOneFails(NetKVPartsStorage):
    """Bug: a get reads a value's parts until one fails and answers what it read (a failed
    part read as "no more parts"): with the backend gone after the first part, it answers
    the first 64 KiB of the value as the whole of it."""

    async def _get(self, key: str) -> GetResult:
        got = await NetKVStorage._get(self, key)
        if got.data[:1] == b"\x00":
            return GetResult(got.data[1:], got.version)
        token, count, _ = got.data[1:].decode().split("/")
        read = []
        for i in range(int(count)):
            try:
                read.append(await self._part(f"{token}/{i}"))
            except (StorageUnavailable, NotFound):
                break
        return GetResult(b"".join(read), got.version)


class NetKVBatchStorage(NetKVStorage):
    """Correct: ``delete_many`` sends the batch in requests of at most `NETKV_BATCH` keys,
    one after another, and raises if any of them fails."""

    async def _delete_many(self, keys: list[str]) -> int:
        existed = 0
        for i in range(0, len(keys), NETKV_BATCH):
            existed += await self._call("delete_many", keys=keys[i : i + NETKV_BATCH])
        return existed


class NetKVBatchFailsOnlyIfEveryRequestFails(NetKVBatchStorage):
    """Bug: ``delete_many`` goes on past a request that failed and raises only if every
    request of the batch failed (a best-effort cleanup loop): with the backend down after
    its first request, it returns the count of that request, the rest of the batch stored."""

    async def _delete_many(self, keys: list[str]) -> int:
        existed, errors, requests = 0, [], 0
        for i in range(0, len(keys), NETKV_BATCH):
            requests += 1
            try:
                existed += await self._call("delete_many", keys=keys[i : i + NETKV_BATCH])
            except StorageUnavailable as exc:
                errors.append(exc)
        if len(errors) == requests:
            raise errors[0]
        return existed


@contextmanager
def netkv_target(
    client: type[NetKVStorage] = NetKVStorage, *, name: str = "netkv"
) -> Iterator[Target]:
    """A running server and a target whose factory accepts ``location`` and ``endpoint``."""
    with NetKVServer() as server:

        @asynccontextmanager
        async def factory(
            *,
            location: str | None = None,
            endpoint: tuple[str, int] | None = None,
            timeout: float | None = None,
        ) -> AsyncIterator[NetKVStorage]:
            host, port = endpoint or server.address
            ns = location or new_location()
            async with client(host, port, ns) as storage:
                storage.timeout = timeout
                yield storage
            async with NetKVStorage(*server.address, ns) as cleaner:
                await cleaner.drop_namespace()

        yield Target(factory, name=name, upstream=server.address)

"""A loopback TCP proxy that can stop forwarding mid-request or mid-response.

Network adapters are tested for cancellation by putting `StallProxy`
between the client and the real server: the suite tells the proxy to stop
forwarding, starts an operation, waits until the proxy is provably holding the
operation's bytes (`StallProxy.stalled`), cancels the operation, and then
checks the promises (``CancelledError`` promptly, whole-or-absent, no late
landing, the next call gets its own answer).

Semantics of a stall, per direction (``"request"``: client to server,
``"response"``: server to client):

- bytes read while stalled are held, not forwarded; with ``partial=True`` the
  first chunk is split and its first half forwarded, so the server has
  received part of a request (or the client part of a reply);
- `StallProxy.resume` forwards the held bytes of connections that are
  still open and forwards normally again;
- held bytes of a connection whose sender closed it are dropped, never
  delivered later (the proxy models a backend that stopped answering, not a
  slow one).

Down, the proxy resets every connection (`StallProxy.refuse`), or, for a
backend that speaks HTTP/1.1, Redis's RESP or PostgreSQL's protocol, stays up and
answers every request itself with an error (`StallProxy.answer`, an `ErrorAnswer`:
a 503, a ``-MASTERDOWN``, a ``57P03``), as a server that is overloaded, failing or
starting up does.

The protocol for a target: its factory accepts ``endpoint=(host, port)`` and
the `Target` names its real server in
``upstream``; see `checkpointkit.conformance.target`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

__all__ = ["Direction", "ErrorAnswer", "StallProxy"]

Direction = Literal["request", "response", "both"]

_REQUEST_LINE = re.compile(rb"[A-Z]+ \S+ HTTP/1\.[01]")
_HEAD_LIMIT = 256 * 1024
"""The longest request head (request line and headers) that `StallProxy.answer` reads."""
_PG_SSL_REQUEST = 80877103
_PG_GSS_REQUEST = 80877104
_LINE_WAIT = 5.0
"""Seconds `StallProxy.answer` waits for the rest of a first line that starts like a request's."""


@dataclass(frozen=True)
class ErrorAnswer:
    """The error with which `StallProxy.answer` answers every request, in the client's protocol.

    HTTP/1.1: by default what S3 and Azure Blob send when they are overloaded, a 503
    whose XML body names the error (S3 reads ``<Code>``, Azure the
    ``x-ms-error-code`` header), with ``Retry-After: 0`` so that a client honouring it
    retries at once. Redis (RESP): by default what a replica answers every command
    while its link to the primary is down (``-MASTERDOWN``).
    """

    status: int = 503
    reason: str = "Service Unavailable"
    code: str = "ServiceUnavailable"
    message: str = "The server is answering every request with this error (a test outage)."
    resp: str = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
    sqlstate: str = "57P03"
    pg_message: str = "the database system is starting up"

    def encode(self, *, head_only: bool = False) -> bytes:
        """The whole HTTP response (without its body for ``head_only``: a HEAD's answer)."""
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{self.code}</Code><Message>{self.message}</Message></Error>"
        ).encode()
        head = (
            f"HTTP/1.1 {self.status} {self.reason}\r\n"
            "Content-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"x-ms-error-code: {self.code}\r\n"
            "Retry-After: 0\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        return head if head_only else head + body

    def encode_resp(self) -> bytes:
        """The RESP error reply to one Redis command."""
        return b"-" + self.resp.encode() + b"\r\n"

    def encode_pg(self) -> bytes:
        """The PostgreSQL ``ErrorResponse`` to a startup message (then the server closes)."""
        fields = b"".join(
            kind + text.encode() + b"\0"
            for kind, text in (
                (b"S", "FATAL"),
                (b"V", "FATAL"),
                (b"C", self.sqlstate),
                (b"M", self.pg_message),
            )
        )
        body = fields + b"\0"
        return b"E" + (len(body) + 4).to_bytes(4, "big") + body


class _Conn:
    __slots__ = ("answered", "answering", "client", "handler", "replied", "upstream")

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.handler: asyncio.Task[None] | None = asyncio.current_task()
        self.answering = False
        self.replied = True  # the next request bytes open an exchange (the first ones do)
        self.answered = asyncio.Event()  # the server sent bytes (set at each read of them)


_READ = 65536
"""The most bytes one read of a connection takes (a read this long: a large request)."""

LATE_CLOSE_AFTER = 1.0
"""How long, at most, the server's side of a connection stays open after held request
bytes were delivered late (their sender had closed): until the server answers them, as a
link or a proxy between the client and the server delivers a request whole and the close
after it. A server that cancels a request when its connection closes (an HTTP server,
through its request's context) then runs it anyway, as it would behind a proxy that
finishes each request it forwarded."""


class StallProxy:
    """Forwards TCP connections from ``127.0.0.1:<free port>`` to ``upstream``.

    Use it with ``async with``; it closes every connection on exit.

    Args:
        upstream: the real server's ``(host, port)``; must be a loopback address.
        receive_buffer: the kernel's receive buffer of each client connection, in bytes
            (``SO_RCVBUF``, fixed: no autotuning, up to 32 MiB here); small, it makes a
            stall with ``backpressure`` leave most of a large request in the client.

    Attributes:
        stalled: set once bytes are being held by a stall (the operation that
            sent them is provably stuck); cleared by `stall`.
        connections: connections accepted so far.
        refused: connections reset at once because the proxy was `refusing`.
        tripped: set once `refuse_after_an_answer` went down.
        answered: requests answered by `answer` since it was called.
        unrecognized: connections reset by `answer` because their first bytes were
            not an HTTP/1.1 request, a Redis command or a PostgreSQL startup.
        held_bytes: bytes held (not forwarded) by stalls so far.
        dropped_bytes: held bytes discarded because their sender closed.
        late_bytes: held request bytes delivered after their sender closed
            (``stall(in_flight=True)``).
    """

    def __init__(self, upstream: tuple[str, int], *, receive_buffer: int | None = None) -> None:
        host = upstream[0]
        self._receive_buffer = receive_buffer
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"StallProxy forwards to loopback addresses only, not {host!r}")
        self.upstream = upstream
        self.stalled = asyncio.Event()
        self.connections = 0
        self.refused = 0
        self.refusing = False
        self._refuse_left: int | None = None
        self.tripped = False
        self.answered = 0
        self.unrecognized = 0
        self._answer: ErrorAnswer | None = None
        self._armed = False  # refuse_after_an_answer: go down at the next request
        self._answered = False  # ...sent after an answer
        self.held_bytes = 0
        self.dropped_bytes = 0
        self._open = {"request": asyncio.Event(), "response": asyncio.Event()}
        for gate in self._open.values():
            gate.set()
        self._split = {"request": False, "response": False}
        self._after = {"request": 0, "response": 0}
        self._backpressure = {"request": False, "response": False}
        self._large = {"request": False, "response": False}
        self._exchanges = False
        self._in_flight = False
        self.late_bytes = 0
        self._conns: set[_Conn] = set()
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` where the proxy listens; pass it as the factory's ``endpoint``."""
        if self._server is None:
            raise RuntimeError("the proxy is not started; use 'async with StallProxy(...)'")
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def open_connections(self) -> int:
        """Client connections that are open through the proxy now."""
        return len(self._conns)

    async def __aenter__(self) -> Self:
        sock = socket.socket()
        try:
            if self._receive_buffer is not None:  # inherited by the accepted connections
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)
            sock.bind(("127.0.0.1", 0))
            self._server = await asyncio.start_server(self._handle, sock=sock, limit=_HEAD_LIMIT)
        except BaseException:
            sock.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop listening and close every connection; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.resume()
        for _ in range(5):  # a connection accepted just before close starts its handler late
            await self.drop(abort=False)
            await asyncio.sleep(0)
            if not self._conns:
                break
        if server is not None:
            await server.wait_closed()

    # -- control -------------------------------------------------------------------------
    def stall(
        self,
        direction: Direction = "response",
        *,
        partial: bool = True,
        after: int = 0,
        in_flight: bool = False,
        backpressure: bool = False,
        large: bool = False,
        exchanges: bool = False,
    ) -> None:
        """Stop forwarding ``direction`` from now on (held until `resume`).

        Args:
            direction: ``"request"``, ``"response"`` or ``"both"``.
            partial: forward the first half of the next chunk before holding, so
                the stall falls in the middle of a request or reply.
            after: forward this many chunks (reads of up to 64 KiB, on any
                connection) of ``direction`` first, then hold: to stall at a later
                exchange of an operation that makes several.
            in_flight: held request bytes are on the wire, not lost: when their
                sender closes (or resets) its connection they are still delivered, at
                `resume`, and the server's side is closed once the server answered them
                (at most `LATE_CLOSE_AFTER` later: a slow link delivers what left the
                client whole, and the close after it). Without it they are dropped.
            backpressure: once it holds bytes of a connection, stop reading from it
                until `resume`, so that the sender's buffers fill (a link that stopped
                moving); without it the proxy reads on, and holds what it reads.
            large: forward reads shorter than 64 KiB (small requests: a ``BEGIN``, a
                handshake) and hold from the first full one, a large request's.
            exchanges: ``after`` counts exchanges, not chunks (``"request"`` only): an
                exchange opens with the first request bytes that a connection sends after
                the server's reply (or its first bytes), and every chunk of it is forwarded;
                the request that opens exchange ``after + 1`` is held whole. So a call made
                of several exchanges (a read and then another, a value fetched in parts)
                stops between two of them, after the server answered the first.
        """
        if not isinstance(after, int) or after < 0:
            raise ValueError(f"after must be an int >= 0, not {after!r}")
        if exchanges and direction != "request":
            raise ValueError(f"exchanges counts requests: stall 'request', not {direction!r}")
        self.stalled.clear()
        self._in_flight = in_flight
        self._exchanges = exchanges
        for d in ("request", "response") if direction == "both" else (direction,):
            self._open[d].clear()
            self._split[d] = partial
            self._after[d] = after
            self._backpressure[d] = backpressure
            self._large[d] = large

    async def holding(self, call: asyncio.Future[Any], timeout: float) -> bool:
        """Wait until this proxy holds bytes (`stalled`) or ``call`` ends, ``timeout``
        seconds at most; whether it holds bytes of a call still running."""
        held = asyncio.ensure_future(self.stalled.wait())
        try:
            await asyncio.wait({call, held}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)
        return self.stalled.is_set() and not call.done()

    def resume(self) -> None:
        """Forward held bytes of still-open connections, and everything from now on."""
        for d, gate in self._open.items():
            gate.set()
            self._after[d] = 0

    async def refuse(self, connections: int | None = None) -> None:
        """Act as a server that is down: reset every current connection, and every new
        one as soon as it is accepted, until `accept`.

        Args:
            connections: refuse only this many new connections, then accept again (a
                server back up before the client's retry); None: until `accept`.
        """
        if connections is not None and (not isinstance(connections, int) or connections < 1):
            raise ValueError(f"connections must be an int >= 1 or None, not {connections!r}")
        self._refuse_left = connections
        self.refusing = True
        await self.drop()

    async def answer(self, response: ErrorAnswer) -> None:
        """Act as a server that is up and fails: reset every current connection, then
        answer every request on a new one with ``response``, until `accept`: an HTTP/1.1
        request (the connection then closed), each Redis command (the connection kept),
        a PostgreSQL startup message (the connection then closed). A connection whose
        first bytes are none of these is reset and counted in `unrecognized`; each
        answered request, command or startup in `answered`."""
        self._answer = response
        self.answered = 0
        self.unrecognized = 0
        await self.drop()

    def refuse_after_an_answer(self) -> None:
        """Go down partway through what the client is doing: forward its requests and the
        server's answers until the server has answered one, then, at the first request
        bytes a client sends after that answer, reset every connection and refuse new ones
        (as `refuse`) without forwarding them. `tripped` tells whether it went down; `accept`
        ends it. A client that sends one request, or all its requests before any answer,
        never trips it."""
        self.tripped = False
        self._answered = False
        self._armed = True

    def _trip(self) -> None:
        """Down at once, from inside a pump: abort every connection, refuse new ones."""
        self._armed = False
        self.tripped = True
        self.refusing = True
        self._refuse_left = None
        for conn in list(self._conns):
            for writer in (conn.client, conn.upstream):
                if writer is not None:
                    writer.transport.abort()

    def accept(self) -> None:
        """Forward new connections again (after `refuse`, `refuse_after_an_answer` or
        `answer`); a connection that `answer` kept open (Redis) is reset, as by a server
        that restarted, so that nothing it sends later is answered with the error."""
        self._armed = False
        self.refusing = False
        self._answer = None
        self._refuse_left = None
        for conn in self._conns:
            if conn.answering:
                conn.client.transport.abort()

    async def drop(self, *, abort: bool = True) -> None:
        """Close every current connection (``abort``: with a reset) and wait for them."""
        conns = list(self._conns)
        for conn in conns:
            for writer in (conn.client, conn.upstream):
                if writer is None:
                    continue
                if abort:
                    writer.transport.abort()
                else:
                    writer.close()
        handlers = [
            c.handler
            for c in conns
            if c.handler is not None and c.handler is not asyncio.current_task()
        ]
        if handlers:
            await asyncio.wait(handlers, timeout=5)
            for h in handlers:
                if not h.done():
                    h.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

    # -- forwarding ------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._server is None:  # accepted while the proxy was closing
            writer.close()
            return
        if self.refusing:  # a server that is down: the connection is reset at once
            self.refused += 1
            writer.transport.abort()
            if self._refuse_left is not None:
                self._refuse_left -= 1
                self.refusing = self._refuse_left > 0
            return
        conn = _Conn(writer)
        self._conns.add(conn)
        self.connections += 1
        try:
            if self._answer is not None:
                conn.answering = True
                await self._answer_one(reader, writer, self._answer)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                return
            conn.upstream = up_writer
            pumps = [
                asyncio.ensure_future(self._pump(reader, up_writer, "request", conn)),
                asyncio.ensure_future(self._pump(up_reader, writer, "response", conn)),
            ]
            try:
                # When either side closes, the connection is over: close both sides now
                # rather than wait for the other side to notice (no half-open leftovers).
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for p in pumps:
                    p.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._conns.discard(conn)
            for w in (writer, conn.upstream):
                if w is not None:
                    w.close()
                    with contextlib.suppress(Exception):
                        await w.wait_closed()

    async def _answer_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: ErrorAnswer
    ) -> None:
        """Answer what comes on one connection with ``answer``, in its protocol."""
        try:
            first = await reader.readexactly(1)
            if first == b"*":
                await self._answer_resp(reader, writer, answer)
                return
            if first == b"\0":  # a length below 16 MiB: a PostgreSQL startup packet
                await self._answer_pg(reader, writer, first, answer)
                return
            line = b""
            if first.isupper():  # every method is upper-case letters
                async with asyncio.timeout(_LINE_WAIT):
                    line = first + (await reader.readuntil(b"\r\n"))[:-2]
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            line = b""
        if not _REQUEST_LINE.fullmatch(line):
            self.unrecognized += 1
            writer.transport.abort()
            return
        await self._answer_http(reader, writer, line, answer)

    async def _answer_http(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        line: bytes,
        answer: ErrorAnswer,
    ) -> None:
        """Read the rest of one HTTP/1.1 request whole, answer it, close the connection."""
        headers: dict[bytes, bytes] = {}
        try:
            while field := (await reader.readuntil(b"\r\n"))[:-2]:
                name, _, value = field.partition(b":")
                headers[name.strip().lower()] = value.strip().lower()
            if b"100-continue" not in headers.get(b"expect", b""):  # else the body never comes
                if b"chunked" in headers.get(b"transfer-encoding", b""):
                    await _read_chunked(reader)
                else:
                    await reader.readexactly(int(headers.get(b"content-length", b"0") or 0))
            await self._last_answer(
                reader, writer, answer.encode(head_only=line.startswith(b"HEAD "))
            )
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, OSError):
            writer.transport.abort()

    async def _answer_pg(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        first: bytes,
        answer: ErrorAnswer,
    ) -> None:
        """Decline an SSL or GSS encryption request (``N``), then answer the startup message
        with the error and close the connection, as a server that is starting up does."""
        try:
            while True:
                length = int.from_bytes(first + await reader.readexactly(3), "big")
                if not 8 <= length <= _HEAD_LIMIT:
                    raise ValueError(f"not a PostgreSQL startup packet: length {length}")
                async with asyncio.timeout(_LINE_WAIT):  # another protocol may send less
                    packet = await reader.readexactly(length - 4)
                code = int.from_bytes(packet[:4], "big")
                if code in (_PG_SSL_REQUEST, _PG_GSS_REQUEST):
                    writer.write(b"N")
                    await writer.drain()
                    first = await reader.readexactly(1)
                    continue
                if code >> 16 != 3:  # protocol 3.x
                    raise ValueError(f"not a PostgreSQL startup message: code {code}")
                await self._last_answer(reader, writer, answer.encode_pg())
                return
        except (TimeoutError, ValueError):  # another protocol, whose first byte is 0
            self.unrecognized += 1
            writer.transport.abort()
        except (asyncio.IncompleteReadError, OSError):
            writer.transport.abort()

    async def _last_answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: bytes
    ) -> None:
        """Send ``reply``, the connection's last, then wait for the client to close it (a
        server that closed first, with bytes unread, would reset it)."""
        writer.write(reply)
        await writer.drain()
        self.answered += 1
        writer.write_eof()
        while await reader.read(65536):
            pass

    async def _answer_resp(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: ErrorAnswer
    ) -> None:
        """Answer each Redis command (a RESP array of bulk strings, its ``*`` read) with
        the error, until the client closes the connection."""
        reply = answer.encode_resp()
        try:
            while True:
                count = int((await reader.readuntil(b"\r\n"))[:-2])
                for _ in range(count):
                    header = await reader.readuntil(b"\r\n")
                    if header[:1] != b"$":
                        raise ValueError(f"not a bulk string: {header[:20]!r}")
                    await reader.readexactly(int(header[1:-2]) + 2)
                writer.write(reply)
                await writer.drain()
                self.answered += 1
                if await reader.readexactly(1) != b"*":
                    raise ValueError("not a RESP array")
        except asyncio.IncompleteReadError:  # the client closed the connection
            writer.close()
        except (asyncio.LimitOverrunError, ValueError, OSError):
            writer.transport.abort()

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        direction: Literal["request", "response"],
        conn: _Conn,
    ) -> None:
        gate = self._open[direction]
        held: list[bytes] = []
        read: asyncio.Future[bytes] | None = None
        try:
            while True:
                if held and gate.is_set():
                    for chunk in held:
                        dst.write(chunk)
                    held.clear()
                    await dst.drain()
                if read is None and held and self._backpressure[direction]:
                    await gate.wait()  # read nothing more until resumed: the sender's buffers fill
                    continue
                if read is None:
                    read = asyncio.ensure_future(src.read(_READ))
                if not gate.is_set():
                    waiter: asyncio.Future[Any] = asyncio.ensure_future(gate.wait())
                    both: set[asyncio.Future[Any]] = {read, waiter}
                    try:
                        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waiter.cancel()
                        await asyncio.gather(waiter, return_exceptions=True)
                    if not read.done():
                        continue  # resumed: flush what is held, then read on
                try:
                    chunk = await read
                except (ConnectionError, OSError):
                    chunk = b""
                read = None
                if not chunk:  # the sender closed: held bytes are never delivered...
                    if held and direction == "request" and self._in_flight:
                        await gate.wait()  # ...unless they were on the wire: at resume
                        conn.answered.clear()
                        for late in held:
                            dst.write(late)
                        self.late_bytes += sum(map(len, held))
                        held.clear()
                        await dst.drain()
                        with contextlib.suppress(TimeoutError):  # the close comes after
                            await asyncio.wait_for(conn.answered.wait(), LATE_CLOSE_AFTER)
                    if held:
                        self.dropped_bytes += sum(map(len, held))
                        held.clear()
                    break
                opens = False  # these bytes open an exchange: a request after a reply
                if direction == "response":
                    conn.replied = True
                    conn.answered.set()
                else:
                    opens, conn.replied = conn.replied, False
                if self._armed:
                    if direction == "response":
                        self._answered = True
                    elif self._answered:
                        self._trip()  # a request after an answer: never forwarded
                        break
                if not gate.is_set() and not held and self._large[direction] and len(chunk) < _READ:
                    dst.write(chunk)  # a small request: the stall waits for a large one
                    await dst.drain()
                    continue
                if not gate.is_set() and not held and direction == "request" and self._exchanges:
                    if not opens or self._after[direction]:  # within an exchange let through
                        self._after[direction] -= opens
                        dst.write(chunk)
                        await dst.drain()
                        continue
                elif not gate.is_set() and not held and self._after[direction]:
                    self._after[direction] -= 1  # stalled, but forward this chunk first
                    dst.write(chunk)
                    await dst.drain()
                    continue
                if gate.is_set():
                    for earlier in held:  # resumed while this read completed: keep the order
                        dst.write(earlier)
                    held.clear()
                    dst.write(chunk)
                    await dst.drain()
                    continue
                if self._split[direction] and len(chunk) > 1:
                    self._split[direction] = False
                    half = len(chunk) // 2
                    dst.write(chunk[:half])
                    await dst.drain()
                    chunk = chunk[half:]
                held.append(chunk)
                self.held_bytes += len(chunk)
                self.stalled.set()
        except (ConnectionError, OSError):
            pass
        finally:
            if held:  # the connection ended (or was dropped) while these were held
                self.dropped_bytes += sum(map(len, held))
                held.clear()
            if read is not None:
                read.cancel()
                await asyncio.gather(read, return_exceptions=True)
            with contextlib.suppress(Exception):
                if dst.can_write_eof() and not dst.is_closing():
                    dst.write_eof()


async def _read_chunked(reader: asyncio.StreamReader) -> None:
    """Read (and drop) a body in chunked transfer coding, up to its last chunk and trailers."""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return
        await reader.readexactly(size + 2)

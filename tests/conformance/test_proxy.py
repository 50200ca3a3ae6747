"""The loopback stall proxy: forwards, holds mid-request and mid-response, never delivers
bytes of a closed sender later."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest
from checkpointkit.conformance import StallProxy
from checkpointkit.conformance import proxy as proxy_module
from checkpointkit.conformance.proxy import ErrorAnswer


class Sink:
    """A TCP server that records what it receives and answers ``ack:<n>`` per chunk."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.arrived = asyncio.Event()
        self.closed = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.handlers: list[asyncio.Task[None]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.append(task)
        try:
            while chunk := await reader.read(65536):
                self.received += chunk
                self.arrived.set()
                writer.write(b"ack:%d;" % len(self.received))
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self.closed.set()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return host, port


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    s = Sink()
    s.server = await asyncio.start_server(s.handle, "127.0.0.1", 0)
    async with s.server:
        yield s
        s.server.close()
        await asyncio.gather(*s.handlers, return_exceptions=True)


async def _bounded(aw: object, seconds: float = 5) -> object:
    async with asyncio.timeout(seconds):
        return await aw  # type: ignore[misc]


async def test_proxy_forwards_both_ways(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        writer.write(b"hello")
        await writer.drain()
        assert await _bounded(reader.readuntil(b";")) == b"ack:5;"
        assert bytes(sink.received) == b"hello"
        assert proxy.connections == 1
        writer.close()
        await writer.wait_closed()


async def test_request_stall_holds_the_second_half_until_resume(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        proxy.stall("request", partial=True)
        writer.write(b"0123456789")
        await writer.drain()
        await _bounded(proxy.stalled.wait())
        await _bounded(sink.arrived.wait())
        assert bytes(sink.received) == b"01234"  # mid-request: half arrived
        assert proxy.held_bytes == 5
        proxy.resume()
        assert await _bounded(reader.readuntil(b";")) == b"ack:5;"
        assert await _bounded(reader.readuntil(b";")) == b"ack:10;"
        assert bytes(sink.received) == b"0123456789"
        writer.close()
        await writer.wait_closed()


async def test_response_stall_holds_the_reply(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        proxy.stall("response", partial=False)
        writer.write(b"abc")
        await writer.drain()
        await _bounded(proxy.stalled.wait())
        assert bytes(sink.received) == b"abc"  # the server got the request
        read = asyncio.ensure_future(reader.readuntil(b";"))
        done, _ = await asyncio.wait({read}, timeout=0.05)
        assert not done  # the reply is held
        proxy.resume()
        assert await _bounded(read) == b"ack:3;"
        writer.close()
        await writer.wait_closed()


async def test_a_stall_after_n_chunks_forwards_them_then_holds_the_next(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        proxy.stall("response", partial=False, after=2)
        for i, part in enumerate((b"a", b"bb", b"ccc"), 1):
            writer.write(part)
            await writer.drain()
            if i < 3:  # the first two replies come through: one chunk each, one at a time
                assert await _bounded(reader.readuntil(b";")) == b"ack:%d;" % len(sink.received)
        await _bounded(proxy.stalled.wait())
        read = asyncio.ensure_future(reader.readuntil(b";"))
        done, _ = await asyncio.wait({read}, timeout=0.05)
        assert not done  # the third is held
        proxy.resume()
        assert await _bounded(read) == b"ack:6;"
        writer.close()
        await writer.wait_closed()


async def test_a_stall_after_n_exchanges_holds_the_request_that_opens_the_next(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        proxy.stall("request", partial=False, after=2, exchanges=True)
        for part in (b"a", b"bb"):  # two exchanges: a request, then its reply
            writer.write(part)
            await writer.drain()
            assert await _bounded(reader.readuntil(b";")) == b"ack:%d;" % len(sink.received)
        writer.write(b"ccc")  # the request after the second reply opens the third: held
        await _bounded(proxy.stalled.wait())
        assert bytes(sink.received) == b"abb"
        proxy.resume()
        assert await _bounded(reader.readuntil(b";")) == b"ack:6;"
        assert bytes(sink.received) == b"abbccc"
        writer.close()
        await writer.wait_closed()


async def test_a_stall_by_exchanges_forwards_every_chunk_sent_before_the_reply() -> None:
    lines = bytearray()
    arrived = asyncio.Condition()

    async def answer_each_line(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            async with arrived:
                lines.extend(chunk)
                arrived.notify_all()
            writer.write(b"ok;" * chunk.count(b"\n"))
            await writer.drain()
        writer.close()

    async def until_received(data: bytes) -> None:
        async with arrived:
            await _bounded(arrived.wait_for(lambda: bytes(lines) == data))

    server = await asyncio.start_server(answer_each_line, "127.0.0.1", 0)
    async with server, StallProxy(server.sockets[0].getsockname()[:2]) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        proxy.stall("request", partial=False, after=1, exchanges=True)
        writer.write(b"one ")  # the first exchange, in two chunks with no reply between
        await until_received(b"one ")
        writer.write(b"line\n")
        assert await _bounded(reader.readuntil(b";")) == b"ok;"
        writer.write(b"two\n")  # after the reply: the second exchange, held
        await _bounded(proxy.stalled.wait())
        assert bytes(lines) == b"one line\n"
        proxy.resume()
        await until_received(b"one line\ntwo\n")
        assert await _bounded(reader.readuntil(b";")) == b"ok;"
        writer.close()
        await writer.wait_closed()
        server.close()


async def test_a_stall_by_exchanges_is_for_requests_only(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        with pytest.raises(ValueError, match="exchanges counts requests: stall 'request'"):
            proxy.stall("response", exchanges=True)


async def test_stall_refuses_a_negative_count(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        with pytest.raises(ValueError, match="after must be an int >= 0, not -1"):
            proxy.stall("response", after=-1)


async def test_refuse_a_count_resets_that_many_new_connections_then_forwards(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        await proxy.refuse(connections=2)
        for _ in range(2):
            reader, writer = await asyncio.open_connection(*proxy.address)
            assert await _bounded(reader.read()) == b""  # reset at once
            writer.close()
        assert proxy.refused == 2 and not proxy.refusing
        reader, writer = await asyncio.open_connection(*proxy.address)
        writer.write(b"up")
        assert await _bounded(reader.readuntil(b";")) == b"ack:2;"
        writer.close()
        await writer.wait_closed()
        with pytest.raises(ValueError, match="connections must be an int >= 1 or None, not 0"):
            await proxy.refuse(connections=0)


async def _held_in_flight_then_reset(proxy: StallProxy) -> None:
    """A request held on the wire (``in_flight``), then its sender's reset."""
    _, writer = await asyncio.open_connection(*proxy.address)
    proxy.stall("request", partial=False, in_flight=True)
    writer.write(b"late write")
    await writer.drain()
    await _bounded(proxy.stalled.wait())
    writer.transport.abort()  # the client gives up with a reset


async def test_in_flight_request_bytes_arrive_after_their_sender_reset(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        await _held_in_flight_then_reset(proxy)
        await asyncio.sleep(0)
        assert bytes(sink.received) == b""
        proxy.resume()
        await _bounded(sink.closed.wait())  # delivered, then the server's side closed
        assert bytes(sink.received) == b"late write"
        assert proxy.late_bytes == 10 and proxy.dropped_bytes == 0


async def test_in_flight_request_bytes_are_answered_before_the_close_reaches_the_server() -> None:
    """Held request bytes delivered after their sender closed are followed by the close
    only once the server answered them: a server that drops a request whose connection
    closed (an HTTP server cancelling its handler) still runs it, as behind a link or a
    proxy that delivers a request whole before its close."""
    closed_before_answer: list[bool] = []
    answered = asyncio.Event()

    async def slow_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read(65536)  # the request
            try:  # it works on the request for 0.2 s, watching for the close
                async with asyncio.timeout(0.2):
                    closed_before_answer.append(await reader.read(1) == b"")
            except TimeoutError:
                closed_before_answer.append(False)
            writer.write(b"done")
            await writer.drain()
            answered.set()
        finally:
            writer.close()

    server = await asyncio.start_server(slow_server, "127.0.0.1", 0)
    async with server, StallProxy(server.sockets[0].getsockname()[:2]) as proxy:
        await _held_in_flight_then_reset(proxy)
        proxy.resume()
        await _bounded(answered.wait())
        assert closed_before_answer == [False]


async def test_held_bytes_of_a_closed_sender_are_never_delivered(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        _, writer = await asyncio.open_connection(*proxy.address)
        proxy.stall("request", partial=True)
        writer.write(b"ABCDEFGH")
        await writer.drain()
        await _bounded(proxy.stalled.wait())
        writer.close()  # the client gives up (a cancelled call dropping its connection)
        await writer.wait_closed()
        await _bounded(sink.closed.wait())
        proxy.resume()
        assert bytes(sink.received) == b"ABCD"
        assert proxy.dropped_bytes == 4


async def test_drop_resets_every_connection(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        writer.write(b"x")
        await writer.drain()
        await _bounded(reader.readuntil(b";"))
        await proxy.drop()
        assert await _bounded(reader.read()) == b""
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_refuse_after_an_answer_goes_down_at_the_next_request(sink: Sink) -> None:
    """Armed, the proxy forwards a request and its answer; the next request is never
    forwarded, its connection is reset, and a new connection is refused until `accept`."""
    async with StallProxy(sink.address) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        proxy.refuse_after_an_answer()
        writer.write(b"first")
        await writer.drain()
        assert await _bounded(reader.readuntil(b";")) == b"ack:5;"
        assert not proxy.tripped  # answered: not down yet
        writer.write(b"second")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        with contextlib.suppress(ConnectionError):
            assert await _bounded(reader.read()) == b""  # reset, not answered
        assert proxy.tripped
        assert bytes(sink.received) == b"first"  # the request after the answer never arrived
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        r2, w2 = await asyncio.open_connection(*proxy.address)
        with contextlib.suppress(ConnectionError):
            assert await _bounded(r2.read()) == b""  # refused while down
        assert proxy.refused == 1
        w2.close()
        with contextlib.suppress(ConnectionError):
            await w2.wait_closed()
        proxy.accept()
        r3, w3 = await asyncio.open_connection(*proxy.address)
        w3.write(b"again")
        await w3.drain()
        assert await _bounded(r3.readuntil(b";")) == b"ack:10;"
        w3.close()
        await w3.wait_closed()


async def test_refuse_after_an_answer_never_trips_on_one_request(sink: Sink) -> None:
    """A request that is answered, and nothing after it, leaves the proxy up."""
    async with StallProxy(sink.address) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        proxy.refuse_after_an_answer()
        writer.write(b"only")
        await writer.drain()
        assert await _bounded(reader.readuntil(b";")) == b"ack:4;"
        proxy.accept()
        assert not proxy.tripped
        writer.write(b"next")
        await writer.drain()
        assert await _bounded(reader.readuntil(b";")) == b"ack:8;"
        writer.close()
        await writer.wait_closed()


async def test_proxy_refuses_a_non_loopback_upstream() -> None:
    with pytest.raises(ValueError, match="loopback"):
        StallProxy(("192.0.2.1", 80))


# -- answer: a server that is up and answers every request with an error --------------------
async def _exchange(proxy: StallProxy, request: bytes) -> bytes:
    """Send ``request`` on a new connection; everything the proxy sends until it closes."""
    reader, writer = await asyncio.open_connection(*proxy.address)
    try:
        writer.write(request)
        await writer.drain()
        return await _bounded(reader.read(), 5)  # type: ignore[return-value]
    finally:
        await _close(writer)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        b"PUT /b/k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n0\r\nx-trailer: t\r\n\r\n",
        b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        b"GET /b/k HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
    ids=["content-length", "chunked", "expect-100-continue", "get"],
)
async def test_answer_reads_each_request_whole_and_answers_it_with_the_error(
    sink: Sink, request_bytes: bytes
) -> None:
    async with StallProxy(sink.address) as proxy:
        await proxy.answer(ErrorAnswer())
        response = await _exchange(proxy, request_bytes)
        head, _, body = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), response
        assert b"\r\nConnection: close" in head and b"\r\nRetry-After: 0" in head
        assert body == ErrorAnswer().encode().partition(b"\r\n\r\n")[2]
        assert b"<Code>ServiceUnavailable</Code>" in body
        assert (proxy.answered, proxy.unrecognized, bytes(sink.received)) == (1, 0, b"")


async def test_answer_sends_no_body_to_a_head_request(sink: Sink) -> None:
    async with StallProxy(sink.address) as proxy:
        await proxy.answer(ErrorAnswer(status=500, reason="Internal Server Error", code="X"))
        response = await _exchange(proxy, b"HEAD /b/k HTTP/1.1\r\nHost: x\r\n\r\n")
        assert response.startswith(b"HTTP/1.1 500 Internal Server Error\r\n"), response
        assert response.endswith(b"\r\n\r\n") and b"x-ms-error-code: X\r\n" in response


async def test_answer_answers_each_redis_command_and_keeps_the_connection(sink: Sink) -> None:
    """Two commands sent at once (a pipeline), then a third: each gets the error."""
    answer = ErrorAnswer(resp="LOADING Redis is loading the dataset in memory")
    async with StallProxy(sink.address) as proxy:
        await proxy.answer(answer)
        reader, writer = await asyncio.open_connection(*proxy.address)
        try:
            writer.write(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n")
            reply = b"-LOADING Redis is loading the dataset in memory\r\n"
            assert await _bounded(reader.readexactly(2 * len(reply))) == 2 * reply
            writer.write(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n")
            assert await _bounded(reader.readexactly(len(reply))) == reply
            proxy.accept()  # the server is back: the kept connection is reset, not answered
            with contextlib.suppress(ConnectionResetError):
                assert await _bounded(reader.read()) == b""
        finally:
            await _close(writer)
        assert (proxy.answered, proxy.unrecognized, bytes(sink.received)) == (3, 0, b"")


async def test_answer_declines_ssl_then_answers_a_postgresql_startup_with_the_error(
    sink: Sink,
) -> None:
    startup_body = (3 << 16).to_bytes(4, "big") + b"user\0u\0database\0d\0\0"
    startup = (len(startup_body) + 4).to_bytes(4, "big") + startup_body
    async with StallProxy(sink.address) as proxy:
        await proxy.answer(ErrorAnswer())
        reader, writer = await asyncio.open_connection(*proxy.address)
        try:
            writer.write((8).to_bytes(4, "big") + (80877103).to_bytes(4, "big"))  # SSLRequest
            assert await _bounded(reader.readexactly(1)) == b"N"
            writer.write(startup)
            kind, length = await _bounded(reader.readexactly(1)), await reader.readexactly(4)
            body = await reader.readexactly(int.from_bytes(length, "big") - 4)
            assert kind == b"E" and b"C57P03\0" in body and b"SFATAL\0" in body, body
            assert await _bounded(reader.read()) == b""  # then the server closes
        finally:
            await _close(writer)
        assert (proxy.answered, proxy.unrecognized, bytes(sink.received)) == (1, 0, b"")


@pytest.mark.parametrize(
    "first_bytes",
    [
        b"\x16\x03\x01\x00\xa5",
        b"HELLO 3",
        b"+OK\r\n",
        b"\x00\x00\x00\x10\x82\xa2op",
        b"\x00\x00\x00\x0c\x00\x01\x00\x00\x00\x00\x00\x00",
    ],
    ids=["tls-hello", "unended-line", "resp-reply", "short-frame", "zero-led-frame"],
)
async def test_answer_resets_a_connection_of_another_protocol(
    sink: Sink, first_bytes: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TLS client hello, a line that never ends, a RESP reply where a command belongs, a
    length-prefixed frame shorter than its length says, one whose first word is no
    PostgreSQL protocol: closed without an answer, and counted."""
    monkeypatch.setattr(proxy_module, "_LINE_WAIT", 0.2)
    async with StallProxy(sink.address) as proxy:
        await proxy.answer(ErrorAnswer())
        assert await _closed_without_an_answer(proxy, first_bytes)
        assert (proxy.answered, proxy.unrecognized) == (0, 1)


async def test_answer_resets_the_open_connections_and_accept_forwards_again(sink: Sink) -> None:
    loop = asyncio.get_running_loop()
    async with StallProxy(sink.address) as proxy:
        with socket.create_connection(proxy.address) as before:
            before.setblocking(False)
            await _bounded(loop.sock_sendall(before, b"x"))
            await _bounded(sink.arrived.wait())
            await proxy.answer(ErrorAnswer())
            with contextlib.suppress(ConnectionResetError):
                assert await _bounded(loop.sock_recv(before, 100)) == b""
        proxy.accept()
        reader, writer = await asyncio.open_connection(*proxy.address)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        assert await _bounded(reader.read(8), 5) == b"ack:19;"  # the sink counts all it got
        await _close(writer)


async def _closed_without_an_answer(proxy: StallProxy, first_bytes: bytes) -> bool:
    """Whether the proxy closes (or resets) a new connection that sends ``first_bytes``
    without sending anything back."""
    loop = asyncio.get_running_loop()
    with socket.create_connection(proxy.address) as client:
        client.setblocking(False)
        await _bounded(loop.sock_sendall(client, first_bytes))
        try:
            return await _bounded(loop.sock_recv(client, 100)) == b""
        except ConnectionResetError:
            return True


async def test_a_stall_with_backpressure_leaves_a_large_request_in_the_client(sink: Sink) -> None:
    big = 16 * 1024 * 1024
    async with StallProxy(sink.address, receive_buffer=64 * 1024) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        proxy.stall("request", partial=True, backpressure=True, large=True)
        writer.write(b"BEGIN")  # a small request goes through the stall
        await asyncio.wait_for(reader.readuntil(b";"), 10)
        assert bytes(sink.received) == b"BEGIN"
        writer.write(bytes(big))  # a large one is held, and the proxy stops reading it
        await asyncio.wait_for(proxy.stalled.wait(), 10)
        pending = writer.transport.get_write_buffer_size()
        assert pending > 8 * 1024 * 1024, pending  # most of it still in the client's buffer
        assert len(sink.received) < 1024 * 1024  # reads shorter than 64 KiB, then half of one
        proxy.resume()
        await asyncio.wait_for(writer.drain(), 30)
        while len(sink.received) < 5 + big:
            sink.arrived.clear()
            await asyncio.wait_for(sink.arrived.wait(), 10)
        assert len(sink.received) == 5 + big
        writer.transport.abort()

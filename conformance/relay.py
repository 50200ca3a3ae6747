"""A loopback relay that delivers a request late: the server side of a cancellation race.

`StallProxy` stops forwarding; this
relay instead forwards everything it received, ``delay`` seconds late, even after the
client hung up. It reproduces, deterministically, a server that holds a whole request
and applies it after the client's cancellation returned, which is what a network
adapter's cancelled write must settle before it raises.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["LateRelay"]


class LateRelay:
    """A loopback TCP relay that hands what a client sends to the server ``delay`` s late.

    What it has received is delivered even if the client hangs up meanwhile: it
    models a server that holds a whole request and applies it late, which no client
    can stop by closing (or resetting) its connection. Replies are relayed back
    while the client is there.

    Use it with ``async with``; leaving closes every connection.

    Attributes:
        answered: set whenever the server sends bytes back (clear it to watch one reply).
    """

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        self.upstream = upstream
        self.delay = delay
        self.answered = asyncio.Event()
        self._received = asyncio.Event()
        self._logs: list[bytearray] = []
        self._in_transit = 0
        self._handlers: set[asyncio.Task[Any]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._timers: list[asyncio.TimerHandle] = []
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` to pass as the storage's ``endpoint``."""
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def in_transit(self) -> int:
        """Chunks received from clients and not yet handed to the server."""
        return self._in_transit

    async def __aenter__(self) -> LateRelay:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for timer in self._timers:
            timer.cancel()
        for writer in self._writers:  # each handler then sees both sides closed, and returns
            writer.transport.abort()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=5)
        await self._server.wait_closed()

    async def holding(self, needle: bytes) -> None:
        """Wait until one connection has received ``needle`` (e.g. a whole request body)."""
        async with asyncio.timeout(10):
            while not any(needle in log for log in self._logs):
                self._received.clear()
                await self._received.wait()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        loop = asyncio.get_running_loop()
        log = bytearray()
        self._logs.append(log)
        self._writers.append(writer)
        up_writer: asyncio.StreamWriter | None = None
        back: asyncio.Task[None] | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            self._writers.append(up_writer)
            back = asyncio.ensure_future(self._answer(up_reader, writer))
            while True:
                try:
                    chunk = await reader.read(65536)
                except ConnectionError:
                    chunk = b""
                if not chunk:
                    break
                log += chunk
                self._received.set()
                self._in_transit += 1
                self._timers.append(loop.call_later(self.delay, self._deliver, up_writer, chunk))
            await back  # the client is gone: keep the server's side open until the relay closes
        finally:
            if back is not None:
                back.cancel()
                await asyncio.gather(back, return_exceptions=True)
            for w in (writer, up_writer):
                if w is not None:
                    w.close()
                    with contextlib.suppress(Exception):
                        await w.wait_closed()
            self._handlers.discard(task)

    def _deliver(self, up_writer: asyncio.StreamWriter, chunk: bytes) -> None:
        self._in_transit -= 1
        if not up_writer.is_closing():
            up_writer.write(chunk)

    async def _answer(self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await up_reader.read(65536):
                self.answered.set()
                if not writer.is_closing():
                    writer.write(chunk)

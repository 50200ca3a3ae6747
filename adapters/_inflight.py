"""Cancelling an HTTP write so that it does not land later: settle it, else reset it.

Once a server holds the whole request of a ``PUT`` (or a ``DELETE``), it may apply
it after the client gave up: a write cancelled while its reply is awaited lands
"later", after the ``CancelledError``, and a read made just after the
cancellation sees the old value, then the new one. The S3 and Azure adapters
therefore run each write attempt through `settle`:

- the attempt runs in its own task, shielded from the caller's cancellation;
- when the caller is cancelled and the attempt holds no connection (its request
  has not been sent, or its reply has been read), the attempt is cancelled at once;
- when it holds a connection (the request may be on the wire), it is given up to
  ``grace`` seconds to finish: a server that answers within the grace has then
  applied the write (or refused it) before the cancellation propagates;
- when the grace runs out (a server that stopped answering), the attempt's
  connection is reset (``SO_LINGER`` 0, then ``abort()``: a TCP RST, so that
  bytes still queued in the client's buffers are discarded, not flushed by a
  graceful close) and the attempt is cancelled;
- in every case the caller's ``CancelledError`` is raised again, never
  swallowed, and the attempt's task has ended (or, if it ignored its
  cancellation, is handed to the storage, which waits for it in ``aclose()``).
  A second cancellation while waiting cuts the grace short.

What remains possible: a server that received the whole request but neither
applied nor answered it within the grace may still apply it after the reset. No
client can prevent that over HTTP; the adapters' documentation says so.

An attempt's task that outlives all this goes to the storage's `Background`,
which ``aclose()`` waits for.

To know which connections an attempt holds, the adapters wrap their aiohttp
connector with `track_connections`: each connection handed out is recorded
in the attempt that asked for it (a context variable set by `settle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import socket
import struct
import sys
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = [
    "SETTLE_BOUND",
    "Attempt",
    "Background",
    "CallsUnderWay",
    "no_hidden_resend",
    "recording",
    "settle",
    "track_connections",
]

T = TypeVar("T")

SETTLE_BOUND = 1.0
"""Seconds to wait for an attempt's task to end once it has been reset and cancelled."""

_LINGER_RESET = struct.pack("HH" if sys.platform == "win32" else "ii", 1, 0)
"""``SO_LINGER`` on, 0 seconds: closing the socket sends a reset and drops unsent bytes."""

_TRACKED = "_checkpointkit_tracked"


class Attempt:
    """The connections that one request attempt has taken from its connector.

    `settle` records them; `sent` then tells whether the attempt's
    request may have left the client (a write that fails after that is
    indeterminate, see `OutcomeUnknown`).
    """

    __slots__ = ("connections", "transports")

    def __init__(self) -> None:
        self.connections: list[Any] = []  # aiohttp Connection objects
        self.transports: list[Any] = []  # their transports, as handed out

    def sent(self) -> bool:
        """Whether the attempt was ever handed a connection: its request may have left.

        False means that it never got a connection (the TCP connect failed or
        never finished), so nothing of the request reached a server.
        """
        return bool(self.connections)

    def on_wire(self) -> bool:
        """Whether the attempt holds a connection: its request may have been (partly) sent.

        aiohttp drops a connection's protocol once it is released (the reply was
        read) or closed, so a connection handed back to the pool never counts.
        """
        return any(conn.protocol is not None for conn in self.connections)

    def reset(self) -> None:
        """Reset every connection that the attempt still holds (a TCP RST), and every one
        of its connections that is closing gracefully: aiohttp closes the connection of a
        request that failed or timed out with ``transport.close()``, which keeps the socket
        open until the request's buffered bytes are sent, for ever on a link that stopped
        moving, and then sends them. A connection handed back to the pool is neither."""
        for conn, transport in zip(self.connections, self.transports, strict=True):
            if transport is None or not (conn.protocol is not None or transport.is_closing()):
                continue
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            transport.abort()

    def close(self) -> None:
        """Reset, then close, every connection that the attempt still holds: one whose
        attempt failed or was cancelled mid-request or mid-reply is never reused, and is
        closed now rather than when the garbage collector finds the response holding it
        (aiohttp's "Unclosed connection")."""
        self.reset()
        for conn in self.connections:
            if conn.protocol is not None:
                conn.close()


_ATTEMPT: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
    "checkpointkit_http_attempt", default=None
)


def track_connections(connector: Any) -> Any:
    """Make an aiohttp connector record each connection it hands out in the current attempt.

    Idempotent; returns ``connector``. Outside `settle` nothing is recorded.

    Args:
        connector: an ``aiohttp.BaseConnector`` (its ``connect`` is wrapped on the instance).
    """
    if getattr(connector, _TRACKED, False):
        return connector
    ref = weakref.ref(connector)  # no reference cycle through the instance's own attribute
    connect = type(connector).connect

    async def tracked_connect(*args: Any, **kwargs: Any) -> Any:
        owner = ref()
        assert owner is not None  # it is calling us
        conn = await connect(owner, *args, **kwargs)
        attempt = _ATTEMPT.get()
        if attempt is not None:  # no await between the connection and this record
            attempt.connections.append(conn)
            protocol = conn.protocol
            attempt.transports.append(None if protocol is None else protocol.transport)
        return conn

    connector.connect = tracked_connect
    setattr(connector, _TRACKED, True)
    return connector


def no_hidden_resend(session: Any) -> Any:
    """Stop an ``aiohttp.ClientSession`` from resending a request by itself; returns it.

    aiohttp resends an idempotent request (``PUT`` and ``DELETE`` included) once
    when a kept-alive connection drops before the reply. For a write, the first
    send may have been applied: resent unseen, its outcome is hidden from the
    adapter, whose own retries know that an earlier attempt was indeterminate
    (see `checkpointkit.adapters._retry.call`). The switch is aiohttp's
    private ``_retry_connection`` (aiohttp 3.9 and later); without it, nothing
    changes.
    """
    if session is not None and hasattr(session, "_retry_connection"):
        session._retry_connection = False
    return session


@contextlib.contextmanager
def recording(record: Attempt) -> Iterator[None]:
    """Record in ``record`` the connections that the enclosed code takes (in this task, and
    in the tasks it starts); close those it still holds when it fails or is cancelled."""
    token = _ATTEMPT.set(record)
    try:
        yield
    except BaseException:
        record.close()
        raise
    finally:
        _ATTEMPT.reset(token)


async def settle(
    attempt: Callable[[], Coroutine[Any, Any, T]],
    grace: float,
    adopt: Callable[[asyncio.Task[Any]], None],
    record: Attempt | None = None,
) -> T:
    """Run one write attempt; on cancellation, let it settle for ``grace`` s, else reset it.

    Args:
        attempt: makes the coroutine of one request attempt (with its own timeout).
        grace: seconds that an attempt holding a connection may take to finish
            once the caller is cancelled; 0 resets it at once.
        adopt: takes an attempt's task that ignored its cancellation for
            `SETTLE_BOUND` seconds (the storage waits for it when closed).
        record: where the attempt's connections are recorded (a fresh one if
            None); the caller reads `Attempt.sent` from it afterwards.

    Raises:
        asyncio.CancelledError: the caller was cancelled (always raised again,
            whatever the attempt's outcome).
        Exception: whatever the attempt raised.
    """
    record = Attempt() if record is None else record
    context = contextvars.copy_context()
    context.run(_ATTEMPT.set, record)
    task = asyncio.get_running_loop().create_task(attempt(), context=context)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await _wind_down(task, record, grace, adopt)
        raise


async def _wind_down(
    task: asyncio.Task[Any],
    record: Attempt,
    grace: float,
    adopt: Callable[[asyncio.Task[Any]], None],
) -> None:
    """The caller was cancelled: end ``task`` (settled, or reset and cancelled)."""
    if not task.done() and grace > 0 and record.on_wire():
        with contextlib.suppress(asyncio.CancelledError):  # cancelled again: reset now
            await asyncio.wait({task}, timeout=grace)
    if not task.done():
        record.reset()  # before the cancellation, so that no graceful close flushes the body
        task.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_BOUND
        while not task.done() and (left := deadline - loop.time()) > 0:
            # A further cancellation changes nothing: the caller's is raised again anyway,
            # and the task, reset and cancelled, ends within a few loop iterations.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task}, timeout=left)
        if not task.done():
            adopt(task)
            return
    if not task.cancelled():
        task.exception()  # retrieved: the caller's cancellation supersedes the outcome


class Background:
    """The tasks that a storage waits for when closed.

    Writes that ignored their cancellation (handed over by `settle`), and
    clean-ups started on cancellation so that it stays prompt. A task's failure
    is nobody's to raise: it is retrieved and dropped.
    """

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def spawn(self, work: Awaitable[Any]) -> None:
        """Run ``work`` (a coroutine, or adopt a task) until it ends."""
        task: asyncio.Task[Any] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a background task's failure is nobody's to raise

    async def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the tasks, then cancel the rest and wait for them."""
        if self._tasks:
            tasks = list(self._tasks)
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


class CallsUnderWay:
    """A storage's calls under way, which ``aclose()`` lets end before it closes the client.

    Each call is counted with its deadline (a request's: ``timeout`` plus one second per
    MiB of its body), so that ``aclose()`` lets a large upload end though it outlasts
    ``timeout``. An operation of two requests (a read of the version, then the
    conditional delete) ends one call and starts the next in the same turn of the event
    loop: `ended` looks at the calls when it runs, not when it was woken, so that such a
    gap never lets the client close under the second request.
    """

    __slots__ = ("_deadlines", "_none")

    def __init__(self) -> None:
        self._deadlines: dict[object, float] = {}
        self._none = asyncio.Event()
        self._none.set()

    @contextlib.contextmanager
    def call(self, deadline: float) -> Iterator[None]:
        """Count the enclosed call as under way until it ends, or until ``deadline``
        (event-loop time) has passed."""
        token = object()
        self._deadlines[token] = deadline
        self._none.clear()
        try:
            yield
        finally:
            del self._deadlines[token]
            if not self._deadlines:
                self._none.set()

    async def ended(self, slack: float = SETTLE_BOUND) -> bool:
        """Wait until no call is under way, or until every call under way is ``slack``
        seconds past its deadline (a call ends soon after its deadline, when its
        attempt is cancelled); whether none is under way."""
        loop = asyncio.get_running_loop()
        while self._deadlines:
            left = max(self._deadlines.values()) + slack - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._none.wait(), left)
        return True

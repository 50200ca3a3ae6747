"""One timeout for every operation of a storage, kept by one timer.

``asyncio.timeout`` costs about 7 µs per use on a small machine (a ``Timeout``
object, a timer handle scheduled and cancelled, the task's cancel count), paid
by every operation of a network adapter, where a whole operation may cost
150 µs. `SharedTimeout` gives the same behaviour for operations that all have
the same timeout, at a fraction of that: an operation joins a set on entry and
leaves it on exit, and one timer, armed for the earliest deadline in flight,
cancels those past it, which then raise ``TimeoutError``. The Redis and
PostgreSQL adapters wrap each operation in it::

    self._timeouts = SharedTimeout(timeout)
    ...
    with self._timeouts():
        reply = await connection.send(request)
"""

from __future__ import annotations

import asyncio
from types import TracebackType

__all__ = ["SharedTimeout"]


class SharedTimeout:
    """Cancels operations that pass their deadline, with one timer for all of them.

    What ``asyncio.timeout`` does for each operation, at a fraction of its cost
    (this wraps every operation): an operation only joins a set on entry and
    leaves it on exit; one timer handle, armed for the earliest deadline in
    flight, cancels the operations whose deadline has passed, and the
    operation then raises ``TimeoutError``. All operations of a storage share
    one timeout, so a later operation never has an earlier deadline. A
    cancellation that the caller requested meanwhile still propagates as
    ``CancelledError``.
    """

    __slots__ = ("_handle", "_idle", "_loop", "_ops", "timeout")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._ops: set[_Operation] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: asyncio.Event | None = None

    async def drained(self) -> None:
        """Return once no operation of another task is in flight (``aclose``)."""
        current = asyncio.current_task()
        while any(op.task is not current for op in self._ops):
            self._idle = asyncio.Event()
            await self._idle.wait()

    def _left(self) -> None:
        if self._idle is not None:
            self._idle.set()

    def __call__(self) -> _Operation:
        return _Operation(self)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._handle is not None and self._loop is not loop:  # a new event loop
            self._handle.cancel()
            self._handle = None
        if self._handle is None:
            self._loop = loop
            self._handle = loop.call_at(when, self._check)

    def _check(self) -> None:
        self._handle = None
        loop = self._loop
        assert loop is not None
        now = loop.time()
        earliest = None
        for op in self._ops:
            if op.fired:
                continue
            if op.deadline <= now:
                op.fired = True
                op.task.cancel()
            elif earliest is None or op.deadline < earliest:
                earliest = op.deadline
        if earliest is not None:
            self._arm(loop, earliest)

    def close(self) -> None:
        """Drop the timer (``aclose``)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class _Operation:
    """One operation's entry in `SharedTimeout`; a context manager around it."""

    __slots__ = ("cancelling", "deadline", "fired", "owner", "task")

    def __init__(self, owner: SharedTimeout) -> None:
        self.owner = owner

    def __enter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None, "a storage operation runs in a task"
        loop = asyncio.get_running_loop()
        self.task = task
        self.cancelling = task.cancelling()
        self.fired = False
        self.deadline = loop.time() + self.owner.timeout
        self.owner._ops.add(self)
        self.owner._arm(loop, self.deadline)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.owner._ops.discard(self)
        self.owner._left()
        if (
            self.fired
            and self.task.uncancel() <= self.cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError(f"no answer within {self.owner.timeout:g} s") from exc

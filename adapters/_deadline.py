"""Server-side deadlines for writes: what a client knows of a server's clock, and the wait.

A network adapter that declares ``settles_cancelled_writes`` (Redis, PostgreSQL)
sends each write with a deadline in the *server's* clock, and the server does
nothing with a write that it runs past it. A cancelled write then waits, holding
nothing, until the server has surely passed that deadline, and only then raises
``CancelledError``: any copy of the request that still reaches the server does
nothing. This module keeps the two parts that do not depend on the backend:

- `ServerClock`: an interval for ``server time - loop.time()``, narrowed
  by every reading of the server's clock and widened by `DRIFT` per
  second since, and the deadline of a write sent now;
- `settle`: wait until a local time, also when cancelled meanwhile.

See "Settling cancelled writes" in ``docs/adapters/redis.md`` and
``docs/adapters/postgres.md``.
"""

from __future__ import annotations

import asyncio
import math

__all__ = ["DRIFT", "MARGIN", "SLOWER", "ServerClock", "settle"]

DRIFT = 1e-3
"""How fast, at most, the server's clock and the client's monotonic clock drift apart
(seconds per second): NTP slews a clock by at most 500 ppm, so two by at most 1,000."""

MARGIN = 0.002
"""Seconds added to every settling wait: the server clock's resolution and float rounding."""

SLOWER = 1 / (1 - DRIFT)
"""Local seconds for a server second to surely pass, at the worst drift."""


class ServerClock:
    """What the client knows of one server's clock.

    ``server time - loop.time()`` (seconds) lies in ``[lo, hi]`` as of the
    local time ``at``, and the interval widens by `DRIFT` per second
    since. Every reading of the server's clock narrows it: the server read its
    clock between the request's send and the reply's arrival.
    """

    __slots__ = ("at", "hi", "lo")

    def __init__(self) -> None:
        self.lo = -math.inf
        self.hi = math.inf
        self.at = -math.inf

    def add(self, server: float, sent: float, received: float) -> None:
        """Narrow the interval with the server's clock ``server`` (seconds) read between
        the local times ``sent`` and ``received``."""
        slack = DRIFT * (received - sent)
        lo, hi = server - received - slack, server - sent + slack
        aged = DRIFT * (received - self.at) if self.at > -math.inf else 0.0
        new_lo, new_hi = max(lo, self.lo - aged), min(hi, self.hi + aged)
        if new_lo > new_hi:  # the server's clock was stepped: only the new sample holds
            new_lo, new_hi = lo, hi
        self.lo, self.hi, self.at = new_lo, new_hi, received

    def deadline(self, now: float, window: float, window_min: float) -> tuple[float, float]:
        """The deadline (server seconds) of a write sent at local time ``now``, and when to settle.

        The write gets ``window`` seconds, less the width of the interval (at
        least ``window_min``). Returns the deadline and the local time after
        which the server has surely passed it.
        """
        aged = DRIFT * (now - self.at)
        lo = self.lo - aged
        hi = self.hi + aged
        window = max(window - (hi - lo), window_min)
        return now + hi + window, now + (hi - lo + window) * SLOWER


async def settle(until: float) -> bool:
    """Wait until the local time ``until``, also if cancelled meanwhile (bounded: a grace).

    Returns whether a cancellation arrived during the wait (the caller raises it).
    """
    loop = asyncio.get_running_loop()
    cancelled = False
    while (left := until - loop.time()) > 0:
        try:
            await asyncio.sleep(left)
        except asyncio.CancelledError:
            cancelled = True
    return cancelled

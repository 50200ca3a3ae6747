"""Watching for late landings: what a cancelled or failed write does *after* it ended.

A write whose caller saw ``CancelledError`` (or an error) is indeterminate
unless the adapter declares
`settles_cancelled_writes`: it may
still take effect later (a thread still writing, bytes already in a socket).
`SettleWatch` reads each such key through an *observer* (a second
storage from the same factory at the same location, for shared backends, so
that the read is not queued behind the write on the same client), and keeps
reading every key until the settle window has passed since its write ended.

- A value that is neither one the test allows (the old or the new value) is a
  torn write: always a failure.
- A change after the write ended is a *late landing*. For an adapter that
  declares ``settles_cancelled_writes`` it is a failure naming the key, the
  delay and the fix; for one that does not, the protocol allows it, and the
  test's outcome becomes *indeterminate* (see `record_indeterminate`).
- A write that lands twice (its value was seen, overwritten by a later write,
  and then came back) is always a failure: an indeterminate write takes
  effect at most once.

Watching is cheap: every key of a test is registered first, then one loop
polls all of them together, once per round, until the last key's window has
passed; a test waits the window once, not once per key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..storage import Storage
from .checks import describe, fail, get_or_none
from .settings import DEFAULT_SETTLE_WINDOW, INDETERMINATE

__all__ = [
    "DEFAULT_SETTLE_WINDOW",
    "INDETERMINATE",
    "Landing",
    "SettleWatch",
    "record_indeterminate",
]


FIX = (
    "To fix it, make the cancelled operation unable to commit once CancelledError is raised: "
    "wait for its thread or request to finish within a bounded grace, or abort it (a flag "
    "checked under a lock right before the commit, as FileStorage does); if the backend "
    "cannot promise that, do not declare settles_cancelled_writes"
)


@dataclass
class Landing:
    """One change seen after a write had ended.

    Attributes:
        key: the key that changed.
        what: the operation, as text (``"put"``, ``"delete"``).
        before: what the key held when the write ended (as the observer saw it).
        after: what it held then.
        delay: seconds from the end of the write (``CancelledError``) to the
            first read that saw the change.
        context: how the write ended (``"cancelled 3 event-loop iterations
            after it started"``).
        twice: the write's own value had been seen and overwritten before it
            came back: it took effect twice.
    """

    key: str
    what: str
    before: bytes | None
    after: bytes | None
    delay: float
    context: str
    twice: bool = False

    def text(self) -> str:
        """One sentence describing the landing."""
        return (
            f"key {self.key!r}: a {self.what} {self.context} changed it from "
            f"{describe(self.before)} to {describe(self.after)} {self.delay:.3f} s after "
            "CancelledError was raised"
        )


@dataclass
class _Watched:
    key: str
    what: str
    observed: bytes | None
    allowed: tuple[bytes | None, ...]
    since: float
    context: str
    written: bytes | None  # the cancelled write's own value (or None for a delete)
    seen_written: bool  # its value was observed before a later write replaced it
    landing: Landing | None = None


@dataclass
class SettleWatch:
    """Watches keys for a late landing through ``observer``; see the module documentation.

    Args:
        observer: the storage to read through (a second client, or the same
            one for a target that cannot open two).
        window: seconds each key is watched after its write ended.
        settles: the adapter declares ``settles_cancelled_writes``.
        node: the pytest item (or None), for `record_indeterminate`.
        second_client: ``observer`` is a second storage (for messages).
        interval: seconds between polling rounds.
    """

    observer: Storage
    window: float
    settles: bool
    node: Any = None
    second_client: bool = False
    interval: float = 0.02
    _keys: list[_Watched] = field(default_factory=list)

    async def read(self, key: str) -> bytes | None:
        """What ``key`` holds now, as the observer sees it (None: missing)."""
        got = await get_or_none(self.observer, key)
        return None if got is None else got.data

    def add(
        self,
        key: str,
        observed: bytes | None,
        *,
        what: str,
        since: float,
        context: str,
        allowed: Sequence[bytes | None],
        written: bytes | None = None,
        seen_written: bool = False,
    ) -> None:
        """Watch ``key``, which held ``observed`` when its write ended at ``since``.

        Args:
            key: the key.
            observed: its value right after the write ended (through the observer).
            what: the operation (``"put"``, ``"delete"``).
            since: ``time.monotonic()`` when the write ended.
            context: how it ended, for messages.
            allowed: every whole value the key may hold (anything else is torn).
            written: the cancelled write's value (None for a delete).
            seen_written: that value was already seen before a later write
                replaced it; seeing it again means it took effect twice.
        """
        self._keys.append(
            _Watched(key, what, observed, tuple(allowed), since, context, written, seen_written)
        )

    async def settle(self) -> list[Landing]:
        """Poll every key until its window has passed; judge what changed.

        Returns:
            The late landings seen (empty: none). For an adapter that does not
            declare ``settles_cancelled_writes`` they are recorded as an
            indeterminate outcome of the test.

        Raises:
            ConformanceFailure: a torn value, a write that took effect twice,
                or a late landing on an adapter that declares it settles.
        """
        pending = list(self._keys)
        while pending:
            start = time.monotonic()
            values = await asyncio.gather(*(self.read(w.key) for w in pending))
            now = time.monotonic()
            for w, value in zip(pending, values, strict=True):
                if value == w.observed:
                    continue
                self._torn(w, value, now)
                landing = Landing(
                    w.key,
                    w.what,
                    w.observed,
                    value,
                    now - w.since,
                    w.context,
                    twice=w.seen_written and w.written is not None and value == w.written,
                )
                if landing.twice:
                    fail(
                        f"a cancelled {w.what} must take effect at most once",
                        key=w.key,
                        expected=f"it to keep holding {describe(w.observed)}, written after the "
                        f"cancelled {w.what}'s own value had been seen",
                        observed=f"the cancelled {w.what}'s value {describe(value)} came back "
                        f"{landing.delay:.3f} s after CancelledError ({w.context}): it was "
                        "applied twice (a retry of a write whose reply was lost?)",
                        detail="To fix it, never re-send a write that may have reached the "
                        "backend, unless the backend deduplicates it (an idempotency key, a "
                        "conditional write on the version read before)",
                    )
                if w.landing is None:
                    w.landing = landing
                w.observed = value
            pending = [w for w in pending if now < w.since + self.window]
            if pending:
                await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - start)))
        landings = [w.landing for w in self._keys if w.landing is not None]
        self._keys.clear()
        if landings:
            self._judge(landings)
        return landings

    def _torn(self, w: _Watched, value: bytes | None, now: float) -> None:
        if value in w.allowed:
            return
        refs = [v for v in w.allowed if v is not None]
        fail(
            f"a cancelled {w.what} must be whole or absent, also later",
            key=w.key,
            expected="only the whole old or the whole new value, ever",
            observed=f"{now - w.since:.3f} s after CancelledError ({w.context}) it held "
            f"{describe(value, reference=refs)}",
        )

    def _judge(self, landings: list[Landing]) -> None:
        first = min(landings, key=lambda x: x.delay)
        how = (
            "a second client of the same data"
            if self.second_client
            else "the same client (the target cannot open a second one)"
        )
        summary = (
            f"{len(landings)} of the watched writes landed after CancelledError was raised, "
            f"as seen through {how} within the {self.window:g} s settle window; the first: "
            + first.text()
        )
        if self.settles:
            fail(
                f"a cancelled {first.what} must not land later "
                "(the adapter declares settles_cancelled_writes)",
                key=first.key,
                expected=f"it to keep holding {describe(first.before)} once CancelledError "
                "was raised",
                observed=f"it changed to {describe(first.after)} {first.delay:.3f} s later "
                f"({first.context}); {len(landings)} watched write(s) landed late",
                detail=FIX,
            )
        record_indeterminate(
            self.node,
            summary + ". The adapter does not declare settles_cancelled_writes, so the "
            "protocol allows this (the write's outcome is unknown); declare it only if "
            "nothing can land once CancelledError is raised",
        )


def record_indeterminate(node: Any, text: str) -> None:
    """Mark the running test's outcome as indeterminate, with ``text`` as the reason.

    The test passes as far as pytest's exit status goes; the plugin shows it
    as ``INDETERMINATE`` and the report as the ``indeterminate`` outcome.
    """
    if node is None:
        return
    node.user_properties.append((INDETERMINATE, text))

"""Assertion helpers whose failures read as one paragraph: the promise, the key,
what was expected and what was observed.

Every failure of the suite is a `ConformanceFailure` built by
`fail`, so that a report (or a pytest run) says, for example::

    create-only put must refuse an existing key: put('k', mode='create') on key
    'k' should raise PreconditionFailed, but it returned version '7'; the key
    now holds b'new' (4 bytes) instead of b'old' (3 bytes).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

from ..errors import NotFound
from ..storage import GetResult, Storage

__all__ = [
    "ConformanceFailure",
    "describe",
    "expect",
    "expect_keys",
    "expect_listed_in_turn",
    "expect_missing",
    "expect_raises",
    "expect_value",
    "fail",
    "get_or_none",
    "joined",
    "listed",
    "watch_stable",
]

T = TypeVar("T")


class ConformanceFailure(AssertionError):
    """A storage broke a promise; the message is one readable paragraph."""


def describe(value: object, *, reference: Iterable[bytes] = ()) -> str:
    """A short human description of a value, for failure messages.

    Bytes are shown in full when short, else by size, first bytes and a digest;
    when ``reference`` values are given, a value that is a strict prefix of one
    of them is called out ("the first N bytes of ...").
    """
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        text = repr(data) if len(data) <= 48 else f"{data[:16]!r}... ({_digest(data)})"
        text += f" ({len(data)} bytes)" if len(data) != 1 else " (1 byte)"
        for ref in reference:
            if len(data) < len(ref) and ref.startswith(data):
                text += f", only the first {len(data)} of the {len(ref)} bytes written"
                break
        return text
    if value is None:
        return "nothing (the key is missing)"
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}" if str(value) else type(value).__name__
    return repr(value)


def listed(items: Iterable[object], limit: int = 10) -> str:
    """``items`` as a list for a message, the first ``limit`` shown and the rest counted."""
    items = list(items)
    shown = ", ".join(repr(i) for i in items[:limit])
    more = len(items) - limit
    return f"[{shown}]" if more <= 0 else f"[{shown}] and {more} more"


def joined(findings: Sequence[str], limit: int = 8) -> str:
    """``findings`` joined by ``; `` for a message, the first ``limit`` shown and the rest
    counted (``a; b (and 3 more)``)."""
    more = len(findings) - limit
    return "; ".join(findings[:limit]) + (f" (and {more} more)" if more > 0 else "")


def short_key(key: object, limit: int = 60) -> str:
    """``repr(key)``, abbreviated in the middle when long."""
    text = repr(key)
    if len(text) <= limit:
        return text
    size = len(key) if isinstance(key, str) else len(text)
    return f"{text[: limit // 2]}...{text[-limit // 4 :]} ({size} chars)"


def _digest(data: bytes) -> str:
    return "sha256 " + hashlib.sha256(data).hexdigest()[:12]


def fail(
    promise: str,
    *,
    key: str | None = None,
    expected: str,
    observed: str,
    detail: str = "",
) -> NoReturn:
    """Raise a `ConformanceFailure` stating what broke.

    Args:
        promise: the promise in words ("create-only put must refuse an existing key").
        key: the key involved, if any.
        expected: what should have happened.
        observed: what happened instead.
        detail: a further sentence (how the test got there, a hint).

    Raises:
        ConformanceFailure: always.
    """
    __tracebackhide__ = True  # pytest shows the test's line, then the message
    where = f" (key {short_key(key)})" if key is not None else ""
    text = f"{promise}{where}: expected {expected}, but {observed}."
    if detail:
        text += f" {detail.rstrip('.')}."
    raise ConformanceFailure(text)


def expect(
    condition: bool,
    promise: str,
    *,
    key: str | None = None,
    expected: str,
    observed: str,
    detail: str = "",
) -> None:
    """`fail` unless ``condition`` holds."""
    __tracebackhide__ = True  # pytest shows the test's line, then the message
    if not condition:
        fail(promise, key=key, expected=expected, observed=observed, detail=detail)


async def get_or_none(storage: Storage, key: str) -> GetResult | None:
    """``storage.get(key)``, or None when the key is missing."""
    try:
        return await storage.get(key)
    except NotFound:
        return None


async def expect_value(
    storage: Storage,
    key: str,
    expected: bytes | None,
    *,
    promise: str,
    version: str | None = None,
    detail: str = "",
) -> GetResult | None:
    """Check that ``key`` holds ``expected`` (None: that it is missing).

    Also checks that ``get`` returns ``bytes`` and a ``str`` version, and, when
    ``version`` is given, that the stored version is that one.

    Returns:
        What ``get`` returned (None for a missing key).
    """
    __tracebackhide__ = True  # pytest shows the test's line, then the message
    got = await get_or_none(storage, key)
    if expected is None:
        if got is not None:
            fail(
                promise,
                key=key,
                expected="the key to be missing",
                observed=f"it holds {describe(got.data)}",
                detail=detail,
            )
        return None
    if got is None:
        fail(
            promise,
            key=key,
            expected=f"it to hold {describe(expected)}",
            observed="get() raised NotFound",
            detail=detail,
        )
    if type(got.data) is not bytes:
        fail(
            promise,
            key=key,
            expected="get() to return the data as bytes",
            observed=f"it returned {type(got.data).__name__}",
            detail=detail,
        )
    if not isinstance(got.version, str) or not got.version:
        fail(
            promise,
            key=key,
            expected="get() to return a non-empty str version",
            observed=f"it returned {got.version!r}",
            detail=detail,
        )
    if got.data != expected:
        fail(
            promise,
            key=key,
            expected=f"it to hold {describe(expected)}",
            observed=f"it holds {describe(got.data, reference=[expected])}",
            detail=detail,
        )
    if version is not None and got.version != version:
        fail(
            promise,
            key=key,
            expected=f"version {version!r} (returned by the put)",
            observed=f"get() reports version {got.version!r}",
            detail=detail,
        )
    return got


async def expect_missing(storage: Storage, key: str, *, promise: str, detail: str = "") -> None:
    """Check that ``get(key)`` raises NotFound."""
    __tracebackhide__ = True  # pytest shows the test's line, then the message
    await expect_value(storage, key, None, promise=promise, detail=detail)


async def expect_raises(
    exc_type: type[BaseException] | tuple[type[BaseException], ...],
    awaitable: Awaitable[T],
    *,
    promise: str,
    call: str,
    key: str | None = None,
    detail: str = "",
) -> BaseException:
    """Await ``awaitable`` and check that it raises ``exc_type``.

    Args:
        exc_type: the exception type(s) expected.
        awaitable: the operation.
        promise: the promise in words.
        call: the call as text, for the message (``"put('k', b'x', mode='create')"``).
        key: the key involved.
        detail: a further sentence for the message (how to fix it).

    Returns:
        The exception raised.
    """
    __tracebackhide__ = True  # pytest shows the test's line, then the message
    names = (
        exc_type.__name__
        if isinstance(exc_type, type)
        else " or ".join(t.__name__ for t in exc_type)
    )
    try:
        result = await awaitable
    except exc_type as exc:
        return exc
    except Exception as exc:
        fail(
            promise,
            key=key,
            expected=f"{call} to raise {names}",
            observed=f"it raised {describe(exc)}",
            detail=detail,
        )
    fail(
        promise,
        key=key,
        expected=f"{call} to raise {names}",
        observed=f"it returned {describe(result)}",
        detail=detail,
    )


async def collect(keys: AsyncIterator[str], *, bound: int = 100_000) -> list[str]:
    """Every key of a listing (at most ``bound``, so a looping listing ends)."""
    out: list[str] = []
    async for key in keys:
        out.append(key)
        if len(out) >= bound:
            break
    return out


async def expect_keys(
    storage: Storage,
    expected: list[str],
    *,
    promise: str,
    prefix: str = "",
    start_after: str | None = None,
    limit: int | None = None,
) -> list[str]:
    """Check that a listing returns exactly ``expected``, in that order."""
    __tracebackhide__ = True  # pytest shows the test's line, then the message
    call = f"list({prefix!r}" + (
        f", start_after={start_after!r}" if start_after is not None else ""
    )
    call += (f", limit={limit}" if limit is not None else "") + ")"
    got = await collect(
        storage.list(prefix, start_after=start_after, limit=limit), bound=len(expected) + 1000
    )
    if got != expected:
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        parts = []
        if extra:
            parts.append(f"unexpected keys {_few(extra)}")
        if missing:
            parts.append(f"missing keys {_few(missing)}")
        if not parts:
            parts.append(f"the order {_few(got)}")
        if len(got) != len(set(got)):
            parts.append("duplicates")
        fail(
            promise,
            expected=f"{call} to return {len(expected)} keys {_few(expected)}",
            observed=f"it returned {len(got)} keys, with " + ", ".join(parts),
        )
    return got


def _few(keys: list[str], n: int = 6) -> str:
    shown = ", ".join(repr(k) for k in keys[:n])
    return f"[{shown}{', ...' if len(keys) > n else ''}]"


async def watch_stable(
    storage: Storage,
    key: str,
    observed: bytes | None,
    *,
    promise: str,
    seconds: float,
    detail: str = "",
) -> None:
    """Poll ``key`` for ``seconds`` and fail as soon as it differs from ``observed``.

    A bounded observation, not a sleep: it returns early only with a failure.
    """
    __tracebackhide__ = True  # pytest shows the test's line, then the message
    deadline = time.monotonic() + seconds
    polls = 0
    while True:
        got = await get_or_none(storage, key)
        data = None if got is None else got.data
        if data != observed:
            fail(
                promise,
                key=key,
                expected=f"it to keep holding {describe(observed)} after the cancellation returned",
                observed=f"it changed to {describe(data)} {polls} polls later",
                detail=detail,
            )
        polls += 1
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.01)


def call_text(op: str, key: object, *args: Any, **kwargs: Any) -> str:
    """``op(key, args..., kw=...)`` as text for messages; long values shortened."""
    parts = (
        [_short(key)] + [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    )
    return f"{op}({', '.join(parts)})"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:30] + f"...<{len(text)} chars>"


async def expect_listed_in_turn(
    wanted: Mapping[str, tuple[AsyncIterable[str], list[str]]], promise: str, detail: str
) -> None:
    """Read the listings of ``wanted`` (name -> listing, the keys it must return) a key at a
    time each, in turn, until each ends; each must return exactly its own keys."""
    __tracebackhide__ = True
    seen: dict[str, list[str]] = {name: [] for name in wanted}
    open_ = {name: listing.__aiter__() for name, (listing, _) in wanted.items()}
    while open_:
        for name, listing in list(open_.items()):
            try:
                seen[name].append(await listing.__anext__())
            except StopAsyncIteration:
                del open_[name]
    for name, (_, expected) in wanted.items():
        if seen[name] != expected:
            fail(
                promise,
                key=expected[0],
                expected=f"{name} to return {expected}",
                observed=f"it returned {seen[name]}, read in turn with "
                + ", ".join(n for n in wanted if n != name),
                detail=detail,
            )

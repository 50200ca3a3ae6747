"""The ``lifecycle`` test of connections that the server closed while they were idle.

A server that restarts, or closes a connection idle longer than its timeout (PostgreSQL's
``idle_session_timeout``, Redis's ``timeout``, an HTTP server's keep-alive timeout), closes
the connections a client keeps for later. The close reaches the client before its next
call; a client that looks at a kept connection before it uses it (asyncpg marks it closed,
aiohttp drops it from its pool) opens a new one, and the call answers as if nothing had
happened. One that sends the next call on it meets the closed connection: a read fails
where a new connection would have answered, and a write fails with an outcome it cannot
know (the request may have reached a server that died after applying it, so it must not
send it again either). Clause ``error.idle-closed``: through the stall proxy, every
connection is closed by the server's side while no call is under way, and each operation
that comes after must answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import StorageError
from ..storage import IfMatch, Storage
from ..storage import delete_many as delete_many_of
from .checks import collect, describe, fail
from .clauses import checks
from .fixtures import StorageFixtures, proxied_target
from .proxy import StallProxy
from .target import Target, new_location
from .unavailable import UNAVAILABLE_BOUND, _a

__all__ = ["CLOSE_NOTICED", "IdleClosedTests"]

CLOSE_NOTICED = 0.1
"""Seconds between the server's close of the idle connections and the next call: the close
has reached the client's socket when the proxy is done closing (loopback); the client's
event loop, running meanwhile, reads it in its next iteration."""


@dataclass(frozen=True)
class _Case:
    """One operation: on a key that holds ``b"before"`` (``present``) or is missing, and the
    answer it must give (``answer(result, version)``: the version of ``b"before"``)."""

    op: str
    present: bool
    call: Callable[[Storage, str, str], Awaitable[Any]]
    answer: Callable[[Any, str], bool]
    expected: str


_AFTER = b"after"

_CASES = (
    _Case("get", True, lambda s, k, v: s.get(k), lambda r, v: r.data == b"before", "the value"),
    _Case("put", True, lambda s, k, v: s.put(k, _AFTER), lambda r, v: r != v, "a new version"),
    _Case(
        "put if-match",
        True,
        lambda s, k, v: s.put(k, _AFTER, mode=IfMatch(v)),
        lambda r, v: r != v,
        "a new version",
    ),
    _Case(
        "put create",
        False,
        lambda s, k, v: s.put(k, _AFTER, mode="create"),
        lambda r, v: isinstance(r, str),
        "a version",
    ),
    _Case("delete", True, lambda s, k, v: s.delete(k), lambda r, v: r is True, "True"),
    _Case(
        "delete if-match",
        True,
        lambda s, k, v: s.delete(k, if_match=v),
        lambda r, v: r is True,
        "True",
    ),
    _Case("list", True, lambda s, k, v: collect(s.list(k)), lambda r, v: len(r) == 1, "the key"),
    _Case(
        "delete_many",
        True,
        lambda s, k, v: delete_many_of(s, [k, f"{k}/none"]),
        lambda r, v: r == 1,
        "1 (of the key and a missing one)",
    ),
)


class IdleClosedTests(StorageFixtures):
    """Each operation after the server closed the idle connections of its client."""

    conformance_group: ClassVar[str | None] = "lifecycle"

    @checks("error.idle-closed")
    async def test_every_operation_after_the_server_closed_its_idle_connections_answers(
        self,
        storage_target: Target | None,
        supports_conditional_put: bool,
        supports_conditional_delete: bool,
    ) -> None:
        """On a storage behind a new stall proxy, for each operation in turn (a get, a put
        in every mode declared with its condition holding, a delete and an if-match one
        where declared, a listing, a ``delete_many``): the key is set up through the
        storage (which opens what its client keeps), the proxy closes every connection
        from the server's side (with a FIN, as a restart or an idle timeout does),
        `CLOSE_NOTICED` seconds pass, and the operation runs. It must give its true
        answer within `UNAVAILABLE_BOUND` seconds: not ``StorageUnavailable`` (nothing was
        wrong with the server) and not ``OutcomeUnknown`` (a client that looks at a kept
        connection before it sends on it knows the server closed it)."""
        target = proxied_target(storage_target, "no connection can be closed by the server")
        assert target.upstream is not None  # (proxyable)
        left_out = {
            "put if-match": not supports_conditional_put,
            "put create": not supports_conditional_put,
            "delete if-match": not supports_conditional_delete,
        }
        location = new_location() if target.reopens else None
        async with (
            StallProxy(target.upstream) as proxy,
            target.open(endpoint=proxy.address, location=location) as storage,
        ):
            for case in _CASES:
                if left_out.get(case.op):
                    continue
                key = f"idle-closed/{case.op.replace(' ', '-')}"
                setup = storage.put(key if case.present else f"{key}/other", b"before")
                version = await _within(setup, "a put", key, "setting the key up")
                await proxy.drop(abort=False)
                await asyncio.sleep(CLOSE_NOTICED)
                context = "after the server closed the client's idle connections"
                result = await _within(case.call(storage, key, version), case.op, key, context)
                if not case.answer(result, version):
                    fail(
                        f"{_a(case.op)} {context} must give its true answer",
                        key=key,
                        expected=case.expected,
                        observed=f"it answered {describe(result)}",
                    )


async def _within(call: Awaitable[Any], op: str, key: str, context: str) -> Any:
    """What ``call`` answers within `UNAVAILABLE_BOUND`; an error or no answer fails."""
    __tracebackhide__ = True
    try:
        async with asyncio.timeout(UNAVAILABLE_BOUND):
            return await call
    except TimeoutError:
        fail(
            f"{_a(op)} {context} must answer",
            key=key,
            expected=f"its answer within {UNAVAILABLE_BOUND:g} s",
            observed="it did not",
        )
    except StorageError as exc:
        fail(
            f"{_a(op)} {context} must answer",
            key=key,
            expected="its answer: the server is up, only the connections it had were closed",
            observed=f"it raised {type(exc).__name__}: {exc}",
            detail="look at a kept connection before sending on it (the close has arrived: "
            "the socket reads end of file), and open a new one if the server closed it; "
            "a write must not be sent again after a failure (its outcome is unknown), "
            "so it must not be sent on such a connection in the first place",
        )

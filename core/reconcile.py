"""Writes that stay correct when their outcome is unknown: repeat, then read back.

A put or delete that raises `OutcomeUnknown` may
have happened, or may still happen (see "Writes whose outcome is unknown" in
`checkpointkit.storage`). The functions here repeat such a write, and
settle the conflict a repeat can meet by reading what is stored: the layers
above the storage protocol (the checkpoint store, the integrations) write
through them, so that a lost reply is never reported as a failure, and a
failure is never reported as success.

Why repeating is safe: records are create-only and heads move by
compare-and-swap, so an earlier attempt that lands late either fails its
precondition or stores what a repeat stored already. Unconditional overwrites
are repeated with the same bytes.
"""

from __future__ import annotations

import contextlib

from .errors import NotFound, OutcomeUnknown, PreconditionFailed
from .storage import GetResult, PutMode, Storage

__all__ = ["ATTEMPTS", "create", "delete", "delete_as_read", "put"]

ATTEMPTS = 3
"""Attempts of one write whose outcome keeps coming back unknown, before it raises."""


async def create(storage: Storage, key: str, data: bytes) -> GetResult | None:
    """Create ``key`` once: None if this call stored ``data``, else what is stored there.

    The caller compares what is stored: the same bytes mean an earlier attempt
    of this write (whose reply was lost) stored them.

    Raises:
        OutcomeUnknown: every attempt's outcome was unknown.
    """
    for attempt in range(ATTEMPTS):
        try:
            await storage.put(key, data, mode="create")
            return None
        except PreconditionFailed:
            try:
                return await storage.get(key)
            except NotFound:
                continue  # deleted in between: try again
        except OutcomeUnknown:
            if attempt == ATTEMPTS - 1:
                raise
    raise OutcomeUnknown(f"could not create {key!r}: it was deleted under every attempt")


async def put(storage: Storage, key: str, data: bytes, mode: PutMode = "overwrite") -> str:
    """``storage.put``, repeating an attempt whose outcome is unknown.

    A precondition that fails after such an attempt is checked by reading the
    key: if it holds exactly ``data``, the earlier attempt landed, and its
    version is returned. Otherwise the failure stands.

    Raises:
        PreconditionFailed: the condition does not hold (and ``data`` is not stored).
        OutcomeUnknown: every attempt's outcome was unknown.
    """
    uncertain = False
    for attempt in range(ATTEMPTS):
        try:
            return await storage.put(key, data, mode=mode)
        except PreconditionFailed:
            if not uncertain:
                raise
            try:
                stored = await storage.get(key)
            except NotFound:
                raise PreconditionFailed(
                    f"key {key!r}: the condition failed and the key is gone"
                ) from None
            if stored.data == data:
                return stored.version  # the earlier attempt landed; its reply was lost
            raise
        except OutcomeUnknown:
            uncertain = True
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def delete(storage: Storage, key: str, *, if_match: str | None = None) -> bool:
    """``storage.delete``, repeating an attempt whose outcome is unknown.

    After such an attempt the answer of a repeat is what is reported: a key
    that the earlier attempt deleted reads as not existing. A conditional
    delete whose repeat fails its condition succeeded if the key is gone.

    Raises:
        PreconditionFailed: ``if_match`` does not hold (and the key is there).
        OutcomeUnknown: every attempt's outcome was unknown.
    """
    uncertain = False
    for attempt in range(ATTEMPTS):
        try:
            return await storage.delete(key, if_match=if_match)
        except PreconditionFailed:
            if not uncertain:
                raise
            try:
                await storage.get(key)
            except NotFound:
                return True  # the earlier attempt deleted it
            raise
        except OutcomeUnknown:
            uncertain = True
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def delete_as_read(storage: Storage, key: str) -> None:
    """Delete ``key`` as it is now: one get, then `delete` if it is unchanged.

    Afterwards the key is gone, or holds a write made after the get: such a
    write is kept.

    Raises:
        OutcomeUnknown: every attempt's outcome was unknown.
    """
    try:
        _, version = await storage.get(key)
    except NotFound:
        return
    with contextlib.suppress(PreconditionFailed):
        await delete(storage, key, if_match=version)

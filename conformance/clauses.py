"""The clauses of the storage protocol: one stable id per rule, and the tests that check them.

Every rule of ``docs/storage-protocol.md`` (and each runner guarantee that the
lifecycle group drives over an adapter, from ``docs/runner.md``) is a
`Clause` with a short, readable, stable id such as ``put.atomic`` or
``list.start-after``. The protocol page shows each id next to its rule, as an
anchor (``storage-protocol.md#put.atomic``) that the report links to.

A test of the suite names the clauses it checks with `checks`::

    class SemanticsTests(StorageFixtures):
        @checks("put.create.existing")
        async def test_create_only_rejects_existing_key(self, storage): ...

The ids are stored on the function (``__conformance_clauses__``, read back with
`clauses_of`), like the group of ``conformance/groups.py``, and this
module imports nothing optional: the pytest plugin and the report read it
without pytest.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["CLAUSES", "PROTOCOL_PAGE", "Clause", "checks", "clause", "clauses_of"]

PROTOCOL_PAGE = "storage-protocol.md"
"""The docs page (relative to ``docs/``) that states the storage protocol."""

RUNNER_PAGE = "runner.md"


@dataclass(frozen=True)
class Clause:
    """One rule of the protocol.

    Attributes:
        id: the stable id, ``topic.rule`` (lowercase, ``.`` and ``-``), e.g. ``put.atomic``.
        title: the rule in one line, as a promise.
        page: the docs page that states it, relative to ``docs/``.
        anchor: the anchor of the rule on that page (the id itself on the protocol page).
    """

    id: str
    title: str
    page: str = PROTOCOL_PAGE
    anchor: str = ""

    @property
    def doc(self) -> str:
        """The rule's address in the docs, ``page#anchor``."""
        return f"{self.page}#{self.anchor or self.id}"


def _runner(id: str, title: str, anchor: str) -> Clause:
    return Clause(id, title, page=RUNNER_PAGE, anchor=anchor)


CLAUSES: tuple[Clause, ...] = (
    # -- put ------------------------------------------------------------------------------
    Clause("put.round-trip", "put stores the exact bytes; get returns them, at every size"),
    Clause("put.returns-version", "put returns the new version, the one get then reports"),
    Clause("put.atomic", "a reader sees the whole old value or the whole new one, never a part"),
    Clause(
        "put.bytes-like",
        "bytearray and memoryview data are accepted and read back as bytes, as they were "
        "when the put returned",
    ),
    # -- get ------------------------------------------------------------------------------
    Clause("get.missing", "get of a missing key raises NotFound, which is also a KeyError"),
    # -- delete ---------------------------------------------------------------------------
    Clause("delete.existing", "delete removes the key and returns True"),
    Clause("delete.missing", "delete of a missing key returns False"),
    Clause("delete.if-match.current", "delete with the stored version deletes the key"),
    Clause(
        "delete.if-match.stale",
        "delete with a version that is not the stored one raises PreconditionFailed "
        "and keeps the value",
    ),
    Clause("delete.if-match.missing", "delete with if_match of a missing key returns False"),
    Clause(
        "delete.conditional.one-winner",
        "of concurrent conditional deletes (and if-match puts) of one version, exactly one wins",
    ),
    Clause(
        "delete.one-true",
        "of concurrent unconditional deletes of one stored value, exactly one returns True",
    ),
    # -- delete_many ----------------------------------------------------------------------
    Clause("delete-many.count", "delete_many deletes every key given and returns how many existed"),
    Clause(
        "delete-many.one-true",
        "of a delete_many and concurrent deletes (or delete_many calls) of one stored value, "
        "exactly one counts it",
    ),
    Clause(
        "delete-many.each-atomic",
        "each key of a delete_many is deleted as one delete is: a write racing it lands wholly "
        "before (and is deleted) or after (a conditional one finds the key missing)",
    ),
    Clause(
        "delete-many.any-size",
        "delete_many takes any number of keys: a batch larger than the backend takes at once "
        "is split, and every key of it deleted and counted",
    ),
    Clause(
        "delete-many.validates-first",
        "delete_many with one invalid key raises InvalidKey and deletes nothing",
    ),
    # -- list -----------------------------------------------------------------------------
    Clause("list.order", "list yields keys in ascending code-point order, each once"),
    Clause("list.prefix-only", "list yields every key of the prefix and never one outside it"),
    Clause("list.start-after", "list yields only keys greater than start_after (exclusive)"),
    Clause("list.limit", "list yields at most limit keys, the first ones in order"),
    Clause("list.pages", "a listing longer than a page yields every key, none twice"),
    Clause("list.reflects-writes", "a listing shows every completed put and no deleted key"),
    Clause(
        "list.concurrent-writes",
        "while other tasks write the prefix, every key present for the whole listing is "
        "yielded exactly once, in order",
    ),
    # -- aclose ---------------------------------------------------------------------------
    Clause(
        "close.idempotent",
        "aclose may be called again, and returns; a call made while another is closing "
        "returns when that one has ended",
    ),
    Clause("close.storage-closed", "every operation after aclose raises StorageClosed"),
    Clause(
        "close.open-listing",
        "the next page of a listing started before aclose raises StorageClosed",
    ),
    Clause(
        "close.in-flight",
        "operations in flight during aclose each end with their own answer or "
        "StorageClosed, whole or absent; none is still running once aclose returns",
    ),
    Clause(
        "close.context-manager",
        "async with gives the storage, closes it on exit and lets an exception in the block go on",
    ),
    Clause(
        "close.releases",
        "when aclose returns, no session, socket, file or thread of the storage is left, "
        "also when it was cancelled",
    ),
    Clause(
        "close.other-storages",
        "aclose closes its own storage object only: another one of the same backend, open "
        "at the same time, answers on",
    ),
    Clause(
        "close.backend-down",
        "aclose returns and releases everything while the backend is down: it has nothing "
        "left to ask it",
    ),
    # -- put modes ------------------------------------------------------------------------
    Clause("put.overwrite", "an overwrite put always writes, replacing the value"),
    Clause("put.create.missing", 'a "create" put writes a missing key'),
    Clause("put.create.existing", 'a "create" put on an existing key raises PreconditionFailed'),
    Clause("put.if-match.current", "an IfMatch put with the stored version writes"),
    Clause(
        "put.if-match.stale",
        "an IfMatch put with an earlier version of the key raises PreconditionFailed",
    ),
    Clause(
        "put.if-match.foreign",
        "an IfMatch put with a version never issued for the key (another key's, empty, "
        "made up) raises PreconditionFailed",
    ),
    Clause("put.if-match.missing", "an IfMatch put on a missing key raises PreconditionFailed"),
    Clause(
        "put.refused-changes-nothing",
        "a refused conditional put or delete leaves the value and version as they were",
    ),
    Clause(
        "put.conditional.one-winner",
        "of concurrent writers with the same condition, exactly one wins",
    ),
    Clause("put.mode.unknown", "any other put mode raises ValueError naming the key"),
    # -- versions -------------------------------------------------------------------------
    Clause("version.opaque-str", "a version is a str"),
    Clause("version.changes", "every write of a key mints a new version"),
    Clause(
        "version.never-repeats",
        "a version never comes back, also after a delete and a re-create",
    ),
    Clause(
        "version.exact-match",
        "versions compare as exact strings: '013' never matches '13', nor '²', '*' or ''",
    ),
    # -- errors ---------------------------------------------------------------------------
    Clause("error.names-key", "an error about a key names the key"),
    Clause(
        "error.no-credentials",
        "no repr, error or chained error of a storage shows a password of its URL",
    ),
    Clause(
        "error.loses-nothing",
        "a refused call (bad key, data or argument) loses nothing already stored",
    ),
    Clause("error.invalid-key", "a key or prefix that breaks the key rules raises InvalidKey"),
    Clause("error.data-type", "data that is not bytes-like raises TypeError"),
    Clause("error.arg-type", "an if_match or start_after that is not a str raises TypeError"),
    Clause("error.limit-negative", "a negative list limit raises ValueError"),
    Clause(
        "error.own-call",
        "a refused call fails only itself: the writes issued at the same time all land",
    ),
    Clause(
        "error.unavailable",
        "a backend failure raises StorageUnavailable with the backend's error chained",
    ),
    Clause(
        "error.healthy-after",
        "after a call fails (a timeout, a lost connection) the next call gets its own answer, "
        "never the late reply of the failed one",
    ),
    Clause(
        "error.idle-closed",
        "a connection the server closed while it was idle fails no later call: each answers",
    ),
    Clause(
        "error.outcome-unknown",
        "a write whose reply is lost answers truly or raises OutcomeUnknown, never a false "
        "PreconditionFailed, False or 'nothing happened'",
    ),
    # -- cancellation ---------------------------------------------------------------------
    Clause("cancel.prompt", "a cancelled operation raises CancelledError promptly"),
    Clause(
        "cancel.whole-or-absent",
        "a cancelled put or delete has fully happened, or not at all, or happens later whole",
    ),
    Clause(
        "cancel.healthy-after",
        "after a cancellation the next operation gets its own answer, never a stale reply",
    ),
    Clause(
        "cancel.nothing-left",
        "a cancellation leaves no task pending, no coroutine never awaited, no thread writing",
    ),
    Clause(
        "cancel.no-late-landing",
        "with settles_cancelled_writes, nothing of a cancelled write lands after CancelledError",
    ),
    Clause(
        "cancel.held-backend",
        "cancellation is prompt and whole also while the backend has stopped answering",
    ),
    # -- keys -----------------------------------------------------------------------------
    Clause("key.max-length", "a key of up to 1024 UTF-8 bytes is valid and round-trips"),
    Clause("key.too-long", "a key longer than 1024 UTF-8 bytes raises InvalidKey"),
    Clause("key.invalid.empty", "the empty key (or a non-str key) raises InvalidKey"),
    Clause("key.invalid.surrogate", "a key with a lone surrogate raises InvalidKey"),
    Clause(
        "key.invalid.character",
        "a key with NUL, a backslash or a control character raises InvalidKey",
    ),
    Clause("key.invalid.slash", "a key that starts or ends with / raises InvalidKey"),
    Clause("key.invalid.empty-segment", "a key with an empty segment (a//b) raises InvalidKey"),
    Clause("key.invalid.dot", "a key with a . segment raises InvalidKey"),
    Clause("key.invalid.dotdot", "a key with a .. segment raises InvalidKey"),
    Clause(
        "key.prefix",
        "a prefix follows the key rules for its complete segments; its last may be partial "
        "or empty",
    ),
    Clause(
        "key.one-to-one",
        "distinct keys stay distinct (case twins, NFC and NFD, odd characters): no two share "
        "a backend name",
    ),
    Clause(
        "key.multi-byte",
        "keys of any valid character (multi-byte, URL-special, dots) round-trip and list exactly",
    ),
    # -- capabilities ---------------------------------------------------------------------
    Clause("cap.declared", "an adapter declares its capabilities as a Capabilities instance"),
    Clause(
        "cap.durable",
        "with durable, data survives closing and reopening the storage, and the death of "
        "the process that wrote it",
    ),
    Clause(
        "cap.shared",
        "with shared, a second client sees and races on the same data, and the versions "
        "the clients mint never repeat",
    ),
    Clause(
        "ttl.expires",
        "with ttl, a key expires the configured time after its last write, whichever put "
        "made it; then no operation finds it (get, list, a create-only put, a conditional "
        "delete)",
    ),
    Clause(
        "ttl.not-early",
        "with ttl, a key stays until the configured time after its last write (an "
        "overwrite, a create-only put and an if-match put each start its time again)",
    ),
    Clause(
        "ttl.across-reopen",
        "with ttl and durable, a key keeps its expiry when the storage is closed and opened "
        "again: it expires on time through the new storage",
    ),
    Clause(
        "cap.indexed-list",
        "with indexed_list, a listing costs about a get however many keys are stored",
    ),
    # -- hygiene --------------------------------------------------------------------------
    Clause("hygiene.never-awaited", "no coroutine of the storage is left never awaited"),
    Clause("hygiene.no-task-left", "no task of the storage is left pending or destroyed pending"),
    Clause("hygiene.no-unraisable", "no unraisable exception and no ResourceWarning"),
    Clause("hygiene.no-thread-left", "no thread of the storage is left running after aclose"),
    Clause("hygiene.descriptors", "every file descriptor the storage opened is closed by aclose"),
    # -- the runner over the adapter (docs/runner.md) --------------------------------------
    _runner(
        "runner.g1-snapshot",
        "a step's result is stored as it was at completion",
        "g1-snapshot-at-completion",
    ),
    _runner(
        "runner.g2-replay",
        "completed steps replay their stored results, in call order",
        "g2-deterministic-replay",
    ),
    _runner(
        "runner.g3-sibling-failure",
        "a sibling's failure keeps the completed steps' saves",
        "g3-sibling-failure-preservation",
    ),
    _runner(
        "runner.g4-cancel-prompt",
        "a caller's cancel ends the run promptly",
        "g4-caller-cancel-promptness",
    ),
    _runner("runner.g5-hygiene", "no runner-owned task or coroutine is left", "g5-hygiene"),
    _runner(
        "runner.g6-pause",
        "a pause settles the saves and resume continues",
        "g6-pause-for-input",
    ),
    _runner(
        "runner.g7-isolation",
        "failed steps' and abandoned runs' writes touch nothing",
        "g7-run-isolation",
    ),
    _runner(
        "runner.g9-loud-save",
        "a failed save fails the run loudly",
        "g9-save-failures-are-loud",
    ),
)
"""Every clause, in the order of the protocol page."""

_BY_ID = {c.id: c for c in CLAUSES}
if len(_BY_ID) != len(CLAUSES):  # pragma: no cover - a registry typo
    raise RuntimeError("two clauses share an id")


def clause(clause_id: str) -> Clause:
    """The clause of an id.

    Args:
        clause_id: a clause id such as ``put.atomic``.

    Raises:
        KeyError: no clause has that id; the message names the closest ones.
    """
    try:
        return _BY_ID[clause_id]
    except KeyError:
        close = difflib.get_close_matches(clause_id, _BY_ID, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise KeyError(f"unknown protocol clause {clause_id!r}{hint}") from None


F = TypeVar("F", bound=Callable[..., Any])


def checks(*clause_ids: str) -> Callable[[F], F]:
    """Mark a test of the suite with the protocol clauses it checks.

    Args:
        *clause_ids: one or more clause ids of `CLAUSES`.

    Raises:
        ValueError: no id was given, or one is not a clause (named, with the closest ids).
    """
    if not clause_ids:
        raise ValueError("checks() needs at least one clause id")
    for clause_id in clause_ids:
        try:
            clause(clause_id)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None

    def mark(function: F) -> F:
        previous = getattr(function, "__conformance_clauses__", ())
        function.__conformance_clauses__ = tuple(  # type: ignore[attr-defined]
            dict.fromkeys((*previous, *clause_ids))
        )
        return function

    return mark


def clauses_of(function: Any) -> tuple[str, ...]:
    """The clause ids a test function of the suite checks (empty if it names none)."""
    return tuple(getattr(function, "__conformance_clauses__", ()))

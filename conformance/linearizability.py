"""A linearizability checker for histories of storage operations (pure: no I/O).

A *history* is a list of `Operation`: each a put, get or delete on
one key, with the moment it was invoked, the moment it completed, and its
outcome. `check` decides, key by key, whether the history is
*linearizable*: whether every operation can be given one instant between its
invocation and its completion such that, in the order of those instants, the
operations behave as on one atomic register of the storage protocol.

The model of one key is the storage protocol's: the key is absent, or holds
the bytes and the version of the last write that took effect.

- ``put`` (``overwrite``, ``create`` or ``if-match`` a version) stores its
  bytes under a fresh version; ``create`` needs the key absent, ``if-match``
  needs the stored version to be the expected one, else the put fails with
  ``PreconditionFailed`` and changes nothing.
- ``get`` returns the stored bytes and version, or fails with ``NotFound``.
- ``delete`` removes the key and returns whether it existed; with
  ``if_match`` it fails with ``PreconditionFailed`` (changing nothing) when the
  key holds another version, and returns False when the key is absent.

Versions are opaque. Each put that took effect minted one version, which
identifies it: a get that returns a version returns the bytes of the write
that minted it, and an if-match succeeds exactly when the stored version is the
expected one. The checker therefore asks that the values written to one key be
distinct (the suite's generator makes them so): a read is then attributed to
the one write whose bytes it returned, and the version that a get saw for a
write whose own reply was lost becomes that write's version.

Outcomes:

``ok``
    the operation completed and returned (a version, the bytes read, whether
    the key existed).
``failed``
    it raised ``PreconditionFailed`` or ``NotFound``: a definite no-op.
``unknown``
    a write that was cancelled or timed out (Jepsen's "info" operation): it may
    take effect at any single moment after its invocation, or never. Its
    ``completed`` is None (it may take effect at any time later, "+infinity"),
    or, for an adapter that settles cancelled writes, the moment
    ``CancelledError`` was delivered: if it took effect, it did so before that.

The search is Wing and Gong's, with Lowe's memoization of (operations
linearized so far, model state) as in Knossos and Porcupine; an unknown write
is never required, so it is placed only where it changes the state. A
violation is shrunk to a minimal history (operations removed one by one while
the rest stays non-linearizable) and shown as a table: see
`Violation.describe`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

__all__ = [
    "DEFAULT_BUDGET",
    "CheckResult",
    "InconclusiveError",
    "Operation",
    "Violation",
    "check",
    "check_key",
]

Kind = Literal["put", "get", "delete"]
Mode = Literal["overwrite", "create", "if-match"]
Outcome = Literal["ok", "failed", "unknown"]
ErrorName = Literal["PreconditionFailed", "NotFound"]

DEFAULT_BUDGET = 2_000_000
"""Search states that `check` explores per key before it gives up (inconclusive)."""

_ABSENT = -1


@dataclass(frozen=True)
class Operation:
    """One operation of a history, as one client saw it.

    Attributes:
        key: the key it applies to.
        kind: ``"put"``, ``"get"`` or ``"delete"``.
        invoked: when it was called (seconds, any monotonic clock).
        completed: when its outcome was known; None for an unknown write
            that may take effect at any later moment.
        outcome: ``"ok"``, ``"failed"`` or ``"unknown"`` (writes only).
        client: who issued it (shown in reports).
        mode: a put's mode (``"overwrite"``, ``"create"``, ``"if-match"``).
        data: the bytes a put wrote, or the bytes a get returned.
        version: the version a put returned, or the version a get returned.
        expected: the version of an if-match put, or a delete's ``if_match``.
        existed: what a delete returned.
        error: a failed operation's error (``"PreconditionFailed"``,
            ``"NotFound"``).
        note: free text shown in reports (``"cancelled"``, ``"timed out"``).

    Raises:
        ValueError: a field that does not fit the kind and outcome (a get
            without the bytes it read, an unknown get, and so on).
    """

    key: str
    kind: Kind
    invoked: float
    completed: float | None
    outcome: Outcome = "ok"
    client: str = ""
    mode: Mode = "overwrite"
    data: bytes | None = None
    version: str | None = None
    expected: str | None = None
    existed: bool | None = None
    error: ErrorName | None = None
    note: str = ""

    def __post_init__(self) -> None:
        what = f"{self.kind} of key {self.key!r} invoked at {self.invoked!r}"
        if self.kind not in ("put", "get", "delete"):
            raise ValueError(f"operation kind must be put, get or delete, not {self.kind!r}")
        if self.outcome not in ("ok", "failed", "unknown"):
            raise ValueError(f"{what}: outcome must be ok, failed or unknown, not {self.outcome!r}")
        if not isinstance(self.invoked, int | float) or math.isnan(self.invoked):
            raise ValueError(f"{what}: invoked must be a number")
        if self.completed is None:
            if self.outcome != "unknown":
                raise ValueError(f"{what}: only an unknown outcome may have no completion time")
        elif self.completed < self.invoked:
            raise ValueError(f"{what}: completed ({self.completed!r}) is before invoked")
        if self.outcome == "failed" and self.error not in ("PreconditionFailed", "NotFound"):
            raise ValueError(
                f"{what}: a failed operation needs error PreconditionFailed or NotFound"
            )
        if self.outcome != "failed" and self.error is not None:
            raise ValueError(f"{what}: error is only for a failed operation")
        if self.kind == "put":
            if self.mode not in ("overwrite", "create", "if-match"):
                raise ValueError(f"{what}: mode must be overwrite, create or if-match")
            if not isinstance(self.data, bytes):
                raise ValueError(f"{what}: a put needs the bytes it wrote (data)")
            if (self.mode == "if-match") != (self.expected is not None):
                raise ValueError(f"{what}: an expected version goes with mode if-match, only")
            if self.outcome == "ok" and not isinstance(self.version, str):
                raise ValueError(f"{what}: a put that returned needs the version it returned")
            if self.outcome == "failed" and (
                self.error != "PreconditionFailed" or (self.mode == "overwrite")
            ):
                raise ValueError(
                    f"{what}: only a create or if-match put fails, with PreconditionFailed"
                )
        elif self.kind == "get":
            if self.outcome == "unknown":
                raise ValueError(f"{what}: a get has no unknown outcome (leave it out instead)")
            if self.outcome == "ok" and not (
                isinstance(self.data, bytes) and isinstance(self.version, str)
            ):
                raise ValueError(f"{what}: a get that returned needs the data and version it read")
            if self.outcome == "failed" and self.error != "NotFound":
                raise ValueError(f"{what}: a get fails only with NotFound")
        else:
            if self.outcome == "ok" and not isinstance(self.existed, bool):
                raise ValueError(f"{what}: a delete that returned needs existed (True or False)")
            if self.outcome == "failed" and (
                self.error != "PreconditionFailed" or self.expected is None
            ):
                raise ValueError(
                    f"{what}: only a delete with if_match fails, with PreconditionFailed"
                )

    @property
    def is_write(self) -> bool:
        """A put or a delete."""
        return self.kind != "get"

    def call_text(self, alias: dict[str, str] | None = None) -> str:
        """The call, as a short text (``put(b'a', if-match V2)``)."""
        name = (alias or {}).get
        if self.kind == "put":
            mode = str(self.mode)
            if self.expected is not None:
                mode = f"if-match {name(self.expected, self.expected)}"
            return f"put({_short(self.data)}, {mode})"
        if self.kind == "get":
            return "get()"
        if self.expected is not None:
            return f"delete(if_match={name(self.expected, self.expected)})"
        return "delete()"

    def outcome_text(self, alias: dict[str, str] | None = None) -> str:
        """The outcome, as a short text (``ok: version V3``, ``PreconditionFailed``)."""
        name = (alias or {}).get
        if self.outcome == "failed":
            return str(self.error)
        if self.outcome == "unknown":
            return f"unknown ({self.note})" if self.note else "unknown"
        if self.kind == "put":
            return f"ok: version {name(self.version or '', self.version)}"
        if self.kind == "get":
            return f"ok: {_short(self.data)} version {name(self.version or '', self.version)}"
        return f"ok: existed={self.existed}"


def _short(data: bytes | None, limit: int = 24) -> str:
    if data is None:
        return "-"
    text = repr(data)
    return text if len(text) <= limit else f"{text[: limit - 4]}...' ({len(data)} bytes)"


class InconclusiveError(RuntimeError):
    """The search exceeded its budget before it could decide (the history is too large)."""


@dataclass
class Violation:
    """A key whose history is not linearizable.

    Attributes:
        key: the key.
        history: every operation on the key, in invocation order.
        minimal: a smallest sub-history that is still not linearizable.
        closest: the longest prefix of a linearization of ``minimal`` that
            the search found (indices into ``minimal``), and the state after it.
        reason: a sentence for a violation found before the search (two
            writes that returned one version), or "".
        left_out: writes of the history left out of ``minimal`` because
            the search let them take effect at any moment, or never, and still
            found no order.
    """

    key: str
    history: list[Operation]
    minimal: list[Operation]
    closest: list[int] = field(default_factory=list)
    reason: str = ""
    left_out: int = 0

    def describe(self) -> str:
        """The minimal history as a readable table, with times and what fits.

        Times are milliseconds from the first invocation in the table;
        ``...`` marks an unknown write that may take effect at any later
        moment. Versions are shown as V1, V2... (their strings follow).
        """
        ops = self.minimal
        alias = _aliases(ops)
        t0 = min(op.invoked for op in ops)
        rows = [("#", "client", "invoked", "completed", "call", "outcome")]
        for i, op in enumerate(ops, 1):
            done = "..." if op.completed is None else f"{(op.completed - t0) * 1000:.2f} ms"
            rows.append(
                (
                    str(i),
                    op.client or "-",
                    f"{(op.invoked - t0) * 1000:.2f} ms",
                    done,
                    op.call_text(alias),
                    op.outcome_text(alias),
                )
            )
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        lines = [
            f"key {self.key!r}: {len(self.history)} operations are not linearizable; "
            f"a minimal history of {len(ops)} that is not:",
        ]
        if self.reason:
            lines.append(f"  {self.reason}")
        for r in rows:
            lines.append(
                "  "
                + "  ".join(
                    cell.rjust(w) if c in (0, 2, 3) else cell.ljust(w)
                    for c, (cell, w) in enumerate(zip(r, widths, strict=True))
                ).rstrip()
            )
        if not self.reason:
            if self.closest:
                order = " -> ".join(str(i + 1) for i in self.closest)
                lines.append(
                    f"  The longest valid order found is {order}; after it, no remaining "
                    "operation can come next (its result or its time contradicts the key's state)."
                )
            else:
                lines.append(
                    "  No operation can come first: each result contradicts an absent key."
                )
        if self.left_out:
            lines.append(
                f"  Left out: {self.left_out} other write{'s' if self.left_out != 1 else ''} and "
                "the reads that do not matter; letting each of those writes take effect at "
                "any moment, as often as it likes, or never, still leaves no valid order."
            )
        if alias:
            lines.append("  Versions: " + ", ".join(f"{a} = {v!r}" for v, a in alias.items()))
        return "\n".join(lines)


def _aliases(ops: Iterable[Operation]) -> dict[str, str]:
    alias: dict[str, str] = {}
    for op in ops:
        for v in (op.version, op.expected):
            if v is not None and v not in alias:
                alias[v] = f"V{len(alias) + 1}"
    return alias


@dataclass
class CheckResult:
    """What `check` found.

    Attributes:
        keys: how many keys were checked.
        operations: how many operations.
        violations: the keys that are not linearizable (empty: the history is).
        explored: search states explored, over all keys.
    """

    keys: int
    operations: int
    violations: list[Violation]
    explored: int

    @property
    def ok(self) -> bool:
        """No key's history is a violation."""
        return not self.violations

    def describe(self) -> str:
        """A summary, and the smallest minimal history among the violations."""
        if self.ok:
            return f"{self.operations} operations on {self.keys} keys are linearizable"
        worst = min(self.violations, key=lambda v: len(v.minimal))
        head = (
            f"{len(self.violations)} of {self.keys} keys have a history that is not "
            f"linearizable ({', '.join(repr(v.key) for v in self.violations[:5])}"
            f"{', ...' if len(self.violations) > 5 else ''})."
        )
        return f"{head}\n{worst.describe()}"


# -- the search ------------------------------------------------------------------------------


@dataclass
class _Prepared:
    ops: list[Operation]
    inv: list[float]
    ret: list[float]
    required: int  # bit mask of the operations that must be linearized
    ver: list[str | None]  # the version each put minted (None: never seen)
    data: list[bytes | None]
    state_of: list[int]  # the model state a put leaves (one for all puts nobody observes)
    free: list[int]  # operations that may take effect at any moment, any number of times


def _prepare(ops: Sequence[Operation], ver: dict[int, str | None]) -> _Prepared:
    inv = [op.invoked for op in ops]
    ret = [math.inf if op.completed is None else op.completed for op in ops]
    required = 0
    for i, op in enumerate(ops):
        if op.outcome != "unknown":
            required |= 1 << i
    versions = [ver.get(id(op)) for op in ops]
    read = {op.data for op in ops if op.kind == "get" and op.outcome == "ok"}
    expected = {op.expected for op in ops if op.expected is not None}
    # Puts whose bytes nobody read and whose version nobody expects leave states that no
    # operation can tell apart: one state stands for them all (fewer configurations).
    state_of = list(range(len(ops)))
    unseen = -1
    for i, op in enumerate(ops):
        if op.kind == "put" and op.data not in read and versions[i] not in expected:
            unseen = i if unseen < 0 else unseen
            state_of[i] = unseen
    # Free operations (set by the shrinking) may take effect at any moment, any number of
    # times, or never: they are state transitions that do not count as placed.
    free = [
        op.outcome == "unknown" and inv[i] == -math.inf and ret[i] == math.inf
        for i, op in enumerate(ops)
    ]
    return _Prepared(
        list(ops),
        inv,
        ret,
        required,
        versions,
        [op.data if op.kind == "put" else None for op in ops],
        state_of,
        [i for i in range(len(ops)) if free[i]],
    )


def _versions(ops: Sequence[Operation]) -> tuple[dict[int, str | None], str]:
    """The version each put minted (by ``id`` of the put), and a reason if two share one.

    A put that returned has its version; an unknown put gets the version that
    a get saw with its bytes.
    """
    by_data: dict[bytes, Operation] = {}
    for op in ops:
        if op.kind == "put":
            assert op.data is not None
            if op.data in by_data:
                raise ValueError(
                    f"key {op.key!r}: two puts write the same bytes {_short(op.data)}; the checker "
                    "needs the values written to one key to be distinct, to tell which write a "
                    "read saw"
                )
            by_data[op.data] = op
    ver: dict[int, str | None] = {}
    for op in ops:
        if op.kind == "put" and op.outcome == "ok":
            ver[id(op)] = op.version
    for op in ops:
        if op.kind == "get" and op.outcome == "ok":
            assert op.data is not None
            writer = by_data.get(op.data)
            if writer is not None and writer.outcome == "unknown" and ver.get(id(writer)) is None:
                ver[id(writer)] = op.version
    owner: dict[str, Operation] = {}
    for op in ops:
        v = ver.get(id(op))
        if v is None:
            continue
        other = owner.setdefault(v, op)
        if other is not op:
            return ver, (
                f"Two writes have the same version {v!r} (puts of {_short(other.data)} and "
                f"{_short(op.data)}): every write must mint a new version."
            )
    return ver, ""


def _step(p: _Prepared, i: int, state: int) -> int | None:
    """The state after operation ``i`` in ``state``, or None if its outcome contradicts it.

    For an unknown write, None also when it would change nothing (placing it
    then is never better than leaving it out).
    """
    op = p.ops[i]
    unknown = op.outcome == "unknown"
    current = None if state == _ABSENT else p.ver[state]
    if op.kind == "get":
        if op.outcome == "failed":
            return state if state == _ABSENT else None
        if state == _ABSENT or p.data[state] != op.data or current != op.version:
            return None
        return state
    if op.kind == "put":
        if op.mode == "overwrite":
            holds = True
        elif op.mode == "create":
            holds = state == _ABSENT
        else:
            holds = state != _ABSENT and current == op.expected
        if op.outcome == "failed":
            return None if holds else state  # the precondition did not hold
        if not holds:
            return None
        after = p.state_of[i]
        return None if unknown and after == state else after
    # delete
    holds = op.expected is None or state == _ABSENT or current == op.expected
    if unknown:
        return _ABSENT if holds and state != _ABSENT else None
    if op.outcome == "failed":
        return None if holds else state
    if not holds or op.existed != (state != _ABSENT):
        return None
    return _ABSENT


def _search(p: _Prepared, budget: int) -> tuple[bool, int, list[int]]:
    """Wing and Gong with memoization: (linearizable?, states explored, longest order found).

    A configuration is the set of operations linearized so far and the model
    state. An unknown operation whose span ended before the latest invocation
    placed so far can no longer be placed; it counts as placed (as never taking
    effect) in the memo key, so that configurations differing only in such
    operations are explored once.
    """
    n = len(p.ops)
    free = p.free
    order = sorted((i for i in range(n) if i not in free), key=lambda i: p.inv[i])
    required = p.required
    # expired[h]: the optional operations that end before operation h is invoked.
    expired = [0] * n
    for h in range(n):
        for i in range(n):
            if not required >> i & 1 and p.ret[i] < p.inv[h]:
                expired[h] |= 1 << i
    seen: set[tuple[int, int]] = set()
    best: list[int] = []
    # Each entry: (mask, state, latest invocation placed (an index or -1), path).
    stack: list[tuple[int, int, int, tuple[int, ...]]] = [(0, _ABSENT, -1, ())]
    explored = 0
    while stack:
        mask, state, latest, path = stack.pop()
        if mask & required == required:
            return True, explored, list(path)
        memo = (mask | (expired[latest] if latest >= 0 else 0), state)
        if memo in seen:
            continue
        seen.add(memo)
        explored += 1
        if explored > budget:
            raise InconclusiveError(
                f"the search explored {budget} states of {n} operations on key "
                f"{p.ops[0].key!r} without deciding"
            )
        if len(path) > len(best):
            best = list(path)
        min_ret = math.inf
        for i in range(n):
            if required >> i & 1 and not mask >> i & 1 and p.ret[i] < min_ret:
                min_ret = p.ret[i]
        max_inv = p.inv[latest] if latest >= 0 else -math.inf
        firsts: list[tuple[int, int, int, tuple[int, ...]]] = []  # required ones first
        lasts: list[tuple[int, int, int, tuple[int, ...]]] = []  # then unknown ones
        for i in order:
            if p.inv[i] > min_ret:
                break
            if mask >> i & 1 or p.ret[i] < max_inv:
                continue
            after = _step(p, i, state)
            if after is not None:
                newest = i if latest < 0 or p.inv[i] > max_inv else latest
                child = (mask | 1 << i, after, newest, (*path, i))
                (firsts if required >> i & 1 else lasts).append(child)
        for i in free:  # a free operation changes the state, and stays available
            after = _step(p, i, state)
            if after is not None and after != state:
                lasts.append((mask, after, latest, path))
        stack.extend(reversed(lasts))
        stack.extend(reversed(firsts))
    return False, explored, best


def check_key(
    ops: Sequence[Operation], *, budget: int = DEFAULT_BUDGET, shrink: bool = True
) -> tuple[Violation | None, int]:
    """Check the history of one key, which starts absent.

    Args:
        ops: the operations on that key (any order).
        budget: search states to explore before giving up.
        shrink: on a violation, look for a minimal history.

    Returns:
        The violation (None if linearizable), and the search states explored.

    Raises:
        InconclusiveError: the search exceeded ``budget``.
        ValueError: operations of several keys, or two puts of the same bytes.
    """
    ops = sorted(ops, key=lambda op: op.invoked)
    if not ops:
        return None, 0
    keys = {op.key for op in ops}
    if len(keys) > 1:
        raise ValueError(f"check_key takes the operations of one key, got {sorted(keys)[:3]}")
    ver, reason = _versions(ops)
    if reason:
        sharing = _sharing_pair(ops, ver)
        return Violation(ops[0].key, ops, sharing, reason=reason), 0
    ok, explored, _ = _search(_prepare(ops, ver), budget)
    if ok:
        return None, explored
    minimal, left_out = _shrink(ops, ver, budget) if shrink else (ops, 0)
    _, more, closest = _search(_prepare(minimal, ver), budget)
    return Violation(ops[0].key, ops, minimal, closest, left_out=left_out), explored + more


def _sharing_pair(ops: list[Operation], ver: dict[int, str | None]) -> list[Operation]:
    owner: dict[str, Operation] = {}
    for op in ops:
        v = ver.get(id(op))
        if v is not None:
            if v in owner:
                first = owner[v]
                readers = [o for o in ops if o.kind == "get" and o.data in (first.data, op.data)]
                return sorted(
                    {id(o): o for o in [first, op, *readers]}.values(), key=lambda o: o.invoked
                )
            owner[v] = op
    return ops  # pragma: no cover - only called when two writes share a version


SHRINK_BUDGET = 200_000
"""Search states per attempt while shrinking (an attempt over it keeps the operation)."""


def _shrink(
    ops: list[Operation], ver: dict[int, str | None], budget: int
) -> tuple[list[Operation], int]:
    """A small sub-history of ``ops`` that is still not linearizable, and proves it.

    Two steps that can never turn a linearizable history into one that is not,
    so that what is left is evidence, not an artifact: drop a read or a failed
    operation; set a write *free* (it may take effect at any moment at all, as
    often as it likes, or never; its result is ignored). Each step is kept while the history
    stays non-linearizable. The free writes that no remaining operation refers
    to are then left out of what is shown (whatever they did, no order fits);
    the operations shown are the originals.

    Returns:
        The operations to show, and how many free writes were left out.
    """
    n = len(ops)
    budget = min(budget, SHRINK_BUDGET)
    alive = [True] * n
    free = [False] * n
    freed: dict[int, Operation] = {}
    ver2 = dict(ver)

    def variant(i: int) -> Operation:
        if not free[i]:
            return ops[i]
        if i not in freed:
            op = ops[i]
            copy = replace(
                op, invoked=-math.inf, completed=None, outcome="unknown", version=None,
                existed=None, error=None,
            )  # fmt: skip
            ver2[id(copy)] = ver.get(id(op))
            freed[i] = copy
        return freed[i]

    def still_violated() -> bool:
        current = [variant(i) for i in range(n) if alive[i]]
        try:
            ok, _, _ = _search(_prepare(current, ver2), budget)
        except InconclusiveError:
            return False
        return not ok

    def is_read(i: int) -> bool:
        return not ops[i].is_write or ops[i].outcome == "failed"

    changed = True
    while changed:
        changed = False
        # Reads and failed operations first (cheap, and most of a history), newest first.
        for i in sorted(range(n), key=lambda i: (not is_read(i), -i)):
            if not alive[i] or free[i]:
                continue
            if is_read(i):
                alive[i] = False
                if still_violated():
                    changed = True
                else:
                    alive[i] = True
            else:
                free[i] = True
                if still_violated():
                    changed = True
                else:
                    free[i] = False
    kept = {i for i in range(n) if alive[i] and not free[i]}
    grew = True
    while grew:  # the free writes that a kept operation refers to, transitively
        grew = False
        for i in range(n):
            if alive[i] and i not in kept and any(_refers(ops[j], ops[i], ver) for j in kept):
                kept.add(i)
                grew = True
    left_out = sum(1 for i in range(n) if alive[i] and free[i] and i not in kept)
    return [ops[i] for i in sorted(kept)], left_out


def _refers(op: Operation, write: Operation, ver: dict[int, str | None]) -> bool:
    """``op`` read the bytes of ``write``, or expects the version ``write`` minted."""
    if write.kind != "put":
        return False
    if op.kind == "get" and op.outcome == "ok" and op.data == write.data:
        return True
    version = ver.get(id(write))
    return version is not None and op.expected == version


def check(
    history: Iterable[Operation], *, budget: int = DEFAULT_BUDGET, shrink: bool = True
) -> CheckResult:
    """Check a history of several keys, each key on its own (each starts absent).

    Args:
        history: the operations, in any order.
        budget: search states to explore per key before giving up.
        shrink: find a minimal history for each violation.

    Raises:
        InconclusiveError: the search of a key exceeded ``budget``.
        ValueError: two puts of one key write the same bytes, or an operation
            is malformed.
    """
    by_key: dict[str, list[Operation]] = {}
    total = 0
    for op in history:
        if not isinstance(op, Operation):
            raise TypeError(f"a history holds Operation objects, not {type(op).__name__}")
        by_key.setdefault(op.key, []).append(op)
        total += 1
    violations = []
    explored = 0
    for key in sorted(by_key):
        violation, n = check_key(by_key[key], budget=budget, shrink=shrink)
        explored += n
        if violation is not None:
            violations.append(violation)
    return CheckResult(len(by_key), total, violations, explored)

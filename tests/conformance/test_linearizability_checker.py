"""The linearizability checker on hand-written histories (and simulated atomic registers).

Times are in seconds; ``None`` as a completion means an unknown write that may
take effect at any later moment.
"""

from __future__ import annotations

import random

import pytest
from checkpointkit.conformance.linearizability import (
    InconclusiveError,
    Operation,
    check,
    check_key,
)

K = "k"


def put(
    t0: float,
    t1: float | None,
    data: bytes,
    version: str | None = None,
    *,
    mode: str = "overwrite",
    expected: str | None = None,
    outcome: str = "ok",
    client: str = "a",
) -> Operation:
    error = "PreconditionFailed" if outcome == "failed" else None
    return Operation(
        K,
        "put",
        t0,
        t1,
        outcome,  # type: ignore[arg-type]
        client=client,
        mode=mode,  # type: ignore[arg-type]
        data=data,
        version=version,
        expected=expected,
        error=error,  # type: ignore[arg-type]
    )


def get(t0: float, t1: float, data: bytes | None, version: str | None = None) -> Operation:
    if data is None:
        return Operation(K, "get", t0, t1, "failed", client="r", error="NotFound")
    return Operation(K, "get", t0, t1, client="r", data=data, version=version)


def delete(
    t0: float,
    t1: float | None,
    existed: bool | None = None,
    *,
    expected: str | None = None,
    outcome: str = "ok",
) -> Operation:
    error = "PreconditionFailed" if outcome == "failed" else None
    return Operation(
        K,
        "delete",
        t0,
        t1,
        outcome,  # type: ignore[arg-type]
        client="d",
        expected=expected,
        existed=existed,
        error=error,  # type: ignore[arg-type]
    )


def linearizable(*ops: Operation) -> bool:
    return check(ops).ok


def test_sequential_history_of_every_operation_is_linearizable() -> None:
    assert linearizable(
        get(0, 1, None),
        put(2, 3, b"a", "V1", mode="create"),
        get(4, 5, b"a", "V1"),
        put(6, 7, b"b", "V2", mode="if-match", expected="V1"),
        put(8, 9, b"c", mode="if-match", expected="V1", outcome="failed"),
        put(10, 11, b"d", mode="create", outcome="failed"),
        delete(12, 13, expected="V1", outcome="failed"),
        get(14, 15, b"b", "V2"),
        delete(16, 17, True, expected="V2"),
        delete(18, 19, False, expected="V2"),
        delete(20, 21, False),
        get(22, 23, None),
    )


def test_read_of_an_overwritten_value_after_the_overwrite_completed_is_not_linearizable() -> None:
    assert not linearizable(
        put(0, 1, b"a", "V1"),
        put(2, 3, b"b", "V2"),
        get(4, 5, b"a", "V1"),
    )


def test_read_concurrent_with_an_overwrite_may_see_either_value() -> None:
    assert linearizable(put(0, 1, b"a", "V1"), put(2, 6, b"b", "V2"), get(3, 4, b"a", "V1"))
    assert linearizable(put(0, 1, b"a", "V1"), put(2, 6, b"b", "V2"), get(3, 4, b"b", "V2"))


def test_read_with_the_right_bytes_but_another_version_is_not_linearizable() -> None:
    assert not linearizable(put(0, 1, b"a", "V1"), get(2, 3, b"a", "V7"))


def test_read_of_bytes_never_written_is_not_linearizable() -> None:
    result = check([put(0, 1, b"a", "V1"), get(2, 3, b"zz", "V1")])
    assert not result.ok
    assert [op.kind for op in result.violations[0].minimal] == ["get"]


def test_two_concurrent_if_match_winners_on_one_version_are_not_linearizable() -> None:
    assert not linearizable(
        put(0, 1, b"a", "V1"),
        put(2, 5, b"b", "V2", mode="if-match", expected="V1", client="b"),
        put(3, 6, b"c", "V3", mode="if-match", expected="V1", client="c"),
    )


def test_two_concurrent_creates_with_one_winner_are_linearizable() -> None:
    assert linearizable(
        put(0, 3, b"a", "V1", mode="create"),
        put(1, 4, b"b", mode="create", outcome="failed", client="b"),
    )
    assert not linearizable(
        put(0, 3, b"a", "V1", mode="create"),
        put(1, 4, b"b", "V2", mode="create", client="b"),
    )


def test_failed_create_on_a_key_that_cannot_exist_is_not_linearizable() -> None:
    assert not linearizable(put(0, 1, b"a", mode="create", outcome="failed"))


def test_delete_reporting_a_missing_key_that_exists_is_not_linearizable() -> None:
    assert not linearizable(put(0, 1, b"a", "V1"), delete(2, 3, False))
    assert not linearizable(put(0, 1, b"a", "V1"), delete(2, 3, False, expected="V1"))


def test_unknown_write_may_take_effect_long_after_its_invocation() -> None:
    assert linearizable(
        put(0, 1, b"a", "V1"),
        put(2, None, b"b", outcome="unknown"),
        get(5, 6, b"a", "V1"),
        get(100, 101, b"b", "V2"),
    )


def test_unknown_write_may_never_take_effect() -> None:
    assert linearizable(
        put(0, 1, b"a", "V1"), put(2, None, b"b", outcome="unknown"), get(100, 101, b"a", "V1")
    )
    assert linearizable(delete(0, None, outcome="unknown"), get(1, 2, None))


def test_unknown_write_cannot_take_effect_before_its_invocation() -> None:
    assert not linearizable(
        put(0, 1, b"a", "V1"), get(2, 3, b"b", "V2"), put(5, None, b"b", outcome="unknown")
    )


def test_unknown_write_takes_effect_at_most_once() -> None:
    assert not linearizable(
        put(0, 1, b"a", "V1"),
        put(2, None, b"b", outcome="unknown"),
        get(3, 4, b"b", "V2"),
        get(5, 6, b"a", "V1"),
    )


def test_unknown_delete_may_remove_the_key_later_but_not_bring_it_back() -> None:
    assert linearizable(
        put(0, 1, b"a", "V1"),
        delete(2, None, outcome="unknown"),
        get(5, 6, b"a", "V1"),
        get(8, 9, None),
    )
    assert not linearizable(
        put(0, 1, b"a", "V1"),
        delete(2, None, outcome="unknown"),
        get(5, 6, None),
        get(8, 9, b"a", "V1"),
    )


def test_settled_cancelled_write_cannot_take_effect_after_its_cancellation() -> None:
    settled = [put(0, 1, b"a", "V1"), put(2, 3, b"b", outcome="unknown"),
               get(4, 5, b"a", "V1"), get(6, 7, b"b", "V2")]  # fmt: skip
    assert not linearizable(*settled)
    unsettled = [*settled[:1], put(2, None, b"b", outcome="unknown"), *settled[2:]]
    assert linearizable(*unsettled)


def test_settled_cancelled_write_may_have_taken_effect_before_its_cancellation() -> None:
    assert linearizable(
        put(0, 1, b"a", "V1"), put(2, 3, b"b", outcome="unknown"), get(4, 5, b"b", "V2")
    )


def test_version_read_from_an_unknown_write_is_that_writes_version() -> None:
    base = [put(0, None, b"a", outcome="unknown"), get(1, 2, b"a", "V9")]
    assert linearizable(*base, put(3, 4, b"b", "V10", mode="if-match", expected="V9"))
    assert not linearizable(
        *base, put(3, 4, b"b", mode="if-match", expected="V9", outcome="failed")
    )


def test_if_match_on_a_version_no_write_minted_cannot_succeed() -> None:
    assert not linearizable(
        put(0, 1, b"a", "V1"), put(2, 3, b"b", "V2", mode="if-match", expected="V0")
    )


def test_two_writes_with_one_version_are_a_violation() -> None:
    result = check([put(0, 1, b"a", "V1"), put(2, 3, b"b", "V2"), put(4, 5, b"c", "V1")])
    assert not result.ok
    violation = result.violations[0]
    assert "same version 'V1'" in violation.reason
    assert [op.data for op in violation.minimal] == [b"a", b"c"]


def test_minimal_history_keeps_only_the_operations_that_show_the_violation() -> None:
    noise = [get(10 + 3 * i, 11 + 3 * i, b"b", "V2") for i in range(5)]
    result = check(
        [
            put(0, 1, b"a", "V1"),
            get(1.5, 1.8, b"a", "V1"),
            put(2, 3, b"b", "V2"),
            *noise,
            get(40, 41, b"a", "V1"),
        ]
    )
    (violation,) = result.violations
    assert len(violation.history) == 9
    assert len(violation.minimal) == 3
    assert [op.data for op in violation.minimal] == [b"a", b"b", b"a"]


def test_minimal_history_table_shows_times_calls_outcomes_and_versions() -> None:
    result = check(
        [
            put(10.0, 10.001, b"a", "etag-one"),
            put(10.002, 10.003, b"b", "etag-two", client="b"),
            get(10.004, 10.005, b"a", "etag-one"),
            put(10.006, None, b"c", outcome="unknown"),
        ]
    )
    text = result.describe()
    assert "1 of 1 keys" in text
    assert "0.00 ms" in text and "4.00 ms" in text and "5.00 ms" in text
    assert "put(b'a', overwrite)" in text
    assert "ok: b'a' version V1" in text
    assert "V1 = 'etag-one'" in text and "V2 = 'etag-two'" in text
    assert "longest valid order found is 1 -> 2" in text


def test_each_key_is_checked_on_its_own() -> None:
    ops = [
        Operation("x", "put", 0, 1, data=b"a", version="V1"),
        Operation("y", "put", 0, 1, data=b"a", version="W1"),
        Operation("y", "put", 2, 3, data=b"b", version="W2"),
        Operation("y", "get", 4, 5, data=b"a", version="W1"),
        Operation("x", "get", 4, 5, data=b"a", version="V1"),
    ]
    result = check(ops)
    assert result.keys == 2 and result.operations == 5
    assert [v.key for v in result.violations] == ["y"]


def test_duplicate_written_values_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="two puts write the same bytes b'a'"):
        check([put(0, 1, b"a", "V1"), put(2, 3, b"a", "V2")])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"kind": "get", "outcome": "unknown"}, "a get has no unknown outcome"),
        ({"kind": "get"}, "needs the data and version it read"),
        ({"kind": "put", "data": b"x"}, "needs the version it returned"),
        ({"kind": "put", "data": b"x", "expected": "V1"}, "goes with mode if-match"),
        ({"kind": "delete", "completed": None}, "only an unknown outcome may have no completion"),
        ({"kind": "delete", "completed": -1.0}, "is before invoked"),
        ({"kind": "move"}, "must be put, get or delete"),
    ],
)
def test_malformed_operation_is_refused_naming_what_is_wrong(
    kwargs: dict[str, object], words: str
) -> None:
    fields: dict[str, object] = {"key": K, "invoked": 0.0, "completed": 1.0, **kwargs}
    with pytest.raises(ValueError, match=words):
        Operation(**fields)  # type: ignore[arg-type]


def test_search_over_budget_is_inconclusive_not_a_verdict() -> None:
    ops = [put(0, 10, bytes([65 + i]), f"V{i}", client=str(i)) for i in range(8)]
    with pytest.raises(InconclusiveError, match="without deciding"):
        check_key([*ops, get(11, 12, b"Z", "V99")], budget=5)


def _simulated(
    rng: random.Random, n: int, clients: int, *, settled: bool = False
) -> list[Operation]:
    """A history of an atomic register: each op takes effect at a random instant in its span.

    An unknown write takes effect or not (at random); with ``settled`` its
    completion is the end of its span, else None.
    """
    ops: list[tuple[float, float, float, str, int]] = []  # (inv, point, ret, client, i)
    free = [0.0] * clients
    for i in range(n):
        c = rng.randrange(clients)
        inv = free[c] + rng.random()
        ret = inv + rng.random() * 3
        point = rng.uniform(inv, ret)
        free[c] = ret
        ops.append((inv, point, ret, f"c{c}", i))
    state: tuple[bytes, str] | None = None
    out: list[Operation] = []
    serial = 0
    known: set[str] = set()  # versions a client could know: returned by a put or read by a get

    def some_version(i: int) -> str:
        if state is not None and state[1] in known and rng.random() < 0.7:
            return state[1]
        return rng.choice(sorted(known)) if known and rng.random() < 0.5 else f"old{i}"

    for inv, _, ret, client, i in sorted(ops, key=lambda o: o[1]):
        roll = rng.random()
        unknown = rng.random() < 0.15
        lands = not unknown or rng.random() < 0.5
        end = ret if settled or not unknown else None
        data = f"w{i}".encode()
        if roll < 0.3:
            out.append(
                Operation(K, "get", inv, ret, "failed", client=client, error="NotFound")
                if state is None
                else Operation(K, "get", inv, ret, client=client, data=state[0], version=state[1])
            )
            if state is not None:
                known.add(state[1])
            continue
        if roll < 0.8:
            mode = rng.choice(["overwrite", "create", "if-match"])
            expected = None
            if mode == "if-match":
                expected = some_version(i)
            holds = (
                mode == "overwrite"
                or (mode == "create" and state is None)
                or (mode == "if-match" and state is not None and state[1] == expected)
            )
            serial += 1
            version = f"V{serial}"
            if holds and lands:
                state = (data, version)
            outcome = "unknown" if unknown else ("ok" if holds else "failed")
            if outcome == "ok":
                known.add(version)
            out.append(
                Operation(
                    K,
                    "put",
                    inv,
                    end,
                    outcome,  # type: ignore[arg-type]
                    client=client,
                    mode=mode,  # type: ignore[arg-type]
                    data=data,
                    version=version if outcome == "ok" else None,
                    expected=expected,
                    error="PreconditionFailed" if outcome == "failed" else None,
                )
            )
            continue
        expected = None
        if rng.random() < 0.5:
            expected = some_version(i)
        existed = state is not None
        holds = expected is None or state is None or state[1] == expected
        if holds and lands:
            state = None
        outcome = "unknown" if unknown else ("ok" if holds else "failed")
        out.append(
            Operation(
                K,
                "delete",
                inv,
                end,
                outcome,  # type: ignore[arg-type]
                client=client,
                expected=expected,
                existed=existed if outcome == "ok" else None,
                error="PreconditionFailed" if outcome == "failed" else None,
            )
        )
    return out


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("settled", [False, True])
def test_history_of_a_simulated_atomic_register_is_linearizable(seed: int, settled: bool) -> None:
    rng = random.Random(seed)
    history = _simulated(rng, 30, 4, settled=settled)
    result = check(history)
    assert result.ok, result.describe()


@pytest.mark.parametrize("seed", range(10))
def test_stale_read_at_the_end_of_a_long_history_shrinks_to_a_few_operations(seed: int) -> None:
    rng = random.Random(1000 + seed)
    history = _simulated(rng, 30, 4)
    old = next(op for op in history if op.kind == "put" and op.outcome == "ok")
    end = max(op.completed or op.invoked for op in history) + 1
    history += [put(end, end + 1, b"last", "V-last"), get(end + 2, end + 3, old.data, old.version)]
    result = check(history)
    (violation,) = result.violations
    # The write, a write that certainly followed it, the stale read, and at most one
    # unknown write whose version a kept operation names.
    minimal = violation.minimal
    assert 3 <= len(minimal) <= 4
    assert old in minimal and minimal[-1] is history[-1]
    assert any(op is not old and op.is_write and op.outcome == "ok" for op in minimal)
    assert not check(minimal).ok

"""Issue 22: a step's argument fingerprint is the same bytes on the runner's fast path.

Fingerprints are stored in step records and compared on replay, so the fast path of
`Codec.encode_arguments` must give exactly what ``encode_payload((args, kwargs))`` gave.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from checkpointkit.codec import Codec
from hypothesis import given
from hypothesis import strategies as st

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # beyond 64 bits too: the general path
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)


@given(st.lists(SCALARS, max_size=6))
def test_scalar_arguments_encode_as_the_general_path(args: list[Any]) -> None:
    codec = Codec()
    assert codec.encode_arguments(tuple(args), {}) == codec.encode_payload(
        (tuple(args), {}), path="args"
    )


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1, "a"), {"k": 2}),
        (([1, 2], {"a": 1}), {}),
        ((dt.datetime(2025, 1, 1, tzinfo=dt.UTC), (1, 2)), {}),
        ((), {"only": "kwargs"}),
        ((2**70,), {}),
    ],
)
def test_other_arguments_take_the_general_path(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    codec = Codec()
    assert codec.encode_arguments(args, kwargs) == codec.encode_payload((args, kwargs), path="args")


def test_a_codec_that_overrides_encode_payload_is_used_for_arguments() -> None:
    class Marked(Codec):
        def encode_payload(self, value: Any, *, path: str = "value") -> bytes:
            return b"marked" + super().encode_payload(value, path=path)

    assert Marked().encode_arguments((1,), {}).startswith(b"marked")

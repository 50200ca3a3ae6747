"""A value that cannot be encoded raises EncodeError naming the path to it and its type."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import threading
from typing import Any

import pydantic
import pytest
from checkpointkit import EncodeError
from checkpointkit.codec import Codec


class Opaque:
    pass


@dataclasses.dataclass
class Unregistered:
    x: int


class UnregisteredModel(pydantic.BaseModel):
    x: int


class Mood(enum.Enum):
    HAPPY = 1


@dataclasses.dataclass
class Holder:
    items: list[Any]
    created: Any = None


class Wrapper(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)

    inner: Any


class MyStr(str):
    pass


class MyDict(dict[str, Any]):
    pass


@pytest.fixture
def codec() -> Codec:
    c = Codec()
    c.register(Holder)
    c.register(Wrapper)
    return c


def encode_error(codec: Codec, value: Any, path: str = "state") -> str:
    with pytest.raises(EncodeError) as info:
        codec.encode(value, path=path)
    assert isinstance(info.value, TypeError)  # EncodeError is also a TypeError
    return str(info.value)


def test_error_names_the_full_path_through_lists_and_dicts(codec: Codec) -> None:
    state = {"users": [{"id": 0}, {"id": 1}, {"id": 2}, {"id": 3, "created": Opaque()}]}
    message = encode_error(codec, state)
    assert "state.users[3].created" in message
    assert f"{__name__}.Opaque" in message


def test_non_identifier_keys_are_quoted_and_other_keys_shown_by_repr(codec: Codec) -> None:
    assert 'state["my key"]' in encode_error(codec, {"my key": Opaque()})
    assert "state[3]" in encode_error(codec, {3: Opaque()})
    assert "state[(1, 2)]" in encode_error(codec, {(1, 2): Opaque()})
    assert "state.a[2][0]" in encode_error(codec, {"a": [1, 2, (Opaque(),)]})


def test_error_path_goes_through_registered_dataclass_and_model_fields(codec: Codec) -> None:
    message = encode_error(codec, [Holder(items=[1, Wrapper(inner={"x": Opaque()})])])
    assert "state[0].items[1].inner.x" in message


def test_error_in_a_dict_key_names_the_key(codec: Codec) -> None:
    message = encode_error(codec, {"index": {(1, Opaque()): "v"}})
    assert "state.index.keys()[0][1]" in message


def test_error_in_a_set_member_names_it(codec: Codec) -> None:
    assert "state.s[0]" in encode_error(codec, {"s": {Mood.HAPPY}})


def test_unregistered_dataclass_says_how_to_register(codec: Codec) -> None:
    message = encode_error(codec, {"u": Unregistered(1)})
    assert "state.u" in message
    assert "dataclass that is not registered" in message
    assert "codec.register(Unregistered)" in message


def test_unregistered_pydantic_model_says_how_to_register(codec: Codec) -> None:
    message = encode_error(codec, {"m": UnregisteredModel(x=1)})
    assert "pydantic model that is not registered" in message
    assert "codec.register(UnregisteredModel)" in message


def test_unregistered_enum_says_how_to_register(codec: Codec) -> None:
    assert "enum that is not registered" in encode_error(codec, [Mood.HAPPY])


def test_subclass_of_a_supported_type_is_refused_with_its_base(codec: Codec) -> None:
    message = encode_error(codec, {"s": MyStr("x")})
    assert "subclass of str" in message and "state.s" in message
    assert "subclass of dict" in encode_error(codec, MyDict(a=1))
    assert "subclass of dict" in encode_error(codec, [collections.OrderedDict()])


def test_subclass_of_a_registered_class_is_refused() -> None:
    codec = Codec()

    @dataclasses.dataclass
    class Base:
        x: int

    @dataclasses.dataclass
    class Child(Base):
        pass

    codec.register(Base)
    assert "Child is a dataclass that is not registered" in encode_error(codec, Child(1))


@pytest.mark.parametrize(
    "value",
    [lambda: 1, print, threading, Opaque, (x for x in range(3))],
    ids=["lambda", "builtin", "module", "class", "generator"],
)
def test_code_and_types_are_not_data(codec: Codec, value: Any) -> None:
    message = encode_error(codec, {"v": value})
    assert "state.v" in message and "not data" in message


def test_arbitrary_object_suggests_pickle_opt_in(codec: Codec) -> None:
    message = encode_error(codec, Opaque(), path="result")
    assert message.startswith("cannot encode result: unsupported type")
    assert f"pickle_allow=['{__name__}.Opaque']" in message


def test_lock_and_memoryview_are_unsupported(codec: Codec) -> None:
    assert "unsupported type" in encode_error(codec, {"lock": threading.Lock()})
    assert "memoryview" in encode_error(codec, {"view": memoryview(b"x")})


def test_cycle_through_a_list_names_the_path_not_recursion_error(codec: Codec) -> None:
    loop: list[Any] = [1]
    loop.append({"back": loop})
    message = encode_error(codec, {"a": loop})
    assert "state.a[1].back" in message
    assert "same list as state.a" in message and "cycle" in message


def test_cycle_through_a_dict_is_an_encode_error(codec: Codec) -> None:
    d: dict[str, Any] = {}
    d["self"] = d
    assert "state.self" in encode_error(codec, d)


def test_cycle_through_a_registered_dataclass_is_an_encode_error(codec: Codec) -> None:
    holder = Holder(items=[])
    holder.items.append(holder)
    assert "state.items[0]" in encode_error(codec, holder)


def test_cycle_with_a_special_type_on_the_way_is_an_encode_error(codec: Codec) -> None:
    loop: list[Any] = [dt.datetime(2024, 1, 1)]
    loop.append((loop,))
    assert "state[1][0]" in encode_error(codec, loop)


def test_too_deep_nesting_is_an_encode_error(codec: Codec) -> None:
    value: list[Any] = []
    for _ in range(20_000):
        value = [value]
    message = encode_error(codec, value)
    assert "nests deeper" in message


def test_tzinfo_without_an_offset_is_refused(codec: Codec) -> None:
    class NoOffset(dt.tzinfo):
        def utcoffset(self, d: dt.datetime | None) -> None:
            return None

        def dst(self, d: dt.datetime | None) -> None:
            return None

        def tzname(self, d: dt.datetime | None) -> None:
            return None

    message = encode_error(codec, {"at": dt.datetime(2024, 1, 1, tzinfo=NoOffset())})
    assert "state.at" in message and "gives no UTC offset" in message


def test_failed_encode_leaves_the_codec_usable(codec: Codec) -> None:
    encode_error(codec, [Opaque()])
    assert codec.decode(codec.encode([1, (2,)])) == [1, (2,)]

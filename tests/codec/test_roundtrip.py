"""Round trips are exact: every supported value decodes as the same type with the same value."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
import uuid
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pydantic
import pytest
from checkpointkit import ConfigurationError, DecodeError
from checkpointkit.codec import Codec, default_codec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# ----------------------------------------------------------------- exactness check


def assert_exact(got: Any, want: Any, path: str = "value") -> None:
    """Fail unless ``got`` has exactly ``want``'s types and values, recursively."""
    assert type(got) is type(want), f"{path}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, float):
        assert (math.isnan(got) and math.isnan(want)) or (
            got == want and math.copysign(1, got) == math.copysign(1, want)
        ), f"{path}: {got!r} != {want!r}"
    elif isinstance(want, complex):
        assert_exact(got.real, want.real, f"{path}.real")
        assert_exact(got.imag, want.imag, f"{path}.imag")
    elif isinstance(want, Decimal):
        assert str(got) == str(want), f"{path}: {got!r} != {want!r}"
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), f"{path}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_exact(g, w, f"{path}[{i}]")
    elif isinstance(want, dict):
        assert list(map(type, got)) == list(map(type, want)), f"{path}: key types differ"
        assert list(got) == list(want), f"{path}: keys differ"
        for (gk, gv), (wk, wv) in zip(got.items(), want.items(), strict=True):
            assert_exact(gk, wk, f"{path}.keys()")
            assert_exact(gv, wv, f"{path}[{wk!r}]")
    elif isinstance(want, set | frozenset):
        assert got == want, f"{path}: {got!r} != {want!r}"
        by_value = {x: x for x in got}
        for w in want:
            assert_exact(by_value[w], w, f"{path}{{{w!r}}}")
    elif isinstance(want, dt.datetime | dt.time):
        assert got == want and got.fold == want.fold, f"{path}: {got!r} != {want!r}"
        assert type(got.tzinfo) is type(want.tzinfo), f"{path}: tzinfo type differs"
        if isinstance(want, dt.datetime):
            assert got.utcoffset() == want.utcoffset(), f"{path}: offset differs"
            assert got.tzname() == want.tzname(), f"{path}: tzname differs"
            assert got.replace(tzinfo=None) == want.replace(tzinfo=None)
        else:
            assert got.tzinfo == want.tzinfo or got.utcoffset() == want.utcoffset()
    elif dataclasses.is_dataclass(want):
        for f in dataclasses.fields(want):
            assert_exact(getattr(got, f.name), getattr(want, f.name), f"{path}.{f.name}")
    elif isinstance(want, pydantic.BaseModel):
        for name in type(want).model_fields:
            assert_exact(getattr(got, name), getattr(want, name), f"{path}.{name}")
        assert got.model_fields_set == want.model_fields_set, f"{path}: fields_set differs"
        assert_exact(got.model_extra, want.model_extra, f"{path}.model_extra")
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


def roundtrip(codec: Codec, value: Any) -> Any:
    data = codec.encode(value, path="state")
    assert isinstance(data, bytes)
    return codec.decode(data, key="runs/r1/state")


@pytest.fixture
def codec() -> Codec:
    return Codec()


# ----------------------------------------------------------------- registered types


@dataclasses.dataclass
class Address:
    street: str
    zip: str
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    x: float
    y: float


@dataclasses.dataclass
class User:
    name: str
    created: dt.datetime
    address: Address
    points: list[Point]
    counter: int = dataclasses.field(default=0, init=False)


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Level(enum.IntEnum):
    LOW = 1


class Item(pydantic.BaseModel):
    sku: str
    price: Decimal
    when: dt.date | None = None


class Order(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    id: uuid.UUID
    items: list[Item]
    shipped: frozenset[str] = frozenset()
    ship_to: Address | None = None
    label: str = pydantic.Field(default="x", alias="Label")


@pytest.fixture
def registered() -> Codec:
    codec = Codec()
    for cls in (Address, Point, User, Color, Level, Item, Order):
        codec.register(cls)
    return codec


# ----------------------------------------------------------------- every type

UTC = dt.UTC
PLUS_0530 = dt.timezone(dt.timedelta(hours=5, minutes=30))
NAMED = dt.timezone(dt.timedelta(hours=-3), "BRT")
ODD = dt.timezone(dt.timedelta(hours=1, seconds=7, microseconds=3))
PARIS = ZoneInfo("Europe/Paris")

SCALARS: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    2**200,
    -(3**150),
    0.0,
    -0.0,
    1.5,
    float("inf"),
    float("-inf"),
    float("nan"),
    1e308,
    "",
    "héllo \u2603 \U0001f600",
    "x" * 100_000,
    b"",
    b"\x00\xff" * 10,
    bytearray(b"mutable"),
    bytearray(),
    1 + 2j,
    complex(0, -0.0),
    dt.datetime(2024, 5, 1, 12, 30, 15, 123456),
    dt.datetime(1, 1, 1),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 5, 1, 12, 30, 15, 1, tzinfo=UTC),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(2024, 5, 1, tzinfo=PLUS_0530),
    dt.datetime(2024, 5, 1, 8, tzinfo=NAMED),
    dt.datetime(2024, 5, 1, 8, tzinfo=ODD),
    dt.datetime(2024, 7, 1, 8, tzinfo=PARIS),
    dt.datetime(2024, 10, 27, 2, 30, tzinfo=PARIS, fold=1),
    dt.datetime(2024, 10, 27, 2, 30, fold=1),
    dt.datetime(2024, 10, 27, 2, 30, tzinfo=UTC, fold=1),
    dt.datetime(2024, 5, 1, tzinfo=dt.timezone(dt.timedelta(0), "Zulu")),
    dt.date(2024, 2, 29),
    dt.date(1, 1, 1),
    dt.time(0, 0),
    dt.time(23, 59, 59, 999999),
    dt.time(12, 0, tzinfo=PLUS_0530),
    dt.time(12, 0, tzinfo=NAMED),
    dt.time(12, 0, tzinfo=PARIS),
    dt.time(1, 30, fold=1),
    dt.timedelta(0),
    dt.timedelta(days=-1, microseconds=1),
    dt.timedelta.max,
    dt.timedelta.min,
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    uuid.UUID("f47ac10b-58cc-4372-a567-0e02b2c3d479"),  # a random (version 4) one
    Decimal("1.10"),
    Decimal("-0"),
    Decimal("1E+400"),
    Decimal("NaN"),
    Decimal("-Infinity"),
    Decimal("3.141592653589793238462643383279502884197"),
]


@pytest.mark.parametrize("value", SCALARS, ids=lambda v: f"{type(v).__name__}:{v!r}"[:60])
def test_scalar_round_trips_exactly(codec: Codec, value: Any) -> None:
    assert_exact(roundtrip(codec, value), value)


def _nest(depth: int) -> list[Any]:
    value: list[Any] = [1, (2,)]
    for _ in range(depth):
        value = [value]
    return value


CONTAINERS: list[Any] = [
    [],
    (),
    {},
    set(),
    frozenset(),
    [1, "a", None, [2.5, [b"x"]]],
    (1, (2, (3, ())), [4, (5,)]),
    {"a": 1, "b": [1, 2, {"c": (3, 4)}]},
    {7: "int key", 2.5: "float key", None: "none", True: "bool", b"k": "bytes"},
    {(1, 2): "tuple key", (3, (4, 5)): "nested tuple key"},
    {frozenset({1, 2}): "frozenset key", dt.date(2024, 1, 1): "date key"},
    {2**70: "big int key", uuid.UUID(int=5): "uuid key"},
    {1, 2, 3, (4, 5), frozenset({6})},
    frozenset({"a", (1, 2), b"x"}),
    {"nested": {"sets": [{1}, frozenset({2})], "dt": dt.datetime(2020, 1, 1)}},
    [bytearray(b"a"), bytearray(b"b")],
    {"deep": _nest(300)},
]


def _container_id(value: Any) -> str:
    """``repr`` with set elements sorted: test ids must not depend on hash randomization."""
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(map(repr, value))})"[:50]
    return repr(value)[:50]


@pytest.mark.parametrize("value", CONTAINERS, ids=_container_id)
def test_container_round_trips_exactly(codec: Codec, value: Any) -> None:
    assert_exact(roundtrip(codec, value), value)


def test_every_supported_type_in_one_state_round_trips(codec: Codec) -> None:
    state = {"scalars": SCALARS, "containers": CONTAINERS, "as_tuple": tuple(SCALARS)}
    assert_exact(roundtrip(codec, state), state)


def test_payload_round_trip_without_envelope(codec: Codec) -> None:
    value = {"t": (1, 2), "s": {3}, "when": dt.datetime(2024, 1, 1)}
    payload = codec.encode_payload(value)
    assert_exact(codec.decode_payload(payload), value)


def test_shared_references_round_trip_as_copies(codec: Codec) -> None:
    shared = [1, 2]
    value = {"a": shared, "b": shared, "t": (shared, shared)}
    assert_exact(roundtrip(codec, value), value)


def test_encode_leaves_the_value_unchanged(codec: Codec) -> None:
    inner = {"when": dt.datetime(2024, 1, 1), "t": (1, 2)}
    outer = [inner, {"plain": 1}]
    before = repr(outer)
    codec.encode(outer)
    assert repr(outer) == before
    assert outer[0] is inner and type(inner["t"]) is tuple


def test_encoded_bytes_are_a_snapshot(codec: Codec) -> None:
    value = {"items": [1, 2]}
    data = codec.encode(value)
    value["items"].append(3)
    assert codec.decode(data) == {"items": [1, 2]}


def test_plain_state_with_utc_datetimes_round_trips(codec: Codec) -> None:
    records = {
        f"r{i}": {
            "id": i,
            "score": i / 3,
            "tags": ["a", "b"],
            "created": dt.datetime(2024, 1, 1, 0, 0, i, tzinfo=UTC),
            "nested": {"k": [1, 2.0, None, True, b"x"]},
        }
        for i in range(50)
    }
    assert_exact(roundtrip(codec, records), records)


def test_utc_datetime_next_to_a_zero_offset_named_zone_keeps_both(codec: Codec) -> None:
    value = [
        dt.datetime(2024, 1, 1, tzinfo=UTC),
        dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(0), "GMT")),
    ]
    got = roundtrip(codec, value)
    assert_exact(got, value)
    assert got[1].tzname() == "GMT"


def test_datetime_with_foreign_tzinfo_keeps_its_offset_as_a_fixed_timezone(
    codec: Codec,
) -> None:
    class Fixed(dt.tzinfo):
        def utcoffset(self, d: dt.datetime | None) -> dt.timedelta:
            return dt.timedelta(hours=2)

        def tzname(self, d: dt.datetime | None) -> str:
            return "Fixed+2"

        def dst(self, d: dt.datetime | None) -> dt.timedelta:
            return dt.timedelta(0)

    value = dt.datetime(2024, 1, 1, 9, tzinfo=Fixed())
    got = roundtrip(codec, value)
    assert type(got.tzinfo) is dt.timezone
    assert got == value and got.utcoffset() == dt.timedelta(hours=2)


def test_pydantic_parsed_datetime_keeps_its_offset(registered: Codec) -> None:
    item = Item(sku="a", price=Decimal("1"), when=None)
    parsed = pydantic.TypeAdapter(dt.datetime).validate_python("2024-01-01T10:00:00+02:00")
    got = roundtrip(registered, {"item": item, "at": parsed})
    assert got["at"] == parsed and got["at"].utcoffset() == dt.timedelta(hours=2)


# ----------------------------------------------------------------- registered classes


def test_registered_dataclasses_round_trip_nested(registered: Codec) -> None:
    user = User(
        name="ada",
        created=dt.datetime(2024, 1, 2, tzinfo=PARIS),
        address=Address("1 Main St", "12345", ("home", "billing")),
        points=[Point(1.0, 2.0), Point(-0.0, float("inf"))],
    )
    user.counter = 7
    got = roundtrip(registered, {"users": [user], "by_point": {Point(1, 2): user}})
    assert_exact(got, {"users": [user], "by_point": {Point(1, 2): user}})
    assert got["users"][0].counter == 7


def test_registered_pydantic_models_round_trip_nested(registered: Codec) -> None:
    order = Order(
        id=uuid.uuid4(),
        items=[Item(sku="a", price=Decimal("9.99"), when=dt.date(2024, 1, 1))],
        shipped=frozenset({"x"}),
        ship_to=Address("s", "z", ("dock",)),
        Label="fragile",
        note=("extra", 1),  # type: ignore[call-arg]
    )
    got = roundtrip(registered, [order, Item(sku="b", price=Decimal("0"))])
    assert_exact(got, [order, Item(sku="b", price=Decimal("0"))])
    assert got[0].model_extra == {"note": ("extra", 1)}
    assert got[1].model_fields_set == {"sku", "price"}


def test_pydantic_model_decodes_without_revalidation(registered: Codec) -> None:
    item = Item.model_construct(sku="a", price=Decimal("1"))
    got = roundtrip(registered, item)
    assert_exact(got, item)


def test_registered_enums_round_trip(registered: Codec) -> None:
    value = {"c": Color.RED, "b": Color.BLUE, "levels": (Level.LOW,), Color.RED: 1}
    assert_exact(roundtrip(registered, value), value)


def test_register_works_as_decorator_and_with_a_name() -> None:
    codec = Codec()

    @codec.register
    @dataclasses.dataclass
    class A:
        x: int

    @codec.register(name="stable.B")
    @dataclasses.dataclass
    class B:
        a: A

    assert "stable.B" in codec.registered()
    assert_exact(roundtrip(codec, B(A(1))), B(A(1)))


def test_registering_twice_under_the_same_name_is_harmless() -> None:
    codec = Codec()
    codec.register(Point)
    codec.register(Point)
    assert codec.registered()[f"{__name__}.Point"] is Point


def test_register_refuses_a_name_taken_by_another_class() -> None:
    codec = Codec()
    codec.register(Point, name="p")
    with pytest.raises(ConfigurationError, match="already registered"):
        codec.register(Address, name="p")
    with pytest.raises(ConfigurationError, match="already registered as 'p'"):
        codec.register(Point, name="q")


@pytest.mark.parametrize("bad", [int, dict, object, type("Plain", (), {})])
def test_register_refuses_what_is_not_a_dataclass_model_or_enum(bad: type) -> None:
    with pytest.raises(ConfigurationError, match="only dataclasses, pydantic"):
        Codec().register(bad)


def test_register_refuses_an_instance() -> None:
    with pytest.raises(ConfigurationError, match="takes a class"):
        Codec().register(Point(1, 2))  # type: ignore[call-overload]


def test_decoding_an_unregistered_name_names_it(registered: Codec) -> None:
    data = registered.encode({"p": Point(1, 2)})
    with pytest.raises(DecodeError) as info:
        Codec().decode(data, key="runs/r/7")
    assert f"{__name__}.Point" in str(info.value)
    assert "runs/r/7" in str(info.value)
    assert "register" in str(info.value)


def test_decoding_a_dataclass_whose_fields_changed_is_a_decode_error() -> None:
    old = Codec()

    @dataclasses.dataclass
    class V1:
        a: int
        b: int

    old.register(V1, name="thing")
    data = old.encode(V1(1, 2))
    new = Codec()

    @dataclasses.dataclass
    class V2:
        a: int

    new.register(V2, name="thing")
    with pytest.raises(DecodeError, match="cannot rebuild dataclass 'thing'"):
        new.decode(data, key="k")


def test_a_dataclass_that_gained_a_defaulted_field_still_decodes() -> None:
    old = Codec()

    @dataclasses.dataclass
    class V1:
        a: int

    old.register(V1, name="thing")
    data = old.encode(V1(1))
    new = Codec()

    @dataclasses.dataclass
    class V2:
        a: int
        b: str = "default"

    new.register(V2, name="thing")
    assert new.decode(data) == V2(1, "default")


def test_default_codec_is_one_shared_instance() -> None:
    assert default_codec() is default_codec()
    assert isinstance(default_codec(), Codec)


# ----------------------------------------------------------------- property tests

_keys = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.dates()
    | st.uuids(),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=4,
)

_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.binary()
    | st.binary().map(bytearray)
    | st.complex_numbers()
    | st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones())
    | st.datetimes(timezones=st.none() | st.just(UTC)).map(lambda d: d.replace(fold=1))
    | st.dates()
    | st.times(timezones=st.none() | st.just(PLUS_0530))
    | st.timedeltas()
    | st.uuids()
    | st.decimals()
)

_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=5).map(tuple)
        | st.dictionaries(st.text(max_size=5), inner, max_size=5)
        | st.dictionaries(_keys, inner, max_size=4)
        | st.sets(_keys, max_size=4)
        | st.frozensets(_keys, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_any_supported_value_round_trips_exactly(value: Any) -> None:
    codec = default_codec()
    assert_exact(codec.decode(codec.encode(value)), value)
    assert_exact(codec.decode_payload(codec.encode_payload(value)), value)

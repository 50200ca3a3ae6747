"""Pickle is off unless allow-listed, and a hostile pickle is never unpickled."""

from __future__ import annotations

import datetime as dt
import os
import pickle
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
from checkpointkit import DecodeError, EncodeError
from checkpointkit.codec import Codec
from checkpointkit.envelope import CODEC_MSGPACK, CODEC_PICKLE, seal

KEY = "runs/r/steps/1"
EXT_PICKLE = 16


class Allowed:
    def __init__(self, name: str, when: dt.datetime, amount: Decimal) -> None:
        self.name = name
        self.when = when
        self.amount = amount
        self.items = {"a": (1, 2), "s": {3}}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Allowed) and vars(self) == vars(other)


class AllowedChild(Allowed):
    pass


class NotAllowed:
    pass


ALLOWED = f"{__name__}.Allowed"


class MakeDirectory:
    """Unpickling this calls os.mkdir(path): a visible side effect."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


def hostile_pickle(target: Path) -> bytes:
    return pickle.dumps(MakeDirectory(target), protocol=5)


def as_pickle_ext(pickled: bytes) -> bytes:
    payload = msgspec.msgpack.encode({"state": msgspec.msgpack.Ext(EXT_PICKLE, pickled)})
    return seal(payload, codec_tag=CODEC_MSGPACK)


def test_the_hostile_payload_really_has_a_side_effect(tmp_path: Path) -> None:
    target = tmp_path / "proof"
    pickle.loads(hostile_pickle(target))
    assert target.is_dir()


def test_pickle_ext_is_refused_by_default_without_unpickling(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    with pytest.raises(DecodeError, match="pickle is disabled") as info:
        Codec().decode(as_pickle_ext(hostile_pickle(target)), key=KEY)
    assert KEY in str(info.value)
    assert not target.exists()


def test_allow_list_refuses_globals_outside_it(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    codec = Codec(pickle_allow=[ALLOWED])
    with pytest.raises(DecodeError, match=r"refusing to unpickle posix\.mkdir|nt\.mkdir"):
        codec.decode(as_pickle_ext(hostile_pickle(target)), key=KEY)
    assert not target.exists()


@pytest.mark.parametrize("allow", [[], [ALLOWED]], ids=["default", "allow-list"])
def test_raw_pickle_codec_tag_is_never_unpickled(tmp_path: Path, allow: list[str]) -> None:
    target = tmp_path / "pwned"
    data = seal(hostile_pickle(target), codec_tag=CODEC_PICKLE)
    with pytest.raises(DecodeError, match="raw pickle payload"):
        Codec(pickle_allow=allow).decode(data, key=KEY)
    assert not target.exists()


@pytest.mark.parametrize("allow", [[], [ALLOWED]], ids=["default", "allow-list"])
def test_raw_pickle_under_the_msgpack_tag_is_never_unpickled(
    tmp_path: Path, allow: list[str]
) -> None:
    target = tmp_path / "pwned"
    with pytest.raises(DecodeError):
        Codec(pickle_allow=allow).decode(seal(hostile_pickle(target), codec_tag=1), key=KEY)
    assert not target.exists()
    with pytest.raises(DecodeError):
        Codec(pickle_allow=allow).decode_payload(hostile_pickle(target), key=KEY)
    assert not target.exists()


def test_bare_pickle_bytes_are_not_an_envelope(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    with pytest.raises(Exception, match="not a checkpointkit envelope"):
        Codec(pickle_allow=[ALLOWED]).decode(hostile_pickle(target), key=KEY)
    assert not target.exists()


def test_objects_are_not_pickled_without_opt_in() -> None:
    value = Allowed("a", dt.datetime(2024, 1, 1), Decimal("1.5"))
    with pytest.raises(EncodeError, match="pickle_allow"):
        Codec().encode({"obj": value})


def test_allow_listed_class_round_trips_through_pickle() -> None:
    codec = Codec(pickle_allow=[ALLOWED])
    value = Allowed("a", dt.datetime(2024, 1, 1, tzinfo=dt.UTC), Decimal("1.5"))
    got = codec.decode(codec.encode({"obj": value, "n": [1, (2,)]}), key=KEY)
    assert type(got["obj"]) is Allowed and got["obj"] == value
    assert got["n"] == [1, (2,)]


def test_allow_list_accepts_the_class_itself() -> None:
    codec = Codec(pickle_allow=[Allowed])
    value = Allowed("a", dt.datetime(2024, 1, 1), Decimal("2"))
    assert codec.decode(codec.encode(value)) == value


def test_allow_list_is_exact_subclasses_and_others_are_refused() -> None:
    codec = Codec(pickle_allow=[ALLOWED])
    with pytest.raises(EncodeError, match="AllowedChild"):
        codec.encode(AllowedChild("a", dt.datetime(2024, 1, 1), Decimal("1")))
    with pytest.raises(EncodeError, match="NotAllowed"):
        codec.encode([NotAllowed()])


def test_allow_listed_object_holding_a_refused_class_fails_to_decode() -> None:
    value = Allowed("a", dt.datetime(2024, 1, 1), Decimal("1"))
    value.items = {"x": NotAllowed()}  # type: ignore[dict-item]
    codec = Codec(pickle_allow=[ALLOWED])
    data = codec.encode(value)
    with pytest.raises(DecodeError, match="NotAllowed"):
        codec.decode(data, key=KEY)


def test_pickled_class_missing_from_the_readers_allow_list_is_refused() -> None:
    data = Codec(pickle_allow=[ALLOWED]).encode(Allowed("a", dt.datetime(2024, 1, 1), Decimal(1)))
    with pytest.raises(DecodeError, match=f"refusing to unpickle {ALLOWED}"):
        Codec(pickle_allow=[f"{__name__}.NotAllowed"]).decode(data, key=KEY)
    with pytest.raises(DecodeError, match="pickle is disabled"):
        Codec().decode(data, key=KEY)


def test_unpicklable_allow_listed_object_is_an_encode_error_with_path() -> None:
    value = Allowed("a", dt.datetime(2024, 1, 1), Decimal("1"))
    value.items = {"f": lambda: 1}  # type: ignore[dict-item]
    with pytest.raises(EncodeError, match=r"cannot encode state\.obj: pickling .*Allowed failed"):
        Codec(pickle_allow=[ALLOWED]).encode({"obj": value}, path="state")


@pytest.mark.parametrize("bad", ["nodots", "has space.x", 42, "os.system"[:0]])
def test_bad_allow_list_entries_are_configuration_errors(bad: Any) -> None:
    with pytest.raises(ValueError, match="pickle_allow"):
        Codec(pickle_allow=[bad])


def test_a_single_string_allow_list_is_refused() -> None:
    with pytest.raises(ValueError, match="not one string"):
        Codec(pickle_allow=ALLOWED)

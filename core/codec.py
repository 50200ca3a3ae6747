"""The default codec: Python values to msgpack bytes and back, exactly.

Plain data (``str``, ``int``, ``float``, ``bool``, ``None``, ``bytes``, ``list``
and ``dict``) is encoded by msgspec's C encoder as it is. Every other supported
type travels as a msgpack extension type, so that it decodes as the same type
with the same value: ``tuple``, ``set``, ``frozenset``, ``bytearray``, ints beyond
64 bits, ``datetime`` (naive or aware, keeping its tzinfo), ``date``, ``time``,
``timedelta``, ``UUID``, ``Decimal``, ``complex``, dicts with keys that are not
plain, and registered dataclasses, pydantic models and enums.

Encoding first proves, with C-level scans one tree level at a time, that a value
is plain (only the types above plus UTC datetimes, which msgspec round-trips by
itself); a plain value goes to msgspec untouched. Otherwise one Python walk finds
the other types (a dict from exact type to handler; plain containers are checked
with C-level type scans and are neither copied nor rebuilt), then msgspec
encodes the result. Decoding is
msgspec alone, with an ``ext_hook`` for the extension types: plain containers
are never walked in Python.

Pickle is never used unless the codec is built with ``pickle_allow``; see
`Codec`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import gc
import io
import json
import pickle
import struct
import sys
import threading
import types
from collections.abc import Callable, Iterable
from decimal import Decimal
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import Any, Literal, TypeVar, overload
from uuid import UUID, SafeUUID
from zoneinfo import ZoneInfo

import msgspec
from msgspec.msgpack import Ext

from .crypto import Encryption
from .envelope import (
    CODEC_MSGPACK,
    CODEC_PICKLE,
    BytesLike,
    check_compression,
    open_view,
    seal,
)
from .errors import ConfigurationError, DecodeError, EncodeError

__all__ = ["Codec", "default_codec"]

T = TypeVar("T")
_Handler = Callable[[Any], Any]

# Extension type codes of codec tag 1 (CODEC_MSGPACK). Never renumber: stored data uses them.
EXT_TUPLE = 1
EXT_SET = 2
EXT_FROZENSET = 3
EXT_BYTEARRAY = 4
EXT_BIGINT = 5  # int outside [-2**63, 2**64): little-endian two's complement
EXT_DATETIME = 6  # ISO 8601 text as a msgpack str: naive, or with a fixed unnamed offset
EXT_DATE = 7  # ISO 8601 text as a msgpack str
EXT_TIME = 8  # ISO 8601 text as a msgpack str: naive, or with a fixed unnamed offset
EXT_TIMEDELTA = 9  # struct "<iiI": days, seconds, microseconds
EXT_UUID = 10  # the 16 bytes
EXT_DECIMAL = 11  # str(d)
EXT_DICT = 12  # a dict whose keys are not all plain: [k0, v0, k1, v1, ...]
EXT_DATACLASS = 13  # [name, {field: value}]
EXT_PYDANTIC = 14  # [name, {field: value}, fields_set or None, extra or None]
EXT_ENUM = 15  # [name, value]
EXT_PICKLE = 16  # pickle protocol 5 (only with pickle_allow)
EXT_COMPLEX = 17  # struct "<dd"
EXT_DATETIME_TZ = 18  # [naive ISO text, fold, tz]: any other tzinfo, or fold=1
EXT_TIME_TZ = 19  # [naive ISO text, fold, tz]
# A tz is [0] (none), [1, offset in microseconds, name or None] (datetime.timezone, and
# any other tzinfo class, reduced to its offset) or [2, key] (zoneinfo.ZoneInfo).

_NoneType = type(None)
# Built-in types, besides containers, that always encode (datetime and time have their own checks).
_LEAF_TYPES: tuple[type[Any], ...] = (
    bytearray,
    _dt.datetime,
    _dt.date,
    _dt.time,
    _dt.timedelta,
    UUID,
    Decimal,
    complex,
)
_SIMPLE: frozenset[type] = frozenset({str, int, float, bool, _NoneType, bytes})
_SIMPLE_NO_INT: frozenset[type] = _SIMPLE - {int}
_UTC = _dt.UTC
_TIMEDELTA = struct.Struct("<iiI")
_COMPLEX = struct.Struct("<dd")
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1

# What a restricted unpickler admits besides the allow-list: plain data types whose
# reconstruction runs no user code.
_PICKLE_SAFE_GLOBALS = frozenset(
    {
        "builtins.set",
        "builtins.frozenset",
        "builtins.bytearray",
        "builtins.complex",
        "builtins.slice",
        "builtins.range",
        "collections.OrderedDict",
        "collections.deque",
        "datetime.datetime",
        "datetime.date",
        "datetime.time",
        "datetime.timedelta",
        "datetime.timezone",
        "decimal.Decimal",
        "uuid.UUID",
    }
)


# The plain fast path (see _is_plain): types that msgspec round-trips exactly as they are.
_PLAIN_TYPES: frozenset[type] = _SIMPLE | {list, dict, _dt.datetime}
_PLAIN_MAX_DEPTH = 256
_PLAIN_MAX_OBJECTS = 4_000_000
_UTC_ID = {id(_UTC)}
_tzinfo_of = attrgetter("tzinfo")
_fold_of = attrgetter("fold")


def _traversal_is_sound() -> bool:
    """Check the CPython behaviour that _is_plain relies on: dict referents include
    every key that is not an exact str (exact-str keys need no check)."""

    class _S(str):
        pass

    mixed = {"a": 1}
    mixed[_S("b")] = 2
    return (
        sorted(map(str, gc.get_referents([1, "x"]))) == ["1", "x"]
        and 1 in gc.get_referents({1: "v"})
        and any(type(k) is _S for k in gc.get_referents(mixed))
        and gc.get_referents(_dt.datetime(2000, 1, 1, tzinfo=_dt.UTC)) == []
    )


_PLAIN_PATH = _traversal_is_sound()


def _is_plain(root: Any) -> bool:
    """Whether msgspec alone encodes ``root`` exactly, proven with C-level scans.

    A breadth-first walk, one level at a time: ``gc.get_referents`` lists the
    children of every container of a level in one call, and one ``set(map(type,
    ...))`` scans their types, so no Python code runs per value. Plain means only
    str, int, float, bool, None, bytes, list, dict and UTC datetimes (fold 0). dict
    referents omit only exact-str keys, so every other key type is checked too.
    Ints are not range-checked here: msgspec raises OverflowError for big ones.
    Gives up (False) on deep or huge graphs, which includes reference cycles.
    """
    t = type(root)
    if t is not dict and t is not list:
        return t in _SIMPLE or (t is _dt.datetime and root.tzinfo is _UTC and not root.fold)
    level: list[Any] = gc.get_referents(root)
    total = 1
    for _ in range(_PLAIN_MAX_DEPTH):
        found = set(map(type, level))
        if not found <= _PLAIN_TYPES:
            return False
        if _dt.datetime in found:
            moments = list(compress(level, map(is_, map(type, level), repeat(_dt.datetime))))
            if set(map(id, map(_tzinfo_of, moments))) != _UTC_ID or any(map(_fold_of, moments)):
                return False
        if list not in found and dict not in found:
            return True
        total += len(level)
        if total > _PLAIN_MAX_OBJECTS:
            return False
        level = gc.get_referents(*level)
    return False


class _Unsupported(Exception):
    """Internal: the fast walk met a value it cannot encode; the slow walk names its path."""


class _ExtError(Exception):
    """Internal: an extension value in a payload cannot be decoded; the message says why."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Registered:
    cls: type[Any]
    name: str
    kind: Literal["dataclass", "pydantic", "enum"]
    fields: tuple[str, ...]
    init_fields: frozenset[str]


def _qualname(t: type[Any]) -> str:
    module = getattr(t, "__module__", None)
    qual = getattr(t, "__qualname__", getattr(t, "__name__", repr(t)))
    return qual if module in (None, "builtins") else f"{module}.{qual}"


def _pydantic_base() -> type[Any] | None:
    module = sys.modules.get("pydantic")
    base = getattr(module, "BaseModel", None) if module is not None else None
    return base if isinstance(base, type) else None


def _is_pydantic_model_class(cls: type[Any]) -> bool:
    base = _pydantic_base()
    return base is not None and issubclass(cls, base)


def _tz_spec(tz: _dt.tzinfo, value: _dt.datetime | _dt.time) -> list[Any] | None:
    """The stored form of ``tz``; None when it gives no offset (cannot be kept)."""
    if type(tz) is _dt.timezone:
        args = tz.__getinitargs__()  # type: ignore[attr-defined]
        offset: _dt.timedelta = args[0]
        name = args[1] if len(args) > 1 else None
        return [1, offset // _dt.timedelta(microseconds=1), name]
    if type(tz) is ZoneInfo and tz.key:
        return [2, tz.key]
    off = value.utcoffset()
    if off is None:
        return None
    return [1, off // _dt.timedelta(microseconds=1), None]


def _tz_from_spec(spec: list[Any]) -> _dt.tzinfo | None:
    kind = spec[0]
    if kind == 0:
        return None
    if kind == 1:
        offset = _dt.timedelta(microseconds=spec[1])
        return _dt.timezone(offset) if spec[2] is None else _dt.timezone(offset, spec[2])
    if kind == 2:
        return ZoneInfo(spec[1])
    raise _ExtError(f"unknown tzinfo kind {kind!r} (written by a newer checkpointkit?)")


def _child_path(path: str, key: object) -> str:
    if type(key) is str:
        return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key)}]"
    return f"{path}[{key!r}]"


class _RestrictedUnpickler(pickle.Unpickler):
    """Admits only the allow-listed classes and a few plain data types."""

    def __init__(self, data: BytesLike, allowed: frozenset[str]) -> None:
        super().__init__(io.BytesIO(data))
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        qual = f"{module}.{name}"
        if qual in self._allowed or qual in _PICKLE_SAFE_GLOBALS:
            return super().find_class(module, name)
        raise _ExtError(f"refusing to unpickle {qual}: it is not in this codec's pickle_allow list")

    def persistent_load(self, pid: Any) -> Any:
        raise _ExtError("refusing to unpickle a persistent id")


class Codec:
    """Encodes Python values to bytes and back, exactly, inside an envelope.

    Supported: ``None``, ``bool``, ``int`` (any size), ``float``, ``str``,
    ``bytes``, ``bytearray``, ``list``, ``tuple``, ``dict`` (any supported
    hashable keys, e.g. ints or tuples), ``set``, ``frozenset``, ``datetime``
    (naive or aware; the tzinfo is kept: ``datetime.timezone`` with its offset
    and name, ``zoneinfo.ZoneInfo`` by key, any other tzinfo class as a fixed
    ``datetime.timezone`` offset), ``date``, ``time``, ``timedelta``, ``UUID``,
    ``Decimal``, ``complex``, and dataclasses, pydantic (v2) models and enums
    registered with `register`. Types are matched exactly: a subclass of
    ``dict``, ``str`` or of a registered class is refused, so that a value
    always decodes as the type it was.

    A codec is safe to share between threads and tasks; registering is meant to
    happen at import time.

    Args:
        compress_threshold: Payloads longer than this many bytes are
            zstd-compressed (kept compressed only if that makes them smaller).
            ``sys.maxsize`` never compresses.
        compression_level: zstd level, 1 to 22 (default 1, the fastest: saves run on the hot path).
        encryption: Encrypt every new envelope with its active key, and decrypt
            by key id. ``None`` writes clear envelopes (and cannot read
            encrypted ones).
        pickle_allow: Fully qualified class names (``"module.QualName"``, or
            the classes themselves) whose instances may be pickled. Off by
            default: unpickling runs code chosen by whoever wrote the bytes, so
            anyone able to write to the storage could run code in the reader.
            With an allow-list, objects of exactly these classes are pickled,
            and decoding uses an unpickler that resolves only these classes and
            a few plain data types (``datetime``, ``Decimal``, ``UUID``, ...).

    Raises:
        ConfigurationError: A compression setting is out of range, or a
            ``pickle_allow`` entry is not a dotted name or a class.
    """

    def __init__(
        self,
        *,
        compress_threshold: int = 16 * 1024,
        compression_level: int = 1,
        encryption: Encryption | None = None,
        pickle_allow: Iterable[str | type[Any]] = (),
    ) -> None:
        check_compression(compress_threshold, compression_level)
        if encryption is not None and not isinstance(encryption, Encryption):
            raise ConfigurationError(
                f"encryption must be a checkpointkit Encryption, got {type(encryption).__name__}"
            )
        if isinstance(pickle_allow, str):
            raise ConfigurationError(
                "pickle_allow must be a list of class names, not one string: "
                f"pickle_allow=[{pickle_allow!r}]"
            )
        allowed: set[str] = set()
        for entry in pickle_allow:
            if isinstance(entry, type):
                allowed.add(_qualname(entry))
            elif isinstance(entry, str) and "." in entry.strip(".") and " " not in entry:
                allowed.add(entry)
            else:
                raise ConfigurationError(
                    f"pickle_allow entries are 'module.QualName' strings or classes, got {entry!r}"
                )
        self.compress_threshold = compress_threshold
        self.compression_level = compression_level
        self.encryption = encryption
        self.pickle_allow: frozenset[str] = frozenset(allowed)
        self._lock = threading.Lock()
        self._by_type: dict[type[Any], _Registered] = {}
        self._by_name: dict[str, _Registered] = {}
        self._encoder = msgspec.msgpack.Encoder()
        self._value, self._handlers = self._build_walker(strict_ints=False)
        self._value_strict, self._handlers_strict = self._build_walker(strict_ints=True)
        self._decoder = self._build_decoder()

    def __repr__(self) -> str:
        return (
            f"Codec(compress_threshold={self.compress_threshold}, "
            f"compression_level={self.compression_level}, encryption={self.encryption!r}, "
            f"pickle_allow={sorted(self.pickle_allow)!r}, "
            f"registered={sorted(self._by_name)!r})"
        )

    # ------------------------------------------------------------------ registry

    @overload
    def register(self, cls: type[T], *, name: str | None = None) -> type[T]: ...

    @overload
    def register(
        self, cls: None = None, *, name: str | None = None
    ) -> Callable[[type[T]], type[T]]: ...

    def register(
        self, cls: type[T] | None = None, *, name: str | None = None
    ) -> type[T] | Callable[[type[T]], type[T]]:
        """Let this codec encode instances of a dataclass, pydantic model or enum.

        Usable as a decorator, bare (``@codec.register``) or with a name
        (``@codec.register(name="billing.Invoice")``). The name is stored in each
        encoded instance and looked up when decoding, so the class must be
        registered under the same name in the process that decodes. It defaults
        to ``"module.QualName"``; give an explicit one to keep old checkpoints
        readable after moving or renaming the class.

        Instances are stored field by field (every field goes through the codec
        again, so fields may hold any supported value, including other
        registered classes). Dataclasses decode through ``cls(**fields)`` (fields
        with ``init=False`` are set afterwards); pydantic models through
        ``model_construct`` (no second validation; extra fields and the set of
        explicitly set fields are kept; private attributes are not stored and
        get their defaults); enums through ``cls(value)``.

        Args:
            cls: The class. Omit it to get a decorator.
            name: The stored name; defaults to ``"module.QualName"``.

        Returns:
            ``cls`` itself (or a decorator that registers and returns it).

        Raises:
            ConfigurationError: ``cls`` is not a dataclass, pydantic v2 model or
                enum, or the name is already taken by another class, or the class
                is already registered under another name.
        """
        if cls is None:

            def decorator(c: type[T]) -> type[T]:
                return self.register(c, name=name)

            return decorator
        if not isinstance(cls, type):
            raise ConfigurationError(f"register() takes a class, got {cls!r}")
        reg_name = name if name is not None else _qualname(cls)
        if not isinstance(reg_name, str) or not reg_name:
            raise ConfigurationError(f"a registered name must be a non-empty str, got {name!r}")
        if dataclasses.is_dataclass(cls):
            fields = tuple(f.name for f in dataclasses.fields(cls))
            init = frozenset(f.name for f in dataclasses.fields(cls) if f.init)
            entry = _Registered(cls, reg_name, "dataclass", fields, init)
        elif _is_pydantic_model_class(cls):
            fields = tuple(cls.model_fields)  # type: ignore[attr-defined]
            entry = _Registered(cls, reg_name, "pydantic", fields, frozenset(fields))
        elif issubclass(cls, enum.Enum):
            entry = _Registered(cls, reg_name, "enum", (), frozenset())
        else:
            raise ConfigurationError(
                f"cannot register {_qualname(cls)}: only dataclasses, pydantic (v2) models "
                "and enums can be registered"
            )
        with self._lock:
            existing = self._by_name.get(reg_name)
            if existing is not None and existing.cls is not cls:
                raise ConfigurationError(
                    f"cannot register {_qualname(cls)} as {reg_name!r}: that name is already "
                    f"registered for {_qualname(existing.cls)}; pass another name="
                )
            previous = self._by_type.get(cls)
            if previous is not None and previous.name != reg_name:
                raise ConfigurationError(
                    f"{_qualname(cls)} is already registered as {previous.name!r}, not {reg_name!r}"
                )
            self._by_type[cls] = entry
            self._by_name[reg_name] = entry
            self._handlers.pop(cls, None)  # drop a handler cached before registration
            self._handlers_strict.pop(cls, None)
        return cls

    def registered(self) -> dict[str, type[Any]]:
        """The registered classes, by stored name."""
        return {name: entry.cls for name, entry in self._by_name.items()}

    # ------------------------------------------------------------------ encoding

    def encode(self, value: Any, *, path: str = "value", key: str | None = None) -> bytes:
        """Encode ``value`` into a complete envelope (see `checkpointkit.envelope`).

        Synchronous and without copies of the value beyond shallow copies of the
        containers that hold a converted value.

        Args:
            value: What to encode.
            path: How to name the value in error messages (``"state"`` gives
                paths like ``state.users[3].created``).
            key: The storage key the envelope will be stored at. It binds the
                envelope to that key (its checksum and, when encrypted, its
                AES-GCM associated data cover it), so `decode` refuses it
                under any other key. ``None`` writes an unbound envelope.

        Returns:
            The envelope bytes.

        Raises:
            EncodeError: Some part of ``value`` cannot be encoded, or it contains
                itself; the message names the path to it and its type.
            ConfigurationError: ``key`` is not a non-empty str.
        """
        return seal(
            self.encode_payload(value, path=path),
            codec_tag=CODEC_MSGPACK,
            compress_threshold=self.compress_threshold,
            compression_level=self.compression_level,
            encryption=self.encryption,
            key=key,
        )

    def encode_payload(self, value: Any, *, path: str = "value") -> bytes:
        """Encode ``value`` to msgpack bytes without an envelope.

        Args:
            value: What to encode.
            path: How to name the value in error messages.

        Returns:
            The payload bytes, for `decode_payload`.

        Raises:
            EncodeError: As `encode`.
        """
        encode = self._encoder.encode
        try:
            try:
                if _PLAIN_PATH and _is_plain(value):
                    return encode(value)
                return encode(self._value(value))
            except OverflowError:  # an int beyond 64 bits: walk again, checking ints
                return encode(self._value_strict(value))
        except Exception as exc:
            error = self._explain(value, path, exc)
        raise error

    def encode_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        """``encode_payload((args, kwargs), path="args")``, byte for byte; faster for the
        common call of scalar positional arguments (str, int, float, bool, None, bytes).

        Raises:
            EncodeError: As `encode_payload`.
        """
        if (
            not kwargs
            and set(map(type, args)) <= _SIMPLE
            and type(self).encode_payload is Codec.encode_payload  # not overridden
        ):
            encode = self._encoder.encode
            try:
                # What the walk makes of ``(args, {})``: a tuple extension holding
                # [tuple extension of the args, {}].
                return encode(Ext(EXT_TUPLE, encode([Ext(EXT_TUPLE, encode(args)), {}])))
            except OverflowError:
                pass  # an int beyond 64 bits: the general path says which
        return self.encode_payload((args, kwargs), path="args")

    def _explain(self, value: Any, path: str, exc: Exception) -> EncodeError:
        try:
            problem = self._find_problem(value, path)
        except RecursionError:  # pragma: no cover - the walk is iterative
            problem = None
        if problem is None:
            if isinstance(exc, RecursionError):
                problem = f"cannot encode {path}: it nests deeper than Python's recursion limit"
            else:
                problem = f"cannot encode {path}: {type(exc).__name__}: {exc}"
        error = EncodeError(problem)
        if not isinstance(exc, _Unsupported | RecursionError):
            error.__cause__ = exc
        error.__suppress_context__ = True
        return error

    def _resolve(
        self, t: type[Any], handlers: dict[type[Any], _Handler], value: _Handler
    ) -> _Handler:
        """Find (and cache) the handler of a type that is not built in."""
        entry = self._by_type.get(t)
        if entry is not None:
            handler = self._registered_handler(entry, value)
        elif self.pickle_allow and _qualname(t) in self.pickle_allow:
            handler = _pickle_handler
        else:
            raise _Unsupported(t)
        handlers[t] = handler
        return handler

    def _registered_handler(self, entry: _Registered, value: _Handler) -> _Handler:
        encode = self._encoder.encode
        name = entry.name
        fields = entry.fields
        if entry.kind == "dataclass":

            def dataclass_handler(v: Any) -> Ext:
                return Ext(EXT_DATACLASS, encode((name, {f: value(getattr(v, f)) for f in fields})))

            return dataclass_handler
        if entry.kind == "pydantic":
            all_fields = frozenset(fields)

            def pydantic_handler(v: Any) -> Ext:
                data = v.__dict__
                values = {f: value(data[f]) for f in fields if f in data}
                fields_set = v.__pydantic_fields_set__
                stored_set = None if fields_set == all_fields else sorted(fields_set)
                extra = v.__pydantic_extra__
                stored_extra = value(extra) if extra else None
                return Ext(EXT_PYDANTIC, encode((name, values, stored_set, stored_extra)))

            return pydantic_handler

        def enum_handler(v: Any) -> Ext:
            return Ext(EXT_ENUM, encode((name, value(v.value))))

        return enum_handler

    def _build_walker(self, *, strict_ints: bool) -> tuple[_Handler, dict[type[Any], _Handler]]:
        """Build the encode-side walk: ``value(v)`` returns ``v`` or what msgspec should encode.

        With ``strict_ints`` every int is range-checked (big ones become
        extension values); without, ints are trusted and msgspec's OverflowError
        sends the caller to the strict walk.
        """
        simple = _SIMPLE_NO_INT if strict_ints else _SIMPLE
        handlers: dict[type[Any], _Handler] = {}
        encode = self._encoder.encode
        resolve = self._resolve

        def value(v: Any) -> Any:
            t = type(v)
            if t in simple:
                return v
            h = handlers.get(t)
            if h is None:
                h = resolve(t, handlers, value)
            return h(v)

        def items(v: Any) -> Any:
            # The items of a list, tuple, set or frozenset: ``v`` itself when none
            # needs converting (one C-level type scan), else a converted list.
            if set(map(type, v)) <= simple:
                return v
            out = None
            for i, x in enumerate(v):
                t = type(x)
                if t in simple:
                    continue
                h = handlers.get(t)
                if h is None:
                    h = resolve(t, handlers, value)
                y = h(x)
                if y is not x:
                    if out is None:
                        out = list(v)
                    out[i] = y
            return v if out is None else out

        def conv_dict(d: dict[Any, Any]) -> Any:
            kinds = set(map(type, d))
            plain_keys = kinds <= simple
            kinds.update(map(type, d.values()))
            if kinds <= simple:
                return d
            if not plain_keys:
                flat: list[Any] = []
                append = flat.append
                for k, x in d.items():
                    append(value(k))
                    append(value(x))
                return Ext(EXT_DICT, encode(flat))
            out = None
            for k, x in d.items():
                t = type(x)
                if t in simple or (t is list and set(map(type, x)) <= simple):
                    continue
                h = handlers.get(t)
                if h is None:
                    h = resolve(t, handlers, value)
                y = h(x)
                if y is not x:
                    if out is None:
                        out = d.copy()
                    out[k] = y
            return d if out is None else out

        def conv_int(v: int) -> Any:  # only in the strict walk
            if _INT_MIN <= v <= _INT_MAX:
                return v
            return Ext(EXT_BIGINT, v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True))

        def conv_datetime(v: _dt.datetime) -> Any:
            tz = v.tzinfo
            if tz is _UTC:
                if not v.fold:
                    return v  # msgspec's timestamp extension decodes to exactly this
            elif tz is None:
                if not v.fold:
                    return Ext(EXT_DATETIME, encode(v))  # msgspec writes naive ones as ISO text
            elif type(tz) is _dt.timezone and not v.fold and len(tz.__getinitargs__()) == 1:  # type: ignore[attr-defined]
                return Ext(EXT_DATETIME, encode(v.isoformat()))
            return _datetime_general(v, EXT_DATETIME_TZ)

        def conv_time(v: _dt.time) -> Any:
            tz = v.tzinfo
            if v.fold:
                pass
            elif tz is None:
                return Ext(EXT_TIME, encode(v))
            elif type(tz) is _dt.timezone and len(tz.__getinitargs__()) == 1:  # type: ignore[attr-defined]
                return Ext(EXT_TIME, encode(v.isoformat()))
            return _datetime_general(v, EXT_TIME_TZ)

        def _datetime_general(v: _dt.datetime | _dt.time, code: int) -> Ext:
            tz = v.tzinfo
            spec = [0] if tz is None else _tz_spec(tz, v)
            if spec is None:
                raise _Unsupported(type(v))
            naive = v.replace(tzinfo=None, fold=0).isoformat()
            return Ext(code, encode((naive, v.fold, spec)))

        handlers.update(
            {
                list: items,
                dict: conv_dict,
                tuple: lambda v: Ext(EXT_TUPLE, encode(items(v))),
                set: lambda v: Ext(EXT_SET, encode(items(v))),
                frozenset: lambda v: Ext(EXT_FROZENSET, encode(items(v))),
                bytearray: lambda v: Ext(EXT_BYTEARRAY, v),
                _dt.datetime: conv_datetime,
                _dt.date: lambda v: Ext(EXT_DATE, encode(v)),
                _dt.time: conv_time,
                _dt.timedelta: lambda v: Ext(
                    EXT_TIMEDELTA, _TIMEDELTA.pack(v.days, v.seconds, v.microseconds)
                ),
                UUID: lambda v: Ext(EXT_UUID, v.bytes),
                Decimal: lambda v: Ext(EXT_DECIMAL, str(v).encode()),
                complex: lambda v: Ext(EXT_COMPLEX, _COMPLEX.pack(v.real, v.imag)),
            }
        )
        if strict_ints:
            handlers[int] = conv_int
        return value, handlers

    # ------------------------------------------------------------ diagnostics

    def _find_problem(self, root: Any, path: str) -> str | None:
        """Walk ``root`` iteratively with paths; describe the first thing that cannot be encoded."""
        exit_marker = object()
        stack: list[tuple[Any, Any]] = [(root, path)]
        on_path: dict[int, str] = {}
        while stack:
            v, p = stack.pop()
            if v is exit_marker:
                del on_path[p]
                continue
            t = type(v)
            if t in _SIMPLE:
                continue
            children: list[tuple[Any, str]]
            if t is list or t is tuple or t is set or t is frozenset:
                children = [(x, f"{p}[{i}]") for i, x in enumerate(v)]
            elif t is dict:
                children = []
                for i, (k, x) in enumerate(v.items()):
                    if type(k) not in _SIMPLE:
                        children.append((k, f"{p}.keys()[{i}]"))
                    children.append((x, _child_path(p, k)))
            elif t in (_dt.datetime, _dt.time):
                tz = v.tzinfo
                if tz is not None and _tz_spec(tz, v) is None:
                    return (
                        f"cannot encode {p}: its tzinfo ({_qualname(type(tz))}) gives no UTC "
                        "offset; use datetime.timezone or zoneinfo.ZoneInfo"
                    )
                continue
            elif t in _LEAF_TYPES:
                continue  # the other built-in leaf types always encode
            elif t in self._by_type:
                entry = self._by_type[t]
                if entry.kind == "enum":
                    children = [(v.value, f"{p}.value")]
                else:
                    children = [(getattr(v, f, None), f"{p}.{f}") for f in entry.fields]
                    extra = (
                        getattr(v, "__pydantic_extra__", None) if entry.kind == "pydantic" else None
                    )
                    if extra:
                        children.extend((x, _child_path(p, k)) for k, x in extra.items())
            elif self.pickle_allow and _qualname(t) in self.pickle_allow:
                try:
                    pickle.dumps(v, protocol=5)
                except Exception as exc:
                    return f"cannot encode {p}: pickling {_qualname(t)} failed: {exc}"
                continue
            else:
                return self._unsupported_message(v, p)
            marker = id(v)
            if marker in on_path:
                return (
                    f"cannot encode {p}: it is the same {t.__name__} as {on_path[marker]}, "
                    "which contains it (a reference cycle)"
                )
            on_path[marker] = p
            stack.append((exit_marker, marker))
            stack.extend(reversed(children))
        return None

    def _unsupported_message(self, v: Any, p: str) -> str:
        t = type(v)
        qual = _qualname(t)
        kind = None
        if dataclasses.is_dataclass(t):
            kind = "a dataclass"
        elif _is_pydantic_model_class(t):
            kind = "a pydantic model"
        elif isinstance(v, enum.Enum):
            kind = "an enum"
        if kind is not None:
            return (
                f"cannot encode {p}: {qual} is {kind} that is not registered with this codec; "
                f"register it with codec.register({t.__name__}) (or decorate the class with "
                "@codec.register)"
            )
        for base in (*_SIMPLE, list, dict, tuple, set, frozenset, *_LEAF_TYPES):
            if isinstance(v, base):
                return (
                    f"cannot encode {p}: {qual} is a subclass of {_qualname(base)}; only exact "
                    f"{_qualname(base)} values are encoded (so that they decode as the same "
                    f"type): convert it first, e.g. {base.__name__}(value)"
                )
        if isinstance(
            v,
            types.FunctionType
            | types.BuiltinFunctionType
            | types.MethodType
            | types.ModuleType
            | type
            | types.GeneratorType
            | types.CoroutineType,
        ):
            return f"cannot encode {p}: {qual} values are not data and cannot be stored"
        hint = ""
        if getattr(t, "__module__", "builtins") != "builtins":
            hint = (
                "; make it a registered dataclass or pydantic model, or allow pickling "
                f"this class with Codec(pickle_allow=[{qual!r}])"
            )
        return f"cannot encode {p}: unsupported type {qual}{hint}"

    # ------------------------------------------------------------------ decoding

    def decode(self, data: BytesLike, *, key: str | None = None) -> Any:
        """Decode an envelope written by `encode`.

        Args:
            data: The envelope bytes.
            key: The storage key the bytes came from: named in error messages,
                and checked against the key a bound envelope was encoded for
                (without it, the binding is not checked).

        Returns:
            The value, with the same types as when it was encoded.

        Raises:
            CheckpointCorrupted: Not an envelope, truncated, a checksum or
                length mismatch, or bound to another key than ``key``.
            DecryptionError: Encrypted, and no `Encryption` is configured,
                or its key id is unknown, or the key is wrong; or the
                `Encryption` refuses it as plaintext or as unbound.
            DecodeError: An encrypted bound envelope and no ``key``; an unknown format
                version, codec tag or compression tag;
                a raw pickle payload; a pickled object while pickle is disabled
                or of a class outside ``pickle_allow``; a registered-type name
                that this codec does not know; or a malformed payload.
        """
        tag, payload = open_view(data, key=key, encryption=self.encryption)
        if tag != CODEC_MSGPACK:
            where = f"the envelope at key {key!r}" if key is not None else "the envelope"
            if tag == CODEC_PICKLE:
                raise DecodeError(
                    f"{where} holds a raw pickle payload (codec tag {tag}); it is never "
                    "unpickled: pickle is disabled for whole payloads"
                )
            raise DecodeError(
                f"{where} has codec tag {tag}, which this codec does not decode "
                f"(it reads tag {CODEC_MSGPACK}, checkpointkit msgpack)"
            )
        return self.decode_payload(payload, key=key)

    def decode_payload(self, payload: BytesLike, *, key: str | None = None) -> Any:
        """Decode bytes written by `encode_payload` (no envelope).

        Args:
            payload: The payload bytes.
            key: The storage key the bytes came from, named in error messages.

        Returns:
            The value.

        Raises:
            DecodeError: As `decode`, for the payload itself.
        """
        try:
            return self._decoder.decode(payload)
        except _ExtError as exc:
            message = str(exc)
            cause = exc.__cause__
        except RecursionError as exc:
            message = "the payload nests deeper than Python's recursion limit"
            cause = exc
        except Exception as exc:  # msgspec.DecodeError, or a malformed extension value
            message = f"malformed payload: {type(exc).__name__}: {exc}"
            cause = exc
        where = f"the envelope at key {key!r}" if key is not None else "the payload"
        raise DecodeError(f"cannot decode {where}: {message}") from cause

    def _build_decoder(self) -> msgspec.msgpack.Decoder[Any]:
        by_name = self._by_name
        allowed = self.pickle_allow
        table: dict[int, Callable[[memoryview], Any]] = {}
        get = table.get

        def ext_hook(code: int, data: memoryview) -> Any:
            handler = get(code)
            if handler is None:
                raise _ExtError(
                    f"unknown extension type {code} (written by a newer checkpointkit?)"
                )
            return handler(data)

        decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(ext_hook=ext_hook)
        decode = decoder.decode

        def lookup(name: Any, kind: str) -> _Registered:
            entry = by_name.get(name) if isinstance(name, str) else None
            if entry is None:
                raise _ExtError(
                    f"it contains a {kind} registered as {name!r}, and no class is registered "
                    "under that name in this codec; register it with "
                    f"codec.register(cls, name={name!r}) before decoding"
                )
            if entry.kind != kind:
                raise _ExtError(
                    f"{name!r} was stored as a {kind} but is registered here as a {entry.kind}"
                )
            return entry

        def dataclass_value(data: memoryview) -> Any:
            name, fields = decoder.decode(data)
            entry = lookup(name, "dataclass")
            init = entry.init_fields
            try:
                if all(f in init for f in fields):
                    return entry.cls(**fields)
                unknown = [f for f in fields if f not in entry.fields]
                if unknown:
                    raise TypeError(f"stored fields {unknown} are not fields of the class")
                obj = entry.cls(**{f: x for f, x in fields.items() if f in init})
                for f, x in fields.items():
                    if f not in init:  # a field with init=False
                        object.__setattr__(obj, f, x)
                return obj
            except Exception as exc:
                raise _ExtError(
                    f"cannot rebuild dataclass {name!r} ({_qualname(entry.cls)}) from its "
                    f"stored fields: {type(exc).__name__}: {exc}"
                ) from exc

        def pydantic_value(data: memoryview) -> Any:
            name, fields, fields_set, extra = decoder.decode(data)
            entry = lookup(name, "pydantic")
            cls: Any = entry.cls
            try:
                obj = cls.model_construct(
                    _fields_set=set(fields) if fields_set is None else set(fields_set), **fields
                )
                if extra:
                    object.__setattr__(obj, "__pydantic_extra__", extra)
                return obj
            except Exception as exc:
                raise _ExtError(
                    f"cannot rebuild pydantic model {name!r} ({_qualname(entry.cls)}): "
                    f"{type(exc).__name__}: {exc}"
                ) from exc

        def enum_value(data: memoryview) -> Any:
            name, stored = decoder.decode(data)
            entry = lookup(name, "enum")
            try:
                return entry.cls(stored)
            except ValueError as exc:
                raise _ExtError(f"{stored!r} is not a member of enum {name!r}") from exc

        def pickled(data: memoryview) -> Any:
            if not allowed:
                raise _ExtError(
                    "it contains a pickled object, and pickle is disabled on this codec "
                    "(Codec(pickle_allow=[...]) enables it for named classes)"
                )
            try:
                return _RestrictedUnpickler(data, allowed).load()
            except _ExtError:
                raise
            except Exception as exc:
                raise _ExtError(f"a pickled object does not unpickle: {exc}") from exc

        def datetime_general(data: memoryview) -> Any:
            naive, fold, spec = decoder.decode(data)
            return _dt.datetime.fromisoformat(naive).replace(tzinfo=_tz_from_spec(spec), fold=fold)

        def time_general(data: memoryview) -> Any:
            naive, fold, spec = decoder.decode(data)
            return _dt.time.fromisoformat(naive).replace(tzinfo=_tz_from_spec(spec), fold=fold)

        def dict_value(data: memoryview) -> Any:
            flat = decoder.decode(data)
            it = iter(flat)
            return dict(zip(it, it, strict=True))

        fromiso_dt = _dt.datetime.fromisoformat
        fromiso_date = _dt.date.fromisoformat
        fromiso_time = _dt.time.fromisoformat
        table.update(
            {
                EXT_TUPLE: lambda b: tuple(decode(b)),
                EXT_SET: lambda b: set(decode(b)),
                EXT_FROZENSET: lambda b: frozenset(decode(b)),
                EXT_BYTEARRAY: bytearray,
                EXT_BIGINT: lambda b: int.from_bytes(b, "little", signed=True),
                EXT_DATETIME: lambda b: fromiso_dt(decode(b)),
                EXT_DATE: lambda b: fromiso_date(decode(b)),
                EXT_TIME: lambda b: fromiso_time(decode(b)),
                EXT_TIMEDELTA: lambda b: _dt.timedelta(*_TIMEDELTA.unpack(b)),
                EXT_UUID: _uuid_from_bytes,
                EXT_DECIMAL: lambda b: Decimal(str(b, "ascii")),
                EXT_DICT: dict_value,
                EXT_DATACLASS: dataclass_value,
                EXT_PYDANTIC: pydantic_value,
                EXT_ENUM: enum_value,
                EXT_PICKLE: pickled,
                EXT_COMPLEX: lambda b: complex(*_COMPLEX.unpack(b)),
                EXT_DATETIME_TZ: datetime_general,
                EXT_TIME_TZ: time_general,
            }
        )
        return decoder


_set_attr = object.__setattr__
_new_object = object.__new__
_UUID_UNKNOWN = SafeUUID.unknown


def _uuid_from_bytes(data: memoryview) -> UUID:
    if len(data) != 16:
        raise _ExtError(f"a stored UUID has {len(data)} bytes, not 16")
    # What UUID.__setstate__ does; skips UUID.__init__'s argument checks.
    u = _new_object(UUID)
    _set_attr(u, "int", int.from_bytes(data, "big"))
    _set_attr(u, "is_safe", _UUID_UNKNOWN)
    return u


def _pickle_handler(v: Any) -> Ext:
    return Ext(EXT_PICKLE, pickle.dumps(v, protocol=5))


_default: Codec | None = None
_default_lock = threading.Lock()


def default_codec() -> Codec:
    """The shared codec used where none is given (default settings, no encryption).

    Register your classes on it (``default_codec().register(MyState)``) to use
    them with everything that relies on the default.
    """
    global _default
    codec = _default
    if codec is None:
        with _default_lock:
            codec = _default
            if codec is None:
                codec = _default = Codec()
    return codec

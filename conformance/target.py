"""The target of the conformance suite: a factory of fresh, isolated storages.

A factory is any of:

- an async generator function yielding one storage (cleanup after the yield);
- a function returning an async context manager that yields a storage
  (``contextlib.asynccontextmanager``);
- a callable returning a `Storage` (an adapter
  class itself, say) or an awaitable of one; the suite closes it with ``async with``.

Each call must give a storage that sees no key of any other call, unless it is
asked for the same ``location``. Optional keywords make more tests possible;
the suite passes them only when the factory's signature accepts them:

``location: str``
    Open the storage at this location (a root, prefix or namespace derived
    from the string). Two storages opened with the same location see the same
    data: the suite uses it to check ``durable`` (data visible after reopening)
    and ``shared`` (two clients at once). Cleanup may happen when a storage of
    that location closes its context.
``endpoint: tuple[str, int]``
    Connect to the backend through this ``(host, port)`` instead of the real
    one. Together with `Target.upstream` (the real server's address)
    this lets the suite put a stalling TCP proxy
    (`StallProxy`) between the client
    and the server.
``ttl: float``
    Expire every key written through this storage after ``ttl`` seconds (only
    used when the adapter declares the ``ttl`` capability).
``timeout: float``
    The deadline, in seconds, of one operation of this storage (the adapter's
    own ``timeout``, retries included): with ``endpoint``, the suite holds a
    call's reply past it, and checks that the call ends on its own and leaves
    no late reply for the next one.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, cast
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ..errors import ConfigurationError
from ..keys import MAX_KEY_BYTES
from ..registry import open_storage
from ..storage import Capabilities, GetResult, PutMode, Storage, StorageBase, delete_many
from ..urls import redact_url
from .coverage import DEFAULT_MAX_BATCH, DEFAULT_MAX_VALUE, OPS, CoverageProbe, Reach, passed_on
from .holds import FileLock, Hold, MemoryPause, ProxyHold, SQLiteLock
from .outages import FileOutage, Outage, ProxyOutage, default_outage
from .settings import (
    DEFAULT_CANCEL_BOUND,
    DEFAULT_MODEL_BUDGET,
    DEFAULT_SETTLE_WINDOW,
    check_count,
    check_seconds,
)

__all__ = [
    "Factory",
    "PrefixedStorage",
    "Target",
    "holds_key_of",
    "new_location",
    "resolve_target",
]

Factory = Callable[..., Any]
"""A callable giving a fresh storage; see the module documentation for the forms accepted."""


_LOCATION = "{location}"
"""What a ``file`` or ``sqlite`` URL SPEC holds in place of each location's name, for a
directory or a database file per location (``file:///srv/ckc/{location}``,
``sqlite:////srv/ckc/{location}.db``) rather than a key prefix per location in one store."""


def new_location() -> str:
    """A fresh, random location name (``ckc-`` and 16 hex digits)."""
    return f"ckc-{secrets.token_hex(8)}"


def _accepts(factory: Factory, name: str) -> bool:
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or an odd callable: assume not
        return False
    for param in sig.parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            return True
        if param.name == name and param.kind in (
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            return True
    return False


@dataclass
class Target:
    """What the suite runs against: a storage factory and what it supports.

    Attributes:
        factory: gives a fresh, isolated storage on every call (see the module
            documentation for the accepted forms and keywords).
        name: shown in reports.
        capabilities: overrides the capabilities that the storage declares
            (None: read them from the opened storage's ``capabilities``).
        scale: multiplies request counts in the heavier tests (concurrency,
            cancellation sweeps); lower it for slow backends (0.2 for a local
            moto server), raise it for a stress run.
        upstream: the real server's ``(host, port)``, for network adapters
            whose factory accepts ``endpoint``: the suite then runs the
            stalling-proxy tests.
        cleanup: called once when the suite is done with the target.
        settle_window: seconds a cancelled or failed write is watched for a
            late landing (default 2).
        cancel_bound: seconds within which a cancelled operation must raise
            ``CancelledError`` (default 0.5).
        model_budget: seconds the ``model`` group runs random programs
            (default 12; 0 skips it).
        time_limit: seconds after which one test is failed as hung (None: the test
            class's, 60 by default; a test that sends much more gets more). After
            `HUNG_STOP` tests in a row that ran into it, the target's remaining
            tests are not run (reported as not exercised, naming those tests).
        foreign_descriptors: says which open descriptors (by what ``readlink``
            gives, ``/tmp/#123 (deleted)``) belong to a server running in the
            test process rather than to the storage, so that the descriptor
            count leaves them out (moto keeps large objects in temporary files:
            `moto_descriptor`).
        hold: what makes the backend stop answering, for the held-backend
            tests (`holds`): a
            `Hold`, copied for each
            test. None: the stall proxy when the target is
            `proxyable`, else the hold of a built-in adapter, else only
            a large value (`LargeValue`).
            ``Hold()`` holds nothing: the held-backend tests are then reported
            as not exercised.
        outage: what makes the backend fail, for the backend-down tests
            (`outages`): an
            `Outage`, copied for each
            test. None: the stall proxy when the target is `proxyable`, else the
            outage of a built-in adapter (`default_outage`), else none: the
            backend-down tests are then reported as not exercised.
        keys: which valid keys the backend holds, where it holds fewer than the
            protocol's (a test server with a narrower key space: Azurite lists
            keys with characters U+E000 to U+FFFD out of order beside ones above
            U+FFFF); the model group draws only such keys. None: every valid key
            the adapter's ``holds_key`` accepts.
        max_value: the largest value, in bytes, that the coverage's ``sizes``
            matrix asks a put and a get of (default 64 MiB; lower it for a slow
            backend: the larger sizes are then outside the matrix, not unexercised).
        max_batch: the most keys that the coverage's ``batches`` matrix asks one
            ``delete_many`` of (default 65,537: past the limits of common backends,
            `BATCH_LIMITS`); lower it for a slow backend, as for ``max_value``.
        spec: the SPEC string that makes this target in another process (a storage
            URL or ``module:factory``; `resolve_target` sets it). With it, a
            durable target's writes are made in a child process that exits
            without closing anything, and read back here; None reports that
            test as not exercised. A factory of a directory or a database file
            per location gives the ``file`` or ``sqlite`` URL of their folder
            with ``{location}`` (``file:///srv/ckc/{location}``), which makes the
            same one in the child.
    """

    factory: Factory
    name: str = ""
    capabilities: Capabilities | None = None
    scale: float = 1.0
    upstream: tuple[str, int] | None = None
    cleanup: Callable[[], None] | None = None
    settle_window: float = DEFAULT_SETTLE_WINDOW
    cancel_bound: float = DEFAULT_CANCEL_BOUND
    model_budget: float = DEFAULT_MODEL_BUDGET
    time_limit: float | None = None
    foreign_descriptors: Callable[[str], bool] | None = None
    hold: Hold | None = None
    outage: Outage | None = None
    max_value: int = DEFAULT_MAX_VALUE
    max_batch: int = DEFAULT_MAX_BATCH
    keys: Callable[[str], bool] | None = None
    spec: str | None = field(default=None, repr=False)  # a URL may hold a password
    _kw: dict[str, bool] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not callable(self.factory):
            raise ConfigurationError(
                f"a conformance target needs a callable factory, got {self.factory!r}"
            )
        if not self.name:
            self.name = getattr(self.factory, "__qualname__", None) or repr(self.factory)
        if not (self.scale > 0):
            raise ConfigurationError(f"scale must be positive, not {self.scale!r}")
        check_seconds("settle_window", self.settle_window, zero=True)
        if self.time_limit is not None:
            check_seconds("time_limit", self.time_limit)
        check_seconds("cancel_bound", self.cancel_bound)
        check_seconds("model_budget", self.model_budget, zero=True)
        check_count("max_value", self.max_value, least=1, what="a positive number of bytes")
        check_count("max_batch", self.max_batch, least=2, what="a number of keys, at least 2")
        if self.hold is not None and not isinstance(self.hold, Hold):
            raise ConfigurationError(
                f"Target.hold must be a checkpointkit.conformance.holds.Hold, not {self.hold!r}"
            )
        if self.outage is not None and not isinstance(self.outage, Outage):
            raise ConfigurationError(
                "Target.outage must be a checkpointkit.conformance.outages.Outage, "
                f"not {self.outage!r}"
            )
        for kw in ("location", "endpoint", "ttl", "timeout"):
            self._kw[kw] = _accepts(self.factory, kw)

    @classmethod
    def of(cls, obj: Target | Factory, **overrides: Any) -> Target:
        """Make a target from a `Target` or a bare factory.

        Args:
            obj: a target, or a factory.
            **overrides: fields to set on the result (``scale=0.2``, ...).

        Raises:
            ConfigurationError: ``obj`` is not callable.
        """
        if isinstance(obj, Target):
            return replace(obj, **overrides) if overrides else obj
        return cls(factory=obj, **overrides)

    @property
    def reopens(self) -> bool:
        """The factory accepts ``location``: the suite can reopen a storage's data."""
        return self._kw["location"]

    @property
    def proxyable(self) -> bool:
        """The factory accepts ``endpoint`` and the real server's address is known."""
        return self._kw["endpoint"] and self.upstream is not None

    @property
    def times_out(self) -> bool:
        """The factory accepts ``timeout`` and ``endpoint``, and the real server's address
        is known: the suite can hold a reply past the storage's own deadline."""
        return self._kw["timeout"] and self.proxyable

    @property
    def expires(self) -> bool:
        """The factory accepts ``ttl``."""
        return self._kw["ttl"]

    def count(self, n: int, *, minimum: int = 2) -> int:
        """``n`` scaled by `scale`, at least ``minimum``."""
        return max(minimum, round(n * self.scale))

    @asynccontextmanager
    async def open(
        self,
        *,
        location: str | None = None,
        endpoint: tuple[str, int] | None = None,
        ttl: float | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Storage]:
        """Open one storage from the factory; close it (and clean up) on exit.

        Args:
            location: open at this location (requires `reopens`).
            endpoint: connect through this address (requires `proxyable`).
            ttl: expire keys after this many seconds (requires `expires`).
            timeout: the deadline of one operation (the factory takes ``timeout``).

        Raises:
            ConfigurationError: a keyword that the factory does not accept.
            TypeError: the factory gave something that is not a storage.
        """
        kwargs: dict[str, Any] = {}
        given = (("location", location), ("endpoint", endpoint), ("ttl", ttl), ("timeout", timeout))
        for name, value in given:
            if value is None:
                continue
            if not self._kw[name]:
                raise ConfigurationError(f"the factory of {self.name!r} takes no {name!r} keyword")
            kwargs[name] = value
        factory = self.factory
        if inspect.isasyncgenfunction(factory):
            cm: Any = asynccontextmanager(factory)(**kwargs)
        else:
            cm = factory(**kwargs)
            if inspect.isawaitable(cm):
                cm = await cm
        if not hasattr(cm, "__aenter__"):
            raise TypeError(
                f"the factory of {self.name!r} returned {cm!r}, which is neither a storage "
                "nor an async context manager yielding one"
            )
        async with cast(AbstractAsyncContextManager[Any], cm) as storage:
            for op in ("put", "get", "delete", "list", "aclose"):
                if not callable(getattr(storage, op, None)) and callable(getattr(cm, op, None)):
                    raise TypeError(
                        f"the factory of {self.name!r} gave {cm!r}, whose __aenter__ returned "
                        f"{storage!r}, not the storage: a storage's __aenter__ must return "
                        "the storage itself (return self)"
                    )
                if not callable(getattr(storage, op, None)):
                    raise TypeError(
                        f"the factory of {self.name!r} gave {storage!r}, which has no {op}() method"
                    )
            declared = self.capabilities or getattr(storage, "capabilities", None)
            holds = self.holds_key(storage)
            reach = Reach(
                declared if isinstance(declared, Capabilities) else Capabilities(),
                reopens=self.reopens,
                max_value=self.max_value,
                max_batch=self.max_batch,
                batches=has_own_delete_many(storage),
                paging=isinstance(_innermost(storage), StorageBase),
                deep_keys=holds("/".join(["d"] * 100)),
                down=_down_ops(outage := self.outage_for(storage)),
                partway=outage is None or not outage.operations or outage.partway,
                expires=self.expires,
                lost_replies=self.proxyable,
                timeouts=self.times_out,
            )
            yield CoverageProbe(
                storage, self.name, reach, location=location, holds_key=holds, ttl=ttl
            )

    def outage_for(self, storage: object) -> Outage | None:
        """The outage of the backend-down tests for ``storage`` (opened from this target):
        `outage`, else the stall proxy's, else a built-in adapter's, else None."""
        if self.outage is not None:
            return self.outage
        if self.proxyable and self.upstream is not None:
            return ProxyOutage()
        return default_outage(_innermost(storage))

    def holds_key(self, storage: object) -> Callable[[str], bool]:
        """Whether ``storage`` (opened from this target) holds a key: its own
        ``holds_key`` under the suite's prefixes, and `keys`."""
        holds, narrower = holds_key_of(storage), self.keys
        if narrower is None:
            return holds
        return lambda key: holds(key) and bool(narrower(key))


def _down_ops(outage: Outage | None) -> tuple[str, ...]:
    """The operations whose ``backend down`` cells are reachable under ``outage``."""
    if outage is not None and not outage.can_fail:
        return ()
    if outage is None or not outage.operations:
        return OPS  # reachable, and not exercised: the target supplies no outage
    return tuple(op for op in OPS if outage.fails(op))  # type: ignore[arg-type]


def holds_key_of(storage: object) -> Callable[[str], bool]:
    """Whether ``storage`` holds a key, under the suite's own key prefixes (a URL target's).

    A valid key of at most 1024 UTF-8 bytes, with every `PrefixedStorage`'s
    prefix before it, that the adapter's ``holds_key`` accepts where it has one.
    """
    prefix = ""
    while hasattr(storage, "inner"):
        if isinstance(storage, PrefixedStorage):
            prefix += storage.prefix
        storage = storage.inner
    holds = getattr(storage, "holds_key", None)

    def fits(key: str) -> bool:
        full = prefix + key
        try:
            size = len(full.encode())
        except UnicodeEncodeError:
            return False
        return size <= MAX_KEY_BYTES and (holds is None or bool(holds(full)))

    return fits


def has_own_delete_many(storage: object) -> bool:
    """Whether ``storage`` (under the suite's wrappers) deletes a batch its own way: a
    `StorageBase` that overrides ``delete_many`` or ``_delete_many`` (the base class's is
    one ``delete`` per key), or another storage with a ``delete_many`` method."""
    inner = _innermost(storage)
    if isinstance(inner, StorageBase):
        cls = type(inner)
        return (
            cls._delete_many is not StorageBase._delete_many
            or cls.delete_many is not StorageBase.delete_many
        )
    return callable(getattr(inner, "delete_many", None))


def _innermost(storage: object) -> object:
    while hasattr(storage, "inner"):
        storage = storage.inner
    return storage


# -- targets from a SPEC string ------------------------------------------------------------

_MODULE_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_ADDRESS = re.compile(r"(?P<host>127\.0\.0\.1|localhost|\[::1\]):(?P<port>\d{1,5})")


def resolve_target(spec: str | Target | Factory, **overrides: Any) -> Target:
    """Turn what the user named into a `Target`.

    Args:
        spec: a target or factory (returned as is), or a string: ``memory``
            (a fresh in-memory storage per test), ``file`` (a fresh temporary
            directory per test), a storage URL (``redis://127.0.0.1:6379/0``;
            each test works under its own random key prefix, deleted after), a
            ``file`` or ``sqlite`` URL with ``{location}`` in the last segment of
            its path (``sqlite:////srv/ckc/{location}.db``: a directory or a
            database file of its own per location, removed after), or
            ``module:attribute`` naming a factory or a `Target`.
        **overrides: `Target` fields to set (``scale``, ``capabilities``...).

    Raises:
        ConfigurationError: the string is none of these, or names nothing importable.
    """
    if isinstance(spec, Target) or callable(spec):
        return Target.of(spec, **overrides)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigurationError(
            f"a conformance target must be a factory or a non-empty SPEC string, not {spec!r}"
        )
    spec = spec.strip()
    if spec == "memory":
        from ..adapters.memory import MemoryStorage

        return Target.of(Target(MemoryStorage, name="memory", hold=MemoryPause()), **overrides)
    if spec == "file":
        return Target.of(_temp_file_target(), **overrides)
    if "://" in spec:
        return Target.of(_url_target(spec), **{"spec": spec, **overrides})
    if _MODULE_SPEC.match(spec):
        module_name, _, attr = spec.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigurationError(
                f"cannot import {module_name!r} (from {spec!r}): {exc}"
            ) from exc
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise ConfigurationError(f"{module_name!r} has no attribute {attr!r}") from None
        if isinstance(obj, Target):
            return Target.of(obj, **{"spec": obj.spec or spec, **overrides})
        if not callable(obj):
            raise ConfigurationError(f"{spec!r} is {obj!r}, neither a factory nor a Target")
        return Target.of(obj, **{"name": spec, "spec": spec, **overrides})
    raise ConfigurationError(
        f"cannot tell what {spec!r} names: give a storage URL (scheme://...), "
        "'module:factory', 'file' or 'memory'"
    )


def _temp_file_target() -> Target:
    """The ``file`` SPEC: a directory per location in a temporary folder, removed at the end.

    Its `Target.spec` is that folder's URL with ``{location}`` (`_per_location_target`),
    so that another process rebuilds the same directory for a location.
    """
    base = Path(tempfile.mkdtemp(prefix="checkpointkit-conformance-"))
    spec = f"{base.as_uri()}/{_LOCATION}"
    return Target.of(
        _per_location_target(spec),
        name="file (temporary directory)",
        spec=spec,
        cleanup=lambda: shutil.rmtree(base, ignore_errors=True),
    )


def _url_target(url: str) -> Target:
    if _LOCATION in url:
        return _per_location_target(url)
    if urlsplit(url).scheme.lower() in ("redis", "rediss"):
        # Redis knows how to pin each storage to one (proxied) cluster node, and its TTL.
        from .redis_target import redis_target

        return redis_target(url)
    if urlsplit(url).scheme.lower() in ("postgres", "postgresql"):
        # PostgreSQL: a namespace per storage, deleted afterwards, and its TTL.
        from .servers.postgres import postgres_target

        return postgres_target(url)
    # The upstream address, if the URL names a loopback host:port (netloc or a query parameter).
    scheme = urlsplit(url).scheme.lower()
    options: dict[str, Any] = {}
    if scheme in ("file", "sqlite"):
        # The suite writes under the directory (into the database) it was given, never
        # creates it (or its parents): a mistyped path is a ConfigurationError now,
        # before any test runs; ?create=true creates it.
        if "create" not in dict(parse_qsl(urlsplit(url).query)):
            options["create"] = False
        open_storage(url, **options)  # checks the root; holds nothing until first used
    match = _ADDRESS.search(url)
    upstream = None
    if match:
        host = match["host"].strip("[]")
        upstream = ("127.0.0.1" if host == "localhost" else host, int(match["port"]))

    @asynccontextmanager
    async def url_storage(
        *,
        location: str | None = None,
        endpoint: tuple[str, int] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Storage]:
        where = url
        if endpoint is not None and match is not None:
            where = url[: match.start()] + f"{endpoint[0]}:{endpoint[1]}" + url[match.end() :]
        prefix = f"{location or new_location()}/"
        timed = {} if timeout is None else {"timeout": timeout}
        inner = open_storage(where, **options, **timed)
        try:
            async with PrefixedStorage(inner, prefix) as storage:
                yield storage
        finally:
            await _delete_prefix(url, prefix, options)

    hold: Hold | None
    if scheme == "file":
        upstream, hold = None, FileLock()
    elif scheme == "sqlite":
        hold = SQLiteLock()
    else:
        hold = ProxyHold() if upstream is not None else None
    return Target(url_storage, name=redact_url(url), upstream=upstream, hold=hold)


def _per_location_target(url: str) -> Target:
    """The target of a ``file`` or ``sqlite`` URL holding ``{location}``: each location is
    the URL with the location in its place, a directory or a database file of its own.

    The folder that holds the locations must exist (``?create=true`` creates it); each
    location's directory or database file is created when first opened and removed once
    the last storage open on it closes. The SPEC string alone makes the same storage of a
    location in any process: the child of the durability test rebuilds it from that.

    Raises:
        ConfigurationError: ``{location}`` is not in the last segment of the URL's path, the
            URL is neither ``file`` nor ``sqlite``, or the folder is missing.
    """
    scheme = urlsplit(url).scheme.lower()
    head, sep, query = url.partition("?")
    before, _, after = head.partition(_LOCATION)
    folder = before[: before.rfind("/")]
    if (
        scheme not in ("file", "sqlite")
        or "/" not in before.partition("://")[2]
        or "/" in after
        or _LOCATION in after + query
    ):
        raise ConfigurationError(
            f"{redact_url(url)}: {_LOCATION} stands once, in the last segment of the path of a "
            f"file or sqlite URL (file:///srv/ckc/{_LOCATION}, "
            f"sqlite:////srv/ckc/{_LOCATION}.db)"
        )
    if "create" not in dict(parse_qsl(query)):  # as a URL target: never make its folder
        _check_folder(folder, scheme)
    opened: dict[str, int] = {}  # storages open on each location, in this process

    @asynccontextmanager
    async def location_storage(*, location: str | None = None) -> AsyncIterator[Storage]:
        name = location or new_location()
        inner = open_storage(before + quote(name, safe="") + after + sep + query, create=True)
        opened[name] = opened.get(name, 0) + 1
        try:
            async with inner as storage:
                yield storage
        finally:
            opened[name] -= 1
            if not opened[name]:
                del opened[name]
                _remove_location(inner)

    if scheme == "file":  # each root is a directory of the suite's own: it may move it away
        return Target(location_storage, name=redact_url(url), hold=FileLock(), outage=FileOutage())
    return Target(location_storage, name=redact_url(url), hold=SQLiteLock())


def _check_folder(folder_url: str, scheme: str) -> None:
    """Raise `ConfigurationError` unless the folder of a per-location URL's locations exists."""
    if scheme == "file":
        open_storage(folder_url, create=False)  # checks the root; holds nothing until used
        return
    path = unquote(urlsplit(folder_url).path)[1:]  # SQLAlchemy's reading: sqlite:////abs
    if not os.path.isdir(os.path.expanduser(path or ".")):
        raise ConfigurationError(
            f"{redact_url(folder_url)} names the folder {path!r} for the database files of the "
            "locations, which does not exist: check the path, or add ?create=true"
        )


def _remove_location(storage: Storage) -> None:
    """Remove what a per-location storage (closed) kept: its directory or database file."""
    from ..adapters.file import FileStorage
    from ..adapters.sqlite import SQLiteStorage

    if isinstance(storage, FileStorage):
        shutil.rmtree(storage.root, ignore_errors=True)
    elif isinstance(storage, SQLiteStorage):
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(storage.path + suffix)


async def _delete_prefix(url: str, prefix: str, options: dict[str, Any]) -> None:
    async with open_storage(url, **options) as storage:
        keys = [key async for key in storage.list(prefix)]
        for key in keys:
            await storage.delete(key)


class PrefixedStorage:
    """Puts every key of ``inner`` under ``prefix``: an isolated view for one test.

    Used for targets given as a URL, so that each test sees a fresh keyspace on
    a shared backend. It validates nothing itself (the adapter must) and
    passes listed keys that are outside its prefix through unchanged, so that
    an adapter's listing leak stays visible.
    """

    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, inner: Storage, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix
        self.__dict__["capabilities"] = inner.capabilities

    def __repr__(self) -> str:
        return f"PrefixedStorage({self.inner!r}, {self.prefix!r})"

    def _k(self, key: Any) -> Any:
        return self.prefix + key if isinstance(key, str) else key

    async def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> str:
        return await self.inner.put(self._k(key), data, mode=mode)

    async def get(self, key: str) -> GetResult:
        return await self.inner.get(self._k(key))

    async def delete(self, key: str, *, if_match: str | None = None) -> bool:
        return await self.inner.delete(self._k(key), if_match=if_match)

    async def delete_many(self, keys: Iterable[str]) -> int:
        return await delete_many(self.inner, passed_on(keys, [self._k(key) for key in keys]))

    def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        after = self._k(start_after) if start_after is not None else None
        return _Stripped(
            self.inner.list(self._k(prefix), start_after=after, limit=limit), self.prefix
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> PrefixedStorage:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Stripped:
    """Listed keys with the test's prefix removed (keys outside it pass unchanged)."""

    def __init__(self, keys: AsyncIterator[str], prefix: str) -> None:
        self._keys = keys
        self._prefix = prefix

    def __aiter__(self) -> _Stripped:
        return self

    async def __anext__(self) -> str:
        key = await self._keys.__anext__()
        return key[len(self._prefix) :] if key.startswith(self._prefix) else key

"""The file adapter: one file per key under a root directory, atomic and durable.

Layout (see ``docs/adapters/file.md``): each key segment is percent-encoded
with ``urllib.parse.quote(segment, safe="")``, and upper-case ASCII letters are
escaped too (``A`` is ``%41``), so an encoded name holds only lower-case
letters, digits, ``_.-~`` and ``%XX``: no two names differ only by case, which
keeps keys apart on case-insensitive file systems. The last segment names a file; every
other segment names a directory ``<encoded>@``. Internal names hold ``#``,
which no encoded name can hold: temporary files ``#<random>.tmp`` and the lock
directory ``#locks``. So ``a/b`` is ``root/a@/b`` and ``a/b/c`` is
``root/a@/b@/c``: no key collides with another, with a directory, or with an
internal file, and no key can leave the root.

A name that would exceed 255 bytes (``NAME_MAX``: a long segment, or one
of upper-case or non-ASCII characters, which take 3 bytes per byte) is
shortened to ``<head>!<digest>``: the first 150 bytes or so of the encoded
name, ``!`` (which no encoded name holds raw), and 32 hex digits of the
SHA-256 of the segment. The segment itself is kept in a sidecar file
``#<digest>.name`` in the same directory, so that listing can return the real
key and sort it exactly. A sidecar is written (atomically) before any entry
that needs it appears, and removed, under the directory's lock, only when
no entry needs it any more: "entry exists implies sidecar exists" holds at
every moment, for every process, also across crashes.

A file holds a 16-byte random version token followed by the data. Every write
draws a new token, so a version never comes back (no ABA after a delete and a
re-create, unlike an inode number or an mtime).

Each operation is one call into a small thread pool owned by the storage; the
event loop is never blocked by file I/O, and a put costs one thread hop, not
one per system call.
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import fcntl
import functools
import hashlib
import os
import re
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, quote, unquote

from ..errors import (
    CheckpointCorrupted,
    ConfigurationError,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    StorageUnavailable,
)
from ..keys import MAX_KEY_BYTES, validate_key
from ..storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase
from ..versions import hex_token

__all__ = ["FileStorage"]

T = TypeVar("T")

TOKEN_BYTES = 16
"""Length of the random version token at the start of every stored file."""

NAME_MAX = 255
"""Longest file name, in bytes, on the common local file systems."""

LONG_HEAD = 150
"""Most bytes of the encoded segment kept at the start of a shortened name."""

DIGEST_HEX = 32
"""Hex digits of the segment's SHA-256 in a shortened name (128 bits)."""

LOCK_STRIPES = 64
LOCK_DIR = "#locks"

_TEMP_RE = re.compile(r"#[0-9a-f]{16}\.tmp")
_SIDECAR_RE = re.compile(r"#([0-9a-f]{32})\.name")
_LONG_RE = re.compile(r"(?:[a-z0-9_.~-]|%[0-9A-F]{2})*!([0-9a-f]{32})@?")
_PLAIN_RE = re.compile(r"[a-z0-9_.~-]+")
_ENCODED_RE = re.compile(r"(?:[a-z0-9_.~-]|%[0-9A-F]{2})+")
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class _Abandoned(Exception):
    """The awaiting task was cancelled before the commit; nothing was changed."""


class _Guard:
    """Decides, under one lock, whether a cancelled operation may still commit.

    The worker thread checks ``cancelled`` and runs the commit system call
    (rename, link, unlink) while holding ``lock``; the event loop sets
    ``cancelled`` under the same lock. So either the commit happened before
    the cancellation was seen, or it never happens.
    """

    __slots__ = ("cancelled", "committed", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cancelled = False
        self.committed = False

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True


class _Long:
    """A segment whose name was shortened to ``<head>!<digest>``; its sidecar keeps it."""

    __slots__ = ("base", "raw", "sidecar")

    def __init__(self, segment: str, base: str, digest: str) -> None:
        self.base = base  # the shortened name, without the "@" of a directory
        self.raw = segment.encode()  # the sidecar's content
        self.sidecar = f"#{digest}.name"


class _Mapped:
    """Where a key lives on disk.

    ``longs`` maps the level of each shortened segment (0 for the first
    directory, ``len(dirnames)`` for the file) to its `_Long`; it is
    None for the usual key, where no name was shortened.
    """

    __slots__ = ("dirnames", "dirpath", "longs", "path", "rel_dir")

    def __init__(
        self, root: str, dirnames: list[str], leaf: str, longs: dict[int, _Long] | None = None
    ) -> None:
        self.dirnames = dirnames
        self.rel_dir = "/".join(dirnames)
        self.dirpath = f"{root}/{self.rel_dir}" if dirnames else root
        self.path = f"{self.dirpath}/{leaf}"
        self.longs = longs

    @property
    def leaf_long(self) -> _Long | None:
        """The file's `_Long` if its name was shortened."""
        return None if self.longs is None else self.longs.get(len(self.dirnames))


class FileStorage(StorageBase):
    """Keys as files under a root directory, shared safely by many processes.

    Every put writes a temporary file, flushes it (``fsync``), and then
    renames it over the target (overwrite), hard-links it to the target
    (create-only: fails if the target exists) or, under a cross-process
    ``flock``, checks the stored version and renames (if-match); the
    directory is flushed afterwards. A reader sees the whole old or the whole
    new value, also if the writer is killed at any moment.

    Args:
        root: the directory holding the data.
        fsync: flush files and directories to the disk before a put or a
            delete returns. ``False`` is faster but a power loss (not a
            process crash) can lose or empty recent writes.
        create: create ``root`` (and its parents) if it is missing.
        threads: worker threads doing the file I/O.
        lock_timeout: seconds a write waits for the lock of its key's directory
            while another process holds it, before it raises
            ``StorageUnavailable`` (as SQLite's ``busy_timeout``): a process that
            hangs, or is stopped, holding it never lets it go.

    Raises:
        ConfigurationError: ``root`` is missing and ``create`` is False, is
            not a directory, or cannot be created; ``threads`` or
            ``lock_timeout`` is out of range.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        conditional_put=True,
        conditional_delete=True,
        durable=True,
        shared=True,
        ttl=False,
        settles_cancelled_writes=True,
        local=True,
    )

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        fsync: bool = True,
        create: bool = True,
        threads: int = 4,
        lock_timeout: float = 5.0,
    ) -> None:
        path = os.path.abspath(os.path.expanduser(os.fspath(root)))
        if not isinstance(threads, int) or threads < 1:
            raise ConfigurationError(f"threads must be a positive int, not {threads!r}")
        if (
            not isinstance(lock_timeout, int | float)
            or isinstance(lock_timeout, bool)
            or not 0 <= lock_timeout <= 3600
        ):
            raise ConfigurationError(
                f"lock_timeout must be seconds from 0 to 3600, not {lock_timeout!r}"
            )
        if not os.path.isdir(path):
            # Decided by what is there now: another process may have just created it.
            if os.path.exists(path) and not os.path.isdir(path):
                raise ConfigurationError(f"file storage root {path!r} is not a directory")
            if not create and not os.path.isdir(path):
                raise ConfigurationError(
                    f"file storage root {path!r} does not exist, and create=False: "
                    "check the path, or create the directory first"
                )
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise ConfigurationError(
                    f"cannot create file storage root {path!r}: {exc.strerror}"
                ) from exc
        self.root = path
        self.fsync = bool(fsync)
        self.threads = threads
        self.lock_timeout = float(lock_timeout)
        self._executor: ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        self._setup_lock = threading.Lock()
        self._stripe_locks = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._lock_fds: list[int | None] = [None] * LOCK_STRIPES
        self._dirs = _DirCache()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> FileStorage:
        """Open ``file:///abs/path``, ``file://./relative``, or a plain path.

        Query parameters ``fsync``, ``create`` (true/false), ``threads`` (an int)
        and ``lock_timeout`` (seconds) set the options; keyword ``options`` override
        them.

        Raises:
            ConfigurationError: a host other than ``localhost``, an empty path,
                or an unknown or malformed parameter.
        """
        if "://" not in url:
            return cls(url, **_check_options(options))
        scheme, _, rest = url.partition("://")
        if scheme.lower() != "file":
            raise ConfigurationError(f"not a file URL: {url!r}")
        rest, _, query = rest.partition("?")
        if rest.startswith("localhost/"):
            rest = rest[len("localhost") :]
        if not rest:
            raise ConfigurationError(f"file URL {url!r} names no path")
        if not rest.startswith(("/", "./", "../", "~/")) and rest not in (".", "..", "~"):
            raise ConfigurationError(
                f"file URL {url!r} names host {rest.split('/', 1)[0]!r}; use "
                "file:///absolute/path or file://./relative/path"
            )
        params: dict[str, Any] = {}
        for name, value in parse_qsl(query, keep_blank_values=True):
            if name in ("fsync", "create"):
                params[name] = _parse_bool(url, name, value)
            elif name == "lock_timeout":
                params[name] = _parse_number(name, value, float, "a number of seconds")
            elif name == "threads":
                params[name] = _parse_number(name, value, int, "an int")
            else:
                raise ConfigurationError(
                    f"unknown file URL parameter {name!r}; known: create, fsync, lock_timeout, "
                    "threads"
                )
        params.update(_check_options(options))
        return cls(unquote(rest), **params)

    def __repr__(self) -> str:
        return f"FileStorage(root={self.root!r}, fsync={self.fsync})"

    # -- threads -----------------------------------------------------------------------
    def _pool(self) -> ThreadPoolExecutor:
        pool = self._executor
        if pool is None or self._pid != os.getpid():
            with self._setup_lock:
                if self._pid != os.getpid():  # forked: threads and flocks are the parent's
                    self._pid = os.getpid()
                    self._executor = None
                    self._stripe_locks = [threading.Lock() for _ in range(LOCK_STRIPES)]
                    self._lock_fds = [None] * LOCK_STRIPES
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(
                        self.threads, thread_name_prefix="checkpointkit-file"
                    )
                pool = self._executor
        return pool

    async def _call(self, what: str, op: str, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in a worker thread; map OS errors (``what`` names the key)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool(), fn, *args)
        except OSError as exc:
            raise self._translate(exc, what, op) from exc

    async def _call_guarded(self, what: str, op: str, fn: Callable[..., T], *args: Any) -> T:
        """Like `_call` for a write: a cancelled write never commits later.

        On cancellation the guard is set and CancelledError propagates at once;
        the thread sees the flag before its commit system call and undoes its
        temporary work instead.
        """
        guard = _Guard()
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._pool(), functools.partial(fn, *args, guard))
        try:
            return await fut
        except asyncio.CancelledError:
            guard.cancel()
            raise
        except OSError as exc:
            raise self._translate(exc, what, op) from exc

    def _translate(self, exc: OSError, what: str, op: str) -> Exception:
        """Map an OS error to the most specific checkpointkit error."""
        if exc.errno == errno.ENAMETOOLONG:
            return InvalidKey(
                f"invalid {what}: its path under {self.root!r} is too long for the file system"
            )
        code = errno.errorcode.get(exc.errno or 0, "?")
        return StorageUnavailable(
            f"file storage could not {op} {what} under {self.root!r}: "
            f"{exc.strerror or exc} ({code})"
        )

    def _before_commit(self, key: str) -> None:
        """Test hook, called in the worker thread right before a put commits."""

    # -- key mapping ---------------------------------------------------------------------
    def _map(self, key: str) -> _Mapped:
        segments = key.split("/")
        dirnames = [_encode(s) + "@" for s in segments[:-1]]
        leaf = _encode(segments[-1])
        if len(leaf) <= NAME_MAX and all(len(name) <= NAME_MAX for name in dirnames):
            return _Mapped(self.root, dirnames, leaf)
        # A name too long for the file system: shorten it, the sidecar keeps the segment.
        longs: dict[int, _Long] = {}
        for level, segment in enumerate(segments):
            is_dir = level < len(dirnames)
            name = dirnames[level] if is_dir else leaf
            if len(name) > NAME_MAX:
                long = longs[level] = _shorten(segment, name[:-1] if is_dir else name)
                if is_dir:
                    dirnames[level] = long.base + "@"
                else:
                    leaf = long.base
        return _Mapped(self.root, dirnames, leaf, longs)

    # -- the protocol --------------------------------------------------------------------
    def _may_match(self, version: str) -> bool:
        return hex_token(version, 2 * TOKEN_BYTES)  # the file's random token, in hex

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        mapped = self._map(key)
        return await self._call_guarded(
            f"key {key!r}", "put", self._put_sync, key, mapped, data, mode
        )

    async def _get(self, key: str) -> GetResult:
        mapped = self._map(key)
        return await self._call(f"key {key!r}", "get", self._get_sync, key, mapped)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        mapped = self._map(key)
        return await self._call_guarded(
            f"key {key!r}", "delete", self._delete_sync, key, mapped, if_match
        )

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        if cursor is None:
            cursor = _Cursor(start_after)
        what = f"prefix {prefix!r}"
        return await self._call(what, "list", self._list_sync, prefix, cursor, limit)

    async def _delete_many(self, keys: list[str]) -> int:
        """Unlink every key, then flush each directory once (not once per key)."""
        mapped = [(key, self._map(key)) for key in keys]
        return await self._call_guarded(
            f"{len(keys)} keys", "delete", self._delete_many_sync, mapped
        )

    async def _aclose(self) -> None:
        pool, self._executor = self._executor, None
        if pool is None and not any(fd is not None for fd in self._lock_fds):
            return  # never used: no thread, no file descriptor

        def finish() -> None:
            if pool is not None:
                pool.shutdown(wait=True)  # every submitted operation runs to its end
            self._close_locks()

        loop = asyncio.get_running_loop()
        # Shielded: if aclose is cancelled, the shutdown still completes in the background.
        await asyncio.shield(loop.run_in_executor(None, finish))

    async def sweep_temp_files(self, older_than: float = 3600) -> int:
        """Remove temporary files left by killed processes; return how many.

        A put killed before its commit leaves a ``#<random>.tmp`` file in the
        key's directory, and may leave a sidecar ``#<digest>.name`` that no
        shortened name needs. Neither is ever listed, but both take space.
        Empty key directories are removed too. A sidecar is removed under its
        directory's lock, after checking that no entry needs it.

        Args:
            older_than: only remove files last modified this many seconds ago
                or earlier; keep it above the longest put that may be running
                in another process.

        Raises:
            StorageClosed: the storage was closed.
            StorageUnavailable: the file system failed.
        """
        self._check_open()
        return await self._call("temporary files", "sweep", self._sweep_sync, float(older_than))

    # -- worker-thread side ------------------------------------------------------------
    def _put_sync(self, key: str, m: _Mapped, data: bytes, mode: PutMode, guard: _Guard) -> str:
        if guard.cancelled:
            raise _Abandoned
        token = os.urandom(TOKEN_BYTES)
        tmp, fd = self._create_temp(m)
        long = m.leaf_long
        keep_tmp = False  # True once the temp file was renamed to the target
        try:
            try:
                _write_all(fd, token, data)
                if self.fsync:
                    _flush_file(fd)
            finally:
                os.close(fd)
            if long is not None:
                self._ensure_sidecar(m.dirpath, long)
            self._before_commit(key)
            if mode == "overwrite":
                with self._locked(m.rel_dir):
                    if long is not None:
                        self._keep_sidecar(m.dirpath, long)
                    with guard.lock:
                        if guard.cancelled:
                            raise _Abandoned
                        os.rename(tmp, m.path)
                        guard.committed = keep_tmp = True
            elif mode == "create":
                # ``link`` needs no lock, except to keep a shortened name's sidecar.
                lock: AbstractContextManager[None]
                lock = nullcontext() if long is None else self._locked(m.rel_dir)
                with lock:
                    if long is not None:
                        self._keep_sidecar(m.dirpath, long)
                    with guard.lock:
                        if guard.cancelled:
                            raise _Abandoned
                        try:
                            os.link(tmp, m.path)
                        except FileExistsError:
                            raise PreconditionFailed(
                                f"key {key!r} already exists (create-only put)"
                            ) from None
                        guard.committed = True
            else:
                assert isinstance(mode, IfMatch)
                with self._locked(m.rel_dir):
                    current = self._read_token(key, m.path)
                    if current is None:
                        raise PreconditionFailed(
                            f"key {key!r} does not exist (if-match {mode.version})"
                        )
                    if current != mode.version:
                        raise PreconditionFailed(
                            f"key {key!r} is at version {current}, not {mode.version} "
                            "(if-match put)"
                        )
                    if long is not None:
                        self._keep_sidecar(m.dirpath, long)
                    with guard.lock:
                        if guard.cancelled:
                            raise _Abandoned
                        os.rename(tmp, m.path)
                        guard.committed = keep_tmp = True
        finally:
            if not keep_tmp:
                _unlink_quietly(tmp)
            if long is not None and not guard.committed:
                self._drop_sidecar(m.rel_dir, m.dirpath, long)  # if no entry needs it
        if self.fsync:
            self._flush_dir(m.dirpath)
        return token.hex()

    def _create_temp(self, m: _Mapped) -> tuple[str, int]:
        """Create a new temporary file in the key's directory, making directories."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC
        for _ in range(100):
            tmp = f"{m.dirpath}/#{os.urandom(8).hex()}.tmp"
            try:
                return tmp, os.open(tmp, flags, 0o666)
            except FileNotFoundError:
                # The directory is missing, or a concurrent delete removed it
                # while it was empty: (re)create it and try again.
                self._make_dirs(m)
        raise FileNotFoundError(errno.ENOENT, "the key's directory keeps disappearing")

    def _make_dirs(self, m: _Mapped) -> None:
        path = self.root
        for level, name in enumerate(m.dirnames):
            parent, path = path, f"{path}/{name}"
            long = None if m.longs is None else m.longs.get(level)
            try:
                if long is None:
                    os.mkdir(path)
                elif os.path.isdir(path):
                    continue  # it exists, so its sidecar does
                else:
                    # The sidecar first, and kept under the parent's lock until the
                    # directory exists: a concurrent prune drops it only under that lock.
                    self._ensure_sidecar(parent, long)
                    with self._locked("/".join(m.dirnames[:level])):
                        self._keep_sidecar(parent, long)
                        os.mkdir(path)
            except FileExistsError:
                continue
            except FileNotFoundError:
                if parent == self.root:
                    raise  # the root itself is gone
                return  # a concurrent delete removed a parent; the caller retries
            if self.fsync:
                self._flush_dir(parent)

    # -- sidecars of shortened names -----------------------------------------------------
    def _ensure_sidecar(self, dirpath: str, long: _Long) -> None:
        """Make sure ``dirpath`` holds the sidecar of ``long``, whole (no lock held).

        An existing sidecar with the right content costs one read; a missing
        or damaged one is written atomically (temp, flush, rename, flush the
        directory), so that it is on disk before the entry that needs it.
        """
        path = f"{dirpath}/{long.sidecar}"
        try:
            with open(path, "rb", buffering=0) as f:
                if f.read(len(long.raw) + 1) == long.raw:
                    return
        except FileNotFoundError:
            pass
        self._write_sidecar(dirpath, path, long.raw)

    def _keep_sidecar(self, dirpath: str, long: _Long) -> None:
        """Under the directory's lock, right before an entry needing it appears.

        A delete of the last entry sharing the sidecar may have removed it
        since `_ensure_sidecar`: write it again (rare).
        """
        path = f"{dirpath}/{long.sidecar}"
        try:
            os.lstat(path)
        except FileNotFoundError:
            self._write_sidecar(dirpath, path, long.raw)

    def _write_sidecar(self, dirpath: str, path: str, raw: bytes) -> None:
        tmp = f"{dirpath}/#{os.urandom(8).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o666)
        try:
            try:
                _write_all(fd, b"", raw)
                if self.fsync:
                    _flush_file(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)  # the content is fixed by the name: replacing is harmless
        except BaseException:
            _unlink_quietly(tmp)
            raise
        if self.fsync:
            self._flush_dir(dirpath)

    def _drop_sidecar(self, rel_dir: str, dirpath: str, long: _Long) -> None:
        """Remove the sidecar of ``long`` if no entry needs it any more (best effort)."""
        with suppress(OSError), self._locked(rel_dir):
            self._drop_sidecar_locked(dirpath, long)

    def _drop_sidecar_locked(self, dirpath: str, long: _Long) -> None:
        """As `_drop_sidecar`, holding the directory's lock already."""
        base = f"{dirpath}/{long.base}"
        if not os.path.lexists(base) and not os.path.lexists(base + "@"):
            with suppress(FileNotFoundError):
                os.unlink(f"{dirpath}/{long.sidecar}")

    def _get_sync(self, key: str, m: _Mapped) -> GetResult:
        try:
            f = open(m.path, "rb", buffering=0)  # noqa: SIM115 - closed below
        except (FileNotFoundError, NotADirectoryError):
            self._check_root()
            raise NotFound(f"key {key!r} not found") from None
        with f:
            token = f.read(TOKEN_BYTES)
            if len(token) < TOKEN_BYTES:
                raise self._truncated(key, len(token))
            data = f.readall()
        return GetResult(data, token.hex())

    def _check_root(self) -> None:
        """A path under the root is missing: a missing key, unless the root itself is gone.

        Raises:
            FileNotFoundError: the root is no longer a directory (moved, deleted,
                unmounted): every key would read as missing, so the operation
                fails (``StorageUnavailable``) instead of answering "not there".
        """
        if not os.path.isdir(self.root):
            raise FileNotFoundError(
                errno.ENOENT,
                "the storage's root directory is gone (moved, deleted or unmounted)",
                self.root,
            )

    def _read_token(self, key: str, path: str) -> str | None:
        try:
            fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            token = os.read(fd, TOKEN_BYTES)
        finally:
            os.close(fd)
        if len(token) < TOKEN_BYTES:
            raise self._truncated(key, len(token))
        return token.hex()

    def _truncated(self, key: str, size: int) -> CheckpointCorrupted:
        return CheckpointCorrupted(
            f"the file of key {key!r} under {self.root!r} holds {size} bytes, less than its "
            f"{TOKEN_BYTES}-byte version header: it was not written by FileStorage, or was "
            "lost in a power failure with fsync=False"
        )

    def _delete_sync(self, key: str, m: _Mapped, if_match: str | None, guard: _Guard) -> bool:
        if guard.cancelled:
            raise _Abandoned
        with self._locked(m.rel_dir):
            if if_match is not None:
                current = self._read_token(key, m.path)
                if current is None:
                    self._check_root()
                    return False
                if current != if_match:
                    raise PreconditionFailed(
                        f"key {key!r} is at version {current}, not {if_match} (if-match delete)"
                    )
            with guard.lock:
                if guard.cancelled:
                    raise _Abandoned
                try:
                    os.unlink(m.path)
                except (FileNotFoundError, NotADirectoryError):
                    self._check_root()
                    return False
                guard.committed = True
            long = m.leaf_long
            if long is not None:
                with suppress(OSError):
                    self._drop_sidecar_locked(m.dirpath, long)
        if self.fsync:
            self._flush_dir(m.dirpath)
        self._prune_dirs(m)
        return True

    def _prune_dirs(self, m: _Mapped) -> None:
        """Remove the key's directories that became empty, deepest first (best effort).

        A shortened directory's sidecar, in its parent, goes with it unless a
        file of the same segment still needs it.
        """
        paths = [self.root]
        for name in m.dirnames:
            paths.append(f"{paths[-1]}/{name}")
        for level in reversed(range(len(m.dirnames))):
            try:
                os.rmdir(paths[level + 1])
            except OSError:
                return
            long = None if m.longs is None else m.longs.get(level)
            if long is not None:
                self._drop_sidecar("/".join(m.dirnames[:level]), paths[level], long)

    def _flush_dir(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        except FileNotFoundError:
            return  # removed meanwhile by a delete of its last key: nothing to flush
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextmanager
    def _locked(self, rel_dir: str) -> Iterator[None]:
        """Hold the cross-process lock of a key directory (one of 64 stripes).

        ``flock`` belongs to an open file description, so the threads of this
        process share one descriptor per stripe behind a threading lock.
        """
        stripe = zlib.crc32(rel_dir.encode()) % LOCK_STRIPES
        with self._stripe_locks[stripe]:
            fd = self._lock_fds[stripe]
            if fd is None:
                fd = self._open_lock(stripe)
            _flock_within(fd, self.lock_timeout, rel_dir)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _open_lock(self, stripe: int) -> int:
        lock_dir = f"{self.root}/{LOCK_DIR}"
        path = f"{lock_dir}/{stripe:02d}"
        flags = os.O_RDWR | os.O_CREAT | _O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o666)
        except FileNotFoundError:
            os.makedirs(lock_dir, exist_ok=True)
            fd = os.open(path, flags, 0o666)
        self._lock_fds[stripe] = fd
        return fd

    def _close_locks(self) -> None:
        for i, fd in enumerate(self._lock_fds):
            if fd is not None:
                self._lock_fds[i] = None
                os.close(fd)

    def _list_sync(self, prefix: str, cursor: _Cursor, limit: int) -> ListPage:
        segments = prefix.split("/")
        complete, partial = segments[:-1], segments[-1]
        dirpath = self.root
        for segment in complete:
            dirpath = f"{dirpath}/{_dir_name(segment)}"
        base = "".join(s + "/" for s in complete)
        out: list[str] = []
        _walk(dirpath, base, partial, cursor.after, limit, out, cursor, self._dirs)
        if len(out) < limit:
            self._check_root()  # the last page: was nothing more there, or no root?
            return ListPage(out, None)
        cursor.after = out[-1]
        return ListPage(out, cursor)

    def _delete_many_sync(self, mapped: list[tuple[str, _Mapped]], guard: _Guard) -> int:
        existed = 0
        by_dir: dict[str, list[tuple[str, _Mapped]]] = {}
        for key, m in mapped:
            if m.longs is not None:  # a shortened name: its sidecar needs the careful path
                existed += self._delete_sync(key, m, None, guard)
            else:
                by_dir.setdefault(m.rel_dir, []).append((key, m))
        for rel_dir, group in by_dir.items():
            gone = 0
            with self._locked(rel_dir):
                for _key, m in group:
                    with guard.lock:
                        if guard.cancelled:
                            raise _Abandoned
                        try:
                            os.unlink(m.path)
                        except (FileNotFoundError, NotADirectoryError):
                            continue
                        guard.committed = True
                    gone += 1
            existed += gone
            if gone:
                if self.fsync:
                    self._flush_dir(group[0][1].dirpath)
                self._prune_dirs(group[0][1])
        if existed < len(mapped):
            self._check_root()
        return existed

    def _sweep_sync(self, older_than: float) -> int:
        cutoff = time.time() - older_than
        removed = 0
        lock_dir = f"{self.root}/{LOCK_DIR}"
        # Deepest first: a directory's own debris goes, then the directory if it
        # is empty, then (in its parent) the sidecar that only it needed.
        for dirpath, _dirnames, filenames in os.walk(self.root, topdown=False):
            if dirpath == lock_dir or dirpath.startswith(lock_dir + "/"):
                continue
            sidecars: list[str] = []
            for name in filenames:
                if _SIDECAR_RE.fullmatch(name):
                    sidecars.append(name)
                elif _TEMP_RE.fullmatch(name) and _unlink_if_old(f"{dirpath}/{name}", cutoff):
                    removed += 1
            if sidecars:
                removed += self._sweep_sidecars(dirpath, sidecars, cutoff)
            if dirpath != self.root and dirpath.endswith("@"):
                with suppress(OSError):  # not empty, or gone
                    os.rmdir(dirpath)
        return removed

    def _sweep_sidecars(self, dirpath: str, sidecars: list[str], cutoff: float) -> int:
        """Remove the sidecars in ``dirpath`` that no entry needs (a killed put's debris)."""
        rel_dir = dirpath[len(self.root) + 1 :]
        removed = 0
        with self._locked(rel_dir):  # no put makes an entry needing one meanwhile
            try:
                names = os.listdir(dirpath)
            except FileNotFoundError:
                return 0
            needed = {match.group(1) for match in map(_LONG_RE.fullmatch, names) if match}
            for name in sidecars:
                match = _SIDECAR_RE.fullmatch(name)
                assert match is not None
                if match.group(1) not in needed and _unlink_if_old(f"{dirpath}/{name}", cutoff):
                    removed += 1
        return removed


# -- helpers ---------------------------------------------------------------------------


Entry = tuple[str, str, bool]
"""A directory entry as listing sorts it: (sort key, name, is a directory)."""


class _Cursor:
    """The state of one listing between its pages.

    ``after`` is the last key returned; ``snapshots`` holds the sorted
    entries of every directory this listing has read, so a later page
    continues from where the previous one stopped (a binary search), without
    reading or sorting any directory again.
    """

    __slots__ = ("after", "snapshots")

    def __init__(self, after: str | None) -> None:
        self.after = after
        self.snapshots: dict[str, tuple[list[str], list[Entry]] | None] = {}


class _DirCache:
    """Sorted snapshots of large directories, shared by listings while a directory is unchanged.

    A snapshot is reused only if the directory's (device, inode, mtime) is the
    one seen before it was read, and it was read at least
    `RACY_NS` after that mtime: a change after the read then gets a
    later mtime, also on a file system whose clock ticks coarsely (the idea
    of git's "racy" index entries). A directory changed within that window is
    read again each time, which is always correct.
    """

    __slots__ = ("_dirs", "_lock", "_size")

    MIN_ENTRIES: ClassVar[int] = 64
    MAX_ENTRIES: ClassVar[int] = 500_000

    def __init__(self) -> None:
        self._dirs: OrderedDict[str, tuple[tuple[int, int, int], list[str], list[Entry]]]
        self._dirs = OrderedDict()
        self._lock = threading.Lock()
        self._size = 0

    def read(self, dirpath: str) -> tuple[list[str], list[Entry]] | None:
        """The sorted (sort keys, entries) of ``dirpath``; None if it is not a directory."""
        try:
            st = os.stat(dirpath)
        except (FileNotFoundError, NotADirectoryError):
            return None
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns)
        with self._lock:
            hit = self._dirs.get(dirpath)
            if hit is not None and hit[0] == stamp:
                self._dirs.move_to_end(dirpath)
                return hit[1], hit[2]
        read_at = time.time_ns()
        try:
            names = os.listdir(dirpath)
        except (FileNotFoundError, NotADirectoryError):
            return None
        entries, complete = _classify_all(dirpath, names)
        entries.sort()
        keys = [e[0] for e in entries]
        racy = RACY_NS if st.st_mtime_ns % 1_000_000_000 else 2_000_000_000
        if complete and len(entries) >= self.MIN_ENTRIES and read_at - st.st_mtime_ns > racy:
            with self._lock:
                old = self._dirs.pop(dirpath, None)
                if old is not None:
                    self._size -= len(old[2])
                self._dirs[dirpath] = (stamp, keys, entries)
                self._size += len(entries)
                while self._size > self.MAX_ENTRIES and len(self._dirs) > 1:
                    _, dropped = self._dirs.popitem(last=False)
                    self._size -= len(dropped[2])
        return keys, entries


RACY_NS = 50_000_000
"""How long after a directory's mtime a snapshot of it may be cached (50 ms; 2 s on
file systems with whole-second times)."""


def _classify_all(dirpath: str, names: list[str]) -> tuple[list[Entry], bool]:
    """The entries of ``names`` that are keys or key directories, and whether all were decided."""
    cache = _NAMES
    if len(cache) > _NAMES_MAX:
        cache.clear()
    entries: list[Entry] = []
    complete = True
    for name in names:
        entry = cache.get(name)
        if entry is None:
            entry = _classify(name) if "!" not in name else _classify_long(dirpath, name)
            if entry is None:
                complete = False  # a shortened name whose sidecar is missing: not a key (yet)
                continue
            cache[name] = entry
        sort_key, is_dir = entry
        if sort_key:
            entries.append((sort_key, name, is_dir))
    return entries, complete


def _walk(
    dirpath: str,
    base: str,
    partial: str,
    after: str | None,
    limit: int,
    out: list[str],
    cursor: _Cursor,
    dirs: _DirCache,
) -> bool:
    """Append the keys under ``dirpath`` (key prefix ``base``) in ascending order.

    Only keys whose first segment here starts with ``partial`` and that are
    greater than ``after`` count; stop at ``limit`` keys in ``out`` (return
    True). Entries sort by ``name`` for a file and ``name + "/"`` for a
    directory, which is exactly the order of the keys below them, so the
    first entry to visit is found by binary search in the directory's sorted
    snapshot (read once per listing, see `_Cursor`), and a directory
    whose keys all sort at or before ``after`` is never read.
    """
    if after is None or after < base:
        rel = None  # every key here sorts after ``after``
    elif after.startswith(base):
        rel = after[len(base) :]
    else:
        return False  # every key here sorts before ``after``
    if dirpath in cursor.snapshots:
        snapshot = cursor.snapshots[dirpath]
    else:
        snapshot = cursor.snapshots[dirpath] = dirs.read(dirpath)
    if snapshot is None:
        return False
    keys, entries = snapshot
    start = bisect.bisect_left(keys, partial) if partial else 0
    if rel is not None:
        pos = bisect.bisect_right(keys, rel)
        if pos > 0:
            sort_key, _name, is_dir = entries[pos - 1]
            if is_dir and rel.startswith(sort_key):
                pos -= 1  # ``after`` lies inside this directory: continue in it
        start = max(start, pos)
    for i in range(start, len(entries)):
        sort_key, name, is_dir = entries[i]
        if partial and not sort_key.startswith(partial):
            return False  # past the prefix: the rest sorts after it
        if is_dir:
            if _walk(f"{dirpath}/{name}", base + sort_key, "", after, limit, out, cursor, dirs):
                return True
        else:
            out.append(base + sort_key)
            if len(out) >= limit:
                return True
    return False


_NAMES: dict[str, tuple[str, bool]] = {}
"""Directory entry name -> (sort key relative to its directory, is a directory).

The sort key is the decoded segment for a file, the segment plus ``/`` for a
directory, and empty for an internal or foreign name. A pure function of the
name, cached because large directories are listed once per page.
"""
_NAMES_MAX = 200_000
_SKIP = ("", False)


def _classify(name: str) -> tuple[str, bool]:
    if "#" in name:
        return _SKIP  # a temporary file or the lock directory
    if name.endswith("@"):
        segment = _decode(name[:-1])
        return _SKIP if segment is None else (segment + "/", True)
    segment = _decode(name)
    return _SKIP if segment is None else (segment, False)


def _classify_long(dirpath: str, name: str) -> tuple[str, bool] | None:
    """Like `_classify` for a shortened name: its segment is in its sidecar.

    None if the sidecar is missing or does not hold a segment that maps to
    ``name`` (then the name is not cached: a put may yet write the sidecar).
    """
    match = _LONG_RE.fullmatch(name)
    if match is None:
        return _SKIP  # "#" (internal) or a foreign name
    try:
        with open(f"{dirpath}/#{match.group(1)}.name", "rb", buffering=0) as f:
            raw = f.read(MAX_KEY_BYTES + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    try:
        segment = raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        return None
    is_dir = name.endswith("@")
    if not segment or "/" in segment or (_dir_name if is_dir else _file_name)(segment) != name:
        return None  # damaged, or not the canonical name of its segment
    try:
        validate_key(segment)
    except InvalidKey:
        return None
    return (segment + "/", True) if is_dir else (segment, False)


def _file_name(segment: str) -> str:
    """The name of the file of a key whose last segment is ``segment``."""
    name = _encode(segment)
    return name if len(name) <= NAME_MAX else _shorten(segment, name).base


def _dir_name(segment: str) -> str:
    """The name of the directory of the keys below ``segment``."""
    name = _encode(segment)
    if len(name) < NAME_MAX:
        return name + "@"
    return _shorten(segment, name).base + "@"


def _shorten(segment: str, encoded: str) -> _Long:
    """``<head>!<digest>`` for a segment whose ``encoded`` name is too long.

    The head is the start of ``encoded``, cut before a ``%XX`` escape rather
    than inside it; the digest is the SHA-256 of the segment, in hex.
    """
    cut = LONG_HEAD
    escape = encoded.rfind("%", cut - 2, cut)
    if escape != -1:
        cut = escape
    digest = hashlib.sha256(segment.encode()).hexdigest()[:DIGEST_HEX]
    return _Long(segment, f"{encoded[:cut]}!{digest}", digest)


def _encode(segment: str) -> str:
    """The file name of a key segment: percent-encoded, upper-case letters too."""
    if segment.lower() == segment:  # no upper-case letter: what quote leaves is right
        return quote(segment, safe="")
    return "".join(map(_ESCAPE.__getitem__, segment.encode()))


_ESCAPE = tuple(
    chr(b) if chr(b) in "abcdefghijklmnopqrstuvwxyz0123456789_.-~" else f"%{b:02X}"
    for b in range(256)
)
"""The name of each UTF-8 byte: itself if lower-case ASCII, a digit or ``_.-~``, else ``%XX``.

Exactly what ``quote(segment, safe="")`` gives, with ``A-Z`` escaped too.
"""


def _decode(name: str) -> str | None:
    """The key segment that ``name`` encodes, or None for a foreign name."""
    if "%" not in name:
        return name if _PLAIN_RE.fullmatch(name) and name not in (".", "..") else None
    if not _ENCODED_RE.fullmatch(name):
        return None
    try:
        segment = unquote(name, errors="strict")
    except UnicodeDecodeError:
        return None
    if "/" in segment or _encode(segment) != name:
        return None  # not the canonical encoding of a segment
    try:
        validate_key(segment)
    except InvalidKey:
        return None
    return segment


def _write_all(fd: int, token: bytes, data: bytes) -> None:
    total = len(token) + len(data)
    written = os.writev(fd, [token, data])
    if written < total:  # a short write: finish it
        view = memoryview(token + data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def _flush_file(fd: int) -> None:
    full = getattr(fcntl, "F_FULLFSYNC", None)
    if full is not None:  # macOS: fsync does not reach the disk's platter
        fcntl.fcntl(fd, full)
    elif hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover
        os.fsync(fd)


def _unlink_if_old(path: str, cutoff: float) -> bool:
    """Remove ``path`` if it was last modified at ``cutoff`` or earlier."""
    try:
        if os.lstat(path).st_mtime <= cutoff:
            os.unlink(path)
            return True
    except FileNotFoundError:
        pass  # committed or cleaned up meanwhile
    return False


def _unlink_quietly(path: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)


def _parse_bool(url: str, name: str, value: str) -> bool:
    low = value.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ConfigurationError(f"file URL parameter {name}={value!r} must be true or false")


def _parse_number(name: str, value: str, kind: type[float] | type[int], what: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise ConfigurationError(f"file URL parameter {name}={value!r} is not {what}") from None


def _check_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - {"fsync", "create", "threads", "lock_timeout"}
    if unknown:
        raise ConfigurationError(
            f"unknown file storage option(s) {', '.join(sorted(unknown))}; "
            "known: create, fsync, lock_timeout, threads"
        )
    return options


def _flock_within(fd: int, timeout: float, rel_dir: str) -> None:
    """``flock(fd, LOCK_EX)``, waiting at most ``timeout`` seconds for another process that
    holds it (a blocking ``flock`` would wait for ever on one that hangs, or is stopped,
    holding it); then ``BlockingIOError``, which the adapter raises as
    ``StorageUnavailable``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BlockingIOError(
                errno.EWOULDBLOCK,
                f"another process held the lock of directory {rel_dir or '/'!r} "
                f"for lock_timeout={timeout:g} s",
            )
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue

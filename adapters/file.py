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

A file holds a 16-byte random version token followed by the data. Every write
draws a new token, so a version never comes back (no ABA after a delete and a
re-create, unlike an inode number or an mtime).

Each operation is one call into a small thread pool owned by the storage; the
event loop is never blocked by file I/O, and a put costs one thread hop, not
one per system call.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import heapq
import os
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
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
from ..keys import validate_key
from ..storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase

__all__ = ["FileStorage"]

T = TypeVar("T")

TOKEN_BYTES = 16
"""Length of the random version token at the start of every stored file."""

NAME_MAX = 255
"""Longest file name, in bytes, on the common local file systems."""

LOCK_STRIPES = 64
LOCK_DIR = "#locks"

_TEMP_RE = re.compile(r"#[0-9a-f]{16}\.tmp")
_PLAIN_RE = re.compile(r"[a-z0-9_.~-]+")
_ENCODED_RE = re.compile(r"(?:[a-z0-9_.~-]|%[0-9A-F]{2})+")
_UPPER_RE = re.compile(r"%[0-9A-F]{2}|[A-Z]")
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


class _Mapped:
    """Where a key lives on disk."""

    __slots__ = ("dirnames", "dirpath", "path", "rel_dir")

    def __init__(self, root: str, dirnames: list[str], leaf: str) -> None:
        self.dirnames = dirnames
        self.rel_dir = "/".join(dirnames)
        self.dirpath = f"{root}/{self.rel_dir}" if dirnames else root
        self.path = f"{self.dirpath}/{leaf}"


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

    Raises:
        ConfigurationError: ``root`` is missing and ``create`` is False, is
            not a directory, or cannot be created.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        conditional_put=True, conditional_delete=True, durable=True, shared=True, ttl=False
    )

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        fsync: bool = True,
        create: bool = True,
        threads: int = 4,
    ) -> None:
        path = os.path.abspath(os.path.expanduser(os.fspath(root)))
        if not isinstance(threads, int) or threads < 1:
            raise ConfigurationError(f"threads must be a positive int, not {threads!r}")
        if not os.path.isdir(path):
            if os.path.exists(path):
                raise ConfigurationError(f"file storage root {path!r} is not a directory")
            if not create:
                raise ConfigurationError(
                    f"file storage root {path!r} does not exist (create=False)"
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
        self._executor: ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        self._setup_lock = threading.Lock()
        self._stripe_locks = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._lock_fds: list[int | None] = [None] * LOCK_STRIPES

    @classmethod
    def from_url(cls, url: str, **options: Any) -> FileStorage:
        """Open ``file:///abs/path``, ``file://./relative``, or a plain path.

        Query parameters ``fsync``, ``create`` (true/false) and ``threads``
        (an int) set the options; keyword ``options`` override them.

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
            elif name == "threads":
                try:
                    params[name] = int(value)
                except ValueError:
                    raise ConfigurationError(
                        f"file URL parameter threads={value!r} is not an int"
                    ) from None
            else:
                raise ConfigurationError(
                    f"unknown file URL parameter {name!r}; known: create, fsync, threads"
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
        """Like :meth:`_call` for a write: a cancelled write never commits later.

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
        for segment, name in zip(segments, [*dirnames, leaf], strict=True):
            if len(name) > NAME_MAX:
                raise InvalidKey(
                    f"invalid key {key!r}: its segment {segment[:40]!r}... maps to a "
                    f"{len(name)}-byte file name; the file adapter's limit is {NAME_MAX} "
                    "(a character other than a-z 0-9 _.-~ takes 3 bytes per UTF-8 byte)"
                )
        return _Mapped(self.root, dirnames, leaf)

    # -- the protocol --------------------------------------------------------------------
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
        after = cursor if cursor is not None else start_after
        return await self._call(f"prefix {prefix!r}", "list", self._list_sync, prefix, after, limit)

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
        key's directory. It is never listed or read, but takes space. Empty key
        directories are removed too.

        Args:
            older_than: only remove temporary files last modified this many
                seconds ago or earlier; keep it above the longest put that
                may be running in another process.

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
        keep_tmp = False  # True once the temp file was renamed to the target
        try:
            try:
                _write_all(fd, token, data)
                if self.fsync:
                    _flush_file(fd)
            finally:
                os.close(fd)
            self._before_commit(key)
            if mode == "overwrite":
                with self._locked(m.rel_dir), guard.lock:
                    if guard.cancelled:
                        raise _Abandoned
                    os.rename(tmp, m.path)
                    guard.committed = keep_tmp = True
            elif mode == "create":
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
                    with guard.lock:
                        if guard.cancelled:
                            raise _Abandoned
                        os.rename(tmp, m.path)
                        guard.committed = keep_tmp = True
        finally:
            if not keep_tmp:
                _unlink_quietly(tmp)
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
        for name in m.dirnames:
            parent, path = path, f"{path}/{name}"
            try:
                os.mkdir(path)
            except FileExistsError:
                continue
            except FileNotFoundError:
                if parent == self.root:
                    raise  # the root itself is gone
                return  # a concurrent delete removed a parent; the caller retries
            if self.fsync:
                self._flush_dir(parent)

    def _get_sync(self, key: str, m: _Mapped) -> GetResult:
        try:
            f = open(m.path, "rb", buffering=0)  # noqa: SIM115 - closed below
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"key {key!r} not found") from None
        with f:
            token = f.read(TOKEN_BYTES)
            if len(token) < TOKEN_BYTES:
                raise self._truncated(key, len(token))
            data = f.readall()
        return GetResult(data, token.hex())

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
                    return False
                guard.committed = True
        if self.fsync:
            self._flush_dir(m.dirpath)
        self._prune_dirs(m)
        return True

    def _prune_dirs(self, m: _Mapped) -> None:
        """Remove the key's directories that became empty, deepest first (best effort)."""
        paths = [self.root]
        for name in m.dirnames:
            paths.append(f"{paths[-1]}/{name}")
        for path in reversed(paths[1:]):
            try:
                os.rmdir(path)
            except OSError:
                return

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
            fcntl.flock(fd, fcntl.LOCK_EX)
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

    def _list_sync(self, prefix: str, after: str | None, limit: int) -> ListPage:
        segments = prefix.split("/")
        complete, partial = segments[:-1], segments[-1]
        dirpath = self.root
        for segment in complete:
            name = _encode(segment) + "@"
            if len(name) > NAME_MAX:
                return ListPage([], None)  # no key can live there
            dirpath = f"{dirpath}/{name}"
        base = "".join(s + "/" for s in complete)
        out: list[str] = []
        _walk(dirpath, base, partial, after, limit, out)
        return ListPage(out, out[-1] if len(out) >= limit else None)

    def _sweep_sync(self, older_than: float) -> int:
        cutoff = time.time() - older_than
        removed = 0
        for dirpath, dirnames, filenames in os.walk(self.root, topdown=True):
            if dirpath == self.root and LOCK_DIR in dirnames:
                dirnames.remove(LOCK_DIR)
            for name in filenames:
                if not _TEMP_RE.fullmatch(name):
                    continue
                path = f"{dirpath}/{name}"
                try:
                    if os.lstat(path).st_mtime <= cutoff:
                        os.unlink(path)
                        removed += 1
                except FileNotFoundError:
                    pass  # committed or cleaned up meanwhile
        for dirpath, _dirs, _files in os.walk(self.root, topdown=False):
            if dirpath != self.root and dirpath.endswith("@"):
                with suppress(OSError):  # not empty, or gone
                    os.rmdir(dirpath)
        return removed


# -- helpers ---------------------------------------------------------------------------


def _walk(
    dirpath: str, base: str, partial: str, after: str | None, limit: int, out: list[str]
) -> bool:
    """Append the keys under ``dirpath`` (key prefix ``base``) in ascending order.

    Only keys whose first segment here starts with ``partial`` and that are
    greater than ``after`` count; stop at ``limit`` keys in ``out`` (return
    True). Entries sort by ``name`` for a file and ``name + "/"`` for a
    directory, which is exactly the order of the keys below them; a directory
    whose keys all sort at or before ``after`` is skipped without reading it.
    """
    if after is None or after < base:
        rel = None  # every key here sorts after ``after``
    elif after.startswith(base):
        rel = after[len(base) :]
    else:
        return False  # every key here sorts before ``after``
    try:
        names = os.listdir(dirpath)
    except (FileNotFoundError, NotADirectoryError):
        return False
    cache = _NAMES
    if len(cache) > _NAMES_MAX:
        cache.clear()
    entries: list[tuple[str, str, bool]] = []
    for name in names:
        entry = cache.get(name)
        if entry is None:
            entry = cache[name] = _classify(name)
        sort_key, is_dir = entry
        if not sort_key or (partial and not sort_key.startswith(partial)):
            continue  # internal or foreign, or outside the prefix
        if rel is not None:
            if is_dir:
                if rel > sort_key and not rel.startswith(sort_key):
                    continue  # the whole directory sorts before ``after``
            elif sort_key <= rel:
                continue
        entries.append((sort_key, name, is_dir))
    need = limit - len(out)
    if need <= 0:
        return True
    if len(entries) > 2 * need + 16:
        # Few keys wanted from a big directory: take the smallest without a full
        # sort; sort the rest only if some directories turned out to be empty.
        first = heapq.nsmallest(need, entries)
        if _visit(dirpath, base, first, after, limit, out):
            return True
        last = first[-1][0]
        rest = sorted(e for e in entries if e[0] > last)
    else:
        rest = sorted(entries)
    return _visit(dirpath, base, rest, after, limit, out)


def _visit(
    dirpath: str,
    base: str,
    entries: list[tuple[str, str, bool]],
    after: str | None,
    limit: int,
    out: list[str],
) -> bool:
    for sort_key, name, is_dir in entries:
        if is_dir:
            if _walk(f"{dirpath}/{name}", base + sort_key, "", after, limit, out):
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


def _encode(segment: str) -> str:
    """The file name of a key segment: percent-encoded, upper-case letters too."""
    name = quote(segment, safe="")
    if segment.lower() != segment:  # holds an upper-case letter
        name = _UPPER_RE.sub(_escape_upper, name)
    return name


def _escape_upper(match: re.Match[str]) -> str:
    text = match.group()
    return text if len(text) == 3 else f"%{ord(text):02X}"


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


def _check_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - {"fsync", "create", "threads"}
    if unknown:
        raise ConfigurationError(
            f"unknown file storage option(s) {', '.join(sorted(unknown))}; "
            "known: create, fsync, threads"
        )
    return options

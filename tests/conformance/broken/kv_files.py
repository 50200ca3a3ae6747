"""An adapter on plain files (one file per key, worker threads), and the file-system mistakes
such an adapter makes, one per subclass.

:class:`FilesKV` is correct: a key's file name is its percent-encoding (injective),
the file holds a version line and then the value, a write goes to a temporary file
that is renamed over the key's file (atomic), create-only links the temporary file
(``os.link`` fails if the name exists), an if-match or conditional delete runs under
the storage's lock, and a version is a random token (it never repeats). One
client per directory (``shared`` is not declared).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar
from urllib.parse import quote, unquote

from checkpointkit.errors import NotFound, PreconditionFailed
from checkpointkit.storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase

from .kv_dict import WaitsForWritesOnClose


class FilesKV(StorageBase):
    """Correct: see the module documentation."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        shared=False, settles_cancelled_writes=False
    )

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)
        self._lock = threading.Lock()

    # -- names and files ------------------------------------------------------------------------
    def _file(self, key: str) -> str:
        return os.path.join(self.root, quote(key, safe=""))

    def _key_of(self, name: str) -> str:
        return unquote(name)

    def _mint(self, path: str) -> str:
        return secrets.token_hex(8)

    def _read(self, path: str) -> tuple[bytes, str] | None:
        try:
            with open(path, "rb") as f:
                version = f.readline().rstrip(b"\n").decode()
                data = f.read()
        except FileNotFoundError:
            return None
        return data, version

    def _write_temp(self, data: bytes, version: str) -> str:
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(version.encode() + b"\n")
            f.write(data)
        return tmp

    def _replace(self, path: str, data: bytes) -> str:
        version = self._mint(path)
        tmp = self._write_temp(data, version)
        os.replace(tmp, path)
        return self._after_write(path, version)

    def _after_write(self, path: str, version: str) -> str:
        return version

    def _create(self, key: str, path: str, data: bytes) -> str:
        version = self._mint(path)
        tmp = self._write_temp(data, version)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise PreconditionFailed(f"key {key!r} already exists") from None
        finally:
            os.unlink(tmp)
        return self._after_write(path, version)

    # -- the protocol ------------------------------------------------------------------------------
    def _put_sync(self, key: str, data: bytes, mode: PutMode) -> str:
        path = self._file(key)
        if mode == "create":
            return self._create(key, path, data)
        if isinstance(mode, IfMatch):
            with self._lock:
                current = self._read(path)
                if current is None or current[1] != mode.version:
                    raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
                return self._replace(path, data)
        return self._replace(path, data)

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        return await asyncio.to_thread(self._put_sync, key, data, mode)

    async def _get(self, key: str) -> GetResult:
        found = await asyncio.to_thread(self._read, self._file(key))
        if found is None:
            raise NotFound(f"key {key!r} not found")
        return GetResult(*found)

    def _delete_sync(self, key: str, if_match: str | None) -> bool:
        path = self._file(key)
        with self._lock:
            if if_match is not None:
                current = self._read(path)
                if current is None:
                    return False
                if current[1] != if_match:
                    raise PreconditionFailed(f"key {key!r} is not at version {if_match}")
            try:
                os.unlink(path)
            except FileNotFoundError:
                return False
            return True

    async def _delete(self, key: str, if_match: str | None) -> bool:
        return await asyncio.to_thread(self._delete_sync, key, if_match)

    def _scan(self) -> list[str]:
        """The directory's names of keys (its temporary files left out)."""
        return [n for n in os.listdir(self.root) if not n.startswith(".tmp-")]

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after

        def scan() -> list[str]:
            return sorted(
                k
                for k in map(self._key_of, self._scan())
                if k.startswith(prefix) and (after is None or k > after)
            )

        keys = await asyncio.to_thread(scan)
        page = keys[:limit]
        return ListPage(page, page[-1] if len(keys) > limit else None)


def _escaped(text: str) -> str:
    """A file name of ``text``: ``%``, ``/``, NUL and the characters U+E000 to U+FFFF
    (which Azurite lists in UTF-16 order) as ``%XXXX``, the rest as they are."""
    return "".join(
        f"%{ord(c):04X}" if c in "%/\x00" or 0xE000 <= ord(c) <= 0xFFFF else c for c in text
    )


def _unescaped(name: str) -> str:
    out, i = [], 0
    while i < len(name):
        if name[i] == "%":
            out.append(chr(int(name[i + 1 : i + 5], 16)))
            i += 5
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


class EscapedNamesKV(FilesKV):
    """Correct twin of `PrefixSentUnescaped`: a key's file name escapes only what a name
    cannot hold or would sort out of order (`_escaped`), and a listing selects the names
    that start with the prefix escaped the same way, as a backend's "names starting with"
    option does."""

    def _file(self, key: str) -> str:
        return os.path.join(self.root, _escaped(key))

    def _key_of(self, name: str) -> str:
        return _unescaped(name)

    def holds_key(self, key: str) -> bool:
        """A key whose file name fits a directory entry (255 bytes)."""
        return len(_escaped(key).encode()) <= 255

    def _name_prefix(self, prefix: str) -> str:
        return _escaped(prefix)

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after
        start = self._name_prefix(prefix)

        def scan() -> list[str]:
            keys = (self._key_of(n) for n in self._scan() if n.startswith(start))
            return sorted(k for k in keys if after is None or k > after)

        keys = await asyncio.to_thread(scan)
        page = keys[:limit]
        return ListPage(page, page[-1] if len(keys) > limit else None)


class PrefixSentUnescaped(EscapedNamesKV):
    """Bug: the listing's prefix is escaped by a second function that knows only the
    characters a path cannot hold (``%`` and ``/``), not the ones the names escape for
    their order: a prefix holding U+E000 to U+FFFF selects no name, and lists nothing
    (the sixth blind round's Azure adapter b09: ``name_starts_with`` given the raw
    prefix; the suite listed such keys only under ASCII prefixes)."""

    def _name_prefix(self, prefix: str) -> str:
        return prefix.replace("%", "%0025").replace("/", "%002F")


class VersionIsMtime(FilesKV):
    """Bug: the version is the file's modification time, in whole seconds as HTTP's
    Last-Modified gives it: two writes within one second get the same version."""

    def _after_write(self, path: str, version: str) -> str:
        return str(int(os.stat(path).st_mtime))

    def _read(self, path: str) -> tuple[bytes, str] | None:
        found = super()._read(path)
        if found is None:
            return None
        try:
            return found[0], str(int(os.stat(path).st_mtime))
        except FileNotFoundError:
            return None


class WritesInPlace(FilesKV):
    """Bug: a put truncates the key's file and writes into it (no temporary file, no rename):
    a reader meanwhile sees an empty or half-written value."""

    def _replace(self, path: str, data: bytes) -> str:
        version = self._mint(path)
        with open(path, "wb") as f:
            f.write(version.encode() + b"\n")
            f.flush()
            for i in range(0, len(data), 4096):
                f.write(data[i : i + 4096])
                f.flush()
        return version


class SpacesAsPlus(FilesKV):
    """Bug: file names are form-encoded by hand: a space becomes '+', and a literal '+' is
    kept, so 'a b' and 'a+b' are one file."""

    def _file(self, key: str) -> str:
        return os.path.join(self.root, quote(key.replace(" ", "+"), safe="+"))

    def _key_of(self, name: str) -> str:
        return unquote(name).replace("+", " ")


_OPEN: list[Any] = []
"""Where :class:`LeaksReadHandle` keeps its open files (referenced, so nothing warns)."""


class LeaksReadHandle(FilesKV):
    """Bug: get keeps the last file it read open (a "handle cache" that aclose() forgets)."""

    def _read(self, path: str) -> tuple[bytes, str] | None:
        try:
            f = open(path, "rb")  # noqa: SIM115 - the bug: never closed
        except FileNotFoundError:
            return None
        _OPEN.append(f)
        version = f.readline().rstrip(b"\n").decode()
        return f.read(), version


class ReadsOneBuffer(FilesKV):
    """Bug: get reads one 64 KiB buffer after the version line: longer values come back cut."""

    def _read(self, path: str) -> tuple[bytes, str] | None:
        try:
            with open(path, "rb") as f:
                version = f.readline().rstrip(b"\n").decode()
                return f.read(64 * 1024), version
        except FileNotFoundError:
            return None


class CreateChecksExists(FilesKV):
    """Bug: create-only is ``os.path.exists`` in one worker call and a write in another."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        if mode == "create":
            if await asyncio.to_thread(os.path.exists, self._file(key)):
                raise PreconditionFailed(f"key {key!r} already exists")
            mode = "overwrite"
        return await super()._put(key, data, mode)


_LOCK_FILE = "%lock"
"""The lock file of a shared directory: a name that no key's percent-encoding takes ('%' is
always followed by two hex digits there)."""


class SharedFilesKV(FilesKV):
    """Correct, and ``shared``: an if-match or conditional delete (and a ``delete_many``)
    holds the storage's thread lock and an ``flock`` of the directory's lock file, which
    excludes every other client of the directory (another storage object, another process);
    the listing skips the lock file; a value's temporary file is synced before its rename."""

    capabilities: ClassVar[Capabilities] = Capabilities(shared=True, settles_cancelled_writes=False)

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._lock = _DirectoryLock(os.path.join(root, _LOCK_FILE))  # type: ignore[assignment]

    def _scan(self) -> list[str]:
        return [n for n in os.listdir(self.root) if not n.startswith((".tmp-", _LOCK_FILE))]

    def _write_temp(self, data: bytes, version: str) -> str:
        """The value's temporary file, synced before it is renamed (a put is durable)."""
        tmp = super()._write_temp(data, version)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return tmp

    def _delete_many_sync(self, keys: list[str]) -> int:
        with self._lock:
            return sum(self._unlink(self._file(key)) for key in dict.fromkeys(keys))

    @staticmethod
    def _unlink(path: str) -> bool:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    async def _delete_many(self, keys: list[str]) -> int:
        return await asyncio.to_thread(self._delete_many_sync, keys)

    async def _aclose(self) -> None:
        self._lock.close()


class _DirectoryLock:
    """A thread lock, then an ``flock`` of one file (held by this object's descriptor)."""

    def __init__(self, path: str) -> None:
        self._threads = threading.Lock()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def __enter__(self) -> None:
        self._threads.acquire()
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()

    def close(self) -> None:
        with self._threads:
            os.close(self._fd)


class LocksOneClient(SharedFilesKV):
    """Bug: declares ``shared``, but its if-match put and conditional delete hold a thread
    lock of the storage object only: two clients of the directory (two storage objects, two
    processes) each read the version, each find it current, and both write."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._lock.close()
        self._lock = threading.Lock()  # type: ignore[assignment]

    async def _aclose(self) -> None:
        pass


class DeleteManyTakesNoLock(SharedFilesKV):
    """Bug: ``delete_many`` unlinks its keys without the lock ("an unconditional delete needs
    no lock"): one that falls between an if-match put's version check and its rename is
    undone by the rename, so the put succeeds on a key that the batch counted as deleted,
    and the key is still there."""

    def _delete_many_sync(self, keys: list[str]) -> int:
        return sum(self._unlink(self._file(key)) for key in dict.fromkeys(keys))


class ListsFromAStaleCache(SharedFilesKV):
    """Bug: the listing keeps the directory's names (those of files it could read whole: a
    scan reads each) and scans again only when the directory's modification time changed,
    but reads that time after its scan: a key created during a scan is missing from every
    listing until the directory changes again."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._cached: tuple[int, list[str]] | None = None

    def _scan(self) -> list[str]:
        cached = self._cached
        if cached is not None and os.stat(self.root).st_mtime_ns == cached[0]:
            return cached[1]
        names = [n for n in super()._scan() if self._read(os.path.join(self.root, n))]
        self._cached = (os.stat(self.root).st_mtime_ns, names)
        return names


def close_open_files() -> None:
    """Close what :class:`LeaksReadHandle` kept, once a test has seen the leak."""
    while _OPEN:
        _OPEN.pop().close()


def files_target(cls: type[FilesKV] = FilesKV) -> Any:
    """A conformance target of ``cls``: one directory per location, in a temporary folder."""
    from checkpointkit.conformance import Target, new_location

    base = tempfile.mkdtemp(prefix="ckc-files-kv-")

    async def factory(*, location: str | None = None) -> AsyncIterator[FilesKV]:
        root = os.path.join(base, location or new_location())
        async with cls(root) as storage:
            yield storage
        if location is None:
            shutil.rmtree(root, ignore_errors=True)

    return Target(
        factory,
        name=cls.__name__,
        cleanup=lambda: shutil.rmtree(base, ignore_errors=True),
        settle_window=0.3,
    )


# -- durability across processes ----------------------------------------------------------------
class SavesEachWrite(WaitsForWritesOnClose):
    """Correct twin of :class:`SavesOnClose`: the data of a location is one file, loaded when
    the storage opens and rewritten (a temporary file renamed over it) after every write;
    versions are random tokens, so that a later process never mints one again."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=True, shared=False, settles_cancelled_writes=True
    )

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        try:
            with open(path, encoding="utf-8") as f:
                saved: dict[str, list[str]] = json.load(f)
        except FileNotFoundError:
            saved = {}
        self.values = {k: (bytes.fromhex(d), v) for k, (d, v) in saved.items()}
        self.keys = sorted(self.values)

    def _mint(self, key: str, data: bytes) -> str:
        return secrets.token_hex(8)

    def _save(self) -> None:
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({k: [d.hex(), v] for k, (d, v) in self.values.items()}, f)
        os.replace(tmp, self.path)

    def _written(self) -> None:
        self._save()

    def _store(self, name: str, data: bytes, version: str) -> None:
        super()._store(name, data, version)
        self._written()

    def _drop(self, name: str) -> None:
        super()._drop(name)
        self._written()


class SavesOnClose(SavesEachWrite):
    """Bug: declares ``durable``, but keeps its writes in memory and saves them in
    ``aclose()`` (a "save on exit" cache, as a JSON file dumped at close): closed and
    reopened, the data is there; a process that dies before ``aclose()`` loses every write
    it made, though each had returned."""

    def _written(self) -> None:
        pass

    async def _aclose(self) -> None:
        await super()._aclose()
        self._save()


class SavesLater(SavesEachWrite):
    """Correct: :class:`SavesEachWrite` with a dirty mark, for the subclasses that leave a
    write's save for later (``_later()``): the next save of any write, or ``aclose()``,
    saves it."""

    _dirty = False

    def _later(self) -> None:
        self._dirty = True

    def _written(self) -> None:
        self._dirty = False
        super()._written()

    async def _aclose(self) -> None:
        await super()._aclose()
        if self._dirty:
            self._save()


class DeleteManySavedLater(SavesLater):
    """Bug: ``delete_many`` drops its keys from the loaded copy and marks the file dirty,
    to save once for a big batch at the next write (or at ``aclose()``): a process that
    dies after a ``delete_many`` and before its next write has its deleted keys back."""

    async def _delete_many(self, keys: list[str]) -> int:
        with self._under_way.call():
            await self._round_trip()
            existed = 0
            for key in dict.fromkeys(keys):
                if key in self.values:
                    del self.values[key]
                    self.keys.remove(key)
                    existed += 1
            if existed:
                self._later()
            return existed


class DeleteManySavedTwin(DeleteManySavedLater):
    """Correct twin of :class:`DeleteManySavedLater`: the same batch, saved before it answers."""

    def _later(self) -> None:
        self._written()


class ConditionalDeleteSavedLater(SavesLater):
    """Bug: a conditional delete (the compare-and-delete path) drops the key from the
    loaded copy and marks the file dirty, to be saved at the next write or at
    ``aclose()``; a plain delete saves at once. A process that dies after an if-match
    delete, before its next write, has the deleted key back."""

    def _drop(self, name: str) -> None:
        if not self._conditional:
            super()._drop(name)
            return
        del self.values[name]
        self.keys.remove(name)
        self._later()

    _conditional = False

    async def _delete(self, key: str, if_match: str | None) -> bool:
        self._conditional = if_match is not None
        try:
            return await super()._delete(key, if_match)
        finally:
            self._conditional = False


class OverwriteSavedLater(SavesLater):
    """Bug: a plain overwrite of a key that exists is applied to the loaded copy and the
    file marked dirty (a write-back for "hot" keys, saved at the next save or at
    ``aclose()``); a put of a new key and a conditional put save at once. A process that
    dies after an overwrite, before its next save, has the old value back (at the old
    version)."""

    def _store(self, name: str, data: bytes, version: str) -> None:
        if name in self.values and not self._conditional:
            self.values[name] = (data, version)
            self._later()
            return
        super()._store(name, data, version)

    _conditional = False

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        self._conditional = mode != "overwrite"
        try:
            return await super()._put(key, data, mode)
        finally:
            self._conditional = False


def _saved_root() -> str:
    """One folder for this process and the processes it starts (they inherit it), made once
    and removed when the process that made it exits."""
    root = os.environ.get("CKC_SAVED_FILES")
    if root is None:
        root = os.environ["CKC_SAVED_FILES"] = tempfile.mkdtemp(prefix="ckc-saved-")
        atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _saved_files(cls: type[SavesEachWrite]) -> Callable[..., AsyncIterator[SavesEachWrite]]:
    async def factory(*, location: str | None = None) -> AsyncIterator[SavesEachWrite]:
        from checkpointkit.conformance import new_location

        path = os.path.join(_saved_root(), f"{location or new_location()}.json")
        async with cls(path) as storage:
            yield storage
        if location is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    return factory


saves_each_write = _saved_files(SavesEachWrite)
saves_on_close = _saved_files(SavesOnClose)
saves_later = _saved_files(SavesLater)
delete_many_saved_later = _saved_files(DeleteManySavedLater)
delete_many_saved_twin = _saved_files(DeleteManySavedTwin)
conditional_delete_saved_later = _saved_files(ConditionalDeleteSavedLater)
overwrite_saved_later = _saved_files(OverwriteSavedLater)


def saved_files_target(cls: type[SavesEachWrite]) -> Any:
    """A target of ``cls`` with a SPEC string, so that another process can rebuild it."""
    from checkpointkit.conformance import Target

    name = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()  # its factory, above
    return Target(globals()[name], name=cls.__name__, spec=f"{__name__}:{name}", settle_window=0.3)

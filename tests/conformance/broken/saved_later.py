"""checkpointkit's own file and SQLite adapters, each with one write saved later than its
answer: what the death-of-the-process durability test must catch on the built-in targets.

Every target here is a directory (file) or a database file (SQLite) per location, in a
temporary folder. The twins are the adapters themselves, opened from a ``{location}`` URL
SPEC, as the built-in ``file`` SPEC and the project's own conformance tests open them. A
mutant's SPEC is ``module:factory`` (its class is no URL scheme), with the folder in the
environment (``CKC_SAVED_LATER``), which the durability test's child process inherits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.conformance import Target, new_location, resolve_target
from checkpointkit.storage import GetResult, ListPage, PutMode

FOLDER = "CKC_SAVED_LATER"
"""The environment variable that names the folder of a mutant's locations."""

_BESIDE = "~later"
"""What `FileRenamedLater` adds to a key for the name its overwrite is written under."""


class FileRenamedLater(FileStorage):
    """Bug: an overwrite is written and flushed under a name beside the key's and renamed
    over the key's file by the storage's next operation or by ``aclose()`` (a rename put
    off to batch it with the next write); closed and reopened, the data is there, but a
    process that dies right after a put loses it, though the put had answered its version.
    """

    def __init__(self, root: str, **options: Any) -> None:
        super().__init__(root, **options)
        self._later: list[tuple[str, str]] = []
        self._later_lock = threading.Lock()

    def _rename_later(self) -> None:
        with self._later_lock:
            later, self._later = self._later, []
        for written, path in later:
            with contextlib.suppress(FileNotFoundError):  # a later overwrite renamed it
                os.rename(written, path)

    def _put_sync(self, key: str, m: Any, data: bytes, mode: PutMode, guard: Any) -> str:
        self._rename_later()
        if mode != "overwrite":
            return super()._put_sync(key, m, data, mode, guard)
        beside = self._map(key + _BESIDE)  # in the key's directory: a rename moves it
        version = super()._put_sync(key, beside, data, mode, guard)
        with self._later_lock:
            self._later.append((beside.path, m.path))
        return version

    def _get_sync(self, key: str, m: Any) -> GetResult:
        self._rename_later()
        return super()._get_sync(key, m)

    def _delete_sync(self, key: str, m: Any, if_match: str | None, guard: Any) -> bool:
        self._rename_later()
        return super()._delete_sync(key, m, if_match, guard)

    def _list_sync(self, prefix: str, cursor: Any, limit: int) -> ListPage:
        self._rename_later()
        return super()._list_sync(prefix, cursor, limit)

    def _delete_many_sync(self, mapped: list[tuple[str, Any]], guard: Any) -> int:
        self._rename_later()
        return super()._delete_many_sync(mapped, guard)

    async def _aclose(self) -> None:
        self._rename_later()
        await super()._aclose()


class _CommitsLater:
    """A writer's connection whose ``COMMIT`` waits for its next statement: the next
    transaction's ``BEGIN``, or the checkpoint of the log at close."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._owed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self._owed = True
            return None
        if self._owed:
            self._owed = False
            self._conn.execute("COMMIT")
        return self._conn.execute(sql, *args)


class SQLiteCommitsLater(SQLiteStorage):
    """Bug: a batch of writes is answered, and committed with the next batch or at close
    (a transaction left open to save a commit); closed and reopened, the data is there,
    but a process that dies right after its last write loses it, though each write had
    answered."""

    def _connect(self, *, writer: bool) -> sqlite3.Connection:
        conn = super()._connect(writer=writer)
        return _CommitsLater(conn) if writer else conn  # type: ignore[return-value]


def _factory(cls: type[FileStorage | SQLiteStorage]) -> Callable[..., AsyncIterator[Any]]:
    suffix = ".db" if issubclass(cls, SQLiteStorage) else ""

    async def factory(*, location: str | None = None) -> AsyncIterator[Any]:
        # set by saved_later_target here, inherited by the durability test's child
        path = os.path.join(os.environ[FOLDER], f"{location or new_location()}{suffix}")
        async with cls(path) as storage:
            yield storage

    return factory


file_renamed_later = _factory(FileRenamedLater)
sqlite_commits_later = _factory(SQLiteCommitsLater)


def saved_later_target(cls: type[FileStorage | SQLiteStorage]) -> Target:
    """A target of ``cls`` (a mutant above, or its twin: `FileStorage` or `SQLiteStorage`)
    that another process can rebuild: one directory or database file per location, in a
    temporary folder that `Target.cleanup` removes."""
    folder = tempfile.mkdtemp(prefix="ckc-saved-later-")
    if cls is FileStorage:
        target = resolve_target(f"file://{folder}/{{location}}")
    elif cls is SQLiteStorage:
        target = resolve_target(f"sqlite:///{folder}/{{location}}.db")
    else:
        os.environ[FOLDER] = folder
        name = "file_renamed_later" if cls is FileRenamedLater else "sqlite_commits_later"
        target = Target(globals()[name], spec=f"{__name__}:{name}")

    def cleanup() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get(FOLDER) == folder:
            del os.environ[FOLDER]

    return Target.of(target, name=cls.__name__, settle_window=0.3, cleanup=cleanup)

"""An adapter over fsspec's local file system, written the way a user would.

fsspec's ``AsyncFileSystemWrapper`` runs each call of the synchronous
``LocalFileSystem`` in a thread (``asyncio.to_thread``). Each key is one file
(its name percent-encoded, so that the directory stays flat); the file starts
with a 16-byte random token, the version. Two of fsspec's known defects carry
through: ``pipe_file`` opens the target with ``"wb"`` and writes into it (not
atomic: a reader can see it empty or half written), and
``pipe_file(mode="create")`` checks ``exists`` and then writes (two creators
can both win). The user's own if-match is a read-then-write for the same
reason. The adapter declares no ``settles_cancelled_writes``.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar
from urllib.parse import quote, unquote

from checkpointkit.errors import NotFound, PreconditionFailed
from checkpointkit.storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase
from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
from fsspec.implementations.local import LocalFileSystem

TOKEN = 16


class FsspecLocalStorage(StorageBase):
    """Keys as files under ``root``, through fsspec's async wrapper of its local file system."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        conditional_put=True, conditional_delete=True, durable=True, shared=True
    )

    def __init__(self, root: str) -> None:
        self.root = root
        self.fs: Any = AsyncFileSystemWrapper(LocalFileSystem(auto_mkdir=True), asynchronous=True)

    def _path(self, key: str) -> str:
        return f"{self.root}/{quote(key, safe='')}"

    async def _token(self, path: str) -> str | None:
        try:
            head: bytes = await self.fs._cat_file(path, start=0, end=TOKEN)
        except FileNotFoundError:
            return None
        return head.hex()

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        path = self._path(key)
        token = os.urandom(TOKEN)
        # If-match: read, then write (not atomic, like pipe_file's own create).
        if isinstance(mode, IfMatch) and await self._token(path) != mode.version:
            raise PreconditionFailed(f"key {key!r} is not at version {mode.version}")
        fs_mode = "create" if mode == "create" else "overwrite"
        try:
            await self.fs._pipe_file(path, token + data, mode=fs_mode)
        except FileExistsError:
            raise PreconditionFailed(f"key {key!r} already exists") from None
        return token.hex()

    async def _get(self, key: str) -> GetResult:
        try:
            raw: bytes = await self.fs._cat_file(self._path(key))
        except FileNotFoundError:
            raise NotFound(f"key {key!r} not found") from None
        return GetResult(raw[TOKEN:], raw[:TOKEN].hex())

    async def _delete(self, key: str, if_match: str | None) -> bool:
        path = self._path(key)
        current = await self._token(path)
        if current is None:
            return False
        if if_match is not None and current != if_match:
            raise PreconditionFailed(f"key {key!r} is at version {current}, not {if_match}")
        try:
            await self.fs._rm_file(path)
        except FileNotFoundError:
            return False
        return True

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        try:
            names = await self.fs._ls(self.root, detail=False)
        except FileNotFoundError:
            names = []
        keys = sorted(unquote(name.rsplit("/", 1)[-1]) for name in names)
        after = cursor if cursor is not None else start_after
        keys = [k for k in keys if k.startswith(prefix) and (after is None or k > after)]
        page = keys[:limit]
        return ListPage(page, page[-1] if len(keys) > limit else None)

"""checkpointkit's S3 and Redis adapters, and mutants that read an error answer as an answer.

Each mutant is `S3Storage` (on moto) or `RedisStorage` (on valkey) with one mistake of
the kind such adapters are known for: an error the server *answered* (a 503 of an
overloaded bucket, a replica's ``-MASTERDOWN``) caught by ``except ClientError`` or
``except ResponseError`` and taken for a missing key, a failed condition, or the end of
a listing. A backend that resets its connections never shows the mistake (the client
raises a connection error, not an answer), so only the backend-down test whose server
answers errors (`ErrorAnswer` through the stall proxy) catches them. The twin is the
shipped adapter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn
from urllib.parse import urlsplit

from asyncpg import PostgresConnectionError, PostgresError
from botocore.exceptions import ClientError
from checkpointkit import NotFound, PreconditionFailed, StorageUnavailable
from checkpointkit.adapters.postgres import PostgresStorage
from checkpointkit.adapters.redis import RedisStorage
from checkpointkit.adapters.s3 import S3Storage
from checkpointkit.conformance import Target, new_location
from checkpointkit.conformance.servers.postgres import postgres_server, postgres_target
from checkpointkit.conformance.servers.s3 import (
    create_bucket,
    moto_descriptor,
    s3_server,
    storage_options,
    unique_bucket_name,
)
from checkpointkit.storage import GetResult, ListPage, PutMode
from redis.exceptions import ResponseError

__all__ = [
    "PostgresRefusalIsNotFound",
    "RedisRefusalIsNotFound",
    "S3ErrorAnswerEndsTheListing",
    "S3ErrorAnswerFailsTheCondition",
    "S3ErrorAnswerIsNotFound",
    "moto_target",
    "pg_target",
]


def _answered(exc: BaseException) -> bool:
    """An error the server answered, other than access denied (which a test of wrong
    credentials would show)."""
    if not isinstance(exc, ClientError):
        return False
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return bool(status != 403)


def _caused_by_an_answer(exc: BaseException) -> bool:
    """Whether an error answered by the S3 server is among ``exc``'s causes."""
    return _cause_of(exc, _answered) is not None


class S3ErrorAnswerIsNotFound(S3Storage):
    """Bug: a get reads every error answer but access denied as a missing key
    (``except ClientError: raise NotFound``): an overloaded bucket's 503 tells its caller
    that the checkpoint is gone."""

    def _raise_translated(
        self, exc: Exception, op: str, key: str | None, condition: str | None, sent: bool
    ) -> NoReturn:
        if op == "get" and key is not None and _answered(exc):
            raise NotFound(f"key {key!r} not found") from exc
        super()._raise_translated(exc, op, key, condition, sent)


class S3ErrorAnswerFailsTheCondition(S3Storage):
    """Bug: a conditional put reads an error answer to its request but access denied as a
    failed condition (``except ClientError: raise PreconditionFailed``): its caller takes
    the 503 for another writer's win, re-reads, and gives up a write that never ran."""

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        try:
            return await super()._put(key, data, mode)
        except StorageUnavailable as exc:
            if mode != "overwrite" and _caused_by_an_answer(exc):
                raise PreconditionFailed(f"key {key!r}: the condition failed") from exc
            raise


class S3ErrorAnswerEndsTheListing(S3Storage):
    """Bug: a listing reads an error answer to a continuation page as the end of the
    listing (``except ClientError: break``): a listing cut short, which a caller cannot
    tell from the whole (a ``latest()`` then finds an older head)."""

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        try:
            return await super()._list_page(prefix, start_after, cursor, limit)
        except StorageUnavailable as exc:
            if cursor is not None and _caused_by_an_answer(exc):
                return ListPage([], None)
            raise


class RedisRefusalIsNotFound(RedisStorage):
    """Bug: a get reads a command the server refused as a missing key (``except
    ResponseError: return None``, written for ``WRONGTYPE``): a replica cut off from its
    primary (``-MASTERDOWN``) tells its caller that the checkpoint is gone."""

    async def _read(self, key: str, kb: bytes, names: Any, fields: list[bytes]) -> Any:
        try:
            return await super()._read(key, kb, names, fields)
        except ResponseError:
            return None, None


class PostgresRefusalIsNotFound(PostgresStorage):
    """Bug: a get reads an error the server answered (any ``PostgresError`` but a lost
    connection, which it reports as unavailable) as a missing key, as written for a
    dropped table: a server that is starting up (``57P03``) tells its caller that the
    checkpoint is gone."""

    async def _get(self, key: str) -> GetResult:
        try:
            return await super()._get(key)
        except StorageUnavailable as exc:
            answered = _cause_of(exc, lambda e: isinstance(e, PostgresError))
            if answered is not None and not isinstance(answered, PostgresConnectionError):
                raise NotFound(f"key {key!r} not found") from exc
            raise


def _cause_of(exc: BaseException, which: Callable[[BaseException], bool]) -> BaseException | None:
    """The first of ``exc``'s causes (``exc`` itself included) that ``which`` picks."""
    seen: BaseException | None = exc
    while seen is not None:
        if which(seen):
            return seen
        seen = seen.__cause__
    return None


@contextmanager
def pg_target(cls: type[PostgresStorage] = PostgresStorage, *, name: str = "") -> Iterator[Target]:
    """A target of ``cls`` on a PostgreSQL server of its own (proxyable)."""
    with postgres_server() as server:
        yield postgres_target(server.url, name=name or cls.__name__, storage_class=cls)


@contextmanager
def moto_target(cls: type[S3Storage] = S3Storage, *, name: str = "") -> Iterator[Target]:
    """A target of ``cls`` on a moto server of its own, in a fresh bucket (proxyable)."""
    with s3_server() as endpoint_url:
        bucket = unique_bucket_name("corpus")
        create_bucket(endpoint_url, bucket)

        async def factory(
            *, location: str | None = None, endpoint: tuple[str, int] | None = None
        ) -> AsyncIterator[S3Storage]:
            async with cls(
                bucket,
                location or new_location(),
                **storage_options(endpoint_url),
                endpoint=endpoint,
                timeout=20.0,
                multipart_threshold=1 << 20,
                part_size=5 << 20,
            ) as storage:
                yield storage

        parts = urlsplit(endpoint_url)
        assert parts.hostname is not None and parts.port is not None
        yield Target(
            factory,
            name=name or cls.__name__,
            upstream=(parts.hostname, parts.port),
            scale=0.2,  # moto answers about 100 requests a second
            max_value=16 * 1024 * 1024,
            max_batch=4097,
            foreign_descriptors=moto_descriptor,
        )

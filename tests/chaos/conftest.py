"""Fixtures of the chaos test: one backend per parameter, with stall proxies in front.

Each :class:`ChaosBackend` says how a worker process opens the shared storage
(``config``, through the stall proxies for the network backends) and how the
coordinator opens it directly (``direct``, never through a proxy, so that the
observer keeps watching while the network is stalled).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from checkpointkit import Storage
from checkpointkit.conformance.proxy import StallProxy
from checkpointkit.conformance.servers.postgres import postgres_server
from checkpointkit.conformance.servers.redis import valkey_cluster
from checkpointkit.conformance.servers.s3 import (
    ACCESS_KEY_ID,
    REGION,
    SECRET_ACCESS_KEY,
    create_bucket,
    storage_options,
    unique_bucket_name,
)
from checkpointkit.conformance.servers.seaweedfs import seaweedfs_server


@dataclass
class ChaosBackend:
    """A shared storage for the workers, and the coordinator's way to it.

    Attributes:
        name: ``file``, ``redis``, ``postgres`` or ``s3``.
        config: the worker's storage settings (merged into its JSON config).
        direct: opens a storage on the same data, not through the proxies.
        proxies: the stall proxies between the workers and the server (none for file).
    """

    name: str
    config: dict[str, Any]
    direct: Callable[[], AbstractAsyncContextManager[Storage]]
    proxies: list[StallProxy] = field(default_factory=list)


@pytest.fixture(scope="session")
def chaos_redis_cluster_url() -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0?cluster=true`` of a 3-node valkey cluster."""
    with valkey_cluster() as url:
        yield url


@pytest.fixture(scope="session")
def chaos_postgres_url() -> Iterator[str]:
    """``postgresql://...@127.0.0.1:PORT/postgres`` of a PostgreSQL server for the session."""
    with postgres_server() as server:
        yield server.url


@pytest.fixture(scope="session")
def chaos_s3_bucket() -> Iterator[tuple[str, str]]:
    """``(endpoint_url, bucket)`` on a SeaweedFS S3 server (``weed mini``) for the session."""
    with seaweedfs_server() as endpoint_url:
        bucket = unique_bucket_name("ckk-chaos")
        create_bucket(endpoint_url, bucket)
        yield endpoint_url, bucket


def _cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The primaries of the cluster at ``url``, as announced ``(host, port)``."""
    import redis.cluster

    client = redis.cluster.RedisCluster.from_url(url.split("?", 1)[0])
    try:
        return [(str(n.host), int(n.port)) for n in client.get_primaries()]  # type: ignore[no-untyped-call]
    finally:
        client.close()


@contextlib.asynccontextmanager
async def _proxies(upstreams: list[tuple[str, int]]) -> AsyncIterator[list[StallProxy]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(StallProxy(u)) for u in upstreams]


@pytest.fixture(params=["file", "redis", "postgres", "s3"])
async def chaos_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ChaosBackend]:
    """Each backend in turn: a temp dir, the Redis Cluster (3 proxies), PostgreSQL (1 proxy),
    S3 on SeaweedFS (1 proxy)."""
    name: str = request.param
    if name == "file":
        from checkpointkit.adapters.file import FileStorage

        root = tmp_path / "store"
        yield ChaosBackend(name, {"backend": "file", "root": str(root)}, lambda: FileStorage(root))
    elif name == "redis":
        from checkpointkit.adapters.redis import RedisStorage

        url: str = request.getfixturevalue("chaos_redis_cluster_url")
        nodes = _cluster_nodes(url)
        prefix = f"chaos{secrets.token_hex(4)}"
        async with _proxies(nodes) as proxies:
            seed = urlsplit(url)
            first = (seed.hostname or "127.0.0.1", seed.port or 6379)
            remap = [[list(n), list(p.address)] for n, p in zip(nodes, proxies, strict=True)]
            config = {
                "backend": "redis",
                "url": url,
                "prefix": prefix,
                "endpoint": list(proxies[nodes.index(first)].address),
                "remap": remap,
                "timeout": 5.0,
            }
            yield ChaosBackend(
                name,
                config,
                lambda: RedisStorage.from_url(url, prefix=prefix, timeout=10.0),
                proxies,
            )
    elif name == "postgres":
        from checkpointkit.adapters.postgres import PostgresStorage

        pg_url: str = request.getfixturevalue("chaos_postgres_url")
        parts = urlsplit(pg_url)
        prefix = f"chaos{secrets.token_hex(4)}"
        async with _proxies([(parts.hostname or "127.0.0.1", parts.port or 5432)]) as proxies:
            config = {
                "backend": "postgres",
                "url": pg_url,
                "prefix": prefix,
                "endpoint": list(proxies[0].address),
                "timeout": 5.0,
            }
            yield ChaosBackend(
                name,
                config,
                lambda: PostgresStorage.from_url(pg_url, prefix=prefix, timeout=10.0),
                proxies,
            )
    else:
        from checkpointkit.adapters.s3 import S3Storage

        endpoint_url, bucket = request.getfixturevalue("chaos_s3_bucket")
        parts = urlsplit(endpoint_url)
        prefix = f"chaos-{secrets.token_hex(4)}"
        async with _proxies([(parts.hostname or "127.0.0.1", parts.port or 80)]) as proxies:
            config = {
                "backend": "s3",
                "bucket": bucket,
                "prefix": prefix,
                "endpoint_url": endpoint_url,
                "endpoint": list(proxies[0].address),
                "region": REGION,
                "access_key_id": ACCESS_KEY_ID,
                "secret_access_key": SECRET_ACCESS_KEY,
                "timeout": 10.0,
            }
            yield ChaosBackend(
                name,
                config,
                lambda: S3Storage(bucket, prefix, timeout=20.0, **storage_options(endpoint_url)),
                proxies,
            )

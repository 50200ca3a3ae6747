"""The conformance target on a Redis server or cluster: a namespace per storage, pinned nodes.

``checkpointkit conformance redis://...`` (and
`resolve_target`) use `redis_target`; it needs no
test server: it connects to the URL it is given.
The test servers (`checkpointkit.conformance.servers.redis`) start valkey-server and
use it too. Kept apart from the servers so that the generic target never imports them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..urls import redact_url

if TYPE_CHECKING:
    from ..adapters.redis import RedisStorage
    from .target import Target

__all__ = ["redis_target"]


def _namespace(location: str) -> str:
    """A RedisStorage prefix for a conformance location (letters, digits, ``_.-``)."""
    clean = "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_" for c in location)
    if clean == location and 0 < len(clean) <= 64:
        return clean
    import hashlib

    return f"loc-{hashlib.blake2b(location.encode(), digest_size=12).hexdigest()}"


def _pinned_node(url: str) -> tuple[tuple[str, int], str]:
    """The first primary of the cluster at ``url`` and a hash tag whose slot it serves."""
    import redis.cluster

    client = redis.cluster.RedisCluster.from_url(url.split("?", 1)[0])
    try:
        node = client.get_primaries()[0]  # type: ignore[no-untyped-call]
        for i in range(100_000):
            tag = f"ckc{i}"
            slot = client.keyslot(tag)  # type: ignore[no-untyped-call]
            if client.nodes_manager.get_node_from_slot(slot) == node:
                return (str(node.host), int(node.port)), tag
        raise RuntimeError("no hash tag maps to the first primary")  # pragma: no cover
    finally:
        client.close()


def redis_target(
    url: str,
    *,
    name: str | None = None,
    scale: float = 1.0,
    storage_class: type[RedisStorage] | None = None,
) -> Target:
    """A conformance target on the (loopback) Redis server or cluster at ``url``.

    Each storage gets its own namespace (``prefix``): the location the suite
    asks for, or a fresh one, whose keys are deleted afterwards. The factory
    accepts ``endpoint`` (the suite's stall proxy) and ``ttl``. On a cluster
    (``?cluster=true``) every storage is pinned to one node with ``hash_tag``
    and that node is the target's ``upstream``, so that all of a storage's
    traffic passes the proxy; ``address_remap`` sends the client there.

    The stall-proxy tests need a loopback server (the proxy forwards to
    loopback only); against a remote server they are skipped.

    Args:
        url: ``redis://127.0.0.1:PORT/0`` or ``...?cluster=true``.
        name: shown in reports (default: the URL, redacted).
        scale: see `Target`.
        storage_class: the class opened (a subclass of `RedisStorage`; default: it).
    """
    from contextlib import asynccontextmanager

    from ..adapters.redis import RedisStorage
    from ..storage import Capabilities
    from .holds import ProxyHold
    from .target import Target, new_location

    cluster = "cluster=true" in url.lower()
    options: dict[str, Any] = {}
    if cluster:
        upstream, tag = _pinned_node(url)
        options["hash_tag"] = tag
    else:
        parts = urlsplit(url)
        upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)

    @asynccontextmanager
    async def redis_storage(
        *,
        location: str | None = None,
        endpoint: tuple[str, int] | None = None,
        ttl: float | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[RedisStorage]:
        prefix = _namespace(location or new_location())
        kwargs = {**options, "prefix": prefix}
        if ttl is not None:
            kwargs["ttl"] = ttl
        if timeout is not None:
            kwargs["timeout"] = timeout
        if endpoint is not None:
            kwargs["endpoint"] = endpoint
            if cluster:
                kwargs["address_remap"] = lambda addr: endpoint if addr == upstream else addr
        async with (storage_class or RedisStorage).from_url(url, **kwargs) as storage:
            try:
                yield storage
            finally:
                if location is None:  # (a location may be reopened: its data stays)
                    direct = storage if endpoint is None else None  # not through the proxy
                    await _delete_all(direct, url, {**options, "prefix": prefix})

    kind = "cluster" if cluster else "standalone"
    loopback = upstream[0] in ("127.0.0.1", "localhost", "::1")
    return Target(
        redis_storage,
        name=name or f"redis {kind} ({redact_url(url)})",
        # the factory makes expiring storages on request (ttl=...): check that too
        capabilities=Capabilities(ttl=True, settles_cancelled_writes=True),
        upstream=upstream if loopback else None,  # the stall proxy forwards to loopback only
        scale=scale,
        hold=ProxyHold() if loopback else None,
    )


async def _delete_all(storage: RedisStorage | None, url: str, options: dict[str, Any]) -> None:
    """Delete every key of a test's namespace, through ``storage`` or a fresh client."""
    import asyncio

    from ..adapters.redis import RedisStorage

    if storage is None or storage._closed:
        async with RedisStorage.from_url(url, **options) as fresh:
            await _delete_all(fresh, url, options)
        return
    keys = [key async for key in storage.list()]
    await asyncio.gather(*(storage.delete(key) for key in keys))

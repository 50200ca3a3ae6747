"""Configuration, errors and credentials: one clear line, never a password."""

from __future__ import annotations

import asyncio
import importlib.metadata
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import redis.exceptions as rexc
from checkpointkit import (
    ConfigurationError,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageUnavailable,
)
from checkpointkit.adapters import redis as redis_adapter
from checkpointkit.adapters.redis import RedisStorage
from checkpointkit.conformance.servers import free_port
from checkpointkit.registry import open_storage
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, SSLConnection

from .conftest import PASSWORD

SECRET = "hunter2-Very:Secret"


def kwargs_of(s: RedisStorage) -> dict[str, object]:
    client = s.client
    assert isinstance(client, Redis)
    return dict(client.connection_pool.connection_kwargs)


async def test_url_sets_address_database_credentials_and_options() -> None:
    url = "redis://alice:pw%40x@cache.internal:6380/3?prefix=wf&ttl=3600&timeout=5&retries=1"
    async with RedisStorage.from_url(url) as s:
        kw = kwargs_of(s)
        assert (kw["host"], kw["port"], kw["db"]) == ("cache.internal", 6380, 3)
        assert (kw["username"], kw["password"]) == ("alice", "pw@x")
        assert s._timeout == 5.0  # the deadline of each operation
        assert kw["socket_connect_timeout"] == 5.0
        assert s.ttl == 3600
        assert s.capabilities.ttl
        assert s._ns == "wf"


async def test_url_defaults() -> None:
    async with RedisStorage.from_url("redis://") as s:
        kw = kwargs_of(s)
        assert (kw["host"], kw["port"], kw["db"]) == ("localhost", 6379, 0)
        assert kw["password"] is None
        assert s._ns == "ckpt"
        assert not s.capabilities.ttl
        assert not s.cluster


async def test_rediss_url_connects_with_tls() -> None:
    async with RedisStorage.from_url("rediss://h:6380/0?ssl_cert_reqs=none") as s:
        kw = kwargs_of(s)
        assert issubclass(s.client.connection_pool.connection_class, SSLConnection)  # type: ignore[union-attr]
        assert kw["ssl_cert_reqs"] == "none"
        assert repr(s).startswith("RedisStorage('rediss://h:6380/0'")


async def test_cluster_parameter_uses_the_cluster_client() -> None:
    async with RedisStorage.from_url("redis://h:7000/0?cluster=true") as s:
        assert isinstance(s.client, RedisCluster)
        assert s.cluster
        assert "cluster=True" in repr(s)


@pytest.mark.parametrize("endpoint", ["127.0.0.1:4242", ("127.0.0.1", 4242)])
async def test_endpoint_option_replaces_host_and_port(endpoint: object) -> None:
    async with RedisStorage.from_url("redis://:pw@far.away:6379/2", endpoint=endpoint) as s:
        kw = kwargs_of(s)
        assert (kw["host"], kw["port"], kw["db"], kw["password"]) == ("127.0.0.1", 4242, 2, "pw")


async def test_options_override_url_parameters() -> None:
    async with RedisStorage.from_url("redis://h/0?prefix=a&timeout=3", prefix="b", timeout=7) as s:
        assert s._ns == "b"
        assert s._timeout == 7.0


@pytest.mark.parametrize(
    ("url", "options", "named"),
    [
        ("redis://h/0?bogus=1", {}, "bogus"),
        ("redis://h/0?ttl=soon", {}, "ttl"),
        ("redis://h/0?cluster=maybe", {}, "cluster"),
        ("redis://h/0?timeout=-1", {}, "timeout"),
        ("redis://h/0?retries=-1", {}, "retries"),
        ("redis://h/0?scope_depth=0", {}, "scope_depth"),
        ("redis://h/zero", {}, "database number"),
        ("redis://h:99999/0", {}, "redis URL"),
        ("redis://h/0?prefix=a:b", {}, "prefix"),
        ("redis://h/0?prefix={x}", {}, "prefix"),
        ("redis://h/1?cluster=true", {}, "db 1"),
        ("redis://h/0", {"bogus_option": 1}, "bogus_option"),
        ("redis://h/0", {"endpoint": "nohost"}, "endpoint"),
        ("http://h/0", {}, "not a redis URL"),
        ("redis://h/0?cancel_grace=soon", {}, "cancel_grace"),
        ("redis://h/0?cancel_grace=0", {}, "cancel_grace"),
        ("redis://h/0?cancel_grace=nan", {}, "cancel_grace"),
        ("redis://h/0", {"cancel_grace": 61}, "cancel_grace"),
        ("redis://h/0", {"cancel_grace": True}, "cancel_grace"),
        ("redis://h/0", {"cancel_grace": "0.1"}, "cancel_grace"),
    ],
)
def test_bad_configuration_gives_one_clear_error(
    url: str, options: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        RedisStorage.from_url(url, **options)


async def test_cancel_grace_comes_from_the_url_or_an_option_with_a_default() -> None:
    async with RedisStorage.from_url("redis://h/0?cancel_grace=0.1") as s:
        assert s.cancel_grace == 0.1
    async with RedisStorage.from_url("redis://h/0?cancel_grace=0.1", cancel_grace=2) as s:
        assert s.cancel_grace == 2.0
    async with RedisStorage.from_url("redis://h/0") as s:
        assert s.cancel_grace == 0.25
    with pytest.raises(ConfigurationError, match=r"cancel_grace must be .* from 0\.01 to 60"):
        RedisStorage(cancel_grace=0.001)


async def test_both_storage_classes_declare_that_they_settle_cancelled_writes() -> None:
    async with (
        RedisStorage.from_url("redis://h/0") as plain,
        RedisStorage.from_url("redis://h/0?ttl=60") as expiring,
    ):
        for s in (plain, expiring):
            assert s.capabilities.settles_cancelled_writes
        assert expiring.capabilities.ttl and not plain.capabilities.ttl


def test_unknown_scheme_parameter_error_hides_the_password() -> None:
    with pytest.raises(ConfigurationError) as err:
        RedisStorage.from_url(f"redis://u:{SECRET}@h/0?bogus=1")
    assert SECRET not in str(err.value)
    assert "u:***@h" in str(err.value)


async def test_password_is_never_in_the_repr() -> None:
    async with RedisStorage.from_url(f"redis://bob:{SECRET}@h:1/0") as s:
        assert SECRET not in repr(s)
        assert "bob:***@h:1" in repr(s)
    async with RedisStorage(host="h", password=SECRET) as s:
        assert SECRET not in repr(s)


async def test_wrong_password_gives_storage_unavailable_without_the_password(
    redis_password_url: str,
) -> None:
    wrong = redis_password_url.replace(PASSWORD.replace(":", "%3A"), SECRET.replace(":", "%3A"))
    assert SECRET.split(":")[0] in wrong
    async with RedisStorage.from_url(wrong, timeout=5, retries=0) as s:
        with pytest.raises(StorageUnavailable, match="authentication failed") as err:
            await s.put("runs/r/k", b"v")
    for text in (str(err.value), repr(err.value), str(err.value.__cause__)):
        assert SECRET not in text
        assert PASSWORD not in text
    async with RedisStorage.from_url(redis_password_url) as s:  # the right one works
        await s.put("runs/r/k", b"v")
        assert (await s.get("runs/r/k")).data == b"v"
        assert PASSWORD not in repr(s)


async def test_missing_password_gives_storage_unavailable(redis_password_url: str) -> None:
    url = "redis://" + redis_password_url.split("@", 1)[1]
    async with RedisStorage.from_url(url, retries=0) as s:
        with pytest.raises(StorageUnavailable, match="authentication"):
            await s.get("runs/r/k")


@pytest.mark.parametrize("cluster", [False, True])
async def test_refused_endpoint_gives_storage_unavailable_within_the_timeout(
    cluster: bool,
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0?timeout=2&retries=2&cluster={cluster}"
    async with RedisStorage.from_url(url) as s:
        start = time.monotonic()
        with pytest.raises(StorageUnavailable, match=r"127\.0\.0\.1"):
            await s.get("runs/r/k")
        assert time.monotonic() - start < 2 + 1.0
        with pytest.raises(StorageUnavailable) as err:  # a write that never left: not unknown
            await s.put("runs/r/k", b"v")
        assert not isinstance(err.value, OutcomeUnknown)


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.mark.parametrize("cluster", [False, True])
async def test_silent_endpoint_gives_storage_unavailable_within_the_timeout(
    silent_listener: int, cluster: bool
) -> None:
    url = f"redis://127.0.0.1:{silent_listener}/0?timeout=1&cluster={cluster}"
    async with RedisStorage.from_url(url) as s:
        start = time.monotonic()
        with pytest.raises(StorageUnavailable, match=r"127\.0\.0\.1") as err:
            await s.put("runs/r/k", b"v")
        assert time.monotonic() - start < 1 + 1.0
        # connected, but the handshake never got an answer: the put itself never left
        assert not isinstance(err.value, OutcomeUnknown)


async def test_a_cluster_node_opened_without_cluster_true_says_so(redis_cluster_url: str) -> None:
    plain = redis_cluster_url.split("?", 1)[0]
    async with RedisStorage.from_url(plain, prefix="moved") as s:
        errors = []
        for run in range(12):
            try:
                await s.put(f"runs/r{run}/k", b"v")
            except ConfigurationError as exc:
                errors.append(str(exc))
        assert errors, "every key landed on the node we opened?"
        assert "?cluster=true" in errors[0]


async def test_a_client_can_be_passed_in_and_is_not_closed(redis_standalone_url: str) -> None:
    client = Redis.from_url(redis_standalone_url)
    try:
        async with RedisStorage(client, prefix="passed") as s:
            await s.put("runs/r/k", b"v")
        assert await client.ping()  # still open: the caller owns it
        async with RedisStorage(client, prefix="passed", close_client=True) as s:
            assert (await s.get("runs/r/k")).data == b"v"
            await s.delete("runs/r/k")
    finally:
        await client.aclose()


async def test_a_client_decoding_responses_is_refused(redis_standalone_url: str) -> None:
    client = Redis.from_url(redis_standalone_url, decode_responses=True)
    try:
        with pytest.raises(ConfigurationError, match="decode_responses=False"):
            RedisStorage(client)
    finally:
        await client.aclose()


async def test_open_storage_passes_options(redis_standalone_url: str) -> None:
    async with open_storage(redis_standalone_url, prefix="viaregistry", ttl=30) as s:
        assert isinstance(s, RedisStorage)
        assert s.capabilities.ttl


def test_the_redis_extra_installs_hiredis() -> None:
    extra = [
        r for r in importlib.metadata.requires("checkpointkit") or [] if 'extra == "redis"' in r
    ]
    assert any(r.replace(" ", "").startswith("redis[hiredis]") for r in extra), extra


@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
async def test_the_adapters_connections_read_replies_with_hiredis(
    cluster: bool, redis_standalone_url: str, redis_cluster_url: str
) -> None:
    url = redis_cluster_url if cluster else redis_standalone_url
    async with RedisStorage.from_url(url, prefix="parser") as s:
        await s.put("runs/r/k", b"v")
        client = s.client
        if isinstance(client, RedisCluster):
            pools = [node._connections for node in client.get_nodes()]
            connections = [c for pool in pools for c in pool]
        else:
            assert isinstance(client, Redis)
            connections = list(client.connection_pool._available_connections)
        parsers = {type(c._parser).__name__ for c in connections if c.is_connected}
        assert parsers == {"_AsyncHiredisParser"}, parsers


def test_a_missing_redis_package_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "from checkpointkit import open_storage, ConfigurationError\n"
        "try:\n"
        "    open_storage('redis://localhost/0')\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert 'pip install "checkpointkit[redis]"' in out


# -- _translate_errors: every foreign error it maps ---------------------------------------


def _instance(kind: type[BaseException]) -> BaseException:
    if issubclass(kind, rexc.AskError):
        return kind(f"3999 127.0.0.1:6381 {SECRET}")
    return kind(f"boom {SECRET}")


@pytest.mark.parametrize(
    "kind", [kind for kind, _ in redis_adapter._UNAVAILABLE], ids=lambda k: k.__name__
)
def test_translate_errors_maps_each_foreign_error_to_storage_unavailable(
    kind: type[BaseException],
) -> None:
    original = _instance(kind)
    with (
        pytest.raises(StorageUnavailable) as err,
        redis_adapter._translate_errors("get", "k", "redis://h:1/0", SECRET),
    ):
        raise original
    assert type(err.value) is StorageUnavailable  # a read: never OutcomeUnknown
    assert err.value.__cause__ is original
    assert "get 'k'" in str(err.value)
    assert "redis://h:1/0" in str(err.value)
    assert SECRET not in str(err.value)


def _sent_write() -> redis_adapter._Write:
    write = redis_adapter._Write(tracked=True)
    write.arm(0.0)
    write.sent = True  # what the connection does when it starts writing the request
    return write


@pytest.mark.parametrize(
    "kind", [kind for kind, _ in redis_adapter._UNAVAILABLE], ids=lambda k: k.__name__
)
def test_translate_errors_says_outcome_unknown_only_for_a_sent_write_without_an_answer(
    kind: type[BaseException],
) -> None:
    """A timeout or lost connection after the request left: OutcomeUnknown. A refusal by
    the server, or anything before the request left: plain StorageUnavailable."""
    original = _instance(kind)
    with (
        pytest.raises(StorageUnavailable) as err,
        redis_adapter._translate_errors("put", "k", "redis://h:1/0", SECRET, _sent_write()),
    ):
        raise original
    answered = issubclass(kind, redis_adapter._ANSWERED)
    assert isinstance(err.value, OutcomeUnknown) is not answered
    if not answered:
        assert "may have happened" in str(err.value)
    assert SECRET not in str(err.value)
    unsent = redis_adapter._Write(tracked=True)
    unsent.arm(0.0)  # armed, but the connection never started sending
    with (
        pytest.raises(StorageUnavailable) as err,
        redis_adapter._translate_errors("put", "k", "redis://h:1/0", SECRET, unsent),
    ):
        raise _instance(kind)
    assert type(err.value) is StorageUnavailable


def test_translate_errors_classifies_timeouts_and_lost_connections_as_unknown() -> None:
    for original in (rexc.TimeoutError("t"), rexc.ConnectionError("reset"), TimeoutError()):
        with (
            pytest.raises(OutcomeUnknown),
            redis_adapter._translate_errors("put", "k", "w", None, _sent_write()),
        ):
            raise original
    for refused in (rexc.ReadOnlyError("r"), rexc.OutOfMemoryError("o"), rexc.ResponseError()):
        with (
            pytest.raises(StorageUnavailable) as err,
            redis_adapter._translate_errors("put", "k", "w", None, _sent_write()),
        ):
            raise refused
        assert type(err.value) is StorageUnavailable


@pytest.mark.parametrize("kind", [rexc.MovedError, rexc.AskError])
def test_translate_errors_maps_redirects_to_a_configuration_hint(
    kind: type[BaseException],
) -> None:
    with (
        pytest.raises(ConfigurationError, match=r"\?cluster=true"),
        redis_adapter._translate_errors("put", "k", "redis://h:1/0", None),
    ):
        raise kind("3999 127.0.0.1:6381")


@pytest.mark.parametrize(
    "passing",
    [
        asyncio.CancelledError(),
        NotFound("k"),
        PreconditionFailed("k"),
        ValueError("a bug of ours"),
        AttributeError("a bug of ours"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_translate_errors_lets_other_errors_through(passing: BaseException) -> None:
    with (
        pytest.raises(type(passing)) as err,
        redis_adapter._translate_errors("get", "k", "redis://h:1/0", None),
    ):
        raise passing
    assert err.value is passing


async def test_translate_errors_maps_a_closed_connection_inside_redis_py() -> None:
    """redis-py's cluster client may close a connection under a command: AttributeError."""
    conn = Connection()
    with (
        pytest.raises(StorageUnavailable, match="closed under the command") as err,
        redis_adapter._translate_errors("put", "k", "redis://h:1/0", None),
    ):
        await conn._send_packed_command([b"PING"])
    assert isinstance(err.value.__cause__, AttributeError)


def test_password_in_the_url_query_never_appears_in_repr_or_errors() -> None:
    from checkpointkit.adapters.redis import RedisStorage

    with pytest.raises(ConfigurationError) as info:  # put the password in the netloc instead
        RedisStorage.from_url("redis://127.0.0.1:6390/0?password=hunter2")
    assert "hunter2" not in str(info.value)
    assert "unknown redis URL parameter 'password'" in str(info.value)


async def test_cluster_storages_share_the_command_table_until_a_command_is_not_in_it(
    redis_cluster_url: str,
) -> None:
    """redis-py loads the cluster's command table (COMMAND: some 12,000 values to parse) with
    every topology load; a storage takes the one another storage of the process loaded from
    the same node, also when its topology is reloaded, and asks the server again only for
    a command that is not in it."""
    redis_adapter._COMMAND_TABLES.clear()
    async with (
        RedisStorage.from_url(redis_cluster_url, prefix="table-a") as first,
        RedisStorage.from_url(redis_cluster_url, prefix="table-b") as second,
    ):
        await first.put("k", b"v")
        await second.put("k", b"v")
        one, two = (s.client.commands_parser for s in (first, second))  # type: ignore[union-attr]
        assert one.commands is two.commands and "evalsha" in one.commands
        assert list(redis_adapter._COMMAND_TABLES.values()) == [one.commands]
        loaded = one.commands
        await two.initialize(two.node)  # a topology reload (what redis-py does after a reset)
        assert two.commands is loaded
        with pytest.raises(rexc.RedisError, match="doesn't exist"):
            await two.get_keys("NO-SUCH-COMMAND", "k")  # reloads from the server, then fails
        assert two.commands is not loaded and two.commands == loaded
        assert redis_adapter._COMMAND_TABLES[str(two.node.name)] is two.commands
        assert (await second.get("k")).data == b"v"

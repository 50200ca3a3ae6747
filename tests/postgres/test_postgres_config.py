"""URL and options, credentials (never shown), the schema, versions and TTL on a real server."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote

import asyncpg
import pytest
from checkpointkit import ConfigurationError, NotFound, OutcomeUnknown, StorageUnavailable
from checkpointkit.adapters.postgres import SCHEMA_VERSION, PostgresStorage
from checkpointkit.conformance.servers.postgres import PASSWORD, USER, PostgresServer
from checkpointkit.registry import open_storage
from checkpointkit.storage import IfMatch


def _without_password(url: str) -> str:
    return url.replace(f":{quote(PASSWORD, safe='')}@", "@")


def test_url_sets_the_options_and_keeps_libpq_parameters_for_the_driver() -> None:
    storage = PostgresStorage.from_url(
        "postgresql://alice:pw%40x@db.internal:6543/app?prefix=wf&table=ck_data&schema=ops"
        "&ttl=3600&timeout=5&connect_timeout=2&cancel_grace=0.5&pool_size=4"
        "&sslmode=verify-full&sslrootcert=/etc/ca.pem"
    )
    assert (storage.prefix, storage.table, storage.schema) == ("wf", "ck_data", "ops")
    assert (storage.ttl, storage.timeout, storage.connect_timeout) == (3600, 5, 2)
    assert (storage.cancel_grace, storage.pool_size) == (0.5, 4)
    assert storage._dsn == (
        "postgresql://alice:pw%40x@db.internal:6543/app"
        "?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
    )
    assert '"ops"."ck_data"' in storage._sql.get


def test_keyword_options_override_the_url() -> None:
    storage = PostgresStorage.from_url("postgres://h/db?prefix=a&ttl=5", prefix="b", ttl=None)
    assert (storage.prefix, storage.ttl) == ("b", None)


def test_open_storage_opens_both_schemes() -> None:
    for scheme in ("postgres", "postgresql"):
        assert isinstance(open_storage(f"{scheme}://h/db"), PostgresStorage)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("postgresql://h/db?prefx=wf", "unknown postgres URL parameter 'prefx'"),
        ("postgresql://h/db?ttl=soon", "ttl='soon' is not a valid float"),
        ("postgresql://h/db?pool_size=0", "pool_size must be an int >= 1"),
        ("postgresql://h/db?timeout=0", "timeout must be a number of seconds"),
        ("postgresql://h/db?cancel_grace=-1", "cancel_grace must be a number"),
        ('postgresql://h/db?table=ck"; drop table x', "table must be a plain SQL name"),
        ("postgresql://h/db?schema=a.b", "schema must be a plain SQL name"),
        ("mysql://h/db", "not a postgres URL"),
    ],
)
def test_a_bad_url_names_what_is_wrong(url: str, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words.replace("(", r"\(").replace("?", r"\?")):
        PostgresStorage.from_url(url)


def test_repr_and_errors_never_show_the_password() -> None:
    url = "postgresql://alice:Very%3ASecret@db.internal/app?sslpassword=key-Secret"
    storage = PostgresStorage.from_url(url)
    assert "Secret" not in repr(storage)
    assert "alice:***@db.internal" in repr(storage)
    with pytest.raises(ConfigurationError) as caught:
        PostgresStorage.from_url(url + "&bogus=1")
    assert "Secret" not in str(caught.value)


async def test_a_wrong_password_is_storage_unavailable_without_the_password(
    pg_server: PostgresServer,
) -> None:
    url = pg_server.url.replace(quote(PASSWORD, safe=""), "Wrong-Secret-42")
    async with PostgresStorage.from_url(url) as storage:
        with pytest.raises(StorageUnavailable, match="authentication failed") as caught:
            await storage.get("a")
    assert "Wrong-Secret-42" not in str(caught.value)
    assert isinstance(caught.value.__cause__, asyncpg.InvalidPasswordError)


async def test_credentials_come_from_the_environment(
    pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    monkeypatch.setenv("PGUSER", USER)
    url = f"postgresql://127.0.0.1:{pg_server.port}/postgres?prefix=env"
    async with PostgresStorage.from_url(url) as storage:
        await storage.put("k", b"v")
        assert (await storage.get("k")).data == b"v"
        assert await storage.delete("k")


async def test_an_unreachable_server_is_storage_unavailable() -> None:
    from checkpointkit.conformance.servers import free_port

    url = f"postgresql://u:p@127.0.0.1:{free_port()}/db?connect_timeout=2"
    async with PostgresStorage.from_url(url) as storage:
        with pytest.raises(StorageUnavailable, match="could not be reached"):
            await storage.put("k", b"v")


async def test_schema_creation_is_idempotent_when_many_storages_start_at_once(
    pg_server: PostgresServer,
) -> None:
    url = f"{pg_server.url}?table=ck_concurrent_{time.monotonic_ns()}"
    storages = [PostgresStorage.from_url(url, prefix=f"p{i}") for i in range(6)]
    try:
        await asyncio.gather(*(s.put("k", b"v") for s in storages))
        assert [(await s.get("k")).data for s in storages] == [b"v"] * 6
    finally:
        await asyncio.gather(*(s.aclose() for s in storages))
    async with PostgresStorage.from_url(url) as again:  # the layout is there: nothing to do
        assert [k async for k in again.list()] == []


async def test_a_table_of_a_newer_layout_is_refused(pg_server: PostgresServer) -> None:
    table = f"ck_newer_{time.monotonic_ns()}"
    async with PostgresStorage.from_url(pg_server.url, table=table) as storage:
        await storage.put("k", b"v")
    conn = await asyncpg.connect(pg_server.url)
    try:
        await conn.execute(f"UPDATE {table}_meta SET value = $1", SCHEMA_VERSION + 1)
    finally:
        await conn.close()
    async with PostgresStorage.from_url(pg_server.url, table=table) as storage:
        with pytest.raises(ConfigurationError, match="newer than this checkpointkit"):
            await storage.get("k")


async def test_versions_never_repeat_across_delete_and_create(pg_url: str) -> None:
    async with PostgresStorage.from_url(pg_url, prefix=f"ver{time.monotonic_ns()}") as storage:
        seen = [await storage.put("k", b"same")]
        for _ in range(5):
            seen.append(await storage.put("k", b"same"))
            await storage.delete("k")
            seen.append(await storage.put("k", b"same", mode="create"))
            seen.append(await storage.put("k", b"same", mode=IfMatch(seen[-1])))
        assert len(set(seen)) == len(seen)


async def test_prefixes_are_namespaces_that_never_meet(pg_url: str) -> None:
    tag = time.monotonic_ns()
    async with (
        PostgresStorage.from_url(pg_url, prefix=f"a{tag}") as a,
        PostgresStorage.from_url(pg_url, prefix=f"a{tag}/") as b,
    ):
        await a.put("k", b"from a")
        with pytest.raises(NotFound):
            await b.get("k")
        assert [k async for k in b.list()] == []
        assert await a.delete_namespace() == 1


async def test_expired_keys_are_absent_and_purged(pg_url: str) -> None:
    prefix = f"ttl{time.monotonic_ns()}"
    async with PostgresStorage.from_url(pg_url, prefix=prefix, ttl=0.2) as storage:
        await storage.put("gone", b"short-lived")
        assert (await storage.get("gone")).data == b"short-lived"
        await asyncio.sleep(0.3)  # the expiry itself is what is tested: time must pass
        with pytest.raises(NotFound):
            await storage.get("gone")
        assert [k async for k in storage.list()] == []
        assert not await storage.delete("gone")
        await storage.put("gone", b"again", mode="create")  # an expired key is absent
        await asyncio.sleep(0.3)
        assert await storage.purge_expired() >= 1


async def test_a_write_that_times_out_is_outcome_unknown_after_settling(
    pg_server: PostgresServer,
) -> None:
    async with PostgresStorage.from_url(
        pg_server.url, prefix=f"timeout{time.monotonic_ns()}", timeout=0.3
    ) as storage:
        await storage.put("k", b"old")
        pg_server.pause()
        try:
            start = time.monotonic()
            with pytest.raises(OutcomeUnknown, match="may have happened"):
                await storage.put("k", b"new")
            took = time.monotonic() - start
        finally:
            pg_server.resume()
        assert took <= 0.3 + storage.cancel_grace + 0.5
        await asyncio.sleep(storage.cancel_grace)  # the fence's deadline has passed
        assert (await storage.get("k")).data == b"old"  # and the write never landed

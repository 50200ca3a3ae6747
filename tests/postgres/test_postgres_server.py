"""The test PostgreSQL server: loopback only, password required, paused and stopped by pid."""

from __future__ import annotations

import asyncio
import os
import socket
from urllib.parse import quote

import asyncpg
import pytest
from checkpointkit.conformance.servers.postgres import (
    PASSWORD,
    USER,
    PostgresServer,
    find_postgres_bindir,
    postgres_server,
)


async def _connect(url: str, timeout: float = 10.0) -> asyncpg.Connection:
    return await asyncpg.connect(url, timeout=timeout)


async def test_server_answers_on_loopback_with_the_password(pg_server: PostgresServer) -> None:
    conn = await _connect(pg_server.url)
    try:
        assert await conn.fetchval("select current_user") == USER
        assert await conn.fetchval("show listen_addresses") == "127.0.0.1"
        assert await conn.fetchval("show unix_socket_directories") == ""
    finally:
        await conn.close()


async def test_server_refuses_a_wrong_password(pg_server: PostgresServer) -> None:
    wrong = pg_server.url.replace(quote(PASSWORD, safe=""), "wrong")
    with pytest.raises(asyncpg.InvalidPasswordError):
        await _connect(wrong)


async def test_pause_freezes_every_backend_and_resume_thaws_them(
    pg_server: PostgresServer,
) -> None:
    conn = await _connect(pg_server.url)
    try:
        pg_server.pause()
        try:
            query = asyncio.ensure_future(conn.fetchval("select 1"))
            done, _ = await asyncio.wait({query}, timeout=0.5)
            assert not done, "a paused server answered"
        finally:
            pg_server.resume()
        assert await asyncio.wait_for(query, timeout=10) == 1
    finally:
        await conn.close()


def test_a_server_whose_port_another_process_holds_does_not_start() -> None:
    """A parallel worker may take the same "free" port: the server must not count as started."""
    bindir = find_postgres_bindir()
    assert bindir is not None
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = PostgresServer(bindir, port=holder.getsockname()[1])
        try:
            with pytest.raises(RuntimeError, match=f"port {server.port}"):
                server.start()
        finally:
            server.stop()


def test_stop_ends_the_server_and_removes_its_directory() -> None:
    with postgres_server() as server:
        pid, directory = server.pid, server.directory
        assert directory is not None and os.path.isdir(directory)
    assert not os.path.exists(directory)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_stop_ends_a_paused_server() -> None:
    with postgres_server() as server:
        pid = server.pid
        server.pause()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_a_database_with_an_icu_collation_orders_text_as_people_do(
    pg_server: PostgresServer, pg_icu_url: str
) -> None:
    # what the PostgreSQL adapter's conformance run is made in: its keys must keep byte
    # order there by their own COLLATE "C", since the database's does not
    assert pg_server.database("icu", icu_locale="en-US") == pg_icu_url  # made once, then found
    conn = await asyncpg.connect(pg_icu_url)
    try:
        words = ["ab", "B", "a b", "a-b"]
        rows = await conn.fetch("SELECT w FROM unnest($1::text[]) AS w ORDER BY w", words)
        assert [r["w"] for r in rows] == ["a b", "a-b", "ab", "B"]
        rows = await conn.fetch(
            'SELECT w FROM unnest($1::text[]) AS w ORDER BY w COLLATE "C"', words
        )
        assert [r["w"] for r in rows] == sorted(words)
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("name", "locale", "wrong"),
    [("icu; DROP", None, "database name"), ("x", "en-US'; --", "icu_locale")],
)
def test_a_database_name_or_locale_that_is_not_plain_is_refused(
    pg_server: PostgresServer, name: str, locale: str | None, wrong: str
) -> None:
    with pytest.raises(ValueError, match=wrong):
        pg_server.database(name, icu_locale=locale)

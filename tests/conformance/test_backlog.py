"""`until_sent`, the barrier the settling tests wait on with their server frozen.

A server that never reads stands for the frozen one: a listening socket of this
process with a small receive buffer, whose accepted connection is never read. The
counts are of every connection to its port, as the settling tests' are; the listener is
closed once it accepted, so that no other connection can add to them (another test's
process that probed a port it was given as free, which this listener had taken
meanwhile, added its bytes twice in CI).
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from checkpointkit.conformance.servers import backlog, received_unread, until_sent

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc/net/tcp: Linux only"
)

KiB = 1024


@asynccontextmanager
async def _never_read(rcvbuf: int) -> AsyncIterator[tuple[int, socket.socket]]:
    """(port, client socket) of a connection whose server side is never read."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.socket()
    client.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(client, listener.getsockname())
    server_side, _ = listener.accept()
    port = listener.getsockname()[1]
    listener.close()  # no other connection to the port from now on
    try:
        yield port, client
    finally:
        for s in (client, server_side):
            s.close()


def _queues(server_port: int, client_port: int) -> tuple[int, int]:
    """The server side's receive queue and the client side's send queue of one connection."""
    unread = unsent = 0
    with open("/proc/net/tcp") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            local, remote = (int(f.split(":")[1], 16) for f in fields[1:3])
            tx, rx = (int(n, 16) for n in fields[4].split(":"))
            if (local, remote) == (server_port, client_port):
                unread = rx
            elif (local, remote) == (client_port, server_port):
                unsent = tx
    return unread, unsent


async def test_until_sent_returns_once_the_bytes_are_in_the_servers_socket() -> None:
    async with _never_read(256 * KiB) as (port, client):
        since = backlog(port)
        await asyncio.get_running_loop().sock_sendall(client, b"x" * KiB)
        assert await asyncio.wait_for(until_sent(port, KiB, since, "1 KiB", within=5), 5) == 0
        assert received_unread(port) - since.unread >= KiB


async def test_until_sent_counts_what_waits_whole_in_the_clients_send_queue() -> None:
    """More than the server's receive queue holds: the rest waits in the client's send
    queue, where a barrier on the receive queues alone would wait for ever."""
    nbytes = 512 * KiB
    async with _never_read(8 * KiB) as (port, client):
        since = backlog(port)
        loop = asyncio.get_running_loop()
        sending = asyncio.ensure_future(loop.sock_sendall(client, b"x" * nbytes))
        try:
            assert await until_sent(port, nbytes, since, "512 KiB", within=10) >= 1
            unread, unsent = _queues(port, client.getsockname()[1])
            assert unread < nbytes, "the receive queue held it all"
            # exact, once settled: a byte that arrived and is not yet acknowledged is in
            # both queues while bytes move (returning then would count it twice)
            assert unread + unsent == nbytes, (unread, unsent)
        finally:
            sending.cancel()


async def test_until_sent_names_where_the_bytes_are_when_they_never_all_leave() -> None:
    async with _never_read(256 * KiB) as (port, client):
        since = backlog(port)
        await asyncio.get_running_loop().sock_sendall(client, b"x" * KiB)
        with pytest.raises(AssertionError) as raised:
            await until_sent(port, 2 * KiB, since, "2 KiB", within=1)
    assert str(raised.value) == (
        "2 KiB did not happen within 1 s: of 2048 bytes, 1024 in the server's sockets"
        " and 0 in the clients' send queues"
    )

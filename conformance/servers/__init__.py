"""Local backend servers for the conformance suite and the project's tests.

Each module starts a real server process on a loopback address and a free port
(``valkey-server``, moto's S3 server, Azurite). When a server cannot be
started, `unavailable` skips the test with the reason, except when the
environment variable ``CHECKPOINTKIT_REQUIRE_BACKENDS`` is set (CI sets it):
then the skip becomes a failure, so that no backend is silently left out.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import NoReturn

__all__ = [
    "REQUIRE_ENV",
    "SETTLED",
    "Backlog",
    "backlog",
    "free_port",
    "listens",
    "received_unread",
    "started",
    "stop",
    "unavailable",
    "until_sent",
]

REQUIRE_ENV = "CHECKPOINTKIT_REQUIRE_BACKENDS"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def listens(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds the listening TCP socket of 127.0.0.1:``port``.

    A free port can be taken by another process (a parallel test worker's
    server) before ours binds it: then something answers on the port, but not
    ours. Read from ``/proc`` (Linux); None where that cannot be read.
    """
    inodes: set[str] = set()
    try:
        with open("/proc/net/tcp") as table:
            next(table)
            for line in table:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{inode}]")
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    for fd in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            continue  # closed meanwhile
    return False


def received_unread(port: int) -> int:
    """Bytes that reached the sockets of a server on loopback ``port`` and that it has not read.

    Summed over its established connections, from ``/proc/net/tcp`` (Linux): a
    test that freezes a server can wait on it until a request it sent is in the
    server's socket (for many or large requests, see `until_sent`).
    """
    return backlog(port).unread


@dataclass(frozen=True)
class Backlog:
    """What clients on this machine sent to a server on a loopback port and it has not read.

    ``unread``: in the server's sockets (`received_unread`); ``unsent``: still in
    the clients' send queues, written but not yet acknowledged by the server's
    kernel (a request larger than the room a frozen server's receive queue has left
    waits there: it left the client all the same). While bytes are moving, one that
    arrived and is not yet acknowledged is in both; once the flow has stopped for
    longer than the kernel's longest delayed acknowledgement (200 ms on Linux), the
    sum is exact.
    """

    unread: int
    unsent: int
    waiting: int = 0
    """How many client connections have bytes in their send queue."""

    @property
    def total(self) -> int:
        """``unread + unsent``."""
        return self.unread + self.unsent


def backlog(port: int) -> Backlog:
    """The `Backlog` of the server on loopback ``port`` now, from ``/proc/net/tcp`` (Linux)."""
    unread = unsent = waiting = 0
    with open("/proc/net/tcp") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "01":  # ESTABLISHED
                continue
            tx, rx = (int(n, 16) for n in fields[4].split(":"))
            if int(fields[1].split(":")[1], 16) == port:
                unread += rx
            elif int(fields[2].split(":")[1], 16) == port and tx:
                unsent += tx
                waiting += 1
    return Backlog(unread, unsent, waiting)


SETTLED = 0.5
"""Seconds a backlog must stay the same before `until_sent` trusts its sum: more than the
longest delayed acknowledgement of Linux (200 ms), so no byte is counted twice."""


async def until_sent(
    port: int, nbytes: int, since: Backlog, what: str, within: float = 10.0
) -> int:
    """Wait until ``nbytes`` more than ``since`` left the clients for a stopped server.

    Returns at once, with 0, when the bytes are all in the server's sockets;
    otherwise when the backlog counts them and has stopped moving for `SETTLED`
    seconds, with how many connections have the rest in their send queues (a client
    that resets such a connection discards it: one request per connection can then
    never reach the server whole). Fails the test, naming ``what`` and where the
    bytes are, after ``within`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last, since_when = backlog(port), loop.time()
    while True:
        now = backlog(port)
        if now.unread - since.unread >= nbytes:
            return 0
        if now != last:
            last, since_when = now, loop.time()
        elif now.total - since.total >= nbytes and loop.time() - since_when >= SETTLED:
            return now.waiting
        if loop.time() >= deadline:
            raise AssertionError(
                f"{what} did not happen within {within:g} s: of {nbytes} bytes,"
                f" {now.unread - since.unread} in the server's sockets and"
                f" {now.unsent - since.unsent} in the clients' send queues"
            )
        await asyncio.sleep(0.01)


def started(proc: subprocess.Popen[bytes], port: int, timeout: float = 30.0) -> bool:
    """Whether ``proc`` came to listen on 127.0.0.1:``port`` within ``timeout`` seconds.

    False if it exited, if another process holds the port (see `listens`),
    or if time ran out: the caller stops it and tries another free port.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                # Ours, not another server that took the same free port first.
                return listens(proc.pid, port) is not False
        except OSError:
            time.sleep(0.05)
    return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``proc`` and wait for it (kill it after 10 s); nothing if it has exited."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def unavailable(reason: str) -> NoReturn:
    """Skip the current test because a backend is missing, or fail when it is required."""
    import pytest

    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"backend required by {REQUIRE_ENV} but unavailable: {reason}", pytrace=False)
    pytest.skip(f"backend unavailable: {reason}")

"""Local backend servers for the conformance suite and the project's tests.

Each module starts a real server process on a loopback address and a free port
(``valkey-server``, moto's S3 server, Azurite). When a server cannot be
started, `unavailable` skips the test with the reason, except when the
environment variable ``CHECKPOINTKIT_REQUIRE_BACKENDS`` is set (CI sets it):
then the skip becomes a failure, so that no backend is silently left out.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import NoReturn

__all__ = [
    "REQUIRE_ENV",
    "free_port",
    "listens",
    "received_unread",
    "started",
    "stop",
    "unavailable",
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
    test that freezes a server can wait on it until every request it sent is
    in the server's socket.
    """
    total = 0
    with open("/proc/net/tcp") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":  # ESTABLISHED
                total += int(fields[4].split(":")[1], 16)
    return total


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

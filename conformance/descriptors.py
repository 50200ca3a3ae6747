"""Counting open file descriptors: a storage must close every socket and file it opened.

A leaked descriptor that stays referenced (a connection kept in a module-level
pool, a file handle in a cache) never raises a ``ResourceWarning``: only
counting descriptors finds it. `snapshot` reads ``/proc/self/fd`` and
names each descriptor (a path, or a socket with its addresses from
``/proc/self/net``); `leaked` compares two snapshots.

Two kinds of descriptors are not the storage's and are left out:

- sockets accepted by a server running in this process (a test's moto
  server or stall proxy): their local port is one this process listens on,
  and the server's thread closes them on its own schedule;
- descriptors that the process opens once, lazily, on first use of a
  library: the suite measures only after a warm-up use of the storage.

On a system without ``/proc/self/fd`` (macOS, Windows) every check is skipped.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Descriptor",
    "available",
    "describe_leak",
    "leaked",
    "name",
    "snapshot",
    "wait_for_no_leak",
]

_FD_DIR = "/proc/self/fd"
_TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "0A": "LISTEN",
}


def available() -> bool:
    """Whether this system lists a process's descriptors in ``/proc/self/fd``."""
    return os.path.isdir(_FD_DIR)


@dataclass(frozen=True)
class Descriptor:
    """One open descriptor.

    Attributes:
        fd: its number.
        target: what ``readlink`` gives (``/path``, ``socket:[123]``, ``pipe:[4]``...).
        name: a readable description (``TCP 127.0.0.1:5000 -> 127.0.0.1:6379
            ESTABLISHED``, ``file /tmp/x``).
        server_side: a socket accepted by a server listening in this process.
    """

    fd: int
    target: str
    name: str
    server_side: bool = False


def _hex_address(text: str) -> tuple[str, int]:
    host, port = text.split(":")
    if len(host) == 8:
        raw = bytes.fromhex(host)[::-1]
        addr = ".".join(str(b) for b in raw)
    else:  # IPv6: four little-endian 32-bit words
        words = [bytes.fromhex(host[i : i + 8])[::-1].hex() for i in range(0, 32, 8)]
        full = "".join(words)
        addr = ":".join(full[i : i + 4] for i in range(0, 32, 4))
        if addr.startswith("0000:0000:0000:0000:0000:ffff:"):
            tail = bytes.fromhex(full[24:])
            addr = ".".join(str(b) for b in tail)
        elif full == "0" * 31 + "1":
            addr = "::1"
    return addr, int(port, 16)


def _sockets() -> tuple[dict[str, tuple[str, str, str, int]], set[int]]:
    """inode -> (kind, text, state, local port), and the local ports in LISTEN state."""
    table: dict[str, tuple[str, str, str, int]] = {}
    listening: set[int] = set()
    for kind in ("tcp", "tcp6"):
        try:
            with open(f"/proc/self/net/{kind}", encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10:
                continue
            (local_host, local_port), (remote_host, remote_port) = (
                _hex_address(parts[1]),
                _hex_address(parts[2]),
            )
            state = _TCP_STATES.get(parts[3], parts[3])
            if state == "LISTEN":
                listening.add(local_port)
            text = f"TCP {local_host}:{local_port}"
            if state != "LISTEN":
                text += f" -> {remote_host}:{remote_port}"
            table[parts[9]] = ("tcp", text, state, local_port)
    try:
        with open("/proc/self/net/unix", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        lines = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 7:
            path = parts[7] if len(parts) > 7 else "(unnamed)"
            table[parts[6]] = ("unix", f"Unix socket {path}", "", 0)
    return table, listening


def snapshot() -> dict[int, str]:
    """Every open descriptor of this process and what it points to (``readlink``).

    Cheap: descriptors are named only when `leaked` finds new ones.
    Empty without ``/proc``.
    """
    if not available():
        return {}
    targets: dict[int, str] = {}
    for entry in os.listdir(_FD_DIR):
        try:
            targets[int(entry)] = os.readlink(f"{_FD_DIR}/{entry}")
        except (OSError, ValueError):  # closed meanwhile (the listing's own descriptor)
            continue
    return targets


def name(targets: dict[int, str]) -> list[Descriptor]:
    """Name each descriptor of ``targets`` (a path, or a socket with its addresses)."""
    sockets: dict[str, tuple[str, str, str, int]] | None = None
    listening: set[int] = set()
    out: list[Descriptor] = []
    for fd, target in sorted(targets.items()):
        server_side = False
        if target.startswith("socket:["):
            if sockets is None:
                sockets, listening = _sockets()
            found = sockets.get(target[len("socket:[") : -1])
            if found is None:
                label = f"socket {target}"
            else:
                kind, text, state, port = found
                label = f"{text} {state}".strip()
                server_side = kind == "tcp" and state != "LISTEN" and port in listening
        elif target.startswith(("pipe:", "anon_inode:")):
            label = target
        else:
            label = f"file {target}"
        out.append(Descriptor(fd, target, label, server_side))
    return out


def leaked(
    before: dict[int, str],
    after: dict[int, str],
    foreign: Callable[[str], bool] | None = None,
) -> list[Descriptor]:
    """Descriptors open in ``after`` that were not open (as the same thing) in ``before``.

    Sockets accepted by an in-process server are left out (see the module
    documentation), and so is any descriptor whose ``readlink`` target
    ``foreign`` says belongs to such a server.
    """
    new = {
        fd: t
        for fd, t in after.items()
        if before.get(fd) != t and (foreign is None or not foreign(t))
    }
    if not new:
        return []
    named = [d for d in name(new) if not d.server_side]
    # A descriptor closed while the others were named (a server thread's socket, whose
    # table entry was gone by then) is no leak: keep those still open as they were.
    still = snapshot()
    return [d for d in named if still.get(d.fd) == d.target]


async def wait_for_no_leak(
    before: dict[int, str],
    *,
    grace: float = 0.5,
    interval: float = 0.01,
    foreign: Callable[[str], bool] | None = None,
    only: Callable[[Descriptor], bool] | None = None,
) -> list[Descriptor]:
    """The descriptors leaked since ``before``, after letting them close for ``grace`` s.

    Returns at once when nothing leaked; otherwise re-checks every ``interval``
    seconds (a thread may be closing its descriptor right now) and returns
    what is still open when the grace has passed. With ``only``, the leaks it
    keeps are the only ones counted.
    """
    deadline = time.monotonic() + grace
    while True:
        found = [d for d in leaked(before, snapshot(), foreign) if only is None or only(d)]
        if not found or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(interval)


def describe_leak(found: list[Descriptor], limit: int = 8) -> str:
    """``3 descriptors: fd 12 (TCP ...), ...`` for a failure message."""
    shown = ", ".join(f"fd {d.fd} ({d.name})" for d in found[:limit])
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return f"{len(found)} descriptor{'s' if len(found) != 1 else ''}: {shown}{more}"

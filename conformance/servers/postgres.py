"""A real PostgreSQL server on loopback for tests and benchmarks.

The binaries are Debian's (``/usr/lib/postgresql/<version>/bin``, the
``postgresql`` package that ``scripts/setup`` installs where missing), those
named by ``$CHECKPOINTKIT_POSTGRES_BINDIR``, those on ``PATH``, or, as a
fallback, the ones the PyPI package ``pgserver`` ships. Each server runs
``postgres`` on ``127.0.0.1`` and a free port, without a Unix socket, in a
temporary data directory that is removed afterwards::

    with postgres_server() as server:
        server.url        # "postgresql://checkpointkit:...@127.0.0.1:PORT/postgres"
        server.pause()    # SIGSTOP the postmaster and every backend
        server.resume()

``initdb`` takes a few seconds, so it runs once per machine and binaries: the
cluster it makes is kept as a template in the temporary folder (guarded by a
file lock, so parallel test workers share it) and each server starts on a copy
of it, which takes a fraction of a second.

``initdb`` and ``postgres`` refuse to run as root. Run as root (as in CI),
they run as the ``postgres`` account that Debian's package creates; the data
directory belongs to it.

The server requires a password over TCP (``scram-sha-256``): user
`USER`, password `PASSWORD`, database ``postgres``.
``fast=True`` (the default) turns off ``fsync``, ``synchronous_commit`` and
``full_page_writes``: the answers are the same, only a crash of the machine
could lose data. Benchmarks start it with ``fast=False`` (PostgreSQL's
defaults: every commit flushed to disk).

When no binaries are found, or the server does not start, the context manager
calls `checkpointkit.conformance.servers.unavailable` (a skip locally, a
failure where backends are required).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import free_port, listens, unavailable

if TYPE_CHECKING:
    from ...adapters.postgres import PostgresStorage
    from ..target import Target

__all__ = [
    "BINDIR_ENV",
    "PASSWORD",
    "USER",
    "PostgresServer",
    "find_postgres_bindir",
    "postgres_server",
    "postgres_server_target",
    "postgres_target",
]

BINDIR_ENV = "CHECKPOINTKIT_POSTGRES_BINDIR"
"""Environment variable naming a folder with ``initdb`` and ``postgres`` to use instead."""

USER = "checkpointkit"
"""The superuser of the test clusters."""
PASSWORD = "ck-test-pa55:w/rd@"
"""Its password (with characters that a URL must escape, so that tests cover them)."""

_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0
_READY = "database system is ready to accept connections"


def find_postgres_bindir() -> str | None:
    """Return a folder holding ``initdb`` and ``postgres``, or None.

    Looks at ``$CHECKPOINTKIT_POSTGRES_BINDIR``, then Debian's
    ``/usr/lib/postgresql/<version>/bin`` (the newest version), then ``PATH``,
    then the ``pgserver`` package's own binaries.
    """

    def usable(folder: str) -> bool:
        return all(os.access(os.path.join(folder, b), os.X_OK) for b in ("initdb", "postgres"))

    explicit = os.environ.get(BINDIR_ENV)
    if explicit:
        return explicit if usable(explicit) else None
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parent.name.split(".")],
    )
    for folder in reversed(debian):
        if usable(folder):
            return folder
    on_path = shutil.which("initdb")
    if on_path:
        folder = os.path.dirname(os.path.realpath(on_path))
        if usable(folder):
            return folder
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.origin is not None:
        folder = str(Path(spec.origin).parent / "pginstall" / "bin")
        if usable(folder):
            return folder
    return None


def _account() -> tuple[int, int] | None:
    """The (uid, gid) to run the server as: the ``postgres`` account when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        unavailable(
            "running as root, and there is no 'postgres' account to run initdb and postgres "
            "as (PostgreSQL refuses to run as root): install Debian's postgresql package "
            "(scripts/setup does) or create the account"
        )
    return entry.pw_uid, entry.pw_gid


def _run_as(account: tuple[int, int] | None) -> dict[str, Any]:
    if account is None:
        return {}
    return {"user": account[0], "group": account[1], "extra_groups": []}


def _own(path: str, account: tuple[int, int] | None) -> None:
    if account is not None:
        os.chown(path, *account)


def _template(bindir: str, account: tuple[int, int] | None) -> Path:
    """A cluster made by ``initdb`` once per binaries and account, shared by copying it."""
    tag = f"{os.path.realpath(bindir)}|{account}|{USER}|{PASSWORD}"
    import hashlib

    digest = hashlib.blake2b(tag.encode(), digest_size=6).hexdigest()
    base = Path(tempfile.gettempdir()) / f"checkpointkit-pg-template-{digest}"
    done = base / "done"
    if done.exists():
        return base / "data"
    with open(f"{base}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if done.exists():
                return base / "data"
            shutil.rmtree(base, ignore_errors=True)
            base.mkdir(mode=0o700)
            _own(str(base), account)
            pwfile = base / "pw"
            pwfile.write_text(PASSWORD + "\n")
            _own(str(pwfile), account)
            initdb = [
                os.path.join(bindir, "initdb"),
                "-D", str(base / "data"),
                "-U", USER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
                "-E", "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ]  # fmt: skip
            result = subprocess.run(
                initdb,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=120,
                cwd=str(base),
                **_run_as(account),
            )
            pwfile.unlink()
            if result.returncode != 0:
                tail = (result.stderr or result.stdout).decode(errors="replace").strip()
                shutil.rmtree(base, ignore_errors=True)
                unavailable(f"initdb failed (exit {result.returncode}): {tail[-500:]}")
            done.write_text("ok\n")
            return base / "data"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _family(pid: int) -> list[int]:
    """``pid`` and its children's pids, read from ``/proc``.

    PostgreSQL's children call ``setsid()``, so the postmaster's process group
    does not reach them: they are found by their parent.
    """
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if int(fields[1]) == pid:
            children.append(int(entry))
    return [pid, *children]


def _signal_all(pid: int, signum: int) -> None:
    """Send ``signum`` to ``pid`` (first: a stopped postmaster forks no more), then its children."""
    for member in _family(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signum)


@dataclass
class PostgresServer:
    """One ``postgres`` process on 127.0.0.1; start it with `start`.

    Attributes:
        bindir: the folder of ``postgres`` and ``initdb``.
        fast: run without ``fsync`` (see the module docstring).
        settings: more ``-c name=value`` settings.
        port: the port (chosen free by `start` when 0).
    """

    bindir: str
    fast: bool = True
    settings: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    directory: str | None = None

    @property
    def url(self) -> str:
        """``postgresql://USER:PASSWORD@127.0.0.1:PORT/postgres`` (the password escaped)."""
        from urllib.parse import quote

        return f"postgresql://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{self.port}/postgres"

    def database(self, name: str, *, icu_locale: str | None = None) -> str:
        """Create database ``name`` (once; later calls find it) and return its URL.

        Args:
            name: a plain identifier (letters, digits, ``_``).
            icu_locale: the ICU locale of its default collation (``"en-US"``: case and
                punctuation compared as people sort them, not byte by byte); None: the
                cluster's, ``C.UTF-8``. An adapter whose key column takes the database's
                default collation lists its keys out of byte order in such a database.

        Raises:
            ValueError: ``name`` or ``icu_locale`` is not a plain identifier or locale.
        """
        import asyncio

        import asyncpg

        if not name.isidentifier() or not name.isascii():
            raise ValueError(f"database name must be a plain identifier, not {name!r}")
        if icu_locale is not None and not all(c.isalnum() or c in "-_@=" for c in icu_locale):
            raise ValueError(f"icu_locale must be an ICU locale name, not {icu_locale!r}")
        create = f'CREATE DATABASE "{name}" TEMPLATE template0'
        if icu_locale is not None:
            create += f" LOCALE_PROVIDER icu ICU_LOCALE '{icu_locale}' LOCALE 'C.UTF-8'"

        async def make() -> None:
            conn = await asyncpg.connect(self.url)
            try:
                if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
                    await conn.execute(create)
            finally:
                await conn.close()

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(make())
        else:  # called from a coroutine: its loop cannot run another one
            import concurrent.futures

            with concurrent.futures.ThreadPoolExecutor(1) as worker:
                worker.submit(asyncio.run, make()).result()
        return f"{self.url.rsplit('/', 1)[0]}/{name}"

    @property
    def pid(self) -> int:
        """The postmaster's pid."""
        assert self.process is not None, "the server is not running"
        return self.process.pid

    def start(self) -> None:
        """Copy the template cluster and start ``postgres``; wait until it accepts connections.

        Raises:
            RuntimeError: the server exited (its port taken, say) or was not ready
                within 30 s; the message holds the end of its log.
        """
        account = _account()
        template = _template(self.bindir, account)
        self.directory = tempfile.mkdtemp(prefix="ckpt-pg-")
        _own(self.directory, account)
        data = os.path.join(self.directory, "data")
        subprocess.run(["cp", "-a", str(template), data], check=True)
        if not self.port:
            self.port = free_port()
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": "",
            "max_connections": "300",
            "logging_collector": "off",
            "log_min_messages": "warning",
            **({"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
               if self.fast else {}),
            **self.settings,
        }  # fmt: skip
        args = [os.path.join(self.bindir, "postgres"), "-D", data]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        log = open(os.path.join(self.directory, "server.log"), "wb")  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                args,
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # not in the test's process group (no terminal signals)
                **_run_as(account),
            )
        finally:
            log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"postgres on port {self.port} exited with code "
                    f"{self.process.returncode}: {self.log_tail()}"
                )
            if _READY in self._log() and listens(self.process.pid, self.port) is not False:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"postgres on port {self.port} was not ready within "
                    f"{_START_TIMEOUT:.0f}s: {self.log_tail()}"
                )
            time.sleep(0.02)

    def _log(self) -> str:
        if self.directory is None:
            return ""
        try:
            return Path(self.directory, "server.log").read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of the server's log, for error messages."""
        return " | ".join(self._log().strip().splitlines()[-lines:]) or "(empty log)"

    def processes(self) -> list[int]:
        """The postmaster's pid and those of its children (backends, background workers)."""
        return _family(self.pid)

    def pause(self) -> None:
        """Freeze the server: SIGSTOP to the postmaster, then to each of its children."""
        _signal_all(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Undo `pause`: SIGCONT to the postmaster and its children."""
        _signal_all(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server (fast shutdown, then kill) and remove its directory; idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            _signal_all(process.pid, signal.SIGCONT)  # a paused server cannot shut down
            process.send_signal(signal.SIGINT)  # "fast" shutdown: disconnects the clients
            try:
                process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                _signal_all(process.pid, signal.SIGKILL)
                process.wait(_STOP_TIMEOUT)
        directory, self.directory = self.directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def postgres_server(
    *, fast: bool = True, settings: dict[str, str] | None = None
) -> Iterator[PostgresServer]:
    """Run a PostgreSQL server on a free loopback port; yield it (see `PostgresServer`).

    Args:
        fast: without ``fsync`` (tests); False for PostgreSQL's durable defaults.
        settings: more server settings (``-c name=value``).
    """
    bindir = find_postgres_bindir()
    if bindir is None:
        unavailable(
            "no PostgreSQL binaries (initdb, postgres): install Debian's postgresql package "
            f"(scripts/setup does), or pgserver, or set {BINDIR_ENV}"
        )
    last: Exception | None = None
    for _ in range(3):  # another process may take the free port before postgres binds it
        server = PostgresServer(bindir, fast=fast, settings=dict(settings or {}))
        try:
            server.start()
        except RuntimeError as exc:
            server.stop()
            last = exc
            continue
        try:
            yield server
        finally:
            server.stop()
        return
    unavailable(f"postgres did not start: {last}")


# -- conformance targets -------------------------------------------------------------------


def postgres_target(
    url: str,
    *,
    name: str | None = None,
    scale: float = 1.0,
    storage_class: type[PostgresStorage] | None = None,
) -> Target:
    """A conformance target on the PostgreSQL server at ``url``.

    Each storage gets its own namespace (``prefix``): the location the suite
    asks for, or a fresh one, whose rows are deleted afterwards (directly, not
    through the suite's stall proxy). The factory accepts ``endpoint`` (the
    stall proxy) and ``ttl``. The stall-proxy tests need a loopback server
    (the proxy forwards to loopback only); against a remote server they are
    skipped.

    Args:
        url: ``postgresql://user:password@127.0.0.1:PORT/db`` (with the
            adapter's parameters, ``table=...`` say, if wanted).
        name: shown in reports (default: the URL, redacted).
        scale: see `Target`.
        storage_class: the class opened (a subclass of `PostgresStorage`; default: it).
    """
    from contextlib import asynccontextmanager
    from urllib.parse import urlsplit

    from ...adapters.postgres import PostgresStorage
    from ...storage import Capabilities
    from ...urls import redact_url
    from ..target import Target, new_location

    parts = urlsplit(url)
    upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)

    @asynccontextmanager
    async def postgres_storage(
        *,
        location: str | None = None,
        endpoint: tuple[str, int] | None = None,
        ttl: float | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[PostgresStorage]:
        prefix = _namespace(location or new_location())
        options: dict[str, Any] = {"prefix": prefix}
        if ttl is not None:
            options["ttl"] = ttl
        if timeout is not None:
            options["timeout"] = timeout
        if endpoint is not None:
            options["endpoint"] = endpoint
        try:
            async with (storage_class or PostgresStorage).from_url(url, **options) as storage:
                yield storage
        finally:
            if location is None:  # (a location may be reopened: its data stays)
                async with PostgresStorage.from_url(url, prefix=prefix) as direct:
                    await direct.delete_namespace()

    loopback = upstream[0] in ("127.0.0.1", "localhost", "::1")
    return Target(
        postgres_storage,
        name=name or f"postgres ({redact_url(url)})",
        # the factory makes expiring storages on request (ttl=...): check that too
        capabilities=Capabilities(ttl=True, settles_cancelled_writes=True, indexed_list=True),
        upstream=upstream if loopback else None,  # the stall proxy forwards to loopback only
        scale=scale,
    )


def _namespace(location: str) -> str:
    """A PostgresStorage prefix for a conformance location (at most 255 bytes)."""
    if len(location.encode()) <= 200:
        return location
    import hashlib

    return f"loc-{hashlib.blake2b(location.encode(), digest_size=12).hexdigest()}"


@contextlib.contextmanager
def postgres_server_target(**kwargs: Any) -> Iterator[Target]:
    """Start a PostgreSQL server; yield a conformance target on it."""
    with postgres_server() as server:
        yield postgres_target(server.url, **kwargs)

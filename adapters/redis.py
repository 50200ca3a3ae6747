"""The Redis adapter: ``redis://`` and ``rediss://`` on ``redis.asyncio``, standalone or Cluster.

Data model (see ``docs/adapters/redis.md``). Every key belongs to a *scope*:
its first ``scope_depth`` segments (2 by default: ``runs/<run>``), or, for a
shorter key, every segment but the last (``index/<run>`` is in scope
``index``). All Redis names of one scope share one hash tag, so they live in
one hash slot and one Lua script can touch them all on Redis Cluster::

    {ns:S}:h        hash, for every key K of S: "v:K" -> version, and either
                    "d:K" -> data (up to inline_max) or "x:K" -> 1 (a big value);
                    and NUL "live" -> the scope's registration token
    {ns:S}:x:<key>  string: the data of a big value; {ns:S}:v:<key> its version
    {ns:S}:s:<ver>  string: a big value staged by a put in flight (expires)
    {ns:S}:e        set: the names of the scope's x and v keys (to apply the TTL)
    {ns:S}:i        sorted set, all scores 0: the keys of S, for ZRANGEBYLEX
    {ns:S}:r        hash: "dead:<token>" -> 1 for retired registration tokens
    ns:top          sorted set, all scores 0: "S/" NUL token, for every registered scope

(A scope holding ``{`` or ``}`` gets the tag ``{ns:#<digest>}`` and its name
appended, so that a brace in a key can never change the slot.)

Writes are Lua scripts (``EVALSHA``), so create-only, if-match and if-match
delete are decided atomically on the server. A big value does not pass
through Lua (which would copy it twice): a plain ``SET`` stages it, pipelined
with the script that adopts it with ``RENAME``. Versions are random tokens drawn
by the client for each write: they never repeat, also after a delete and a
re-create, and a script retried after a lost reply recognizes its own write.

Listing a prefix that lies inside one scope is one ``ZRANGEBYLEX`` per page:
O(log N + returned). A prefix spanning several scopes (``runs/``, ``""``)
merges the scopes found in ``ns:top`` in key order. A scope is added to
``ns:top`` before its first key is written, and removed only by a script that
proves it empty and retires its registration token, so no stored key is ever
missing from a listing; entries of emptied or expired scopes are removed by
the listing that passes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import math
import os
import secrets
import socket
import struct
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Self, TypeVar, cast
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ..errors import (
    CheckpointkitError,
    ConfigurationError,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageUnavailable,
)
from ..storage import Capabilities, GetResult, IfMatch, ListPage, PutMode, StorageBase
from ..urls import redact_url
from ..versions import hex_token
from ._deadline import DRIFT, SLOWER, ServerClock
from ._deadline import MARGIN as _MARGIN
from ._deadline import settle as _settle
from ._release import unbroken
from ._timeouts import SharedTimeout

try:
    import redis as _redis_package
    from redis import exceptions as rexc
    from redis._parsers import AsyncCommandsParser
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.connection import Connection, SSLConnection
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialWithJitterBackoff
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        f"the redis adapter needs the 'redis' package ({_exc}); "
        'install it with: pip install "checkpointkit[redis]"'
    ) from _exc

if TYPE_CHECKING:
    RedisClient = Redis | RedisCluster

T = TypeVar("T")

__all__ = ["RedisStorage"]

VERSION_BYTES = 12
"""Random bytes of a version (written as twice as many hex digits)."""

DEAD_TOKEN_MS = 24 * 3600 * 1000
"""How long a retired registration token is remembered (see the module docstring)."""

INLINE_MAX = 128 * 1024
"""Values up to this size are passed through the put script and stored in the scope's
hash; bigger ones are staged in a key of their own with a plain SET (no copy through Lua)."""

STAGED_MS = 60_000
"""A staged value that no script adopted (the writer died) expires after this long."""

CANCEL_GRACE = 0.25
"""Default ``cancel_grace``: seconds within which a cancelled write raises CancelledError,
having made sure that it can no longer land (see "Settling cancelled writes" in the docs)."""

DELETE_CHUNK = 500
"""Keys per delete_many script (each a few Lua stack slots; Lua's limit is about 8,000)."""

DELETE_WAVE = 4
"""Scripts per delete_many round trip. Each script carries a deadline taken when it is
queued, so a round trip must be encoded, sent and run within ``cancel_grace``: sent in one
pipeline, the 132 scripts of 65,535 keys on a cluster ran past their deadline 8 times
over (the cluster client checks the slot of every key name in Python)."""

_EXPIRED = 5
"""What a write script returns when it ran after its deadline (and did nothing)."""
_ATTEMPTS = 8
"""Round trips of one write: scope registration, a re-stage, a deadline passed."""
_RESTAGE_MIN = 16 * 1024
"""An inline value at least this big whose script arrived late is staged (SET) before
its next attempt, so that the script itself is small and quick to arrive."""


class _Names(NamedTuple):
    """The Redis names of one scope (one hash slot)."""

    h: bytes  # hash: v:<key> version, d:<key> inline data, x:<key> external data, NUL live
    i: bytes  # sorted set: the scope's keys
    r: bytes  # hash: retired registration tokens (dead:<token>)
    e: bytes  # set: the names of the scope's big-value keys (for the TTL)
    x: bytes  # prefix of big-value keys: x + key
    s: bytes  # prefix of staged big values: s + version
    v: bytes  # prefix of big-value version keys: v + key


_FENCE = """
local now = redis.call('TIME')
if tonumber(now[1]) * 1000000 + tonumber(now[2]) > tonumber(ARGV[%d]) then
  return {5, '', now[1], now[2]}
end
"""
"""The first lines of every write script: past its deadline (server µs, ARGV[n]) it does
nothing and returns {5}; else it runs, and returns the server's TIME with its result."""

_EXPIRE_SCOPE = """
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  if redis.call('PEXPIRE', KEYS[4], ttl) == 1 then
    for _, name in ipairs(redis.call('SMEMBERS', KEYS[4])) do
      redis.call('PEXPIRE', name, ttl)
    end
  end
"""
"""Lua lines that give the scope's hash, index and big-value keys (KEYS[1], KEYS[2], KEYS[4]
and its members) the expiry ``ttl`` (ms): in put, delete and delete_many when ``ttl > 0``."""

_PUT = (
    _FENCE % 10
    + """
local key = ARGV[1]
local vf, df, xf = 'v:' .. key, 'd:' .. key, 'x:' .. key
local ext = ARGV[9] == '1'
local ttl = tonumber(ARGV[6])
local got = redis.call('HMGET', KEYS[1], vf, xf, '\\0live')
local cur, big, live = got[1], got[2], got[3]
if cur == ARGV[5] then
  if ext then redis.call('DEL', KEYS[5]) end
  return {1, live or '', now[1], now[2]}
end
local mode = ARGV[3]
if (mode == 'c' and cur) or (mode == 'm' and ((not cur) or cur ~= ARGV[4])) then
  if ext then redis.call('DEL', KEYS[5]) end
  return {0, cur or '', now[1], now[2]}
end
if ext and redis.call('EXISTS', KEYS[5]) == 0 then return {4, '', now[1], now[2]} end
local fields = {vf, ARGV[5]}
if not live then
  local token = ARGV[7]
  if token == '' then return {2, '', now[1], now[2]} end
  if redis.call('HEXISTS', KEYS[3], 'dead:' .. token) == 1 then return {3, '', now[1], now[2]} end
  live = token
  fields[#fields + 1] = '\\0live'
  fields[#fields + 1] = token
end
if ext then
  redis.call('RENAME', KEYS[5], KEYS[6])
  if ttl == 0 then
    redis.call('PERSIST', KEYS[6])
    redis.call('SET', KEYS[7], ARGV[5])
  else
    redis.call('SET', KEYS[7], ARGV[5], 'PX', ttl)
  end
  fields[#fields + 1] = xf
  fields[#fields + 1] = '1'
  redis.call('HSET', KEYS[1], unpack(fields))
  if not big then
    if cur then redis.call('HDEL', KEYS[1], df) end
    redis.call('SADD', KEYS[4], KEYS[6], KEYS[7])
  end
else
  fields[#fields + 1] = df
  fields[#fields + 1] = ARGV[2]
  redis.call('HSET', KEYS[1], unpack(fields))
  if big then
    redis.call('DEL', KEYS[6], KEYS[7])
    redis.call('SREM', KEYS[4], KEYS[6], KEYS[7])
    redis.call('HDEL', KEYS[1], xf)
  end
end
if not cur then redis.call('ZADD', KEYS[2], 0, key) end
if ttl > 0 then
"""
    + _EXPIRE_SCOPE
    + """
end
return {1, live, now[1], now[2]}
"""
)
"""KEYS: h, i, r, e, s (where this write staged a big value), x (the key's big-value
key), xv (the version of the key's big value, beside it, so that one MGET reads both).
ARGV: key, data ('' when staged), mode (o|c|m), expected version, new version,
ttl ms (0: none), registration token ('' if none yet), dead-token ms, staged ('1': the
data was put in s by a SET sent before; it is renamed to x, which replaces the previous
big value at once), deadline (server µs, see _FENCE).
Returns {1, live token} written, {0, current} precondition failed,
{2} scope not registered, {3} registration token retired: draw another,
{4} the staged data is gone (expired): stage it again, {5} past the deadline: nothing
done; each followed by the server's TIME (seconds, µs).
The scope's live registration token is the field NUL "live" of its hash (no
key holds NUL), so it expires with the scope's data and index."""

_DELETE = (
    _FENCE % 5
    + r"""
local key = ARGV[1]
local vf, xf = 'v:' .. key, 'x:' .. key
local got = redis.call('HMGET', KEYS[1], vf, xf, '\0live')
local cur, big, live = got[1], got[2], got[3]
if not cur then return {0, '', now[1], now[2]} end
if ARGV[2] ~= '' and cur ~= ARGV[2] then return {-1, cur, now[1], now[2]} end
if big then
  redis.call('DEL', KEYS[5], KEYS[6])
  redis.call('SREM', KEYS[4], KEYS[5], KEYS[6])
end
redis.call('HDEL', KEYS[1], vf, 'd:' .. key, xf)
redis.call('ZREM', KEYS[2], key)
if redis.call('EXISTS', KEYS[2]) == 0 then
  if live then
    redis.call('HDEL', KEYS[1], '\0live')
    redis.call('HSET', KEYS[3], 'dead:' .. live, '1')
    redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[4]))
    return {1, live, now[1], now[2]}
  end
  return {1, '', now[1], now[2]}
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
"""
    + _EXPIRE_SCOPE
    + r"""
end
return {1, '', now[1], now[2]}
"""
)
"""KEYS: h, i, r, e, x, xv. ARGV: key, if-match version ('' if none), ttl ms,
dead-token ms, deadline (server µs).
Returns {0} missing, {-1, current} version mismatch, {1, retired token or ''},
{5} past the deadline: nothing done; each followed by the server's TIME."""

_DELETE_MANY = (
    _FENCE % 1
    + r"""
local n = #ARGV - 3
local vf, xf = {}, {}
for j = 1, n do
  vf[j] = 'v:' .. ARGV[j + 3]
  xf[j] = 'x:' .. ARGV[j + 3]
end
local cur = redis.call('HMGET', KEYS[1], unpack(vf))
local big = redis.call('HMGET', KEYS[1], unpack(xf))
local gone, fields, names = {}, {}, {}
for j = 1, n do
  if cur[j] then
    local key = ARGV[j + 3]
    gone[#gone + 1] = key
    fields[#fields + 1] = vf[j]
    fields[#fields + 1] = 'd:' .. key
    fields[#fields + 1] = xf[j]
    if big[j] then
      names[#names + 1] = KEYS[3 + 2 * j]
      names[#names + 1] = KEYS[4 + 2 * j]
    end
  end
end
if #gone > 0 then
  redis.call('HDEL', KEYS[1], unpack(fields))
  redis.call('ZREM', KEYS[2], unpack(gone))
  if #names > 0 then
    redis.call('DEL', unpack(names))
    redis.call('SREM', KEYS[4], unpack(names))
  end
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local live = redis.call('HGET', KEYS[1], '\0live')
  if live then
    redis.call('HDEL', KEYS[1], '\0live')
    redis.call('HSET', KEYS[3], 'dead:' .. live, '1')
    redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[3]))
    return {1, live, now[1], now[2], #gone}
  end
  return {1, '', now[1], now[2], #gone}
end
local ttl = tonumber(ARGV[2])
if ttl > 0 and #gone > 0 then
"""
    + _EXPIRE_SCOPE
    + r"""
end
return {1, '', now[1], now[2], #gone}
"""
)
"""Deletes up to DELETE_CHUNK keys of one scope. KEYS: h, i, r, e, then for each key its
x and xv names. ARGV: deadline (server µs), ttl ms, dead-token ms, the keys.
Returns {1, retired token or '', TIME (2 items), how many existed}, or {5, '', TIME}
past the deadline."""

_READ = """
local got = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if not got[1] then return {} end
if got[2] then return {got[1], got[2]} end
local data = got[3] and redis.call('GET', KEYS[2])
if data then return {got[1], data} end
return {got[1]}
"""
"""KEYS: h, x. ARGV: the fields v:K, d:K, x:K. Returns {} (missing), {version, data},
or {version} (a big value whose data key is gone). Used only when writers keep
replacing a value between a reader's two round trips."""

_RETIRE = r"""
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, ''} end
redis.call('HSET', KEYS[3], 'dead:' .. ARGV[1], '1')
local live = redis.call('HGET', KEYS[2], '\0live')
if live then
  redis.call('HDEL', KEYS[2], '\0live')
  redis.call('HSET', KEYS[3], 'dead:' .. live, '1')
end
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[2]))
return {1, live or ''}
"""
"""KEYS: i, h, r. ARGV: token, dead-token ms. Retires ``token`` if the scope is
empty, so that its ``ns:top`` entry may be removed. Returns {0} not empty,
{1, also-retired live token or ''}."""

_URL_PARAMS = (
    "cancel_grace",
    "client_name",
    "cluster",
    "connect_timeout",
    "inline_max",
    "max_connections",
    "prefix",
    "retries",
    "scope_depth",
    "ssl_ca_certs",
    "ssl_cert_reqs",
    "ssl_check_hostname",
    "timeout",
    "ttl",
)
_OPTIONS = frozenset(
    (
        *_URL_PARAMS,
        "address_remap",
        "hash_tag",
        "close_client",
        "db",
        "endpoint",
        "host",
        "password",
        "port",
        "ssl",
        "username",
    )
)
_TRUE = frozenset(("1", "true", "yes", "on"))
_FALSE = frozenset(("0", "false", "no", "off"))
_NAME_CACHE_SIZE = 4096


def _abort(writer: asyncio.StreamWriter | None) -> None:
    """Close a connection at once, discarding unsent bytes (a reset, not a graceful close)."""
    if writer is None:
        return
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:  # linger 0: the kernel drops its send queue and resets the connection
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:  # pragma: no cover - already closed
            pass
    transport.abort()


class _Write:
    """The requests of one write operation in flight (the context variable ``_WRITE``).

    The write *arms* it before it sends a script, with the local time after
    which the server has surely passed the script's deadline; a connection
    marks it ``sent`` when it starts writing the request (not the connection's
    handshake). Once the reply is read the write calls `answered`.
    """

    __slots__ = ("armed", "sent", "settle", "sha", "tracked")

    def __init__(self, tracked: bool) -> None:
        self.tracked = tracked  # the storage's own connections report what they send
        self.armed = False
        self.sent = False
        self.settle = 0.0
        self.sha = b""  # the SHA1 of the write's script, as the request carries it

    def carried_by(self, command: Any) -> bool:
        """Whether the packed ``command`` (bytes, or a list of chunks) is the write's own
        request: it carries the script's SHA1 (not a topology load or a ``SCRIPT LOAD``
        sent meanwhile). The SHA1 is packed with the other small arguments; a chunk of its
        own is a large argument (a value), never searched."""
        sha = self.sha
        if not sha:
            return True  # unknown: count it as sent
        if isinstance(command, bytes | bytearray):
            return sha in command
        return any(len(chunk) <= _SMALL_CHUNK and sha in chunk for chunk in command)

    def arm(self, settle: float) -> None:
        self.armed = True
        self.settle = settle
        if not self.tracked:  # a client passed in: assume the request left at once
            self.sent = True

    def answered(self) -> None:
        self.armed = self.sent = False


_SMALL_CHUNK = 16 * 1024
"""redis-py packs arguments up to 6,000 bytes together; longer ones go in chunks of their own."""

_WRITE: ContextVar[_Write | None] = ContextVar("checkpointkit_redis_write", default=None)
"""The write operation of the current task, if any (pipelines' child tasks share it)."""


async def _load_then(client: Redis | RedisCluster, source: str) -> None:
    """``SCRIPT LOAD`` of ``source`` (on every primary of a cluster), after the server
    answered the write in flight that its script is not loaded: the script did not run,
    and what the load sends is not the write's request, so the write is disarmed while
    it loads (an error of the load is "not sent"), then armed again for its script."""
    write = _WRITE.get()
    if write is None:
        await client.script_load(source)
        return
    settle = write.settle
    write.answered()
    await client.script_load(source)
    write.arm(settle)


class _ResendsNoWrite(Retry):
    """redis-py's `Retry`, except for a write script whose request has started to leave.

    redis-py sends a command again on a new connection after a connection error or a
    timeout. For a write script that had reached the server and run, the repeat answers
    for the write's own effect: a delete finds nothing and answers ``False``, and an
    overwrite lands a second time, after another client's write. So once the request of
    the write in flight (`_WRITE`) has started to leave, its error is raised, not retried
    (`call_with_retry`: the standalone client), and the cluster client's own loop gets no
    retry for the write's command (`get_retries`: `RedisStorage._write` retries one whose
    request never left); the write then raises ``OutcomeUnknown``. Every other command,
    and a write's command that failed before its request left, is retried as before.
    """

    async def call_with_retry(
        self,
        do: Callable[[], Awaitable[T]],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        def retryable(error: Exception) -> bool:
            write = _WRITE.get()
            if write is not None and write.sent:
                return False
            return is_retryable is None or is_retryable(error)

        return await super().call_with_retry(do, fail, retryable, with_failure_count)

    def get_retries(self) -> int:
        write = _WRITE.get()
        return 0 if write is not None and write.armed else super().get_retries()


class _AbortingConnection(Connection):
    """A connection that, when dropped on an error or a cancellation, resets instead of flushing.

    redis-py drops a connection with ``disconnect(nowait=True)`` when a
    command fails or is cancelled mid-way. Its graceful close would still
    send the rest of a cancelled request, so a cancelled put could land after
    ``CancelledError``; a reset discards it (a partial command never runs).

    It also tells the write operation in flight (`_WRITE`) when it starts
    sending that operation's request, so that a connection error before that
    is "could not connect", and one after it "outcome unknown".
    """

    _handshake = False

    async def disconnect(self, nowait: bool = False, *args: Any, **kwargs: Any) -> None:
        if nowait:
            _abort(self._writer)
        await super().disconnect(nowait, *args, **kwargs)

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        self._handshake = True  # HELLO, AUTH, SELECT...: not the write's request
        try:
            await super().connect_check_health(*args, **kwargs)
        finally:
            self._handshake = False

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        reader, writer = self._reader, self._writer
        if (writer is not None and writer.transport.is_closing()) or (
            reader is not None and reader.at_eof()
        ):
            # the server closed or reset it while it sat in the pool: a new connection,
            # before anything is sent (a write sent on it could only be OutcomeUnknown)
            await self.disconnect(nowait=True)
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        write = _WRITE.get()
        if write is not None and write.armed and not self._handshake and write.carried_by(command):
            write.sent = True
        await super().send_packed_command(command, check_health)


class _AbortingSSLConnection(_AbortingConnection, SSLConnection):
    """`_AbortingConnection` for TLS."""


def _use_aborting_connections(client: Redis | RedisCluster, ssl: bool) -> None:
    kind: type[Connection] = _AbortingSSLConnection if ssl else _AbortingConnection
    if isinstance(client, Redis):
        client.connection_pool.connection_class = kind
        return
    # RedisCluster has no option for it: its nodes take the class from these kwargs
    client.connection_kwargs["connection_class"] = kind
    client.nodes_manager.connection_kwargs["connection_class"] = kind
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = kind


_COMMAND_TABLES: dict[str, dict[str, Any]] = {}
"""The command table (the parsed reply to ``COMMAND``) of each cluster node a storage of
the process loaded it from, by the node's ``host:port``."""

_COMMAND_TABLES_MAX = 64
"""Nodes whose command table is kept; past that the cache starts again."""


class _SharedCommandTable(AsyncCommandsParser):
    """redis-py's cluster client loads the server's command table (where each command's
    keys are) whenever it loads the topology: a ``COMMAND`` reply of some 12,000 RESP
    values, which it parses one coroutine per value. That took about 35 ms of CPU on
    every fresh cluster storage's first call and after every topology reload (each
    outage), 150 to 300 ms where coroutine origins are tracked (the conformance suite's
    hygiene checks). A load with the topology takes the table another client of the
    process loaded from the same node; the reload that redis-py makes when a command is
    not in the table (a server upgraded since) asks the server, and keeps its answer for
    the next clients."""

    __slots__ = ()

    async def initialize(self, node: Any = None) -> None:
        """Load the command table of ``node`` (given with the topology), or reload the one
        of the node of the last load (no ``node``: a command was not in the table)."""
        if node is not None:
            self.node = node
        name = str(getattr(self.node, "name", ""))
        table = _COMMAND_TABLES.get(name) if node is not None else None
        if table is not None:
            self.commands = table
            return
        await super().initialize()
        if len(_COMMAND_TABLES) >= _COMMAND_TABLES_MAX:
            _COMMAND_TABLES.clear()
        _COMMAND_TABLES[name] = self.commands


class RedisStorage(StorageBase):
    """A storage on Redis or Valkey, standalone or Cluster, through ``redis.asyncio``.

    Open it with `from_url` (``redis://[user:password@]host:port/db?prefix=wf``)
    or construct it with an existing client or a host and port. Use it with
    ``async with``.

    Args:
        client: an existing ``redis.asyncio.Redis`` or ``RedisCluster``
            (created with ``decode_responses=False``). It is not closed by
            `aclose` unless ``close_client=True``. When None, the storage
            creates and owns its client from the connection arguments.
        host: server host (the first node for a cluster).
        port: server port.
        db: database number (0 on a cluster).
        username: ACL user name, if any.
        password: password, if any. Never printed: not in ``repr``, not in errors.
        ssl: connect with TLS (``rediss://``).
        ssl_ca_certs: a CA bundle file for TLS.
        ssl_cert_reqs: ``"required"`` (default), ``"optional"`` or ``"none"``.
        ssl_check_hostname: check the server's certificate name (default True).
        cluster: use ``RedisCluster`` (Redis Cluster, ``?cluster=true``).
        prefix: the namespace of every Redis name this storage writes
            (letters, digits, ``_.-``; default ``ckpt``).
        ttl: expire each scope (each run) this many seconds after its last
            write; every write refreshes it. None keeps data forever.
        timeout: the deadline, in seconds, of one storage operation including
            its retries; also the socket read timeout. Default 10.
        connect_timeout: the deadline of one TCP connect (default:
            ``min(timeout, 5)``).
        retries: how many times a command is retried, with exponential
            backoff and jitter, after a connection error or a socket timeout;
            a write's command only if its request had not started to leave
            (a write is never sent twice: it raises ``OutcomeUnknown``).
        scope_depth: how many leading key segments form a scope, i.e. share
            a hash slot (default 2: ``runs/<run>``). Use 3 when every key has a
            one-segment namespace before ``runs/``.
        inline_max: values up to this many bytes are stored inline in the
            scope's hash; bigger ones in a key of their own, written with a
            plain ``SET`` in the same round trip (default 128 KiB).
        hash_tag: put every name of this storage in the hash slot of this tag
            (one node of a cluster). Listing and TTL work as usual, but the
            data is no longer spread over the cluster: meant for tests that
            must pin a storage to one node, such as the stall-proxy tests.
        max_connections: the client's connection pool size.
        client_name: ``CLIENT SETNAME`` for the connections.
        address_remap: for a cluster, a function mapping a node's announced
            ``(host, port)`` to the one to connect to (a proxy, a tunnel).
        cancel_grace: seconds (0.01 to 60, default 0.25) within which a
            cancelled put or delete raises ``CancelledError``, having waited
            until the server's clock has passed the deadline its script
            carries, so that it can never land later (see "Settling cancelled
            writes" in ``docs/adapters/redis.md``). It is also the longest a
            write's script may take to reach the server before it must be sent
            again.
        close_client: close a passed ``client`` in `aclose`.

    Raises:
        ConfigurationError: a bad option, or a client with ``decode_responses=True``.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(ttl=False, settles_cancelled_writes=True)
    page_size: ClassVar[int] = 1000
    scan_width: ClassVar[int] = 64
    """Scopes merged per page when a listing's prefix spans several scopes."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if cls is RedisStorage and kwargs.get("ttl"):
            return cast(Self, object.__new__(_RedisStorageWithTTL))
        return object.__new__(cls)

    def __init__(
        self,
        client: Redis | RedisCluster | None = None,
        *,
        host: str = "localhost",
        port: int = 6379,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        ssl: bool = False,
        ssl_ca_certs: str | None = None,
        ssl_cert_reqs: str = "required",
        ssl_check_hostname: bool = True,
        cluster: bool = False,
        prefix: str = "ckpt",
        ttl: float | None = None,
        timeout: float = 10.0,
        connect_timeout: float | None = None,
        retries: int = 3,
        scope_depth: int = 2,
        inline_max: int = INLINE_MAX,
        hash_tag: str | None = None,
        max_connections: int | None = None,
        client_name: str | None = None,
        address_remap: Callable[[tuple[str, int]], tuple[str, int]] | None = None,
        close_client: bool | None = None,
        cancel_grace: float = CANCEL_GRACE,
    ) -> None:
        self._closed = False
        if (
            isinstance(cancel_grace, bool)
            or not isinstance(cancel_grace, int | float)
            or not 0.01 <= cancel_grace <= 60
        ):
            raise ConfigurationError(
                "redis option cancel_grace must be a number of seconds from 0.01 to 60, "
                f"not {cancel_grace!r}"
            )
        self.cancel_grace = float(cancel_grace)
        """Seconds within which a cancelled write settles and raises CancelledError."""
        # a server's clock estimate is refreshed when its drift allowance reaches grace/8
        self._refresh = self.cancel_grace / (16 * DRIFT)
        # a script's window, before the clock estimate's width is taken off (_script_deadline)
        self._window = (self.cancel_grace - _MARGIN) * (1 - DRIFT)
        self._window_min = self.cancel_grace / 4
        self._clocks: dict[str, ServerClock] = {}
        _check_prefix(prefix)
        self._ns = prefix
        if hash_tag is not None and (
            not isinstance(hash_tag, str)
            or not hash_tag
            or "{" in hash_tag
            or "}" in hash_tag
            or not hash_tag.isprintable()
        ):
            raise ConfigurationError(
                f"redis option hash_tag must be a non-empty str without braces, not {hash_tag!r}"
            )
        self._tag = hash_tag
        self._top = (f"{{{hash_tag}}}:" if hash_tag else "").encode() + f"{prefix}:top".encode()
        self._ttl_ms = _ttl_ms(ttl)
        self.ttl = ttl
        self._timeout = _positive("timeout", timeout)
        self._timeouts = SharedTimeout(self._timeout)
        self._connect_timeout = (
            min(self._timeout, 5.0)
            if connect_timeout is None
            else _positive("connect_timeout", connect_timeout)
        )
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ConfigurationError(f"redis option retries must be an int >= 0, not {retries!r}")
        if not isinstance(scope_depth, int) or isinstance(scope_depth, bool) or scope_depth < 1:
            raise ConfigurationError(
                f"redis option scope_depth must be an int >= 1, not {scope_depth!r}"
            )
        self._depth = scope_depth
        if not isinstance(inline_max, int) or isinstance(inline_max, bool) or inline_max < 0:
            raise ConfigurationError(
                f"redis option inline_max must be an int >= 0, not {inline_max!r}"
            )
        self._inline_max = inline_max
        self._names_cache: dict[str, _Names] = {}
        self._big: dict[str, None] = {}  # keys last seen holding a big value
        self._sha: dict[str, str] = {}
        if max_connections is not None and (
            not isinstance(max_connections, int)
            or isinstance(max_connections, bool)
            or max_connections < 1
        ):
            raise ConfigurationError(
                f"redis option max_connections must be an int >= 1, not {max_connections!r}"
            )
        # one connection per node per operation: operations beyond the pool's size wait
        # here instead of failing with "Too many connections"
        self._slots = _Slots(self, max_connections or _pool_size(client))
        self._client_closed = False
        self._retries = retries
        self._backoff = ExponentialWithJitterBackoff(base=0.05, cap=1.0)
        if client is not None:
            if not isinstance(client, Redis | RedisCluster):
                raise ConfigurationError(
                    "client must be a redis.asyncio.Redis or RedisCluster, "
                    f"not {type(client).__name__}"
                )
            if client.get_encoder().decode_responses:
                raise ConfigurationError(
                    "the redis client must be created with decode_responses=False "
                    "(the storage stores bytes)"
                )
            self._client: Redis | RedisCluster = client
            self.cluster = isinstance(client, RedisCluster)
            self._owns_client = bool(close_client)
            self._where = f"redis client {type(client).__name__}"
            self._secret = None
            self._tracked = False  # its connections do not report what they send
            return
        if not isinstance(host, str) or not host:
            raise ConfigurationError(f"redis host must be a non-empty str, not {host!r}")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ConfigurationError(f"redis port must be an int in 1..65535, not {port!r}")
        if not isinstance(db, int) or isinstance(db, bool) or db < 0:
            raise ConfigurationError(f"redis db must be an int >= 0, not {db!r}")
        if cluster and db:
            raise ConfigurationError(f"redis cluster has only db 0, not db {db}")
        if ssl_cert_reqs not in ("required", "optional", "none"):
            raise ConfigurationError(
                f"redis option ssl_cert_reqs must be required, optional or none, "
                f"not {ssl_cert_reqs!r}"
            )
        self.cluster = bool(cluster)
        self._owns_client = True if close_client is None else bool(close_client)
        self._secret = password or None
        scheme = "rediss" if ssl else "redis"
        user = quote(username, safe="") if username else ""
        auth = f"{user}:***@" if password else (f"{user}@" if user else "")
        self._where = f"{scheme}://{auth}{host}:{port}/{db}"
        retry = _ResendsNoWrite(self._backoff, retries)
        common: dict[str, Any] = {
            "username": username,
            "password": password,
            # no per-command socket timeout: the deadline of each operation (asyncio.timeout)
            # bounds it, and redis-py would run every send in a task of its own (wait_for)
            "socket_timeout": None,
            "socket_connect_timeout": self._connect_timeout,
            "retry": retry,
            "decode_responses": False,
            "client_name": client_name,
        }
        if ssl:
            common.update(
                ssl=True,
                ssl_ca_certs=ssl_ca_certs,
                ssl_cert_reqs=ssl_cert_reqs,
                ssl_check_hostname=ssl_check_hostname,
            )
        if self.cluster:
            self._client = RedisCluster(
                host=host,
                port=port,
                max_connections=max_connections or 100,
                address_remap=address_remap,
                # follow MOVED replies slot by slot instead of resetting every connection
                reinitialize_steps=0,
                **common,
            )
            self._client.commands_parser = _SharedCommandTable()
        else:
            if address_remap is not None:
                raise ConfigurationError("redis option address_remap needs cluster=True")
            self._client = Redis(host=host, port=port, db=db,
                                 max_connections=max_connections or 100, **common)  # fmt: skip
        _use_aborting_connections(self._client, ssl)
        self._tracked = True

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStorage:
        """Open ``redis://[user:password@]host[:port][/db][?param=value&...]``.

        ``rediss://`` connects with TLS. Parameters: ``prefix``, ``ttl``
        (seconds), ``timeout``, ``connect_timeout``, ``cancel_grace`` (seconds), ``retries``,
        ``cluster`` (true/false), ``scope_depth``, ``inline_max``, ``max_connections``,
        ``client_name``, ``ssl_ca_certs``, ``ssl_cert_reqs``,
        ``ssl_check_hostname``. Keyword ``options`` take the constructor's
        arguments and override the URL; ``endpoint="host:port"`` replaces the
        URL's host and port (to put a proxy between the client and the server).

        Raises:
            ConfigurationError: not a redis URL, a bad port or db, an unknown or
                malformed parameter or option. The message never holds the password.
        """
        if not isinstance(url, str):
            raise ConfigurationError(f"a redis URL must be a str, not {type(url).__name__}")
        shown = redact_url(url)
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"unknown redis option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(_OPTIONS))}"
            )
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ConfigurationError(f"bad redis URL {shown!r}: {exc}") from None
        if parts.scheme.lower() not in ("redis", "rediss"):
            raise ConfigurationError(f"not a redis URL: {shown!r} (use redis:// or rediss://)")
        kwargs: dict[str, Any] = {
            "host": parts.hostname or "localhost",
            "port": port or 6379,
            "ssl": parts.scheme.lower() == "rediss",
        }
        if parts.username:
            kwargs["username"] = unquote(parts.username)
        if parts.password:
            kwargs["password"] = unquote(parts.password)
        path = parts.path.strip("/")
        if path:
            if not path.isdigit():
                raise ConfigurationError(
                    f"redis URL {shown!r}: the path must be a database number, not {path!r}"
                )
            kwargs["db"] = int(path)
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            kwargs[name] = _parse_param(shown, name, value)
        endpoint = options.pop("endpoint", None)
        kwargs.update(options)
        if endpoint is not None:
            kwargs["host"], kwargs["port"] = _parse_endpoint(endpoint)
        return cls(**kwargs)

    def __repr__(self) -> str:
        ttl = f", ttl={self.ttl}" if self.ttl else ""
        kind = ", cluster=True" if self.cluster else ""
        return f"RedisStorage({self._where!r}, prefix={self._ns!r}{kind}{ttl})"

    @property
    def client(self) -> Redis | RedisCluster:
        """The underlying ``redis.asyncio`` client (for diagnostics; do not close it)."""
        return self._client

    # -- names -------------------------------------------------------------------------
    def _scope(self, key: str) -> str:
        depth = self._depth
        end = -1
        for _ in range(depth):
            nxt = key.find("/", end + 1)
            if nxt < 0:
                break
            end = nxt
        return key[:end] if end >= 0 else ""

    def _names(self, scope: str) -> _Names:
        """The Redis names of ``scope``, all in one hash slot."""
        names = self._names_cache.get(scope)
        if names is None:
            if self._tag is not None:
                base, suffix = f"{{{self._tag}}}:{self._ns}:", f":{scope}"
            elif "{" in scope or "}" in scope:
                digest = hashlib.blake2b(scope.encode(), digest_size=10).hexdigest()
                base = f"{{{self._ns}:#{digest}}}:"
                suffix = f":{scope}"
            else:
                base, suffix = f"{{{self._ns}:{scope}}}:", ""
            names = _Names(
                f"{base}h{suffix}".encode(),
                f"{base}i{suffix}".encode(),
                f"{base}r{suffix}".encode(),
                f"{base}e{suffix}".encode(),
                f"{base}x:".encode(),
                f"{base}s:".encode(),
                f"{base}v:".encode(),
            )
            if len(self._names_cache) >= _NAME_CACHE_SIZE:
                self._names_cache.clear()
            self._names_cache[scope] = names
        return names

    def _remember_big(self, key: str, big: bool) -> None:
        """Note which keys hold big values, so that a get reads them in one round trip."""
        if big:
            if len(self._big) >= _NAME_CACHE_SIZE:
                self._big.clear()
            self._big[key] = None
        else:
            self._big.pop(key, None)

    @staticmethod
    def _member(scope: str, token: str) -> bytes:
        return f"{scope}/\x00{token}".encode()

    async def _cluster_ready(self) -> None:
        """Load the cluster's topology before the first command (and after a reset).

        redis-py sends a command issued before its topology is known to a
        default node instead of the key's node; many such commands at once
        end in a storm of MOVED replies, and then a reset that disconnects
        every connection, also those of commands in flight.
        """
        client = cast(RedisCluster, self._client)
        if client.get_default_node() is None:
            await client.initialize()

    # -- scripts -----------------------------------------------------------------------
    async def _script(self, source: str, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        sha = self._sha.get(source)
        if sha is None:
            sha = self._sha[source] = hashlib.sha1(source.encode()).hexdigest()
        write = _WRITE.get()
        if write is not None:
            write.sha = sha.encode()
        try:
            return await self._client.evalsha(sha, len(keys), *keys, *args)
        except rexc.NoScriptError:
            # a restarted or new node: load the script (on every primary of a cluster)
            await _load_then(self._client, source)
            return await self._client.evalsha(sha, len(keys), *keys, *args)

    # -- the server's clock: deadlines of write scripts ---------------------------------
    async def _clock(self, name: bytes) -> ServerClock:
        """The clock estimate of the server (the node, on a cluster) that holds ``name``.

        Measured with ``TIME`` when unknown or when its drift allowance has
        grown past ``cancel_grace / 8`` (an idle storage); otherwise every
        write's reply keeps it fresh.
        """
        node = None
        ident = ""
        if self.cluster:
            node = cast(RedisCluster, self._client).get_node_from_key(name)  # type: ignore[arg-type]
            ident = node.name if node is not None else ""
        clock = self._clocks.get(ident)
        if clock is None:
            clock = self._clocks[ident] = ServerClock()
        loop = asyncio.get_running_loop()
        if loop.time() - clock.at > self._refresh:
            for _ in range(3):  # the narrowest of three round trips
                sent = loop.time()
                if node is None:
                    sec, usec = await self._client.time()
                else:
                    sec, usec = await self._client.execute_command("TIME", target_nodes=node)
                clock.add(int(sec) + int(usec) * 1e-6, sent, loop.time())
        return clock

    def _script_deadline(self, clock: ServerClock) -> tuple[int, float]:
        """A deadline for a script about to be sent to ``clock``'s server, and when to settle.

        Returns the deadline in the server's microseconds, and the local time
        (``loop.time()``) after which every server this storage knows has
        surely passed it: a cancelled write waits until then. The script gets
        as long as possible (``window``) while that wait stays within
        ``cancel_grace`` of now; the wait grows beyond it only when the clock
        estimate is wider than three quarters of the grace (a very slow link).
        """
        now = asyncio.get_running_loop().time()
        deadline, settle = clock.deadline(now, self._window, self._window_min)
        if len(self._clocks) > 1:
            # the script may be redirected (MOVED) to another node: wait for every known clock
            for other in self._clocks.values():
                if other is not clock and other.lo > -math.inf:
                    until = (deadline - other.lo - DRIFT * other.at) * SLOWER
                    if until > settle:
                        settle = until
        return math.ceil(deadline * 1e6), settle + _MARGIN

    async def _settle_on_error(self, write: _Write, exc: BaseException) -> None:
        """After ``exc`` (a cancellation, a lost connection...), wait out what ``write`` sent.

        Raises CancelledError if a cancellation arrived during the wait and
        ``exc`` is not one already.
        """
        if (
            write.sent
            and await _settle(write.settle)
            and not isinstance(exc, asyncio.CancelledError)
        ):
            raise asyncio.CancelledError() from exc

    # -- the protocol ------------------------------------------------------------------
    def _may_match(self, version: str) -> bool:
        return hex_token(version, 2 * VERSION_BYTES)  # a random token, in hex

    async def _put(self, key: str, data: bytes, mode: PutMode) -> str:
        return await self._write("put", key, lambda w: self._put_attempts(key, data, mode, w))

    async def _write(self, op: str, what: str, attempts: Callable[[_Write], Awaitable[T]]) -> T:
        """Run one write (``attempts``) in its frame: the write's record, error
        translation, the deadline, a client slot, and settling on any error."""
        write = _Write(self._tracked)
        reset = _WRITE.set(write)
        try:
            with _translate_errors(op, what, self._where, self._secret, write), self._timeouts():
                try:
                    async with self._slots:
                        if self.cluster:
                            await self._cluster_ready()
                            return await self._unsent_retried(write, attempts)
                        return await attempts(write)
                except BaseException as exc:
                    await self._settle_on_error(write, exc)
                    raise
        finally:
            _WRITE.reset(reset)

    async def _unsent_retried(self, write: _Write, attempts: Callable[[_Write], Awaitable[T]]) -> T:
        """``attempts`` on a cluster, again after a connection error or a timeout that came
        before its write's request left (`_ResendsNoWrite` leaves these to the storage):
        at most ``retries`` times, with the client's backoff."""
        failures = 0
        while True:
            try:
                return await attempts(write)
            except (rexc.ConnectionError, rexc.TimeoutError):
                if write.sent or failures >= self._retries:
                    raise
                failures += 1
                await asyncio.sleep(self._backoff.compute(failures))

    async def _put_attempts(self, key: str, data: bytes, mode: PutMode, write: _Write) -> str:
        scope = self._scope(key)
        names = self._names(scope)
        version = secrets.token_hex(VERSION_BYTES)
        if mode == "overwrite":
            code, expected = "o", ""
        elif mode == "create":
            code, expected = "c", ""
        else:
            assert isinstance(mode, IfMatch)
            code, expected = "m", mode.version
        external = len(data) > self._inline_max
        kb = key.encode()
        keys = (*names[:4], names.s + version.encode(), names.x + kb, names.v + kb)
        token = ""
        stage = "pipelined" if external else ""
        loop = asyncio.get_running_loop()
        expired = 0
        for _ in range(_ATTEMPTS):
            if stage == "alone":  # a SET of its own: the script after it is small
                await self._client.set(keys[4], data, px=STAGED_MS)
                stage = ""
            clock = await self._clock(names.h)
            deadline, settle = self._script_deadline(clock)
            args = (
                key,
                b"" if external else data,
                code,
                expected,
                version,
                self._ttl_ms,
                token,
                DEAD_TOKEN_MS,
                "1" if external else "0",
                deadline,
            )
            write.arm(settle)
            sent = loop.time()
            if stage:
                # a big value goes into its own key with a plain SET (no copy
                # through Lua), in the same round trip as the script that adopts it
                res = await self._staged_script(keys, args, data)
                stage = ""
            else:
                res = await self._script(_PUT, keys, args)
            write.answered()
            clock.add(int(res[2]) + int(res[3]) * 1e-6, sent, loop.time())
            status = res[0]
            if status == 1:
                self._remember_big(key, external)
                if token and res[1].decode() != token:
                    # another client registered the scope first: ours is a stray
                    await self._client.zrem(self._top, self._member(scope, token))
                return version
            if status == 0:
                raise _precondition(key, mode, res[1])
            if status == _EXPIRED:  # it reached the server too late, and did nothing
                expired += 1
                if not external and len(data) >= _RESTAGE_MIN:
                    external, stage = True, "alone"
                continue
            if status == 4:  # the staged value expired before the script ran
                stage = "alone"
                continue
            # 2: the scope is not registered; 3: our token was retired meanwhile
            token = secrets.token_hex(8)
            await self._client.zadd(self._top, {self._member(scope, token): 0})
        if expired:
            raise StorageUnavailable(
                f"put {key!r} on {self._where}: the server ran the write after its deadline "
                f"{expired} times (an overloaded server, or a link slower than "
                f"cancel_grace={self.cancel_grace:g} s allows); nothing was written"
            )
        raise StorageUnavailable(  # pragma: no cover - needs 8 racing retirements
            f"put {key!r}: could not register scope {scope!r} on {self._where}"
        )

    async def _staged_script(self, keys: Sequence[bytes], args: Sequence[Any], data: bytes) -> Any:
        """``SET s data PX`` then the put script, pipelined: one round trip."""
        sha = self._sha.get(_PUT) or self._sha.setdefault(
            _PUT, hashlib.sha1(_PUT.encode()).hexdigest()
        )
        write = _WRITE.get()
        if write is not None:
            write.sha = sha.encode()
        for attempt in (1, 2):
            pipe = self._client.pipeline(transaction=False)
            pipe.set(keys[4], data, px=STAGED_MS)  # s: the staging key
            # (the method, not the command, is refused on a cluster pipeline; both keys
            # share one slot, so the pipeline sends them together to one node)
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
            try:
                return (await pipe.execute())[1]
            except rexc.NoScriptError:
                if attempt == 2:
                    raise
                await _load_then(self._client, _PUT)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _get(self, key: str) -> GetResult:
        names = self._names(self._scope(key))
        kb = key.encode()
        fields = [b"v:" + kb, b"d:" + kb, b"x:" + kb]
        with _translate_errors("get", key, self._where, self._secret), self._timeouts():
            async with self._slots:
                if self.cluster:
                    await self._cluster_ready()
                version, data = await self._read(key, kb, names, fields)
        if version is None:
            raise NotFound(f"key {key!r} not found")
        if data is None:
            raise StorageUnavailable(
                f"get {key!r} on {self._where}: the value's data key is missing "
                "(evicted by maxmemory?)"
            )
        return GetResult(data, version.decode())

    async def _read(
        self, key: str, kb: bytes, names: _Names, fields: list[bytes]
    ) -> tuple[bytes | None, bytes | None]:
        """Version and data of ``key`` (None, None if missing; version, None if data is lost)."""
        if key in self._big:
            # a big value, as last seen: its version key and data key with one MGET
            got = await self._client.mget(names.v + kb, names.x + kb)
            version, data = cast("list[bytes | None]", got)
            if version is not None and data is not None:
                return version, data
            self._remember_big(key, False)  # small now, or gone
        got = await self._client.hmget(names.h, fields)
        version, data, big = cast("list[bytes | None]", got)
        if version is None or data is not None or big is None:
            return version, data
        self._remember_big(key, True)
        got = await self._client.mget(names.v + kb, names.x + kb)
        version, data = cast("list[bytes | None]", got)
        if version is not None and data is not None:
            return version, data
        # rewritten between the two reads (writers faster than this reader): read it all
        # in one script, which copies a big value through Lua but cannot be overtaken
        res = await self._script(_READ, (names.h, names.x + kb), fields)
        return (res[0] if res else None), (res[1] if len(res) > 1 else None)

    async def _delete(self, key: str, if_match: str | None) -> bool:
        self._big.pop(key, None)
        return await self._write("delete", key, lambda w: self._delete_attempts(key, if_match, w))

    async def _delete_attempts(self, key: str, if_match: str | None, write: _Write) -> bool:
        scope = self._scope(key)
        names = self._names(scope)
        keys = (*names[:4], names.x + key.encode(), names.v + key.encode())
        loop = asyncio.get_running_loop()
        for _ in range(_ATTEMPTS):
            clock = await self._clock(names.h)
            deadline, settle = self._script_deadline(clock)
            write.arm(settle)
            sent = loop.time()
            res = await self._script(
                _DELETE, keys, (key, if_match or "", self._ttl_ms, DEAD_TOKEN_MS, deadline)
            )
            write.answered()
            clock.add(int(res[2]) + int(res[3]) * 1e-6, sent, loop.time())
            if res[0] == _EXPIRED:  # it reached the server too late, and did nothing
                continue
            if res[0] == -1:
                raise PreconditionFailed(
                    f"key {key!r} is at version {res[1].decode()}, not {if_match} (if-match delete)"
                )
            if res[0] == 1 and res[1]:
                await self._client.zrem(self._top, self._member(scope, res[1].decode()))
            return bool(res[0] == 1)
        raise StorageUnavailable(
            f"delete {key!r} on {self._where}: the server ran the delete after its deadline "
            f"{_ATTEMPTS} times (an overloaded server, or a link slower than "
            f"cancel_grace={self.cancel_grace:g} s allows); nothing was deleted"
        )

    async def _delete_many(self, keys: list[str]) -> int:
        """Delete ``keys`` with one pipeline: one script per scope (per DELETE_CHUNK keys).

        Each script deletes its keys from the scope's hash, index and big-value
        keys and, when the scope is left empty, retires its registration, just
        as `delete` does; the scope's ``ns:top`` entries are removed after.
        """
        scopes: dict[str, dict[str, None]] = {}
        for key in keys:
            scopes.setdefault(self._scope(key), {})[key] = None  # (a key given twice: once)
            self._big.pop(key, None)
        chunks = [
            (scope, part[i : i + DELETE_CHUNK])
            for scope, members in scopes.items()
            for part in [list(members)]
            for i in range(0, len(part), DELETE_CHUNK)
        ]
        what = keys[0] if len(keys) == 1 else f"{keys[0]}, ... ({len(keys)} keys)"
        return await self._write("delete_many", what, lambda w: self._delete_chunks(chunks, w))

    async def _delete_chunks(self, chunks: list[tuple[str, list[str]]], write: _Write) -> int:
        """Run the scripts of ``chunks`` in round trips of `DELETE_WAVE`; how many existed."""
        existed = 0
        for start in range(0, len(chunks), DELETE_WAVE):
            existed += await self._delete_wave(chunks[start : start + DELETE_WAVE], write)
        return existed

    async def _delete_wave(self, chunks: list[tuple[str, list[str]]], write: _Write) -> int:
        sha = self._sha.get(_DELETE_MANY) or self._sha.setdefault(
            _DELETE_MANY, hashlib.sha1(_DELETE_MANY.encode()).hexdigest()
        )
        write.sha = sha.encode()
        loop = asyncio.get_running_loop()
        existed = 0
        retired: list[bytes] = []
        for _ in range(_ATTEMPTS):
            pipe = self._client.pipeline(transaction=False)
            clocks: list[ServerClock] = []
            settle = 0.0
            for scope, part in chunks:
                names = self._names(scope)
                clock = await self._clock(names.h)
                deadline, until = self._script_deadline(clock)
                settle = max(settle, until)
                clocks.append(clock)
                names_of_keys = [
                    name for k in part for name in (names.x + k.encode(), names.v + k.encode())
                ]
                pipe.execute_command(
                    "EVALSHA",
                    sha,
                    4 + len(names_of_keys),
                    *names[:4],
                    *names_of_keys,
                    deadline,
                    self._ttl_ms,
                    DEAD_TOKEN_MS,
                    *part,
                )
            write.arm(settle)
            sent = loop.time()
            results = await pipe.execute(raise_on_error=False)
            for res in results:
                # a cluster pipeline gives a lost connection as a result: the scripts may
                # have run, so it is the write's error (OutcomeUnknown), raised while armed
                if isinstance(res, rexc.ConnectionError | rexc.TimeoutError):
                    raise res
            write.answered()
            received = loop.time()
            again: list[tuple[str, list[str]]] = []
            load = False
            for (scope, part), clock, res in zip(chunks, clocks, results, strict=True):
                if isinstance(res, rexc.NoScriptError):
                    load = True
                    again.append((scope, part))
                    continue
                if isinstance(res, BaseException):
                    raise res
                clock.add(int(res[2]) + int(res[3]) * 1e-6, sent, received)
                if res[0] == _EXPIRED:  # it reached the server too late, and did nothing
                    again.append((scope, part))
                    continue
                existed += int(res[4])
                if res[1]:
                    retired.append(self._member(scope, res[1].decode()))
            if load:
                await self._client.script_load(_DELETE_MANY)
            if not again:
                if retired:
                    await self._client.zrem(self._top, *retired)
                return existed
            chunks = again
        raise StorageUnavailable(
            f"delete_many on {self._where}: the server ran {len(chunks)} of its scripts after "
            f"their deadline {_ATTEMPTS} times (an overloaded server, or a link slower than "
            f"cancel_grace={self.cancel_grace:g} s allows); those keys were not deleted"
        )

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after: str | None = cursor if cursor is not None else start_after
        if after is not None:
            if after < prefix:
                after = None
            elif not after.startswith(prefix):
                return ListPage([], None)  # every key of the prefix is <= after
        pb = prefix.encode()
        lo = b"(" + after.encode() if after is not None else b"[" + pb
        hi = b"(" + pb + b"\xff"  # UTF-8 never holds 0xff: above every key of the prefix
        complete = prefix.count("/")
        with _translate_errors("list", prefix, self._where, self._secret), self._timeouts():
            async with self._slots:
                if self.cluster:
                    await self._cluster_ready()
                if complete >= self._depth:
                    index = self._names(self._scope(prefix + "x")).i
                    raw = await self._client.zrangebylex(index, lo, hi, 0, limit)
                    keys = [k.decode() for k in cast("list[bytes]", raw)]
                    return ListPage(keys, keys[-1] if len(keys) == limit else None)
                return await self._list_merged(prefix, after, lo, hi, complete, limit)

    async def _list_merged(
        self, prefix: str, after: str | None, lo: bytes, hi: bytes, complete: int, limit: int
    ) -> ListPage:
        """One page of a listing whose prefix spans several scopes (see the module docstring)."""
        # the scope of the prefix's complete segments holds its keys with one more segment
        scopes: dict[str, list[str]] = {"/".join(prefix.split("/")[:complete]): []}
        if after is not None:  # scopes whose range holds ``after`` start before it
            parts = after.split("/")
            for depth in range(complete + 1, min(self._depth, len(parts) - 1) + 1):
                scopes.setdefault("/".join(parts[:depth]), [])
        # The page merges at most ``width`` scopes: the first ones in ``ns:top`` from ``lo``,
        # with every registration token of each (a scope may have several: writers cancelled
        # before their first key leave theirs), up to the first scope beyond them, the
        # boundary. ``ns:top`` is scanned ``width + 1`` entries at a time until it is found.
        width = min(limit, self.scan_width)
        entries: list[tuple[str, str]] = []
        distinct: set[str] = set()
        boundary: str | None = None
        start = lo
        while boundary is None:
            members = cast(
                "list[bytes]", await self._client.zrangebylex(self._top, start, hi, 0, width + 1)
            )
            for member in members:
                head, _, token = member.decode().partition("\x00")
                scope = head[:-1]  # the head is the scope and a "/"
                if scope not in distinct and len(distinct) == width:
                    boundary = head
                    break
                distinct.add(scope)
                entries.append((scope, token))
            if len(members) <= width:
                break  # the end of ns:top's range
            start = b"(" + members[-1]
        for scope, token in entries:
            scopes.setdefault(scope, []).append(token)
        top = b"(" + boundary.encode() if boundary is not None else hi
        pipe = self._client.pipeline(transaction=False)
        for scope in scopes:
            pipe.zrangebylex(self._names(scope).i, lo, top, 0, limit)
        results: list[list[bytes]] = await pipe.execute()
        # a scope that returned ``limit`` keys may hold more: the page ends at its last key
        bound: bytes | None = None
        for got in results:
            if len(got) == limit and (bound is None or got[-1] < bound):
                bound = got[-1]
        merged = heapq.merge(*results)
        page: list[str] = []
        for raw in merged:
            if bound is not None and raw > bound:
                break
            page.append(raw.decode())
            if len(page) == limit:
                break
        empty = [
            (scope, tokens)
            for (scope, tokens), got in zip(scopes.items(), results, strict=True)
            if tokens and not got and (boundary is None or not boundary.startswith(scope + "/"))
        ]
        if empty:
            await self._retire(empty)
        if len(page) == limit:
            return ListPage(page, page[-1])
        return ListPage(page, boundary)

    async def _retire(self, empty: list[tuple[str, list[str]]]) -> None:
        """Remove the ``ns:top`` entries of scopes a listing found empty (emptied or expired)."""
        stale: list[bytes] = []
        for scope, tokens in empty:
            names = self._names(scope)
            for token in tokens:
                res = await self._script(
                    _RETIRE, (names.i, names.h, names.r), (token, DEAD_TOKEN_MS)
                )
                if res[0] == 1:
                    stale.append(self._member(scope, token))
                    if res[1]:
                        stale.append(self._member(scope, res[1].decode()))
        if stale:
            await self._client.zrem(self._top, *stale)

    async def _aclose(self) -> None:
        # Operations still in flight end first (each within its deadline): a connection
        # they hand back to the pool after the client closed would be left open. If this
        # wait is cancelled, the last of them to end closes the connections (`_Slots`).
        try:
            await self._timeouts.drained()
        finally:
            self._timeouts.close()
            if self._owns_client:
                self._client_closed = True
                with _translate_errors("close", self._ns, self._where, self._secret):
                    await unbroken(self._client.aclose())

    async def _close_connections(self) -> None:
        """Close every connection of the client again (an operation ended after the client
        was closed, and gave its connection back to the pool)."""
        client = self._client
        with contextlib.suppress(Exception):  # the client was closed: nothing to report
            if isinstance(client, Redis):
                await unbroken(client.connection_pool.disconnect())
            else:  # a command after the close initialized the cluster client again
                await unbroken(client.aclose())
                await unbroken(client.nodes_manager.aclose())


class _Slots:
    """At most ``size`` operations of a storage use its client at once (its pool's size).

    The last operation to end after ``aclose()`` closed the client closes its connections
    again: a cancelled ``aclose()`` did not wait for the operations under way, and a
    connection that one of them gave back to the pool afterwards (reconnected by the
    client's retry, or never closed) would be left open for as long as the storage is
    referenced.
    """

    __slots__ = ("_busy", "_semaphore", "_storage")

    def __init__(self, storage: RedisStorage, size: int) -> None:
        self._storage = storage
        self._semaphore = asyncio.Semaphore(size)
        self._busy = 0

    async def __aenter__(self) -> None:
        await self._semaphore.acquire()
        self._busy += 1

    async def __aexit__(self, *exc_info: object) -> None:
        self._busy -= 1
        self._semaphore.release()
        if self._busy == 0 and self._storage._client_closed:
            await self._storage._close_connections()


class _RedisStorageWithTTL(RedisStorage):
    """A `RedisStorage` created with ``ttl``: it declares the TTL capability."""

    capabilities: ClassVar[Capabilities] = Capabilities(ttl=True, settles_cancelled_writes=True)


# -- errors ------------------------------------------------------------------------------
_UNAVAILABLE: tuple[tuple[type[BaseException], str], ...] = (
    (rexc.AuthenticationError, "authentication failed (check the username and password)"),
    (rexc.AuthenticationWrongNumberOfArgsError, "authentication failed (check the username)"),
    (rexc.NoPermissionError, "permission denied by the server's ACL"),
    (rexc.BusyLoadingError, "the server is loading its dataset"),
    (rexc.ReadOnlyError, "the server is a read-only replica (failover in progress?)"),
    (rexc.OutOfMemoryError, "the server is out of memory (maxmemory)"),
    (rexc.MasterDownError, "the primary is down"),
    (rexc.ClusterDownError, "the cluster is down"),
    (rexc.TryAgainError, "the cluster is resharding; try again"),
    (rexc.MaxConnectionsError, "the connection pool is exhausted"),
    (rexc.TimeoutError, "the server did not answer in time"),
    (rexc.ConnectionError, "cannot connect"),
    (rexc.ClusterError, "cluster error"),
    (rexc.RedisClusterException, "cluster error"),
    (rexc.ResponseError, "the server refused the command"),
    (rexc.RedisError, "redis error"),
    (TimeoutError, "no answer within the operation's timeout"),
    (OSError, "network error"),
)
"""Every foreign error `_translate_errors` maps to StorageUnavailable, most specific first."""

_ANSWERED: tuple[type[BaseException], ...] = (
    rexc.AuthenticationError,
    rexc.AuthenticationWrongNumberOfArgsError,
    rexc.BusyLoadingError,
    rexc.MaxConnectionsError,
    rexc.ResponseError,
)
"""Errors that say the server refused the request, or that it was never sent: a write
that failed with one of these did not happen. Any other failure after a write's request
left is OutcomeUnknown."""


class _translate_errors:  # lower case: used like a function, ``with _translate_errors(...)``
    """Turn redis-py's errors into checkpointkit's, chained with ``from``.

    Checkpointkit's own errors and cancellation pass through. ``MOVED`` or
    ``ASK`` from a standalone client becomes `ConfigurationError`
    (the server is a cluster node); everything in `_UNAVAILABLE`
    becomes `StorageUnavailable`, or `OutcomeUnknown` when it
    hit a write whose request had started to leave (a timeout or a lost
    connection, not a refusal: see `_ANSWERED`). The password never
    reaches a message. (A class, not a generator: it wraps every operation,
    so it must be cheap.)

    Args:
        op: the operation (``"put"``), for the message.
        subject: the key or prefix, for the message.
        where: the redacted server address.
        secret: the password, scrubbed from the server's messages.
        write: the write operation's tracker, None for a read.
    """

    __slots__ = ("op", "secret", "subject", "where", "write")

    def __init__(
        self, op: str, subject: str, where: str, secret: str | None, write: _Write | None = None
    ) -> None:
        self.op = op
        self.subject = subject
        self.where = where
        self.secret = secret
        self.write = write

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, CheckpointkitError):
            return
        what = f"{self.op} {self.subject!r}"
        where = self.where
        if isinstance(exc, rexc.AskError):  # MOVED is an AskError too
            raise ConfigurationError(
                f"{what}: {where} is a Redis Cluster node; open it with ?cluster=true"
            ) from exc
        write = self.write
        unknown = write is not None and write.sent and not isinstance(exc, _ANSWERED)
        kind = OutcomeUnknown if unknown else StorageUnavailable
        tail = (
            " (the request had been sent: the write may have happened, but it will not "
            "happen later)"
            if unknown
            else ""
        )
        if isinstance(exc, AttributeError):
            if _raised_in_redis(exc):
                # redis-py's cluster client can close a connection that a command is using
                raise kind(
                    f"{what} on {where}: the connection was closed under the command{tail}: {exc}"
                ) from exc
            return
        for foreign, reason in _UNAVAILABLE:
            if isinstance(exc, foreign):
                detail = _scrub(str(exc) or type(exc).__name__, self.secret)
                raise kind(f"{what} on {where}: {reason}{tail}: {detail}") from exc


_REDIS_DIR = os.path.dirname(os.path.abspath(_redis_package.__file__ or "")) + os.sep


def _raised_in_redis(exc: BaseException) -> bool:
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and last.tb_frame.f_code.co_filename.startswith(_REDIS_DIR)


def _scrub(text: str, secret: str | None) -> str:
    if secret:
        text = text.replace(secret, "***").replace(quote(secret, safe=""), "***")
    return text[:300]


def _precondition(key: str, mode: PutMode, current: bytes) -> PreconditionFailed:
    if mode == "create":
        return PreconditionFailed(f"key {key!r} already exists (create-only put)")
    assert isinstance(mode, IfMatch)
    if not current:
        return PreconditionFailed(f"key {key!r} does not exist (if-match {mode.version})")
    return PreconditionFailed(
        f"key {key!r} is at version {current.decode()}, not {mode.version} (if-match put)"
    )


# -- options -----------------------------------------------------------------------------
def _pool_size(client: Redis | RedisCluster | None) -> int:
    if isinstance(client, Redis):
        return int(getattr(client.connection_pool, "max_connections", 100))
    if isinstance(client, RedisCluster):
        return int(client.connection_kwargs.get("max_connections", 100))
    return 100


def _check_prefix(prefix: object) -> None:
    if (
        not isinstance(prefix, str)
        or not prefix
        or len(prefix) > 64
        or not all(c.isascii() and (c.isalnum() or c in "_.-") for c in prefix)
    ):
        raise ConfigurationError(
            f"redis prefix must be 1 to 64 ASCII letters, digits or _.- characters, not {prefix!r}"
        )


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"redis option {name} must be a positive number, not {value!r}")
    return float(value)


def _ttl_ms(ttl: object) -> int:
    if ttl is None:
        return 0
    seconds = _positive("ttl", ttl)
    if seconds < 0.001:
        raise ConfigurationError(f"redis option ttl must be at least 0.001 seconds, not {ttl!r}")
    return round(seconds * 1000)


def _parse_param(shown: str, name: str, value: str) -> Any:
    if name not in _URL_PARAMS:
        raise ConfigurationError(
            f"unknown redis URL parameter {name!r} in {shown!r}; known: {', '.join(_URL_PARAMS)}"
        )
    try:
        if name in ("cluster", "ssl_check_hostname"):
            low = value.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError
        if name in ("ttl", "timeout", "connect_timeout", "cancel_grace"):
            return float(value)
        if name in ("retries", "scope_depth", "max_connections", "inline_max"):
            return int(value)
    except ValueError:
        raise ConfigurationError(
            f"redis URL parameter {name}={value!r} in {shown!r} is malformed"
        ) from None
    return value


def _parse_endpoint(endpoint: object) -> tuple[str, int]:
    if isinstance(endpoint, tuple) and len(endpoint) == 2:
        host, port = endpoint
        return str(host), int(port)
    if isinstance(endpoint, str):
        host, sep, port_text = endpoint.rpartition(":")
        if sep and host and port_text.isdigit():
            return host.strip("[]"), int(port_text)
    raise ConfigurationError(f"redis option endpoint must be 'host:port', not {endpoint!r}")

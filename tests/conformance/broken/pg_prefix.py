"""A PostgreSQL adapter whose listing tests each key against its prefix.

checkpointkit's `PostgresStorage` lists a prefix as a range of its primary key
(``key >= prefix``, in key order, up to the first key past the prefix), so a listing
costs about a get however many keys the table holds. `PrefixFilteredNotBounded`
selects a page's keys by ``left(key, length(prefix)) = prefix`` instead (the fourth
blind round's asyncpg adapter b21, the fifth's aiomysql b28): the answers are right, but
no index bounds the rows read, and a listing whose prefix sorts after many keys reads
them all. It still declares ``indexed_list``, as `PostgresStorage` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from checkpointkit.adapters.postgres import PostgresStorage
from checkpointkit.conformance import Target
from checkpointkit.conformance.servers.postgres import postgres_server, postgres_target
from checkpointkit.storage import ListPage


class PrefixFilteredNotBounded(PostgresStorage):
    """Bug: a page's keys are those whose first characters are the prefix
    (``left(r.key, length($4)) = $4``), read in key order from the start of the
    namespace: a scan of every key that sorts before the prefix."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        sql = self._sql
        self._filtered = {
            op: statement.replace(
                f"r.key {op} $2", f"left(r.key, length($4)) = $4 AND r.key {op} $2"
            )
            for op, statement in ((">=", sql.list_from), (">", sql.list_after))
        }
        assert "left(" in self._filtered[">"], "the listing statement changed"

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        after = cursor if cursor is not None else start_after
        statement = self._filtered[">=" if after is None else ">"]
        rows = await self._call(
            "list",
            f"the keys under prefix {prefix!r}",
            lambda c: c.fetch(statement, self.prefix, after or "", limit, prefix),
        )
        keys = [row[0] for row in rows]
        return ListPage(keys, keys[-1] if len(keys) == limit else None)


@contextmanager
def postgres_server_target(cls: type[PostgresStorage]) -> Iterator[Target]:
    """A server of its own and a target of ``cls`` on its default database."""
    with postgres_server() as server:
        yield postgres_target(server.url, name=cls.__name__, storage_class=cls)

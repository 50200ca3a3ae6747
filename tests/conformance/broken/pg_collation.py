"""A PostgreSQL adapter whose key column takes the database's default collation.

checkpointkit's `PostgresStorage` declares its ``ns`` and ``key`` columns ``COLLATE "C"``,
so that its primary key's B-tree, and the ``ORDER BY`` and ranges of its listings, compare
keys byte by byte. `KeysInTheDatabasesCollation` leaves the ``COLLATE`` out (the fourth
blind round's asyncpg adapter b23): in a cluster made with the ``C.UTF-8`` locale nothing
shows, and in a database whose default collation is ICU's ``en-US`` its listings come out
of byte order (``B`` after ``ab``). Both run on a server of their own
(`icu_postgres_target`), in such a database.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from checkpointkit.adapters.postgres import PostgresStorage
from checkpointkit.conformance import Target
from checkpointkit.conformance.servers.postgres import postgres_server, postgres_target


class KeysInTheDatabasesCollation(PostgresStorage):
    """Bug: the key column has no ``COLLATE "C"``: its keys compare, are ordered and are
    bounded by the database's default collation, which is byte order only in a ``C``
    locale: listings come out of byte order, and a prefix's range misses keys."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A table of its own: the target's cleanup opens a PostgresStorage, which creates
        # the default table its own way when it gets there first.
        kwargs.setdefault("table", "keys_in_the_default_collation")
        super().__init__(*args, **kwargs)
        self._sql.schema = tuple(
            statement.replace(' COLLATE "C"', "") for statement in self._sql.schema
        )


@contextmanager
def icu_postgres_target(cls: type[PostgresStorage]) -> Iterator[Target]:
    """A server of its own and a target of ``cls`` on a database whose default collation
    is ICU's ``en-US``."""
    with postgres_server() as server:
        url = server.database("icu", icu_locale="en-US")
        yield postgres_target(url, name=cls.__name__, storage_class=cls)

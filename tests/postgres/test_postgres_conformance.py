"""The PostgreSQL adapter against the whole conformance suite, on the session's real server.

The stall-proxy tests run too: the target proxies the one server.
"""

from __future__ import annotations

import pytest
from checkpointkit.conformance import (
    CancellationTests,
    LifecycleTests,
    StorageConformance,
    StorageFixtures,
    Target,
)
from checkpointkit.conformance.servers.postgres import postgres_target


@pytest.fixture(scope="session")
def postgres_conformance_target(pg_icu_url: str) -> Target:
    # the size sweep up to 16 MiB and the model group for 3 s here (the defaults, 64 MiB
    # and 12 s, are for users' runs); the URL as its SPEC, so that a child process can
    # write through it and die (the durability test). In a database whose default
    # collation is ICU's en-US: the adapter's keys keep byte order whatever the database's
    # collation is (its columns are COLLATE "C"), and the suite's listings show it.
    return Target.of(
        postgres_target(pg_icu_url, name="postgres"),
        max_value=16 * 1024 * 1024,
        model_budget=3.0,
        spec=pg_icu_url,
    )


class PostgresFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, postgres_conformance_target: Target) -> Target:
        return postgres_conformance_target


class TestPostgresConformance(PostgresFixtures, StorageConformance):
    pass


@pytest.fixture(scope="session")
def postgres_tls_negotiated_target(pg_url: str) -> Target:
    # sslmode=prefer, as a server elsewhere gets by default: each connect asks the server
    # for TLS first (this one answers no). asyncpg's TLS request leaves an exception
    # nobody retrieves when a connect is cancelled at the wrong moment; the adapter lets
    # such a connect end in the background (PostgresStorage._connect_to_the_end).
    url = f"{pg_url}{'&' if '?' in pg_url else '?'}sslmode=prefer"
    return Target.of(postgres_target(url, name="postgres, sslmode=prefer"), spec=url)


class PostgresTlsNegotiatedFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, postgres_tls_negotiated_target: Target) -> Target:
        return postgres_tls_negotiated_target


class TestPostgresTlsNegotiatedCancellation(PostgresTlsNegotiatedFixtures, CancellationTests):
    """The cancellation group with TLS negotiated at every connect: a cancelled first call
    (its connect cut short) leaves nothing behind."""


class TestPostgresTlsNegotiatedLifecycle(PostgresTlsNegotiatedFixtures, LifecycleTests):
    """The lifecycle group with TLS negotiated: aclose waits for the connects left to end."""

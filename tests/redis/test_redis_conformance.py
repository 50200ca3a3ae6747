"""The Redis adapter against the whole conformance suite: standalone and 3-node cluster.

Both targets run on the session's valkey servers. The stall-proxy tests run
too: the standalone target proxies its one server; the cluster target pins
each storage to one node (``hash_tag``) and proxies that node.
"""

from __future__ import annotations

import pytest
from checkpointkit.conformance import StorageConformance, StorageFixtures, Target
from checkpointkit.conformance.servers.redis import redis_target

MODEL_BUDGET = 3.0
"""Seconds of the model group per run here (the default, 12, is for users' runs)."""

MAX_VALUE = 16 * 1024 * 1024
"""The largest value of the coverage's size sweep here (the default, 64 MiB, for users' runs)."""


@pytest.fixture(scope="session")
def redis_standalone_target(redis_standalone_url: str) -> Target:
    return Target.of(
        redis_target(redis_standalone_url, name="redis standalone"),
        model_budget=MODEL_BUDGET,
        max_value=MAX_VALUE,
    )


@pytest.fixture(scope="session")
def redis_cluster_target(redis_cluster_url: str) -> Target:
    return Target.of(
        redis_target(redis_cluster_url, name="redis cluster"),
        model_budget=MODEL_BUDGET,
        max_value=MAX_VALUE,
    )


class RedisStandaloneFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, redis_standalone_target: Target) -> Target:
        return redis_standalone_target


class RedisClusterFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, redis_cluster_target: Target) -> Target:
        return redis_cluster_target


class TestRedisStandaloneConformance(RedisStandaloneFixtures, StorageConformance):
    pass


class TestRedisClusterConformance(RedisClusterFixtures, StorageConformance):
    pass

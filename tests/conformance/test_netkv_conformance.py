"""A network adapter through the stall proxy: the correct client passes the cancellation
group, proxy tests included; the client that reads stale replies fails them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from checkpointkit.conformance import CancellationTests, StorageFixtures, Target, run

from .broken.netkv import NetKVStaleReply, netkv_target


@pytest.fixture(scope="module")
def netkv() -> Iterator[Target]:
    with netkv_target() as target:
        yield target


class NetKVFixtures(StorageFixtures):
    @pytest.fixture
    def storage_factory(self, netkv: Target) -> Target:
        return netkv


class TestNetKVCancellation(NetKVFixtures, CancellationTests):
    pass


async def test_proxy_tests_run_against_a_target_with_an_endpoint(netkv: Target) -> None:
    report = await run(netkv, groups=["cancellation"], pattern="mid_request or mid_response")
    assert report.ok, report.summary()
    assert len(report.results) == 2
    assert all(r.outcome == "passed" for r in report.results), report.summary()


async def test_suite_catches_a_stale_reply_through_the_stall_proxy() -> None:
    with netkv_target(NetKVStaleReply, name="netkv-stale-reply") as target:
        report = await run(
            target,
            groups=["cancellation"],
            pattern="put_cancelled_mid_response or next_call_after_cancelled_get",
        )
    failed = report.failed_names()
    assert "test_put_cancelled_mid_response_raises_promptly_and_client_recovers" in failed, (
        report.summary()
    )
    assert "test_next_call_after_cancelled_get_gets_its_own_answer" in failed, report.summary()
    reason = report.result(
        "test_put_cancelled_mid_response_raises_promptly_and_client_recovers"
    ).reason
    assert "its own answer" in reason and "proxy/other" in reason

"""Protocol coverage (issue 17, item 1): what the probe records, what the report shows, and
that a gap keeps an adapter from ``full``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from checkpointkit import IfMatch, NotFound, PreconditionFailed, StorageClosed
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.conformance import Target, run
from checkpointkit.conformance.coverage import (
    ACLOSE_EVENTS,
    Coverage,
    CoverageProbe,
    CoverageRecorder,
    Reach,
    measuring_waits,
    size_classes,
    size_label,
    watching_landings,
)
from checkpointkit.conformance.report import Report, TestResult
from checkpointkit.storage import Capabilities

from .broken.kv_dict import DictKV, IndexedListingKV, LargeValuesInPartsLoseAByte

CAPS = Capabilities(durable=True, settles_cancelled_writes=True)


def _probe(
    rec: CoverageRecorder, location: str | None = "here", storage: MemoryStorage | None = None
) -> CoverageProbe:
    reach = Reach(CAPS, reopens=True, max_value=1024)
    return CoverageProbe(storage or MemoryStorage(), "t", reach, location=location, into=rec)


def _cells(rec: CoverageRecorder) -> set[tuple[str, str, str]]:
    snapshot = rec.snapshot("t")
    assert snapshot is not None
    return snapshot[1]


def test_size_classes_are_every_power_of_two_and_its_neighbours() -> None:
    assert size_classes(16) == [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16]
    assert size_label(0) == "0 B" and size_label(1023) == "1 KiB-1"
    assert size_label(64 * 1024 * 1024) == "64 MiB" and size_label(1025) == "1 KiB+1"


async def test_the_probe_classifies_modes_by_the_version_they_give_and_the_key_state() -> None:
    rec = CoverageRecorder()
    async with _probe(rec) as s:
        stale = await s.put("k", b"a")  # missing
        current = await s.put("k", b"b")  # present
        await s.put("k", b"c", mode=IfMatch(current))
        try:
            await s.put("k", b"d", mode=IfMatch(stale))
        except PreconditionFailed:
            pass
        assert await s.delete("k")
        try:
            await s.get("k")
        except NotFound:
            pass
        await s.delete("k", if_match="never-minted")
    cells = _cells(rec)
    assert ("state", "put overwrite", "missing") in cells
    assert ("state", "put overwrite", "present") in cells
    assert ("state", "put if-match current", "present") in cells
    assert ("state", "put if-match stale", "present") in cells
    assert ("state", "get", "deleted") in cells
    assert ("state", "delete if-match bogus", "deleted") in cells
    assert ("lifecycle", "aclose", "after aclose") not in cells


async def test_the_probe_sees_a_reopen_and_a_close_with_work_in_flight() -> None:
    rec = CoverageRecorder()
    name = f"coverage-reopen-{id(rec)}"
    first = _probe(rec, storage=MemoryStorage(name))
    await first.put("k", b"v")
    await first.aclose()
    second = _probe(rec, storage=MemoryStorage(name))  # the same data, a new client
    await second.get("k")
    resume = MemoryStorage(name).pause()
    try:
        with measuring_waits():
            held = asyncio.ensure_future(second.put("k", b"w"))
        await asyncio.sleep(0.01)
        closing = asyncio.ensure_future(second.aclose())
        await asyncio.sleep(0)
    finally:
        resume()
    await asyncio.gather(held, closing, return_exceptions=True)
    await second.aclose()
    try:
        await second.get("k")
    except StorageClosed:
        pass
    cells = _cells(rec)
    assert ("state", "get", "reopened") in cells
    assert ("lifecycle", "put", "during aclose") in cells
    assert ("lifecycle", "aclose", "after aclose") in cells
    assert ("lifecycle", "get", "after aclose") in cells
    assert ("suspends", "put", "yes") in cells


async def test_the_probe_records_sizes_shapes_and_listing_options() -> None:
    rec = CoverageRecorder()
    async with _probe(rec, location=None) as s:
        for key in ("a", "a/b", "a-b", "a0", "é/日/😀", "a b.c"):
            await s.put(key, b"x" * 7)
        await s.get("a")
        assert [k async for k in s.list("a/", start_after="a/", limit=1)] == ["a/b"]
        assert [k async for k in s.list("")][:2] == ["a", "a b.c"]
    cells = _cells(rec)
    assert ("sizes", "7 B", "put") in cells and ("sizes", "7 B", "get") in cells
    assert ("sizes", "8 B", "put") not in cells
    for shape in ("one character", "several segments", "2-byte UTF-8", "3-byte UTF-8"):
        assert ("keys", shape, "put") in cells, shape
    assert ("keys", "4-byte UTF-8", "list") in cells
    assert ("keys", "punctuation", "put") in cells and ("keys", "dot in a segment", "put") in cells
    assert ("keys", "parent and child listed", "list") in cells
    assert ("keys", "neighbours of '/' listed", "list") in cells
    assert ("listing", "prefix ending in '/'", "start_after before") in cells
    assert ("listing", "prefix ending in '/'", "limit 1") in cells
    assert ("listing", "empty prefix", "limit none") in cells


def test_reach_follows_the_capabilities_and_the_target() -> None:
    plain = Reach(Capabilities(conditional_put=False, conditional_delete=False), reopens=False)
    cells = set(plain.cells())
    assert not any(c[1].startswith("put create") for c in cells)
    assert not any(c[1].startswith("delete if-match") for c in cells)
    assert not any(c[2] == "reopened" for c in cells)
    full = set(Reach(CAPS, reopens=True).cells())
    assert ("state", "put if-match current", "missing") not in full  # no current version
    assert ("state", "put if-match current", "reopened") in full
    assert ("sizes", "64 MiB", "get") in full and ("sizes", "64 MiB+1", "get") not in full
    large = list(
        dict.fromkeys(c[1] for c in Reach(CAPS, reopens=True).cells() if c[0] == "large values")
    )
    assert [label.removesuffix("+1") for label in large] == [
        "1 KiB", "4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB", "4 MiB", "16 MiB"
    ]  # fmt: skip
    assert {c[2] for c in full if c[0] == "large values"} == {
        "overwrite", "create", "if-match", "delete if-match", "delete_many", "listed"
    }  # fmt: skip
    assert {c[2] for c in cells if c[0] == "large values"} == {"overwrite", "delete_many", "listed"}
    # without a delete_many of its own, a batch is one delete per key: no column of it
    one_by_one = set(Reach(CAPS, reopens=True, batches=False).cells())
    assert not any(c[2] == "delete_many" for c in one_by_one if c[0] in ("large values", "keys"))
    assert {c[1] for c in one_by_one if c[0] == "batches"} == {"0 keys", "1 key", "2 keys"}


async def test_the_probe_records_the_write_modes_of_a_large_value() -> None:
    rec = CoverageRecorder()
    reach = Reach(CAPS, reopens=True, max_value=4096)
    big, other = b"x" * 1025, b"y" * 1025
    async with CoverageProbe(MemoryStorage(), "t", reach, into=rec) as s:
        first = await s.put("k", big)  # a fresh key: not an overwrite of a value
        assert ("large values", "1 KiB+1", "overwrite") not in _cells(rec)
        await s.put("k", other)
        try:
            await s.put("k", big, mode="create")
        except PreconditionFailed:
            pass
        try:
            await s.put("k", big, mode=IfMatch(first))
        except PreconditionFailed:
            pass
        await s.put("x", b"z" * 1024, mode="create")  # a power of two: the small path
        assert [k async for k in s.list("x")] == ["x"]  # a small value listed
        assert ("large values", "1 KiB+1", "listed") not in _cells(rec)
        assert [k async for k in s.list("k")] == ["k"]  # alone: no key after it
        assert ("large values", "1 KiB+1", "listed") not in _cells(rec)
        await s.put("k-after", b"after")
        assert [k async for k in s.list("k")] == ["k", "k-after"]
        try:
            await s.delete("k", if_match=first)
        except PreconditionFailed:
            pass
    cells = {c for c in _cells(rec) if c[0] == "large values"}
    columns = ("overwrite", "create", "if-match", "delete if-match", "listed")
    assert cells == {("large values", "1 KiB+1", c) for c in columns}


def test_an_operation_that_never_waits_has_no_in_flight_cells() -> None:
    reach = Reach(CAPS, reopens=True, max_value=16)
    cov = Coverage(reach, {("suspends", "put", "yes")})
    reachable = set(cov.reachable)
    assert ("lifecycle", "put", "cancelled") in reachable
    assert ("lifecycle", "get", "cancelled") not in reachable
    assert ("lifecycle", "get", "concurrent write") in reachable  # a put can be in flight
    assert cov.never_suspended == ["get", "delete", "delete_many", "list", "aclose"]
    # a first aclose() that waited can be cancelled and overlapped by a second one
    closes = Coverage(reach, {("suspends", "put", "yes"), ("suspends", "aclose", "yes")})
    assert "aclose" not in closes.never_suspended
    for event in ("cancelled", "during aclose"):
        assert ("lifecycle", "aclose", event) in set(closes.reachable)
        assert ("lifecycle", "aclose", event) not in reachable
    assert ("lifecycle", "aclose", "first call") in reachable


async def test_a_cancelled_write_is_recorded_only_where_a_test_watched_it() -> None:
    """A write cancelled where nothing watches what it does after CancelledError leaves
    its ``cancelled`` cell to a test that does (`watching_landings`); a read's is its own."""
    rec = CoverageRecorder()
    probe = CoverageProbe(DictKV(), "t", Reach(CAPS, reopens=False), into=rec)

    async def cut(call: Any) -> None:
        task = asyncio.ensure_future(call())
        await asyncio.sleep(0)  # it runs to its first wait
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    await probe.put("k", b"v")
    await cut(lambda: probe.delete_many(["k"]))
    await cut(lambda: probe.get("k"))
    assert ("lifecycle", "delete_many", "cancelled") not in _cells(rec)
    assert ("lifecycle", "get", "cancelled") in _cells(rec)
    with watching_landings():
        await cut(lambda: probe.delete_many(["k"]))
    assert ("lifecycle", "delete_many", "cancelled") in _cells(rec)


async def test_a_listing_read_on_while_a_key_ahead_is_overwritten_is_recorded() -> None:
    """``kept key overwritten``: a step of a listing while a put over a present key that
    it has still to yield is in flight; a put of a new key or of a key passed is not."""
    rec = CoverageRecorder()
    probe = CoverageProbe(IndexedListingKV(), "t", Reach(CAPS, reopens=False), into=rec)
    for key in ("a/1", "a/2"):
        await probe.put(key, b"v")
    cell = ("lifecycle", "list", "kept key overwritten")
    listing = probe.list("a/")
    assert await listing.__anext__() == "a/1"
    put = asyncio.ensure_future(probe.put("a/1", b"w"))  # passed already
    new = asyncio.ensure_future(probe.put("a/3", b"w"))  # not present
    await asyncio.sleep(0)
    assert await listing.__anext__() == "a/2"
    await asyncio.gather(put, new)
    assert cell not in _cells(rec)
    listing = probe.list("a/")
    overwrite = asyncio.ensure_future(probe.put("a/2", b"x"))
    await asyncio.sleep(0)
    assert [k async for k in listing] == ["a/1", "a/2", "a/3"]
    await overwrite
    assert cell in _cells(rec)
    never = Coverage(Reach(CAPS, reopens=False), {("suspends", "get", "yes")})
    assert cell not in never.reachable  # a put that never waits is never in flight


async def test_first_calls_and_every_kind_of_aclose_are_recorded() -> None:
    class GatedClose(MemoryStorage):
        """Its aclose() waits for ``gate`` (set at once unless a test clears it)."""

        def __init__(self) -> None:
            super().__init__()
            self.closing, self.gate = asyncio.Event(), asyncio.Event()
            self.gate.set()

        async def _aclose(self) -> None:
            self.closing.set()
            await self.gate.wait()

    def gated(storage: GatedClose) -> tuple[CoverageProbe, GatedClose]:
        storage.gate.clear()
        return CoverageProbe(storage, "t", reach, into=rec), storage

    rec = CoverageRecorder()
    reach = Reach(CAPS, reopens=False, max_value=16)
    await CoverageProbe(GatedClose(), "t", reach, into=rec).aclose()  # never used
    used, inner = gated(GatedClose())
    first = [asyncio.ensure_future(used.put("a", b"1")), asyncio.ensure_future(used.get("a"))]
    await asyncio.gather(*first, return_exceptions=True)
    await used.put("b", b"2")  # no longer a first call
    closing = asyncio.ensure_future(used.aclose())
    await inner.closing.wait()
    second = asyncio.ensure_future(used.aclose())  # while the first runs
    inner.gate.set()
    await asyncio.gather(closing, second)
    await used.aclose()  # after it
    cancelled, inner = gated(GatedClose())
    await cancelled.put("c", b"3")
    closing = asyncio.ensure_future(cancelled.aclose())
    await inner.closing.wait()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    cells = {c for c in _cells(rec) if c[0] == "lifecycle"}
    # the get started once the put (which never waits on memory) had answered
    assert cells == {
        ("lifecycle", "put", "first call"),
        *(("lifecycle", "aclose", e) for e in ACLOSE_EVENTS),
    }


def test_a_reachable_cell_not_exercised_keeps_the_level_from_full_and_is_reported() -> None:
    reach = Reach(CAPS, reopens=True, max_value=16)
    cells = set(reach.cells()) | {("suspends", op, "yes") for op in ("put", "get", "list")}
    gap = ("sizes", "9 B", "get")
    report = Report(target="t", coverage=Coverage(reach, cells - {gap}))
    report.results = [TestResult("test_x", "semantics", "passed")]
    assert report.coverage is not None and report.coverage.missing == [gap]
    assert "NOT EXERCISED cell sizes / 9 B / get" in report.summary()
    data = report.to_dict()["coverage"]
    assert data["not_exercised"] == [list(gap)]
    assert data["matrices"]["sizes"]["9 B"]["get"] == "not exercised"
    json.dumps(data)
    props = ET.fromstring(report.to_junit_xml()).find("testsuite/properties")
    assert props is not None
    assert {p.get("value") for p in props if p.get("name") == "not_exercised"} == {
        "sizes / 9 B / get"
    }
    text = report.coverage_text()
    assert "sizes: put and get of 11 sizes from 0 B to 16 B: not exercised: get 9 B" in text


async def test_a_gap_in_coverage_is_where_a_broken_adapter_passes() -> None:
    """The size-boundary mutant passes the semantics group without the size sweeps (the
    large-values one writes 256 KiB+1 too), and the report says which cells no test
    exercised; with the sweep it fails; its twin passes."""
    without = await run(
        Target(LargeValuesInPartsLoseAByte, name="parts"),
        groups=["semantics"],
        pattern="not every_size_class and not large_values",
    )
    assert without.ok, without.summary()
    assert without.coverage is not None
    assert ("sizes", "256 KiB+1", "put") in without.coverage.missing
    assert ("large values", "256 KiB+1", "create") in without.coverage.missing
    assert without.level != "full"
    killed = await run(
        Target(LargeValuesInPartsLoseAByte, name="parts"),
        groups=["semantics"],
        pattern="every_size_class",
    )
    reason = killed.result("test_values_of_every_size_class_round_trip").reason
    assert "256 KiB+1" in reason, killed.summary()
    twin = await run(Target(DictKV, name="dict"), groups=["semantics"], pattern="every_size_class")
    assert twin.ok, twin.summary()


def test_a_list_cut_short_in_a_message_says_how_many_it_left_out() -> None:
    from checkpointkit.conformance.checks import listed

    assert listed(range(3)) == "[0, 1, 2]"
    assert listed(range(15)) == "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9] and 5 more"


async def test_a_write_in_flight_through_another_client_is_recorded_as_such() -> None:
    class GatedPut(MemoryStorage):
        """Its puts wait for ``gate``; ``writing`` is set once one waits."""

        def __init__(self) -> None:
            super().__init__()
            self.writing, self.gate = asyncio.Event(), asyncio.Event()

        async def _put(self, key: str, data: bytes, mode: Any) -> str:
            self.writing.set()
            await self.gate.wait()
            return await super()._put(key, data, mode)

    rec = CoverageRecorder()
    reach = Reach(Capabilities(shared=True), reopens=True, max_value=16)
    inner = GatedPut()
    a = CoverageProbe(inner, "t", reach, location="L", into=rec)
    b = CoverageProbe(MemoryStorage(), "t", reach, location="L", into=rec)
    writing = asyncio.ensure_future(a.put("k", b"1"))
    await inner.writing.wait()
    with contextlib.suppress(NotFound):
        await a.get("k")  # the same client: a concurrent write, not another client's
    assert ("lifecycle", "get", "concurrent write") in _cells(rec)
    assert ("lifecycle", "get", "another client writing") not in _cells(rec)
    with contextlib.suppress(NotFound):
        await b.get("k")
    _ = [key async for key in b.list("")]
    inner.gate.set()
    await writing
    assert {("lifecycle", op, "another client writing") for op in ("get", "list")} <= _cells(rec)
    assert ("lifecycle", "put", "another client writing") not in _cells(rec)


async def test_the_probe_records_which_write_gave_an_expired_or_renewed_key_its_expiry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``expiry``: an operation past a key's expiry is ``expired`` on the row of the write
    that set it; one before it and past the expiry of the write before is ``kept``."""
    from checkpointkit.conformance import coverage as module

    now = [100.0]
    monkeypatch.setattr(module, "_clock", lambda: now[0])
    caps = Capabilities(ttl=True, settles_cancelled_writes=True)
    reach = Reach(caps, reopens=False, max_value=1024, expires=True)
    assert {c for c in reach.cells() if c[0] == "expiry"} == {
        ("expiry", row, column)
        for row in ("put overwrite", "put create", "put if-match")
        for column in ("kept", "expired")
    }
    rec = CoverageRecorder()
    async with CoverageProbe(MemoryStorage(), "t", reach, into=rec, ttl=10) as s:
        first = await s.put("k", b"a", mode="create")  # expires at 110
        now[0] = 105
        await s.get("k")
        assert not {c for c in _cells(rec) if c[0] == "expiry"}  # no earlier expiry passed
        await s.put("k", b"b", mode=IfMatch(first))  # expires at 115, renewing 110
        now[0] = 109
        await s.get("k")
        assert not {c for c in _cells(rec) if c[0] == "expiry"}  # the earlier one not passed
        now[0] = 111
        await s.get("k")
        assert {c for c in _cells(rec) if c[0] == "expiry"} == {("expiry", "put if-match", "kept")}
        now[0] = 115
        assert [k async for k in s.list("")] == ["k"]  # MemoryStorage has no ttl of its own
        assert ("expiry", "put if-match", "expired") in _cells(rec)
        await s.put("k", b"c")  # over an expired key: expires at 125, after 115
        now[0] = 120
        await s.get("k")
        assert ("expiry", "put overwrite", "kept") in _cells(rec)
        assert ("expiry", "put overwrite", "expired") not in _cells(rec)
    assert Reach(caps, reopens=False, expires=False).cells() == [
        c for c in Reach(caps, reopens=False).cells() if c[0] != "expiry"
    ]
    # a key that holds a large value (1 KiB + 1 here) has the row "large value" as well
    reach = Reach(caps, reopens=False, max_value=2048, expires=True)
    assert {("expiry", "large value", c) for c in ("kept", "expired")} <= set(reach.cells())
    rec, now[0] = CoverageRecorder(), 200.0
    async with CoverageProbe(MemoryStorage(), "t", reach, into=rec, ttl=10) as s:
        await s.put("big", b"x" * 1025)  # expires at 210
        now[0] = 205
        await s.put("big", b"x" * 1025)  # expires at 215, renewing 210
        now[0] = 211
        await s.get("big")
        assert {c for c in _cells(rec) if c[0] == "expiry"} == {
            ("expiry", "put overwrite", "kept"),
            ("expiry", "large value", "kept"),
        }
        now[0] = 215
        await s.get("big")
        assert ("expiry", "large value", "expired") in _cells(rec)


async def test_the_probe_records_a_listing_that_returns_a_key_past_expired_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``lifecycle``/``past expired keys``: a listing that returns a key after keys of its
    range that expired (not one whose ``start_after`` passes them, nor one of a ttl-less
    target, where the cell is unreachable)."""
    from checkpointkit.conformance import coverage as module

    now = [100.0]
    monkeypatch.setattr(module, "_clock", lambda: now[0])
    cell = ("lifecycle", "list", "past expired keys")
    caps = Capabilities(ttl=True, settles_cancelled_writes=True)
    assert cell not in Reach(caps, reopens=False).cells()
    reach = Reach(caps, reopens=False, expires=True)
    assert cell in reach.cells()
    rec = CoverageRecorder()
    async with CoverageProbe(MemoryStorage(), "t", reach, into=rec, ttl=10) as s:
        await s.put("p/a", b"1")
        await s.put("p/b", b"1")  # both expire at 110
        now[0] = 111
        await s.put("p/c", b"1")
        assert [k async for k in s.list("p/", start_after="p/b")] == ["p/c"]
        assert cell not in _cells(rec)  # start_after passed the expired keys
        assert [k async for k in s.list("p/c")] == ["p/c"]
        assert cell not in _cells(rec)  # none of its range expired
        async for _ in s.list("p/"):  # MemoryStorage keeps them: the range has expired keys
            pass
        assert cell in _cells(rec)

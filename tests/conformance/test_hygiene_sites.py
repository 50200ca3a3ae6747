"""Hygiene findings name where the leaked task or coroutine was created (issue 21, point 4)."""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import warnings

import pytest
from checkpointkit.conformance.hygiene import HygieneError, frozen_heap, hygiene


async def _forever() -> None:
    await asyncio.Event().wait()


async def _nothing() -> None:
    return None


def _leak_a_task() -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(_forever())  # the site to be named


async def test_a_pending_task_finding_names_the_line_that_created_it() -> None:
    leaked: list[asyncio.Task[None]] = []
    with pytest.raises(HygieneError) as caught:
        async with hygiene():
            leaked.append(_leak_a_task())
    leaked[0].cancel()
    await asyncio.gather(*leaked, return_exceptions=True)
    message = str(caught.value)
    assert "pending task" in message and "_forever" in message
    assert f"created at {__file__}:" in message and "in _leak_a_task" in message


async def test_a_never_awaited_coroutine_finding_names_the_line_that_made_it() -> None:
    async def make_and_drop() -> None:
        async with hygiene():
            coro = _nothing()  # never awaited
            del coro
            gc.collect()

    with pytest.raises(HygieneError) as caught:
        await make_and_drop()
    message = str(caught.value)
    assert "never awaited" in message
    assert "Coroutine created at" in message and __file__ in message


async def test_a_clean_block_leaves_the_loop_and_interpreter_as_they_were() -> None:
    loop = asyncio.get_running_loop()
    factory, depth = loop.get_task_factory(), sys.get_coroutine_origin_tracking_depth()
    with warnings.catch_warnings():
        async with hygiene():
            await asyncio.create_task(_nothing())
    assert loop.get_task_factory() is factory
    assert sys.get_coroutine_origin_tracking_depth() == depth


def _garbage_holding_an_open_socket() -> None:
    """An unclosed socket in a reference cycle: only the garbage collector frees it, with a
    ResourceWarning."""
    cycle: list[object] = [socket.socket()]
    cycle.append(cycle)


async def test_a_nested_block_blames_nothing_from_before_the_outer_one_on_it() -> None:
    """Garbage left before a block (a socket an earlier test leaked) is not the block's, also
    when another block runs inside it: the inner block's thaw must not hand the outer one's
    frozen objects to its collection (``gc.unfreeze`` thaws the whole process)."""
    gc.collect()
    gc.disable()  # the garbage must still be there when the blocks start
    try:
        _garbage_holding_an_open_socket()
        async with hygiene(check=False) as outer, hygiene(check=False) as inner:
            pass
        found = outer.findings + inner.findings
        assert not [f for f in found if "socket" in f], found
    finally:
        gc.enable()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()  # the socket of before the blocks, collected here on purpose


async def test_a_nested_block_still_finds_what_leaks_inside_it() -> None:
    """The twin: a socket left as garbage inside the inner block is found."""
    async with hygiene(check=False) as outer, hygiene(check=False) as inner:
        _garbage_holding_an_open_socket()
    assert [f for f in inner.findings if "unclosed <socket.socket" in f], inner.findings
    assert outer.findings == []


async def test_a_block_inside_a_frozen_heap_blames_nothing_from_before_it() -> None:
    """`run` freezes the heap around its pytest session: garbage left inside the session
    before a test's block (an earlier test's socket) is still not that block's, and
    garbage from before the session is left to the collections after it."""
    gc.collect()
    gc.disable()  # the garbage must still be there when the blocks start
    try:
        _garbage_holding_an_open_socket()  # before the session
        with frozen_heap():
            _garbage_holding_an_open_socket()  # inside it, before the block
            async with hygiene(check=False) as first:
                pass
            async with hygiene(check=False) as second:
                pass
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                gc.collect()  # the session's end: finds only what the session allocated
        found = first.findings + second.findings
        assert not [f for f in found if "socket" in f], found
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)], caught
    finally:
        gc.enable()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()  # the sockets of before the blocks, collected here on purpose


async def test_a_block_inside_a_frozen_heap_still_finds_what_leaks_inside_it() -> None:
    """The twin: a socket left as garbage inside a block within a frozen heap is found,
    in the second block too (the first left the heap frozen)."""
    with frozen_heap():
        async with hygiene(check=False) as first:
            _garbage_holding_an_open_socket()
        async with hygiene(check=False) as second:
            _garbage_holding_an_open_socket()
    for report in (first, second):
        assert [f for f in report.findings if "unclosed <socket.socket" in f], report.findings


async def test_a_frozen_heap_inside_a_block_hides_nothing_from_it() -> None:
    """`run` called inside a hygiene block: the block still finds what leaked before and
    inside the frozen heap (which froze nothing: the block had frozen the heap)."""
    async with hygiene(check=False) as outer:
        _garbage_holding_an_open_socket()
        with frozen_heap():
            _garbage_holding_an_open_socket()
    found = [f for f in outer.findings if "unclosed <socket.socket" in f]
    assert len(found) == 2, outer.findings


def test_a_collection_inside_a_frozen_heap_costs_only_what_it_allocated() -> None:
    """The session's closing ``gc.collect()`` leaves the objects of before the session
    alone (so it does not walk the caller's whole heap); they are collected after it."""
    gc.collect()
    gc.disable()
    try:
        _garbage_holding_an_open_socket()
        with warnings.catch_warnings(record=True) as inside:
            warnings.simplefilter("always")
            with frozen_heap():
                gc.collect()
        with warnings.catch_warnings(record=True) as after:
            warnings.simplefilter("always")
            gc.collect()
        assert not [w for w in inside if issubclass(w.category, ResourceWarning)], inside
        assert [w for w in after if issubclass(w.category, ResourceWarning)], after
    finally:
        gc.enable()

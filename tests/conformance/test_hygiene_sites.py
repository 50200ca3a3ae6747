"""Hygiene findings name where the leaked task or coroutine was created (issue 21, point 4)."""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import warnings

import pytest
from checkpointkit.conformance.hygiene import HygieneError, hygiene


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

"""`StorageBase.list` pages through `_list_page`; a page that cannot move the listing is an
error naming the adapter, never a listing that asks for the same page forever."""

from __future__ import annotations

from typing import Any

import pytest
from checkpointkit.errors import StorageError
from checkpointkit.storage import ListPage, StorageBase


class _Pages(StorageBase):
    """Answers each `_list_page` call from a script: ``(keys, cursor)`` per call (the other
    backend calls stay `StorageBase`'s, which raise NotImplementedError)."""

    def __init__(self, script: list[tuple[list[str], Any]]) -> None:
        super().__init__()
        self.script = script
        self.calls: list[tuple[str | None, Any]] = []

    async def _list_page(
        self, prefix: str, start_after: str | None, cursor: Any, limit: int
    ) -> ListPage:
        self.calls.append((start_after, cursor))
        assert len(self.calls) <= 10, "the listing asked for the same page again and again"
        keys, next_cursor = self.script[min(len(self.calls), len(self.script)) - 1]
        return ListPage(keys, next_cursor)


async def test_a_page_without_keys_that_moves_the_cursor_goes_on() -> None:
    storage = _Pages([(["a"], "a"), ([], "m"), (["x"], None)])
    assert [k async for k in storage.list()] == ["a", "x"]
    assert storage.calls == [(None, None), (None, "a"), (None, "m")]


@pytest.mark.parametrize(
    ("script", "start_after", "stuck_at"),
    [
        ([(["a"], "a"), ([], "a")], None, "'a'"),  # a later page gives its cursor back
        ([([], "k")], "k", "'k'"),  # the first page gives back start_after
    ],
)
async def test_a_page_without_keys_that_gives_back_its_position_is_an_error(
    script: list[tuple[list[str], Any]], start_after: str | None, stuck_at: str
) -> None:
    storage = _Pages(script)
    with pytest.raises(StorageError, match=f"_Pages._list_page returned no keys .*{stuck_at}"):
        async for _ in storage.list("", start_after=start_after):
            pass
    assert len(storage.calls) == len(script)

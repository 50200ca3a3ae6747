"""Group ``bad-input``: invalid keys and data are refused clearly, and nothing stored is lost."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from ..errors import InvalidKey
from ..storage import Storage
from .checks import call_text, describe, expect_keys, expect_raises, expect_value, fail
from .clauses import checks
from .fixtures import StorageFixtures

__all__ = ["INVALID_KEYS", "BadInputTests"]

INVALID_KEYS: dict[str, Any] = {
    "empty": "",
    "dot-dot-segment": "a/../b",
    "dot-dot-alone": "..",
    "dot-segment": "a/./b",
    "empty-segment": "a//b",
    "leading-slash": "/a",
    "trailing-slash": "a/",
    "nul": "a\x00b",
    "backslash": "a\\b",
    "control-character": "a\x01b",
    "2-kb": "k" * 2048,
    "lone-surrogate": "a\ud800b",
    "not-a-str": 123,
}
"""Keys every adapter must refuse with InvalidKey, by case name."""

BAD_DATA: dict[str, Any] = {
    "str": "text",
    "int": 7,
    "none": None,
    "list": [1, 2],
    "dict": {"a": 1},
}
"""Values that are not bytes-like, refused with TypeError."""

SENTINELS = {"keep/a": b"alpha", "keep/b": b"beta", "keep/c/d": b"gamma"}


async def _plant(storage: Storage) -> None:
    for key, data in SENTINELS.items():
        await storage.put(key, data)


async def _check_sentinels(storage: Storage, after: str) -> None:
    __tracebackhide__ = True
    promise = f"refused input must lose nothing stored ({after})"
    for key, data in SENTINELS.items():
        await expect_value(storage, key, data, promise=promise)
    await expect_keys(storage, sorted(SENTINELS), promise=promise)


class BadInputTests(StorageFixtures):
    """Invalid keys, prefixes, data and arguments."""

    conformance_group: ClassVar[str | None] = "bad-input"

    @checks(
        "error.invalid-key",
        "key.invalid.empty",
        "key.invalid.surrogate",
        "key.invalid.character",
        "key.invalid.slash",
        "key.invalid.empty-segment",
        "key.invalid.dot",
        "key.invalid.dotdot",
        "key.too-long",
        "error.loses-nothing",
    )
    @pytest.mark.parametrize("case", list(INVALID_KEYS))
    async def test_invalid_key_is_rejected_with_invalid_key(
        self, storage: Storage, case: str
    ) -> None:
        key = INVALID_KEYS[case]
        await _plant(storage)
        errors: tuple[type[BaseException], ...] = (
            (InvalidKey, TypeError) if not isinstance(key, str) else (InvalidKey,)
        )
        promise = f"an invalid key ({case}) must be rejected with InvalidKey"
        await expect_raises(
            errors, storage.put(key, b"x"), promise=promise, call=call_text("put", key, b"x")
        )
        await expect_raises(
            errors,
            storage.put(key, b"x", mode="create"),
            promise=promise,
            call=call_text("put", key, b"x", mode="create"),
        )
        await expect_raises(errors, storage.get(key), promise=promise, call=call_text("get", key))
        await expect_raises(
            errors, storage.delete(key), promise=promise, call=call_text("delete", key)
        )
        await _check_sentinels(storage, f"after the {case} key")

    @checks("error.names-key", "error.invalid-key")
    async def test_invalid_key_error_names_the_key(self, storage: Storage) -> None:
        key = "a//b"
        try:
            await storage.put(key, b"x")
        except InvalidKey as exc:
            if key not in str(exc) and repr(key) not in str(exc):
                fail(
                    "an InvalidKey error must name the key",
                    key=key,
                    expected="the message to contain the key",
                    observed=f"the message is {str(exc)!r}",
                )
        else:
            fail(
                "an invalid key must be rejected",
                key=key,
                expected="InvalidKey",
                observed="the put succeeded",
            )

    @checks("key.prefix", "error.invalid-key", "error.loses-nothing")
    @pytest.mark.parametrize("prefix", ["a//", "../", "a\x00", "/a", "a\\b/"])
    async def test_invalid_list_prefix_is_rejected_with_invalid_key(
        self, storage: Storage, prefix: str
    ) -> None:
        await _plant(storage)
        try:
            keys = [key async for key in storage.list(prefix)]
        except InvalidKey:
            pass
        else:
            fail(
                "an invalid listing prefix must be rejected with InvalidKey",
                expected=f"list({prefix!r}) to raise InvalidKey",
                observed=f"it listed {keys!r}",
            )
        await _check_sentinels(storage, f"after the prefix {prefix!r}")

    @checks("error.data-type", "error.loses-nothing")
    @pytest.mark.parametrize("case", list(BAD_DATA))
    async def test_non_bytes_data_is_rejected_with_type_error(
        self, storage: Storage, case: str
    ) -> None:
        await _plant(storage)
        data = BAD_DATA[case]
        promise = f"non-bytes data ({case}) must be rejected with TypeError"
        await expect_raises(
            TypeError,
            storage.put("keep/a", data),
            promise=promise,
            call=call_text("put", "keep/a", data),
            key="keep/a",
        )
        await expect_raises(
            TypeError,
            storage.put("new", data),
            promise=promise,
            call=call_text("put", "new", data),
            key="new",
        )
        await _check_sentinels(storage, f"after {case} data")

    @checks("put.mode.unknown", "error.loses-nothing")
    async def test_unknown_put_mode_is_rejected(self, storage: Storage) -> None:
        await _plant(storage)
        await expect_raises(
            (ValueError, TypeError),
            storage.put("keep/a", b"x", mode="append"),  # type: ignore[arg-type]
            promise="an unknown put mode must be rejected",
            call="put('keep/a', b'x', mode='append')",
            key="keep/a",
        )
        await _check_sentinels(storage, "after an unknown put mode")

    @checks("error.limit-negative")
    async def test_negative_list_limit_is_rejected(self, storage: Storage) -> None:
        await _plant(storage)
        try:
            keys = [key async for key in storage.list("", limit=-1)]
        except ValueError:
            pass
        else:
            fail(
                "a negative listing limit must be rejected",
                expected="list('', limit=-1) to raise ValueError",
                observed=f"it listed {keys!r}",
            )

    @checks("error.arg-type", "error.loses-nothing")
    async def test_non_str_if_match_is_rejected(self, storage: Storage) -> None:
        await _plant(storage)
        try:
            existed = await storage.delete("keep/a", if_match=12)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            pass
        else:
            fail(
                "a version that is not a str must be rejected",
                key="keep/a",
                expected="delete('keep/a', if_match=12) to raise TypeError",
                observed=f"it returned {describe(existed)}",
            )
        await _check_sentinels(storage, "after a non-str if_match")

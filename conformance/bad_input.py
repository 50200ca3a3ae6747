"""Group ``bad-input``: invalid keys and data are refused clearly, and nothing stored is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest

from ..errors import InvalidKey, PreconditionFailed
from ..storage import IfMatch, PutMode, Storage
from .checks import call_text, describe, expect_keys, expect_raises, expect_value, fail
from .clauses import checks
from .credentials import expect_no_secret, secrets_of, shown
from .fixtures import raw_storage
from .pitfalls import BadInputPitfallTests
from .target import Target

__all__ = ["INVALID_KEYS", "BadInputTests", "versions_of_another_form"]

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

_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def versions_of_another_form(version: str) -> dict[str, str]:
    """Strings near ``version`` that are not it, by case name: none may match it.

    Versions compare as exact strings, so a leading zero, a sign, a space, other
    digits that ``int`` reads as the same number, another letter case, quotes
    added or taken away, HTTP's ``*``, the empty string and an HTTP list of entity
    tags that holds it (``x", "v``, which an adapter that wraps the version in
    quotes sends as ``If-Match: "x", "v"``, and a server matches by its second
    element) all fail the condition (PreconditionFailed), and nothing else.
    """
    bare = version.strip('"')
    cases = {
        "leading-zero": "0" + version,
        "plus-sign": "+" + version,
        "space-before": " " + version,
        "space-after": version + " ",
        "newline-after": version + "\n",
        "superscript-digits": version.translate(_SUPERSCRIPT),
        "arabic-indic-digits": version.translate(_ARABIC_INDIC),
        "superscript-two": "²",
        "upper-case": version.upper(),
        "lower-case": version.lower(),
        "quoted": f'"{version}"',
        "unquoted": version.strip('"'),
        "star": "*",
        "empty": "",
        "entity-tag-list, wrapped": f'x", "{bare}',
        "entity-tag-list": f'"x", {version}',
    }
    return {name: text for name, text in cases.items() if text != version}


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


async def _after_close(storage: Storage) -> object:
    await storage.aclose()
    return await storage.get("secret/k")


class BadInputTests(BadInputPitfallTests):
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

    @checks("error.no-credentials")
    async def test_no_repr_or_error_shows_the_password_of_the_url(
        self, storage: Storage, storage_target: Target | None
    ) -> None:
        """Where the target was made from a storage URL with a password: the storage's
        ``repr`` and ``str``, and the errors of a missing key, an invalid key, a refused
        create-only put and a call after ``aclose()``, with their chained causes."""
        found = secrets_of(None if storage_target is None else storage_target.spec)
        if not found:
            pytest.skip(
                "the target was not made from a storage URL with a password (Target.spec): "
                "no password to look for"
            )
        raw = raw_storage(storage)
        expect_no_secret(found, "the storage's repr and str", shown(raw))
        await storage.put("secret/k", b"x")
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("get of a missing key", lambda: storage.get("secret/missing")),
            ("an invalid key", lambda: storage.put("a//b", b"x")),
        ]
        if storage.capabilities.conditional_put:
            calls.append(
                ("a refused create-only put", lambda: storage.put("secret/k", b"y", mode="create"))
            )
        calls.append(("a call after aclose()", lambda: _after_close(storage)))
        for what, call in calls:
            try:
                await call()
            except Exception as exc:
                expect_no_secret(found, f"the error of {what}", shown(exc))

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
        self, storage: Storage, case: str, supports_conditional_put: bool
    ) -> None:
        """Every put mode checks its data: a create-only or if-match put that takes another
        path (a compare-and-set script, a conditional request) refuses it too."""
        await _plant(storage)
        data = BAD_DATA[case]
        promise = f"non-bytes data ({case}) must be rejected with TypeError"
        calls: list[tuple[str, PutMode]] = [("keep/a", "overwrite"), ("new", "overwrite")]
        if supports_conditional_put:
            kept = await storage.get("keep/a")
            calls += [("new", "create"), ("keep/a", IfMatch(kept.version))]
        for key, mode in calls:
            shown_mode = {} if mode == "overwrite" else {"mode": mode}
            await expect_raises(
                TypeError,
                storage.put(key, data, mode=mode),
                promise=promise,
                call=call_text("put", key, data, **shown_mode),
                key=key,
                detail="check the data's type before the put's mode sends it down its own "
                "path; a client library that encodes a str or int stores bytes the caller "
                "never gave",
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
    async def test_non_str_if_match_is_rejected(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        """A version that is not a str is refused by a conditional delete and, where puts
        are conditional, by ``put(mode=IfMatch(...))``, even one that would match the
        stored version once turned into a str."""
        await _plant(storage)
        detail = (
            "refuse a version that is not a str before it reaches the backend; a client "
            "library that encodes it (7 as b'7') makes it match a version it is not"
        )
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
                detail=detail,
            )
        if supports_conditional_put:
            version = await storage.put("m", b"kept")
            others: list[object] = [12, version.encode()]
            if version.isdigit():
                others.insert(0, int(version))
            for other in others:
                await expect_raises(
                    (TypeError, ValueError),
                    storage.put("m", b"lost", mode=IfMatch(other)),  # type: ignore[arg-type]
                    promise="a version that is not a str must be rejected",
                    call=f"put('m', b'lost', mode=IfMatch({other!r}))",
                    key="m",
                    detail=detail,
                )
            await expect_value(
                storage,
                "m",
                b"kept",
                version=version,
                promise="a put with a version that is not a str must change nothing",
            )
            await storage.delete("m")
        await _check_sentinels(storage, "after a non-str if_match")

    @checks("version.exact-match", "put.if-match.foreign", "error.loses-nothing")
    async def test_if_match_version_of_another_form_never_matches(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        if not supports_conditional_put:
            pytest.skip("the adapter does not declare the conditional_put capability")
        await _plant(storage)
        version = await storage.put("m", b"kept")
        for case, other in versions_of_another_form(version).items():
            promise = (
                f"versions compare as exact strings: {other!r} ({case}) must not match "
                f"{version!r}, and fails with PreconditionFailed"
            )
            await expect_raises(
                PreconditionFailed,
                storage.put("m", b"lost", mode=IfMatch(other)),
                promise=promise,
                call=f"put('m', b'lost', mode=IfMatch({other!r}))",
                key="m",
            )
            await expect_raises(
                PreconditionFailed,
                storage.delete("m", if_match=other),
                promise=promise,
                call=f"delete('m', if_match={other!r})",
                key="m",
            )
            await expect_value(
                storage, "m", b"kept", version=version, promise=f"{promise}; nothing changes"
            )
        await storage.delete("m")
        await _check_sentinels(storage, "after versions of another form")

    @checks("error.own-call", "put.if-match.foreign")
    async def test_bad_if_match_version_fails_only_its_own_call(
        self, storage: Storage, supports_conditional_put: bool
    ) -> None:
        if not supports_conditional_put:
            pytest.skip("the adapter does not declare the conditional_put capability")
        await _plant(storage)
        version = await storage.put("m", b"kept")
        bad = [IfMatch("\u00b2"), IfMatch("0" + version), IfMatch("")]
        good = [f"good/{i}" for i in range(7)]
        results = await asyncio.gather(
            *[storage.put("m", b"lost", mode=mode) for mode in bad],
            *[storage.put(key, key.encode()) for key in good],
            return_exceptions=True,
        )
        promise = (
            "a put with a version that cannot match fails its own call with "
            "PreconditionFailed, and nothing else: the writes issued with it all land"
        )
        for mode, result in zip(bad, results, strict=False):
            if not isinstance(result, PreconditionFailed):
                fail(
                    promise,
                    key="m",
                    expected=f"put('m', b'lost', mode={mode!r}) to raise PreconditionFailed",
                    observed=f"it gave {describe(result)}",
                )
        for key, result in zip(good, results[len(bad) :], strict=True):
            if isinstance(result, BaseException):
                fail(
                    promise,
                    key=key,
                    expected=f"put({key!r}, ...) issued at the same time to succeed",
                    observed=f"it raised {describe(result)}",
                )
            await expect_value(storage, key, key.encode(), promise=promise)
        await expect_value(storage, "m", b"kept", version=version, promise=promise)
        for key in ["m", *good]:
            await storage.delete(key)
        await _check_sentinels(storage, "after bad versions among good writes")

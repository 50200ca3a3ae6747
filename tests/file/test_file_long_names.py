"""Segments whose names would pass 255 bytes: shortened names, sidecars, exact listing."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import re
import threading
from pathlib import Path
from urllib.parse import quote

import pytest
from checkpointkit import IfMatch, NotFound, PreconditionFailed, validate_key
from checkpointkit.adapters import file as file_module
from checkpointkit.adapters.file import FileStorage
from checkpointkit.keys import MAX_KEY_BYTES

UPPER = "X" * 200  # 600 bytes encoded
ACCENTED = "é" * 100  # 200 UTF-8 bytes, 600 encoded
HUGE = "runs/" + "Ä" * 509 + "x"  # exactly 1,024 bytes, one 1,019-byte segment
LONG_DIR = "Dir" * 90  # 450 bytes encoded: a shortened directory

LONG_KEYS = [
    "x" * 200,
    UPPER,
    ACCENTED,
    "deep/" + "y" * 200 + "/leaf",
    HUGE,
    f"{LONG_DIR}/k",
    f"{LONG_DIR}/{UPPER}/{ACCENTED}",
    f"a/{LONG_DIR}/b/{ACCENTED}/c",
]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if "#locks" not in p.parts)


def sidecars(root: Path) -> list[Path]:
    return sorted(root.rglob("#*.name"))


def temp_files(root: Path) -> list[Path]:
    return sorted(root.rglob("#*.tmp"))


async def keys_of(s: FileStorage, prefix: str = "", **kw: object) -> list[str]:
    return [k async for k in s.list(prefix, **kw)]  # type: ignore[arg-type]


def digest(segment: str) -> str:
    return hashlib.sha256(segment.encode()).hexdigest()[:32]


async def test_long_segments_round_trip(fs: FileStorage) -> None:
    assert len(HUGE.encode()) == MAX_KEY_BYTES
    versions = {k: await fs.put(k, k.encode()) for k in LONG_KEYS}
    for k in LONG_KEYS:
        assert await fs.get(k) == (k.encode(), versions[k])
    assert await keys_of(fs) == sorted(LONG_KEYS)


async def test_every_name_on_disk_fits_name_max(fs: FileStorage, tmp_path: Path) -> None:
    for k in LONG_KEYS:
        await fs.put(k, b"")
    names = [p.name for p in (tmp_path / "root").rglob("*")]
    assert max(len(n.encode()) for n in names) <= 255
    shortened = [n for n in names if "!" in n]
    assert shortened
    assert all(len(n) <= 184 for n in shortened), shortened


async def test_names_that_fit_are_not_shortened(fs: FileStorage, tmp_path: Path) -> None:
    """The names of keys stored before shortening existed are unchanged (same data, same key)."""
    root = tmp_path / "root"
    await fs.put("d/" + "x" * 255, b"1")  # 255 bytes: the longest plain file name
    await fs.put("y" * 254 + "/leaf", b"2")  # 254 + '@'
    await fs.put("é" * 42, b"3")  # 252 bytes encoded
    await fs.put("e/" + "x" * 256, b"4")  # one byte more: shortened
    await fs.put("y" * 255 + "/leaf", b"5")  # as a directory, 256 bytes: shortened
    await fs.put("é" * 43, b"6")  # 258 bytes encoded: shortened
    assert (root / "d@" / ("x" * 255)).is_file()
    assert (root / ("y" * 254 + "@") / "leaf").is_file()
    assert (root / ("%C3%A9" * 42)).is_file()
    assert (root / "e@" / f"{'x' * 150}!{digest('x' * 256)}").is_file()
    assert (root / f"{'y' * 150}!{digest('y' * 255)}@" / "leaf").is_file()
    assert (root / f"#{digest('y' * 255)}.name").read_bytes() == b"y" * 255
    assert (root / f"{'%C3%A9' * 25}!{digest('é' * 43)}").is_file()
    assert [(await fs.get(k)).data async for k in fs.list()] == [b"1", b"4", b"2", b"5", b"3", b"6"]


async def test_names_are_quote_with_upper_case_escaped(tmp_path: Path) -> None:
    """The on-disk name of a segment, checked against the documented recipe."""

    def reference(segment: str) -> str:
        def upper(match: re.Match[str]) -> str:
            return match[0] if len(match[0]) == 3 else f"%{ord(match[0]):02X}"

        return re.sub(r"%[0-9A-F]{2}|[A-Z]", upper, quote(segment, safe=""))

    rng = random.Random(5)
    alphabet = [*"aZz09_.-~%!#@ +/", "é", "É", "ß", "ẞ", "日", "\U0001f642", "\u0301"]
    segments = {
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(150)
    }
    segments = {s for s in segments if "/" not in s and s not in (".", "..")}
    async with FileStorage(tmp_path / "root", fsync=False) as s:
        for segment in segments:
            await s.put(f"d/{segment}", b"")
        names = set(os.listdir(tmp_path / "root" / "d@"))
        assert names == {reference(segment) for segment in segments}
        assert await keys_of(s, "d/") == sorted(f"d/{segment}" for segment in segments)


async def test_shortened_name_head_is_never_cut_inside_an_escape(
    fs: FileStorage, tmp_path: Path
) -> None:
    for pad in range(3):  # move the escapes across the cut at 150 bytes
        segment = "a" * pad + "É" * 100
        await fs.put(segment, b"")
    for name in os.listdir(tmp_path / "root"):
        if "!" in name:
            head = name.split("!")[0]
            assert len(head) <= 150
            assert head.rfind("%") <= len(head) - 3, name  # every escape is whole


async def test_long_keys_list_in_exact_order_with_short_siblings(fs: FileStorage) -> None:
    base = "Ab" * 60  # 360 bytes encoded
    keys = [
        base,
        base + "/x",
        base + "-",
        base + "0",
        base + "~",
        base + "!",
        base[:-1],
        base[:50],
        base[:50] + "/y",
        base + "b" * 200,
        base + "B" * 200,
        base + "/" + base,
        "Ab",
        "ab" * 200,
        "Ac",
        "é" * 130,
        "é" * 129 + "f",
        "é" * 129 + "ê",
    ]
    for k in random.Random(3).sample(keys, len(keys)):
        await fs.put(k, k.encode())
    ordered = sorted(keys)
    assert await keys_of(fs) == ordered
    assert await keys_of(fs, base) == [k for k in ordered if k.startswith(base)]
    assert await keys_of(fs, base + "/") == [base + "/" + base, base + "/x"]
    assert await keys_of(fs, base[:70]) == [k for k in ordered if k.startswith(base[:70])]
    for page_size in (1, 2, 5):
        fs.page_size = page_size  # type: ignore[misc]
        assert await keys_of(fs) == ordered
        for i, after in enumerate(ordered):
            assert await keys_of(fs, start_after=after, limit=3) == ordered[i + 1 : i + 4]


async def test_long_keys_match_a_sorted_model(fs: FileStorage) -> None:
    """Random keys mixing short and long segments that share prefixes, listed every way."""
    rng = random.Random(11)
    stems = ["a", "B", "é", "Ab" * 60, "ab" * 130, "É" * 50, "z" * 254, "z" * 255]
    keys: set[str] = set()
    while len(keys) < 40:
        parts = [rng.choice(stems) + rng.choice(["", "", "x", "Y", "-", "ü"]) for _ in range(3)]
        key = "/".join(parts[: rng.randint(1, 3)])
        if len(key.encode()) <= MAX_KEY_BYTES:
            keys.add(validate_key(key))
    for k in keys:
        await fs.put(k, b"")
    fs.page_size = 3  # type: ignore[misc]
    ordered = sorted(keys)
    probes = sorted({k[:i] for k in keys for i in range(len(k) + 1)})
    for _ in range(60):
        prefix = rng.choice(probes)
        if prefix.endswith("/") and prefix[:-1].endswith("/"):
            continue
        after = rng.choice([None, rng.choice(probes), rng.choice(ordered)])
        limit = rng.choice([None, 1, 4])
        want = [k for k in ordered if k.startswith(prefix) and (after is None or k > after)]
        got = await keys_of(fs, prefix, start_after=after, limit=limit)
        assert got == (want if limit is None else want[:limit]), (prefix, after, limit)


async def test_two_long_segments_with_the_same_head_stay_distinct(
    fs: FileStorage, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    one, two = "Q" * 100 + "one", "Q" * 100 + "two"  # the same first 150 encoded bytes
    v1 = await fs.put(one, b"1")
    v2 = await fs.put(two, b"2")
    await fs.put(f"{one}/child", b"c1")
    names = sorted(n for n in os.listdir(root) if "!" in n)
    assert len(names) == 3
    assert len({n.split("!")[0] for n in names}) == 1  # one head, three entries
    assert await fs.get(one) == (b"1", v1)
    assert await fs.get(two) == (b"2", v2)
    assert await keys_of(fs) == [one, f"{one}/child", two]
    assert await fs.delete(one)
    assert await fs.get(two) == (b"2", v2)
    assert await keys_of(fs) == [f"{one}/child", two]
    with pytest.raises(NotFound):
        await fs.get(one)


async def test_conditional_writes_and_deletes_on_long_keys(fs: FileStorage) -> None:
    for key in (UPPER, f"{LONG_DIR}/{UPPER}", HUGE):
        v1 = await fs.put(key, b"first", mode="create")
        with pytest.raises(PreconditionFailed, match="already exists"):
            await fs.put(key, b"second", mode="create")
        v2 = await fs.put(key, b"second", mode=IfMatch(v1))
        with pytest.raises(PreconditionFailed, match="not " + v1):
            await fs.put(key, b"third", mode=IfMatch(v1))
        with pytest.raises(PreconditionFailed):
            await fs.delete(key, if_match=v1)
        assert await fs.get(key) == (b"second", v2)
        assert await keys_of(fs) == [key]
        assert await fs.delete(key, if_match=v2) is True
        assert await fs.delete(key) is False
        with pytest.raises(PreconditionFailed, match="does not exist"):
            await fs.put(key, b"x", mode=IfMatch(v2))
        with pytest.raises(NotFound):
            await fs.get(key)
        assert await keys_of(fs) == []
        v3 = await fs.put(key, b"again", mode="create")
        assert v3 not in (v1, v2)
        assert await fs.delete(key)


async def test_sidecars_go_with_the_last_entry_that_needs_them(
    fs: FileStorage, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    await fs.put(UPPER, b"file")  # the file and the directory of one segment share a sidecar
    await fs.put(f"{UPPER}/child", b"below")
    assert len(sidecars(root)) == 1
    assert await fs.delete(UPPER)
    assert len(sidecars(root)) == 1  # the directory still needs it
    assert await keys_of(fs) == [f"{UPPER}/child"]
    assert await fs.delete(f"{UPPER}/child")
    assert tree(root) == []
    for k in LONG_KEYS:
        await fs.put(k, b"")
    for k in LONG_KEYS:
        assert await fs.delete(k)
    assert tree(root) == []


async def test_failed_or_refused_put_leaves_no_sidecar(fs: FileStorage, tmp_path: Path) -> None:
    root = tmp_path / "root"
    with pytest.raises(PreconditionFailed):
        await fs.put(UPPER, b"x", mode=IfMatch("0" * 32))
    assert tree(root) == []
    await fs.put(UPPER, b"x")
    with pytest.raises(PreconditionFailed):
        await fs.put(UPPER, b"y", mode="create")
    assert len(sidecars(root)) == 1  # still needed by the stored key
    assert await keys_of(fs) == [UPPER]


async def test_delete_of_a_sibling_during_a_put_never_loses_the_sidecar(tmp_path: Path) -> None:
    """A put whose sidecar is removed after it checked it writes it again under the lock."""
    root = tmp_path / "root"
    reached, release = threading.Event(), threading.Event()

    class Held(FileStorage):
        hold = False

        def _before_commit(self, key: str) -> None:
            if self.hold:
                reached.set()
                assert release.wait(30)

    async with Held(root) as writer, FileStorage(root) as other:
        await other.put(f"{UPPER}/child", b"keeps the sidecar")
        writer.hold = True
        put = asyncio.create_task(writer.put(UPPER, b"file", mode="create"))
        assert await asyncio.to_thread(reached.wait, 10)  # the sidecar was checked
        assert await other.delete(f"{UPPER}/child")  # the last entry needing it: removed
        assert sidecars(root) == []
        release.set()
        version = await put
        assert await other.get(UPPER) == (b"file", version)
        listed = await keys_of(other)
    assert listed == [UPPER]
    assert len(sidecars(root)) == 1


@pytest.mark.parametrize("making", ["file", "directory"])
async def test_sidecar_stays_locked_from_its_check_until_the_entry_exists(
    tmp_path: Path, making: str
) -> None:
    """A delete that would drop the sidecar waits while a put stands between check and entry.

    The writer is held right after its last sidecar check; the other storage
    deletes the only entry that needs the sidecar so far. That delete must
    not get through (it would take the sidecar from under the new entry)
    before the writer has made its entry.
    """
    root = tmp_path / "root"
    reached, release = threading.Event(), threading.Event()

    class Held(FileStorage):
        hold = False

        def _keep_sidecar(self, dirpath: str, long: file_module._Long) -> None:
            super()._keep_sidecar(dirpath, long)
            if self.hold:
                reached.set()
                assert release.wait(30)

    new_key, old_key = (UPPER, f"{UPPER}/child") if making == "file" else (f"{UPPER}/y", UPPER)
    async with Held(root) as writer, FileStorage(root) as other:
        await other.put(old_key, b"old")
        writer.hold = True
        put = asyncio.create_task(writer.put(new_key, b"new", mode="create"))
        assert await asyncio.to_thread(reached.wait, 10)
        delete = asyncio.create_task(other.delete(old_key))
        done, _ = await asyncio.wait({delete}, timeout=0.5)  # generous: a free delete takes ms
        release.set()
        assert not done, "the delete went through while the put held the sidecar's check"
        assert await delete
        version = await put
        assert await keys_of(other) == [new_key]
        assert await other.get(new_key) == (b"new", version)


async def test_entry_without_a_good_sidecar_is_not_listed_and_a_put_repairs_it(
    fs: FileStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only tampering or a power loss with fsync=False can take a sidecar away."""
    root = tmp_path / "root"
    v = await fs.put(UPPER, b"v")
    (sidecar,) = sidecars(root)
    monkeypatch.setattr(file_module, "_NAMES", {})  # forget names decoded so far
    sidecar.unlink()
    assert await keys_of(fs) == []
    assert await fs.get(UPPER) == (b"v", v)  # a get never needs the sidecar
    sidecar.write_bytes(b"X" * 199 + b"Y")  # damaged: not the segment of that name
    assert await keys_of(fs) == []
    await fs.put(UPPER, b"w")
    assert sidecar.read_bytes() == UPPER.encode()
    assert await keys_of(fs) == [UPPER]


async def test_foreign_names_with_a_bang_are_ignored(fs: FileStorage, tmp_path: Path) -> None:
    root = tmp_path / "root"
    await fs.put("k", b"")
    short = "abc"  # a segment whose name is never shortened
    fake = f"{short}!{digest(short)}"
    (root / fake).write_bytes(b"x" * 20)
    (root / f"#{digest(short)}.name").write_bytes(short.encode())
    (root / "no-sidecar!0123456789abcdef0123456789abcdef").write_bytes(b"x" * 20)
    (root / "Upper!0123456789abcdef0123456789abcdef").write_bytes(b"x" * 20)
    (root / "bad!xyz").write_bytes(b"x" * 20)
    assert await keys_of(fs) == ["k"]


async def test_sweep_removes_sidecars_no_entry_needs(fs: FileStorage, tmp_path: Path) -> None:
    """A put killed after writing a sidecar (or a directory) leaves debris that sweep takes."""
    root = tmp_path / "root"
    await fs.put(f"{LONG_DIR}/kept", b"")
    await fs.put(UPPER, b"")
    kept = set(sidecars(root))
    orphan = root / f"#{digest('Z' * 100)}.name"
    orphan.write_bytes(b"Z" * 100)
    empty_dir = root / f"{'%42' * 50}!{digest('B' * 100)}@"  # made, then the put was killed
    empty_dir.mkdir()
    (root / f"#{digest('B' * 100)}.name").write_bytes(b"B" * 100)
    assert await fs.sweep_temp_files() == 0  # all of it is younger than an hour
    assert await fs.sweep_temp_files(older_than=0) == 2
    assert set(sidecars(root)) == kept
    assert not empty_dir.exists()
    assert await keys_of(fs) == sorted([f"{LONG_DIR}/kept", UPPER])


async def test_every_valid_key_fits_under_a_1000_byte_root(tmp_path: Path) -> None:
    """The longest mapped path of a valid key is about 3,060 bytes, PATH_MAX is 4,096."""
    root = tmp_path
    while len(str(root)) < 980:
        root = root / ("r" * min(200, 990 - len(str(root))))
    key = "/".join(["Z" * 84] * 11 + ["Z" * 85])  # 253-byte directories, a 255-byte file
    assert len(key.encode()) <= MAX_KEY_BYTES
    async with FileStorage(root) as s:
        for k in (key, HUGE, "/".join(["É" * 42] * 12)):
            v = await s.put(k, b"fits")
            assert await s.get(k) == (b"fits", v)
            assert await keys_of(s) == [k]
            assert await s.delete(k)


@pytest.mark.parametrize("where", ["leaf", "directory"])
async def test_concurrent_puts_and_deletes_keep_long_keys_listed(
    tmp_path: Path, where: str
) -> None:
    """Deletes of the last key (sidecar removed) race puts of siblings (sidecar needed)."""
    prefix = f"{LONG_DIR}/" if where == "directory" else ""
    failures: list[str] = []

    async def churn(s: FileStorage, key: str, rounds: int) -> None:
        for _ in range(rounds):
            await s.put(key, b"v", mode="create")
            if key not in await keys_of(s, prefix):
                failures.append(key)
            assert await s.delete(key)

    root = tmp_path / "root"
    async with FileStorage(root, fsync=False) as s1, FileStorage(root, fsync=False) as s2:
        if where == "directory":
            jobs = [churn(s, f"{prefix}{n}", 40) for s, n in [(s1, "a"), (s2, "b"), (s1, "c")]]
        else:  # the file and the directory of one segment share a sidecar
            jobs = [churn(s1, UPPER, 40), churn(s2, f"{UPPER}/x", 40)]
        await asyncio.gather(*jobs)
    assert failures == []
    assert tree(root) == []

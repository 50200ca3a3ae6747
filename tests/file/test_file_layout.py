"""What the file adapter does on disk: layout, limits, URLs, debris, errors."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from checkpointkit import (
    CheckpointCorrupted,
    ConfigurationError,
    InvalidKey,
    NotFound,
    StorageUnavailable,
    open_storage,
)
from checkpointkit.adapters.file import FileStorage


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("#*.tmp") if p.is_file()]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if "#locks" not in p.parts)


async def test_layout_maps_segments_to_encoded_names(fs: FileStorage, tmp_path: Path) -> None:
    root = tmp_path / "root"
    v = await fs.put("runs/a b/é#1", b"data")
    await fs.put("runs", b"top")
    path = root / "runs@" / "a%20b@" / "%C3%A9%231"
    raw = path.read_bytes()
    assert raw[16:] == b"data"
    assert raw[:16].hex() == v
    assert (root / "runs").read_bytes()[16:] == b"top"
    assert tree(root) == ["runs", "runs@", "runs@/a%20b@", "runs@/a%20b@/%C3%A9%231"]


async def test_keys_differing_only_by_case_never_share_a_file(
    fs: FileStorage, tmp_path: Path
) -> None:
    """Upper-case letters are escaped, so names never differ only by case (macOS, Windows)."""
    keys = ["Run/a", "run/a", "RUN/A", "rUn/a", "x/É", "x/é", "x/%41", "x/A", "x/a"]
    for k in keys:
        await fs.put(k, k.encode())
    names = tree(tmp_path / "root")
    assert len({n.lower() for n in names}) == len(names), names
    assert "%52un@" in names
    for k in keys:
        assert (await fs.get(k)).data == k.encode()
    assert [k async for k in fs.list()] == sorted(keys)


async def test_data_survives_a_new_instance(tmp_path: Path) -> None:
    async with FileStorage(tmp_path / "r") as s:
        v = await s.put("a/b", b"kept")
    async with FileStorage(tmp_path / "r", create=False) as s:
        assert await s.get("a/b") == (b"kept", v)
        assert [k async for k in s.list()] == ["a/b"]


async def test_two_instances_share_one_root(tmp_path: Path) -> None:
    async with FileStorage(tmp_path / "r") as s1, FileStorage(tmp_path / "r") as s2:
        v = await s1.put("k", b"1")
        assert await s2.get("k") == (b"1", v)
        assert await s2.delete("k", if_match=v)
        with pytest.raises(NotFound):
            await s1.get("k")


async def test_fsync_false_still_round_trips(tmp_path: Path) -> None:
    async with FileStorage(tmp_path / "r", fsync=False) as s:
        v = await s.put("a/b", b"x", mode="create")
        assert await s.get("a/b") == (b"x", v)


async def test_bad_keys_touch_nothing_outside_the_root(tmp_path: Path) -> None:
    async with FileStorage(tmp_path / "root") as s:
        for key in ["../escape", "a/../../escape", "/etc/passwd", "a\\..\\b", "x\x00", "a//b"]:
            with pytest.raises(InvalidKey):
                await s.put(key, b"x")
        await s.put("...", b"dots are a name")  # not '..': an ordinary segment
        await s.put("a/..b", b"x")
    assert sorted(os.listdir(tmp_path)) == ["root"]
    assert tree(tmp_path / "root") == ["...", "a@", "a@/..b"]


async def test_list_ignores_foreign_and_internal_names(fs: FileStorage, tmp_path: Path) -> None:
    root = tmp_path / "root"
    await fs.put("a/k", b"1")
    for name in [
        "has space",
        "%2F",
        "%2e",
        "%2E%2E",
        "lower%c3%a9",
        "%ZZ",
        "%C3",
        "x#y",
        "#locks2",
    ]:
        (root / name).write_bytes(b"x" * 20)
    (root / "@").mkdir()
    (root / "@" / "k").write_bytes(b"x" * 20)
    (root / ".@").mkdir()
    (root / "a@" / "#0123456789abcdef.tmp").write_bytes(b"x" * 20)
    assert [k async for k in fs.list()] == ["a/k"]


async def test_delete_removes_emptied_directories(fs: FileStorage, tmp_path: Path) -> None:
    root = tmp_path / "root"
    await fs.put("a/b/c/d", b"1")
    await fs.put("a/x", b"2")
    assert await fs.delete("a/b/c/d")
    assert tree(root) == ["a@", "a@/x"]
    assert await fs.delete("a/x")
    assert tree(root) == []
    await fs.put("a/b/c/d", b"3")  # directories come back as needed
    assert (await fs.get("a/b/c/d")).data == b"3"


async def test_sweep_removes_old_temp_files_and_empty_dirs(fs: FileStorage, tmp_path: Path) -> None:
    root = tmp_path / "root"
    await fs.put("a/b/k", b"1")
    old = root / "a@" / "b@" / "#00000000000000aa.tmp"
    new = root / "a@" / "#00000000000000bb.tmp"
    orphan_dir = root / "z@" / "y@"
    orphan_dir.mkdir(parents=True)
    orphan = orphan_dir / "#00000000000000cc.tmp"
    for p in (old, new, orphan):
        p.write_bytes(b"partial")
    past = time.time() - 7200
    os.utime(old, (past, past))
    os.utime(orphan, (past, past))
    assert await fs.sweep_temp_files() == 2
    assert temp_files(root) == [new]
    assert not (root / "z@").exists()
    assert (root / "#locks").is_dir()  # the lock files are not debris
    assert await fs.sweep_temp_files(older_than=0) == 1
    assert temp_files(root) == []
    assert (await fs.get("a/b/k")).data == b"1"


async def test_truncated_file_raises_checkpoint_corrupted(fs: FileStorage, tmp_path: Path) -> None:
    await fs.put("k", b"fine")
    (tmp_path / "root" / "k").write_bytes(b"short")
    with pytest.raises(CheckpointCorrupted, match="'k'"):
        await fs.get("k")


async def test_os_errors_become_storage_unavailable(fs: FileStorage, tmp_path: Path) -> None:
    (tmp_path / "root" / "a@").write_bytes(b"a file where a directory belongs")
    with pytest.raises(StorageUnavailable, match="'a/b'") as info:
        await fs.put("a/b", b"x")
    assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(NotFound):
        await fs.get("a/b")


def test_missing_root_without_create_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigurationError, match="nope"):
        FileStorage(missing, create=False)
    assert not missing.exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="not a directory"):
        FileStorage(tmp_path / "file")


@pytest.mark.parametrize("create", [True, False])
def test_a_root_another_process_creates_meanwhile_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, create: bool
) -> None:
    """The root is missing when the storage first looks, and a directory when it looks again
    (another process's storage made it in between, as four processes opening one new root
    at once do): it is taken, neither "not a directory" nor "does not exist"."""
    root = tmp_path / "root"
    real = os.path.isdir
    looked: list[str] = []

    def isdir_before_the_other_made_it(path: str | os.PathLike[str]) -> bool:
        if not looked and os.fspath(path) == str(root):
            looked.append(os.fspath(path))
            root.mkdir()  # the other process, right after this first look
            return False
        return real(path)

    monkeypatch.setattr(os.path, "isdir", isdir_before_the_other_made_it)
    storage = FileStorage(root, create=create)
    assert looked and storage.root == str(root)


@pytest.mark.parametrize(
    ("url", "expect"),
    [
        ("file://{abs}/u1", "u1"),
        ("file://localhost{abs}/u2", "u2"),
        ("file://./rel/u3", "rel/u3"),
        ("{abs}/plain/", "plain"),  # a plain path ending with "/" names a directory
        ("rel/plain2/", "rel/plain2"),
        ("file://{abs}/with%20space", "with space"),
    ],
)
async def test_from_url_forms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, expect: str
) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_storage(url.format(abs=tmp_path)) as s:
        assert isinstance(s, FileStorage)
        assert s.root == str(tmp_path / expect)
        await s.put("k", b"v")
    assert (tmp_path / expect / "k").is_file()


def test_from_url_parameters(tmp_path: Path) -> None:
    s = FileStorage.from_url(f"file://{tmp_path}/p?fsync=false&threads=2")
    assert (s.fsync, s.threads) == (False, 2)
    s = FileStorage.from_url(f"file://{tmp_path}/p?fsync=false", fsync=True)
    assert s.fsync is True
    with pytest.raises(ConfigurationError, match="create=False"):
        FileStorage.from_url(f"file://{tmp_path}/missing?create=false")
    with pytest.raises(ConfigurationError, match="'bogus'") as unknown:
        FileStorage.from_url(f"file://{tmp_path}/p?bogus=1")
    assert "known: create, fsync, lock_timeout, threads" in str(unknown.value)
    with pytest.raises(ConfigurationError, match="fsync"):
        FileStorage.from_url(f"file://{tmp_path}/p?fsync=maybe")
    with pytest.raises(ConfigurationError, match="threads='x' is not an int"):
        FileStorage.from_url(f"file://{tmp_path}/p?threads=x")
    with pytest.raises(ConfigurationError, match="lock_timeout='y' is not a number of seconds"):
        FileStorage.from_url(f"file://{tmp_path}/p?lock_timeout=y")
    with pytest.raises(ConfigurationError, match="host 'somehost'"):
        FileStorage.from_url("file://somehost/data")
    with pytest.raises(ConfigurationError, match="no path"):
        FileStorage.from_url("file://")
    with pytest.raises(ConfigurationError, match="colour"):
        FileStorage.from_url(f"file://{tmp_path}/p", colour="blue")


async def test_key_too_long_for_the_path_limit_is_an_invalid_key(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*(["d" * 200] * 10))  # a root path of about 2 KB
    async with FileStorage(deep) as s:
        key = "/".join(["é" * 40] * 12)  # 1,000 bytes; about 2.9 KB on disk
        with pytest.raises(InvalidKey, match="too long for the file system"):
            await s.put(key, b"x")
        with pytest.raises(InvalidKey):
            await s.get(key)
        await s.put("short", b"fine")
        assert [k async for k in s.list()] == ["short"]

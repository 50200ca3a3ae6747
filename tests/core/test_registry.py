"""``open_storage(url)``: built-in schemes, plain paths, plugins through entry points, bad URLs.

Third-party adapters are installed for real: a temporary distribution
(``*.dist-info`` with ``entry_points.txt``) and its module on ``sys.path``, found
by ``importlib.metadata`` exactly as a ``pip install``-ed plugin would be.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from checkpointkit import ConfigurationError, open_storage
from checkpointkit.adapters.file import FileStorage
from checkpointkit.adapters.memory import MemoryStorage
from checkpointkit.adapters.sqlite import SQLiteStorage
from checkpointkit.registry import ENTRY_POINT_GROUP, schemes
from checkpointkit.storage import Storage

BUILTIN = ("memory", "file", "sqlite", "s3", "az", "azure", "redis", "rediss")


# -- built-in schemes ----------------------------------------------------------------------------
async def test_memory_url_opens_a_memory_storage() -> None:
    async with open_storage("memory://") as storage:
        assert isinstance(storage, MemoryStorage)
        await storage.put("k", b"v")


async def test_named_memory_urls_share_their_data() -> None:
    name = f"registry-{uuid.uuid4().hex}"
    async with open_storage(f"memory://{name}") as a, open_storage(f"memory://{name}") as b:
        await a.put("k", b"shared")
        assert (await b.get("k")).data == b"shared"
    async with open_storage("memory://") as private:
        with pytest.raises(KeyError):
            await private.get("k")


async def test_file_url_with_absolute_path_opens_a_file_storage(tmp_path: Path) -> None:
    root = tmp_path / "abs"
    async with open_storage(f"file://{root}") as storage:
        assert isinstance(storage, FileStorage)
        assert Path(storage.root) == root
        await storage.put("runs/a", b"x")
    async with open_storage(f"file://{root}") as again:
        assert (await again.get("runs/a")).data == b"x"


async def test_relative_path_opens_a_sqlite_database_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_storage("./checkpoints") as storage:
        assert isinstance(storage, SQLiteStorage)
        assert Path(storage.path) == tmp_path / "checkpoints"
        await storage.put("k", b"v")
    async with open_storage("checkpoints") as same:
        assert (await same.get("k")).data == b"v"


async def test_relative_path_of_an_existing_directory_opens_a_file_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    async with open_storage("./checkpoints") as storage:
        assert isinstance(storage, FileStorage)
        assert Path(storage.root) == tmp_path / "checkpoints"
        await storage.put("k", b"v")
    async with open_storage("checkpoints") as same:
        assert (await same.get("k")).data == b"v"


async def test_scheme_is_case_insensitive() -> None:
    async with open_storage("MEMORY://") as storage:
        assert isinstance(storage, MemoryStorage)


def test_builtin_schemes_are_known() -> None:
    known = schemes()
    for scheme in BUILTIN:
        assert scheme in known, scheme
    assert known["memory"] == "checkpointkit.adapters.memory:MemoryStorage"


# -- bad URLs ------------------------------------------------------------------------------------
def test_unknown_scheme_names_the_known_schemes() -> None:
    with pytest.raises(ConfigurationError) as info:
        open_storage("ftp://example.invalid/data")
    message = str(info.value)
    assert "'ftp'" in message
    assert "known schemes:" in message
    for scheme in BUILTIN:
        assert scheme in message


@pytest.mark.parametrize("url", ["", None, 42])
def test_empty_or_non_string_url_is_a_configuration_error(url: object) -> None:
    with pytest.raises(ConfigurationError, match="non-empty str"):
        open_storage(url)  # type: ignore[arg-type]


def _chain(exc: BaseException) -> str:
    """The message of ``exc`` and of every error chained to it, as a user could see them."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 10:
        parts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


SECRET = "Sup3rS3cret"


@pytest.mark.parametrize(
    "url",
    [
        f"ftp://alice:{SECRET}@example.invalid/x",  # unknown scheme
        f"ftp://alice@example.com:{SECRET}@host.invalid/x",  # an '@' in the user name
        f"ftp://alice:pa@{SECRET}@host.invalid/x",  # an unescaped '@' in the password
        f"redis://alice:{SECRET}@127.0.0.1:notaport/0",  # a bad port
        f"redis://alice:{SECRET}@127.0.0.1:6379/notadb",  # a bad database
        f"redis://alice:{SECRET}@127.0.0.1:6379/0?bogus=1",  # an unknown parameter
        f"s3://AKIAEXAMPLE:{SECRET}@bucket/prefix",  # credentials do not belong in s3 URLs
        f"az://acct:{SECRET}@container/prefix",  # nor in az URLs
    ],
)
def test_password_in_url_never_appears_in_the_error(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_storage(url)
    assert SECRET not in _chain(info.value)


def test_missing_extra_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the S3 SDK, opening an s3 URL says which extra to install."""
    monkeypatch.setitem(sys.modules, "aioboto3", None)  # import aioboto3 -> ImportError
    monkeypatch.delitem(sys.modules, "checkpointkit.adapters.s3", raising=False)
    with pytest.raises(ConfigurationError, match=r"checkpointkit\[s3\]"):
        open_storage("s3://bucket/prefix")


# -- plugins through entry points ---------------------------------------------------------------
@dataclass
class Plugin:
    """A temporary distribution on sys.path: its module and its entry points."""

    module: str
    dist: Path


Install = Callable[[str, dict[str, str]], Plugin]


@pytest.fixture
def install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    installed: list[str] = []

    def install(source: str, entry_points: dict[str, str]) -> Plugin:
        """Write ``source`` as a module and register ``scheme = {module}:Attr`` entry points."""
        module = f"ckplugin_{uuid.uuid4().hex[:12]}"
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        dist = site / f"{module}-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
        lines = [f"[{ENTRY_POINT_GROUP}]"]
        lines += [f"{name} = {t.format(module=module)}" for name, t in entry_points.items()]
        (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
        installed.append(module)
        importlib.invalidate_caches()
        return Plugin(module, dist)

    yield install
    for module in installed:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()


GOOD_PLUGIN = """
    from checkpointkit.adapters.memory import MemoryStorage

    class PlugStorage(MemoryStorage):
        opened = []

        @classmethod
        def from_url(cls, url, **options):
            cls.opened.append((url, options))
            return cls()
"""


async def test_third_party_scheme_registered_through_entry_point(install_plugin: Install) -> None:
    plugin = install_plugin(GOOD_PLUGIN, {"plugtest": "{module}:PlugStorage"})
    assert schemes()["plugtest"] == f"{plugin.module}:PlugStorage"
    storage = open_storage("plugtest://somewhere/data?x=1", token="t")
    async with storage:
        assert type(storage).__name__ == "PlugStorage"
        assert isinstance(storage, Storage)
        await storage.put("k", b"v")
        assert (await storage.get("k")).data == b"v"
    cls = sys.modules[plugin.module].PlugStorage
    assert cls.opened == [("plugtest://somewhere/data?x=1", {"token": "t"})]


async def test_plugin_cannot_replace_a_builtin_scheme(install_plugin: Install) -> None:
    install_plugin(GOOD_PLUGIN, {"memory": "{module}:PlugStorage"})
    async with open_storage("memory://") as storage:
        assert type(storage) is MemoryStorage


async def test_a_builtin_scheme_opens_without_reading_the_entry_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A built-in scheme wins over a plugin's anyway, so opening one does not read every
    installed distribution's entry points (milliseconds on each open); a plugin's scheme
    still does."""
    from checkpointkit import registry

    read: list[str] = []
    real = registry.entry_points

    def counted(**kwargs: Any) -> Any:
        read.append(kwargs.get("group", ""))
        return real(**kwargs)

    monkeypatch.setattr(registry, "entry_points", counted)
    async with open_storage("memory://") as storage:
        assert isinstance(storage, MemoryStorage)
    assert read == []
    with pytest.raises(ConfigurationError, match="unknown storage scheme 'nosuch'"):
        open_storage("nosuch://x")
    assert read == [ENTRY_POINT_GROUP]


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        ("raise RuntimeError('plugin exploded at import')\n", "{module}:X", "failed to load"),
        ("import not_a_real_module_for_checkpointkit\n", "{module}:X", "could not be imported"),
        ("X = 1\n", "{module}:Missing", "does not exist"),
        ("class X:\n    pass\n", "{module}:X", "has no from_url"),
        ("", "no_such_module_for_checkpointkit:X", "could not be imported"),
    ],
    ids=["raises-at-import", "missing-dependency", "missing-class", "no-from-url", "no-module"],
)
async def test_broken_plugin_is_a_configuration_error_not_a_crash(
    install_plugin: Install,
    source: str,
    target: str,
    expected: str,
) -> None:
    install_plugin(source, {"brokenplug": target})
    with pytest.raises(ConfigurationError, match=expected) as info:
        open_storage("brokenplug://x")
    assert "'brokenplug'" in str(info.value)
    assert "checkpointkit[" not in str(info.value)  # no extra of ours would help
    # the other schemes keep working
    assert "brokenplug" in schemes()
    async with open_storage("memory://") as storage:
        assert isinstance(storage, MemoryStorage)

"""The public names: ``checkpointkit.__all__`` is exact and sorted, every module's ``__all__`` true.

In the manner of httpx's ``tests/test_exported_members.py`` and anyio's
``tests/test_all_attributes.py``: a name added to a module but not exported,
exported but misspelt, or left in ``__all__`` after a rename fails here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import checkpointkit
import pytest
from checkpointkit import ConfigurationError


def _public_attributes(module: ModuleType) -> set[str]:
    """Names a user sees on the module: not private, not a submodule.

    ``dir()``, not ``vars()``: a package that imports its names on first use
    (``__getattr__``) lists them in ``__dir__``; a listed name that cannot be
    got (misspelt in ``__all__``) is not public.
    """
    found = set()
    for name in dir(module):
        if name.startswith("_"):
            continue
        try:
            value = getattr(module, name)
        except AttributeError:
            continue
        if not isinstance(value, ModuleType):
            found.add(name)
    return found


def test_package_all_is_exactly_the_public_names() -> None:
    exported = set(checkpointkit.__all__)
    public = _public_attributes(checkpointkit)
    assert sorted(public - exported) == [], "public but missing from checkpointkit.__all__"
    assert sorted(exported - public) == [], "in checkpointkit.__all__ but not defined"


def _isort_key(name: str) -> tuple[int, str]:
    """Ruff's RUF022 order: CONSTANTS, then Classes, then functions; case-sensitive within."""
    if name.isupper():
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


def test_package_all_is_sorted_without_duplicates() -> None:
    names = list(checkpointkit.__all__)
    assert names == sorted(names, key=_isort_key)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", checkpointkit.__all__)
def test_every_exported_name_is_importable(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from checkpointkit import {name}", namespace)
    value = namespace[name]
    assert value is getattr(checkpointkit, name)
    if inspect.isclass(value) or inspect.isfunction(value):
        # re-exported from a module of the package, never from a dependency
        assert value.__module__.startswith("checkpointkit."), (name, value.__module__)


def test_every_exported_name_is_in_its_modules_all() -> None:
    """A re-export names something its home module declares public."""
    for name in checkpointkit.__all__:
        value = getattr(checkpointkit, name)
        home = getattr(value, "__module__", None)
        if not (inspect.isclass(value) or inspect.isfunction(value)) or home is None:
            continue  # constants and type aliases carry no home module
        module = importlib.import_module(home)
        assert name in getattr(module, "__all__", ()), f"{name} is not in {home}.__all__"


def _modules() -> list[str]:
    return sorted(
        info.name for info in pkgutil.walk_packages(checkpointkit.__path__, "checkpointkit.")
    )


def _import_or_skip(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and not exc.name.startswith("checkpointkit"):
            pytest.skip(f"{name} needs {exc.name!r}, which is not installed")
        raise
    except ConfigurationError as exc:  # an adapter whose extra is missing says so
        pytest.skip(f"{name}: {exc}")


def test_the_package_has_modules_to_check() -> None:
    names = _modules()
    for expected in ("checkpointkit.storage", "checkpointkit.adapters.memory"):
        assert expected in names


@pytest.mark.parametrize("module_name", _modules())
def test_every_module_all_names_exist(module_name: str) -> None:
    module = _import_or_skip(module_name)
    declared = getattr(module, "__all__", None)
    if declared is None:
        # only a package that merely groups modules (checkpointkit.adapters) may lack one
        assert hasattr(module, "__path__"), f"{module_name} declares no __all__"
        return
    assert len(declared) == len(set(declared)), f"duplicates in {module_name}.__all__"
    missing = [name for name in declared if not hasattr(module, name)]
    assert missing == [], f"{module_name}.__all__ names what it does not define"

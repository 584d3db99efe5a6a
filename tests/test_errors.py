"""One error base: every public exception of ``runtime`` and ``actors`` is a PlancastError,
so ``except PlancastError`` catches whatever plancast raises on purpose, and a new one
cannot slip by. Control-flow exceptions that never leave their module are ``_private``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType

from runtime.errors import PlancastError

PACKAGES = ("runtime", "actors")


def _modules() -> Iterator[ModuleType]:
    """Every module of the packages, private ones too (a face may re-export from them)."""
    for name in PACKAGES:
        package = importlib.import_module(name)
        yield package
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            yield importlib.import_module(info.name)


def _public_exceptions(module: ModuleType) -> Iterator[type[BaseException]]:
    for name, value in vars(module).items():
        if inspect.isclass(value) and issubclass(value, BaseException) \
                and value.__module__ == module.__name__ and not name.startswith("_"):
            yield value


def test_every_public_exception_is_a_plancast_error() -> None:
    modules = list(_modules())
    assert len(modules) > 50, [m.__name__ for m in modules]
    found = [e for module in modules for e in _public_exceptions(module)]
    assert len(found) > 20, found
    strays = [f"{e.__module__}.{e.__qualname__}{tuple(b.__name__ for b in e.__bases__)}"
              for e in found if not issubclass(e, PlancastError)]
    assert not strays, (f"public exceptions that do not derive from PlancastError: {strays} "
                        "(give them the base, or a _private name if they never leave their "
                        "module)")

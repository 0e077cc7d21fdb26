"""Modules imported on first use, so that a command pays only for what it runs.

``pyarrow.compute`` builds Python wrappers for every Arrow kernel when it is
imported (tens of milliseconds); most of merkle-db uses it somewhere, but a
point read needs none of it. Modules import it as ``from merkle.lazy import
compute as pc`` and it is loaded the first time a kernel is called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["LazyModule", "compute", "lazy_attributes"]


class LazyModule:
    """A stand-in for a module that imports it on the first attribute asked of it.

    Thread-safe (the import system locks each module while it loads), and
    cheap afterwards: one dictionary lookup before each attribute.
    """

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


#: ``pyarrow.compute``, imported when a kernel is first called.
compute: Any = LazyModule("pyarrow.compute")


def lazy_attributes(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each name in ``where`` from its module on use.

    A package lists in ``where`` the names it exports from modules that most
    of its users do not need (name -> module); the first access imports the
    module and keeps the value in the package. Import the same names under
    ``TYPE_CHECKING`` so type checkers see them.
    """
    namespace = importlib.import_module(package).__dict__

    def attribute(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return attribute

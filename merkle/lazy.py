"""Modules, names and attributes made on first use, so that a command pays only for what it runs.

``pyarrow.compute`` builds Python wrappers for every Arrow kernel when it is
imported (tens of milliseconds); most of merkle-db uses it somewhere, but a
point read needs none of it. Modules import it as ``from merkle.lazy import
compute as pc`` and it is loaded the first time a kernel is called. The same
holds for merkle's own write path: :class:`LazyModule` stands in for a module
(``merkle.db.ops`` in ``merkle.db.database``), :func:`lazy_attributes` serves a
package's names from their modules (``merkle``, ``merkle.gc``, ``merkle.refs``),
and :class:`OnFirstUse` makes an object's parts when first read (a
connection's lease manager). ``tests/cli/test_start.py`` checks what a fresh
``merkle get`` imports.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Generic, TypeVar, overload

__all__ = ["LazyModule", "OnFirstUse", "compute", "lazy_attributes"]

T = TypeVar("T")
S = TypeVar("S")


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


class OnFirstUse(Generic[S, T]):
    """An instance attribute made by ``make(instance)`` the first time it is read.

    For parts of an object that many of its users never touch (and whose
    modules they should not import): ``functools.cached_property``, but the
    value is made once even when threads race for it (a lock per attribute;
    ``make`` may read other such attributes). The value is then stored in the
    instance's ``__dict__`` under the attribute's name, so later reads cost
    what a plain attribute costs, and assigning the attribute works as usual.
    """

    def __init__(self, make: Callable[[S], T]) -> None:
        self._make = make
        self._name = ""
        self._lock = threading.RLock()
        self.__doc__ = make.__doc__

    def __set_name__(self, owner: type[S], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, instance: None, owner: type[S]) -> OnFirstUse[S, T]: ...
    @overload
    def __get__(self, instance: S, owner: type[S]) -> T: ...
    def __get__(self, instance: S | None, owner: type[S]) -> OnFirstUse[S, T] | T:
        if instance is None:
            return self
        with self._lock:
            namespace = instance.__dict__
            try:
                value: T = namespace[self._name]
            except KeyError:
                value = namespace[self._name] = self._make(instance)
        return value

    def made(self, instance: S) -> bool:
        """Whether ``instance`` has the attribute yet (reading it would make it)."""
        return self._name in instance.__dict__

"""Strict readers of the fields of stored nodes: a damaged node is an
:class:`~merkle.errors.IntegrityError` (raised by the node readers from the
TypeError or ValueError these raise), never a silent coercion."""

from __future__ import annotations

from typing import Any

__all__ = ["bytes_field", "count_field", "counts_column", "list_field", "map_field", "text_field"]


def count_field(value: Any, *, least: int = 0) -> int:
    """An integer >= ``least`` (not a bool, a float or a numeric string)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, found {type(value).__name__} {value!r:.40}")
    if value < least:
        raise ValueError(f"expected an integer >= {least}, found {value}")
    return value


def bytes_field(value: Any) -> bytes:
    """A byte string (``bytes(n)`` of a damaged count would allocate n bytes)."""
    if not isinstance(value, bytes):
        raise TypeError(f"expected bytes, found {type(value).__name__} {value!r:.40}")
    return value


def text_field(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, found {type(value).__name__} {value!r:.40}")
    return value


def list_field(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, found {type(value).__name__} {value!r:.40}")
    return value


def map_field(value: Any) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected a map, found {type(value).__name__} {value!r:.40}")
    return value


def counts_column(values: list[Any]) -> None:
    """TypeError or ValueError unless every value is an integer >= 0 (not a bool)."""
    if values and set(map(type, values)) != {int}:  # a set of types: a third of all()'s time
        bad = next(value for value in values if type(value) is not int)
        raise TypeError(f"expected an integer, found {type(bad).__name__} {bad!r:.40}")
    if values and min(values) < 0:
        raise ValueError(f"expected an integer >= 0, found {min(values)}")

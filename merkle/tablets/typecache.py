"""A cache for functions of Arrow types that also takes types Python cannot hash.

pyarrow leaves a user's ``pa.ExtensionType`` subclass unhashable unless it
defines ``__hash__`` (pyarrow's own examples do not), so a plain
``functools.lru_cache`` over types made every write of such a field fail
with ``TypeError: unhashable type``. Such types are worked out each time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["per_type"]

P = ParamSpec("P")
R = TypeVar("R")


def per_type(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` cached by its (positional) arguments, 256 entries; uncached for arguments
    that cannot be hashed."""
    cached = functools.lru_cache(maxsize=256)(fn)

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            hash(args)
        except TypeError:
            return fn(*args, **kwargs)
        return cached(*args, **kwargs)  # type: ignore[arg-type]

    return call

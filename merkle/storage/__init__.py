"""Object stores: key -> bytes over memory, local files and S3 (the only I/O layer)."""

from merkle.storage.base import (
    ObjectInfo,
    ObjectStore,
    check_key,
    open_store,
    register_scheme,
    supported_schemes,
)

__all__ = [
    "ObjectInfo",
    "ObjectStore",
    "check_key",
    "open_store",
    "register_scheme",
    "supported_schemes",
]

"""Tables as Merkle data structures: key codecs, Arrow segments, tablets, index, batches.

Pure functions from blocks to new blocks (no refs, no connection): the
database layer composes them. Start at :class:`merkle.tablets.table.Table`.
"""

from typing import TYPE_CHECKING

from merkle.lazy import lazy_attributes
from merkle.tablets.keys import KeyCodec, infer_key_codec, key_codec
from merkle.tablets.nodes import Limits, TableRoot
from merkle.tablets.store import TableStore
from merkle.tablets.table import Table, check_families, check_limits

if TYPE_CHECKING:
    from merkle.tablets.validate import validate

# Validation reads whole tables: imported when first used.
__getattr__ = lazy_attributes(__name__, {"validate": "merkle.tablets.validate"})

__all__ = [
    "KeyCodec",
    "Limits",
    "Table",
    "TableRoot",
    "TableStore",
    "check_families",
    "check_limits",
    "infer_key_codec",
    "key_codec",
    "validate",
]

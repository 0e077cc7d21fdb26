"""Tables as Merkle data structures: key codecs, Arrow segments, tablets, index, batches.

Pure functions from blocks to new blocks (no refs, no connection): the
database layer composes them. Start at :class:`merkle.tablets.table.Table`.
"""

from merkle.tablets.keys import KeyCodec, infer_key_codec, key_codec
from merkle.tablets.nodes import Limits, TableRoot
from merkle.tablets.store import TableStore
from merkle.tablets.table import Table, check_families, check_limits
from merkle.tablets.validate import validate

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

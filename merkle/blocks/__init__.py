"""Content-addressed blocks: CIDs, the DAG-CBOR codec, BlockStore and its cache."""

from merkle.blocks.cache import ByteLRU
from merkle.blocks.cid import BLAKE3, CID, DAG_CBOR, RAW, SHA2_256
from merkle.blocks.codec import check_node, decode_node, encode_node, iter_links, links_of
from merkle.blocks.store import BLOCK_PREFIX, BlockStore, MissingBlockError
from merkle.blocks.walk import missing_below, walk_levels

__all__ = [
    "BLAKE3",
    "BLOCK_PREFIX",
    "CID",
    "DAG_CBOR",
    "RAW",
    "SHA2_256",
    "BlockStore",
    "ByteLRU",
    "MissingBlockError",
    "check_node",
    "decode_node",
    "encode_node",
    "iter_links",
    "links_of",
    "missing_below",
    "walk_levels",
]

"""How deeply a CBOR data item may nest: one limit for every CBOR merkle-db writes and reads.

cbor2's decoder refuses a data item nested deeper than its ``max_depth``
(400 unless told otherwise), counting each array, each map and each tag as
one level: ``[[1]]`` is two levels, a ``Decimal`` (tag 4 around an array)
two, a big int or a datetime (a tag around a scalar) one. A writer that
encoded deeper than the reader reads would commit values nothing can read
back, so the writers (:func:`~merkle.blocks.encoder.encode_node` for nodes,
:mod:`merkle.tablets.cbor` for schema-free values) refuse what goes deeper
than :data:`MAX_CBOR_DEPTH`, and the readers pass the same limit to cbor2.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_CBOR_DEPTH"]

#: The most levels (arrays, maps and tags, each one) a CBOR data item may nest, counted
#: from its top: cbor2's default ``max_depth``, so blocks written before read as they did.
MAX_CBOR_DEPTH: Final = 400

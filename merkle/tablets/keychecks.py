"""Checks that a table's key codec, its declared key types and foreign tablets agree.

A table's key codec turns key values into the bytes every index node,
tablet range and batch compares; its key fields' types say what a key
value is. The two must describe the same keys: a codec that cannot store
the declared type (``int`` with a ``string`` key field) leaves a table that
refuses every write, or reads keys back in another type. Tablets given to
``build_table`` carry keys encoded by the table that wrote them, and no
node records that table's codec: their key column (name and Arrow type)
and the encodings of their first and last keys show it, and must be this
table's.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.errors import UsageError
from merkle.tablets.conform import KeyLayout
from merkle.tablets.keycodecs import TupleCodec
from merkle.tablets.keys import KeyCodec, infer_key_codec_arrow, key_codec
from merkle.tablets.nodes import BASE, ChildRef, TabletNode
from merkle.tablets.settings import unreversed
from merkle.tablets.store import TableStore

__all__ = ["check_codec_fits", "check_tablet_keys", "plain_codec"]

#: Tuple keys of more components than this are not searched for a tablet's exact codec
#: (2 ** n orders of components): the error then names only the Arrow type.
_MAX_SEARCHED = 6


def plain_codec(codec: KeyCodec) -> KeyCodec:
    """``codec`` without any ``reverse(...)``: the codec key values of its types get.

    ``reverse`` changes only the order of keys, never what a key value is, so
    ``reverse(int)`` stores the same keys as ``int``, and
    ``tuple(str,reverse(int))`` the same as ``tuple(str,int)``.
    """
    codec = unreversed(codec)
    if isinstance(codec, TupleCodec):
        return key_codec("tuple(" + ",".join(plain_codec(c).spec for c in codec.components) + ")")
    return codec


def check_codec_fits(
    fields: Sequence[str],
    types: Sequence[pa.DataType | None],
    spec: str,
    error: type[UsageError] = UsageError,
) -> None:
    """``error`` unless key codec ``spec`` stores key ``fields`` of these ``types``.

    ``fields`` are all the table's key fields, in key order (a composite key
    has one codec per field: a ``tuple(...)`` of as many parts, which the
    caller has checked). A type of None (a field this call does not type) or
    null (not typed yet) fits any codec. ``reverse(...)`` anywhere fits, as
    it changes only the order (:func:`plain_codec`).
    """
    plain = plain_codec(key_codec(spec))
    composite = len(fields) > 1
    parts = list(plain.components) if isinstance(plain, TupleCodec) and composite else [plain]
    for name, kind, part in zip(fields, types, parts, strict=False):
        if kind is None or pa.types.is_null(kind):
            continue
        want = infer_key_codec_arrow(kind).spec  # UsageError for a type no key can have
        if want == part.spec:
            continue
        where = f" for {name!r} in its tuple(...)" if composite else ""
        raise error(
            f"key field {name!r} is {kind}, but key codec {spec!r} stores it as "
            f"{part.spec!r} keys ({part.arrow_type}): make {name!r} a type of that codec, or "
            f"create the table with a key codec that stores {kind} ({want!r}, or "
            f"'reverse({want})' for the inverse order{where}), or without key_codec: the "
            f"key types then choose it"
        )


def check_tablet_keys(ts: TableStore, refs: Sequence[ChildRef], key: KeyLayout, spec: str) -> None:
    """UsageError unless every tablet of ``refs`` is keyed like a table of ``key`` and key
    codec ``spec``.

    Checks each tablet's key column (its name: the same key fields; its
    Arrow type: the codec's) and that ``spec`` encodes the tablet's first and
    last keys to the bytes its node records, which no codec of the same type
    in another order (``reverse(int)`` for ``int``) does. Reads each tablet's
    first and last key blocks (their key column alone, but for a tablet
    written before pages, whose keys are in its base segment).
    """
    codec = key_codec(spec)
    tablets = [ts.tablet(ref.cid) for ref in refs]
    blocks = iter(ts.segments([cid for t in tablets for cid in _key_blocks(t)]))
    for ref, tablet in zip(refs, tablets, strict=True):
        first, last = next(blocks), next(blocks)
        name = first.schema.field(0).name
        if name != key.column:
            raise UsageError(
                f"tablet {ref.cid} holds records keyed on {_key_name(name)}, but this table "
                f"is keyed on {_fields(key.fields)}: build it from tablets of a table with the "
                f"same key (or create the table keyed on {_key_name(name)})"
            )
        if not first.num_rows or not last.num_rows:
            continue  # no key to be out of order
        keys = pa.chunked_array(
            [first.column(0).slice(0, 1), last.column(0).slice(last.num_rows - 1)]
        )
        if keys.type.equals(codec.arrow_type) and _encodes(codec, keys, tablet):
            continue
        found = _codec_of(keys, tablet)
        written = (
            f"key codec {found.spec!r}"
            if found is not None
            else f"another key codec (keys of Arrow type {keys.type})"
        )
        if keys.type.equals(codec.arrow_type):
            harm = "the same key type in another order: scans and lookups would miss them"
        else:
            harm = f"keys of type {keys.type}, where this table's keys are {codec.arrow_type}"
        raise UsageError(
            f"tablet {ref.cid} was written under {written}, but this table's key codec is "
            f"{spec!r} ({harm}): build it from tablets of a table whose key codec is {spec!r} "
            f"(or create the table with key_codec={found.spec if found else 'that codec'!r})"
        )


def _key_blocks(tablet: TabletNode) -> tuple[CID, CID]:
    """The blocks holding a tablet's first and last keys (its first and last page's key
    blocks; the base segment of a tablet written before pages)."""
    if tablet.pages:
        return tablet.pages[0].keys, tablet.pages[-1].keys
    return tablet.segments[BASE], tablet.segments[BASE]


def _key_name(column: str) -> str:
    """A tablet's key column as its table's user named the key: a field, or the fields
    of a composite key (:func:`~merkle.tablets.schema.composite_column`)."""
    if column.startswith("(") and column.endswith(")") and len(column) > 2:
        return _fields(tuple(column[1:-1].split(",")))
    return _fields((column,))


def _fields(fields: Sequence[str]) -> str:
    return f"the key field {fields[0]!r}" if len(fields) == 1 else f"the key fields {list(fields)}"


def _encodes(codec: KeyCodec, keys: pa.ChunkedArray, tablet: TabletNode) -> bool:
    """Whether ``codec`` encodes a tablet's first and last key values (``keys``) to the
    first and last keys its node records."""
    try:
        encoded = codec.encode_array(keys).to_pylist()
    except UsageError:
        return False
    return bool(encoded == [tablet.first_key, tablet.last_key])


def _codec_of(keys: pa.ChunkedArray, tablet: TabletNode) -> KeyCodec | None:
    """The key codec a tablet was written under, found from its first and last keys among
    the codecs of their Arrow type (each part in either order), or None."""
    try:
        plain = infer_key_codec_arrow(keys.type)
    except UsageError:
        return None
    parts = plain.components if isinstance(plain, TupleCodec) else ()
    if len(parts) > _MAX_SEARCHED:
        return None
    choices = [(p.spec, f"reverse({p.spec})") for p in parts]
    inner = [f"tuple({','.join(c)})" for c in itertools.product(*choices)] if parts else []
    for spec in [*(inner or [plain.spec]), *(f"reverse({s})" for s in inner or [plain.spec])]:
        candidate = key_codec(spec)
        if _encodes(candidate, keys, tablet):
            return candidate
    return None

"""What a table says about itself: ``describe_table``, ``list_tablets``, and stray tablets."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.db.copies import snapshot
from merkle.errors import MerkleError, NotFoundError, UsageError
from merkle.tablets.keys import infer_key_codec_arrow
from merkle.tablets.keytimes import key_field_types, record_key
from merkle.tablets.schema import composite_column
from merkle.tablets.segment import arrow_to_records
from merkle.tablets.store import TableStore
from merkle.tablets.table import Table

__all__ = ["describe_table", "list_tablets", "read_stray_tablet"]


def describe_table(
    ts: TableStore, table: Table, name: str, stored: str | None = None
) -> dict[str, Any]:
    """Settings, size and schema of one table version (``Database.describe_table``).

    ``stored`` is the CID of the table's root when the version holds it unchanged: the
    id is that block's, even when this merkle-db would write the root in a newer format
    version (re-encoding a version 2 root gives a version 3 one, another CID).
    """
    root = table.root
    return {
        "id": stored or str(ts.put_node(root.to_node())),
        "name": name,
        "key": list(root.key_fields) if len(root.key_fields) > 1 else root.key_fields[0],
        "key_codec": root.key_codec,
        "tablets": len(table.tablets()),
        "count": table.count,
        "size": table.size,
        "patch": table.patch_stats(),
        "families": {f: sorted(fields) for f, fields in root.families.items()},
        "limits": {
            "tablet_size_limit": root.limits.tablet_size,
            "branching_factor": root.limits.branching,
            "patch_limit": root.limits.patch,
            "patch_share": root.limits.patch_share,
        },
        "metadata": snapshot(root.meta),  # the root's own is shared by the cached roots
        "schema": root.schema,
    }


def list_tablets(table: Table) -> list[dict[str, Any]]:
    """The tablets of the merged area in key order: id, count, size, start and end keys.

    The keys are as ``scan`` gives them (a naive timestamp key field's naive), not as
    the codec decodes them (UTC-aware): a bound is compared with the keys of records."""
    codec = table.codec
    kinds = key_field_types(table.root.key_fields, table.root.schema)
    out = []
    for ref in table.tablets():
        assert codec is not None
        out.append(
            {
                "id": str(ref.cid),
                "count": ref.count,
                "size": ref.size,
                "start": record_key(codec.decode(ref.first_key), kinds),
                "end": record_key(codec.decode(ref.last_key), kinds),
            }
        )
    return out


def read_stray_tablet(
    ts: TableStore, cid: CID, fields: Sequence[str] | None
) -> Iterator[dict[str, Any]]:
    """The records of a tablet no table of the database holds (made by a bulk job, or
    kept by another version of the database).

    No table says which family holds which field, so the tablet is read whole (every
    family) and projected here: one tablet, at most ``tablet_size``. A composite key,
    stored as one struct column, is given back as its fields, as a table's reads do.
    """
    try:
        node = ts.tablet(cid)
    except MerkleError as exc:
        raise NotFoundError(f"{cid} is not a readable tablet: {exc}") from None
    # The key column leads the base segment of a version 1 tablet, the key block of a page.
    keys = ts.segment(node.pages[0].keys if node.pages else node.segments["base"])
    key_field = keys.column_names[0]
    key_type = keys.schema.field(key_field).type
    codec = infer_key_codec_arrow(key_type)
    parts = _key_parts(key_field, key_type)
    stray = Table.new(ts, key_field=key_field, key_codec=codec.spec)
    rows = stray.read_tablet(cid, None)
    names = [*parts, *rows.column_names[1:]] if parts else rows.column_names
    unknown = [name for name in fields or () if name not in names]
    if unknown:  # no table to ask: the tablet's own columns are its fields
        raise UsageError(
            f"tablet {cid} has no field {unknown[0]!r}; its fields: {', '.join(names)}: "
            "read only fields the tablet has (fields=None reads all)"
        )
    records = arrow_to_records(rows, key_field=key_field, codec=codec, fields=fields)
    if parts:
        records = [{**dict(zip(parts, r.pop(key_field), strict=True)), **r} for r in records]
    return iter(records)


def _key_parts(key_field: str, key_type: pa.DataType) -> tuple[str, ...]:
    """The key fields a composite key column holds, else ().

    The column is a struct of the parts (children named ``0``, ``1``, ...) named
    ``(a,b)`` for the fields (:func:`~merkle.tablets.schema.composite_column`); a name
    that does not split into one field per part (a field name holding a comma) is
    ambiguous, and the key is left as one tuple under the column's name.
    """
    if not pa.types.is_struct(key_type) or not key_field.startswith("("):
        return ()
    parts = tuple(key_field[1:-1].split(","))
    fits = len(parts) == key_type.num_fields > 1 and composite_column(parts) == key_field
    return parts if fits and len(set(parts)) == len(parts) else ()

"""Helpers of the database API tests: whole-lake snapshots, full scans, a scan model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

import merkle
from merkle.errors import NotFoundError
from merkle.storage import ObjectStore


@dataclass(frozen=True)
class Snapshot:
    """Everything a lake stores: block keys, and the bytes of every other object.

    Blocks are named by their content, so their keys say all; journal
    entries, HEAD hints, leases, GC state and the lake config are compared
    byte for byte.
    """

    blocks: frozenset[str]
    others: Mapping[str, bytes]

    @property
    def journal(self) -> dict[str, bytes]:
        return {k: v for k, v in self.others.items() if k.startswith("refs/")}


def snapshot(store: ObjectStore) -> Snapshot:
    """What ``store`` holds now (see :class:`Snapshot`)."""
    blocks: set[str] = set()
    others: dict[str, bytes] = {}
    for info in store.list(""):
        if info.key.startswith("blocks/"):
            blocks.add(info.key)
        else:
            try:
                others[info.key] = store.get(info.key)
            except NotFoundError:  # removed since the listing (a lease given up meanwhile)
                continue
    return Snapshot(frozenset(blocks), others)


def full_scan(db: merkle.Database, table: str) -> list[dict[str, Any]]:
    """Every record of ``table`` in key order."""
    return list(db.scan(table))


def all_tables(db: merkle.Database) -> dict[str, list[dict[str, Any]]]:
    """Every table of ``db`` with all its records: the whole visible state."""
    return {name: full_scan(db, name) for name in db.list_tables()}


def without_none(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record as it reads back: a field set to None is the same as an absent field."""
    return {k: v for k, v in record.items() if v is not None}


def project(record: Mapping[str, Any], key: str, fields: Sequence[str] | None) -> dict[str, Any]:
    """``record`` with only the key field and ``fields`` (all fields when None)."""
    if fields is None:
        return dict(record)
    return {k: v for k, v in record.items() if k == key or k in fields}


def model_scan(
    records: Mapping[Any, Mapping[str, Any]],
    key: str,
    *,
    fields: Sequence[str] | None = None,
    from_pk: Any = None,
    to_pk: Any = None,
    from_index: int | None = None,
    to_index: int | None = None,
    offset: int | None = None,
    limit: int | None = None,
    reverse: bool = False,
) -> list[dict[str, Any]]:
    """What ``Database.scan`` must return for a table holding ``records`` (key -> record).

    Positions (``from_index``/``to_index``, inclusive) count over the whole
    table in key order; key bounds are inclusive; the two restrictions
    intersect. ``reverse`` turns the order; ``offset`` and ``limit`` then
    apply to the records in the order they are returned.
    """
    chosen = []
    for i, pk in enumerate(sorted(records)):
        if from_index is not None and i < from_index:
            continue
        if to_index is not None and i > to_index:
            continue
        if from_pk is not None and pk < from_pk:
            continue
        if to_pk is not None and pk > to_pk:
            continue
        chosen.append(project(records[pk], key, fields))
    if reverse:
        chosen.reverse()
    start = offset or 0
    stop = None if limit is None else start + limit
    return chosen[start:stop]


def same_columns(a: pa.Table, b: pa.Table) -> bool:
    """Whether two Arrow tables hold equal columns, whatever their column order."""
    if sorted(a.column_names) != sorted(b.column_names):
        return False
    return bool(a.select(b.column_names).equals(b))

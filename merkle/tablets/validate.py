"""Check every structural invariant of a table version.

``validate`` reads the whole table and raises :class:`IntegrityError` on the
first violation, naming its path from the table root (for example
``data/children[3]/children[0] (tablet bafy...)``). The invariants are the
ones the tree and batch code rely on: key order and ranges, counts and sizes
that match what they summarise, tablet and node fill, equal leaf heights,
batch version ranges and size tiers, and the ``in_merged`` flags.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.errors import IntegrityError, MerkleError
from merkle.lazy import compute as pc
from merkle.tablets.batch import BatchContent, Overlay, load_batch
from merkle.tablets.keyindex import combine
from merkle.tablets.nodes import BASE, ChildRef, TabletNode
from merkle.tablets.store import TableStore
from merkle.tablets.table import Table
from merkle.tablets.tiers import TIER_FANIN, batch_tier
from merkle.tablets.tree import TableSpec, Tree, node_ref

__all__ = ["validate"]


class _ViolationError(Exception):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")


@dataclass
class _Walk:
    ts: TableStore
    spec: TableSpec
    tree: Tree
    leaves: int = 0

    def check(self, ok: bool, path: str, problem: str) -> None:
        if not ok:
            raise _ViolationError(path, problem)

    def subtree(
        self, ref: ChildRef, lo: bytes | None, hi: bytes | None, path: str, is_root: bool
    ) -> None:
        check = self.check
        check(ref.first_key <= ref.last_key, path, "first key is after last key")
        check(
            lo is None or ref.first_key >= lo,
            path,
            "first key is below the range its parent gives it",
        )
        check(
            hi is None or ref.last_key < hi,
            path,
            "last key is at or above the range its parent gives it",
        )
        if ref.height == 0:
            self.tablet(ref, f"{path} (tablet {ref.cid})", is_root)
            return
        node = self.ts.index(ref.cid)
        here = f"{path} (index {ref.cid})"
        limits = self.spec.limits
        n = len(node.children)
        check(
            node.height == ref.height, here, f"height {node.height}, its parent says {ref.height}"
        )
        check(
            n <= limits.branching,
            here,
            f"{n} children, more than the branching factor {limits.branching}",
        )
        least = 2 if is_root else limits.min_children
        check(n >= least, here, f"{n} children, fewer than the minimum {least}")
        check(node.count == ref.count, here, f"count {node.count}, its parent says {ref.count}")
        check(node.size == ref.size, here, f"size {node.size}, its parent says {ref.size}")
        check(
            node.children[0].first_key == ref.first_key,
            here,
            "first key differs from its first child's",
        )
        check(
            node.children[-1].last_key == ref.last_key,
            here,
            "last key differs from its last child's",
        )
        for i, child in enumerate(node.children):
            check(child.height == node.height - 1, here, f"child {i} is not one level down")
            if i:
                prev = node.children[i - 1]
                check(
                    prev.last_key < child.first_key,
                    here,
                    f"children {i - 1} and {i} overlap or are out of order",
                )
            clo = lo if i == 0 else child.first_key
            chi = hi if i == n - 1 else node.children[i + 1].first_key
            self.subtree(child, clo, chi, f"{path}/children[{i}]", False)

    def tablet(self, ref: ChildRef, here: str, is_root: bool) -> None:
        check, spec = self.check, self.spec
        self.leaves += 1
        tablet = self.ts.tablet(ref.cid)
        check(tablet.count == ref.count, here, f"count {tablet.count}, its parent says {ref.count}")
        check(tablet.size == ref.size, here, f"size {tablet.size}, its parent says {ref.size}")
        check(
            tablet.first_key == ref.first_key and tablet.last_key == ref.last_key,
            here,
            "key range differs from its parent's record",
        )
        check(
            0 < tablet.count <= spec.limits.tablet_size,
            here,
            f"holds {tablet.count} records; the limit is {spec.limits.tablet_size}",
        )
        if not is_root:
            check(
                tablet.count >= spec.limits.min_tablet,
                here,
                f"holds {tablet.count} records, under the minimum {spec.limits.min_tablet}",
            )
        if tablet.pages:
            keys = self.pages(tablet, here)
        else:
            check(BASE in tablet.segments, here, "has no base segment")
            size = sum(
                self.family(name, cid, tablet.count, here) for name, cid in tablet.segments.items()
            )
            check(
                size == tablet.size,
                here,
                f"segments hold {size} bytes, the tablet says {tablet.size}",
            )
            base = self.ts.segment(tablet.segments[BASE]).column(spec.key_field)
            keys = combine(spec.codec.encode_array(base))
        self.ordered(keys, here)
        check(
            keys[0].as_py() == tablet.first_key and keys[len(keys) - 1].as_py() == tablet.last_key,
            here,
            "first or last key differs from its rows",
        )

    def pages(self, tablet: TabletNode, here: str) -> pa.Array:
        """Check a version 2 tablet's pages; the encoded keys of all its rows."""
        check, spec = self.check, self.spec
        limit = spec.limits.page_rows
        check(
            sum(page.size for page in tablet.pages) == tablet.size,
            here,
            f"pages hold {sum(page.size for page in tablet.pages)} bytes, "
            f"the tablet says {tablet.size}",
        )
        all_keys: list[pa.Array] = []
        for i, page in enumerate(tablet.pages):
            where = f"{here} page {i}"
            check(
                0 < page.count <= limit,
                where,
                f"holds {page.count} records; pages hold 1 to {limit}",
            )
            key_table = self.ts.segment(page.keys)
            check(_valid_text(key_table), where, "key block holds strings that are not UTF-8")
            check(
                key_table.column_names == [spec.key_field] and key_table.num_rows == page.count,
                where,
                f"key block holds columns {key_table.column_names} and {key_table.num_rows} rows; "
                f"the page holds {page.count} rows of key {spec.key_field!r}",
            )
            size = self.ts.blocks.stat(page.keys).size
            for name, cid in page.families.items():
                if cid is not None:
                    size += self.family(name, cid, page.count, where, paged=True)
            check(size == page.size, where, f"blocks hold {size} bytes, the page says {page.size}")
            keys = combine(spec.codec.encode_array(key_table.column(0)))
            check(keys[0].as_py() == page.first_key, where, "first key differs from its rows")
            if all_keys:
                check(
                    all_keys[-1][len(all_keys[-1]) - 1].as_py() < page.first_key,
                    where,
                    "overlaps or is out of order with the page before it",
                )
            all_keys.append(keys)
        return pa.concat_arrays(all_keys)

    def family(self, name: str, cid: CID, count: int, here: str, *, paged: bool = False) -> int:
        """Check one family's segment or page block; its stored bytes."""
        check, spec = self.check, self.spec
        table = self.ts.segment(cid)
        problem = spec.misplaced(name, table.column_names)
        check(
            problem is None,
            here,
            f"holds {problem}: reads of the field look for it there, so it may read as "
            f"missing (a tablet given to build_table by an older merkle-db); "
            f"alter_families(table, its families) rewrites every tablet into them",
        )
        check(_valid_text(table), here, f"family {name!r} holds strings that are not UTF-8")
        check(
            table.num_rows == count,
            here,
            f"block of family {name!r} has {table.num_rows} rows, the tablet says {count}",
        )
        holds_key = spec.key_field in table.column_names
        check(
            holds_key == (name == BASE and not paged),
            here,
            f"block of family {name!r} {'holds' if holds_key else 'lacks'} the key column "
            f"{spec.key_field!r} (a page keeps it in its key block alone, a version 1 tablet "
            f"in its base segment alone)",
        )
        return self.ts.blocks.stat(cid).size

    def ordered(self, keys: pa.Array, here: str) -> None:
        if len(keys) > 1:
            self.check(
                pc.all(pc.less(keys.slice(0, len(keys) - 1), keys.slice(1))).as_py(),
                here,
                "keys are not strictly increasing",
            )


def validate(ts: TableStore, root: CID | Table) -> None:
    """Raise :class:`IntegrityError` naming the first broken invariant of a table."""
    table = root if isinstance(root, Table) else Table.load(ts, root)
    label = str(root) if isinstance(root, CID) else "table"
    try:
        _validate(ts, table)
    except _ViolationError as exc:
        raise IntegrityError(f"table {label}: {exc}") from None
    except MerkleError as exc:
        raise IntegrityError(f"table {label}: cannot be read: {exc}") from exc


def _validate(ts: TableStore, table: Table) -> None:
    root = table.root
    if root.key_codec is None:
        if root.data is not None or root.pending or root.count:
            raise _ViolationError("root", "holds data but has no key codec")
        return
    spec = table.spec
    tree = Tree(ts, spec)
    walk = _Walk(ts, spec, tree)
    data = node_ref(ts, root.data) if root.data is not None else None
    if data is not None:
        walk.subtree(data, None, None, "data", True)
    data_count = data.count if data is not None else 0
    data_size = data.size if data is not None else 0

    batches = [ts.batch(cid) for cid in root.pending]
    total = 0
    for i, (cid, batch) in enumerate(zip(root.pending, batches, strict=True)):
        here = f"pending[{i}] (batch {cid})"
        walk.check(
            batch.lower <= batch.upper, here, f"version range {batch.lower}..{batch.upper} is empty"
        )
        if i:
            newer = batches[i - 1]
            walk.check(
                newer.lower > batch.upper,
                here,
                "version range overlaps or is not older than the batch before it",
            )
            run = batches[max(0, i - TIER_FANIN + 1) : i + 1]
            walk.check(
                len(run) < TIER_FANIN or len({batch_tier(b.count) for b in run}) > 1,
                here,
                f"size tiers broken: {TIER_FANIN} batches in a row of tier "
                f"{batch_tier(batch.count)} (they should have been merged)",
            )
        content = load_batch(ts, cid, spec.key_field, spec.codec)
        walk.check(_valid_text(content.upserts.table), here, "rows hold strings that are not UTF-8")
        up = content.upserts.keys
        if len(up) > 1:
            walk.check(
                pc.all(pc.less(up.slice(0, len(up) - 1), up.slice(1))).as_py(),
                here,
                "upsert keys are not strictly increasing",
            )
        dk = content.deletes.to_pylist()
        walk.check(dk == sorted(set(dk)), here, "deleted keys are not sorted and unique")
        walk.check(not set(dk) & set(up.to_pylist()), here, "a key is both upserted and deleted")
        expected = np.array(tree.exists(data, up.to_pylist()), dtype=bool)
        walk.check(
            bool(np.array_equal(expected, content.upserts_in_merged)),
            here,
            "upsert in_merged flags are wrong",
        )
        expected = np.array(tree.exists(data, dk), dtype=bool)
        walk.check(
            bool(np.array_equal(expected, content.deletes_in_merged)),
            here,
            "delete in_merged flags are wrong",
        )
        if content.patches is not None:
            _check_patches(walk, here, content)
        total += batch.count
    walk.check(
        total <= spec.limits.flush_above(data_count),
        "pending",
        f"holds {total} records, above the flush threshold {spec.limits.flush_above(data_count)}",
    )
    overlay = Overlay.load(ts, root.pending, spec.key_field, spec.codec)
    count = data_count + overlay.delta()
    walk.check(
        root.count == count,
        "root",
        f"count {root.count}, the data and pending batches hold {count}",
    )
    size = data_size + sum(b.size for b in batches)
    walk.check(
        root.size == size, "root", f"size {root.size}, the data and pending batches hold {size}"
    )


def _check_patches(walk: _Walk, here: str, content: BatchContent) -> None:
    """A batch's patches: keys strictly increasing, disjoint from its upserts and deletes,
    one bitmap per patched column."""
    patches = content.patches
    assert patches is not None
    keys = patches.keys
    if len(keys) > 1:
        walk.check(
            pc.all(pc.less(keys.slice(0, len(keys) - 1), keys.slice(1))).as_py(),
            here,
            "patch keys are not strictly increasing",
        )
    decided = set(content.upserts.keys.to_pylist()) | set(content.deletes.to_pylist())
    walk.check(
        not decided & set(keys.to_pylist()), here, "a key is both patched and upserted or deleted"
    )
    columns = patches.rows.table.column_names[1:]
    walk.check(
        sorted(columns) == sorted(patches.masks),
        here,
        f"patched columns {columns} and bitmaps {sorted(patches.masks)} differ",
    )


def _valid_text(table: pa.Table) -> bool:
    """Whether the strings of a decoded block are UTF-8 (reads check only their bytes)."""
    try:
        table.validate(full=True)
    except pa.ArrowException:
        return False
    return True

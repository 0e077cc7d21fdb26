"""One table against a dict model, through every write, read and structural change.

Tiny limits (branching 4, tablet limit 8, patch limit 16) make every path
happen in a few steps: batches merging by tier, flushes, tablet splits and
merges, index nodes splitting and collapsing. ``validate`` runs after every
step, and every read is compared with the model.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from merkle.blocks import BlockStore
from merkle.storage import open_store
from merkle.tablets import Limits, Table, TableStore, validate
from merkle.tablets.rows import SortedRows

KEYS = st.integers(min_value=0, max_value=120)
VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-5, max_value=5),
    st.text(max_size=3),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=3), max_size=2),
    st.dictionaries(st.sampled_from(["p", "q"]), st.integers(0, 3), max_size=2),
)
RECORDS = st.lists(
    st.fixed_dictionaries({"k": KEYS}, optional={"a": VALUES, "b": VALUES, "c": VALUES}),
    min_size=1,
    max_size=24,
)
FIELDS = st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "c", "zz"]), max_size=3))


def _clean(record: dict[str, Any]) -> dict[str, Any]:
    return {f: v for f, v in record.items() if v is not None}


def _records(table: Any, fields: list[str] | None) -> list[dict[str, Any]]:
    from merkle.tablets.segment import arrow_to_records

    return arrow_to_records(table, key_field="k", codec=TableModel.codec(), fields=fields)


class TableModel(RuleBasedStateMachine):
    """The table under test beside a plain dict of key -> record."""

    _codec: Any = None

    @classmethod
    def codec(cls) -> Any:
        from merkle.tablets import key_codec

        if cls._codec is None:
            cls._codec = key_codec("int")
        return cls._codec

    #: Tiny tablets: every page holds one record.
    limits = Limits(tablet_size=8, branching=4, patch=16)

    def __init__(self) -> None:
        super().__init__()
        self.ts = TableStore(BlockStore(open_store("memory://")))
        families = {"fam": {"b"}}
        limits = self.limits
        self.table = Table.new(
            self.ts, key_field="k", key_codec="int", families=families, limits=limits
        )
        self.model: dict[int, dict[str, Any]] = {}
        self.version = 1

    def _expected(self, fields: list[str] | None) -> list[dict[str, Any]]:
        rows = []
        for key in sorted(self.model):
            record = self.model[key]
            if fields is not None:
                record = {f: v for f, v in record.items() if f == "k" or f in fields}
            rows.append(record)
        return rows

    @rule(records=RECORDS)
    def write(self, records: list[dict[str, Any]]) -> None:
        self.table = self.table.write(records, self.version)
        for record in records:
            self.model[record["k"]] = _clean(record)
        self.version += 1

    @rule(keys=st.lists(KEYS, min_size=1, max_size=12))
    def delete(self, keys: list[int]) -> None:
        self.table = self.table.delete(keys, self.version)
        for key in keys:
            self.model.pop(key, None)
        self.version += 1

    @rule(keys=st.lists(KEYS, min_size=1, max_size=40, unique=True))
    def bulk_write(self, keys: list[int]) -> None:
        """More records than the patch limit: go straight into the tablets."""
        records = [{"k": k, "a": k * 2} for k in keys]
        self.table = self.table.write(records, self.version)
        for record in records:
            self.model[record["k"]] = record
        self.version += 1

    @rule()
    def flush(self) -> None:
        self.table = self.table.flush()

    @rule()
    def reload(self) -> None:
        """A stored root read back is the same table."""
        self.table = Table.load(self.ts, self.table.save())

    @rule(keys=st.lists(KEYS, max_size=10), fields=FIELDS)
    def get(self, keys: list[int], fields: list[str] | None) -> None:
        got = {r["k"]: r for r in _records(self.table.get(keys, fields), fields)}
        expected = {}
        for key in set(keys):
            if key in self.model:
                record = self.model[key]
                if fields is not None:
                    record = {f: v for f, v in record.items() if f == "k" or f in fields}
                expected[key] = record
        assert got == expected

    @rule(
        fields=FIELDS,
        bounds=st.tuples(st.one_of(st.none(), KEYS), st.one_of(st.none(), KEYS)),
        indexes=st.tuples(
            st.one_of(st.none(), st.integers(0, 130)), st.one_of(st.none(), st.integers(0, 130))
        ),
        offset=st.one_of(st.none(), st.integers(0, 20)),
        limit=st.one_of(st.none(), st.integers(0, 20)),
        reverse=st.booleans(),
    )
    def scan(
        self,
        fields: list[str] | None,
        bounds: tuple[int | None, int | None],
        indexes: tuple[int | None, int | None],
        offset: int | None,
        limit: int | None,
        reverse: bool,
    ) -> None:
        from_pk, to_pk = bounds
        from_index, to_index = indexes
        rows = self._expected(fields)
        ranked = list(enumerate(rows))
        ranked = [
            (i, r)
            for i, r in ranked
            if (from_pk is None or r["k"] >= from_pk)
            and (to_pk is None or r["k"] <= to_pk)
            and (from_index is None or i >= from_index)
            and (to_index is None or i <= to_index)
        ]
        expected = [r for _, r in ranked]
        if reverse:
            expected.reverse()
        expected = expected[offset or 0 :]
        if limit is not None:
            expected = expected[:limit]
        got: list[dict[str, Any]] = []
        for batch in self.table.scan(
            fields=fields,
            from_pk=from_pk,
            to_pk=to_pk,
            from_index=from_index,
            to_index=to_index,
            offset=offset,
            limit=limit,
            reverse=reverse,
        ):
            got += _records(batch, fields)
        assert got == expected

    @rule()
    def tablets_cover_the_merged_area(self) -> None:
        flushed = self.table.flush()
        total = []
        for ref in flushed.tablets():
            total += [r["k"] for r in _records(flushed.read_tablet(ref.cid), None)]
        assert total == sorted(self.model)

    @invariant()
    def valid_and_equal(self) -> None:
        validate(self.ts, self.table)
        assert self.table.count == len(self.model)
        assert _records(self.table.to_arrow(), None) == self._expected(None)


TableModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_table_model = TableModel.TestCase


class PagedTableModel(TableModel):
    """The same model with tablets of several pages of several records (8 records a page,
    at least 2 after a rewrite, 16 to 64 records a tablet): pages split, merge, are reused
    across tablet splits and merges."""

    limits = Limits(tablet_size=64, branching=4, patch=16, page_size=8)


PagedTableModel.TestCase.settings = TableModel.TestCase.settings
test_paged_table_model = PagedTableModel.TestCase


UPDATES = st.dictionaries(
    KEYS,
    st.dictionaries(st.sampled_from(["a", "b", "c"]), VALUES, min_size=1, max_size=3),
    min_size=1,
    max_size=12,
)


class PatchedTableModel(TableModel):
    """A typed, schema-free table, with field-level updates (patches) among the changes:
    patches over pending upserts, over older patches, over the merged area, under
    newer writes and deletes, through batch merges, flushes and reloads."""

    def __init__(self) -> None:
        super().__init__()
        self.table = Table.new(
            self.ts,
            key_field="k",
            key_codec="int",
            families={"fam": {"b"}},
            limits=self.limits,
            typed=True,
            schema_free=True,
        )

    @rule(changes=UPDATES)
    def update(self, changes: dict[int, dict[str, Any]]) -> None:
        from merkle.db.changes import update_patches

        done = update_patches(self.table, changes)
        if done is not None:
            table, patches = done
            empty = table.get([], None)
            keys = table.spec.codec.encode_array(empty.column("k"))
            self.table = table.apply_changes(SortedRows(empty, keys), keys, self.version, patches)
        for key, fields in changes.items():
            if key in self.model:
                self.model[key] = _clean({**self.model[key], **fields})
        self.version += 1


PatchedTableModel.TestCase.settings = TableModel.TestCase.settings
test_patched_table_model = PatchedTableModel.TestCase

"""Two defects an adversarial tester of the Spark integration found.

1. A user schema reading a stored field as another numeric type relied on Arrow's safe
   cast, which checks an integer's range but rounds a float into a narrower float, a
   decimal into a float and a float into a decimal without a word: a DOUBLE 1e300 read
   as FLOAT came back as Infinity, 0.1 as 0.10000000149011612, a decimal(38, 0) as the
   DOUBLE nearest it. doc/spark.md says a value the type does not fit is an error naming
   the field; such a cast is now checked as the write path checks one
   (:mod:`merkle.tablets.fitexact`).
2. Every lease renewer waited a fraction of the lease's ttl, not of the time its holder
   counts the lease valid (the ttl less the 5 s skew margin): ``merkle.spark.write(...,
   lease_ttl=6)`` was renewed after 1.5 s a lease valid for 1 s, the renewal was refused
   (silently), and the write always failed with "lost its writer lease". The Spark
   options accepted a ttl of 1, which every lease refuses. Renewers now wait a fraction
   of ``ttl - margin`` (:meth:`~merkle.refs.timing.Timing.renewal_interval`), and every
   place that checks a lease ttl says the same minimum.
"""

from __future__ import annotations

import decimal
import math
import threading
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import Lake
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    LongType,
    StructField,
    StructType,
)

import merkle
from merkle.db.readers import ReaderLeaseKeeper
from merkle.errors import SchemaError, UsageError
from merkle.gc import locking as gc_locking
from merkle.refs import LeaseManager
from merkle.refs.timing import Timing
from merkle.refs.writer import WriterSession
from merkle.spark.lake import _Renewer, open_lake
from merkle.spark.options import LakeRef, read_options, write_options
from merkle.spark.types import RowConverter
from merkle.tablets.fitcolumn import fit_column
from merkle.tablets.fitexact import safe_cast_may_round
from tests.refs.helpers import FakeClock, root

from .helpers import reader

D = decimal.Decimal


# -- 1. a user schema's numeric type holds the stored values exactly, or is an error ----


def _read(rows: pa.Table, name: str, kind: DataType) -> pa.Table:
    """``rows`` (a table's stored rows) as a read with the user schema ``id long, name
    kind`` converts them."""
    asked = StructType([StructField("id", LongType(), False), StructField(name, kind)])
    return pa.Table.from_batches(list(RowConverter.of(asked, rows.schema)(rows)))


def _rows(field: str, kind: pa.DataType, values: list[Any]) -> pa.Table:
    return pa.table({"id": pa.array(range(len(values)), pa.int64()), field: pa.array(values, kind)})


@pytest.mark.parametrize(
    ("value", "became"),
    [(1e300, "inf"), (-1e39, "-inf"), (0.1, "0.10000000149011612"), (2.0**-150, "0.0")],
)
def test_a_double_that_float_does_not_hold_is_refused_naming_the_field(
    value: float, became: str
) -> None:
    rows = _rows("fl", pa.float64(), [0.5, value])
    with pytest.raises(UsageError, match=r"field 'fl' holds double values") as caught:
        _read(rows, "fl", FloatType())
    assert f"the value {value!r} would become {became}" in str(caught.value)


def test_a_double_that_float_holds_is_read_as_it_is_nan_infinities_and_minus_zero_too() -> None:
    values = [0.5, -3.25, float("nan"), float("inf"), float("-inf"), -0.0, None, 2.0**100]
    got = _read(_rows("fl", pa.float64(), values), "fl", FloatType()).column("fl")
    assert got.type == pa.float32()
    out = got.to_pylist()
    assert out[:2] == [0.5, -3.25]
    assert math.isnan(out[2])
    assert out[3:5] == [math.inf, -math.inf]
    assert math.copysign(1.0, out[5]) == -1.0  # -0.0 stays -0.0
    assert out[6] is None
    assert out[7] == 2.0**100


@pytest.mark.parametrize("asked", ["double", "float"])
def test_a_decimal_read_as_a_float_it_would_round_is_refused(asked: str) -> None:
    rows = _rows("big", pa.decimal128(38, 0), [D(2**60), D(10**38 - 1)])
    with pytest.raises(UsageError, match=r"field 'big' holds decimal128\(38, 0\)") as caught:
        _read(rows, "big", DoubleType() if asked == "double" else FloatType())
    assert "Decimal('99999999999999999999999999999999999999') would become" in str(caught.value)


def test_a_decimal_a_float_holds_is_read_and_one_digit_it_does_not_is_refused() -> None:
    rows = _rows("d", pa.decimal128(10, 1), [D("0.5"), D("-2.5"), None])
    assert _read(rows, "d", DoubleType()).column("d").to_pylist() == [0.5, -2.5, None]
    rows = _rows("d", pa.decimal128(10, 1), [D("0.5"), D("0.1")])
    with pytest.raises(UsageError, match=r"the value Decimal\('0.1'\) would become 0.1"):
        _read(rows, "d", DoubleType())


def test_a_double_read_as_a_decimal_it_would_round_is_refused() -> None:
    rows = _rows("v", pa.float64(), [2.5, -0.0, None])
    got = _read(rows, "v", DecimalType(38, 1)).column("v").to_pylist()
    assert got == [D("2.5"), D("0"), None]  # -0.0 is 0 in a decimal, as a write stores it
    with pytest.raises(UsageError, match=r"the value 0.1 would become Decimal\('0.10'\)"):
        _read(_rows("v", pa.float64(), [0.1]), "v", DecimalType(38, 2))
    with pytest.raises(UsageError, match=r"the value 1.5 would become Decimal\('2'\)"):
        _read(_rows("v", pa.float64(), [1.5]), "v", DecimalType(10, 0))


def test_an_array_of_doubles_read_as_floats_is_checked_item_by_item() -> None:
    kind = pa.list_(pa.float64())
    assert _read(_rows("xs", kind, [[0.5, None], None]), "xs", ArrayType(FloatType())).column(
        "xs"
    ).to_pylist() == [[0.5, None], None]
    with pytest.raises(UsageError, match=r"field 'xs'.*\[1.0, 1e\+300\] would become \[1.0, inf"):
        _read(_rows("xs", kind, [[1.0, 1e300]]), "xs", ArrayType(FloatType()))


def test_a_dictionary_or_chunked_column_is_checked_too() -> None:
    rows = pa.table(
        {
            "id": pa.chunked_array([[0], [1]], pa.int64()),
            "fl": pa.chunked_array([[0.5], [1e300]], pa.float64()),
            "dl": pa.array([0.5, 0.1]).dictionary_encode(),
        }
    )
    with pytest.raises(UsageError, match=r"field 'fl'.*1e\+300 would become inf"):
        _read(rows, "fl", FloatType())
    with pytest.raises(UsageError, match=r"field 'dl'.*0\.1 would become 0\.100000001"):
        _read(rows, "dl", FloatType())


@pytest.mark.parametrize(
    "value", [1e300, -1e39, 0.1, 0.5, float("nan"), float("inf"), -0.0, 2.0**-150, 1e38]
)
def test_a_read_as_float_refuses_what_a_write_into_a_float_field_refuses(value: float) -> None:
    """The read's check is the write's: a value a float32 field refuses is refused read as
    FLOAT, and one it stores is read as it would be stored."""
    column = pa.array([value], pa.float64())
    try:
        written: Any = fit_column("fl", column, pa.float32(), lambda i: i).to_pylist()[0]
    except SchemaError:
        written = "refused"
    try:
        read: Any = _read(_rows("fl", pa.float64(), [value]), "fl", FloatType())
        read = read.column("fl").to_pylist()[0]
    except UsageError:
        read = "refused"
    assert repr(read) == repr(written)


def test_which_casts_arrow_s_safe_cast_may_round() -> None:
    assert safe_cast_may_round(pa.float64(), pa.float32())
    assert safe_cast_may_round(pa.float32(), pa.float16())
    assert safe_cast_may_round(pa.decimal128(38, 0), pa.float64())
    assert safe_cast_may_round(pa.float64(), pa.decimal128(10, 2))
    assert safe_cast_may_round(pa.list_(pa.float64()), pa.list_(pa.float32()))
    assert safe_cast_may_round(pa.dictionary(pa.int32(), pa.float64()), pa.float32())
    struct = pa.struct([pa.field("a", pa.float64())])
    assert safe_cast_may_round(struct, pa.struct([pa.field("a", pa.float32(), False)]))
    assert not safe_cast_may_round(pa.float32(), pa.float64())  # widening: exact
    assert not safe_cast_may_round(pa.float16(), pa.float32())
    assert not safe_cast_may_round(pa.int64(), pa.float64())  # Arrow checks this one
    assert not safe_cast_may_round(pa.int64(), pa.int32())
    assert not safe_cast_may_round(pa.decimal128(10, 2), pa.decimal128(10, 1))


def test_spark_reads_a_double_as_float_only_where_float_holds_it(
    spark: Any, file_lake: Lake, lake_conn: Any
) -> None:
    conn = lake_conn(file_lake)
    schema = pa.schema([("id", pa.int64()), ("fl", pa.float64())])
    rows = pa.table({"id": [1, 2], "fl": [1e300, -1e39]}, schema=schema)
    conn.create_db("d").create_table("n", key="id", schema=schema).write("n", rows).commit()
    read = reader(spark, file_lake, "d", "n").schema("id long, fl float").load()
    with pytest.raises(Exception, match=r"UsageError: field 'fl' holds double values") as caught:
        read.collect()
    assert "the value 1e+300 would become inf" in str(caught.value)
    fits = pa.table({"id": [1, 2], "fl": [0.5, float("-inf")]}, schema=schema)
    conn.open_db("d").write("n", fits).commit()
    got = reader(spark, file_lake, "d", "n").schema("id long, fl float").load()
    assert sorted(tuple(row) for row in got.collect()) == [(1, 0.5), (2, -math.inf)]


# -- 2. leases renewed within the time their holder counts them valid ------------------


def test_renewals_come_at_a_fraction_of_the_ttl_less_the_margin() -> None:
    timing = Timing(margin=5.0)
    assert timing.renewal_interval(6.0) == 0.25  # valid 1 s to its holder: before, 1.5 s
    assert timing.renewal_interval(15.0) == 2.5
    assert timing.renewal_interval(30.0, 3) == pytest.approx(25.0 / 3)
    assert Timing(margin=0.0).renewal_interval(8.0) == 2.0


class _Steps:
    """A stand-in for a renewing loop's wake event: each wait moves ``clock`` on by its
    timeout (no real waiting) and is recorded; after ``rounds`` waits ``done`` runs, which
    ends the loop."""

    def __init__(self, clock: FakeClock, rounds: int, done: Any) -> None:
        self.clock, self.rounds, self.done = clock, rounds, done
        self.waits: list[float] = []
        self.finished = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        self.clock.now += timeout
        if len(self.waits) >= self.rounds:
            self.done()
            self.finished.set()
            return True
        return False

    def set(self) -> None:
        pass

    def clear(self) -> None:
        pass

    def is_set(self) -> bool:
        return self.finished.is_set()


def test_the_spark_renewer_keeps_a_lease_of_6_s_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's (and the driver's) renewer: the lease of ``lease_ttl=6`` outlives its ttl
    several times over. Before, the first renewal came after 1.5 s and was refused."""
    merkle.connect(tmp_path).close()
    lake = LakeRef(tmp_path.as_uri())
    conn = open_lake(lake)
    clock = FakeClock()
    leases = LeaseManager(conn.store, clock=clock, sleep=clock.sleep)
    monkeypatch.setattr(conn, "leases", leases)
    lease = leases.acquire_writer(6.0)
    renewer = _Renewer()
    steps = _Steps(clock, 40, lambda: renewer.leave(lease))
    renewer.wake = steps  # type: ignore[assignment]
    renewer.enter(lake, lease, 6.0)
    thread = renewer.thread
    assert thread is not None
    thread.join(30)
    assert steps.waits[0] == pytest.approx(0.25)
    assert clock.now - lease.start == pytest.approx(10.0)  # 40 renewals, 10 s: past 6 s
    newest = leases.current(lease)
    assert newest.expires > lease.expires + 8
    leases.ensure_valid(newest)  # the renewals were accepted


def test_a_connection_s_reader_lease_keeper_renews_within_the_valid_time(tmp_path: Path) -> None:
    conn = merkle.connect(tmp_path)
    clock = FakeClock()
    leases = LeaseManager(conn.store, clock=clock, sleep=clock.sleep)
    keeper = ReaderLeaseKeeper(leases, ttl=6.0)
    steps = _Steps(clock, 20, lambda: keeper._stop.set())
    keeper._wake = steps  # type: ignore[assignment]
    handle = keeper.hold("shop", 1, root("v1"))
    thread = keeper._thread
    assert thread is not None
    thread.join(30)
    assert steps.waits[0] == pytest.approx(0.25)  # before: 1.5 s, and the lease lapsed
    assert handle.lapsed is None
    assert handle.lease.id == leases.lease_holders("reader")[0].id
    assert handle.lease.expires > clock.now + 5  # renewed 0.25 s ago, for 6 s
    handle.release()
    conn.close()


def test_the_gc_lock_is_renewed_within_the_time_its_holder_counts_it_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = merkle.connect(tmp_path)
    clock = FakeClock()
    leases = LeaseManager(conn.store, clock=clock, sleep=clock.sleep)
    lock = leases.acquire_gc_lock(6.0)
    granted = lock.state.expires
    renewed = threading.Event()
    made: list[_Steps] = []

    def event() -> Any:
        steps = _Steps(clock, 12, renewed.set)
        made.append(steps)
        return steps

    fake_threading = types.SimpleNamespace(Event=event, Thread=threading.Thread)
    monkeypatch.setattr(gc_locking, "threading", fake_threading)
    with gc_locking.held_gc_lock(lock, 6.0, leases.timing):
        assert renewed.wait(30)
        monkeypatch.undo()
    assert made[0].waits[0] == pytest.approx(1.0 / 3)  # before: 2 s, after it expired
    assert lock.state.expires > granted + 3  # 11 renewals went through
    conn.close()


def test_a_writer_session_reuses_a_lease_whose_ttl_is_below_twice_the_margin(
    tmp_path: Path,
) -> None:
    """Half the ttl (4 s) plus the margin (5 s) exceeded the ttl (8 s): no lease was ever
    usable, so every commit retired the lease and took a new one."""
    conn = merkle.connect(tmp_path)
    clock = FakeClock()
    session = WriterSession(LeaseManager(conn.store, clock=clock), ttl=8.0)
    try:
        with session.hold() as first:
            pass
        clock.now += 1.0  # less than half the 3 s the lease is valid to its holder
        with session.hold() as second:
            pass
        assert second.lease.id == first.lease.id
    finally:
        session.close()
        conn.close()


@pytest.mark.parametrize("ttl", ["1", "5", "-3", "x", "inf"])
def test_every_lease_ttl_option_says_the_minimum_the_leases_have(ttl: str) -> None:
    """The options accepted 1 s ("at least 1"), which every lease then refused."""
    options = {"lake": "file:///nowhere", "db": "d", "table": "t", "lease_ttl": ttl}
    minimum = r"lease_ttl.* must be a number of seconds above the skew margin \(5s\)"
    with pytest.raises(UsageError, match=minimum):
        read_options(options)
    with pytest.raises(UsageError, match=minimum):
        write_options(options)


def test_a_lease_ttl_above_the_margin_is_taken() -> None:
    options = {"lake": "file:///nowhere", "db": "d", "table": "t", "lease_ttl": "5.5"}
    assert read_options(options).lease_ttl == 5.5
    assert write_options(options).lease_ttl == 5.5


def test_spark_write_refuses_a_short_lease_ttl_before_it_starts(tmp_path: Path) -> None:
    """Before, ``lease_ttl=5`` went on to plan the job, and taking the lease refused it
    without naming ``lease_ttl=``."""
    import merkle.spark

    with pytest.raises(UsageError, match=r"lease \(lease_ttl=\) must be .* above the skew"):
        merkle.spark.write(None, tmp_path.as_uri(), "d", "t", lease_ttl=5)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"lease \(lease_ttl=\) must be .* above the skew"):
        merkle.spark.delete(None, tmp_path.as_uri(), "d", "t", None, lease_ttl=2)  # type: ignore[arg-type]


def test_spark_write_with_a_lease_of_6_5_s_commits(
    spark: Any, file_lake: Lake, lake_conn: Any
) -> None:
    """The repro: the driver's renewer renewed after 1.625 s a lease valid to it for 1.5 s;
    the write failed with "lost its writer lease". It is renewed every 0.375 s now."""
    conn = lake_conn(file_lake)
    conn.create_db("d").create_table("t", key="id").write("t", [{"id": 0}]).commit()
    df = spark.createDataFrame([(i,) for i in range(1, 9)], "id long").repartition(4)
    db = merkle.spark.write(df, file_lake.uri, "d", "t", lease_ttl=6.5, **file_lake.options)
    assert db.version == 2
    assert len(conn.open_db("d").get_records("t", list(range(9)))) == 9

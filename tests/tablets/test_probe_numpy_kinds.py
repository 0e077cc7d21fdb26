"""numpy scalars of every kind in records: never a crash, and never a time stored as a number.

pyarrow's type inference kills the process (SIGSEGV) when, in one place of nested
values, it meets a numpy ``datetime64`` and then another numpy value
(``[[np.datetime64(1, "s")], [np.int64(1)]]``); merkle refuses such values with a
SchemaError before pyarrow sees them. A numpy time whose ``item()`` is an int
(nanoseconds, a generic unit, a timedelta of months or years) in a schema-free field
is refused, not stored as that int.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import merkle
from merkle.errors import MerkleError, SchemaError, UsageError

_ROOT = Path(__file__).resolve().parents[2]

#: The fuzz run in a child process: one line of output per case, a crash is its exit status.
_FUZZ = textwrap.dedent(
    r"""
    import datetime, faulthandler, itertools, sys
    import numpy as np, pyarrow as pa, merkle

    faulthandler.enable()
    atoms = []
    for unit in ["Y", "M", "W", "D", "h", "s", "ms", "us", "ns", "ps"]:
        atoms += [np.datetime64(1, unit), np.timedelta64(1, unit)]
    atoms += [
        np.datetime64(1, "s").astype("datetime64"), np.timedelta64(1), np.datetime64("NaT"),
        np.timedelta64("NaT", "s"), np.int8(1), np.int64(1), np.uint64(2**63), np.float16(1),
        np.float32(1.5), np.float64(1.5), np.bool_(True), np.str_("a"), np.bytes_(b"a"),
        np.void(b"ab"), np.complex64(1), np.array(1), np.array(np.datetime64(1, "s")),
        np.array("a"), 1, 1.5, "a", True, b"a", datetime.datetime(2020, 1, 1),
        datetime.date(2020, 1, 1), datetime.timedelta(1), None,
    ]
    firsts = [a for a in atoms if isinstance(a, np.datetime64 | np.timedelta64 | np.ndarray)]
    shapes = [
        lambda a, b: (a, b),
        lambda a, b: ([a], [b]),
        lambda a, b: ([a, b], [b]),
        lambda a, b: ({"x": a}, {"x": b}),
        lambda a, b: ([[a]], [[b, a]]),
        lambda a, b: ({"x": [a]}, [{"x": b}]),
    ]
    conn = merkle.connect("memory://")
    db = conn.create_db("d")
    schemas = {
        "inferred": None,
        "free": pa.schema([("k", pa.int64()), merkle.free_field("m")]),
        "list_ts": pa.schema([("k", pa.int64()), ("m", pa.list_(pa.timestamp("s")))]),
        "list_int": pa.schema([("k", pa.int64()), ("m", pa.list_(pa.int64()))]),
        "struct": pa.schema([("k", pa.int64()), ("m", pa.struct([("x", pa.list_(pa.int64()))]))]),
    }
    count = 0
    bad = []
    for (label, schema), shape in itertools.product(schemas.items(), shapes):
        for a, b in itertools.product(firsts, atoms):
            count += 1
            name = f"t{count}"
            one, two = shape(a, b)
            db = db.create_table(name, key="k", schema=schema)
            try:
                db = db.write(name, [{"k": 1, "m": one}, {"k": 2, "m": two}])
                db = db.update(name, {1: {"m": two}})
            except merkle.errors.MerkleError:
                pass
            except Exception as exc:
                bad.append(f"{label} {one!r} {two!r}: {type(exc).__name__}: {exc}")
    for a, b in itertools.product(atoms, atoms):  # keys
        count += 1
        name = f"t{count}"
        try:
            db = db.create_table(name, key="k").write(name, [{"k": a}, {"k": b}])
        except merkle.errors.MerkleError:
            pass
        except Exception as exc:
            bad.append(f"key {a!r} {b!r}: {type(exc).__name__}: {exc}")
    print(count, "cases")
    print("\n".join(bad))
    """
)


def test_no_mix_of_numpy_kinds_crashes_the_process() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FUZZ],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].endswith(" cases")
    assert lines[1:] == [], "\n".join(lines[1:20])


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ([np.datetime64(1, "s")], [np.int64(1), np.datetime64(1, "s")]),
        ([np.datetime64(1, "s")], [np.bool_(True)]),
        ([[np.datetime64("NaT")]], [[np.void(b"ab")]]),
        ({"x": np.datetime64(1, "ms")}, {"x": np.float32(1)}),
        ([np.array(np.datetime64(1, "s"))], [np.array(1)]),
    ],
)
def test_datetime64_with_another_numpy_value_is_a_schema_error(first: Any, second: Any) -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    with pytest.raises(SchemaError, match="'m'"):
        db.write("t", [{"k": 1, "m": first}, {"k": 2, "m": second}])


def test_a_struct_of_a_datetime64_and_a_numpy_int_is_still_typed() -> None:
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    record = {"k": 1, "m": {"t": np.datetime64(1, "s"), "n": np.int64(2)}}
    db = db.write("t", [record, {"k": 2, "m": {"t": np.datetime64(2, "s"), "n": np.int64(3)}}])
    got = [row["m"] for row in db.commit().scan("t")]
    second = datetime.datetime(1970, 1, 1, 0, 0, 1)
    assert got == [{"t": second, "n": 2}, {"t": second.replace(second=2), "n": 3}]


def _free_table() -> merkle.Database:
    schema = pa.schema([("k", pa.int64()), merkle.free_field("v")])
    return merkle.connect("memory://").create_db("d").create_table("t", key="k", schema=schema)


@pytest.mark.parametrize(
    "value",
    [
        np.datetime64(1000, "ns"),
        np.datetime64(1, "ns"),
        np.timedelta64(5, "ns"),
        np.timedelta64(1, "Y"),
        np.timedelta64(1, "M"),
        np.timedelta64(3),
        np.datetime64(10**6, "Y"),  # beyond Python's years: item() is an int
        [1, np.datetime64(1, "ns")],
        {"a": {"b": np.timedelta64(2, "ns")}},
    ],
)
def test_a_numpy_time_that_is_an_int_to_python_is_refused_in_a_free_field(value: Any) -> None:
    db = _free_table()
    with pytest.raises(UsageError, match=r"field 'v' .*numpy .*declare the field"):
        db.write("t", [{"k": 1, "v": value}])


@pytest.mark.parametrize(
    ("value", "back"),
    [
        (np.datetime64(1, "us"), datetime.datetime(1970, 1, 1, 0, 0, 0, 1)),
        (np.datetime64(1, "D"), datetime.date(1970, 1, 2)),
        ([np.datetime64(2, "s")], [datetime.datetime(1970, 1, 1, 0, 0, 2)]),
        (np.datetime64("NaT", "ns"), None),
    ],
)
def test_a_numpy_time_python_holds_is_stored_as_that_time(value: Any, back: Any) -> None:
    db = _free_table().write("t", [{"k": 1, "v": value}]).commit()
    assert next(iter(db.scan("t"))).get("v") == back


def test_the_refusal_names_the_record_and_is_a_merkle_error() -> None:
    db = _free_table()
    with pytest.raises(MerkleError, match=r"key 1.*unit 'ns'.*bare int"):
        db.write("t", [{"k": 1, "v": np.datetime64(1, "ns")}])


@pytest.mark.parametrize("first", [1, 1.5, np.timedelta64(1, "s")])
def test_a_timedelta64_key_is_a_usage_error(first: Any) -> None:
    # a numpy timedelta64 is a numpy integer: int() of it raised TypeError in the key codecs
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k")
    with pytest.raises(UsageError, match="timedelta64"):
        db.write("t", [{"k": first}, {"k": np.timedelta64(2, "D")}])


def test_a_0d_array_in_a_struct_field_is_a_schema_error() -> None:
    # pyarrow raised SystemError for it, which no caller took for "does not fit"
    schema = pa.schema([("k", pa.int64()), ("m", pa.struct([("x", pa.list_(pa.int64()))]))])
    db = merkle.connect("memory://").create_db("d").create_table("t", key="k", schema=schema)
    with pytest.raises(SchemaError, match="'m'"):
        db.write("t", [{"k": 1, "m": np.array(1)}, {"k": 2, "m": 1}])

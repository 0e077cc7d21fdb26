"""The one output path: value rendering and the four formats."""

from __future__ import annotations

import csv
import decimal
import io
import json
import math
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from merkle.cli.output import cell, default_format, emit_record, emit_rows, jsonable

ROWS: list[dict[str, Any]] = [
    {"id": 1, "name": "ada", "score": 2.5},
    {"id": 2, "blob": b"\x00\xff", "at": datetime(2026, 1, 31, 12, 0, tzinfo=UTC)},
    {"id": 10, "pair": (1, "x"), "tags": ["a", "b"], "doc": {"k": [1, 2]}, "name": "élan"},
]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, True),
        (7, 7),
        (2**70, 2**70),
        ("s", "s"),
        (1.5, 1.5),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        (b"\x00\x1f\xff", "001fff"),
        (bytearray(b"\x01"), "01"),
        (datetime(2026, 1, 31, 12, 30, tzinfo=UTC), "2026-01-31T12:30:00+00:00"),
        (datetime(2026, 1, 31, 12, 30), "2026-01-31T12:30:00"),
        (date(2026, 1, 31), "2026-01-31"),
        ((1, b"\x02", "x"), [1, "02", "x"]),
        ({"a": (1, 2), 3: b"\x04"}, {"a": [1, 2], "3": "04"}),
        ({2, 1}, [1, 2]),
        (decimal.Decimal("1.10"), "1.10"),
        (np.int64(5), 5),
        (np.float64(0.25), 0.25),
    ],
)
def test_jsonable(value: Any, expected: Any) -> None:
    assert jsonable(value) == expected
    json.dumps(jsonable(value), allow_nan=False)  # always valid JSON


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ""),
        ("plain text", "plain text"),
        (3, "3"),
        (2.0, "2.0"),
        (False, "false"),
        (b"\xab", "ab"),
        ((1, "a"), '[1,"a"]'),
        ({"k": None}, '{"k":null}'),
    ],
)
def test_cell(value: Any, expected: str) -> None:
    assert cell(value) == expected


def render(rows: Any, fmt: str, **kwargs: Any) -> str:
    out = io.StringIO()
    emit_rows(rows, fmt, file=out, **kwargs)
    return out.getvalue()


def test_jsonl_and_json_parse_back_to_the_rendered_rows() -> None:
    expected = [jsonable(row) for row in ROWS]
    lines = render(iter(ROWS), "jsonl").splitlines()
    assert [json.loads(line) for line in lines] == expected
    assert json.loads(render(iter(ROWS), "json")) == expected
    assert json.loads(render(iter([]), "json")) == []
    assert render(iter([]), "jsonl") == ""


def test_csv_has_the_union_of_fields_in_first_seen_order() -> None:
    text = render(ROWS, "csv")
    reader = csv.DictReader(io.StringIO(text))
    assert reader.fieldnames == ["id", "name", "score", "blob", "at", "pair", "tags", "doc"]
    got = list(reader)
    assert got == [{name: cell(row.get(name)) for name in reader.fieldnames} for row in ROWS]
    assert got[1]["blob"] == "00ff"
    assert got[2]["pair"] == '[1,"x"]'


def test_csv_tells_an_empty_string_from_a_null(tmp_path: Path) -> None:
    """An empty string is a quoted empty field, a null an empty one (found by a probe:
    both printed as an empty field, so no reader could tell them apart)."""
    rows = [{"k": "a", "s": ""}, {"k": "b", "s": None}, {"k": "c"}, {"k": "d", "s": 'x,"y"\nz'}]
    text = render(rows, "csv")
    assert text.splitlines()[:4] == ["k,s", 'a,""', "b,", "c,"]
    assert [row["s"] for row in csv.DictReader(io.StringIO(text))][3] == 'x,"y"\nz'
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "out.csv"
    path.write_text(text)
    query = "select s from read_csv($p, header=true, all_varchar=true, allow_quoted_nulls=false)"
    got = [row[0] for row in duckdb.execute(query, {"p": str(path)}).fetchall()]
    assert got == ["", None, None, 'x,"y"\nz']


def test_requested_columns_come_first_and_show_without_rows() -> None:
    assert render([], "csv", columns=["id", "qty"]) == "id,qty\n"
    text = render([{"id": 1, "z": 2}], "csv", columns=["id", "qty"])
    assert text.splitlines()[0] == "id,qty,z"


def test_table_aligns_columns_and_right_aligns_numbers() -> None:
    lines = render(ROWS, "table").splitlines()
    header, rule, *body = lines
    assert header.split() == ["id", "name", "score", "blob", "at", "pair", "tags", "doc"]
    assert set(rule.replace(" ", "")) == {"-"}
    # Every column starts where its rule starts: the rule marks the column widths.
    starts = [i for i, ch in enumerate(rule) if ch == "-" and (i == 0 or rule[i - 1] == " ")]
    assert body[0][: starts[1]].rstrip() == " 1"  # ids are right-aligned under "id"
    assert body[2][: starts[1]].rstrip() == "10"
    assert body[0][starts[1] :].startswith("ada")
    assert body[1][starts[3] :].startswith("00ff")


def test_table_escapes_line_breaks_and_counts_wide_characters() -> None:
    assert render([{"k": "a\nb"}], "table").splitlines() == ["k", "----", "a\\nb"]
    # "漢字" takes four columns on a terminal; the next column starts after them.
    assert render([{"k": "漢字", "n": 1}], "table").splitlines() == [
        "k     n",
        "----  -",
        "漢字  1",
    ]


def test_emit_rows_counts_and_rejects_unknown_formats() -> None:
    assert emit_rows(iter(ROWS), "jsonl", file=io.StringIO()) == 3
    with pytest.raises(ValueError, match="unknown output format"):
        emit_rows(ROWS, "xml", file=io.StringIO())


def test_emit_record_in_every_format() -> None:
    record = {"name": "shop", "tables": {"t": {"count": 1}}, "at": date(2026, 1, 1)}
    out = io.StringIO()
    emit_record(record, "json", file=out)
    assert json.loads(out.getvalue()) == jsonable(record)
    assert out.getvalue().count("\n") > 3  # indented for people
    out = io.StringIO()
    emit_record(record, "jsonl", file=out)
    assert out.getvalue().count("\n") == 1
    assert json.loads(out.getvalue()) == jsonable(record)
    out = io.StringIO()
    emit_record(record, "csv", file=out)
    assert list(csv.DictReader(io.StringIO(out.getvalue()))) == [
        {"name": "shop", "tables": '{"t":{"count":1}}', "at": "2026-01-01"}
    ]
    out = io.StringIO()
    emit_record(record, "table", file=out)
    assert out.getvalue().splitlines() == [
        "name    shop",
        'tables  {"t":{"count":1}}',
        "at      2026-01-01",
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_default_format_is_table_on_a_terminal_and_jsonl_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    assert default_format() == "table"
    emit_rows([{"id": 1}])
    assert terminal.getvalue() == "id\n--\n 1\n"
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert default_format() == "jsonl"

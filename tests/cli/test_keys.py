"""Keys typed on the command line, parsed by a table's key codec."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from merkle.cli.common import CliError
from merkle.cli.keys import parse_key, split_spec
from merkle.cli.output import cell
from merkle.tablets.keys import key_codec


@pytest.mark.parametrize(
    ("spec", "text", "expected"),
    [
        ("int", "42", 42),
        ("int", "-7", -7),
        ("int", " 5 ", 5),
        ("float", "2.5", 2.5),
        ("float", "3", 3.0),
        ("float", "-inf", float("-inf")),
        ("str", "007", "007"),
        ("str", " spaced ", " spaced "),
        ("str", "", ""),
        ("bytes", "00ff", b"\x00\xff"),
        ("bytes", "0x00FF", b"\x00\xff"),
        ("bytes", "", b""),
        ("timestamp", "2026-01-31T12:00:00Z", datetime(2026, 1, 31, 12, tzinfo=UTC)),
        ("timestamp", "2026-01-31T13:00:00+01:00", datetime(2026, 1, 31, 12, tzinfo=UTC)),
        ("timestamp", "2026-01-31", datetime(2026, 1, 31, tzinfo=UTC)),  # naive is UTC
        ("timestamp", "2026-01-31T00:00:00.0000010", datetime(2026, 1, 31, 0, 0, 0, 1, UTC)),
        ("reverse(int)", "3", 3),
        ("tuple(int,str)", '[2026, "eu"]', (2026, "eu")),
        ("tuple(int,str)", '["2026", "eu"]', (2026, "eu")),
        ("tuple(str,bytes)", '["a", "0a"]', ("a", b"\n")),
        (
            "tuple(timestamp,reverse(float))",
            '["2026-01-31T00:00:00Z", 1]',
            (datetime(2026, 1, 31, tzinfo=UTC), 1.0),
        ),
        ("tuple(int,tuple(str,int))", '[1, ["a", 2]]', (1, ("a", 2))),
    ],
)
def test_parse_key(spec: str, text: str, expected: Any) -> None:
    assert parse_key(text, spec) == expected


@pytest.mark.parametrize(
    ("spec", "text", "reason"),
    [
        ("int", "4.5", "decimal integer"),
        ("int", "abc", "decimal integer"),
        ("int", str(2**64), "64 bits"),
        ("float", "x", "number"),
        ("float", "nan", "NaN"),
        ("bytes", "0g", "hexadecimal"),
        ("bytes", "abc", "hexadecimal"),
        ("timestamp", "yesterday", "ISO-8601"),
        # fromisoformat dropped the seventh digit: another key than the one given
        ("timestamp", "2026-01-01T00:00:00.0000019", "past the microsecond"),
        ("timestamp", "2026-01-01T00:00:00,0000019+00:00", "past the microsecond"),
        ("tuple(int,str)", "1", "JSON array of 2 items"),
        ("tuple(int,str)", "[1]", "expected 2 items"),
        ("tuple(int,str)", "[true, 1]", "is not a int component"),
        ("tuple(int,str)", '[1, "a"', "JSON array"),
    ],
)
def test_bad_keys_name_the_key_and_the_codec(spec: str, text: str, reason: str) -> None:
    with pytest.raises(CliError) as caught:
        parse_key(text, spec)
    message = caught.value.format_message()
    assert f"key {text!r} does not parse as key codec {spec!r}" in message
    assert reason in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "value",
    [
        ("int", -(2**63)),
        ("float", 0.1),
        ("str", "naïve"),
        ("bytes", b"\x00\x01\xfe"),
        ("timestamp", datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        ("tuple(int,str,bytes)", (1, "a", b"\x00")),
        ("tuple(timestamp,reverse(str))", (datetime(2026, 1, 1, tzinfo=UTC), "z")),
    ],
)
def test_rendered_keys_parse_back(value: tuple[str, Any]) -> None:
    """A key copied from the output (a table or csv cell) pastes back as the same key."""
    spec, key = value
    assert parse_key(cell(key), spec) == key_codec(spec).normalize(key)


def test_a_table_without_a_codec_takes_the_text() -> None:
    assert parse_key("12", None) == "12"


def test_split_spec() -> None:
    assert split_spec("int") == ("int", [])
    assert split_spec("reverse(tuple(int,str))") == ("reverse", ["tuple(int,str)"])
    assert split_spec("tuple(int,tuple(str,bytes),reverse(float))") == (
        "tuple",
        ["int", "tuple(str,bytes)", "reverse(float)"],
    )

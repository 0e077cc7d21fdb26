"""The benchmark framework: sections of doc/benchmarks.md are updated independently."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# bench/ is a top-level package of the repository, not of the installed
# distribution: make it importable however pytest was started.
REPO_ROOT = str(Path(__file__).resolve().parents[2])
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from bench.common import Timing, markdown_table, replace_section, write_section  # noqa: E402


def test_write_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\nPreamble.\n\n"
        "<!-- bench:blocks:start -->\nold blocks\n<!-- bench:blocks:end -->\n\n"
        "Between.\n\n"
        "<!-- bench:segments:start -->\nsegments numbers\n<!-- bench:segments:end -->\n"
    )
    write_section("blocks", "new blocks\n\n| a |\n", doc)
    assert doc.read_text() == (
        "# Benchmarks\n\nPreamble.\n\n"
        "<!-- bench:blocks:start -->\nnew blocks\n\n| a |\n<!-- bench:blocks:end -->\n\n"
        "Between.\n\n"
        "<!-- bench:segments:start -->\nsegments numbers\n<!-- bench:segments:end -->\n"
    )


def test_write_section_appends_a_missing_section_and_is_idempotent(tmp_path: Path) -> None:
    doc = tmp_path / "sub" / "benchmarks.md"
    write_section("gc", "first", doc)
    write_section("tablets", "second", doc)
    once = doc.read_text()
    write_section("gc", "first", doc)
    assert doc.read_text() == once
    assert once.index("## gc") < once.index("first") < once.index("## tablets")
    assert once.count("<!-- bench:gc:start -->") == 1


@pytest.mark.parametrize(
    "document",
    [
        "<!-- bench:x:start -->\nno end\n",
        "<!-- bench:x:end -->\n<!-- bench:x:start -->\n",
        "<!-- bench:x:start --><!-- bench:x:end --><!-- bench:x:start --><!-- bench:x:end -->",
    ],
)
def test_broken_markers_are_refused_not_rewritten(document: str) -> None:
    with pytest.raises(ValueError, match="markers"):
        replace_section(document, "x", "new")


def test_section_names_are_checked() -> None:
    with pytest.raises(ValueError, match="section name"):
        replace_section("", "Bad Name", "x")


def test_timing_percentiles_are_observed_samples() -> None:
    timing = Timing(tuple(float(i) for i in range(1, 101)))
    assert (timing.p50, timing.p99, timing.median, timing.best) == (50.0, 99.0, 50.5, 1.0)
    assert timing.total == 5050.0


def test_markdown_table_aligns_numbers_right() -> None:
    assert markdown_table(["op", "MB/s"], [["put", 1]]) == "| op | MB/s |\n|:---|---:|\n| put | 1 |"

"""What the comparison benchmark gathers as it runs (sizes, rows of the targets table,
profiles of the missed targets) and how it prints them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.common import (
    fmt_bytes,
    fmt_duration,
    markdown_table,
)
from bench.compare_profile import Spot, phases, sample
from bench.sides import DELTA, LANCE, MERKLE, PEERS

__all__ = [
    "CLONE_TOLERANCE",
    "COMMIT_SPOTS",
    "FULL",
    "LOAD_SPOTS",
    "LOOKUP_SPOTS",
    "QUICK",
    "READ_SPOTS",
    "Report",
    "Row",
    "Sizes",
    "profile_section",
    "targets_table",
    "verdict",
]


@dataclass(frozen=True)
class Sizes:
    """How much of everything one run does."""

    rows: int  # the loaded table
    big_rows: int  # the second clone size
    load_rounds: int  # bulk loads per system (at least 3: the tables are reused)
    scans: int
    lookups: int  # single-key lookups
    warmup: int  # unmeasured single-key lookups on a fresh handle first
    many_keys: int  # keys in the multi-key lookup
    many_rounds: int
    commits: int  # small upsert commits
    commit_rows: int
    delta_every: int  # Delta takes every n-th small commit (each rewrites its data file)
    lance_upkeep: int  # Lance compacts and folds new rows into its index every n small commits
    updates: int  # 1% update commits
    update_fraction: float
    after_lookups: int  # single-key lookups again after the small commits
    travels: int
    clones: int


FULL = Sizes(
    rows=1_000_000,
    big_rows=10_000_000,
    load_rounds=3,
    scans=11,
    lookups=1_000,
    warmup=10,
    many_keys=1_000,
    many_rounds=5,
    commits=1_000,
    commit_rows=10,
    delta_every=10,
    lance_upkeep=100,
    updates=100,
    update_fraction=0.01,
    after_lookups=200,
    travels=11,
    clones=5,
)
QUICK = Sizes(
    rows=100_000,
    big_rows=1_000_000,
    load_rounds=3,
    scans=3,
    lookups=200,
    warmup=10,
    many_keys=1_000,
    many_rounds=3,
    commits=100,
    commit_rows=10,
    delta_every=10,
    lance_upkeep=25,
    updates=10,
    update_fraction=0.01,
    after_lookups=50,
    travels=3,
    clones=3,
)

#: merkle-db's clone counts as "the same time at both sizes" within this factor (noise).
CLONE_TOLERANCE = 1.5


@dataclass
class Row:
    """One line of the targets table."""

    name: str
    values: dict[str, float]  # per system: seconds or bytes
    unit: str  # "s" or "B"
    target: float | None  # merkle / best peer must be <= target (None: informational)
    detail: dict[str, str] = field(default_factory=dict)  # shown instead of the value

    @property
    def best_peer(self) -> float:
        return min(self.values[p] for p in PEERS if p in self.values)

    @property
    def ratio(self) -> float:
        return self.values[MERKLE] / self.best_peer

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.ratio <= self.target

    def cell(self, label: str) -> str:
        if label in self.detail:
            return self.detail[label]
        if label not in self.values:
            return "-"
        value = self.values[label]
        return fmt_bytes(int(value)) if self.unit == "B" else fmt_duration(value)


def verdict(met: bool | None) -> str:
    return "" if met is None else ("**met**" if met else "**missed**")


def targets_table(rows: list[Row]) -> str:
    body = []
    for row in rows:
        target = "-" if row.target is None else f"<= {row.target:g}"
        body.append(
            [
                row.name,
                row.cell(MERKLE),
                row.cell(DELTA),
                row.cell(LANCE),
                f"{row.ratio:.2f}",
                target,
                verdict(row.met),
            ]
        )
    return markdown_table(
        ["operation", MERKLE, DELTA, LANCE, "merkle-db / best peer", "target", ""], body
    )


@dataclass
class Report:
    """Everything the section prints, gathered as the steps run."""

    rows: list[Row] = field(default_factory=list)
    extra: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    clone: str = ""


def profile_section(
    title: str, fn: Callable[[], Any], runs: int, spots: list[Spot] | None = None
) -> str:
    """Wall-clock phases of ``fn`` (exact, I/O included), then a sampled profile."""
    parts = [f"**{title}**, merkle-db's side."]
    if spots:
        parts.append("Where the wall-clock time goes (each function timed on every call):")
        parts.append(phases(fn, spots, runs=runs).markdown())
    parts.append("Sampled: " + sample(fn, runs=runs).markdown())
    return "\n\n".join(parts)


#: The functions timed for each missed target's phase table (``module:qualname``).
LOAD_SPOTS = [
    Spot("sort the rows by key", "merkle.db.database:sort_rows"),
    Spot("cut, encode, hash and stage the tablets", "merkle.tablets.store:TableStore.put_segments"),
    Spot("encode one segment", "merkle.tablets.store:encode_segment", threads=True),
    Spot("write the blocks durably", "merkle.db.staging:StagedBlocks.flush_reachable"),
    Spot("journal entry (compare-and-set)", "merkle.refs.journal:RefManager.commit"),
]
READ_SPOTS = [
    Spot("connect", "merkle.db.connection:Connection.__init__"),
    Spot("open the version", "merkle.db.connection:Connection.open_db"),
    Spot("read the table (`to_arrow`)", "merkle.db.database:Database.to_arrow"),
    Spot("read and verify blocks", "merkle.blocks.store:BlockStore.get_many", nested=True),
    Spot("decode segments", "merkle.tablets.store:decode_segment", threads=True),
    Spot("close the connection", "merkle.db.connection:Connection.close"),
]
LOOKUP_SPOTS = [
    Spot("find the rows (`Table.get`)", "merkle.tablets.table:Table.get"),
    Spot("read the tablet's rows", "merkle.tablets.tree:Tree.read_rows", nested=True),
    Spot("concatenate the pieces", "merkle.tablets.table:concat_segments", nested=True),
    Spot("turn the rows into dicts", "merkle.db.database:Database._records"),
]
COMMIT_SPOTS = [
    Spot("buffer the rows (`Database.write`)", "merkle.db.database:Database.write"),
    Spot("fold them into the table", "merkle.tablets.table:Table.apply_changes"),
    Spot("rebuild the pending overlay", "merkle.tablets.batch:Overlay.load", nested=True),
    Spot("merge batch tiers", "merkle.tablets.table:merge_tier", nested=True),
    Spot("encode the new batch", "merkle.tablets.table:write_batch", nested=True),
    Spot("write the blocks durably", "merkle.db.staging:StagedBlocks.flush_reachable"),
    Spot("journal entry (compare-and-set)", "merkle.refs.journal:RefManager.commit"),
]

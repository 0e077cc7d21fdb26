"""Size tiers of pending batches: which adjacent batches to merge after a commit.

A commit adds one batch at the head of a table's pending list (newest
first). Left alone the list grows by one batch per commit, and every read
of the pending area and every commit (which rewrites the list) costs its
length. The rule here keeps the list to O(log n) batches for any sequence
of commit sizes, rewriting each entry O(log n) times.

The invariant, read from the oldest batch to the newest: tiers never grow
(a newer batch's tier is at most the tier of the batch below it), no
:data:`TIER_FANIN` batches in a row share a tier, and no two batches hold
the same version. A list that keeps it holds at most ``TIER_FANIN - 1``
batches per tier, and no tier is above ``floor(log4(E))`` for ``E`` pending
entries: at most ``3 * (floor(log4(E)) + 1)`` batches (1.5 * log2(E) + 3).

An earlier rule only merged the newest four batches when they shared a tier:
commits of mixed sizes (1 and 4 rows alternately) changed tier at every
batch, so nothing was ever merged and the list grew by one batch a commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from merkle.blocks.cid import CID
from merkle.tablets.batch import fold, load_batch, write_batch
from merkle.tablets.keys import KeyCodec
from merkle.tablets.store import TableStore

__all__ = ["TIER_FANIN", "batch_tier", "max_batches", "merge_tier", "plan_merges"]

#: Pending batches merge in fours: four batches of one size tier (sizes within a
#: factor of four) become one of the next tier.
TIER_FANIN = 4


def batch_tier(count: int) -> int:
    """The size tier of a batch of ``count`` entries: floor(log4(count)) (0 for 0)."""
    tier = 0
    while count >= TIER_FANIN:
        count //= TIER_FANIN
        tier += 1
    return tier


def max_batches(entries: int) -> int:
    """The most batches a list holding ``entries`` entries keeps under the invariant:
    ``TIER_FANIN - 1`` per tier, tiers 0 to ``batch_tier(entries)``."""
    return (TIER_FANIN - 1) * (batch_tier(entries) + 1)


@dataclass(frozen=True, slots=True)
class _Run:
    """Adjacent batches ``[start, stop)`` of the pending list (newest first) to be folded
    into one: their total entries (an upper bound of the fold's: keys may repeat) and
    the versions they span."""

    start: int
    stop: int
    count: int
    lower: int
    upper: int

    @property
    def tier(self) -> int:
        return batch_tier(self.count)

    def absorb(self, older: _Run) -> _Run:
        """This run and ``older``, the run just below it, as one."""
        return _Run(self.start, older.stop, self.count + older.count, older.lower, self.upper)


def plan_merges(batches: Sequence[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """Which adjacent batches to fold so that the list keeps the tier invariant.

    ``batches`` are ``(count, lower, upper)`` of the pending list, newest
    first. The answer partitions it into ranges ``[start, stop)``, newest
    first, each to be folded into one batch (a range of one keeps its batch).

    The batches are pushed on a stack from the oldest to the newest. A pushed
    batch first takes in the batch below it if their versions overlap (one
    commit's changes, applied twice), then every batch below it of a lower
    tier than its own (a large commit above small ones), then, if it makes
    :data:`TIER_FANIN` in a row of its tier, the batches of that run; after
    each it is checked again, as its tier may have grown. A list that keeps
    the invariant gives no merges, so after a commit only the new batch and
    the batches it meets are folded, each once. Every older batch folded so
    lands in a batch of a higher tier than its own (unless keys repeat, which
    only makes merges smaller), so each entry is rewritten at most once per
    tier: O(log n) times, as with the four-at-a-time rule for equal sizes.
    """
    stack: list[_Run] = []  # oldest at the bottom; tiers never grow going up
    for i in range(len(batches) - 1, -1, -1):
        count, lower, upper = batches[i]
        run = _Run(i, i + 1, count, lower, upper)
        while stack:
            top = stack[-1]
            if run.lower <= top.upper or top.tier < run.tier:
                run = run.absorb(stack.pop())
                continue
            same = 0
            while same < len(stack) and stack[-1 - same].tier == run.tier:
                same += 1
            if same < TIER_FANIN - 1:
                break
            for _ in range(TIER_FANIN - 1):
                run = run.absorb(stack.pop())
        stack.append(run)
    return [(run.start, run.stop) for run in reversed(stack)]


def merge_tier(
    ts: TableStore,
    pending: list[CID],
    key_field: str,
    codec: KeyCodec,
) -> list[CID]:
    """Fold adjacent batches of ``pending`` (newest first) as :func:`plan_merges` says,
    until the list keeps the tier invariant.

    Folding keeps the newest change of each key (doc/format.md, "Batch") and
    a folded batch spans the versions of the batches it replaces. The plan
    counts a run's entries as the sum of its batches' (an upper bound); a
    fold of repeated keys may come out smaller, in a lower tier, so the list
    is planned again from the stored counts until no fold is needed (each
    round shortens it, so this ends).
    """
    pending = list(pending)
    while True:
        nodes = [ts.batch(cid) for cid in pending]
        plan = plan_merges([(node.count, node.lower, node.upper) for node in nodes])
        if len(plan) == len(pending):
            return pending
        merged: list[CID] = []
        for start, stop in plan:
            if stop - start == 1:
                merged.append(pending[start])
                continue
            contents = [load_batch(ts, cid, key_field, codec) for cid in pending[start:stop]]
            content = fold(contents, key_field, codec)
            merged.append(write_batch(ts, content, nodes[stop - 1].lower, nodes[start].upper))
        pending = merged

"""merkle-db against Delta Lake (``deltalake``) and Lance (``pylance``), same data, same run.

Issue 5. One generated table (1,000,000 rows: a shuffled int64 key, a short
string, a float, a low-cardinality string, a timestamp) is loaded into all
three stores on the local disk, under one temporary directory, and then:

1. bulk load (a new table from Arrow, committed);
2. full scan to Arrow, from a fresh handle and from an open one;
3. 1,000 single-key lookups (merkle-db ``get_arrow`` with one key; Lance
   with a BTREE scalar index on the key; Delta with a SQL filter);
4. one lookup of 1,000 keys;
5. 1,000 commits of 10 upserted rows (5 updates, 5 inserts) into the loaded
   table: latency and bytes written per commit (growth of the directory);
6. bytes on disk after 100 commits that each update 1% of the rows (random
   keys), every version kept;
7. opening the first version after those updates and scanning it;
8. clone, at 1,000,000 and 10,000,000 rows.

Each peer is used the way its documentation shows for the operation
(``write_deltalake``, ``DeltaTable.merge``, ``QueryBuilder``,
``DeltaTable(path, version=...)``; ``lance.write_dataset``, ``merge_insert``,
``create_scalar_index(..., index_type="BTREE")``, ``lance.dataset(path,
version=...)``, ``shallow_clone``). Competitors take turns operation by
operation (interleaved), so they share the machine's background load, and
the disk is synced (untimed) before each timed operation.

Every target is the ratio of merkle-db's time (or bytes) to the better of the
two peers in this run; the section marks each met or missed and, for every
missed one, profiles merkle-db's side (``bench/compare_profile.py``: the
wall-clock time inside the functions that make up the operation, then a
sampled profile, py-spy when installed) and says what costs the time.

Run: ``python -m bench compare [--quick]`` (``--quick``: 100,000 rows, fewer
commits, clone at 100,000 and 1,000,000 rows).
"""

from __future__ import annotations

import sys
import time

from bench.common import (
    machine_info,
    temp_dir,
)
from bench.compare_report import FULL, QUICK, Report, targets_table
from bench.compare_steps import (
    step_clone,
    step_commits,
    step_load,
    step_lookups,
    step_scan,
    step_updates,
)
from bench.sides import make_table

__all__ = ["run"]

# -- the section ----------------------------------------------------------------------


SETUP = """\
All three stores live under one temporary directory on the local disk
(`$MERKLE_BENCH_TMP`, {fs}); the same Arrow table ({rows:,} rows: `id` int64,
shuffled; `name` short string; `price` float64; `status` one of 5 strings;
`ts` timestamp[us, UTC]) is loaded into each, and competitors take turns
operation by operation so that they share the machine's background load.
Before every timed operation the dirty pages of the page cache are written
out (`os.sync`, untimed), so that merkle-db's fsyncs never wait for writes a
peer left unsynced.
Caches: the OS page cache is warm everywhere (the data was just written; {memory}
of RAM, nothing is dropped). A *fresh handle* is a new `merkle.connect` +
`open_db`, a new `DeltaTable`, a new `lance.dataset`: no in-process cache. The
lookups run on a handle opened just before, after {warmup} unmeasured lookups
(merkle-db then holds the decoded tablets it touched, Lance its index pages).

How each store is used: merkle-db `create_db`/`create_table`/`write`/`commit`,
`to_arrow`, `get_arrow` (lookups return Arrow, as the peers' do), `open_db(version=)`,
`create_db(root=db)`; Delta
`write_deltalake`, `DeltaTable.to_pyarrow_table`, `QueryBuilder` SQL
`WHERE id = k` / `id IN (...)` (DataFusion; the fastest of the documented
filters here), `DeltaTable.merge` (update all / insert all),
`DeltaTable(path, version=0)`, and for a clone `shutil.copytree` of the table
(delta-rs has no CLONE; shallow clone is an open pull request,
delta-io/delta-rs#3938); Lance `write_dataset`, `to_table`,
`create_scalar_index(index_type="BTREE")` + `to_table(filter=)`,
`merge_insert` (update all / insert all), `lance.dataset(path, version=)`,
`shallow_clone`. Default settings everywhere; all versions are kept (no
vacuum, cleanup or GC runs; Lance's automatic cleanup only removes versions
older than 14 days).

Durability: merkle-db fsyncs every commit (blocks, then the journal entry).
Neither peer fsyncs on a local disk (object_store's local file system writes
and renames without fsync; checked with strace: no fsync or fdatasync in a
Delta merge or a Lance merge_insert), so row 5 also shows merkle-db with
`fsync=False`. Times are medians unless said; bytes are apparent file sizes;
merkle-db / best peer is merkle-db's number over the better of the two peers."""


def progress(started: float, what: str) -> None:
    """A line on stderr: the full run takes minutes."""
    print(
        f"   compare: {time.perf_counter() - started:6.0f} s  {what}", file=sys.stderr, flush=True
    )


def run(quick: bool) -> str:
    sizes = QUICK if quick else FULL
    seed = 5
    report = Report()
    started = time.perf_counter()
    data = make_table(sizes.rows, seed)
    with temp_dir("merkle-compare-") as scratch:
        info = machine_info()
        fs, memory = info["scratch filesystem"], info.get("memory", "?")
        progress(started, "1. bulk load")
        rounds = step_load(data, scratch, sizes, report)
        main, updates, clones = rounds[-1], rounds[1], rounds[0]
        progress(started, "2. full scan")
        step_scan(main, sizes.rows, sizes, report)
        progress(started, "3-4. lookups")
        step_lookups(main, sizes.rows, sizes, report, seed + 1)
        progress(started, "5. small commits")
        step_commits(main, sizes.rows, sizes, report, seed + 2, scratch)
        progress(started, "6-7. updates, bytes, time travel")
        step_updates(updates, data, sizes, report, seed + 3, scratch)
        progress(started, "8. clone")
        step_clone(clones, scratch, sizes, report, seed + 4)
        progress(started, "done")
        for store in rounds:
            for side in store.values():
                side.close()
    met = [r for r in report.rows if r.met is not None]
    summary = (
        f"{sum(1 for r in met if r.met)} of {len(met)} time and size targets met; " + report.clone
    )
    parts = [
        SETUP.format(fs=fs, memory=memory, rows=sizes.rows, warmup=sizes.warmup),
        "### Targets",
        targets_table(report.rows),
        summary,
        "### More numbers from the same run",
        targets_table(report.extra),
        "\n".join(f"- {note}" for note in report.notes),
    ]
    missed = [r.name for r in report.rows if r.met is False]
    if missed or report.profiles:
        parts.append("### Where merkle-db's time goes on the missed targets")
        parts.append(
            "merkle-db repeats the operation twice more (`bench/compare_profile.py`): "
            "once with the functions that make it up timed on every call (wall clock, "
            "I/O waits included), once sampled across threads (py-spy when it is "
            "installed: shares of busy-thread samples, native calls charged to the "
            "merkle-db function that made them; a thread waiting on I/O is idle and not "
            "counted). After each profile: what the time goes to and what would close "
            "the gap."
        )
        for profile in report.profiles:  # each begins "**<step number>. ..."
            parts.append(profile)
            step = profile.removeprefix("**").split(" ", 1)[0]
            if step in NOTES:
                parts.append(NOTES[step])
    return "\n\n".join(parts)


#: What would close each gap, by the row's step number; printed for the rows missed in a run.
#: From the profiles above and side measurements on the benchmark machine (November 2026).
NOTES: dict[str, str] = {
    "1.": """\
**Bulk load: why it misses, and what is left.** merkle-db keeps a table
sorted by encoded key in a B+-tree of tablets; Lance writes the rows in the
order they came, with light encodings and no fsync. A load therefore sorts
first (`merkle/tablets/rows.py:sort_rows`: an unstable `np.argsort` of the
8-byte keys, a stable one only when keys repeat), then each worker gathers
its own tablet's rows (`Table.take`, the string columns dominate), encodes
them as zstd-3 Arrow IPC and the blocks are hashed (BLAKE3) and fsynced. Done
so far: the unstable sort and the per-tablet gather on every core took the
load from 727 ms to 340-420 ms (it varies between runs on the 2-core
benchmark machine). What is left is the gather and the
compression: a random gather over the whole table (it grows with size), and
zstd-3 (lz4 encodes a tablet in 8.1 ms, zstd-1 in 15.1 ms, zstd-3 in
21.7 ms; zstd-3 was chosen for the bytes it saves, see the segments
section). Sorting is the price of what the sort buys: point lookups 2.4x
faster than Lance's BTREE index without any index, and key-range scans that
read only the tablets they need. A load that arrives in key order skips the
sort.""",
    "2.": """\
**Full scan, fresh handle: what would close the gap.** Opening is cheap; the
time is reading: `BlockStore.get_many` reads and BLAKE3-verifies every
segment (on the calling thread, before any decoding starts), then
`segment.py:decode_segment` decompresses them (zstd) on the worker pool,
where a tablet takes far longer than alone (5.44 ms in the segments section)
because 4 workers and BLAKE3's own threads share 2 cores. Levers: decode each
segment as soon as its bytes arrive instead of after all of them; segments
that decode faster (lz4: 2.87 ms a tablet; uncompressed is zero-copy, at 2.6x
the bytes); no more worker threads than cores. A second scan on an open
handle is served from the decoded-segment cache.""",
    "3.": """\
**Single-key lookup: what costs the time.** The key is found in microseconds
(`tree.py:Tree.locate`, `keyindex.py:KeyIndex.find`); most of a lookup is
building Arrow and Python objects for one row: `segment.py:concat_segments`
even when there is one piece, `tree.py:Tree.read_rows` joining families of a
single-family tablet, and `segment.py:arrow_to_records`. A fast path for one
piece and one family, and `to_pylist` for typed columns, would remove them.""",
    "4.": """\
**1,000-key lookup: what costs the time.** See the profile: per-tablet takes
and the conversion of the rows to dicts (`segment.py:arrow_to_records`).""",
    "5.": """\
**10-row commit: what costs the time.** Each commit rebuilds the overlay of
every pending batch (`batch.py:Overlay.load`, folding all of them again),
merges tiers (`tiers.py:merge_tier`), encodes the new batch and makes it
durable in several fsync rounds (blocks, directory, journal entry). Keeping
the overlay incrementally (the previous overlay plus the new batch) and
fewer fsync rounds are the levers.""",
    "6.": """\
**Bytes after 1% updates: what would close the gap.** Nearly all the bytes
are tablet segments rewritten by flushes: a commit of 10,000 rows goes to a
pending batch, and when the pending rows pass `patch_limit` (20,000 by
default) `table.py:Table.flush` rewrites every tablet the pending keys touch,
which for random keys is every tablet, so each flush writes the table again
and every version keeps its copy. Lance appends the changed rows as a new
fragment plus a deletion file. Levers: a patch limit that scales with the
table (the what-if above), pending batches merged with a larger fan-in so a
row is rewritten fewer times before the flush, and column families for
tables whose updates touch a few columns (here every column changes).""",
    "7.": """\
**Opening the first version and scanning it: what would close the gap.**
Opening a version is O(1) (one journal entry and a root node); the time is the
scan, decode-bound as in row 2, and the same levers apply.""",
}

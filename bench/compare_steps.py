"""The steps of the comparison benchmark (``bench/compare.py``): each times one
operation on the three stores in turns and adds its rows to the report."""

from __future__ import annotations

import functools
import gc
import itertools
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.common import (
    Timing,
    fmt_bytes,
    fmt_duration,
)
from bench.compare_profile import lake_census
from bench.compare_report import (
    CLONE_TOLERANCE,
    COMMIT_SPOTS,
    LOAD_SPOTS,
    LOOKUP_SPOTS,
    READ_SPOTS,
    Report,
    Row,
    Sizes,
    profile_section,
    verdict,
)
from bench.sides import (
    DELTA,
    KEY,
    LANCE,
    MERKLE,
    LanceSide,
    MerkleSide,
    Side,
    clone_one,
    dir_bytes,
    each,
    get_many,
    get_one,
    make_table,
    measure,
    sides,
    time_rotating,
    with_values,
)

# -- the steps --------------------------------------------------------------------------


__all__ = ["step_clone", "step_commits", "step_load", "step_lookups", "step_scan", "step_updates"]


def step_load(data: pa.Table, scratch: Path, sizes: Sizes, report: Report) -> list[dict[str, Side]]:
    """Bulk load, interleaved rounds; every round's stores are kept for later steps."""
    rounds: list[dict[str, Side]] = [sides(scratch / f"load{i}") for i in range(sizes.load_rounds)]
    fns = {
        label: functools.partial(lambda label, i: rounds[i][label].load(data), label)
        for label in (MERKLE, DELTA, LANCE)
    }
    timings = measure(fns, range(sizes.load_rounds))
    on_disk = {label: dir_bytes(rounds[0][label].root)[0] for label in fns}
    report.rows.append(
        Row(
            f"1. bulk load, {sizes.rows:,} rows (median of {sizes.load_rounds})",
            {label: t.median for label, t in timings.items()},
            "s",
            1.0,
        )
    )
    report.extra.append(Row("size on disk after the load", dict(on_disk), "B", None))
    if not report.rows[-1].met:
        side = MerkleSide(scratch / "profile-load")
        counter = itertools.count()

        def load_again() -> None:
            side.root = scratch / f"profile-load-{next(counter)}"
            side.load(data)

        report.profiles.append(profile_section("1. bulk load", load_again, 3, LOAD_SPOTS))
        side.close()
    return rounds


def step_scan(stores: dict[str, Side], n: int, sizes: Sizes, report: Report) -> None:
    """Full scan to Arrow from a fresh handle (files in the page cache), then from an open one."""
    for side in stores.values():
        assert side.open_scan().num_rows == n
    fresh = measure(each(stores, lambda s, _i: s.open_scan()), range(sizes.scans))
    for side in stores.values():
        side.reopen()
        side.scan()
    warm = measure(each(stores, lambda s, _i: s.scan()), range(sizes.scans))
    report.rows.append(
        Row(
            "2. full scan to Arrow, fresh handle (median)",
            {label: t.median for label, t in fresh.items()},
            "s",
            1.0,
        )
    )
    report.rows.append(
        Row(
            "2. full scan to Arrow, open handle, second scan (median)",
            {label: t.median for label, t in warm.items()},
            "s",
            None,
        )
    )
    if not report.rows[-2].met:
        merkle_side = stores[MERKLE]
        report.profiles.append(
            profile_section("2. full scan, fresh handle", merkle_side.open_scan, 20, READ_SPOTS)
        )


def step_lookups(stores: dict[str, Side], n: int, sizes: Sizes, report: Report, seed: int) -> None:
    """Single-key lookups (fresh handles, a few unmeasured first) and one multi-key lookup."""
    lance_side = stores[LANCE]
    assert isinstance(lance_side, LanceSide)
    index = measure({LANCE: lambda _i: lance_side.index()}, [0])[LANCE]
    report.notes.append(
        f"Lance's BTREE index on `{KEY}` took {fmt_duration(index.total)} to build after the "
        "load (not counted in the load); merkle-db and Delta need no index step."
    )
    rng = np.random.default_rng(seed)
    for side in stores.values():
        side.reopen()
        for k in rng.integers(0, n, sizes.warmup):
            side.get([int(k)])
    keys = [int(k) for k in rng.integers(0, n, sizes.lookups)]
    fns = each(stores, get_one)
    for label, fn in fns.items():
        found = fn(keys[0])
        assert len(found) == 1, f"{label} did not find key {keys[0]}"
    one = measure(fns, keys)
    row = Row(
        f"3. single-key lookup, p50 of {sizes.lookups:,}",
        {label: t.p50 for label, t in one.items()},
        "s",
        0.5,
    )
    report.rows.append(row)
    report.extra.append(
        Row(
            "3. single-key lookup, p99",
            {label: t.p99 for label, t in one.items()},
            "s",
            None,
        )
    )
    report.extra.append(
        Row(
            "3. single-key lookup, mean",
            {label: t.total / len(t) for label, t in one.items()},
            "s",
            None,
        )
    )
    if not row.met:
        merkle_side = stores[MERKLE]
        it = itertools.cycle(keys)
        report.profiles.append(
            profile_section(
                "3. single-key lookup",
                lambda: merkle_side.get([next(it)]),
                len(keys) * 5,
                LOOKUP_SPOTS,
            )
        )

    batches = [
        [int(k) for k in rng.choice(n, sizes.many_keys, replace=False)]
        for _ in range(sizes.many_rounds)
    ]
    many_fns = each(stores, get_many)
    for label, many_fn in many_fns.items():
        assert len(many_fn(batches[0])) == sizes.many_keys, f"{label} lost keys"
    many = measure(many_fns, batches)
    row = Row(
        f"4. one lookup of {sizes.many_keys:,} keys (median of {sizes.many_rounds})",
        {label: t.median for label, t in many.items()},
        "s",
        1.0,
    )
    report.rows.append(row)
    if not row.met:
        merkle_side = stores[MERKLE]
        it2 = itertools.cycle(batches)
        report.profiles.append(
            profile_section(
                f"4. lookup of {sizes.many_keys:,} keys",
                lambda: merkle_side.get(next(it2)),
                len(batches) * 4,
                LOOKUP_SPOTS,
            )
        )


def step_commits(
    stores: dict[str, Side], n: int, sizes: Sizes, report: Report, seed: int, scratch: Path
) -> None:
    """Small upsert commits into the loaded tables; latency and directory growth."""
    rng = np.random.default_rng(seed)
    half = sizes.commit_rows // 2
    batches = []
    for i in range(sizes.commits):
        updated = rng.choice(n, sizes.commit_rows - half, replace=False)
        inserted = n + i * half + np.arange(half)
        batches.append(with_values(np.concatenate([updated, inserted]).astype(np.int64), rng))

    # The same lake without fsync: the peers do not fsync on local disk (see the notes).
    merkle_side = stores[MERKLE]
    assert isinstance(merkle_side, MerkleSide)
    twin_root = scratch / "merkle-nofsync"
    merkle_side.close()
    shutil.copytree(merkle_side.root, twin_root)
    twin = MerkleSide(twin_root, fsync=False)
    twin.first_version = merkle_side.first_version
    nofsync = f"{MERKLE}, fsync off"
    competitors: dict[str, Side] = {**stores, nofsync: twin}
    for side in competitors.values():
        side.reopen()
    lance_side = stores[LANCE]
    assert isinstance(lance_side, LanceSide)
    before = {label: dir_bytes(side.root) for label, side in competitors.items()}
    fns = each(competitors, lambda s, rows: s.upsert(rows))
    samples: dict[str, list[float]] = {label: [] for label in competitors}
    upkeep: list[float] = []
    for first in range(0, len(batches), sizes.lance_upkeep):
        part = time_rotating(
            fns,
            batches[first : first + sizes.lance_upkeep],
            every={DELTA: sizes.delta_every},
            start=first,
        )
        for label, taken in part.items():
            samples[label].extend(taken)
        began = time.perf_counter()
        lance_side.maintain()
        upkeep.append(time.perf_counter() - began)
    timings = {label: Timing(tuple(taken)) for label, taken in samples.items()}
    after = {label: dir_bytes(side.root) for label, side in competitors.items()}
    grown = {
        label: (
            (after[label][0] - before[label][0]) / len(timings[label]),
            (after[label][1] - before[label][1]) / len(timings[label]),
        )
        for label in competitors
    }
    counts = {label: len(t) for label, t in timings.items()}
    delta_note = f" (Delta: {counts[DELTA]})" if counts[DELTA] != sizes.commits else ""
    row = Row(
        f"5. commit of {sizes.commit_rows} upserted rows, p50 of {sizes.commits:,}{delta_note}",
        {label: timings[label].p50 for label in stores},
        "s",
        0.5,
    )
    report.rows.append(row)
    report.extra.append(
        Row(
            "5. commit of 10 rows, p99",
            {label: timings[label].p99 for label in stores},
            "s",
            None,
        )
    )
    tenth = {label: max(1, len(timings[label]) // 10) for label in stores}
    report.extra.append(
        Row(
            "5. commit of 10 rows, p50 of the first tenth of the commits",
            {label: Timing(timings[label].samples[: tenth[label]]).p50 for label in stores},
            "s",
            None,
        )
    )
    report.extra.append(
        Row(
            "5. commit of 10 rows, p50 of the last tenth of the commits",
            {label: Timing(timings[label].samples[-tenth[label] :]).p50 for label in stores},
            "s",
            None,
        )
    )
    lance_mean = (timings[LANCE].total + sum(upkeep)) / len(timings[LANCE])
    report.extra.append(
        Row(
            "5. commit of 10 rows, mean (Lance: with its upkeep spread over the commits)",
            {
                **{label: timings[label].total / len(timings[label]) for label in stores},
                LANCE: lance_mean,
            },
            "s",
            None,
        )
    )
    report.notes.append(
        f"Lance ran its documented upkeep (`optimize.compact_files()` then "
        f"`optimize.optimize_indices()`) after every {sizes.lance_upkeep} small commits, "
        f"outside the commit timings: {len(upkeep)} runs, median "
        f"{fmt_duration(Timing(tuple(upkeep)).median)}. "
        "Without it each merge_insert slows down as small fragments pile up, and single-key "
        "lookups scan the unindexed fragments. Its bytes per commit include the compactions."
    )
    report.extra.append(
        Row(
            "5. bytes written per 10-row commit (directory growth / commits)",
            {label: grown[label][0] for label in stores},
            "B",
            None,
        )
    )
    report.extra.append(
        Row(
            "5. ... allocated on disk per commit (4 KiB blocks)",
            {label: grown[label][1] for label in stores},
            "B",
            None,
        )
    )
    report.notes.append(
        f"With fsync off, the same {MERKLE} commits took p50 {fmt_duration(timings[nofsync].p50)}, "
        f"p99 {fmt_duration(timings[nofsync].p99)} "
        f"(ratio to the best peer {timings[nofsync].p50 / row.best_peer:.2f}): the durability the "
        "peers give on a local disk."
    )
    if counts[DELTA] != sizes.commits:
        report.notes.append(
            f"Delta took part in every {sizes.delta_every}th small commit only ({counts[DELTA]} "
            "commits): each delta-rs merge rewrites the whole data file holding a matched row, "
            f"{fmt_bytes(int(grown[DELTA][0]))} per commit here, so {sizes.commits:,} commits "
            f"would write {fmt_bytes(int(grown[DELTA][0] * sizes.commits))}. Its cost per "
            "commit does not depend on how many came before."
        )

    # Reads after the commits: merkle-db holds them as pending batches, Lance as new fragments.
    rng2 = np.random.default_rng(seed + 1)
    keys = [int(k) for k in rng2.integers(0, n, sizes.after_lookups)]
    for side in stores.values():
        side.reopen()
        for k in keys[: sizes.warmup]:
            side.get([k])
    after_lookups = measure(each(stores, get_one), keys)
    report.extra.append(
        Row(
            f"5. then single-key lookup, p50 of {sizes.after_lookups}",
            {label: t.p50 for label, t in after_lookups.items()},
            "s",
            None,
        )
    )
    twin.close()
    if not row.met:
        profile_batches = itertools.cycle(batches[:200])
        merkle_side.reopen()
        report.profiles.append(
            profile_section(
                f"5. commit of {sizes.commit_rows} rows",
                lambda: merkle_side.upsert(next(profile_batches)),
                min(200, len(batches)),
                COMMIT_SPOTS,
            )
        )


def step_updates(
    stores: dict[str, Side], data: pa.Table, sizes: Sizes, report: Report, seed: int, scratch: Path
) -> None:
    """100 commits that each update 1% of the rows; bytes on disk with every version kept."""
    n = data.num_rows
    rng = np.random.default_rng(seed)
    per = max(1, int(n * sizes.update_fraction))
    batches = [
        with_values(np.sort(rng.choice(n, per, replace=False)).astype(np.int64), rng)
        for _ in range(sizes.updates)
    ]
    # A what-if beside the default: the same table with a higher patch limit.
    whatif_limit = n // 4
    whatif = MerkleSide(scratch / "merkle-patch", patch_limit=whatif_limit)
    whatif.root.mkdir(parents=True)
    whatif.load(data)
    whatif_label = f"{MERKLE}, patch_limit={whatif_limit:,}"
    competitors: dict[str, Side] = {**stores, whatif_label: whatif}
    merkle_side = stores[MERKLE]
    assert isinstance(merkle_side, MerkleSide)
    census_before = lake_census(merkle_side.root)
    for side in competitors.values():
        side.reopen()
    loaded = {label: dir_bytes(side.root)[0] for label, side in competitors.items()}
    timings = measure(each(competitors, lambda s, rows: s.upsert(rows)), batches)
    final = {label: dir_bytes(side.root) for label, side in competitors.items()}
    row = Row(
        f"6. bytes on disk after {sizes.updates} commits updating {sizes.update_fraction:.0%} each",
        {label: final[label][0] for label in stores},
        "B",
        1.0,
    )
    report.rows.append(row)
    report.extra.append(
        Row(
            "6. ... of which written by the updates",
            {label: final[label][0] - loaded[label] for label in stores},
            "B",
            None,
        )
    )
    report.extra.append(
        Row(
            f"6. commit of {per:,} updated rows, p50",
            {label: timings[label].p50 for label in stores},
            "s",
            None,
        )
    )
    report.notes.append(
        f"What-if for 6: the same merkle-db table created with `patch_limit={whatif_limit:,}` "
        f"(default 20,000 rows) ends at {fmt_bytes(final[whatif_label][0])} "
        f"(ratio {final[whatif_label][0] / row.best_peer:.2f} to the best peer), its update "
        f"commits p50 {fmt_duration(timings[whatif_label].p50)}."
    )
    if not row.met:
        census = lake_census(merkle_side.root).minus(census_before)
        report.profiles.append(
            f"**6. bytes after the updates**: what the {sizes.updates} update commits added to "
            f"merkle-db's lake, by kind of block ({fmt_bytes(census.total)} in all).\n\n"
            + census.markdown("added by the updates")
        )
    whatif.close()

    # 7. Time travel: the first version, from fresh handles, after all those versions.
    for label, side in stores.items():
        old = side.travel_scan()
        assert old.num_rows == n, f"{label}: the first version has {old.num_rows} rows"
        total = pc.sum(old.column("price")).as_py()
        expected = pc.sum(data.column("price")).as_py()
        assert abs(total - expected) < 1e-6 * abs(expected), f"{label}: wrong first version"
    travel = measure(
        each(stores, lambda s, _i: s.travel_scan()),
        range(sizes.travels),
    )
    row = Row(
        f"7. open the first version (of {sizes.updates + 1}) and scan it (median)",
        {label: t.median for label, t in travel.items()},
        "s",
        1.0,
    )
    report.rows.append(row)
    if not row.met:
        report.profiles.append(
            profile_section(
                "7. open the first version and scan it", merkle_side.travel_scan, 20, READ_SPOTS
            )
        )


def step_clone(
    small: dict[str, Side], scratch: Path, sizes: Sizes, report: Report, seed: int
) -> None:
    """Clone at two sizes: the loaded tables, then tables of ``big_rows`` loaded here."""
    for side in small.values():
        side.reopen()
    at_small = measure(each(small, clone_one), range(sizes.clones))
    big = sides(scratch / "big")
    big_data = [make_table(sizes.big_rows, seed)]
    big_load = measure(each(big, lambda s, i: s.load(big_data[i])), [0])
    big_data.clear()  # 10 million rows: free them before cloning
    gc.collect()
    for side in big.values():
        side.reopen()
    at_big = measure(each(big, clone_one), range(sizes.clones))
    report.extra.append(
        Row(
            f"bulk load, {sizes.big_rows:,} rows (one each)",
            {label: t.median for label, t in big_load.items()},
            "s",
            None,
        )
    )
    rows_small = Row(
        f"8. clone at {sizes.rows:,} rows (median of {sizes.clones})",
        {label: t.median for label, t in at_small.items()},
        "s",
        None,
    )
    rows_big = Row(
        f"8. clone at {sizes.big_rows:,} rows (median of {sizes.clones})",
        {label: t.median for label, t in at_big.items()},
        "s",
        None,
    )
    report.rows.extend([rows_small, rows_big])
    growth = {label: rows_big.values[label] / rows_small.values[label] for label in big}
    met = growth[MERKLE] <= CLONE_TOLERANCE
    report.clone = (
        f"clone time at {sizes.big_rows:,} rows / at {sizes.rows:,} rows: "
        + ", ".join(f"{label} {g:.2f}" for label, g in growth.items())
        + f". Target: merkle-db takes the same time at both sizes (within {CLONE_TOLERANCE}x, "
        f"timer noise): {verdict(met)}."
    )
    if not met:
        merkle_side = big[MERKLE]
        counter = itertools.count(100)
        report.profiles.append(
            profile_section(
                f"8. clone at {sizes.big_rows:,} rows",
                lambda: merkle_side.clone(next(counter)),
                5,
            )
        )
    for side in big.values():
        side.close()

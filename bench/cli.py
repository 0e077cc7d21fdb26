"""Start-up time of the ``merkle`` command: a point read against ``import pyarrow``.

Issue 13, point 4: ``merkle get`` on a 1M-row lake should take at most 1.5x
the wall time of ``python -c "import pyarrow"`` (which imports numpy too):
every process of the command pays for pyarrow, so what the command adds on
top of it (Python start, click, merkle's own modules, opening the lake,
reading the journal and one tablet page per family) is what is measured.

One table of 1,000,000 rows (quick: 10,000; a shuffled int64 key, two
strings, a double, a timestamp; compacted) is written to a file lake on the
local disk,
then each command runs as a fresh process (cold in-process caches; the OS
page cache is warm: the lake was just written and every command has run
once unmeasured), the commands taking turns in a shuffled order each round:

* ``python -c "import pyarrow"``: the yardstick;
* ``python -c "import merkle"``: the package alone;
* ``merkle get DB TABLE KEY`` as ``python -m merkle.cli.main`` and through
  the installed console script (when there is one next to the interpreter);
* ``merkle db list``.

Every child gets ``PYTHONPATH`` set to this checkout, so a console script
installed from another checkout still runs this one's code. Bytecode is
cached as after an install (a private ``PYTHONPYCACHEPREFIX``, filled by the
unmeasured first runs); one extra row runs ``merkle get`` with
``PYTHONDONTWRITEBYTECODE=1`` and no prefix, as in a development checkout
where bytecode is never written: there merkle's own modules (no
``__pycache__`` beside them) are compiled from source at every start.

Reported: median and p90 wall time over the rounds, and the median CPU time
(user + system, every thread) of the child.

Run: ``python -m bench cli [--quick]``.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

import merkle
from bench.common import (
    REPO_ROOT,
    Timing,
    fmt_duration,
    markdown_table,
    temp_dir,
    time_interleaved,
)

__all__ = ["run"]

#: The issue's target: ``merkle get`` over ``import pyarrow``, wall time.
TARGET = 1.5
DB, TABLE, KEY = "shop", "orders", 5
SEED = 13
BASELINE = 'python -c "import pyarrow"'
GET = f"merkle get {DB} {TABLE} {KEY} (python -m merkle.cli.main)"


def make_lake(path: Path, rows: int) -> None:
    """A file lake at ``path`` with one table of ``rows`` rows, every record in a tablet
    (compacted: a small table's write would otherwise stay a pending batch)."""
    rng = np.random.default_rng(SEED)
    table = pa.table(
        {
            "id": pa.array(rng.permutation(rows), pa.int64()),
            "name": pa.array([f"n{i}" for i in range(rows)]),
            "city": pa.array([f"c{i % 1000}" for i in range(rows)]),
            "price": pa.array(rng.random(rows)),
            "ts": pa.array(np.arange(rows).astype("datetime64[us]")),
        }
    )
    conn = merkle.connect(str(path), create=True)
    try:
        db = conn.create_db(DB).create_table(TABLE, key="id", schema=table.schema)
        db.write(TABLE, table).commit(message="bench cli").compact().commit()
    finally:
        conn.close()


def _child_env(lake: Path, pycache: Path | None) -> dict[str, str]:
    """The environment of a measured process: this checkout, the lake, a bytecode cache."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["MERKLE_LAKE"] = str(lake)
    if pycache is None:  # bytecode neither written nor cached outside the tree
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _command(argv: Sequence[str], env: dict[str, str], cpu: list[float]) -> Callable[[int], None]:
    """A function that runs ``argv`` once (output discarded) and records its CPU time."""

    def once(_round: int) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            argv, env=env, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.decode()[-2000:]}")
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

    return once


def run(quick: bool) -> str:
    rows = 10_000 if quick else 1_000_000
    rounds = 7 if quick else 21
    python = sys.executable
    script = Path(python).with_name("merkle")
    with temp_dir("merkle-bench-cli-") as tmp:
        lake = tmp / "lake"
        started = time.perf_counter()
        make_lake(lake, rows)
        built = time.perf_counter() - started
        cached = _child_env(lake, tmp / "pycache")
        uncached = _child_env(lake, None)
        get = [str(KEY)]
        argvs: dict[str, tuple[list[str], dict[str, str]]] = {
            BASELINE: ([python, "-c", "import pyarrow"], cached),
            'python -c "import merkle"': ([python, "-c", "import merkle"], cached),
            GET: (
                [python, "-m", "merkle.cli.main", "get", DB, TABLE, *get],
                cached,
            ),
        }
        if script.exists() and shutil.which(str(script)):
            argvs[f"merkle get {DB} {TABLE} {KEY} (console script)"] = (
                [str(script), "get", DB, TABLE, *get],
                cached,
            )
        argvs["merkle db list (python -m merkle.cli.main)"] = (
            [python, "-m", "merkle.cli.main", "db", "list"],
            cached,
        )
        argvs[f"merkle get {DB} {TABLE} {KEY}, PYTHONDONTWRITEBYTECODE=1, no cache"] = (
            [python, "-m", "merkle.cli.main", "get", DB, TABLE, *get],
            uncached,
        )
        check = subprocess.run(
            argvs[GET][0],
            env=cached,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        )
        if check.returncode != 0 or f'"id": {KEY}' not in check.stdout:
            raise RuntimeError(f"merkle get printed {check.stdout!r}, {check.stderr!r}")
        cpu: dict[str, list[float]] = {label: [] for label in argvs}
        commands = {label: _command(argv, env, cpu[label]) for label, (argv, env) in argvs.items()}
        for once in commands.values():  # fills the bytecode cache and the page cache
            once(-1)
        for taken in cpu.values():
            taken.clear()
        timings = time_interleaved(commands, range(rounds))
    return _report(rows, rounds, built, timings, cpu)


def _report(
    rows: int,
    rounds: int,
    built: float,
    timings: dict[str, Timing],
    cpu: dict[str, list[float]],
) -> str:
    base = timings[BASELINE].median
    ratio = timings[GET].median / base
    table = markdown_table(
        ["process", "wall, median", "wall, p90", "CPU, median", "x import pyarrow"],
        [
            [
                f"`{label}`",
                fmt_duration(timing.median),
                fmt_duration(timing.percentile(90)),
                fmt_duration(statistics.median(cpu[label])),
                f"{timing.median / base:.2f}x",
            ]
            for label, timing in timings.items()
        ],
    )
    verdict = "met" if ratio <= TARGET else "missed"
    return "\n\n".join(
        [
            "Start-up of the `merkle` command (`bench/cli.py`), issue 13 point 4: "
            f"`merkle get` on a {rows:,}-row lake in at most {TARGET}x the wall time of "
            '`python -c "import pyarrow"`. Every figure is a fresh process (cold '
            "in-process caches) on a file lake on the local disk whose files are in the "
            "OS page cache (written just before; every command ran once unmeasured); "
            f"{rounds} rounds, the commands in a shuffled order each round. Bytecode is "
            "cached as after an install, except in the last row (bytecode never written, "
            "as in a development checkout: merkle's modules compile at every start). The "
            f"table (built in {built:.1f} s): {rows:,} rows, a shuffled int64 key, two "
            "strings, a double, a timestamp.",
            table,
            f"**Target {TARGET}x: {verdict}** (`merkle get` {ratio:.2f}x `import pyarrow`, "
            f"median wall, {rows:,}-row table, warm page cache, fresh process).",
        ]
    )

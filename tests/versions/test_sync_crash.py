"""Crash test: a push SIGKILLed at random writes, restarted until it completes.

After every kill the destination's head (if any) must be a complete version
(verify finds every block it reaches); when the push finally completes the
destination equals the source; across all runs no block was written more
than twice (once by the run that died while writing it, once after).
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import merkle

ROOT = Path(__file__).resolve().parents[2]


def _history(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("shop").create_table(
        "t", key="id", tablet_size_limit=50, branching_factor=4
    )
    db = db.write("t", [{"id": i, "v": i, "s": f"row {i}"} for i in range(600)]).compact().commit()
    for step in range(3):
        db = db.write(
            "t", [{"id": i, "v": -step} for i in range(step * 97, step * 97 + 40)]
        ).commit()
    return db.delete("t", list(range(500, 530))).compact().commit()


def _push(src: Path, dst: Path, kill_at: int, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.versions.sync_worker",
            src.as_uri(),
            dst.as_uri(),
            "shop",
            str(kill_at),
            str(log),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_push_killed_at_random_writes_completes_and_never_exposes_a_partial_version(
    tmp_path: Path, seed: int
) -> None:
    src, dst, log = tmp_path / "src", tmp_path / "dst", tmp_path / "writes.log"
    with merkle.connect(src) as conn:
        source = _history(conn)
        expected = list(source.scan("t"))
    # How many writes a whole push makes, to pick kill points inside it.
    probe = _push(src, tmp_path / "probe", 0, tmp_path / "probe.log")
    assert probe.returncode == 0, probe.stderr
    total = len((tmp_path / "probe.log").read_text().splitlines())
    rng = random.Random(seed)
    kills = 0
    for _ in range(6):
        run = _push(src, dst, rng.randint(1, total), log)
        if run.returncode == 0:
            break
        assert run.returncode == -9, run.stderr  # killed by SIGKILL, nothing else
        kills += 1
        if (dst / "config").exists():
            with merkle.connect(dst, create=False) as conn:
                if "shop" in conn.list_dbs():
                    report = merkle.verify(conn, "shop")
                    assert report.ok, report.summary()
    final = _push(src, dst, 0, log)
    assert final.returncode == 0, final.stderr
    print(f"seed {seed}: {kills} kills of {total} writes")
    assert kills >= 1
    with merkle.connect(dst, create=False) as conn:
        assert conn.open_db("shop").root == source.root
        assert list(conn.open_db("shop").scan("t")) == expected
        assert merkle.verify(conn).ok
    written = Counter(line for line in log.read_text().splitlines() if line.startswith("blocks/"))
    assert written
    assert max(written.values()) <= 2, written.most_common(3)

"""What a fresh ``merkle`` process imports (issue 13: start-up time, without timing).

``merkle get`` must start in little more than ``import pyarrow`` takes
(``bench/cli.py`` measures it): a command imports what it uses and nothing
else. Each test runs a fresh interpreter on this checkout and lists the
modules it ended with; a module named here that shows up again means an
eager import crept back in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import merkle

from .helpers import process_env

REPO = Path(__file__).resolve().parents[2]

#: Loaded by no command that reads from a file lake.
NEVER_FOR_A_READ = (
    "boto3",
    "botocore",
    "multiformats",
    "pandas",
    "polars",
    "pyspark",
    "concurrent.futures",  # no thread pool for a point read
    "csv",
    "pyarrow.csv",
    "pyarrow.json",
    "merkle.cli.load",
    "merkle.cli.sources",
    "merkle.cli.versions",
    "merkle.db.bulk",
    "merkle.db.diff",
    "merkle.db.landing",
    "merkle.db.merge",
    "merkle.db.noop",
    "merkle.db.ops",
    "merkle.db.readers",
    "merkle.gc.collect",
    "merkle.gc.policy",
    "merkle.gc.report",
    "merkle.refs.audit",
    "merkle.refs.gclock",
    "merkle.refs.leases",
    "merkle.refs.tags",
    "merkle.refs.writer",
    "merkle.storage.s3",
    "merkle.tablets.bulk",
    "merkle.tablets.diff",
    "merkle.tablets.evolve",
    "merkle.tablets.validate",
    "merkle.transfer",
    "pyarrow.compute",
    "pyarrow.parquet",
)

#: Appended to every child's code: the modules it ended with, and where merkle came from.
_REPORT = """
import json as _json, sys as _sys
_merkle = _sys.modules.get("merkle")
print(_json.dumps({"modules": sorted(_sys.modules), "merkle": _merkle and _merkle.__file__}),
      file=_sys.stderr)
"""

_RUN_COMMAND = """
import sys
from merkle.cli.main import main
sys.argv = ["merkle", *sys.argv[1:]]
try:
    main()
except SystemExit as stop:
    assert not stop.code, stop.code
"""


def _fresh(code: str, *args: str, lake: Path | None = None) -> tuple[set[str], str]:
    """The modules a fresh interpreter running ``code`` ends with, and its stdout."""
    env = process_env(None if lake is None else str(lake))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-c", code + _REPORT, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["merkle"] == str(REPO / "merkle" / "__init__.py"), "another checkout's merkle"
    return set(report["modules"]), done.stdout


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The ``names`` that are in ``modules`` (a package counts with any of its modules)."""
    return [name for name in names if any(m == name or m.startswith(name + ".") for m in modules)]


@pytest.fixture(scope="module")
def small_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file lake with one table of a few rows, compacted: like a large table, whose
    records are in tablets (a pending batch's lookup uses ``pyarrow.compute``)."""
    path = tmp_path_factory.mktemp("start") / "lake"
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    with merkle.connect(str(path)) as conn:
        db = conn.create_db("shop").create_table("orders", key="id", schema=rows.schema)
        db.write("orders", rows).commit().compact().commit()
    return path


def test_import_merkle_loads_neither_pyarrow_nor_the_database_layer() -> None:
    modules, _ = _fresh("import merkle")
    assert _loaded(modules, ("pyarrow", "numpy", "click", "merkle.db", "merkle.blocks")) == []
    assert _loaded(modules, NEVER_FOR_A_READ) == []


def test_the_subpackages_import_merkle_used_to_load_still_load_on_use() -> None:
    code = """
import merkle
assert merkle.db.Database is merkle.Database and merkle.tablets.Table and merkle.blocks.CID
assert merkle.refs.RefManager and merkle.storage.open_store
print("ok")
"""
    _, out = _fresh(code)
    assert out == "ok\n"


def test_the_command_line_module_loads_no_command() -> None:
    """``merkle --help`` and ``--version`` need click and the group, not pyarrow."""
    modules, _ = _fresh("import merkle.cli.main")
    assert "click" in modules
    assert _loaded(modules, ("pyarrow", "numpy", "merkle.db", "merkle.cli.read")) == []


def test_get_imports_only_what_a_point_read_uses(small_lake: Path) -> None:
    modules, out = _fresh(_RUN_COMMAND, "get", "shop", "orders", "2", lake=small_lake)
    assert json.loads(out) == {"id": 2, "name": "b"}
    assert "merkle.tablets.reads" in modules  # the command did read
    assert _loaded(modules, NEVER_FOR_A_READ) == []


@pytest.mark.parametrize(
    "command",
    [
        ("db", "list"),
        ("db", "describe", "shop"),
        ("table", "list", "shop"),
        ("table", "describe", "shop", "orders"),
        ("scan", "shop", "orders", "--limit", "2"),
    ],
    ids=" ".join,
)
def test_other_reading_commands_import_no_writing_code(
    small_lake: Path, command: tuple[str, ...]
) -> None:
    modules, out = _fresh(_RUN_COMMAND, *command, "--format", "jsonl", lake=small_lake)
    assert out
    assert _loaded(modules, NEVER_FOR_A_READ) == []


def test_the_lazy_public_names_are_the_real_ones() -> None:
    """``merkle.gc`` stays the collector function whichever ``merkle.gc.*`` loads first."""
    code = """
from merkle.gc.policy import Policy  # the package merkle.gc is imported first, this way
import merkle.gc.verify
import merkle
from merkle import *  # every name in __all__ resolves
from merkle.gc import gc, verify
from merkle.gc.collect import gc as collect
from merkle.gc.verify import verify as check
assert merkle.gc is gc is collect, merkle.gc
assert merkle.verify is verify is check, merkle.verify
assert merkle.connect is merkle.db.connect and merkle.Database is merkle.db.Database
assert sorted(set(merkle.__all__) - set(dir(merkle))) == []
print("ok")
"""
    _, out = _fresh(code)
    assert out == "ok\n"

"""The quick start (``examples/quickstart.py``, what ``make demo`` runs) works, and
works again on the lake of an earlier run, as its docstring promises, even after
``merkle gc`` has trimmed that run's versions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_the_quick_start_runs_again_after_gc(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    demo = [str(ROOT / "examples" / "quickstart.py"), "--lake", lake, "--rows", "2000"]
    first = _run(*demo)
    assert first.returncode == 0, first.stderr
    assert "time travel to v1:" in first.stdout
    gc = _run("-m", "merkle.cli.main", "--lake", lake, "gc", "--keep-versions", "1")
    assert gc.returncode == 0, gc.stderr
    again = _run(*demo)
    assert again.returncode == 0, again.stderr
    assert "dropped the 'shop' left by an earlier run" in again.stdout
    # the version read back is the second run's own load, not the first run's version 1
    assert "time travel to v1:" not in again.stdout

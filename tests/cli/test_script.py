"""The installed ``merkle`` console script, run as a real process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .helpers import SCRIPT, assert_one_error_line, process_env


def merkle(
    *args: str, lake: str | None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        input=input,
        capture_output=True,
        text=True,
        env=process_env(lake),
        timeout=120,
        check=False,
    )


def test_the_console_script_end_to_end(tmp_path: Path) -> None:
    assert SCRIPT.exists(), f"the console script is not installed at {SCRIPT}"
    lake = (tmp_path / "lake").as_uri()
    data = tmp_path / "people.csv"
    data.write_text("id,name\n2,bo\n1,al\n3,cy\n")
    assert merkle("db", "create", "shop", lake=lake).returncode == 0
    loaded = merkle("load", "shop", "people", str(data), "--key", "id", lake=lake)
    assert (loaded.returncode, loaded.stdout) == (0, "loaded 3 rows into shop.people (version 1)\n")
    assert loaded.stderr == ""  # no progress bar when stderr is not a terminal
    scanned = merkle("scan", "shop", "people", "--format", "json", lake=lake)
    assert json.loads(scanned.stdout) == [
        {"id": 1, "name": "al"},
        {"id": 2, "name": "bo"},
        {"id": 3, "name": "cy"},
    ]
    got = merkle("get", "shop", "people", "2", "--format", "csv", lake=lake)
    assert got.stdout == "id,name\n2,bo\n"


def test_errors_from_the_console_script(tmp_path: Path) -> None:
    """User errors: status 1, one line on stderr, no traceback; usage errors: status 2."""
    lake = str(tmp_path / "lake")
    result = merkle("--lake", lake, "db", "describe", "nope", lake=None)
    assert result.returncode == 1
    assert_one_error_line(result.stderr)
    assert "no merkle lake" in result.stderr
    assert merkle("--lake", lake, "db", "create", "shop", lake=None).returncode == 0
    result = merkle("--lake", lake, "db", "describe", "nope", lake=None)
    assert result.returncode == 1
    assert_one_error_line(result.stderr)
    assert "no database 'nope'" in result.stderr
    missing = merkle("db", "list", lake=None)
    assert missing.returncode == 1
    assert missing.stderr == "error: no lake given: pass --lake URI or set MERKLE_LAKE\n"


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """With stderr on a terminal, load shows a progress bar with the rows loaded."""
    lake = (tmp_path / "lake").as_uri()
    assert merkle("db", "create", "shop", lake=lake).returncode == 0
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(f'{{"id": {i}}}\n' for i in range(1234)))
    primary, secondary = os.openpty()
    env = process_env(lake)
    try:
        with subprocess.Popen(
            [str(SCRIPT), "load", "shop", "t", str(data), "--key", "id"],
            stdout=subprocess.PIPE,
            stderr=secondary,
            env=env,
        ) as proc:
            os.close(secondary)
            secondary = -1
            shown = b""
            while True:  # read the terminal until the process closes it
                try:
                    chunk = os.read(primary, 4096)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            stdout, _ = proc.communicate(timeout=120)
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    assert proc.returncode == 0
    assert stdout == b"loaded 1,234 rows into shop.t (version 1)\n"
    text = shown.decode()
    assert "loading" in text
    assert "1,234 rows" in text
    assert "100%" in text

"""Helpers for the command-line tests: run ``merkle`` in-process and check its errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from merkle.cli.main import cli

#: The ``merkle`` console script of the interpreter running the tests.
SCRIPT = Path(sys.executable).with_name("merkle")


def process_env(lake: str | None = None) -> dict[str, str]:
    """The environment for a ``merkle`` subprocess: this one without a developer's own
    ``MERKLE_*`` settings, and ``MERKLE_LAKE`` set to ``lake`` if given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERKLE_")}
    if lake is not None:
        env["MERKLE_LAKE"] = lake
    return env


@dataclass
class Run:
    """Runs ``merkle`` in-process (click's CliRunner) against one lake."""

    lake: str

    def __call__(
        self,
        *args: str,
        input: str | bytes | None = None,
        env: Mapping[str, str | None] | None = None,
        lake: bool = True,
    ) -> Result:
        argv = ["--lake", self.lake, *args] if lake else list(args)
        # A developer's own MERKLE_LAKE / MERKLE_AUTHOR must not leak into a test.
        environment: dict[str, str | None] = {"MERKLE_LAKE": None, "MERKLE_AUTHOR": None}
        environment.update(env or {})
        return CliRunner().invoke(
            cli,
            argv,
            input=input,
            env=environment,
            catch_exceptions=False,
            prog_name="merkle",
        )

    def ok(self, *args: str, **kwargs: Any) -> Result:
        """Run and require exit status 0."""
        result = self(*args, **kwargs)
        assert result.exit_code == 0, (result.exit_code, result.output)
        return result

    def fails(self, *args: str, **kwargs: Any) -> str:
        """Run, require a user error (status 1, one ``error:`` line on stderr); the line."""
        result = self(*args, **kwargs)
        assert result.exit_code == 1, (result.exit_code, result.output)
        assert_one_error_line(result.stderr)
        return result.stderr.strip()


def assert_one_error_line(stderr: str) -> None:
    """``stderr`` is exactly one line, ``error: ...``, with no traceback."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr

"""``python -m bench [NAME ...] [--quick]``: run benchmark modules, update doc/benchmarks.md.

Every module ``bench/<name>.py`` that defines ``run(quick: bool) -> str`` is a
benchmark (``common`` is the shared toolkit, not one). With no names, all of
them run in name order. Each result is printed and written between the
``bench:<name>`` markers of the output file with a line saying when, where and
how long it ran; the ``machine`` section is refreshed too. A benchmark that
fails is reported and the others still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import pkgutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import cast

import bench
from bench.common import machine_info, machine_markdown, write_section

_NOT_BENCHMARKS = frozenset({"common"})


def available() -> list[str]:
    """The names of the benchmark modules in ``bench/``, sorted."""
    return sorted(
        info.name
        for info in pkgutil.iter_modules(bench.__path__)
        if not info.name.startswith("_") and info.name not in _NOT_BENCHMARKS
    )


def load(name: str) -> Callable[[bool], str]:
    """The ``run`` function of benchmark ``name``."""
    module = importlib.import_module(f"bench.{name}")
    run = getattr(module, "run", None)
    if not callable(run):
        raise SystemExit(f"bench/{name}.py has no run(quick: bool) -> str function")
    return cast("Callable[[bool], str]", run)


def stamp(seconds: float, quick: bool) -> str:
    info = machine_info()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    mode = "quick run (`--quick`)" if quick else "full run"
    return (
        f"_{mode} on {when}: {info['cpu']}, {info['cores']} cores, {info['python']}; "
        f"took {seconds:.0f} s. One run: compare numbers within a table, not across machines._"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument(
        "--output",
        default="doc/benchmarks.md",
        help="Markdown file to update (relative to the repository root; default %(default)s)",
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print the sections, leave the file alone"
    )
    args = parser.parse_args(argv)

    names = available()
    if args.list:
        print("\n".join(names))
        return 0
    unknown = sorted(set(args.names) - set(names))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(names)}")
    selected = args.names or names

    failed = []
    if not args.no_write:
        write_section("machine", machine_markdown(), args.output)
    for name in selected:
        print(f"== bench {name}{' (quick)' if args.quick else ''}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            section = load(name)(args.quick)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        section = f"{section.strip()}\n\n{stamp(time.perf_counter() - started, args.quick)}"
        print(section, flush=True)
        if not args.no_write:
            path = write_section(name, section, args.output)
            print(f"== wrote section {name!r} of {path}", file=sys.stderr, flush=True)
    if failed:
        print(f"benchmarks failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

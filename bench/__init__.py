"""Benchmarks of merkle-db, beside the libraries it is compared with, in the same run.

Each benchmark is a module ``bench/<name>.py`` with ``run(quick: bool) -> str``
returning a Markdown section; ``python -m bench [NAME ...]`` runs them and
writes each section between its own markers in ``doc/benchmarks.md``
(:func:`bench.common.write_section`). Numbers are measured and reported,
never asserted: tests check behaviour, benchmarks describe speed.
"""

"""The ``merkle`` command: a thin layer over the Python API."""

"""Moving versions between lakes and files: push/pull (``sync``) and CAR export/import.

Both walk a version's DAG from its root and move blocks by CID, so what the
other side already holds is never sent again. See ``doc/versions.md``.
"""

from merkle.transfer.blockcopy import CopyStats, copy_dag
from merkle.transfer.car import CarReport, export_car, import_car, read_car
from merkle.transfer.sync import SyncDivergedError, SyncReport, sync

__all__ = [
    "CarReport",
    "CopyStats",
    "SyncDivergedError",
    "SyncReport",
    "copy_dag",
    "export_car",
    "import_car",
    "read_car",
    "sync",
]

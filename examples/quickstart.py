"""Quick start: open a lake, store content-addressed blocks, read them back.

Run with ``make demo`` (or ``python examples/quickstart.py --lake PATH``).
"""

from __future__ import annotations

import argparse

from merkle.blocks import BlockStore
from merkle.storage import open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lake", default="lake", help="lake URI or directory")
    args = parser.parse_args()

    with open_store(args.lake) as store:
        blocks = BlockStore(store)
        payload = blocks.put(b"hello, merkle-db\n" * 4, "raw")
        node = blocks.put_node({"type": "demo/note", "v": 1, "text": "hi", "payload": payload})
        print(f"lake: {store.uri}")
        print(f"stored raw block  {payload}")
        print(f"stored node block {node} linking to it")
        again = blocks.put_node({"payload": payload, "v": 1, "text": "hi", "type": "demo/note"})
        print(f"same node built in another key order has the same CID: {again == node}")
        print(f"read back and verified: {blocks.get_node(node)}")


if __name__ == "__main__":
    main()

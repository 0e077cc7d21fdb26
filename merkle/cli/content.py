"""The first bytes of a ``merkle load`` input checked against its format.

Before any reader starts, a file's first bytes (decompressed, for a ``.gz``,
``.bz2``, ``.zst`` or ``.lz4`` file) are checked against its format: a Parquet
file named ``.csv`` is one clear error, never a CSV parse of binary bytes, and
so is a UTF-16 file, a compressed stream on stdin, or JSON Lines that is not
UTF-8. A CSV cell may hold a NUL character (``merkle scan -f csv`` writes one
as it is): NUL bytes are refused only where the text is not UTF-8 or they
are a quarter of the bytes or more (UTF-16 or UTF-32 text, binary data).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pyarrow as pa

from merkle.cli.common import CliError

__all__ = ["BOM", "check_content", "split_compression"]

#: Compressed files, by extension: the Arrow codec that reads them.
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}
#: The UTF-8 byte order mark some editors write at the start of a text file.
BOM = b"\xef\xbb\xbf"
_MAGIC = {
    b"PAR1": "Parquet",
    b"\x1f\x8b": "gzip-compressed",
    b"(\xb5/\xfd": "zstd-compressed",
    b"BZh": "bzip2-compressed",
    b"ARROW1": "Arrow IPC",
    b"PK\x03\x04": "a zip archive",
}


def split_compression(path: str) -> tuple[str, str | None]:
    """``path`` without a compression extension, and the Arrow codec of that extension."""
    root, ext = os.path.splitext(path)
    codec = _COMPRESSION.get(ext.lower())
    return (root, codec) if codec else (path, None)


#: The first bytes of each compressed format, by Arrow codec.
_CODEC_MAGIC = {
    "gzip": b"\x1f\x8b",
    "bz2": b"BZh",
    "zstd": b"(\xb5/\xfd",
    "lz4": b"\x04\x22\x4d\x18",
}
#: Bytes of a file that check_content looks at.
_HEAD = 4096


def check_content(path: str, fmt: str) -> None:
    """CliError when the first bytes of ``path`` show it is not ``fmt``.

    Of stdin only the compression is checked (its bytes can be peeked at, not
    read twice). A CSV file is not required to be UTF-8 here: a column that is
    not is named by ``merkle.cli.inferred`` (or read as binary when declared so).
    """
    if path == "-":
        first = _peek_stdin(8)
        seen = next((what for magic, what in _MAGIC.items() if first.startswith(magic)), None)
        if seen is not None and seen != "Parquet":
            raise CliError(
                f"stdin holds {seen} data: decompress it first (for example "
                "gunzip -c FILE.gz | merkle load ... -), or name the compressed file"
            )
        return
    codec = split_compression(path)[1]
    with open(path, "rb") as raw:
        head = raw.read(_HEAD)
        complete = not raw.read(1)  # the window holds the whole file
    if codec is not None:
        head, complete = _decompressed_head(path, codec, head, complete)
    seen = next((what for magic, what in _MAGIC.items() if head.startswith(magic)), None)
    if fmt == "parquet":
        if not head.startswith(b"PAR1"):
            raise CliError(
                f"cannot read {path} as parquet: it is not a Parquet file (no PAR1 at its start)"
                + (f": it looks like {seen}" if seen else "")
                + "; pass the right --format"
            )
        return
    if seen is not None:
        hint = "--format parquet" if seen == "Parquet" else "the right file or extension"
        raise CliError(f"cannot read {path} as {fmt}: it looks like {seen}; pass {hint}")
    if b"\x00" in head and (fmt != "csv" or not _text_with_nul(head, complete)):
        raise CliError(f"{path} is not {fmt} text: it holds NUL bytes; pass the right --format")
    if fmt == "jsonl":
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as exc:
            # A character cut by the end of the window is not an error; the end of the file is.
            if complete or exc.start < len(head) - 4:
                lines = head[: exc.start].split(b"\n")
                row = sum(1 for line in lines[:-1] if line.strip()) + 1  # blank lines are no row
                raise CliError(
                    f"{path} is not UTF-8 text, as JSON Lines must be: row {row} holds byte "
                    f"0x{head[exc.start]:02x}; re-encode the file as UTF-8 "
                    "(a Latin-1 file: iconv -f latin1 -t utf-8)"
                ) from None
        text = head.removeprefix(BOM).lstrip()
        if text and not text.startswith(b"{"):
            raise CliError(f"{path} is not JSON Lines: each line must be a JSON object")


#: The byte order marks of UTF-16 and UTF-32 text (UTF-32LE's begins as UTF-16LE's).
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


def _text_with_nul(head: bytes, complete: bool) -> bool:
    """Whether ``head``, the first bytes of a CSV file that hold a NUL, is still UTF-8
    text: a cell may hold a NUL character (``merkle scan -f csv`` writes a string's NUL
    as it is, and pyarrow's CSV reader reads it back). UTF-16 or UTF-32 text (a byte
    order mark, or NUL bytes a quarter of the bytes or more: one beside each ASCII
    character) and bytes that are not UTF-8 (binary data) are not."""
    if head.startswith(_WIDE_BOMS) or 4 * head.count(b"\x00") >= len(head):
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return not complete and exc.start >= len(head) - 4  # a character cut by the window
    return True


def _decompressed_head(path: str, codec: str, head: bytes, complete: bool) -> tuple[bytes, bool]:
    """The first bytes of ``path`` decompressed, and whether they are all of its content."""
    if not head.startswith(_CODEC_MAGIC[codec]):
        raise CliError(f"{path} is not {codec}-compressed, as its name says")
    stream = pa.CompressedInputStream(pa.py_buffer(head), codec)
    out = bytearray()
    try:
        while len(out) < _HEAD:
            chunk = stream.read(512)
            if not chunk:
                return bytes(out), complete
            out += chunk
    except (pa.ArrowException, OSError) as exc:
        if complete:  # the whole file was read, and its compressed data ends early
            raise CliError(
                f"{path} is truncated or corrupt {codec} data ({exc}): "
                "compress or download the file again"
            ) from None
        return bytes(out), False  # the window ends inside the compressed data
    return bytes(out), False


def _peek_stdin(size: int) -> bytes:
    """The first ``size`` bytes of stdin, left to be read (b"" when they cannot be)."""
    buffer: Any = sys.stdin.buffer
    if hasattr(buffer, "peek"):
        return bytes(buffer.peek(size)[:size])
    if buffer.seekable():
        where = buffer.tell()
        data = bytes(buffer.read(size))
        buffer.seek(where)
        return data
    return b""

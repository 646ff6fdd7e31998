"""Opening inputs: local files, gzip, and remote URIs (s3://, gs://) through pyarrow."""
from __future__ import annotations

import gzip
import io
import os
from typing import BinaryIO, Iterator

MAX_LINE_BYTES = 4 * 1024 * 1024  # one record larger than this is rejected, not parsed


class InputError(Exception):
    """A problem with an input as a whole (missing, unreadable, unknown format)."""


def is_remote(path: str) -> bool:
    """True for URIs such as s3://bucket/key that pyarrow's filesystems open."""
    return "://" in path and not path.startswith("file://")


def open_binary(path: str) -> BinaryIO:
    """Open a local path or URI for streaming reads, decompressing .gz transparently."""
    if is_remote(path):
        from pyarrow import fs

        filesystem, inner = fs.FileSystem.from_uri(path)
        raw: BinaryIO = filesystem.open_input_stream(inner)  # type: ignore[assignment]
    else:
        local = path.removeprefix("file://")
        if not os.path.exists(local):
            raise InputError(f"no such file: {path}")
        if os.path.isdir(local):
            raise InputError(f"is a folder, not a file: {path}")
        raw = open(local, "rb")
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    return io.BufferedReader(raw) if not isinstance(raw, io.BufferedReader) else raw


def head_bytes(path: str, size: int = 8192) -> bytes:
    """The first bytes of an input, for format sniffing."""
    with open_binary(path) as handle:
        return handle.read(size)


def decoded_lines(path: str) -> Iterator[tuple[int, str | None, str]]:
    """Yield (line number, text or None, problem) for each line, streaming.

    Text is None when the line is not valid UTF-8 or is longer than MAX_LINE_BYTES;
    the problem string then says which, so the caller can reject just that line.
    """
    with open_binary(path) as handle:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                # Skip the rest of an oversized line without holding it in memory.
                while raw and not raw.endswith(b"\n"):
                    raw = handle.readline(MAX_LINE_BYTES)
                yield number, None, f"line longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB"
                continue
            try:
                yield number, raw.decode("utf-8").lstrip("\ufeff"), ""
            except UnicodeDecodeError as err:
                yield number, None, f"not valid UTF-8 (byte {err.start})"

"""Opening inputs: local files, gzip, standard input (`-`), and remote URIs (s3://, gs://)
through pyarrow."""

from __future__ import annotations

# pyarrow (a tenth of a second) is imported where a remote URI is opened: `rrt tag` and the other
# recipe commands read local files without it.
import gzip
import io
import os
import sys
import zlib
from collections.abc import Iterator
from typing import BinaryIO

MAX_LINE_BYTES = 4 * 1024 * 1024  # one record larger than this is rejected, not parsed
HEAD_BYTES = 8192  # what format sniffing reads
STDIN = "-"
REMOTE_SCHEMES = (
    "s3",
    "gs",
    "gcs",
    "hdfs",
    "viewfs",
    "abfs",
    "abfss",
)  # what pyarrow's FileSystem.from_uri opens
_GZIP_MAGIC = b"\x1f\x8b"


class InputError(Exception):
    """A problem with an input as a whole (missing, unreadable, unknown format)."""


def is_remote(path: str) -> bool:
    """True for URIs such as s3://bucket/key that pyarrow's filesystems open."""
    return "://" in path and not path.startswith("file://")


def _open_remote(path: str) -> BinaryIO:
    scheme = path.split("://", 1)[0].lower()
    if scheme not in REMOTE_SCHEMES:
        raise InputError(
            f"unsupported URI scheme {scheme!r} (use a local path, or one of "
            f"{', '.join(s + '://' for s in REMOTE_SCHEMES)}): {path}"
        )
    from pyarrow import ArrowException, fs

    try:
        filesystem, inner = fs.FileSystem.from_uri(path)
        return filesystem.open_input_stream(inner)  # type: ignore[return-value]
    except (ArrowException, OSError, ValueError) as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(f"cannot open {path}: {first_line}") from None


def open_binary(path: str) -> BinaryIO:
    """Open a local path, `-` or a URI for streaming reads, decompressing .gz transparently."""
    if path == STDIN:
        return _standard_input().open()
    if is_remote(path):
        raw = _open_remote(path)
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


def head_bytes(path: str, size: int = HEAD_BYTES) -> bytes:
    """The first bytes of an input, for format sniffing."""
    if path == STDIN:
        return _standard_input().peek(size)
    with open_binary(path) as handle:
        return handle.read(size)


class _Replay(io.RawIOBase):
    """A stream that gives back bytes already read from it, then the rest of it."""

    def __init__(self, head: bytes, rest: BinaryIO):
        self.head, self.position, self.rest = head, 0, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self.position < len(self.head):
            count = min(len(buffer), len(self.head) - self.position)
            buffer[:count] = self.head[self.position : self.position + count]
            self.position += count
            return count
        return self.rest.readinto(buffer)


class _StandardInput:
    """Standard input: a pipe cannot be reopened, so its first bytes are kept for sniffing
    and the whole stream goes to one reader."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        chunks, size = [], 0
        while size < HEAD_BYTES:  # a pipe hands over what its writer has written so far
            chunk = stream.read(HEAD_BYTES - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        self.head = b"".join(chunks)
        self.opened = False

    def peek(self, size: int) -> bytes:
        """The first bytes, decompressed when standard input is gzip."""
        if self.head.startswith(_GZIP_MAGIC):
            return zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(self.head, size)
        return self.head[:size]

    def open(self) -> BinaryIO:
        """The whole stream, once."""
        if self.opened:
            raise InputError("standard input (-) can be read only once")
        self.opened = True
        raw = io.BufferedReader(_Replay(self.head, self.stream))
        return gzip.GzipFile(fileobj=raw) if self.head.startswith(_GZIP_MAGIC) else raw  # type: ignore[return-value]


_stdin: _StandardInput | None = None


def _standard_input() -> _StandardInput:
    global _stdin
    if _stdin is None or _stdin.stream is not sys.stdin.buffer:
        _stdin = _StandardInput(sys.stdin.buffer)
    return _stdin


def decoded_lines(path: str) -> Iterator[tuple[int, str | None, str, str]]:
    """Yield (line number, text or None, reject reason, detail) for each line, streaming.

    Text is None when the line is longer than MAX_LINE_BYTES (`record_too_large`) or is not
    valid UTF-8 (`unreadable_line`), so the caller can reject just that line; the reason and
    detail are empty otherwise.
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
                detail = f"line longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB"
                yield number, None, "record_too_large", detail
                continue
            try:
                yield number, raw.decode("utf-8").lstrip("\ufeff"), "", ""
            except UnicodeDecodeError as err:
                yield number, None, "unreadable_line", f"not valid UTF-8 (byte {err.start})"

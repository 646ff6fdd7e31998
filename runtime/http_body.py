"""A request body read as a stream, bounded in size and in time: neither a missing Content-Length
(chunked) nor a client that trickles its bytes can make an app buffer or wait without end."""

from __future__ import annotations

import asyncio


class BodyError(ValueError):
    """A body refused: `status` is 413 (too large) or 408 (too slow)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


async def read_body(request, limit: int, timeout: float | None = None) -> bytes:
    """The body of a Starlette request, refused as soon as it passes `limit` bytes or `timeout` seconds."""

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyError(413, f"request body over {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    if timeout is None:
        return await read()
    try:
        return await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        raise BodyError(408, f"the request body did not arrive within {timeout:g}s") from None

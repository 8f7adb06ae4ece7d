"""Reading a response body without ever holding more than a cap."""

from __future__ import annotations

import aiohttp

from crawler.fetch._types import FetchError

_IDENTITY = ("", "identity")


async def read_capped(resp: aiohttp.ClientResponse, cap: int, *, truncate: bool = False) -> bytes:
    """The body, at most ``cap`` bytes (decoded). Beyond it: ``FetchError("too_large")``, or
    the first ``cap`` bytes when ``truncate``. Content-Length is a fast path, never trusted
    alone: aiohttp stops at Content-Length and the loop counts decompressed bytes."""
    declared = resp.content_length
    encoding = resp.headers.get("Content-Encoding", "").strip().lower()
    if declared is not None and encoding in _IDENTITY:
        if declared <= cap:
            return await resp.read()
        if not truncate:
            resp.close()
            raise FetchError(
                "too_large", f"body of {declared} bytes exceeds max_body_bytes={cap} (not read)"
            )
    chunks: list[bytes] = []
    got = 0
    while True:
        chunk = await resp.content.read(cap + 1 - got)
        if not chunk:
            break
        got += len(chunk)
        chunks.append(chunk)
        if got > cap:
            resp.close()
            if truncate:
                return b"".join(chunks)[:cap]
            chunks.clear()  # not kept alive by the exception's traceback
            raise FetchError("too_large", f"body exceeds max_body_bytes={cap}; reading aborted")
    return b"".join(chunks)

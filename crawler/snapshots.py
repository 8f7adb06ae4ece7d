"""A changed page's text as it is kept: how much of it, and its whitespace.

Shared by the detector (which makes the text), the crawl workers (which cut it before it
crosses a process boundary) and the store (which compresses it and reads it back), so that the
store needs nothing of the detector and there is one policy:

* a limit is ``int | None``: ``None`` keeps the whole text, ``0`` keeps none, ``n`` keeps at
  most ``n`` bytes, cut before a character that would straddle the limit (never half a UTF-8
  character); ``snapshot_limit`` makes the limit of the settings (``store_snapshots`` off
  means 0);
* ``collapse_whitespace``: runs of ASCII whitespace and NBSPs become one space, the
  whitespace the content hash ignores (so hashing before or after collapsing gives the same
  hash).

Plain bytes work. Imports nothing.
"""

from __future__ import annotations

#: the no-break space in UTF-8 (C2 A0)
NBSP = "\u00a0".encode()


def snapshot_limit(store_snapshots: bool, snapshot_max_bytes: int | None) -> int | None:
    """The limit of the settings: 0 (none) when snapshots are not stored."""
    return snapshot_max_bytes if store_snapshots else 0


def cut_snapshot(text: bytes | None, limit: int | None) -> bytes | None:
    """``text`` cut to ``limit`` (see the module notes); None when there is nothing to keep."""
    if text is None or limit == 0:
        return None
    if limit is None or len(text) <= limit:
        return text
    if limit < 0:
        raise ValueError("a snapshot limit is None, 0 or positive")
    cut = limit
    for _ in range(3):  # a UTF-8 character has at most 3 continuation bytes
        if text[cut] & 0xC0 != 0x80:
            break
        cut -= 1
    return text[:cut]


def collapse_whitespace(data: bytes) -> bytes:
    """Runs of ASCII whitespace (and NBSP) become one space; no leading/trailing space.

    The same whitespace that ``content_hash`` ignores, so hashing before or after collapsing
    gives the same hash."""
    if b"\xa0" in data:  # a memchr: see crawler.detect's content_hash
        data = data.replace(NBSP, b" ")
    return b" ".join(data.split())

"""How much of a changed page's text is kept as its snapshot: the one policy.

A limit is ``int | None``: ``None`` keeps the whole text, ``0`` keeps none, ``n`` keeps at most
``n`` bytes, cut before a character that would straddle the limit (never half a UTF-8
character). ``snapshot_limit`` makes the limit of the settings (``store_snapshots`` off means
0); the crawl workers, the in-process path and the store all cut with ``cut_snapshot``.
"""

from __future__ import annotations


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

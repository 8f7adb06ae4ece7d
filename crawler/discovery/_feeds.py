"""RSS and Atom feeds read natively: bytes in, entries out (no I/O).

Decisions:

- **Parser: feedparser** (maintained, 6.0.x): it reads RSS 0.9x/1.0/2.0 and Atom 0.3/1.0 and
  their many broken dialects, and the dozen date formats feeds use; writing that again would
  be the hand-written parser the project avoids. It has no type hints, so it stays behind the
  typed :func:`parse_feed`. It is given bytes only (a string may be taken for a URL or a path
  and fetched), with HTML sanitizing and relative-URI rewriting off (we read links and dates,
  never content). Measured here: 50,000 RSS items (4.4 MB) in 2.2 s (ElementTree: 0.3 s), so
  the body is bounded (``max_bytes``, 10 MB by default) and at most ``max_entries`` kept.
- **Hostile input.** A feed declaring entities is refused before parsing (``forbidden_xml``):
  legitimate feeds do not declare any, and feedparser leaves entity expansion to expat, which
  expands a 5-level "billion laughs" to a megabyte before its own amplification limit stops
  deeper ones. External entities are not resolved (checked in the tests). Gzip bodies are
  decompressed with the sitemap reader's bound.
- **The entry's date** is Atom's ``updated``, else ``published``, else RSS's ``pubDate``; an
  unreadable date is dropped, the entry stays. Its link is the ``alternate`` link (RSS
  ``link``, else a permalink ``guid``), resolved against ``base_url`` if relative.
- Not a feed (no RSS or Atom root, no entries and feedparser saw no feed version) is
  ``not_a_feed``; a feed feedparser had to repair (its ``bozo`` flag) is still read.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import feedparser

from crawler.discovery._sitemaps import SitemapError, decompress

MAX_FEED_BYTES = 10 * 1024 * 1024
MAX_FEED_ENTRIES = 10_000


@dataclass(frozen=True)
class FeedEntry:
    """One item or entry: its link and its date (Unix time, None when it has none)."""

    link: str
    updated: float | None = None


@dataclass(frozen=True)
class Feed:
    version: str  # feedparser's name for the format: "rss20", "atom10", ...
    entries: tuple[FeedEntry, ...]
    repaired: bool = False  # the XML was not well formed and was read leniently
    truncated: bool = False


def _stamp(value: Any) -> float | None:
    if isinstance(value, time.struct_time):
        return float(calendar.timegm(value))
    return None


def _link(entry: Any) -> str | None:
    link = entry.get("link")
    if isinstance(link, str) and link.strip():
        return link.strip()
    guid = entry.get("id")
    if isinstance(guid, str) and guid.startswith(("http://", "https://")):
        return guid.strip()
    return None


def parse_feed(
    body: bytes,
    *,
    base_url: str = "",
    max_bytes: int = MAX_FEED_BYTES,
    max_entries: int = MAX_FEED_ENTRIES,
) -> Feed | SitemapError:
    """An RSS or Atom feed (plain or gzip) read into entries, or why it could not be."""
    raw = decompress(body, max_bytes)
    if isinstance(raw, SitemapError):
        return raw
    if b"<!entity" in raw.lower():
        return SitemapError("forbidden_xml", "entity declaration")
    parsed: Any = feedparser.parse(raw, sanitize_html=False, resolve_relative_uris=False)
    version = str(parsed.get("version") or "")
    if not version:
        return SitemapError("not_a_feed", "no RSS or Atom root")
    entries: list[FeedEntry] = []
    truncated = False
    for entry in parsed.entries:
        link = _link(entry)
        if link is None:
            continue
        if len(entries) >= max_entries:
            truncated = True
            break
        # dict.get: feedparser's own get maps a missing updated to published, with a warning
        updated = (
            _stamp(dict.get(entry, "updated_parsed"))
            or _stamp(dict.get(entry, "published_parsed"))
            or _stamp(dict.get(entry, "created_parsed"))
        )
        entries.append(FeedEntry(urljoin(base_url, link) if base_url else link, updated))
    return Feed(version, tuple(entries), bool(parsed.get("bozo")), truncated)

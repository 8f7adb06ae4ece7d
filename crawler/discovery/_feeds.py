"""RSS and Atom feeds read natively: bytes in, entries out (no I/O).

Decisions:

- **Parser: feedparser** (maintained, 6.0.x): it reads RSS 0.9x/1.0/2.0 and Atom 0.3/1.0 and
  their many broken dialects, and the dozen date formats feeds use; writing that again would
  be the hand-written parser the project avoids. It has no type hints, so it stays behind the
  typed :func:`parse_feed`. It is given bytes only (a string may be taken for a URL or a path
  and fetched), with HTML sanitizing and relative-URI rewriting off (we read links and dates,
  never content). Measured here: 50,000 RSS items (4.4 MB) in 2.2 s (ElementTree: 0.3 s).
- **Cut before feedparser, not after.** feedparser builds every entry of the document before
  we see one, so a cap applied afterwards bounds nothing: a 4 MB feed of 100,000 items took
  5-8 s a read. The body (inflated if gzip, at most ``max_bytes``) is therefore cut after its
  ``max_entries``-th closing ``</item>`` or ``</entry>`` and joined to the document's own tail
  (what follows its last item: the closing ``</channel></rss>`` or ``</feed>``), so feedparser
  reads a well-formed feed of ``max_entries`` items and keeps all its leniency for ordinary
  feeds, which are far below the cut (a feed is newest first: the cut drops the oldest). The
  closing tags are found with one compiled pattern of the library's ``re`` (no nested
  quantifier: linear in the body), in C. Measured on that feed (4.0 MB, 100,000 items):
  feedparser on the whole of it 8.4 s; cut at 1,000 items, 0.08 s in all.
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
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import feedparser

from crawler.discovery._sitemaps import SitemapError, decompress

MAX_FEED_BYTES = 8 * 1024 * 1024
MAX_FEED_ENTRIES = 1_000
#: the end of an RSS ``<item>`` or an Atom ``<entry>`` (any namespace prefix, any case)
_ITEM_END = re.compile(rb"</(?:[a-z_][a-z0-9_.-]*:)?(?:item|entry)\s*>", re.IGNORECASE)


def first_items(raw: bytes, max_entries: int) -> tuple[bytes, bool]:
    """The feed cut after its ``max_entries``-th item, joined to its own tail (what follows
    its last item), and whether anything was cut."""
    cut = last = -1
    for count, match in enumerate(_ITEM_END.finditer(raw), 1):
        if count == max_entries:
            cut = match.end()
        last = match.end()
    if cut < 0 or cut == last:
        return raw, False
    return raw[:cut] + raw[last:], True


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
    raw, cut = first_items(raw, max_entries)
    parsed: Any = feedparser.parse(raw, sanitize_html=False, resolve_relative_uris=False)
    version = str(parsed.get("version") or "")
    if not version:
        return SitemapError("not_a_feed", "no RSS or Atom root")
    entries: list[FeedEntry] = []
    truncated = cut
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

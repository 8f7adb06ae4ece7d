"""Sitemaps read natively: bytes in, entries out (no I/O).

A sitemap (sitemaps.org protocol 0.9) is either a ``<urlset>`` of ``<url>`` entries (``loc``,
optional ``lastmod``) or a ``<sitemapindex>`` of ``<sitemap>`` entries pointing at further
sitemaps (``loc``, ``lastmod``). Either may be served gzip-compressed.

Decisions:

- **Parser: the standard library's ElementTree behind defusedxml.** A sitemap comes from the
  site being crawled, so it is hostile input: defusedxml refuses entity declarations (the
  "billion laughs" bomb, quadratic blow-up) and external entities or DTDs before any expansion,
  which the bare standard-library parser does not promise. lxml would be faster but its
  safety depends on parser options the caller must remember; a sitemap is at most 50 MB and
  50,000 entries by the protocol, which ElementTree parses in well under a second.
- **Bounded size.** The body (after decompression) is cut off at ``max_bytes`` (default 50 MB,
  the protocol's limit): a gzip bomb is decompressed in pieces and refused as soon as it grows
  past the bound, never expanded in memory; at most ``max_entries`` (50,000) entries are kept.
- **Bad input is an error value, not an exception**: :func:`parse_sitemap` returns a
  :class:`SitemapError` with a reason (``too_large``, ``bad_gzip``, ``forbidden_xml``,
  ``malformed``, ``not_a_sitemap``) so the caller can record it as a failed poll.
- ``lastmod`` is a W3C datetime (``2026-11-23``, ``2026-11-23T10:00:00+00:00``, ``...Z``); a
  date without a zone is taken as UTC; an unreadable ``lastmod`` is dropped (the entry stays).
- Namespaces are ignored (a sitemap with the wrong or no namespace is still read): the element's
  local name is what counts, as the big crawlers do.
"""

from __future__ import annotations

import datetime as dt
import zlib
from dataclasses import dataclass
from typing import Literal
from xml.etree.ElementTree import Element, ParseError

import defusedxml
import defusedxml.ElementTree as SafeET

MAX_BYTES = 50 * 1024 * 1024
MAX_ENTRIES = 50_000
GZIP_MAGIC = b"\x1f\x8b"

SitemapKind = Literal["urlset", "sitemapindex"]


@dataclass(frozen=True)
class SitemapEntry:
    """One ``<url>`` or ``<sitemap>``: its location and, if given, its lastmod (Unix time)."""

    loc: str
    lastmod: float | None = None


@dataclass(frozen=True)
class Sitemap:
    kind: SitemapKind
    entries: tuple[SitemapEntry, ...]
    truncated: bool = False  # more than max_entries entries: the rest were dropped


@dataclass(frozen=True)
class SitemapError:
    reason: str
    detail: str = ""


def decompress(body: bytes, max_bytes: int = MAX_BYTES) -> bytes | SitemapError:
    """The body itself, or its gzip decompression if it starts with the gzip magic, refused
    (``too_large``) once it passes ``max_bytes``."""
    if not body.startswith(GZIP_MAGIC):
        if len(body) > max_bytes:
            return SitemapError("too_large", f"{len(body)} bytes > {max_bytes}")
        return body
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    data = body
    try:
        while data:
            out += inflater.decompress(data, max_bytes + 1 - len(out))
            if len(out) > max_bytes:
                return SitemapError("too_large", f"decompressed past {max_bytes} bytes")
            data = inflater.unconsumed_tail
        out += inflater.flush()
    except zlib.error as error:
        return SitemapError("bad_gzip", str(error))
    if len(out) > max_bytes:
        return SitemapError("too_large", f"decompressed past {max_bytes} bytes")
    return bytes(out)


def parse_w3c_datetime(text: str) -> float | None:
    """A W3C datetime (or an ISO 8601 one) as Unix time; None when unreadable."""
    value = text.strip()
    if not value:
        return None
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        stamp = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


def _local(tag: object) -> str:
    name = tag if isinstance(tag, str) else ""
    return name.rsplit("}", 1)[-1].lower()


def _child_text(element: Element, name: str) -> str | None:
    for child in element:
        if _local(child.tag) == name:
            return (child.text or "").strip()
    return None


def parse_xml(body: bytes) -> Element | SitemapError:
    """The document's root element, parsed with entity declarations and DTDs refused."""
    try:
        root: Element = SafeET.fromstring(body, forbid_dtd=True)
    except defusedxml.DefusedXmlException as error:
        return SitemapError("forbidden_xml", type(error).__name__)
    except ParseError as error:
        return SitemapError("malformed", str(error))
    return root


def parse_sitemap(
    body: bytes, *, max_bytes: int = MAX_BYTES, max_entries: int = MAX_ENTRIES
) -> Sitemap | SitemapError:
    """A sitemap or sitemap index (plain or gzip) read into entries, or why it could not be."""
    raw = decompress(body, max_bytes)
    if isinstance(raw, SitemapError):
        return raw
    root = parse_xml(raw)
    if isinstance(root, SitemapError):
        return root
    kind = _local(root.tag)
    if kind not in ("urlset", "sitemapindex"):
        return SitemapError("not_a_sitemap", f"root element <{kind}>")
    item = "url" if kind == "urlset" else "sitemap"
    entries: list[SitemapEntry] = []
    truncated = False
    for element in root:
        if _local(element.tag) != item:
            continue
        loc = _child_text(element, "loc")
        if not loc:
            continue
        if len(entries) >= max_entries:
            truncated = True
            break
        lastmod = _child_text(element, "lastmod")
        entries.append(SitemapEntry(loc, parse_w3c_datetime(lastmod) if lastmod else None))
    return Sitemap("urlset" if kind == "urlset" else "sitemapindex", tuple(entries), truncated)

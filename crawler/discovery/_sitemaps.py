"""Sitemaps read natively, streamed: bytes in, entries out (no I/O).

A sitemap (sitemaps.org protocol 0.9) is either a ``<urlset>`` of ``<url>`` entries (``loc``,
optional ``lastmod``) or a ``<sitemapindex>`` of ``<sitemap>`` entries pointing at further
sitemaps (``loc``, ``lastmod``). Either may be served gzip-compressed.

Decisions:

- **Streamed, never built.** The body is inflated (if gzip) in pieces of ``CHUNK`` bytes and
  each piece is fed to an incremental SAX parser whose handler keeps only the entries; no
  document tree is ever built, and reading stops as soon as ``max_entries`` entries are kept
  (the rest of the body is never inflated nor parsed). Building the tree first (ElementTree
  behind defusedxml, as before) took a 1.5 MB gzip inflating to a valid 49 MB sitemap of
  550,000 entries to 4.7 s and +306 MB of peak memory to keep 50,000 entries; streamed, the
  same read costs 0.2-0.7 s and +19 MB (the entries), one piece of the body at a time.
- **Parser: defusedxml's SAX reader** (``DefusedExpatParser``, expat underneath) with DTDs,
  entity declarations and external references refused: a sitemap comes from the site being
  crawled, so it is hostile input, and defusedxml refuses the "billion laughs" and external
  entities before any expansion, which the bare standard-library parser does not promise.
  Measured on 50,000 entries without dates: 0.11 s (bare expat with our own handlers:
  0.08 s, without the refusals).
- **Bounded inflated size: ``max_bytes``, 8 MB by default, far below the protocol's 50 MB.**
  A real sitemap of 50,000 URLs with dates is about 5-8 MB; a site with more splits it (the
  protocol's index), and big crawlers read only the first part of larger ones. The bound is
  what a small hostile body may cost the reader, so it is kept at what real sitemaps need.
  Past it, reading stops: the entries read before it are kept (a real sitemap of 10 MB still
  gives its first 40,000 URLs) and the sitemap is marked ``too_large`` (the caller records it
  as a failed read and warns); with no entry read before it (a body of padding) it is a
  :class:`SitemapError` (``too_large``). A sitemap cut at the entry cap first is not too large.
- **Bad input is an error value, not an exception**: :func:`parse_sitemap` returns a
  :class:`SitemapError` with a reason (``too_large``, ``bad_gzip``, ``forbidden_xml``,
  ``malformed``, ``not_a_sitemap``) so the caller can record it as a failed read.
- ``lastmod`` is a W3C datetime (``2026-11-23``, ``2026-11-23T10:00:00+00:00``, ``...Z``); a
  date without a zone is taken as UTC; an unreadable ``lastmod`` is dropped (the entry stays).
- Namespaces are ignored (a sitemap with the wrong or no namespace is still read): the element's
  local name is what counts, as the big crawlers do.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal
from xml.sax import SAXException
from xml.sax.handler import ContentHandler
from xml.sax.xmlreader import AttributesImpl

import defusedxml
from defusedxml.expatreader import DefusedExpatParser

#: the inflated (or plain) size read at most: see the module's decisions
MAX_BYTES = 8 * 1024 * 1024
MAX_ENTRIES = 50_000
GZIP_MAGIC = b"\x1f\x8b"
#: bytes inflated and parsed at a time
CHUNK = 64 * 1024
#: characters of a ``loc`` or ``lastmod`` kept (a URL longer than this is not one we poll)
MAX_TEXT = 4_096

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
    truncated: bool = False  # more than max_entries entries: reading stopped there
    too_large: bool = False  # past max_bytes: reading stopped there (the entries before kept)


@dataclass(frozen=True)
class SitemapError:
    reason: str
    detail: str = ""


class _TooLargeError(Exception):
    pass


def inflated(body: bytes, max_bytes: int = MAX_BYTES) -> Iterator[bytes]:
    """The body in pieces, gunzipped on the fly if it starts with the gzip magic. Raises
    ``_TooLargeError`` before yielding past ``max_bytes`` and ``zlib.error`` on a corrupt stream
    (:func:`read_pieces` turns both into a :class:`SitemapError`)."""
    if not body.startswith(GZIP_MAGIC):
        for at in range(0, min(len(body), max_bytes), CHUNK):
            yield body[at : min(at + CHUNK, max_bytes)]
        if len(body) > max_bytes:
            raise _TooLargeError(f"{len(body)} bytes > {max_bytes}")
        return
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = memoryview(body)
    produced = 0
    while True:
        piece = inflater.decompress(data, CHUNK)
        data = memoryview(inflater.unconsumed_tail)
        if not piece:
            if not data:
                piece = inflater.flush()  # what is left of the first member (usually nothing)
                if not piece:
                    break
            elif inflater.eof:
                break  # trailing bytes after the gzip member are ignored, as gzip does
        if produced + len(piece) > max_bytes:
            yield piece[: max_bytes - produced]
            raise _TooLargeError(f"decompressed past {max_bytes} bytes")
        produced += len(piece)
        yield piece
        if inflater.eof:
            break


def decompress(body: bytes, max_bytes: int = MAX_BYTES) -> bytes | SitemapError:
    """The whole body (inflated if gzip), refused (``too_large``) once it passes
    ``max_bytes``; for readers that need it whole (feeds, bounded further by their caller)."""
    pieces: list[bytes] = []
    try:
        pieces.extend(inflated(body, max_bytes))
    except _TooLargeError as error:
        return SitemapError("too_large", str(error))
    except zlib.error as error:
        return SitemapError("bad_gzip", str(error))
    return b"".join(pieces)


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


def _local(name: str) -> str:
    return name.rsplit(":", 1)[-1].lower()


class _CapReachedError(Exception):
    """Raised by the handler when ``max_entries`` entries are kept: reading stops."""


class _NotSitemapError(Exception):
    pass


class _Entries(ContentHandler):
    """Keeps the entries of a urlset or sitemap index as they stream by."""

    def __init__(self, max_entries: int) -> None:
        super().__init__()
        self.max_entries = max_entries
        self.kind = ""
        self.item = ""
        self.entries: list[SitemapEntry] = []
        self.truncated = False
        self._depth = 0
        self._field = ""  # "loc" or "lastmod" while inside one at an item's top level
        self._text: list[str] = []
        self._size = 0
        self._loc: str | None = None
        self._lastmod: str | None = None

    def startElement(self, name: str, attrs: AttributesImpl) -> None:  # noqa: N802 (SAX)
        local = _local(name)
        self._depth += 1
        if self._depth == 1:
            if local not in ("urlset", "sitemapindex"):
                raise _NotSitemapError(f"root element <{local}>")
            self.kind, self.item = local, "url" if local == "urlset" else "sitemap"
        elif self._depth == 2 and local == self.item:
            self._loc = self._lastmod = None
        elif self._depth == 3 and local in ("loc", "lastmod"):
            self._field, self._text, self._size = local, [], 0

    def characters(self, content: str) -> None:
        if self._field and self._size < MAX_TEXT:
            self._text.append(content)
            self._size += len(content)

    def endElement(self, name: str) -> None:  # noqa: N802 (SAX)
        depth, self._depth = self._depth, self._depth - 1
        if depth == 3 and self._field:
            text = "".join(self._text).strip()[:MAX_TEXT]
            if self._field == "loc":
                self._loc = text
            else:
                self._lastmod = text
            self._field = ""
        elif depth == 2 and _local(name) == self.item and self._loc:
            if len(self.entries) >= self.max_entries:
                self.truncated = True
                raise _CapReachedError
            lastmod = parse_w3c_datetime(self._lastmod) if self._lastmod else None
            self.entries.append(SitemapEntry(self._loc, lastmod))


def parse_sitemap(
    body: bytes, *, max_bytes: int = MAX_BYTES, max_entries: int = MAX_ENTRIES
) -> Sitemap | SitemapError:
    """A sitemap or sitemap index (plain or gzip) read into entries, or why it could not be."""
    handler = _Entries(max_entries)
    parser = DefusedExpatParser(forbid_dtd=True, forbid_entities=True, forbid_external=True)
    parser.setContentHandler(handler)
    try:
        for piece in inflated(body, max_bytes):
            parser.feed(piece)
        parser.close()
    except _CapReachedError:
        pass
    except _TooLargeError as error:
        if not handler.entries:
            return SitemapError("too_large", str(error))
        kind: SitemapKind = "urlset" if handler.kind == "urlset" else "sitemapindex"
        return Sitemap(kind, tuple(handler.entries), True, too_large=True)
    except zlib.error as error:
        return SitemapError("bad_gzip", str(error))
    except defusedxml.DefusedXmlException as error:
        return SitemapError("forbidden_xml", type(error).__name__)
    except _NotSitemapError as error:
        return SitemapError("not_a_sitemap", str(error))
    except SAXException as error:
        return SitemapError("malformed", str(error))
    if not handler.kind:
        return SitemapError("malformed", "no root element")
    read: SitemapKind = "urlset" if handler.kind == "urlset" else "sitemapindex"
    return Sitemap(read, tuple(handler.entries), handler.truncated)

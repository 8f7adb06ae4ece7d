"""Reading URLs from files: plain lists, sitemap.xml and OPML, each URL with where it was."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import NamedTuple

from selectolax.lexbor import LexborHTMLParser

#: a comment to the end of the line: a ``#`` after a blank (the blank is whitespace)
_TRAILING_COMMENT = re.compile(r"\s#.*$")


class SourceUrl(NamedTuple):
    """A URL as written in a source, and where: ``line`` (1-based; 0 when not found, e.g. a
    sitemap entry written with character references the parser decoded)."""

    url: str
    line: int


def read_url_source(source: str | Path) -> list[SourceUrl]:
    """URLs from text: one per line, or a sitemap (<loc>), or OPML (outline xmlUrl/htmlUrl).
    ``source`` is a path or the text itself.

    In a plain list a line's blanks around the URL are dropped, a line starting with ``#``
    is a comment, and so is the rest of a line from a ``#`` after a blank
    (``http://host/a.html   # note``): a URL's own fragment has no blank before it, and a
    URL cannot contain a blank, so the cut never takes part of a URL."""
    if isinstance(source, Path):
        text = source.read_text(encoding="utf-8", errors="replace")
    else:
        text = source
    head = text.lstrip()[:512].lower()
    markers = ("<urlset", "<sitemapindex", "<opml", "<?xml")
    if head.startswith("<") and any(m in head for m in markers):
        return _read_xml(text)
    urls = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = _TRAILING_COMMENT.sub("", raw).strip()
        if line and not line.startswith("#"):
            urls.append(SourceUrl(line, number))
    return urls


def _read_xml(text: str) -> list[SourceUrl]:
    tree = LexborHTMLParser(text)
    values = [node.text(strip=True) for node in tree.css("loc")]
    for node in tree.css("outline"):
        attrs = {k.lower(): v for k, v in node.attributes.items()}
        url = attrs.get("xmlurl") or attrs.get("htmlurl")
        if url:
            values.append(url)
    if not values:
        raise ValueError("no <loc> or <outline xmlUrl=...> entries found in the XML")
    return _locate([v for v in values if v], text)


def _locate(values: list[str], text: str) -> list[SourceUrl]:
    """Each value with the line it is written on (searched in document order; the
    parser does not report positions)."""
    out = []
    pos = 0
    for value in values:
        found = -1
        for written in dict.fromkeys((value, html.escape(value, quote=False), html.escape(value))):
            found = text.find(written, pos)
            if found >= 0:
                break
        if found < 0:
            out.append(SourceUrl(value, 0))
            continue
        out.append(SourceUrl(value, text.count("\n", 0, found) + 1))
        pos = found + 1
    return out

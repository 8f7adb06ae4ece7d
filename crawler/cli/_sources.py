"""Reading URLs from files: plain lists, sitemap.xml and OPML."""

from __future__ import annotations

from pathlib import Path

from selectolax.lexbor import LexborHTMLParser


def read_url_source(source: str | Path) -> list[str]:
    """URLs from text: one per line (``#`` comments), or a sitemap (<loc>), or OPML
    (outline xmlUrl/htmlUrl). ``source`` is a path or the text itself."""
    if isinstance(source, Path):
        text = source.read_text(encoding="utf-8", errors="replace")
    else:
        text = source
    head = text.lstrip()[:512].lower()
    markers = ("<urlset", "<sitemapindex", "<opml", "<?xml")
    if head.startswith("<") and any(m in head for m in markers):
        return _read_xml(text)
    urls = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            urls.append(line)
    return urls


def _read_xml(text: str) -> list[str]:
    tree = LexborHTMLParser(text)
    urls = [node.text(strip=True) for node in tree.css("loc")]
    for node in tree.css("outline"):
        attrs = {k.lower(): v for k, v in node.attributes.items()}
        url = attrs.get("xmlurl") or attrs.get("htmlurl")
        if url:
            urls.append(url)
    if not urls:
        raise ValueError("no <loc> or <outline xmlUrl=...> entries found in the XML")
    return [u for u in urls if u]

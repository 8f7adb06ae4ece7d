"""Sitemaps and feeds read natively, including hostile and malformed input."""

from __future__ import annotations

import gzip
import time

import pytest

from crawler.discovery._feeds import Feed, parse_feed
from crawler.discovery._lastmod import LastmodTracker, Listed, looks_like_listing, read_listing
from crawler.discovery._sitemaps import (
    Sitemap,
    SitemapError,
    decompress,
    parse_sitemap,
    parse_w3c_datetime,
)

URLSET = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://127.0.0.1/p/1</loc><lastmod>2026-11-23T10:00:00+00:00</lastmod></url>
  <url><loc>http://127.0.0.1/p/2</loc><lastmod>2026-11-22</lastmod></url>
  <url><loc>http://127.0.0.1/p/3</loc><lastmod>yesterday</lastmod></url>
  <url><loc>http://127.0.0.1/p/4</loc></url>
  <url><lastmod>2026-11-22</lastmod></url>
</urlset>"""

INDEX = b"""<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <sitemap><loc>/s/1.xml</loc><lastmod>2026-11-23T10:00:00Z</lastmod></sitemap>
  <sitemap><loc>/s/2.xml.gz</loc></sitemap>
</sitemapindex>"""

RSS = b"""<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>
<item><title>a</title><link>http://h/a/1</link>
  <pubDate>Mon, 23 Nov 2026 10:00:00 GMT</pubDate></item>
<item><title>b</title><guid isPermaLink="true">http://h/a/2</guid></item>
<item><title>c</title><link>/a/3</link><pubDate>not a date</pubDate></item>
</channel></rss>"""

ATOM = b"""<feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>
<entry><title>a</title><link rel="alternate" href="http://h/a/1"/>
  <updated>2026-11-23T10:00:00Z</updated><published>2026-11-20T10:00:00Z</published></entry>
<entry><title>b</title><link href="http://h/a/2"/><published>2026-11-22T10:00:00Z</published></entry>
</feed>"""


def _bomb(levels: int, root: bytes) -> bytes:
    entities = '<!ENTITY a0 "xxxxxxxxxx">' + "".join(
        f'<!ENTITY a{i + 1} "' + f"&a{i};" * 10 + '">' for i in range(levels)
    )
    return f'<?xml version="1.0"?><!DOCTYPE r [{entities}]>'.encode() + root.replace(
        b"LOC", f"&a{levels};".encode()
    )


def test_w3c_datetimes() -> None:
    assert parse_w3c_datetime("2026-11-23") == parse_w3c_datetime("2026-11-23T00:00:00Z")
    assert parse_w3c_datetime("2026-11-23T12:00:00+02:00") == parse_w3c_datetime(
        "2026-11-23T10:00:00Z"
    )
    assert parse_w3c_datetime("soon") is None
    assert parse_w3c_datetime("") is None


def test_urlset_with_lastmod() -> None:
    sitemap = parse_sitemap(URLSET)
    assert isinstance(sitemap, Sitemap)
    assert sitemap.kind == "urlset"
    locs = [e.loc for e in sitemap.entries]
    assert locs == [f"http://127.0.0.1/p/{i}" for i in (1, 2, 3, 4)]  # no loc: skipped
    dates = [e.lastmod for e in sitemap.entries]
    assert dates[0] == parse_w3c_datetime("2026-11-23T10:00:00Z")
    assert dates[1] == parse_w3c_datetime("2026-11-22")
    assert dates[2] is None and dates[3] is None  # unreadable or absent: entry kept


def test_sitemap_index_and_gzip() -> None:
    plain = parse_sitemap(INDEX)
    packed = parse_sitemap(gzip.compress(INDEX))
    assert isinstance(plain, Sitemap) and plain.kind == "sitemapindex"
    assert plain == packed
    listing = read_listing(gzip.compress(INDEX), "http://h/sitemap.xml")
    assert not isinstance(listing, SitemapError)
    assert [i.url for i in listing.items] == ["http://h/s/1.xml", "http://h/s/2.xml.gz"]


def test_entity_bombs_and_external_entities_are_refused() -> None:
    for root in (b"<urlset><url><loc>LOC</loc></url></urlset>",):
        started = time.perf_counter()
        result = parse_sitemap(_bomb(9, root))
        assert isinstance(result, SitemapError) and result.reason == "forbidden_xml"
        assert time.perf_counter() - started < 5.0
    external = (
        b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b"<urlset><url><loc>&x;</loc></url></urlset>"
    )
    result = parse_sitemap(external)
    assert isinstance(result, SitemapError) and result.reason == "forbidden_xml"
    rss_bomb = _bomb(
        9, b'<rss version="2.0"><channel><item><link>LOC</link></item></channel></rss>'
    )
    feed = parse_feed(rss_bomb)
    assert isinstance(feed, SitemapError) and feed.reason == "forbidden_xml"
    rss_external = external.replace(b"<urlset><url><loc>&x;</loc></url></urlset>", b"").replace(
        b"<!DOCTYPE r", b"<!DOCTYPE rss"
    ) + (b'<rss version="2.0"><channel><item><link>&x;</link></item></channel></rss>')
    feed = parse_feed(rss_external)
    assert isinstance(feed, SitemapError)  # declares an entity: refused before parsing


def test_gzip_bomb_is_bounded() -> None:
    bomb = gzip.compress(b"<urlset>" + b" " * 20_000_000 + b"</urlset>")
    assert len(bomb) < 100_000
    result = parse_sitemap(bomb, max_bytes=1_000_000)
    assert isinstance(result, SitemapError) and result.reason == "too_large"
    assert isinstance(decompress(b"\x1f\x8bnot gzip at all"), SitemapError)
    too_big = parse_sitemap(b"<urlset>" + b" " * 2_000 + b"</urlset>", max_bytes=1_000)
    assert isinstance(too_big, SitemapError) and too_big.reason == "too_large"


def test_huge_sitemap_keeps_max_entries() -> None:
    body = (
        b"<urlset>"
        + b"".join(b"<url><loc>http://h/p/%d</loc></url>" % i for i in range(60_000))
        + b"</urlset>"
    )
    started = time.perf_counter()
    sitemap = parse_sitemap(gzip.compress(body))
    assert isinstance(sitemap, Sitemap)
    assert len(sitemap.entries) == 50_000 and sitemap.truncated
    assert time.perf_counter() - started < 30.0  # generous: the machine is shared


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "malformed"),
        (b"<urlset><url><loc>http://h/1</loc>", "malformed"),
        (b"\xff\xfe\x00garbage", "malformed"),
        (b"<html><body>not a sitemap</body></html>", "not_a_sitemap"),
    ],
)
def test_malformed_sitemaps_are_errors(body: bytes, reason: str) -> None:
    result = parse_sitemap(body)
    assert isinstance(result, SitemapError) and result.reason == reason


def test_rss_and_atom() -> None:
    rss = parse_feed(RSS, base_url="http://h/feed")
    assert isinstance(rss, Feed) and rss.version == "rss20"
    assert [e.link for e in rss.entries] == ["http://h/a/1", "http://h/a/2", "http://h/a/3"]
    assert rss.entries[0].updated == parse_w3c_datetime("2026-11-23T10:00:00Z")
    assert rss.entries[1].updated is None and rss.entries[2].updated is None
    atom = parse_feed(gzip.compress(ATOM))
    assert isinstance(atom, Feed) and atom.version == "atom10"
    assert [e.link for e in atom.entries] == ["http://h/a/1", "http://h/a/2"]
    assert atom.entries[0].updated == parse_w3c_datetime("2026-11-23T10:00:00Z")  # updated wins
    assert atom.entries[1].updated == parse_w3c_datetime("2026-11-22T10:00:00Z")


def test_broken_feeds() -> None:
    repaired = parse_feed(b'<rss version="2.0"><channel><item><link>http://h/1</link></item>')
    assert isinstance(repaired, Feed) and repaired.repaired
    assert [e.link for e in repaired.entries] == ["http://h/1"]
    html = parse_feed(b"<html><body>hello</body></html>")
    assert isinstance(html, SitemapError) and html.reason == "not_a_feed"
    big = parse_feed(b"<rss>" + b" " * 2_000 + b"</rss>", max_bytes=1_000)
    assert isinstance(big, SitemapError) and big.reason == "too_large"


def test_sniffing() -> None:
    assert looks_like_listing(URLSET) and looks_like_listing(gzip.compress(INDEX))
    assert looks_like_listing(RSS) and looks_like_listing(ATOM)
    assert not looks_like_listing(b"<!doctype html><html><body><a href=/x>x</a></body></html>")
    not_listing = read_listing(b"<html></html>", "http://h/")
    assert isinstance(not_listing, SitemapError) and not_listing.reason == "not_a_listing"
    feed = read_listing(RSS, "http://h/feed")
    assert not isinstance(feed, SitemapError) and feed.kind == "feed"


def test_lastmod_moved() -> None:
    tracker = LastmodTracker()
    first = [Listed("a", 10.0), Listed("b", 10.0), Listed("c", None)]
    assert tracker.moved(first) == []  # nothing to compare with yet
    second = [Listed("a", 10.0), Listed("b", 20.0), Listed("c", 5.0), Listed("d", 1.0)]
    assert tracker.moved(second) == [Listed("b", 20.0)]
    assert tracker.moved([Listed("b", 15.0)]) == []  # backwards: not news
    assert tracker.moved([Listed("b", 16.0), Listed("c", 6.0)]) == [
        Listed("b", 16.0),
        Listed("c", 6.0),
    ]


def test_sniffing_looks_at_the_root_element_only() -> None:
    html = b"<!doctype html><html><body><pre>&lt;rss&gt;</pre><rss>not really</rss></body></html>"
    assert not looks_like_listing(html)
    declared = (
        b'\xef\xbb\xbf<?xml version="1.0"?>\n<!-- generated -->\n'
        b'<?xml-stylesheet href="s.xsl"?>\n<!DOCTYPE rss [<!ENTITY a "b">]>\n<rss version="2.0">'
    )
    assert looks_like_listing(declared)
    assert looks_like_listing(b"  <urlset><url><loc>http://h/</loc></url></urlset>")
    assert not looks_like_listing(b"plain text")

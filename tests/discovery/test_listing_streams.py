"""The streamed listing readers: caps, bombs, refused entities, malformed input; the feed cut;
the newest entries kept; the re-read pacer; sitemap index loops in the crawl."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import pytest

from crawler.discovery import ListingPacer, SourceCrawl
from crawler.discovery._feeds import Feed, first_items, parse_feed
from crawler.discovery._lastmod import Listed, Listing, read_listing
from crawler.discovery._sitemaps import Sitemap, SitemapError, parse_sitemap


def _urlset(count: int, tail: bytes = b"</urlset>") -> bytes:
    entries = b"".join(b"<url><loc>http://h/p/%d</loc></url>" % k for k in range(count))
    return b"<urlset>" + entries + tail


def test_reading_stops_at_the_entry_cap_without_reading_the_rest() -> None:
    # past the cap the body is not even well formed: reading stopped before it
    body = _urlset(100, tail=b"<url><loc>http://h/x</loc></url><<<not xml at all")
    sitemap = parse_sitemap(body, max_entries=100)
    assert isinstance(sitemap, Sitemap) and sitemap.truncated
    assert [e.loc for e in sitemap.entries] == [f"http://h/p/{k}" for k in range(100)]
    whole = parse_sitemap(_urlset(100), max_entries=100)
    assert isinstance(whole, Sitemap) and not whole.truncated and len(whole.entries) == 100


def test_a_dense_gzip_bomb_is_read_to_the_cap_in_little_memory() -> None:
    block = b"".join(b"<url><loc>http://h/p/%d</loc></url>\n" % k for k in range(20)) * 50
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip, written in pieces
    pieces = [packer.compress(b"<urlset>")]
    pieces += [packer.compress(block) for _ in range(700)]  # 25 MB, 700,000 entries
    packed = b"".join([*pieces, packer.compress(b"</urlset>"), packer.flush()])
    assert len(packed) < 2**20
    tracemalloc.start()
    try:
        sitemap = parse_sitemap(packed, max_entries=5_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(sitemap, Sitemap) and sitemap.truncated and len(sitemap.entries) == 5_000
    assert peak < 8 * 2**20, peak  # a few pieces and the entries, never the document


def test_the_inflated_size_is_bounded() -> None:
    # Compression level 1: the same inflated bytes, packed in a quarter of the CPU of level 9.
    sparse = gzip.compress(b"<urlset>" + b" " * 30_000_000 + b"</urlset>", compresslevel=1)
    result = parse_sitemap(sparse, max_bytes=2_000_000)
    assert isinstance(result, SitemapError) and result.reason == "too_large"
    result = parse_sitemap(sparse)  # the default bound (8 MB) too
    assert isinstance(result, SitemapError) and result.reason == "too_large"
    feed = parse_feed(gzip.compress(b"<rss>" + b" " * 10_000_000 + b"</rss>", compresslevel=1))
    assert isinstance(feed, SitemapError) and feed.reason == "too_large"


@pytest.mark.parametrize(
    "body",
    [
        b'<!DOCTYPE urlset SYSTEM "http://127.0.0.1:9/x.dtd"><urlset></urlset>',
        b'<!DOCTYPE r [<!ENTITY e "x">]><urlset><url><loc>&e;</loc></url></urlset>',
        b'<!DOCTYPE r [<!ENTITY e SYSTEM "file:///etc/passwd">]><urlset>&e;</urlset>',
    ],
)
def test_dtds_and_entities_are_refused(body: bytes) -> None:
    for packed in (body, gzip.compress(body)):
        result = parse_sitemap(packed)
        assert isinstance(result, SitemapError) and result.reason == "forbidden_xml", result


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (gzip.compress(_urlset(10), mtime=0)[:-30], "malformed"),  # cut short: XML ends early
        (b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"\xff" * 40, "bad_gzip"),
        (b"<urlset><url><loc>http://h/1</loc></url></urlset><extra/>", "malformed"),
        (b"<feed><entry/></feed>", "not_a_sitemap"),
    ],
)
def test_malformed_input_is_recorded(body: bytes, reason: str) -> None:
    result = parse_sitemap(body)
    assert isinstance(result, SitemapError) and result.reason == reason, result


def test_a_sitemap_index_and_namespaced_entries_stream() -> None:
    body = (
        b'<?xml version="1.0"?><sm:sitemapindex xmlns:sm="http://www.sitemaps.org/schemas/'
        b'sitemap/0.9"><sm:sitemap><sm:loc> /a.xml </sm:loc><sm:lastmod>2026-11-23</sm:lastmod>'
        b"<extra><loc>ignored</loc></extra></sm:sitemap></sm:sitemapindex>"
    )
    sitemap = parse_sitemap(body)
    assert isinstance(sitemap, Sitemap) and sitemap.kind == "sitemapindex"
    assert [e.loc for e in sitemap.entries] == ["/a.xml"] and sitemap.entries[0].lastmod


def test_a_feed_is_cut_before_feedparser_and_keeps_its_tail() -> None:
    items = b"".join(b"<item><link>http://h/i/%d</link></item>" % k for k in range(5_000))
    feed = b'<rss version="2.0"><channel><title>t</title>' + items + b"</channel></rss>"
    cut, was_cut = first_items(feed, 10)
    assert was_cut and cut.endswith(b"</item></channel></rss>")
    assert cut.count(b"<item>") == 10
    assert first_items(feed, 5_000) == (feed, False)
    read = parse_feed(feed, max_entries=10)
    assert isinstance(read, Feed) and read.truncated and not read.repaired
    assert [e.link for e in read.entries] == [f"http://h/i/{k}" for k in range(10)]
    atom = b'<feed xmlns="http://www.w3.org/2005/Atom">' + b"".join(
        b'<entry><link href="http://h/a/%d"/></entry>' % k for k in range(30)
    )
    partial = parse_feed(atom, max_entries=5)  # no closing </feed>: cut, read leniently
    assert isinstance(partial, Feed) and len(partial.entries) == 5


def test_the_newest_entries_are_kept_in_document_order() -> None:
    entries = b"".join(
        b"<url><loc>http://h/p/%d</loc><lastmod>2026-11-%02d</lastmod></url>" % (k, k + 1)
        for k in range(20)
    )
    body = b"<urlset><url><loc>http://h/undated</loc></url>" + entries + b"</urlset>"
    listing = read_listing(body, "http://h/sitemap.xml", newest=3)
    assert isinstance(listing, Listing) and not listing.truncated
    assert [i.url for i in listing.items] == ["http://h/p/17", "http://h/p/18", "http://h/p/19"]
    everything = read_listing(body, "http://h/sitemap.xml")
    assert isinstance(everything, Listing) and len(everything.items) == 21


def test_the_pacer_reads_at_most_as_often_as_a_listing_changes() -> None:
    pacer = ListingPacer(max_interval=8)
    assert pacer.due("u", 0)
    pacer.changed("u", 0, b"a")
    assert pacer.interval("u") == 1 and pacer.due("u", 1) and pacer.same_body("u", b"a")
    intervals = []
    for slot in (1, 3, 7, 15, 23):
        assert pacer.due("u", slot)
        pacer.unchanged("u", slot)
        intervals.append(pacer.interval("u"))
    assert intervals == [2, 4, 8, 8, 8]
    assert not pacer.due("u", 30) and pacer.due("u", 31)
    pacer.changed("u", 31, b"b")  # changed: every slot again
    assert pacer.interval("u") == 1 and not pacer.same_body("u", b"a")


def test_the_pacer_backs_off_failures_and_warns_once_per_run() -> None:
    pacer = ListingPacer(max_interval=16)
    firsts = [pacer.failed("u", slot, "http_4xx") for slot in (0, 2, 6, 14, 30)]
    assert firsts == [True, False, False, False, False]
    assert pacer.interval("u") == 16 and pacer.failing("u") == "http_4xx"
    pacer.changed("u", 46, b"x")  # read fine: a later failure warns again
    assert pacer.failing("u") is None and pacer.failed("u", 47, "malformed")
    small = ListingPacer(max_urls=2)
    for url in ("a", "b", "c"):
        small.changed(url, 0, b"")
    assert len(small) == 2 and "a" not in small


def test_a_sitemap_index_listing_itself_or_its_parent_is_not_followed() -> None:
    crawl = SourceCrawl("http://h/index.xml", strategy="weblog", start_choice="bandit")
    url = crawl.next_url()
    assert url == "http://h/index.xml"
    index = Listing(
        "sitemapindex",
        (Listed("http://h/index.xml", None), Listed("http://h/child.xml", None)),
    )
    crawl.fetched(url, None, published=None, now=0.0, listing=index)
    assert crawl.listing_errors["loop"] == 1
    assert crawl.next_url() == "http://h/child.xml"
    back = Listing(
        "sitemapindex",
        (Listed("http://h/index.xml", None), Listed("http://h/leaf.xml", None)),
    )
    crawl.fetched("http://h/child.xml", None, published=None, now=0.0, listing=back)
    assert crawl.listing_errors["loop"] == 2  # the child lists its parent: a cycle, cut
    error = SitemapError("too_large", "")
    crawl.new_slot()
    again = crawl.next_url()
    assert again is not None
    crawl.fetched(again, None, published=None, now=0.0, listing=error)
    assert crawl.listing_errors["too_large"] == 1


def test_a_sitemap_past_the_size_bound_keeps_the_entries_before_it() -> None:
    # The bound is a byte count met between two of the reader's 64 KB pieces like any other:
    # 200 KB (three pieces and a part) stops the reading as 1 MB did, with a fifth of the
    # entries to parse.
    body = _urlset(20_000)  # 0.75 MB
    for packed in (body, gzip.compress(body)):
        sitemap = parse_sitemap(packed, max_bytes=200_000, max_entries=200_000)
        assert isinstance(sitemap, Sitemap) and sitemap.too_large and sitemap.truncated
        assert 5_000 < len(sitemap.entries) < 7_000  # about 200 KB of 32-byte entries
        assert sitemap.entries[0].loc == "http://h/p/0"
    listing = read_listing(body, "http://h/", max_bytes=200_000, newest=10)
    assert isinstance(listing, Listing) and listing.too_large and len(listing.items) == 10

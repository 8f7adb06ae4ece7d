"""normalize() + content_hash(): what counts as a change and what does not."""

from __future__ import annotations

import time

import pytest

from crawler.detect import DetectItem, WatchRules, content_hash, content_kind, judge, normalize
from crawler.detect._normalize import collapse_whitespace
from tests.detect.pages import page

HTML = "text/html; charset=utf-8"


NO_RULES = WatchRules()


def h(body: bytes, ctype: str | None = HTML, rules: WatchRules = NO_RULES) -> str:
    return content_hash(normalize(body, ctype, rules))


def test_rotating_nonces_scripts_comments_csrf_are_a_miss() -> None:
    a, b = page(1, nonce=1), page(1, nonce=2)
    assert a != b
    assert h(a) == h(b)


def test_visible_text_change_is_a_hit() -> None:
    assert h(page(1)) != h(page(1, extra_text="Breaking: new item"))
    assert h(page(1)) != h(page(2))


def test_whitespace_and_markup_formatting_ignored() -> None:
    a = b"<html><body><h1>Title</h1><p>Hello   world,\n  how are you?</p></body></html>"
    b = (
        b"<html>\n <body>\n\n  <h1>Title</h1>\n"
        b"  <p>Hello world,\thow are\r\n you?</p>\n</body></html>"
    )
    assert normalize(b, HTML) == b"Title Hello world, how are you?"
    assert normalize(a, HTML) == b"TitleHello world, how are you?"  # no separator is invented
    assert h(a) == h(b)  # the hash ignores whitespace altogether


def test_dropped_parts() -> None:
    body = (
        b"<html><head><title>T</title><style>p{}</style><script>var x=1</script></head>"
        b"<body><!-- secret --><noscript>enable js</noscript><p>visible</p>"
        b"<input type=hidden name=csrf value=abc123><template><p>tpl</p></template></body></html>"
    )
    assert normalize(body, HTML) == b"Tvisible"


def test_selector_watches_one_part() -> None:
    rules = WatchRules(selector="p.extra")
    a = page(1, extra_text="price 10")
    b = page(2, extra_text="price 10")  # everything else differs
    c = page(1, extra_text="price 12")
    assert normalize(a, HTML, rules) == b"price 10"
    assert h(a, rules=rules) == h(b, rules=rules) != h(c, rules=rules)
    assert normalize(a, HTML, WatchRules(selector="#nothing-here")) == b""


def test_ignore_patterns() -> None:
    rules = WatchRules(ignore_patterns=(r"\d+ views", r"Updated \d{2}:\d{2}"))
    a = b"<p>Story</p><p>1234 views</p><span>Updated 10:31</span>"
    b = b"<p>Story</p><p>1299 views</p><span>Updated 11:02</span>"
    c = b"<p>Story changed</p><p>1299 views</p>"
    assert normalize(a, HTML, rules) == b"Story"
    assert h(a, rules=rules) == h(b, rules=rules) != h(c, rules=rules)
    assert h(a) != h(b)


def test_invalid_rules_rejected_up_front() -> None:
    with pytest.raises(ValueError, match="invalid ignore pattern"):
        WatchRules(ignore_patterns=("([unclosed",))
    with pytest.raises(ValueError, match="invalid CSS selector"):
        WatchRules(selector="p[[[")


@pytest.mark.parametrize(
    "body",
    [
        b"<html><body><p>unclosed <b>bold <i>italic</div></td></table>",
        b"<<<>>><p<>p></p>&#xZZZZ;&bogus;<!-- never closed",
        b"</html></body><body><head></head>text after end",
        b"",
        b"\x00\x01\x02<p>nul bytes</p>\xff\xfe",
        bytes(range(256)) * 64,
    ],
)
def test_broken_and_binary_html_never_crashes(body: bytes) -> None:
    out = normalize(body, HTML)
    assert isinstance(out, bytes)
    assert normalize(body, HTML) == out  # deterministic
    assert normalize(body, None) is not None


def test_non_html_hashed_as_bytes() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    assert normalize(png, "image/png") == png
    assert normalize(png, None) == png
    assert content_kind("application/pdf", b"%PDF") == "binary"


def test_text_and_xml() -> None:
    assert normalize(b"  a\n\n b  ", "text/plain") == b"a b"
    feed = (
        b"<?xml version='1.0'?><rss><channel><title>Feed &amp; co</title><!-- c -->"
        b"<item><description><![CDATA[<p>Hello <b>there</b></p>]]></description></item>"
        b"</channel></rss>"
    )
    assert normalize(feed, "application/rss+xml") == b"Feed & co Hello there"
    assert content_kind(None, b"  <!DOCTYPE html><html>") == "html"


def test_charsets() -> None:
    text = "Café \u2013 naïve"
    html = f"<p>{text}</p>"
    assert normalize(html.encode("cp1252"), "text/html; charset=windows-1252") == text.encode()
    meta = f"<meta charset='iso-8859-1'><p>{text[:4]}</p>".encode("latin-1")
    assert normalize(meta, "text/html") == b"Caf\xc3\xa9"
    assert normalize(html.encode("utf-16"), "text/html") == text.encode()  # BOM


@pytest.mark.parametrize(
    "ctype",
    [
        "text/html; charset=utf-8",  # wrong: the bytes are latin-1
        "text/html; charset=no-such-charset",
        "text/html; charset=zlib",  # a bytes codec: must not be used
        "text/html; charset=",
    ],
)
def test_wrong_or_unknown_charset_does_not_crash(ctype: str) -> None:
    body = "<p>Café crème</p>".encode("latin-1")
    out = normalize(body, ctype)
    assert out.startswith(b"Caf") and out == normalize(body, ctype)


def test_huge_dom_is_capped_and_bounded() -> None:
    deep = b"<div>" * 200_000 + b"deep" + b"</div>" * 200_000
    formatting = b"<em>x</p>" * 200_000  # quadratic in lexbor without the open-element guard
    wide = b"<ul>" + b"<li>item</li>" * 100_000 + b"</ul>"
    for body in (deep, formatting, wide):
        t0 = time.process_time()
        out = normalize(body, HTML)
        assert time.process_time() - t0 < 2
        assert isinstance(out, bytes)
    assert out.count(b"item") == 100_000  # the last page's: the wide one
    small = normalize(wide, HTML, max_bytes=1300)
    assert small.count(b"item") < 110


def test_a_changed_page_carries_its_text_collapsing_to_the_normalized_text() -> None:
    before = judge(DetectItem(page(1), HTML))
    body = page(1, extra_text="new\u00a0 words\n\n here")
    after = judge(DetectItem(body, HTML, previous_hash=before.content_hash))
    assert after.changed is True and after.text is not None
    assert collapse_whitespace(after.text) == normalize(body, HTML)
    assert after.content_hash == content_hash(normalize(body, HTML))


def test_nbsp_is_whitespace_and_its_byte_alone_is_not() -> None:
    """NBSP (C2 A0) is whitespace to the hash and the collapse; other characters ending in the
    A0 byte (U+00E0 is C3 A0, U+0420 is D0 A0) are text."""
    assert content_hash("a\u00a0b".encode()) == content_hash(b"a b") == content_hash(b"ab")
    assert collapse_whitespace("a\u00a0\u00a0b".encode()) == b"a b"
    for word in ("\u00e0", "\u0420"):
        text = f"x{word}y".encode()
        assert collapse_whitespace(text) == text
        assert content_hash(text) != content_hash(b"xy")
        assert content_hash(text) != content_hash(f"x{word}{word}y".encode())

"""The readable text (a line per block element) and the hash it must not move.

The hashes below were recorded with the code as it was before the readable text existed
(the text nodes run together, then collapsed); the crawl's judge must give exactly the same
hash for the same pages, or every watched URL would see a spurious change on upgrade.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import crawler.detect._lines
from crawler.detect import (
    DetectItem,
    WatchRules,
    content_hash,
    judge,
    normalize,
    readable_text,
)
from crawler.testsite._pages import PageRenderer
from tests.detect.pages import page

HTML = "text/html"
RULES = {
    "none": WatchRules.of(None, ()),
    "selector": WatchRules.of("main h2, p", ()),
    "patterns": WatchRules.of(None, (r"\d+", "edition")),
}
#: (page, rules) -> content_hash, recorded with the code before the readable text
RECORDED = {
    ("site-1-0", "none"): "90a1af93a6b9143e8237ca7714bc1827",
    ("site-1-0", "selector"): "c3882944def20a150ef76a6ba795ed50",
    ("site-1-0", "patterns"): "7e506b30b0cdfda35083632ad0784f1e",
    ("site-1-3", "none"): "30a6cb12c225ef2a8f9b29d542aee507",
    ("site-1-3", "selector"): "3bf83286be95b53f82649afd76abdcb9",
    ("site-1-3", "patterns"): "23e8d1443e04ce3311eb06acb6703c2f",
    ("site-7-0", "none"): "65435ea8f339af21d4aa3e18baf9bdbd",
    ("site-7-0", "selector"): "b54789244c37165e8d1e4add1d2c5931",
    ("site-7-0", "patterns"): "79e5caa70800dfaf5136ae56100bc50c",
    ("site-7-3", "none"): "b013ee089598eb2c9c42561fdda1f49b",
    ("site-7-3", "selector"): "103f435da9995ca40f36f338c1ff9c2c",
    ("site-7-3", "patterns"): "fc3ba534849a7e0f58b6eae17117f033",
    ("pages-0", "none"): "7c06b4296925651ff94d5e788847f2ce",
    ("pages-0", "selector"): "c78cd805f43c4d8fe252ccf0713b7345",
    ("pages-0", "patterns"): "69451e3f6fd9e7dd59e43a2e2b9bb7ba",
    ("pages-1", "none"): "c75cb1d5ed4ae78d6aacff7680548820",
    ("pages-1", "selector"): "70dffa4e33866e6bfd084941be22ff56",
    ("pages-1", "patterns"): "18322b41c413e2897ac9227b3f158815",
    ("pages-2", "none"): "ad7161edcf4f3ae1fb954997412fdee4",
    ("pages-2", "selector"): "bbf44e5eb86a7aba739a3f6400c13f0e",
    ("pages-2", "patterns"): "6dd758a81a187c2434178c1dd4f1f5a8",
}


def body_of(name: str) -> bytes:
    kind, *numbers = name.split("-")
    if kind == "site":  # the test site's page k at a version (its nonce changes nothing)
        k, version = (int(n) for n in numbers)
        return PageRenderer(4000).render(k, version, "0123456789abcdef")
    return page(int(numbers[0]), nonce=5)


@pytest.mark.parametrize(("name", "rules"), sorted(RECORDED))
def test_the_hash_is_the_one_recorded_before_the_readable_text(name: str, rules: str) -> None:
    body = body_of(name)
    recorded = RECORDED[(name, rules)]
    assert content_hash(normalize(body, HTML, RULES[rules])) == recorded
    baseline = judge(DetectItem(body, HTML, RULES[rules]))  # the crawl's path, text kept
    assert baseline.error is None and baseline.content_hash == recorded and baseline.text
    # a later poll of the same page is a miss (no spurious change), with or without the
    # stored raw hash that lets it skip parsing
    again = judge(DetectItem(body, HTML, RULES[rules], previous_hash=recorded))
    assert again.changed is False
    if rules != "patterns":  # the patterns see line breaks in the readable text only
        assert content_hash(baseline.text) == recorded


def test_the_readable_text_has_a_line_per_block() -> None:
    body = (
        b"<html><head><title>Home</title><script>var x = 1;</script></head><body>"
        b"<nav><a href='/'>Home</a><a href='/news'>News</a></nav>"
        b"<h1>Welcome,  version 2.</h1><p>Hello <b>world</b>&nbsp;and\n more</p>"
        b"<ul><li>one</li><li>two</li></ul>"
        b"<table><tr><th>Price</th><th>Item</th></tr><tr><td>3</td><td>tea</td></tr></table>"
        b"first<br>second<pre>line 1\n  line 2</pre><div>a<div>b</div>c</div></body></html>"
    )
    text = readable_text(body, HTML)
    assert text is not None
    assert text.decode().split("\n") == [
        "Home",
        "Home News",
        "Welcome, version 2.",
        "Hello world and more",
        "one",
        "two",
        "Price Item",
        "3 tea",
        "first",
        "second",
        "line 1",
        "line 2",
        "a",
        "b",
        "c",
    ]
    assert content_hash(text) == content_hash(normalize(body, HTML))
    assert normalize(body, HTML).startswith(b"HomeHome")  # the hashed form, unchanged


def test_the_test_site_page_reads_as_lines() -> None:
    text = readable_text(PageRenderer(4000).render(3, 1, "nonce"), HTML)
    assert text is not None
    lines = text.decode().split("\n")
    assert lines[0] == "Page 3 - edition 1"  # the title, then the h1
    assert lines[1] == "Page 3 - edition 1"
    assert "nonce" not in text.decode()
    assert len(lines) > 10 and all(line == line.strip() and line for line in lines)


def test_text_and_xml_keep_their_own_lines() -> None:
    assert readable_text(b"a  b\r\n\n c\t", "text/plain") == b"a b\nc"
    xml = b"<?xml version='1.0'?><feed><title>T</title>\n<entry>x</entry></feed>"
    assert readable_text(xml, "application/xml") == b"T\nx"
    assert readable_text(b"\x00\x01", "application/octet-stream") is None


_TAGS = ("div", "p", "span", "b", "li", "ul", "h2", "td", "tr", "table", "a", "br", "pre")
_WORDS = st.text(alphabet=st.sampled_from("ab c\n\t\u00a0<&é"), max_size=6)


@st.composite
def _html(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        if depth < 3 and draw(st.booleans()):
            tag = draw(st.sampled_from(_TAGS))
            parts.append(f"<{tag}>{draw(_html(depth + 1))}</{tag}>")
        else:
            parts.append(draw(_WORDS).replace("<", "&lt;"))
    return "".join(parts)


@given(_html())
def test_the_readable_text_hashes_as_the_collapsed_text(fragment: str) -> None:
    body = f"<html><body>{fragment}</body></html>".encode()
    text = readable_text(body, HTML)
    assert text is not None
    assert content_hash(text) == content_hash(normalize(body, HTML))
    selected = WatchRules.of("p, li", ())
    text = readable_text(body, HTML, selected)
    assert text is not None
    assert content_hash(text) == content_hash(normalize(body, HTML, selected))


def test_a_page_that_carries_the_break_character_still_hashes_the_same() -> None:
    body = "<p>odd \ufdd0 text\nnext</p><p>two</p>".encode()
    text = readable_text(body, HTML)
    assert text is not None
    assert content_hash(text) == content_hash(normalize(body, HTML))
    assert text.decode().split("\n") == ["odd \ufdd0 text", "next", "two"]


def test_a_readable_text_past_the_budget_never_fails_the_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    site = PageRenderer(4000)
    body = site.render(2, 1, "nonce")
    before = judge(DetectItem(site.render(2, 0, "nonce"), HTML))
    readable = readable_text(body, HTML)
    assert readable is not None
    monkeypatch.setattr(crawler.detect._lines, "clock", lambda: float("inf"))  # always late
    late = judge(DetectItem(body, HTML, previous_hash=before.content_hash))
    assert late.error is None and late.changed is True  # the change is recorded all the same
    assert late.content_hash == content_hash(normalize(body, HTML))
    assert late.text is not None and content_hash(late.text) == late.content_hash
    # the text as hashed, by the page's own newlines: fewer, longer lines
    assert late.text.count(b"\n") < readable.count(b"\n")


#: pieces whose elements the parser creates in other ways than from their own start tag, in
#: any case, next to plain ones
_TRICKY = (
    "<td>cell", "<TH>head", "</p>", "</br>", "<tr>", "<table>", "</table>", "<TBODY>",
    "<svg><title>icon</title></svg>", "<li>item", "<DIV>div", "<pre>a\nb</pre>", "<a>x</a>",
    "<a>y</a>", "<button>go</button>", "<select><option>one", "<br>", "<P>para", "words ",
    "<h2>title</h2>", "<dl><dt>t<dd>d", "<hr>", "<form>f</form>", "<isindex>", "<template><p>t",
)  # fmt: skip


@given(st.lists(st.sampled_from(_TRICKY), max_size=40))
def test_walking_only_the_tag_names_a_source_holds_reads_the_same(pieces: list[str]) -> None:
    body = ("<html><body>" + "".join(pieces) + "</body></html>").encode()
    lines = crawler.detect._lines
    large = lines.LARGE_SOURCE
    try:
        lines.LARGE_SOURCE = 0  # every page checked for the names it holds
        checked = readable_text(body, HTML)
        lines.LARGE_SOURCE = 10**12  # none: every name walked
        walked = readable_text(body, HTML)
    finally:
        lines.LARGE_SOURCE = large
    assert checked == walked

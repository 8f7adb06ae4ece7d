"""Canonicalization, scope rules and the per-source budget."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.discovery import (
    PatternError,
    Refusal,
    Scope,
    SourceBudget,
    _urls,
    canonical_url,
    compile_pattern,
    url_template,
)


@pytest.mark.parametrize(
    ("link", "base", "expected"),
    [
        ("HTTP://Example.COM:80/a/../b/?z=1&a=2#top", None, "http://example.com/b/?a=2&z=1"),
        ("https://example.com:443/x", None, "https://example.com/x"),
        ("https://example.com:8443/x", None, "https://example.com:8443/x"),
        ("/item/3;jsessionid=ABC123?x=1", "http://e.com/a/b", "http://e.com/item/3?x=1"),
        (
            "next?PHPSESSID=9f&page=2&utm_source=rss",
            "http://e.com/list/",
            "http://e.com/list/next?page=2",
        ),
        ("http://e.com/a?sid=1", None, "http://e.com/a"),
        ("http://e.com/a b", None, "http://e.com/a%20b"),
        ("../up", "http://e.com/a/b/c", "http://e.com/a/up"),
    ],
)
def test_canonical_form(link: str, base: str | None, expected: str) -> None:
    assert canonical_url(link, base) == expected


@pytest.mark.parametrize(
    "link", ["mailto:a@b.c", "ftp://e.com/x", "javascript:void(0)", "http://", "http://u:p@e.com/"]
)
def test_not_followable_links_are_none(link: str) -> None:
    assert canonical_url(link, "http://e.com/") is None


def test_session_variants_fold_into_one_url() -> None:
    variants = [f"/item/7;jsessionid={s}" for s in ("a1", "b2")] + ["/item/7?sid=zz", "/item/7"]
    assert len({canonical_url(v, "http://e.com/") for v in variants}) == 1


def test_url_template() -> None:
    assert url_template("http://e.com/cal?d=2026-11-23") == "http://e.com/cal?d=N-N-N"


def test_scope_same_host_domains_and_patterns() -> None:
    scope = Scope.same_host("http://News.example.com/", allowed_domains=("cdn.org",))
    assert scope.in_scope("http://news.example.com/a")
    assert not scope.in_scope("http://example.com/a")
    assert scope.in_scope("http://img.cdn.org/a") and scope.in_scope("http://cdn.org/a")
    assert not scope.in_scope("http://evilcdn.org/a")
    narrow = Scope(hosts=frozenset({"e.com"}), include=(r"/news/",), exclude=(r"/news/archive",))
    assert narrow.in_scope("http://e.com/news/1")
    assert not narrow.in_scope("http://e.com/sport/1")
    assert not narrow.in_scope("http://e.com/news/archive/1")
    with pytest.raises(ValueError, match="include pattern '\\(' is not a linear-time"):
        Scope(include=("(",))


def test_scope_patterns_run_on_re2() -> None:
    """A pattern that backtracks exponentially in Python's ``re`` has the same answers on RE2
    (which runs it in linear time); what RE2 cannot run is refused, naming the pattern."""
    scope = Scope(hosts=frozenset({"e.com"}), include=("(a+)+$|news",))
    assert scope.in_scope("http://e.com/news/1")
    assert scope.in_scope("http://e.com/" + "a" * 40)  # ends in a's: "(a+)+$" matches
    assert not scope.in_scope("http://e.com/" + "a" * 40 + "!")
    assert not scope.in_scope("http://e.com/sport")
    assert compile_pattern("(a+)+$|news") is compile_pattern("(a+)+$|news")  # compiled once
    for pattern in (r"(a)\1", "(?=news)", "(?<!x)y", "(?P<n>a)(?P=n)"):
        with pytest.raises(PatternError, match=re.escape(f"'{pattern}' is not a linear-time")):
            compile_pattern(pattern)
        with pytest.raises(ValueError, match="exclude pattern"):
            Scope(exclude=(pattern,))
    with pytest.raises(PatternError, match="at most 1,024"):
        compile_pattern("a" * 1025)
    with pytest.raises(PatternError, match="empty"):
        compile_pattern("")


def test_budget_refuses_each_kind_of_trap_link() -> None:
    budget = SourceBudget(
        Scope(hosts=frozenset({"e.com"}), max_depth=2, max_query_arguments=2, template_budget=3)
    )
    base = "http://e.com/"
    assert budget.admit("/a", base, 1) == "http://e.com/a"
    assert budget.admit("http://other.org/", base, 1) is Refusal.OUT_OF_SCOPE
    assert budget.admit("/deep", base, 3) is Refusal.TOO_DEEP
    assert budget.admit("/shop?a=1&b=2&c=3", base, 1) is Refusal.TOO_MANY_ARGUMENTS
    days = [budget.admit(f"/cal?d=2026-01-{d:02d}", base, 1) for d in range(1, 6)]
    assert days[:3] == [f"http://e.com/cal?d=2026-01-{d:02d}" for d in range(1, 4)]
    assert days[3:] == [Refusal.TEMPLATE_BUDGET] * 2
    assert budget.admit("mailto:x@e.com", base, 1) is Refusal.INVALID
    assert budget.refused[Refusal.TEMPLATE_BUDGET] == 2


def test_page_budget_is_never_exceeded() -> None:
    budget = SourceBudget(Scope(hosts=frozenset({"e.com"}), page_budget=3))
    assert [budget.charge() for _ in range(5)] == [True, True, True, False, False]
    assert budget.pages == 3 and budget.exhausted


_URL_PIECES = st.text(alphabet="abcAB09%/?&=#;:.-_~+ üé", max_size=24)


@settings(max_examples=300, deadline=None)
@given(
    host=st.sampled_from(["h", "Example.COM", "127.0.0.1:8080", "h:80", "bücher.de"]),
    rest=_URL_PIECES,
)
def test_a_canonical_url_is_its_own_canonical_form(host: str, rest: str) -> None:
    # SourceBudget.admit takes a link it admitted before as canonical without parsing it
    # again: that is right only while canonicalizing is idempotent
    url = canonical_url(f"http://{host}/{rest}")
    if url is not None:
        assert canonical_url(url) == url
        assert canonical_url(url, "http://other/base/") == url


def test_a_link_heard_again_is_admitted_as_before_without_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    budget = SourceBudget(Scope.same_host("http://h/", max_depth=3))
    links = ["/b?z=1&a=2#top", "http://h/a/./c", "http://h/b?a=2&z=1", "HTTP://H:80/a/c"]
    first = [budget.admit(link, "http://h/x/", 2) for link in links]
    assert first == ["http://h/b?a=2&z=1", "http://h/a/c", "http://h/b?a=2&z=1", "http://h/a/c"]
    parsed: list[str] = []

    def counted(link: str, base: str | None = None) -> str | None:
        parsed.append(link)
        return canonical_url(link, base)

    monkeypatch.setattr(_urls, "canonical_url", counted)
    again = [budget.admit(url, "http://elsewhere/", 1) for url in first]
    assert parsed == []
    assert again == first  # the same URLs, found shallower
    assert all(budget.depth[url] == 1 for url in first)

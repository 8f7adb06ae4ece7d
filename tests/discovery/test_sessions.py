"""Session ids and one-off values: what canonicalization drops, and what it must keep."""

from __future__ import annotations

import secrets

import pytest

from crawler.discovery import OneOffLearner, canonical_url, looks_like_token


@pytest.mark.parametrize(
    "value",
    [
        "3f9a0c1b2d3e4f5a6b7c8d9e",
        "550e8400-e29b-41d4-a716-446655440000",
        "Zx8Kq2LmN4pR7tVw9yB1",
        "dGhpcyBpcyBhIHNlc3Npb24x==",
    ],
)
def test_session_like_values_look_like_tokens(value: str) -> None:
    assert looks_like_token(value)


@pytest.mark.parametrize(
    "value",
    [
        "12345",
        "12345678901234567890",  # a long article number is still a number
        "how-to-bake-bread-2024",
        "my_article_2024_part_two",
        "2026-11-24",
        "abcdef12",  # too short
        "world-cup-final-report",
        "NEWSROOM2024SPECIAL",
    ],
)
def test_document_names_are_not_tokens(value: str) -> None:
    assert not looks_like_token(value)


def test_fresh_session_segments_and_tokens_fold_into_one_url() -> None:
    variants = {
        canonical_url(f"/s/{secrets.token_hex(12)}/item/7?token={secrets.token_hex(8)}&p=2", base)
        for base in ("http://e.com/", "http://e.com/list")
        for _ in range(20)
    }
    assert variants == {"http://e.com/item/7?p=2"}


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        ("http://e.com/sid/Zx8Kq2LmN4pR7tVw9yB1/news", "http://e.com/news"),
        ("http://e.com/session/3f9a0c1b2d3e4f5a6b7c/a/b", "http://e.com/a/b"),
        ("http://e.com/(S(lit3py55t21z5v55vlm25s55))/page.aspx", "http://e.com/page.aspx"),
        ("http://e.com/a;sessionid=77/b", "http://e.com/a/b"),
        ("http://e.com/a?utm_anything=1&SESSION=x&q=1", "http://e.com/a?q=1"),
        # kept: a marker without a token after it, a token without a marker, numbers, slugs
        ("http://e.com/s/news/1", "http://e.com/s/news/1"),
        ("http://e.com/token/12345", "http://e.com/token/12345"),
        ("http://e.com/article/12345", "http://e.com/article/12345"),
        (
            "http://e.com/commit/3f9a0c1b2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a",
            "http://e.com/commit/3f9a0c1b2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a",
        ),
        ("http://e.com/s/how-to-bake-bread-2024", "http://e.com/s/how-to-bake-bread-2024"),
    ],
)
def test_static_session_rules(link: str, expected: str) -> None:
    assert canonical_url(link) == expected
    assert canonical_url(expected) == expected  # idempotent


def test_different_articles_stay_different() -> None:
    links = [f"http://e.com/article/{n}" for n in (12345, 12346, 99999999999999999)]
    links += [f"http://e.com/commit/{secrets.token_hex(20)}" for _ in range(5)]
    assert len({canonical_url(u) for u in links}) == len(links)


def _fetch(token: str, path_token: str | None = None) -> list[str]:
    """One fetch of a trap page: ten links sharing this fetch's one-off values."""
    middle = f"/x/{path_token}" if path_token else ""
    return [f"http://t.com{middle}/item/{i}?k={token}&page={i}" for i in range(10)]


def test_a_value_fresh_on_every_fetch_and_shared_by_all_links_is_learned_one_off() -> None:
    learner = OneOffLearner(learn_after=3)
    page = "http://t.com/"
    assert learner.observe(page, _fetch("a1", secrets.token_hex(10))) == set()
    assert learner.observe(page, _fetch("b2", secrets.token_hex(10))) == set()
    learned = learner.observe(page, _fetch("c3", secrets.token_hex(10)))
    assert learned == {("q", "k"), ("p", "x")}
    link = _fetch("d4", secrets.token_hex(10))[3]
    assert learner.clean(link) == "http://t.com/x/item/3?page=3"
    assert learner.clean("http://other.com/a?k=1") == "http://other.com/a?k=1"  # its host only


def test_per_link_values_and_stable_values_are_never_learned() -> None:
    learner = OneOffLearner(learn_after=3)
    page = "http://t.com/"
    for _ in range(10):  # page=i differs per link; k is the same on every fetch
        assert learner.observe(page, _fetch("same")) == set()
    commits = [f"http://t.com/commit/{secrets.token_hex(20)}" for _ in range(10)]
    for _ in range(10):  # each link its own token, stable across fetches
        assert learner.observe("http://t.com/log", commits) == set()
    assert learner.rules == {}


def test_a_value_that_repeats_breaks_the_streak() -> None:
    learner = OneOffLearner(learn_after=3)
    page = "http://t.com/"
    for token in ("a", "b", "b", "c", "c", "d", "d"):  # fresh only every other fetch
        assert learner.observe(page, _fetch(token)) == set()


def test_the_learner_stays_bounded() -> None:
    learner = OneOffLearner(learn_after=2)
    for n in range(1_100):
        host = f"h{n}.com"
        # Every tenth host has more one-off names than a host keeps rules for; the others one
        # name each, as the page and host bounds count pages and hosts, not names (the links
        # cost the learner's time: 20 names on every host took 1.7 s of CPU).
        names = 20 if n % 10 == 0 else 1
        for token in ("a", "b"):
            links = [f"http://{host}/i/{i}?q{m}={token}" for i in range(2) for m in range(names)]
            learner.observe(f"http://{host}/", links)
    assert len(learner._pages) <= 1_000
    assert len(learner.rules) <= 1_000
    assert all(len(r) <= 16 for r in learner.rules.values())

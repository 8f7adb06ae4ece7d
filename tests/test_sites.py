"""One site and one host key per URL, agreeing with the fetcher's gates."""

from __future__ import annotations

import pytest
from yarl import URL

from crawler.fetch import FetchConfig, Fetcher, validate_url
from crawler.sites import host_key, site_of, url_host_key

URLS = [
    ("https://Example.COM/a", "example.com", "example.com"),
    ("http://example.com:8080/", "example.com:8080", "example.com"),
    ("http://[::1]:9/", "[::1]:9", "::1"),
    ("http://[2001:db8::1]/x?y", "[2001:db8::1]", "2001:db8::1"),
    ("http://127.0.0.2:80/p#f", "127.0.0.2", "127.0.0.2"),
    ("http://bücher.example/", "xn--bcher-kva.example", "xn--bcher-kva.example"),
    ("http://a.example./q", "a.example.", "a.example."),
]


@pytest.mark.parametrize(("url", "site", "key"), URLS)
def test_site_and_host_key_of_canonical_urls(url: str, site: str, key: str) -> None:
    canonical = validate_url(url)
    assert site_of(canonical) == site
    assert host_key(site) == key == url_host_key(canonical)
    # what the fetcher's gates key each hop by, and what its dispatcher groups by
    assert URL(canonical, encoded=True).raw_host == key
    assert Fetcher(FetchConfig(user_agent="t")).gate_key(canonical) == key


def test_host_key_drops_the_port_only() -> None:
    assert host_key("example.org:8080") == "example.org"
    assert host_key("example.org") == "example.org"
    assert host_key("[::1]") == "::1"
    assert host_key("[::1") == "[::1"  # not an address: left as it is

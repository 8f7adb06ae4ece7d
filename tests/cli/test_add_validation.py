"""``crawler add`` refuses what the crawl could never use, with the crawl's own rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crawler.cli import app
from crawler.cli._validate import MAX_URL_LENGTH


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, sqlite_database_url: str) -> CliRunner:
    monkeypatch.setenv("CRAWLER_DATABASE_URL", sqlite_database_url)
    monkeypatch.delenv("CRAWLER_CONFIG", raising=False)
    monkeypatch.delenv("CRAWLER_ALLOW_PRIVATE_ADDRESSES", raising=False)
    return CliRunner()


def watched(cli: CliRunner) -> set[str]:
    listing = cli.invoke(app, ["list", "--json"])
    assert listing.exit_code == 0, listing.output
    return {u["url"] for u in json.loads(listing.stdout)["urls"]}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--selector", "div >"], "invalid CSS selector"),
        (["--selector", "p::before"], "invalid CSS selector"),
        (["--selector", "   "], "empty CSS selector"),
        (["--ignore", "(unclosed"], "invalid ignore pattern"),
        (["--ignore", r"\d+ views", "--ignore", "[z-a]"], "invalid ignore pattern '[z-a]'"),
    ],
)
def test_rules_the_detector_cannot_use_are_refused(
    cli: CliRunner, flags: list[str], expected: str
) -> None:
    result = cli.invoke(app, ["add", "https://example.org/", *flags])
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.output.split())
    assert watched(cli) == set()


def test_valid_rules_are_accepted(cli: CliRunner) -> None:
    result = cli.invoke(
        app, ["add", "https://example.org/", "--selector", "main p.news", "--ignore", r"\d+"]
    )
    assert result.exit_code == 0, result.output
    assert watched(cli) == {"https://example.org/"}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://1234/", "resolvers read it as the IPv4 address 0.0.4.210"),
        ("http://0x7f.1/", "127.0.0.1"),
        ("http://3232235777/", "192.168.1.1"),
        ("http://999.1.1.1/", "not an IPv4 address"),
        ("http://example.123/", "not an IPv4 address"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata address"),
        ("http://[::ffff:169.254.169.254]/", "cloud metadata address"),
        ("http://168.63.129.16/", "Azure wire server"),
        ("http://10.0.0.1/", "private address"),
        ("http://127.0.0.1:8080/", "loopback address"),
        ("http://[2002:7f00:1::1]/", "loopback address 127.0.0.1"),
        ("http://a..b/", "invalid host"),
        ("ftp://example.org/", "unsupported scheme"),
        ("https://" + "a" * 254 + "/", "DNS allows 253"),
        ("https://example.org/" + "x" * MAX_URL_LENGTH, "longer than the 2,048 accepted"),
        ("https://example.org/" + "é" * 400, "once percent-encoded"),
    ],
)
def test_urls_the_fetcher_rejects_are_refused(cli: CliRunner, url: str, expected: str) -> None:
    result = cli.invoke(app, ["add", url, "--json"])
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["added"] == [] and len(doc["invalid"]) == 1
    assert expected in doc["invalid"][0]["error"], doc
    assert watched(cli) == set()


def test_length_limit_is_exact(cli: CliRunner) -> None:
    base = "https://example.org/"
    longest = base + "x" * (MAX_URL_LENGTH - len(base))
    assert cli.invoke(app, ["add", longest]).exit_code == 0
    assert cli.invoke(app, ["add", longest + "y"]).exit_code == 2
    assert watched(cli) == {longest}


def test_private_addresses_follow_the_setting(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWLER_ALLOW_PRIVATE_ADDRESSES", "true")
    ok = cli.invoke(app, ["add", "http://127.0.0.1:8080/", "http://10.0.0.1/"])
    assert ok.exit_code == 0, ok.output
    # metadata and link-local stay refused whatever the setting
    metadata = cli.invoke(app, ["add", "http://169.254.169.254/"])
    assert metadata.exit_code == 2
    assert watched(cli) == {"http://127.0.0.1:8080/", "http://10.0.0.1/"}


def test_bad_lines_of_a_file_are_reported_with_their_numbers(
    cli: CliRunner, tmp_path: Path
) -> None:
    huge = "https://example.org/" + "a" * 10_000_000  # a 10 MB line
    listing = tmp_path / "urls.txt"
    listing.write_text(
        "# watch list\n"
        "https://good.example/1\n"
        "http://1234/\n"
        "\n"
        "https://good.example/2\n"
        f"{huge}\n"
        "https://good.example/3\n"
        "not a url\n"
    )
    refused = cli.invoke(app, ["add", "--file", str(listing), "--json"])
    assert refused.exit_code == 2, refused.output[:500]
    doc = json.loads(refused.stdout)
    assert doc["added"] == []
    assert [(b["file"], b["line"]) for b in doc["invalid"]] == [
        (str(listing), 3), (str(listing), 6), (str(listing), 8)
    ]  # fmt: skip
    assert len(doc["invalid"][1]["url"]) < 300  # the 10 MB line is reported by its start
    assert watched(cli) == set()

    text = cli.invoke(app, ["add", "--file", str(listing)])
    assert text.exit_code == 2
    lines = text.output.splitlines()
    assert any(f"{listing}:3:" in line for line in lines), text.output[:2000]
    assert "nothing added" in text.output and "--skip-invalid" in text.output
    assert len(text.output) < 10_000  # the huge URL is not echoed back

    partial = cli.invoke(app, ["add", "--file", str(listing), "--skip-invalid", "--json"])
    assert partial.exit_code == 0, partial.output[:500]
    assert len(json.loads(partial.stdout)["invalid"]) == 3
    assert watched(cli) == {f"https://good.example/{i}" for i in (1, 2, 3)}


def test_sitemap_entries_are_located_by_line(cli: CliRunner, tmp_path: Path) -> None:
    sitemap = tmp_path / "sitemap.xml"
    sitemap.write_text(
        '<?xml version="1.0"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        "<url><loc>https://c.example/1?a=1&amp;b=2</loc></url>\n"
        "<url><loc>http://0x7f.1/</loc></url>\n"
        "</urlset>\n"
    )
    result = cli.invoke(app, ["add", "--file", str(sitemap), "--json"])
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert [(b["url"], b["line"]) for b in doc["invalid"]] == [("http://0x7f.1/", 4)]


def test_importance_takes_ascii_digits_only(cli: CliRunner) -> None:
    result = cli.invoke(app, ["add", "https://example.org/a", "--importance", "\uff10.\uff15"])
    assert result.exit_code == 2, result.output
    assert "ASCII digits" in " ".join(result.output.split())
    assert watched(cli) == set()
    assert cli.invoke(app, ["add", "https://example.org/a", "--importance", "0.5"]).exit_code == 0

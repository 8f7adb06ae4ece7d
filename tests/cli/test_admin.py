"""The admin commands (docs/cli.md) against a real database file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crawler.cli import app


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("CRAWLER_DATABASE_URL", f"sqlite:///{tmp_path / 'admin.db'}")
    monkeypatch.delenv("CRAWLER_CONFIG", raising=False)
    return CliRunner()


def test_add_list_show_stats_remove(cli: CliRunner, tmp_path: Path) -> None:
    added = cli.invoke(app, ["add", "https://example.org/a", "HTTPS://Example.org/b?y=2&x=1",
                             "--importance", "0.5", "--json"])  # fmt: skip
    assert added.exit_code == 0, added.output
    doc = json.loads(added.stdout)
    assert len(doc["added"]) == 2 and doc["invalid"] == [] and doc["already_watched"] == []

    again = cli.invoke(app, ["add", "https://example.org/a", "not a url", "ftp://x.org/f",
                             "https://example.org/c", "--json"])  # fmt: skip
    assert again.exit_code == 2, again.output  # invalid input: nothing added
    doc = json.loads(again.stdout)
    assert doc["added"] == [] and doc["already_watched"] == []
    assert [bad["url"] for bad in doc["invalid"]] == ["not a url", "ftp://x.org/f"]

    skipping = cli.invoke(app, ["add", "https://example.org/a", "not a url",
                                "--skip-invalid", "--json"])  # fmt: skip
    assert skipping.exit_code == 0, skipping.output  # the duplicate is reported, not an error
    doc = json.loads(skipping.stdout)
    assert doc["added"] == [] and doc["already_watched"] == ["https://example.org/a"]
    assert [bad["url"] for bad in doc["invalid"]] == ["not a url"]

    listing = json.loads(cli.invoke(app, ["list", "--json"]).stdout)
    urls = {u["url"]: u for u in listing["urls"]}
    assert set(urls) == set(json.loads(added.stdout)["added"])
    assert all(u["importance"] == 0.5 for u in urls.values())

    shown = cli.invoke(app, ["show", "https://example.org/a", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["row"]["url"] == "https://example.org/a"

    stats = json.loads(cli.invoke(app, ["stats", "--json"]).stdout)
    assert stats["urls"] == 2 and stats["polls"] == 0

    removed = cli.invoke(app, ["remove", "https://example.org/a"])
    assert removed.exit_code == 0, removed.output
    assert json.loads(cli.invoke(app, ["stats", "--json"]).stdout)["urls"] == 1


def test_add_from_files(
    cli: CliRunner, tmp_path: Path, sqlite_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a migrated database (the first test here starts from nothing)
    monkeypatch.setenv("CRAWLER_DATABASE_URL", sqlite_database_url)
    plain = tmp_path / "urls.txt"
    plain.write_text("# watch list\nhttps://a.example/\n\nhttps://b.example/x\n")
    sitemap = tmp_path / "sitemap.xml"
    sitemap.write_text(
        '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        "<url><loc>https://c.example/1</loc></url><url><loc>https://c.example/2</loc></url>"
        "</urlset>"
    )
    opml = tmp_path / "feeds.opml"
    opml.write_text(
        '<?xml version="1.0"?><opml version="2.0"><body>'
        '<outline text="d" xmlUrl="https://d.example/feed.xml"/></body></opml>'
    )
    for path, count in ((plain, 2), (sitemap, 2), (opml, 1)):
        result = cli.invoke(app, ["add", "--file", str(path), "--json"])
        assert result.exit_code == 0, result.output
        assert len(json.loads(result.stdout)["added"]) == count
    piped = cli.invoke(app, ["add", "--file", "-", "--json"], input="https://e.example/\n")
    assert len(json.loads(piped.stdout)["added"]) == 1


def test_errors_are_one_clear_line_and_non_zero(cli: CliRunner) -> None:
    only_bad = cli.invoke(app, ["add", "javascript:alert(1)"])
    assert only_bad.exit_code != 0
    missing = cli.invoke(app, ["show", "https://never.example/"])
    assert missing.exit_code != 0 and "not watched" in missing.output
    bad_db = cli.invoke(app, ["stats", "--database-url", "mysql://x"])
    assert bad_db.exit_code != 0 and "database" in bad_db.output.lower()
    no_urls = cli.invoke(app, ["add"])
    assert no_urls.exit_code != 0

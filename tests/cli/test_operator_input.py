"""What a new operator types: URL files with comments, refused addresses, watched URLs added
again with other options, selectors people write, and the messages for each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crawler.cli import app
from crawler.cli._sources import read_url_source
from crawler.detect import validate_rules
from crawler.detect._rules import without_root_steps


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, sqlite_database_url: str) -> CliRunner:
    monkeypatch.setenv("CRAWLER_DATABASE_URL", sqlite_database_url)
    monkeypatch.delenv("CRAWLER_CONFIG", raising=False)
    monkeypatch.delenv("CRAWLER_ALLOW_PRIVATE_ADDRESSES", raising=False)
    return CliRunner()


def _watched(cli: CliRunner) -> dict[str, dict[str, object]]:
    listing = cli.invoke(app, ["list", "--json"])
    assert listing.exit_code == 0, listing.output
    return {u["url"]: u for u in json.loads(listing.stdout)["urls"]}


# ----- URL files: trailing comments and blanks ---------------------------------------------


def test_a_trailing_comment_and_blanks_are_not_part_of_the_url() -> None:
    text = (
        "# my pages\n"
        "http://host.example/one.html\n"
        "   http://host.example/two.html   # the prices\n"
        "\thttp://host.example/three.html\t#tab before the hash\n"
        "http://host.example/page#section   \n"
        "   # an indented comment\n"
    )
    assert read_url_source(text) == [
        ("http://host.example/one.html", 2),
        ("http://host.example/two.html", 3),
        ("http://host.example/three.html", 4),
        ("http://host.example/page#section", 5),  # a fragment has no blank before it
    ]


def test_add_from_a_file_with_comments_watches_the_clean_urls(
    cli: CliRunner, tmp_path: Path
) -> None:
    listing = tmp_path / "urls.txt"
    listing.write_text("https://example.org/two.html   # note\n  https://example.org/a  \n")
    result = cli.invoke(app, ["add", "--file", str(listing)])
    assert result.exit_code == 0, result.output
    assert set(_watched(cli)) == {"https://example.org/two.html", "https://example.org/a"}


# ----- refused addresses say what opens them, or that nothing does -------------------------


def test_a_private_address_names_the_variable_that_allows_it(cli: CliRunner) -> None:
    result = cli.invoke(app, ["add", "http://127.0.0.1:8080/", "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["invalid"][0]["error"]
    assert "CRAWLER_ALLOW_PRIVATE_ADDRESSES=true" in error
    assert "see allow_private_addresses in the settings" not in error


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/", "http://169.254.1.1/"])
def test_an_address_no_setting_opens_gets_no_such_hint(cli: CliRunner, url: str) -> None:
    result = cli.invoke(app, ["add", url, "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["invalid"][0]["error"]
    assert "no setting allows it" in error
    assert "CRAWLER_ALLOW_PRIVATE_ADDRESSES" not in error


def test_a_malformed_url_is_reported_without_a_doubled_adjective(cli: CliRunner) -> None:
    result = cli.invoke(app, ["add", "not a url"])
    assert result.exit_code == 2
    assert "invalid malformed" not in result.output
    assert "refused: malformed URL 'not a url'" in result.output
    skipped = cli.invoke(app, ["add", "not a url", "https://example.org/", "--skip-invalid"])
    assert "skipped: malformed URL" in skipped.output


# ----- add on a watched URL with other options ---------------------------------------------


def test_add_with_other_options_changes_nothing_and_names_crawler_edit(cli: CliRunner) -> None:
    url = "https://example.org/p"
    assert cli.invoke(app, ["add", url, "--selector", "main"]).exit_code == 0
    again = cli.invoke(app, ["add", url, "--selector", "article p", "--importance", "0.5"])
    assert again.exit_code == 1, again.output
    assert "already watched with other options, not changed" in again.output
    assert f"crawler edit {url} --importance 0.5 --selector 'article p'" in again.output
    with_json = cli.invoke(app, ["add", url, "--ignore", r"\d+ views", "--json"])
    assert with_json.exit_code == 1
    (conflict,) = json.loads(with_json.stdout)["not_changed"]
    assert conflict["url"] == url and "--ignore" in conflict["edit"]
    # nothing changed: the selector and importance are the first add's
    show = cli.invoke(app, ["show", url, "--json"])
    doc = json.loads(show.stdout)
    assert doc["selector"] == "main" and doc["row"]["importance"] == 1.0
    assert doc["ignore_patterns"] == []
    # the same options again, or none: nothing to refuse
    assert cli.invoke(app, ["add", url, "--selector", "main"]).exit_code == 0
    assert cli.invoke(app, ["add", url]).exit_code == 0


# ----- selectors people write --------------------------------------------------------------


@pytest.mark.parametrize(
    "selector", ["body div p", "html body div p", "html > body div p", ":root div p, body a b"]
)
def test_a_leading_html_or_body_step_is_free(cli: CliRunner, selector: str) -> None:
    validate_rules(selector)
    result = cli.invoke(app, ["add", "https://example.org/", "--selector", selector])
    assert result.exit_code == 0, result.output


def test_only_leading_root_steps_are_free() -> None:
    assert without_root_steps("body div p") == "div p"
    assert without_root_steps("div body p, html body a") == "div body p,a"
    assert without_root_steps("bodyx div") == "bodyx div"  # not the body element
    assert without_root_steps("body") == "body"  # a selector of body itself stays


def test_a_refused_selector_says_what_to_write_instead(cli: CliRunner) -> None:
    result = cli.invoke(app, ["add", "https://example.org/", "--selector", "article div p"])
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert "'article > div p'" in message and "'div p'" in message
    # and the suggestions are accepted
    validate_rules("article > div p")
    validate_rules("div p")


@pytest.mark.parametrize(
    ("selector", "where"),
    [("div[", "at character 4 ('[', after 'div')"), ("p::before", "at character 2")],
)
def test_a_selector_that_does_not_parse_says_where(
    cli: CliRunner, selector: str, where: str
) -> None:
    result = cli.invoke(app, ["add", "https://example.org/", "--selector", selector])
    assert result.exit_code == 2
    assert where in " ".join(result.output.split())

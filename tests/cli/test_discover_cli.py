"""``crawler sources add/list/remove`` and ``crawler discovered`` on a real database (SQLite
and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from crawler.cli import app
from crawler.cli._rules import parse_since
from crawler.store import Found, SlotDiscovery, SourceSpec, Store

NEWS = "https://example.org/news/"


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("CRAWLER_DATABASE_URL", database_url)
    monkeypatch.delenv("CRAWLER_CONFIG", raising=False)
    return CliRunner()


def test_sources_add_list_remove(cli: CliRunner, database_url: str) -> None:
    added = cli.invoke(app, ["sources", "add", "HTTPS://Example.org/news/", "--scope", "domain",
                             "--allow-domain", "cdn.example.net", "--include", "/news/",
                             "--exclude", r"\?page=", "--topic", "harbor river",
                             "--max-depth", "3", "--budget", "4", "--run-budget", "500",
                             "--watch", "--json"])  # fmt: skip
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["url"] == NEWS and json.loads(added.stdout)["added"]
    cli.invoke(app, ["sources", "add", "https://example.org/shop/"])
    with Store(database_url) as store:
        ds = store.discovery
        ids = {r.url: r.id for r in ds.sources()}
        now = datetime.now(UTC)
        ds.record_slot(
            SlotDiscovery(
                polls={ids[NEWS]: 30, ids["https://example.org/shop/"]: 10},
                found=[Found(NEWS + "a", ids[NEWS], now, 1, 1, now - timedelta(hours=2))],
            )
        )
    listing = cli.invoke(app, ["sources", "list", "--json"])
    assert listing.exit_code == 0, listing.output
    doc = json.loads(listing.stdout)
    assert "404 or 410" in doc["expiry"] and "30 days" in doc["expiry"]
    news = {s["url"]: s for s in doc["sources"]}[NEWS]
    assert news | {"created_at": None} == {
        "url": NEWS, "scope": "domain", "allowed_domains": ["cdn.example.net"],
        "include": ["/news/"], "exclude": [r"\?page="], "topic": "harbor river",
        "max_depth": 3, "budget_per_slot": 4, "budget_per_run": 500, "watch": True,
        "created_at": None, "polls": 30, "found": 1, "share_of_polls": 0.75, "problem": None,
    }  # fmt: skip
    table = cli.invoke(app, ["sources", "list"])
    assert table.exit_code == 0 and "75%" in table.stdout and "expiry" in table.stdout

    found = cli.invoke(app, ["discovered", "--since", "1h", "--json"])
    assert found.exit_code == 0, found.output
    (row,) = json.loads(found.stdout)
    assert row["url"] == NEWS + "a" and row["source"] == NEWS and row["watched"]
    assert json.loads(cli.invoke(app, ["discovered", "--source", "https://example.org/shop/",
                                       "--json"]).stdout) == []  # fmt: skip
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert json.loads(cli.invoke(app, ["discovered", "--since", future, "--json"]).stdout) == []
    text = cli.invoke(app, ["discovered"]).stdout
    assert "age_when_found=2.0_h" in text and "watched=yes" in text

    assert cli.invoke(app, ["sources", "remove", NEWS]).exit_code == 0
    assert cli.invoke(app, ["sources", "remove", NEWS]).exit_code == 1
    remaining = json.loads(cli.invoke(app, ["sources", "list", "--json"]).stdout)["sources"]
    assert [s["url"] for s in remaining] == ["https://example.org/shop/"]


def test_sources_list_starts_shows_which_start_pages_pay(cli: CliRunner, database_url: str) -> None:
    cli.invoke(app, ["sources", "add", NEWS])
    sections = [f"{NEWS}s/{k}" for k in range(3)]
    state = {
        "seeds": sections,
        # watched start pages: the pacer's [found, slots watched] (discounted)
        "pace": {sections[0]: [12.0, 100.0], sections[1]: [0.0, 100.0]},
        # a start page discovery reads itself: the bandit's [found, slots observed, polls]
        "starts": {sections[2]: [3.0, 50.0, 8.0]},
    }
    with Store(database_url) as store:
        ds = store.discovery
        (source,) = ds.sources()
        ds.record_slot(SlotDiscovery(polls={source.id: 5}, states={source.id: json.dumps(state)}))
    listing = cli.invoke(app, ["sources", "list", "--starts", "--json"])
    assert listing.exit_code == 0, listing.output
    (doc,) = json.loads(listing.stdout)["sources"]
    starts = doc["starts"]
    assert [s["url"] for s in starts] == [sections[0], sections[2], sections[1]]  # best first
    assert starts[0]["read_by"] == "scheduler" and starts[0]["interval_slots"] == 3
    assert starts[0]["yield_per_slot"] == pytest.approx(12.2 / 102)
    assert starts[2]["interval_slots"] > 3  # a barren one is read less often
    assert starts[1]["read_by"] == "discovery" and starts[1]["share_of_polls"] == 1.0
    table = cli.invoke(app, ["sources", "list", "--starts"])
    assert (
        table.exit_code == 0
        and "read_at_least_every=3_slots" in table.stdout
        and "read_by=scheduler" in table.stdout
    )
    plain = json.loads(cli.invoke(app, ["sources", "list", "--json"]).stdout)["sources"]
    assert "starts" not in plain[0]


@pytest.mark.parametrize(
    "args",
    [
        ["not a url"],
        ["ftp://example.org/"],
        [NEWS, "--include", "(unclosed"],
        [NEWS, "--exclude", "a{2,1}"],
        [NEWS, "--include", "/shop/"],  # the source outside its own scope
        [NEWS, "--exclude", "news"],
        [NEWS, "--scope", "planet"],
        [NEWS, "--budget", "0"],
        [NEWS, "--max-depth", "-1"],
    ],
)
def test_bad_sources_are_refused_and_nothing_is_written(cli: CliRunner, args: list[str]) -> None:
    result = cli.invoke(app, ["sources", "add", *args])
    assert result.exit_code == 2, result.output
    assert json.loads(cli.invoke(app, ["sources", "list", "--json"]).stdout)["sources"] == []


def test_since_accepts_durations_and_iso_times() -> None:
    now = datetime(2026, 11, 23, 12, tzinfo=UTC)
    assert parse_since("90m", now) == now - timedelta(minutes=90)
    assert parse_since("2d", now) == now - timedelta(days=2)
    assert parse_since("2026-11-23T10:00", now) == datetime(2026, 11, 23, 10, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_since("yesterday", now)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run-budget", str(10**19)],
         f"--run-budget {10**19}: the pages in all must be from 1 to 2,147,483,647"),
        (["--budget", str(10**12)], "--budget 1000000000000: the pages per slot must be from 1"),
        (["--max-depth", str(10**10)], "--max-depth 10000000000: the depth must be from 0 to"),
        (["--allow-domain", "com"], "--allow-domain 'com': a public suffix"),
        (["--allow-domain", "co.uk"], "--allow-domain 'co.uk': a public suffix"),
        (["--allow-domain", "github.io"], "--allow-domain 'github.io': a public suffix"),
        # fullwidth "COM": "com" once IDNA-mapped
        (["--allow-domain", "\uff23\uff2f\uff2d"], "a public suffix"),
        (["--include", r"(a)\1"], r"--include '(a)\1' is not a linear-time (RE2) regular"),
        (["--include", "(?=news)"], "--include '(?=news)' is not a linear-time (RE2)"),
        (["--exclude", "(?<!x)y"], "--exclude '(?<!x)y' is not a linear-time (RE2)"),
        (["--include", "x" * 1025], "at most 1,024"),
    ],
)  # fmt: skip
def test_out_of_range_public_suffix_and_non_re2_options_name_the_option(
    cli: CliRunner, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused at add, exit 2, one line naming the option (COLUMNS=80: a long message is not
    wrapped into several), nothing written: not a traceback, not the database's "integer out
    of range", not an "ignore pattern"."""
    monkeypatch.setenv("COLUMNS", "80")
    result = cli.invoke(app, ["sources", "add", NEWS, *args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line, line
    assert "ignore pattern" not in line and "Traceback" not in result.output
    assert json.loads(cli.invoke(app, ["sources", "list", "--json"]).stdout)["sources"] == []


def test_the_largest_values_and_registered_domains_are_accepted(cli: CliRunner) -> None:
    biggest = str(2**31 - 1)
    added = cli.invoke(app, ["sources", "add", NEWS, "--run-budget", biggest, "--budget",
                             biggest, "--max-depth", biggest, "--allow-domain", "example.co.uk",
                             "--allow-domain", "user.github.io", "--include", "(a+)+$|news",
                             "--json"])  # fmt: skip
    assert added.exit_code == 0, added.output
    (source,) = json.loads(cli.invoke(app, ["sources", "list", "--json"]).stdout)["sources"]
    assert source["budget_per_run"] == source["budget_per_slot"] == source["max_depth"] == 2**31 - 1
    assert source["allowed_domains"] == ["example.co.uk", "user.github.io"]


@pytest.mark.parametrize(
    "args",
    # fullwidth, Arabic-Indic
    [["--budget", "\uff11\uff10"], ["--max-depth", "\uff15"], ["--run-budget", "\u0661\u0660"]],
)
def test_numbers_take_ascii_digits_only(cli: CliRunner, args: list[str]) -> None:
    result = cli.invoke(app, ["sources", "add", NEWS, *args])
    assert result.exit_code == 2, result.output
    assert "ASCII digits" in " ".join(result.output.split()), result.output
    assert json.loads(cli.invoke(app, ["sources", "list", "--json"]).stdout)["sources"] == []


def test_since_takes_ascii_digits_only(cli: CliRunner) -> None:
    now = datetime(2026, 11, 23, 12, tzinfo=UTC)
    for text in ("\uff11\uff10m", "1\uff10m", "\uff12\uff10\uff12\uff16-11-23T10:00"):
        with pytest.raises(ValueError, match="ASCII"):
            parse_since(text, now)
    result = cli.invoke(app, ["discovered", "--since", "\uff11h"])
    assert result.exit_code == 2 and "--since" in result.stderr
    assert cli.invoke(app, ["discovered", "--limit", str(10**19)]).exit_code == 2


def test_a_saved_source_re2_refuses_is_listed_as_skipped(
    cli: CliRunner, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saved before ``add`` checked patterns with RE2: the list says the service skips it."""
    monkeypatch.setenv("COLUMNS", "200")
    with Store(database_url) as store:
        store.discovery.add_source(SourceSpec(NEWS, exclude=("(?=x)",)))
    (doc,) = json.loads(cli.invoke(app, ["sources", "list", "--json"]).stdout)["sources"]
    assert doc["problem"].startswith("exclude pattern '(?=x)' is not a linear-time (RE2)")
    table = cli.invoke(app, ["sources", "list"]).stdout
    assert f"skipped by the service: {NEWS}: exclude pattern '(?=x)'" in table

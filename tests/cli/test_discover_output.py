"""``crawler sources list`` and ``crawler discovered`` as a new operator reads them: the
running service's discovery settings, no database created by looking, and URLs never broken
at 80 columns with stdout and stderr piped (the real console script)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crawler.cli import app
from crawler.service._service import recorded_settings
from crawler.settings import Settings
from crawler.store import (
    Found,
    SlotDiscovery,
    SourceSpec,
    Store,
)
from tests.cli.test_operator_output import crawler

SOURCE = "https://www.example.org/news/world/a-long-section-name-for-the-regional-pages/"
ARTICLE = SOURCE + "2026/11/26/an-article-whose-name-goes-on-well-past-the-width.html"


def _record(database_url: str, **service: object) -> None:
    with Store(database_url) as store:
        store.save_service_settings(recorded_settings(Settings.model_validate(service)))


@pytest.mark.slow  # real processes: about 5 s each on a busy machine
def test_sources_list_and_discovered_never_create_a_database(tmp_path: Path) -> None:
    for command in (["sources", "list"], ["sources", "list", "--starts"], ["discovered"]):
        code, out, err = crawler(tmp_path, *command)
        assert code == 1 and out == "", (command, err)
        assert len(err.splitlines()) == 1, err
        assert "no crawler database: sqlite:///crawler.db does not exist" in err
        assert str(tmp_path / "crawler.db") in err and "crawler add URL" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # real processes: about 5 s each on a busy machine
def test_sources_list_and_discovered_never_break_a_url_at_80_columns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    db = {"CRAWLER_DATABASE_URL": url}
    assert crawler(tmp_path, "sources", "add", SOURCE, env=db)[0] == 0
    with Store(url) as store:
        ds = store.discovery
        (row,) = ds.sources()
        now = datetime.now(UTC)
        ds.record_slot(
            SlotDiscovery(
                polls={row.id: 3}, found=[Found(ARTICLE, row.id, now, 1, 1, now - timedelta(1))]
            )
        )
    for command in (["sources", "list", "--starts"], ["discovered"]):
        code, out, err = crawler(tmp_path, *command, env=db)
        assert code == 0, err
        lines = out.splitlines()
        whole = ARTICLE if command == ["discovered"] else SOURCE
        assert whole in lines, out  # whole, on a line of its own
        assert all(len(line) <= 80 for line in lines if "http" not in line), out
    code, out, _ = crawler(tmp_path, "sources", "list", env=db)
    assert "polls=3" in out and "share=100%" in out
    assert "no service has run on this database" in out


def test_sources_list_shows_the_running_services_share_and_why_it_gets_no_polls(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRAWLER_DISCOVERY_SHARE", raising=False)
    monkeypatch.delenv("CRAWLER_CAPACITY", raising=False)
    with Store(database_url) as store:
        store.discovery.add_source(SourceSpec("https://example.org/news/"))
    runner = CliRunner()
    args = ["sources", "list", "--database-url", database_url]
    before = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert before["discovery_share"] == 0.1 and "no service has run" in before["settings"]
    # no URL watched: the automatic capacity is 1 poll a slot, too small for discovery
    assert "capacity, 1 polls a slot" in before["no_polls_because"]
    _record(database_url, discovery_share=0.3, discovery_expire_days=7, capacity=4.0)
    after = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert after["discovery_share"] == 0.3 and "7 days" in after["expiry"]
    assert "settings of the service started" in after["settings"]
    assert after["no_polls_because"] is None  # 4 polls a slot: discovery gets one
    _record(database_url, capacity=1.5)
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    said = " ".join(text.stdout.split())
    assert "discovery gets no polls: the capacity, 1.5 polls a slot" in said
    assert "CRAWLER_CAPACITY" in said

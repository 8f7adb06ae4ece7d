"""``crawler diff`` and ``crawler changes`` on real databases (SQLite and PostgreSQL)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy import create_engine, inspect
from typer.testing import CliRunner

import crawler.cli.history
from crawler.cli import app
from crawler.cli._rules import parse_since
from crawler.store import Store
from crawler.store.models import url_tags
from tests.detect.test_diff import apply_unified_diff
from tests.store._helpers import add, poll, slot_record

URL0 = "https://example.com/page/0"
URL1 = "https://example.com/page/1"


def history(database_url: str) -> tuple[int, int]:
    """URL0: baseline "a\\nb\\nc", then two changes; URL1 (tagged news): one change without a
    kept before. Returns (URL0's first change id, URL1's change id)."""
    now = datetime.now(UTC)
    with Store(database_url) as store:
        a, b = add(store, 2)
        with store.engine.begin() as conn:
            conn.execute(url_tags.insert(), [{"url_id": b, "tag": "news"}])
        polls = [
            poll(a, "baseline", now - timedelta(days=3), content_hash="h0", snapshot="a\nb\nc"),
            poll(a, "hit", now - timedelta(days=2), content_hash="h1", old_hash="h0",
                 snapshot="a\nB\nc\nd"),
            poll(a, "hit", now - timedelta(minutes=5), content_hash="h2", old_hash="h1",
                 snapshot="B\nc\nd"),
            poll(b, "hit", now - timedelta(minutes=1), content_hash="x1", old_hash="x0",
                 snapshot="news\ntoday"),
        ]  # fmt: skip
        for n, p in enumerate(polls):
            store.commit_slot(slot_record(n + 1, [p]), [p])
        first, _, other = (c.id for c in store.list_changes())
    return first, other


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_diff_prints_a_plain_unified_diff_when_piped(database_url: str) -> None:
    first, _ = history(database_url)
    code, out, _ = run("diff", URL0, "--change", str(first), "--database-url", database_url)
    assert code == 0
    assert "\x1b[" not in out  # no colour codes when not a terminal
    assert out.startswith(f"--- {URL0} (before, h0)\n+++ {URL0} (change {first}, ")
    assert apply_unified_diff("a\nb\nc", out) == "a\nB\nc\nd"
    code, newest, _ = run("diff", URL0, "--database-url", database_url)
    assert code == 0 and apply_unified_diff("a\nB\nc\nd", newest) == "B\nc\nd"
    # a change whose before was not kept: the whole text shown as added, with a note
    code, out, err = run("diff", URL1, "--database-url", database_url)
    assert code == 0 and "was not kept" in err
    assert apply_unified_diff("", out) == "news\ntoday"


def test_diff_refuses_what_does_not_fit(database_url: str) -> None:
    first, _ = history(database_url)
    code, _, err = run("diff", URL1, "--change", str(first), "--database-url", database_url)
    assert code == 1 and f"change {first} is of {URL0}" in err
    code, _, err = run("diff", URL0, "--change", "999", "--database-url", database_url)
    assert code == 1 and "no change 999" in err
    code, _, err = run("diff", "https://example.com/x", "--database-url", database_url)
    assert code == 1 and "no change recorded" in err
    code, _, err = run("diff", "not a url", "--database-url", database_url)
    assert code == 1 and "error:" in err


def test_changes_exports_json_ndjson_and_a_table(database_url: str) -> None:
    first, other = history(database_url)
    code, out, _ = run("changes", "--json", "--database-url", database_url)
    assert code == 0
    docs = json.loads(out)
    assert [d["url"] for d in docs] == [URL0, URL0, URL1]
    assert docs[0]["id"] == first and docs[0]["old_hash"] == "h0" and docs[0]["new_hash"] == "h1"
    assert docs[2]["tags"] == ["news"] and "before" not in docs[0]
    code, out, _ = run("changes", "--since", "1h", "--json", "--database-url", database_url)
    assert [d["new_hash"] for d in json.loads(out)] == ["h2", "x1"]
    code, out, _ = run("changes", "--tag", "news", "--ndjson", "--database-url", database_url)
    assert [json.loads(line)["id"] for line in out.splitlines()] == [other]
    code, out, _ = run(
        "changes", "--url", URL0, "--ndjson", "--text", "--database-url", database_url
    )
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["before"], r["after"]) for r in rows] == [
        ("a\nb\nc", "a\nB\nc\nd"),
        ("a\nB\nc\nd", "B\nc\nd"),
    ]
    assert all(apply_unified_diff(r["before"], r["diff"]) == r["after"] for r in rows)
    code, out, _ = run("changes", "--url", "https://example.com/none", "--json",
                       "--database-url", database_url)  # fmt: skip
    assert code == 0 and json.loads(out) == []
    code, out, err = run("changes", "--database-url", database_url)
    assert code == 0 and "3 changes" in err and "news" in out and "h0" in out


def test_changes_refuses_bad_options(database_url: str) -> None:
    for args, message in [
        (["--json", "--ndjson"], "not both"),
        (["--text"], "--text goes with"),
        (["--since", "yesterday"], "give a duration"),
    ]:
        code, _, err = run("changes", *args, "--database-url", database_url)
        assert code == 2 and message in err


def test_parse_since() -> None:
    now = datetime(2026, 1, 10, tzinfo=UTC)
    assert parse_since("2d", now) == now - timedelta(days=2)
    assert parse_since("90s", now) == now - timedelta(seconds=90)
    assert parse_since("1.5h", now) == now - timedelta(minutes=90)
    assert parse_since("2026-01-01T08:00:00", now) == datetime(2026, 1, 1, 8, tzinfo=UTC)
    assert parse_since("2026-01-01T08:00:00Z", now) == datetime(2026, 1, 1, 8, tzinfo=UTC)
    with pytest.raises(ValueError, match="ISO time"):
        parse_since("soon", now)


def test_reading_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "crawler.db"
    for args in (["changes", "--json"], ["diff", URL0]):
        code, _, err = run(*args, "--database-url", f"sqlite:///{missing}")
        assert code == 1 and "no database at" in err
    assert not missing.parent.exists()


def test_reading_an_empty_database_creates_no_tables(empty_database_url: str) -> None:
    code, _, err = run("changes", "--database-url", empty_database_url)
    if empty_database_url.startswith("sqlite"):
        assert code == 1 and "no database at" in err
        return
    assert code == 1 and "no crawler database" in err
    engine = create_engine(empty_database_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


def test_reading_an_older_schema_asks_for_an_upgrade(empty_database_url: str) -> None:
    with Store(empty_database_url) as store:
        store.upgrade("0006")
    code, _, err = run("changes", "--database-url", empty_database_url)
    assert code == 1 and "crawler db upgrade" in err
    with Store(empty_database_url) as store:
        assert store.revision() == "0006"


def test_diff_is_coloured_on_a_terminal(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    first, _ = history(database_url)
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, color_system="standard", width=200)
    monkeypatch.setattr(crawler.cli.history, "out_console", terminal)
    code, _, _ = run("diff", URL0, "--change", str(first), "--database-url", database_url)
    assert code == 0
    shown = screen.getvalue()
    assert "\x1b[32m+B\x1b[0m" in shown and "\x1b[31m-b\x1b[0m" in shown  # green, red
    assert "\x1b[36m@@" in shown  # hunk headers in cyan

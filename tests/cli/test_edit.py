"""crawler edit, pause, resume, revive and list --failing, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from crawler import schedulers
from crawler.cli import app
from crawler.cli._rules import format_duration, parse_duration
from crawler.store import FailureRow, NewUrl, PollRecord, SlotRecord, Store
from crawler.store.models import url_state, urls

A, B, C = "https://example.org/a", "https://example.org/b", "https://example.org/c"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1d", 86400.0),
        ("2w", 1209600.0),
        ("0.5s", 0.5),
        (" 1D ", 86400.0),
        ("none", 0.0),
        ("default", None),
    ],
)
def test_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    ["", "5x", "m5", "-1m", "0", "0s", "1h 30", "inf", "nan",
     # Unicode digits (fullwidth, Arabic-Indic): Python's \d and float() take them
     "\uff11\uff10s", "\uff11\uff10", "1h\uff13\uff10m", "\u0663s", "\uff15"],
)  # fmt: skip
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_format_duration() -> None:
    assert [format_duration(s) for s in (None, 0, 90, 300, 5400, 86400, 0.5)] == [
        "-", "-", "90s", "5m", "90m", "1d", "0.5s",
    ]  # fmt: skip


def _run(database_url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--database-url", database_url])
    return result.exit_code, result.output


def _learned(store: Store) -> dict[int, bytes]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(url_state.c.url_id, url_state.c.data)).all()
    return {int(i): bytes(d) for i, d in rows}


def test_edit_keeps_the_id_and_the_learned_state(database_url: str) -> None:
    with Store(database_url) as store:
        report = store.add_urls([NewUrl(A), NewUrl(B), NewUrl(C)])
        ids = {u: i for u, i in report.added}
        s = schedulers.create("bayes", capacity=1.0, seed=1)
        s.add(sorted(ids.values()))
        rng = np.random.default_rng(0)
        for _ in range(40):
            polled = s.select()
            s.feedback(polled, rng.random(polled.size) < 0.3)
        store.save_scheduler_state(s.state())
        before = _learned(store)
        version = store.watch_list_version()
    assert set(before) == set(ids.values())

    code, out = _run(
        database_url, "edit", A, "--importance", "0.4", "--min-interval", "5m",
        "--max-interval", "1d", "--selector", "main", "--ignore", r"\d+ views",
        "--tag", "shop", "--tag", "eu",
    )  # fmt: skip
    assert code == 0, out
    with Store(database_url) as store:
        assert _learned(store) == before  # not one byte of what was learned changed
        assert store.watch_list_version() > version  # a running service sees the edit
        with store.engine.connect() as conn:
            row = conn.execute(select(urls).where(urls.c.url == A)).one()
        assert row.id == ids[A] and row.removed_at is None
        assert (row.importance, row.min_interval_s, row.max_interval_s) == (0.4, 300.0, 86400.0)
        assert row.selector == "main" and json.loads(row.ignore_patterns) == [r"\d+ views"]
        assert store.url_tags() == {ids[A]: ["eu", "shop"]}
        restored = schedulers.restore(store.load_scheduler_state("bayes"))  # type: ignore[arg-type]
    assert restored.size == 3

    # by tag; back to the default; untag; clear the selector and the patterns
    code, out = _run(
        database_url, "edit", "--tagged", "shop", "--min-interval", "default",
        "--max-interval", "none", "--untag", "eu", "--selector", "", "--no-ignore",
    )  # fmt: skip
    assert code == 0, out
    with Store(database_url) as store, store.engine.connect() as conn:
        row = conn.execute(select(urls).where(urls.c.url == A)).one()
        assert (row.min_interval_s, row.max_interval_s) == (None, 0.0)
        assert row.selector is None and row.ignore_patterns is None
        assert store.url_tags() == {ids[A]: ["shop"]}


@pytest.mark.parametrize(
    "args",
    [
        ["edit", A],  # nothing to change
        ["edit", A, "--importance", "2"],
        ["edit", A, "--min-interval", "1d", "--max-interval", "1h"],
        ["edit", A, "--min-interval", "soon"],
        ["edit", A, "--selector", "div[["],
        ["edit", A, "--ignore", "(unclosed"],
        ["edit", A, "--tag", "has space"],
        ["edit", "--importance", "0.5"],  # no URLs
        ["pause"],
    ],
)
def test_bad_edits_change_nothing(database_url: str, args: list[str]) -> None:
    with Store(database_url) as store:
        store.add_urls([NewUrl(A)])
        version = store.watch_list_version()
    code, out = _run(database_url, *args)
    assert code == 2, out
    assert "error" in out
    with Store(database_url) as store:
        assert store.watch_list_version() == version


def test_unknown_url_is_an_error(database_url: str) -> None:
    with Store(database_url) as store:
        store.add_urls([NewUrl(A)])
    code, out = _run(database_url, "edit", B, "--importance", "0.5")
    assert code == 1 and "not watched" in out


def test_pause_resume_by_url_and_tag(database_url: str) -> None:
    with Store(database_url) as store:
        ids = dict(store.add_urls([NewUrl(A), NewUrl(B), NewUrl(C)]).added)
    assert _run(database_url, "edit", B, C, "--tag", "news")[0] == 0
    assert _run(database_url, "pause", "--tag", "news")[0] == 0
    assert _run(database_url, "pause", A)[0] == 0
    with Store(database_url) as store:
        assert store.url_rules().ids.tolist() == sorted(ids.values())
        assert store.url_rules().paused.all()
    assert _run(database_url, "resume", "--tag", "news")[0] == 0
    with Store(database_url) as store:
        rules = store.url_rules()
    assert rules.ids.tolist() == [ids[A]] and rules.paused.tolist() == [True]
    _, out = _run(database_url, "list", "--json")
    listed = {u["url"]: u for u in json.loads(out)["urls"]}
    assert listed[A]["paused"] and not listed[B]["paused"]
    assert listed[B]["tags"] == ["news"]


def test_list_failing_and_revive(database_url: str) -> None:
    now = datetime.now(UTC)
    with Store(database_url) as store:
        ids = dict(store.add_urls([NewUrl(A), NewUrl(B), NewUrl(C)]).added)
        slot = SlotRecord(
            1, "bayes", now, 0.1, 2, 0, 0, 0, 2,
            failures=(
                FailureRow(ids[A], 3, 3, True, "permanent", "404 http_4xx", now),
                FailureRow(ids[B], 2, 0, False, "transient", "timeout", now),
            ),
        )  # fmt: skip
        polls = [
            PollRecord(ids[A], "error", now, 404, error_kind="http_4xx"),
            PollRecord(ids[B], "error", now, None, error_kind="timeout"),
        ]
        store.commit_slot(slot, polls)
    code, out = _run(database_url, "list", "--failing", "--json")
    assert code == 0, out
    failing = {f["url"]: f for f in json.loads(out)["failing"]}
    assert set(failing) == {A, B}
    assert failing[A]["retired"] and failing[A]["streak"] == 3
    assert failing[B]["error"] == "timeout" and not failing[B]["retired"]

    code, out = _run(database_url, "revive", A)
    assert code == 0, out
    with Store(database_url) as store:
        assert [row.url_id for _, row in store.url_failures()] == [ids[B]]
        assert store.revived_since(0).tolist() == [ids[A]]
    assert _run(database_url, "revive", "--failing")[0] == 0
    with Store(database_url) as store:
        assert store.url_failures() == []


def test_add_with_tags(database_url: str) -> None:
    code, out = _run(database_url, "add", A, B, "--tag", "shop")
    assert code == 0, out
    code, out = _run(database_url, "add", B, C, "--tag", "eu")  # B already watched: tagged
    assert code == 0, out
    assert _run(database_url, "add", C, "--tag", "bad tag")[0] == 2
    with Store(database_url) as store:
        by_url = {u: i for i, u in store.select_urls([A, B, C])}
        tags = store.url_tags()
    assert tags[by_url[A]] == ["shop"] and tags[by_url[B]] == ["eu", "shop"]
    assert tags[by_url[C]] == ["eu"]


def test_list_shows_whether_the_hosts_cap_binds(database_url: str) -> None:
    from crawler.store import HostCapRow

    other = "https://example.com:8443/x"
    with Store(database_url) as store:
        store.add_urls([NewUrl(A), NewUrl(other)])
        # what the running service writes (crawler/service/_caps.py): one row per host key
        store.save_host_caps([HostCapRow("example.org", 1.8, 1.8, True, "delay", None)])
    code, out = _run(database_url, "list", "--json")
    assert code == 0, out
    by_url = {u["url"]: u for u in json.loads(out)["urls"]}
    assert by_url[A]["host_cap"] == {
        "polls_per_slot": 1.8,
        "planned": 1.8,
        "binding": True,
        "reason": "delay",
    }
    assert by_url[other]["host_cap"] is None  # no cap written for example.com
    code, out = _run(database_url, "list")
    assert code == 0, out
    assert "binds" in out  # the table folds narrow columns: "1.8 binds" may wrap

"""What a new operator reads: output at 80 columns and on a pipe (the real console script,
stdout and stderr not a terminal), read-only commands that create nothing, the service's
own settings in ``list``, ``show`` with the URL's rules, ``--version``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crawler import __version__
from crawler.cli import app
from crawler.settings import Settings
from crawler.store import NewUrl, Store

LONG = "https://www.example.org/news/2026/11/a-rather-long-article-name-that-goes-on-and-on.html"


def crawler(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``crawler ARGS`` as a process at 80 columns, stdout and stderr piped."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    base |= {"COLUMNS": "80", "CRAWLER_DEFAULT_MIN_INTERVAL_S": "0"} | (env or {})
    done = subprocess.run(
        [sys.executable, "-m", "crawler", *args], cwd=tmp_path, env=base,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow  # real processes: about 5 s each on a busy machine
def test_list_never_breaks_a_url_at_80_columns_or_wide(tmp_path: Path) -> None:
    db = {"CRAWLER_DATABASE_URL": f"sqlite:///{tmp_path / 'l.db'}"}
    assert crawler(tmp_path, "add", LONG, "https://example.org/", env=db)[0] == 0
    code, out, _ = crawler(tmp_path, "list", env=db)
    assert code == 0
    lines = out.splitlines()
    assert LONG in lines and "https://example.org/" in lines  # each whole, on its own line
    assert all(len(line) <= 80 for line in lines if not line.startswith("http"))
    assert any("importance=1.00" in line for line in lines)
    code, wide, _ = crawler(tmp_path, "list", env=db | {"COLUMNS": "220"})
    assert code == 0 and "┃ url" in wide  # a table when it fits
    assert any(LONG in line for line in wide.splitlines())


@pytest.mark.slow  # real processes: about 5 s each on a busy machine
def test_an_error_is_one_line_on_a_pipe(tmp_path: Path) -> None:
    code, out, err = crawler(tmp_path, "list")  # no database here: a long message
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and len(err) > 80, err


@pytest.mark.slow  # real processes: about 5 s each on a busy machine
def test_read_only_commands_never_create_a_database(tmp_path: Path) -> None:
    for command in (["list"], ["list", "--failing"], ["stats"], ["show", "https://e.org/"]):
        code, _, err = crawler(tmp_path, *command)
        assert code == 1, (command, err)
        assert "no crawler database: sqlite:///crawler.db does not exist" in err
        assert str(tmp_path / "crawler.db") in err and "crawler add URL" in err
    assert list(tmp_path.iterdir()) == []


def test_read_only_commands_never_create_tables(empty_database_url: str) -> None:
    result = CliRunner().invoke(app, ["list", "--database-url", empty_database_url])
    assert result.exit_code == 1
    if empty_database_url.startswith("sqlite"):  # no file yet: none is made
        assert "does not exist" in result.output
        assert not Path(empty_database_url.removeprefix("sqlite:///")).exists()
        return
    assert "has no crawler tables" in result.output
    with Store(empty_database_url) as store:
        assert store.revision() is None  # nothing was migrated into it


@pytest.mark.slow  # real processes: about 5 s each on a busy machine
def test_run_help_shows_every_flag_and_variable_whole(tmp_path: Path) -> None:
    code, out, _ = crawler(tmp_path, "run", "--help")
    assert code == 0
    words = set(re.findall(r"[-\w]+", out))
    for name in Settings.model_fields:
        assert "--" + name.replace("_", "-") in words, name
        assert f"CRAWLER_{name.upper()}" in words, name
    assert "…" not in out and "╭" not in out  # no cut names, no boxes on a pipe


@pytest.mark.slow  # real processes: about 5 s each on a busy machine
def test_status_prints_its_answer_on_stdout(tmp_path: Path) -> None:
    code, out, err = crawler(tmp_path, "status", "--url", "http://127.0.0.1:9", "--timeout", "1")
    assert code == 1
    assert "unhealthy: no answer from http://127.0.0.1:9" in out and err == ""


@pytest.mark.slow  # real processes: about 5 s each on a busy machine
def test_version(tmp_path: Path) -> None:
    code, out, _ = crawler(tmp_path, "--version")
    assert code == 0 and out == f"crawler {__version__}\n"


def test_list_and_show_use_the_running_services_settings(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's own slot length and defaults are not the service's: ``list`` shows the
    bounds as stored, in seconds, with the default the service runs with."""
    monkeypatch.delenv("CRAWLER_DEFAULT_MIN_INTERVAL_S", raising=False)
    monkeypatch.setenv("CRAWLER_SLOT_SECONDS", "10")
    url, own = "https://example.org/a", "https://example.org/b"
    with Store(database_url) as store:
        store.add_urls([NewUrl(url), NewUrl(own)])
        store.edit_urls([i for i, u in store.select_urls([own]) if u == own], {"min_interval_s": 5})
    runner = CliRunner()
    before = json.loads(
        runner.invoke(app, ["list", "--json", "--database-url", database_url]).stdout
    )
    assert "no service has run" in before["settings"]
    bounds = {u["url"]: u["min_interval_s"] for u in before["urls"]}
    assert bounds == {url: 300.0, own: 5.0}  # the command's default; 5 s kept, not "-"
    # what `crawler run --slot-seconds 1 --default-min-interval-s 60` records at its start
    from crawler.service._service import recorded_settings

    service = Settings.model_validate(
        {"slot_seconds": 1.0, "default_min_interval_s": 60.0, "scheduler": "lakg"}
    )
    with Store(database_url) as store:
        store.save_service_settings(recorded_settings(service))
    after = json.loads(
        runner.invoke(app, ["list", "--json", "--database-url", database_url]).stdout
    )
    assert after["scheduler"] == "lakg" and "settings of the service started" in after["settings"]
    assert {u["url"]: u["min_interval_s"] for u in after["urls"]} == {url: 60.0, own: 5.0}
    text = runner.invoke(app, ["list", "--database-url", database_url]).stdout
    assert "1 s slots" in text and "1m..-" in text and "5s..-" in text
    shown = json.loads(
        runner.invoke(app, ["show", url, "--json", "--database-url", database_url]).stdout
    )
    assert shown["min_interval_s"] == 60.0


def test_show_prints_the_urls_selector_and_ignore_patterns(database_url: str) -> None:
    url = "https://example.org/"
    with Store(database_url) as store:
        store.add_urls([NewUrl(url, 0.5, "main p", (r"\d+ views",))])
    result = CliRunner().invoke(app, ["show", url, "--database-url", database_url])
    assert result.exit_code == 0, result.output
    assert "selector main p" in result.output
    assert r"ignore patterns '\d+ views'" in result.output


@pytest.mark.slow
def test_the_demo_says_what_limit_means_and_fits_80_columns(tmp_path: Path) -> None:
    code, out, err = crawler(tmp_path, "demo", "--urls", "20", "--slots", "5")
    assert code == 0 and out == "", err
    text = " ".join(err.split())
    assert "limit: the changes per slot the best possible polling would catch" in text
    assert "ratio to limit" in err and "done:" in err
    assert all(len(line) <= 80 for line in err.splitlines()), err


def test_edit_compares_a_minimum_interval_with_the_services_slot(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWLER_SLOT_SECONDS", "1")  # the command's own: not the service's
    url = "https://example.org/"
    service = Settings.model_validate({"slot_seconds": 10.0})
    from crawler.service._service import recorded_settings

    with Store(database_url) as store:
        store.add_urls([NewUrl(url)])
        store.save_service_settings(recorded_settings(service))
    args = ["edit", url, "--min-interval", "5s", "--database-url", database_url]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "shorter than the service's 10 s slot" in result.output
    longer = CliRunner().invoke(app, [*args[:3], "20s", *args[4:]])
    assert longer.exit_code == 0 and "note:" not in longer.output

"""Settings: flag > env > file > default, validation with clear messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crawler.settings import (
    DEFAULT_USER_AGENT,
    Settings,
    SettingsError,
    auto_capacity,
    load_settings,
    usable_cpus,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("CRAWLER_"):
            monkeypatch.delenv(key)


def test_defaults() -> None:
    s = load_settings()
    assert s.database_url == "sqlite:///crawler.db"
    assert s.scheduler == "bayes" and s.capacity is None and s.slot_seconds == 10.0
    assert s.metrics_port == 9410 and s.metrics_host == "127.0.0.1"
    assert s.allow_private_addresses is False
    assert s.user_agent == DEFAULT_USER_AGENT and "http" in s.user_agent
    assert s.poll_log_retention_days == 7


def test_precedence_flag_env_file_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "crawler.toml"
    cfg.write_text(
        'slot_seconds = 5.0\nscheduler = "lakg"\nmetrics_port = 1111\n'
        "[crawler]\nscheduler_params = { N = 64 }\n"
    )
    monkeypatch.setenv("CRAWLER_SLOT_SECONDS", "2.5")
    monkeypatch.setenv("CRAWLER_METRICS_PORT", "2222")
    s = load_settings({"slot_seconds": 0.05, "capacity": None}, config_file=cfg)
    assert s.slot_seconds == 0.05  # flag beats env and file
    assert s.metrics_port == 2222  # env beats file
    assert s.scheduler == "lakg"  # file beats default
    assert s.scheduler_params == {"N": 64}
    assert s.capacity is None  # a None flag is "not given"
    assert s.database_url == "sqlite:///crawler.db"  # default


def test_config_file_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('database_url = "postgresql+asyncpg://u@h/db"\n')
    monkeypatch.setenv("CRAWLER_CONFIG", str(cfg))
    monkeypatch.setenv("CRAWLER_SCHEDULER_PARAMS", '{"gamma": 2}')
    monkeypatch.setenv("CRAWLER_ALLOW_PRIVATE_ADDRESSES", "true")
    s = load_settings()
    assert s.database_url == "postgresql+asyncpg://u@h/db"
    assert s.scheduler_params == {"gamma": 2}
    assert s.allow_private_addresses is True


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"slot_seconds": 0}, "slot_seconds"),
        ({"capacity": -1}, "capacity"),
        ({"scheduler": "nope"}, "unknown scheduler"),
        ({"database_url": "mysql://x"}, "unsupported database URL"),
        ({"metrics_port": 70000}, "metrics_port"),
        ({"log_format": "xml"}, "log_format"),
        ({"user_agent": "a\nb"}, "user_agent"),
        ({"colour": "red"}, "unknown setting"),
    ],
)
def test_validation_errors(overrides: dict[str, object], words: str) -> None:
    with pytest.raises(SettingsError, match=words):
        load_settings(overrides)


def test_bad_env_and_file_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLER_SLOT_SECONDS", "soon")
    with pytest.raises(SettingsError, match="CRAWLER_SLOT_SECONDS"):
        load_settings()
    monkeypatch.delenv("CRAWLER_SLOT_SECONDS")
    bad = tmp_path / "bad.toml"
    bad.write_text("slot_seconds = = 3")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings(config_file=bad)
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(config_file=tmp_path / "missing.toml")


def test_auto_capacity() -> None:
    assert auto_capacity(0) == 1.0
    assert auto_capacity(50) == 1.0
    assert auto_capacity(1_000_000) == 10_000.0
    assert load_settings().effective_capacity(500) == 5.0
    assert load_settings({"capacity": 3}).effective_capacity(500) == 3.0


def test_settings_are_frozen() -> None:
    s: Settings = load_settings()
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        s.slot_seconds = 1.0  # type: ignore[misc]


def test_fetch_workers_auto_none_or_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("crawler.settings.usable_cpus", lambda: 6)
    assert load_settings({}).effective_fetch_workers() == 6  # -1 = one per usable CPU
    assert load_settings({"fetch_workers": 0}).effective_fetch_workers() == 0
    assert load_settings({"fetch_workers": 3}).effective_fetch_workers() == 3
    monkeypatch.setattr("crawler.settings.usable_cpus", lambda: 64)
    assert load_settings({}).effective_fetch_workers() == 8  # at most 8 by default
    assert load_settings({"fetch_workers": 16}).effective_fetch_workers() == 16
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)
    with pytest.raises(SettingsError, match="fetch_workers"):
        load_settings({"fetch_workers": -2})


def test_fetch_concurrency_is_split_over_the_crawl_workers() -> None:
    from crawler.service import fetch_config

    s = load_settings({"fetch_concurrency": 101, "per_host_concurrency": 3})
    assert fetch_config(s).total_concurrency == 101  # fetching in the service's own process
    assert fetch_config(s, share=2).total_concurrency == 51  # each of two workers
    assert fetch_config(s, share=200).total_concurrency == 1
    assert fetch_config(s, share=2).per_host_concurrency == 3
    with pytest.raises(SettingsError, match="fetch_concurrency"):
        load_settings({"fetch_concurrency": 0})


@pytest.mark.parametrize(
    ("name", "value"),
    [("CRAWLER_SLOT_SECONDS", "\uff11\uff10"), ("CRAWLER_DISCOVERY_SEED_LINKS", "\u0661\u0660")],
)
def test_numbers_in_settings_take_ascii_digits_only(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """Fullwidth or Arabic-Indic digits are refused (Python's int() and float() take them)."""
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=name):
        load_settings()

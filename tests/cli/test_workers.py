"""``crawler workers`` (docs/cli.md) on a real PostgreSQL schema; SQLite is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from crawler.cli import app
from crawler.store import Store


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("CRAWLER_CONFIG", raising=False)
    monkeypatch.delenv("CRAWLER_DATABASE_URL", raising=False)
    return CliRunner()


@pytest.mark.parametrize("db_backend", ["postgresql"], indirect=True)
def test_workers_shows_heartbeats_leases_coordinator_and_shortfall(
    cli: CliRunner, store: Store, database_url: str
) -> None:
    w1 = store.cluster.register_worker(
        40.0, name="alpha", metrics_url="http://10.0.0.2:9410/metrics"
    )
    w2 = store.cluster.register_worker(40.0, name="beta")
    dead = store.cluster.register_worker(40.0, name="gamma")
    with store.engine.begin() as conn:  # gamma last heard from a minute ago
        conn.execute(
            text(
                "UPDATE cluster_workers SET heartbeat_at = now() - interval '60 seconds' "
                "WHERE worker_id = :w"
            ),
            {"w": dead},
        )
    store.cluster.claim_coordinator(w1)
    store.cluster.assign_leases(
        {"a.example": w1, "b.example": w1, "c.example": w2, "d.example": None},
        w1,
        weights={"a.example": 30.0, "b.example": 25.0, "c.example": 20.0, "d.example": 25.0},
        figures={
            "live_workers": 2,
            "total_weight": 100.0,
            "total_capacity": 80.0,
            "shortfall_workers": 1,
            "shortfall_capacity": 20.0,
            "threshold": 2,
            "states": 8,
        },
    )
    store.cluster.assign_leases({"b.example": w2}, w1)  # b moves: its epoch grows to 2
    store.cluster.assign_leases({"b.example": w1}, w1)  # and back: 3

    result = cli.invoke(
        app, ["workers", "--json", "--leases", "--timeout", "10", "--database-url", database_url]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    by_name = {w["name"]: w for w in doc["workers"]}
    assert set(by_name) == {"alpha", "beta", "gamma"}
    alpha, beta, gamma = by_name["alpha"], by_name["beta"], by_name["gamma"]
    assert alpha["live"] and beta["live"] and not gamma["live"]
    assert gamma["heartbeat_age_s"] >= 59 and alpha["heartbeat_age_s"] < 10
    assert alpha["sites"] == 2 and alpha["weight"] == pytest.approx(55.0)
    assert alpha["load"] == pytest.approx(55.0 / 40.0)
    assert alpha["leases"] == {"a.example": 1, "b.example": 3}
    assert (alpha["epoch_min"], alpha["epoch_max"]) == (1, 3)
    assert beta["sites"] == 1 and beta["leases"] == {"c.example": 1}
    assert gamma["sites"] == 0 and gamma["epoch_min"] is None
    assert alpha["coordinator"] and not beta["coordinator"]
    assert doc["coordinator"]["name"] == "alpha"
    assert (doc["live_workers"], doc["dead_workers"]) == (2, 1)
    assert (doc["sites"], doc["unassigned_sites"]) == (4, 1)
    assert doc["live_capacity"] == 80.0
    assert doc["state"]["threshold"] == 2 and doc["state"]["states"] == 8
    assert doc["shortfall"]["workers"] == 1 and doc["shortfall"]["capacity_each"] == 40.0
    assert "need 1 more worker(s) of capacity 40" in doc["shortfall"]["message"]

    table = cli.invoke(app, ["workers", "--timeout", "10", "--database-url", database_url])
    assert table.exit_code == 0, table.output
    out = table.stdout
    for expected in ("alpha", "beta", "gamma", "dead", "55.0 / 40", "1..3", "coordinator: alpha"):
        assert expected in out, (expected, out)
    assert "the learned weights need 1 more worker(s) of capacity 40" in " ".join(out.split())


@pytest.mark.parametrize("db_backend", ["postgresql"], indirect=True)
def test_workers_on_an_empty_cluster(cli: CliRunner, database_url: str) -> None:
    result = cli.invoke(app, ["workers", "--timeout", "5", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    assert "no cluster workers registered" in result.stderr
    doc = json.loads(cli.invoke(app, ["workers", "--json", "--database-url", database_url]).stdout)
    assert doc["workers"] == [] and doc["shortfall"] is None and doc["coordinator"] is None


def test_workers_on_sqlite_says_clustering_needs_postgresql(cli: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'one.db'}"
    result = cli.invoke(app, ["workers", "--database-url", url])
    assert result.exit_code == 2
    assert "clustering needs PostgreSQL" in " ".join(result.stderr.split())
    assert not (tmp_path / "one.db").exists()  # nothing was created

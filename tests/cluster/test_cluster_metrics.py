"""The cluster's metrics (crawler.metrics): names, and counters from running totals."""

from __future__ import annotations

from prometheus_client import generate_latest

from crawler.metrics import CrawlerMetrics


def _value(m: CrawlerMetrics, name: str) -> float:
    for line in generate_latest(m.registry).decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def test_cluster_gauges_and_counters() -> None:
    m = CrawlerMetrics(process_metrics=False, version="x")
    assert _value(m, "crawler_cluster_is_coordinator") == 0  # a lone service: zeros
    m.set_cluster_worker(12, 37.5, 40.0)
    m.set_coordinator(True)
    m.set_cluster_state(3, 130.0, 120.0, 1, 10.0)
    m.set_cluster_totals(fenced_polls=5, moves=2, overloads=1)
    m.set_cluster_totals(fenced_polls=7, moves=2, overloads=3)
    m.set_cluster_totals(fenced_polls=7, moves=1, overloads=3)  # never goes back
    expected = {
        "crawler_cluster_sites": 12,
        "crawler_cluster_weight_polls_per_slot": 37.5,
        "crawler_cluster_capacity_polls_per_slot": 40,
        "crawler_cluster_is_coordinator": 1,
        "crawler_cluster_live_workers": 3,
        "crawler_cluster_total_weight_polls_per_slot": 130,
        "crawler_cluster_total_capacity_polls_per_slot": 120,
        "crawler_cluster_shortfall_workers": 1,
        "crawler_cluster_shortfall_polls_per_slot": 10,
        "crawler_cluster_fenced_polls_total": 7,
        "crawler_cluster_moves_total": 2,
        "crawler_cluster_overloads_total": 3,
    }
    assert {k: _value(m, k) for k in expected} == expected

"""crawler.metrics (the metric names of docs/metrics.md) and crawler.health (a real
aiohttp server on 127.0.0.1)."""

from __future__ import annotations

import gzip
import math
import time

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from crawler.health import start_http_server
from crawler.metrics import DEFERRED_REASONS, ERROR_KINDS, OUTCOMES, CrawlerMetrics

CONTRACT_NAMES = {
    # docs/metrics.md: exact names (family names as the text parser reports them)
    "crawler_polls",
    "crawler_poll_duration_seconds",
    "crawler_slots",
    "crawler_slot_overrun",
    "crawler_watched_urls",
    "crawler_capacity_polls_per_slot",
    "crawler_knapsack_fill_ratio",
    "crawler_hit_ratio",
}


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return samples(registry)[(name, tuple(sorted(labels.items())))]


def test_contract_names_and_types() -> None:
    m = CrawlerMetrics(scheduler="lakg", slot_seconds=10)
    families = {
        f.name: f.type for f in text_string_to_metric_families(generate_latest(m.registry).decode())
    }
    assert families.keys() >= CONTRACT_NAMES
    assert families["crawler_polls"] == "counter"
    assert families["crawler_poll_duration_seconds"] == "histogram"
    assert families["crawler_slots"] == "counter"
    assert families["crawler_slot_overrun"] == "counter"
    for gauge in (
        "crawler_watched_urls",
        "crawler_capacity_polls_per_slot",
        "crawler_knapsack_fill_ratio",
        "crawler_hit_ratio",
        "crawler_slot_lag_seconds",
        "crawler_last_slot_timestamp_seconds",
        "crawler_slot_length_seconds",
    ):
        assert families[gauge] == "gauge", gauge
    for extra in (
        "crawler_poll_errors",
        "crawler_fetched_bytes",
        "crawler_slot_duration_seconds",
        "crawler_db_commit_duration_seconds",
        "crawler_scheduler_info",
        "crawler_build_info",
        "crawler_host_errors",
    ):
        assert extra in families, extra
    s = samples(m.registry)
    assert s[("crawler_scheduler_info", (("scheduler", "lakg"),))] == 1.0
    assert s[("crawler_slot_length_seconds", ())] == 10.0
    assert any(name == "crawler_build_info" for name, _ in s)


def test_every_label_value_is_preinitialized() -> None:
    m = CrawlerMetrics()
    s = samples(m.registry)
    for outcome in OUTCOMES:
        assert s[("crawler_polls_total", (("outcome", outcome),))] == 0.0
    for kind in ERROR_KINDS:
        assert s[("crawler_poll_errors_total", (("kind", kind),))] == 0.0
    assert math.isnan(s[("crawler_hit_ratio", ())])
    # the stalled-loop alert's clock starts at the service start
    assert abs(s[("crawler_last_slot_timestamp_seconds", ())] - time.time()) < 5


def test_polls_slots_and_windowed_hit_ratio() -> None:
    m = CrawlerMetrics(hit_ratio_window_slots=2)
    # slot 1: 3 hits, 1 miss, 1 not_modified, 1 error -> 3/5
    for outcome in ["hit", "hit", "hit", "miss", "not_modified"]:
        m.observe_poll(outcome, 0.02, bytes_=100)
    m.observe_poll("error", 1.5, error_kind="timeout", host="slow.example")
    counts = m.observe_slot(0.8, lag_s=0.01, overrun=False)
    assert (counts.polls, counts.hits, counts.misses, counts.errors, counts.not_modified) == (
        6,
        3,
        1,
        1,
        1,
    )
    assert counts.bytes == 500
    assert m.current_hit_ratio == pytest.approx(3 / 5)
    # slot 2: 0 hits of 5 -> (3+0)/(5+5)
    for _ in range(5):
        m.observe_poll("miss", 0.01)
    m.observe_slot(12.0, lag_s=0.5, overrun=True)
    assert value(m.registry, "crawler_hit_ratio") == pytest.approx(0.3)
    # slot 3 pushes slot 1 out of the 2-slot window: (0+1)/(5+1)
    m.observe_poll("hit", 0.01)
    m.observe_slot(0.5)
    assert value(m.registry, "crawler_hit_ratio") == pytest.approx(1 / 6)

    r = m.registry
    assert value(r, "crawler_polls_total", outcome="hit") == 4
    assert value(r, "crawler_polls_total", outcome="miss") == 6
    assert value(r, "crawler_polls_total", outcome="error") == 1
    assert value(r, "crawler_polls_total", outcome="not_modified") == 1
    assert value(r, "crawler_poll_errors_total", kind="timeout") == 1
    assert value(r, "crawler_poll_duration_seconds_count") == 12
    assert value(r, "crawler_fetched_bytes_total") == 500
    assert value(r, "crawler_slots_total") == 3
    assert value(r, "crawler_slot_overrun_total") == 1
    assert value(r, "crawler_slot_duration_seconds_count") == 3
    assert value(r, "crawler_slot_lag_seconds") == 0.0  # the last slot was on time
    assert value(r, "crawler_host_errors_total", host="slow.example") == 1


def test_window_without_successful_polls_is_nan() -> None:
    m = CrawlerMetrics(hit_ratio_window_slots=1)
    m.observe_poll("hit", 0.01)
    m.observe_slot(0.1)
    assert m.current_hit_ratio == 1.0
    m.observe_poll("error", 0.01, error_kind="dns")
    m.observe_slot(0.1)
    assert math.isnan(value(m.registry, "crawler_hit_ratio"))


def test_error_kinds_closed_set_and_bad_outcome() -> None:
    m = CrawlerMetrics()
    m.observe_poll("error", 0.1, error_kind="no_such_kind")
    m.observe_poll("error", 0.1)
    m.observe_poll("error", 0.1, error_kind="http_5xx")
    assert value(m.registry, "crawler_poll_errors_total", kind="other") == 2
    assert value(m.registry, "crawler_poll_errors_total", kind="http_5xx") == 1
    kinds = {labels for name, labels in samples(m.registry) if name == "crawler_poll_errors_total"}
    assert len(kinds) == len(ERROR_KINDS)
    with pytest.raises(ValueError, match="unknown poll outcome"):
        m.observe_poll("changed", 0.1)


def test_watch_commit_and_scheduler_switch() -> None:
    m = CrawlerMetrics(scheduler="fpa")
    m.set_watch(1234, 50.0, 0.98)
    m.observe_commit(0.004)
    m.set_scheduler("lakg", realization="stride")
    r = m.registry
    assert value(r, "crawler_watched_urls") == 1234
    assert value(r, "crawler_capacity_polls_per_slot") == 50
    assert value(r, "crawler_knapsack_fill_ratio") == pytest.approx(0.98)
    assert value(r, "crawler_db_commit_duration_seconds_count") == 1
    assert value(r, "crawler_scheduler_info", scheduler="lakg", realization="stride") == 1
    assert ("crawler_scheduler_info", (("scheduler", "fpa"),)) not in samples(r)


def test_host_errors_are_top_k_and_bounded() -> None:
    m = CrawlerMetrics(host_errors_top_k=3, host_errors_max_tracked=10)
    for i in range(50):
        for _ in range(i % 7 + 1):
            m.observe_poll("error", 0.01, error_kind="connect", host=f"h{i}.example")
    hosts = [labels for name, labels in samples(m.registry) if name == "crawler_host_errors_total"]
    assert len(hosts) == 3
    assert m._host_errors is not None and len(m._host_errors.counts) <= 10
    # turned off
    off = CrawlerMetrics(host_errors_top_k=0)
    off.observe_poll("error", 0.01, error_kind="dns", host="x.example")
    assert not any(n.startswith("crawler_host_errors") for n, _ in samples(off.registry))


def test_instances_do_not_collide() -> None:
    a, b = CrawlerMetrics(), CrawlerMetrics()
    a.observe_poll("hit", 0.01)
    assert value(a.registry, "crawler_polls_total", outcome="hit") == 1
    assert value(b.registry, "crawler_polls_total", outcome="hit") == 0
    shared = CollectorRegistry()
    CrawlerMetrics(shared)
    with pytest.raises(ValueError):  # duplicated timeseries: one service per registry
        CrawlerMetrics(shared)


def test_hot_path_is_cheap() -> None:
    m = CrawlerMetrics()
    n = 20_000
    t0 = time.perf_counter()
    for i in range(n):
        m.observe_poll("hit" if i % 3 else "miss", 0.05, bytes_=2048)
        if i % 1000 == 999:
            m.observe_slot(1.0)
    per_poll = (time.perf_counter() - t0) / n
    # >= 1,000 polls/s must cost well under 1% of a core; allow a slow CI machine 10x slack
    assert per_poll < 100e-6, f"{per_poll * 1e6:.1f} µs per observe_poll"


async def test_http_server_metrics_and_healthz() -> None:
    m = CrawlerMetrics(scheduler="lakg")
    m.observe_poll("hit", 0.02, bytes_=10)
    m.observe_slot(0.1)
    state: dict[str, object] = {"health": True}

    def is_healthy() -> bool | tuple[bool, str]:
        h = state["health"]
        if isinstance(h, Exception):
            raise h
        return h  # type: ignore[return-value]

    server = await start_http_server("127.0.0.1", 0, m.registry, is_healthy)
    try:
        assert server.port > 0
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{server.url}/metrics") as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/plain")
                text = await resp.text()
            assert 'crawler_polls_total{outcome="hit"} 1.0' in text
            assert "crawler_hit_ratio 1.0" in text

            # gzip when accepted (checked on the raw bytes, not auto-decompressed)
            async with session.get(
                f"{server.url}/metrics",
                headers={"Accept-Encoding": "gzip"},
                auto_decompress=False,
            ) as resp:
                assert resp.headers.get("Content-Encoding") == "gzip"
                assert b"crawler_slots_total 1.0" in gzip.decompress(await resp.read())

            # OpenMetrics when the scraper asks for it (as Prometheus does)
            async with session.get(
                f"{server.url}/metrics",
                headers={"Accept": "application/openmetrics-text; version=1.0.0"},
            ) as resp:
                assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
                assert (await resp.text()).rstrip().endswith("# EOF")

            async with session.get(f"{server.url}/healthz") as resp:
                assert resp.status == 200
                assert (await resp.text()).strip() == "ok"

            state["health"] = (False, "no slot for 95 s")
            async with session.get(f"{server.url}/healthz") as resp:
                assert resp.status == 503
                assert "no slot for 95 s" in await resp.text()

            state["health"] = False
            async with session.get(f"{server.url}/healthz") as resp:
                assert resp.status == 503

            state["health"] = RuntimeError("boom")
            async with session.get(f"{server.url}/healthz") as resp:
                assert resp.status == 503
                assert "boom" in await resp.text()

            async with session.get(f"{server.url}/nope") as resp:
                assert resp.status == 404
    finally:
        await server.close()
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session, session.get(f"{server.url}/healthz"):
            pass


def test_deferred_polls_by_reason_and_by_host_with_bounded_cardinality() -> None:
    from crawler.workers import DEFERRED_REASONS as WORKER_REASONS

    assert set(DEFERRED_REASONS) == set(WORKER_REASONS)  # one list, two imports
    m = CrawlerMetrics(host_errors_top_k=3, host_errors_max_tracked=6)
    for reason in DEFERRED_REASONS:
        assert samples(m.registry)[("crawler_polls_deferred_total", (("reason", reason),))] == 0
    for n in range(40):  # 40 hosts, a few deferred often
        for _ in range(1 + (n % 4 == 0) * 10):
            m.observe_deferred("politeness" if n % 2 else "timeout", f"h{n}.example")
    m.observe_deferred("backoff")
    with pytest.raises(ValueError, match="unknown deferral reason"):
        m.observe_deferred("bored")
    s = samples(m.registry)
    assert s[("crawler_polls_deferred_total", (("reason", "backoff"),))] == 1
    assert s[("crawler_polls_deferred_total", (("reason", "timeout"),))] == 20 + 10 * 10
    per_host = {k: v for k, v in s.items() if k[0] == "crawler_host_deferred_total"}
    assert len(per_host) == 3 and set(per_host.values()) == {11.0}  # top 3 only
    assert all(dict(labels)["reason"] == "timeout" for _, labels in per_host)
    assert m._host_deferred is not None and len(m._host_deferred.counts) <= 6
    m.observe_truncated()
    assert samples(m.registry)[("crawler_pages_truncated_total", ())] == 1

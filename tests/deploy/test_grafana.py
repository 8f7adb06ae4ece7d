"""deploy/grafana: the provisioned datasource and the dashboard JSON (uids, datasource refs,
panel types a current Grafana renders, schemaVersion, layout, metric names that exist)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import generate_latest

from crawler.metrics import CrawlerMetrics
from tests.deploy._util import load_json, load_yaml

DASHBOARD = "deploy/grafana/dashboards/crawler.json"
# Panel types of Grafana 10/11 core (no deprecated graph/singlestat/table-old).
PANEL_TYPES = {
    "row", "timeseries", "stat", "gauge", "bargauge", "table", "text", "piechart", "heatmap",
    "histogram", "state-timeline", "status-history", "barchart", "logs", "nodeGraph",
}  # fmt: skip
UID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data = load_json(DASHBOARD)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def datasource() -> dict[str, Any]:
    sources = load_yaml("deploy/grafana/provisioning/datasources/prometheus.yml")["datasources"]
    assert len(sources) == 1
    ds: dict[str, Any] = sources[0]
    return ds


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def test_datasource(datasource: dict[str, Any]) -> None:
    assert datasource["type"] == "prometheus"
    assert UID_RE.match(datasource["uid"])
    assert datasource["url"] == "http://prometheus:9090"  # the compose service


def test_dashboard_header(dashboard: dict[str, Any]) -> None:
    assert UID_RE.match(dashboard["uid"])
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and 36 <= dashboard["schemaVersion"] <= 41
    assert "id" not in dashboard or dashboard["id"] is None  # provisioned: Grafana assigns ids


def test_panels(dashboard: dict[str, Any], datasource: dict[str, Any]) -> None:
    ref = {"type": "prometheus", "uid": datasource["uid"]}
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    boxes = []
    for p in all_panels(dashboard):
        assert p["type"] in PANEL_TYPES, f"{p['title']}: panel type {p['type']}"
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        boxes.append((g["x"], g["y"], g["w"], g["h"], p["title"]))
        if p["type"] == "row":
            continue
        assert p["datasource"] == ref, p["title"]
        targets = p["targets"]
        assert targets, p["title"]
        assert len({t["refId"] for t in targets}) == len(targets)
        for t in targets:
            assert t["datasource"] == ref, p["title"]
            assert t["expr"].strip(), p["title"]
    for i, (x, y, w, h, title) in enumerate(boxes):
        for x2, y2, w2, h2, title2 in boxes[i + 1 :]:
            overlap = x < x2 + w2 and x2 < x + w and y < y2 + h2 and y2 < y + h
            assert not overlap, f"panels overlap: {title} / {title2}"


def test_template_variables_use_the_datasource(
    dashboard: dict[str, Any], datasource: dict[str, Any]
) -> None:
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            assert var["datasource"] == {"type": "prometheus", "uid": datasource["uid"]}


def test_required_panels_present(dashboard: dict[str, Any]) -> None:
    exprs = " ".join(t["expr"] for p in all_panels(dashboard) for t in p.get("targets", []))
    for metric in (
        "crawler_hit_ratio",
        "crawler_polls_total",
        "crawler_slot_lag_seconds",
        "crawler_slot_overrun_total",
        "crawler_poll_duration_seconds_bucket",
        "crawler_watched_urls",
        "crawler_knapsack_fill_ratio",
        "crawler_poll_errors_total",
        "crawler_host_errors_total",
    ):
        assert metric in exprs, metric


def test_every_metric_in_the_dashboard_is_exported(dashboard: dict[str, Any]) -> None:
    m = CrawlerMetrics(scheduler="lakg")
    m.observe_poll("error", 0.1, error_kind="dns", host="h.example")  # a host_errors series
    m.observe_delivery_attempt(1, "delivered")  # a delivery attempts series
    exported = {
        line.split("{")[0].split(" ")[0]
        for line in generate_latest(m.registry).decode().splitlines()
        if line and not line.startswith("#")
    }
    exprs = [t["expr"] for p in all_panels(dashboard) for t in p.get("targets", [])]
    exprs += [v.get("definition", "") for v in dashboard["templating"]["list"]]
    used = {name for e in exprs for name in re.findall(r"\bcrawler_[a-z_]+", e)}
    assert used, "no crawler metrics in the dashboard?"
    assert used <= exported, f"not exported by crawler.metrics: {sorted(used - exported)}"

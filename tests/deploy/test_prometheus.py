"""deploy/prometheus with the real Prometheus (Debian package `prometheus`; install it with
.ci/install-tools): promtool checks the config and the rules and fires every alert through
alerts_test.yml; then a real Prometheus scrapes the real crawl service (crawling a local site)
and evaluates every
PromQL expression of the Grafana dashboard through its HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from crawler.service import CrawlService
from crawler.settings import load_settings
from crawler.store import DestinationSpec, NewUrl, Store
from crawler.testsite import ChangingSite, zipf_rates
from tests._ports import free_port
from tests.delivery.conftest import Receiver
from tests.deploy._util import REPO, load_json, load_yaml, require_tool
from tests.service.conftest import UNTHROTTLED_DELIVERY

PROM_DIR = REPO / "deploy/prometheus"
SCRAPE_S = 1
# Grafana's $__rate_interval is max(4 x scrape interval, $__interval + scrape interval).
SUBSTITUTIONS = {
    "$__rate_interval": f"{4 * SCRAPE_S}s",
    "${__rate_interval}": f"{4 * SCRAPE_S}s",
    "$__interval": f"{SCRAPE_S}s",
    "${__interval}": f"{SCRAPE_S}s",
    "$__range": "1m",
    "${__range}": "1m",
}


#: promtool's Go runtime on one thread, collecting garbage half as often: the same checks for
#: 15-20% less CPU (its rule unit tests: 2.3 s -> 1.9 s, mean of 8 interleaved runs on this
#: 2-core machine, 2026-11-28), which other tests running alongside need more than promtool
#: needs its parallel garbage collector
PROMTOOL_ENV = {"GOMAXPROCS": "1", "GOGC": "200"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = require_tool("promtool")
    env = {**os.environ, **PROMTOOL_ENV}
    return subprocess.run(
        [exe, *args],
        cwd=PROM_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_promtool_check_config() -> None:
    proc = promtool("check", "config", "prometheus.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_check_rules() -> None:
    proc = promtool("check", "rules", "alerts.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_rule_unit_tests_fire_every_alert() -> None:
    proc = promtool("test", "rules", "alerts_test.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    alerts = {r["alert"] for g in load_yaml("deploy/prometheus/alerts.yml")["groups"]
              for r in g["rules"] if "alert" in r}  # fmt: skip
    fired = {
        case["alertname"]
        for test in load_yaml("deploy/prometheus/alerts_test.yml")["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert alerts >= {
        "CrawlerTargetDown",
        "CrawlerLoopStalled",
        "CrawlerErrorRatioHigh",
        "CrawlerSlotsOverrunning",
        "CrawlerHitRatioCollapsed",
    }
    assert fired == alerts, f"alerts never fired in alerts_test.yml: {sorted(alerts - fired)}"


# ---------------------------------------------------------------- live Prometheus


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every dashboard target, template variables substituted."""
    dash = load_json("deploy/grafana/dashboards/crawler.json")
    variables = {v["name"]: v.get("allValue") or ".*" for v in dash["templating"]["list"]}
    out = []
    panels = [p for top in dash["panels"] for p in [top, *top.get("panels", [])]]
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for key, value in SUBSTITUTIONS.items():
                expr = expr.replace(key, value)
            for name, value in variables.items():
                expr = re.sub(r"\$\{" + name + r"(:\w+)?\}|\$" + name + r"\b", value, expr)
            assert "$" not in expr, f"unsubstituted variable in {panel['title']}: {expr}"
            out.append((panel["title"], expr))
    return out


@contextlib.asynccontextmanager
async def running_service(tmp_path: Path) -> AsyncIterator[int]:
    """The REAL crawl service (in this process) watching a local changing site that
    answers 304s, plus one unreachable URL so the error panels have data, and a webhook
    receiver as a destination so the delivery panels have data; yields the metrics port."""
    site = ChangingSite(zipf_rates(30, 0.6, 1.0), tick_seconds=0.1, page_size=3_000, etags=True)
    await site.start()
    receiver = Receiver()
    await receiver.start()
    port = free_port()
    settings = load_settings(
        {
            "database_url": f"sqlite:///{tmp_path / 'crawler.db'}",
            "metrics_port": port,
            "metrics_host": "127.0.0.1",
            "slot_seconds": 0.1,
            "capacity": 3.0,
            "allow_private_addresses": True,
            "per_host_min_delay_s": 0.0,
            "per_host_concurrency": 8,
            "fetch_retries": 0,
            "normalize_workers": 1,
            **UNTHROTTLED_DELIVERY,  # its panels have data on a machine other jobs keep busy
        }
    )
    with Store(settings.database_url) as store:
        store.upgrade()
        store.add_urls([NewUrl(u) for u in [*site.urls(), "http://127.0.0.1:9/down"]])
        store.outbox.add_destination(DestinationSpec(receiver.url, receiver.secret))
    stop = asyncio.Event()
    try:
        async with CrawlService(settings) as service:
            task = asyncio.create_task(service.run(stop))
            try:
                yield port
            finally:
                stop.set()
                await task
    finally:
        await site.stop()
        await receiver.stop()


@contextlib.asynccontextmanager
async def running_prometheus(tmp_path: Path, exporter_port: int) -> AsyncIterator[str]:
    """The project's prometheus.yml and alerts.yml, only the targets and intervals changed."""
    exe = require_tool("prometheus")
    config: dict[str, Any] = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    port = free_port()
    config["global"]["scrape_interval"] = f"{SCRAPE_S}s"
    config["global"]["scrape_timeout"] = f"{SCRAPE_S}s"
    config["global"]["evaluation_interval"] = f"{SCRAPE_S}s"
    for job in config["scrape_configs"]:
        if job["job_name"] == "crawler":
            job.pop("dns_sd_configs", None)  # compose discovers replicas by DNS; here: one
            job["static_configs"] = [{"targets": [f"127.0.0.1:{exporter_port}"]}]
        elif job["job_name"] == "prometheus":
            job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    for rule_file in config["rule_files"]:
        shutil.copy(PROM_DIR / rule_file, tmp_path / rule_file)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [exe, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(200):
                if proc.poll() is not None:
                    break
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{base}/-/ready") as resp:
                        if resp.status == 200:
                            break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("Prometheus did not become ready in 20 s")
        if proc.poll() is not None:
            pytest.fail(f"Prometheus exited: {(tmp_path / 'prometheus.log').read_text()}")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def query(session: aiohttp.ClientSession, base: str, expr: str) -> list[dict[str, Any]]:
    async with session.post(f"{base}/api/v1/query", data={"query": expr}) as resp:
        body = await resp.json()
    assert body.get("status") == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.mark.slow
async def test_real_prometheus_evaluates_every_dashboard_query(tmp_path: Path) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 10
    async with (
        running_service(tmp_path) as exporter_port,
        running_prometheus(tmp_path, exporter_port) as base,
        aiohttp.ClientSession() as s,
    ):
        # enough scrapes for every rate() window: wait until the widest one has data
        deadline = asyncio.get_running_loop().time() + 30
        probe = f"rate(crawler_slots_total[{SUBSTITUTIONS['$__rate_interval']}])"
        while True:
            ready = await query(s, base, probe)
            scraped = await query(s, base, "count_over_time(up{job='crawler'}[1m])")
            if ready and scraped and float(scraped[0]["value"][1]) >= 5:
                break
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail("Prometheus never scraped the exporter 5 times in 30 s")
            await asyncio.sleep(0.5)

        up = await query(s, base, 'up{job="crawler"}')
        assert up and up[0]["value"][1] == "1"

        failures = []
        for title, expr in queries:
            result = await query(s, base, expr)
            values = [float(r["value"][1]) for r in result]
            if not values:
                failures.append(f"{title}: no data for {expr}")
            elif all(math.isnan(v) for v in values):
                failures.append(f"{title}: only NaN for {expr}")
        assert not failures, "\n".join(failures)

        # the dashboard's $instance variable query
        async with s.get(
            f"{base}/api/v1/label/instance/values", params={"match[]": "crawler_slots_total"}
        ) as resp:
            assert (await resp.json())["data"] == [f"127.0.0.1:{exporter_port}"]

        # the alert rules were loaded and evaluate without errors on real series
        rules: list[dict[str, Any]] = []
        for _ in range(20):
            async with s.get(f"{base}/api/v1/rules") as resp:
                groups = (await resp.json())["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if rules and not any(r.get("lastEvaluation", "0001").startswith("0001") for r in rules):
                break
            await asyncio.sleep(0.5)
        assert {r["name"] for r in rules} >= {"CrawlerLoopStalled", "CrawlerTargetDown"}
        bad = [(r["name"], r.get("lastError")) for r in rules if r.get("health") == "err"]
        assert not bad, bad
        firing = [r["name"] for r in rules if r.get("state") == "firing"]
        assert "CrawlerTargetDown" not in firing and "CrawlerLoopStalled" not in firing

"""``crawler status`` against a real health/metrics server, and against ``crawler run``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crawler.cli import app
from crawler.cli.status import service_url
from crawler.health import AsyncServer, start_http_server
from crawler.metrics import CrawlerMetrics
from tests._ports import free_port


class Server:
    """The service's own health server on an event loop in a thread; ``healthy`` decides
    what /healthz answers."""

    def __init__(self) -> None:
        self.healthy = True
        self.metrics = CrawlerMetrics(scheduler="lakg", slot_seconds=2.0, version="9.9.9")
        self.metrics.set_scheduler("lakg")
        self.metrics.watched_urls.set(42)
        self.metrics.slots_total.inc(7)
        self.metrics.last_slot_timestamp_seconds.set(time.time() - 3)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: AsyncServer = asyncio.run_coroutine_threadsafe(
            start_http_server("127.0.0.1", 0, self.metrics.registry, self.check), self.loop
        ).result(10)

    def check(self) -> tuple[bool, str]:
        return (True, "ok") if self.healthy else (False, "no slot finished for 99 s")

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.close()


def test_healthy_service(server: Server) -> None:
    result = CliRunner().invoke(app, ["status", "--url", server.server.url, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["healthy"] is True and doc["status"] == 200 and doc["reason"] == "ok"
    summary = doc["metrics"]
    assert summary["scheduler"] == "lakg" and summary["version"] == "9.9.9"
    assert summary["watched_urls"] == 42 and summary["slots"] == 7
    assert 2 <= summary["last_slot_age_s"] < 60
    text = CliRunner().invoke(app, ["status", "--url", server.server.url])
    assert text.exit_code == 0 and "healthy" in text.output and "42 URLs" in text.output


def test_unhealthy_service_exits_1_with_its_reason(server: Server) -> None:
    server.healthy = False
    result = CliRunner().invoke(app, ["status", "--url", server.server.url, "--no-metrics"])
    assert result.exit_code == 1
    assert "unhealthy" in result.output and "no slot finished for 99 s" in result.output
    doc = json.loads(
        CliRunner().invoke(app, ["status", "--url", server.server.url, "--json"]).stdout
    )
    assert doc["healthy"] is False and doc["status"] == 503


def test_nothing_listening_exits_1_with_a_clear_message() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["status", "--url", url, "--timeout", "2"])
    assert result.exit_code == 1
    assert "no answer from" in result.output and url in result.output


def test_default_address_comes_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert service_url("0.0.0.0", 9410) == "http://127.0.0.1:9410"
    assert service_url("::", 9410) == "http://[::1]:9410"
    assert service_url("10.1.2.3", 80) == "http://10.1.2.3:80"
    port = free_port()
    monkeypatch.setenv("CRAWLER_METRICS_PORT", str(port))
    monkeypatch.delenv("CRAWLER_CONFIG", raising=False)
    result = CliRunner().invoke(app, ["status", "--json", "--timeout", "1"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["url"] == f"http://127.0.0.1:{port}"
    monkeypatch.setenv("CRAWLER_METRICS_PORT", "0")
    assert "pass --url" in CliRunner().invoke(app, ["status"]).output


@pytest.mark.slow
def test_status_of_a_running_crawler(tmp_path: Path) -> None:
    """The real thing: ``crawler run`` as a process, ``crawler status`` as another."""
    port = free_port()
    env = dict(os.environ)
    env.pop("CRAWLER_CONFIG", None)
    env.update(
        {
            "CRAWLER_DATABASE_URL": f"sqlite:///{tmp_path / 'status.db'}",
            "CRAWLER_SLOT_SECONDS": "0.2",
            "CRAWLER_CAPACITY": "2",
            "CRAWLER_METRICS_PORT": str(port),
            "CRAWLER_NORMALIZE_WORKERS": "1",
            "CRAWLER_FETCH_WORKERS": "0",
        }
    )
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "crawler", "run"], env=env, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while True:
            done = subprocess.run(
                [sys.executable, "-m", "crawler", "status", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            doc = json.loads(done.stdout)
            if done.returncode == 0 and doc["metrics"].get("slots", 0) >= 2:
                break
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, (done.stdout, log.read_text())
            time.sleep(0.3)
        assert doc["healthy"] and doc["metrics"]["scheduler"] == "bayes"
    finally:
        proc.terminate()
        proc.wait(30)
    after = subprocess.run(
        [sys.executable, "-m", "crawler", "status", "--timeout", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert after.returncode == 1 and "no answer from" in after.stdout

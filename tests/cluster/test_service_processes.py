"""Cluster mode in real `crawler run` processes: refusals and a clean leave."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawler.store import Store


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


def _env(database_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CRAWLER_DATABASE_URL": database_url,
            "CRAWLER_SLOT_SECONDS": "0.2",
            "CRAWLER_CAPACITY": "2",
            "CRAWLER_METRICS_PORT": "0",
            "CRAWLER_NORMALIZE_WORKERS": "1",
            "CRAWLER_FETCH_WORKERS": "0",
            "CRAWLER_HEARTBEAT_S": "0.3",
            **extra,
        }
    )
    env.pop("CRAWLER_CONFIG", None)
    return env


def _crawler(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawler", "run", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cluster_mode_on_sqlite_is_refused_clearly(tmp_path: Path) -> None:
    done = _crawler("--cluster", env=_env(f"sqlite:///{tmp_path / 'c.db'}"))
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "cluster mode needs PostgreSQL" in message


def _registered(database_url: str, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    with Store(database_url) as probe:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            if name in {w.name for w in probe.cluster.cluster_workers()}:
                return
            time.sleep(0.1)
    pytest.fail(f"{name} never registered: {log.read_text()}")


@pytest.mark.slow
def test_cluster_workers_and_a_single_service_refuse_each_other(
    database_url: str, tmp_path: Path
) -> None:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name in ("p1", "p2"):  # two cluster workers share the database
            log = tmp_path / f"{name}.log"
            with log.open("wb") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "crawler", "run", "--cluster"],
                        env=_env(database_url, CRAWLER_WORKER_NAME=name),
                        stdout=out,
                        stderr=out,
                    )
                )
            _registered(database_url, name, procs[-1], log)
        single = _crawler(env=_env(database_url))
        assert single.returncode == 3, single.stderr
        assert "another crawler service already runs" in " ".join(single.stderr.split())
        for proc in procs:  # a clean stop deregisters
            proc.send_signal(signal.SIGTERM)
        for proc, name in zip(procs, ("p1", "p2"), strict=True):
            assert proc.wait(30) == 0, (tmp_path / f"{name}.log").read_text()
        with Store(database_url) as probe:
            assert probe.cluster.cluster_workers() == []
            state = probe.cluster.cluster_state()
            assert state is not None and state.coordinator is not None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

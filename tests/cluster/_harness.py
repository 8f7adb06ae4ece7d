"""Helpers of the cluster acceptance test and benchmark: real `crawler run` processes, the
site's own request log, and what the log says.

Each worker is ``python -m crawler run`` in its own process (settings by environment
variables), with its own metrics port and its own User-Agent (``cluster-test/<name>``), so
the logged site (crawler.testsite.LoggedSite) records which worker asked for which page.
The analysis reads only the site's log: the crawler's tables are not the witness.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Engine, make_url, text

from crawler.store import NewUrl, Store
from tests._ports import free_port

ROOT = Path(__file__).resolve().parents[2]
UA_PREFIX = "cluster-test/"


#: the fast membership of the cluster tests: heartbeats every 0.3 s, dead after 2 s
FAST_CLUSTER = {
    "CRAWLER_HEARTBEAT_S": "0.3",
    "CRAWLER_WORKER_TIMEOUT_S": "2.0",
    "CRAWLER_FETCH_TIMEOUT_S": "2",
}


@contextlib.contextmanager
def schema(pg: Any) -> Iterator[str]:
    """A new PostgreSQL database (``pg``: the ``_postgres`` fixture) at the latest
    revision; its URL. Dropped afterwards."""
    name = pg.create()
    url = pg.url_of(name)
    try:
        with Store(url) as st:
            st.upgrade()
        yield url
    finally:
        pg.drop(name)


def site_urls(port: int, pages: int, hosts: int) -> list[str]:
    """The URLs of a logged site's pages (page k on host 127.0.0.((k - 1) % hosts + 1))."""
    return [f"http://127.0.0.{(k - 1) % hosts + 1}:{port}/page/{k}" for k in range(1, pages + 1)]


def watch(url: str, urls: list[str]) -> dict[str, int]:
    """Add ``urls`` to the watch list of database ``url``; URL -> id."""
    with Store(url) as st:
        st.add_urls([NewUrl(u) for u in urls])
        return dict((u, i) for i, u in st.select_urls(urls))


def via(url: str, port: int) -> str:
    """Database ``url`` reached through 127.0.0.1:``port`` (a proxy)."""
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


def owners(engine: Engine) -> dict[str, str]:
    """site (host:port) -> the name of the worker that leases it."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT l.site, w.name FROM cluster_leases l "
                "JOIN cluster_workers w ON w.worker_id = l.worker_id"
            )
        ).all()
    return {str(site): str(name) for site, name in rows}


def lease_epochs(engine: Engine) -> dict[str, tuple[str | None, int]]:
    """site -> (its owner's name or None, its epoch)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT l.site, w.name, l.epoch FROM cluster_leases l "
                "LEFT JOIN cluster_workers w ON w.worker_id = l.worker_id"
            )
        ).all()
    return {str(s): (None if n is None else str(n), int(e)) for s, n, e in rows}


def host_pages(site: str, pages: int, hosts: int) -> list[int]:
    """The pages of a logged site served by ``site`` (host:port)."""
    h = int(site.split(":", 1)[0].rsplit(".", 1)[1])
    return list(range(h, pages + 1, hosts))


def worker_env(
    database_url: str,
    name: str,
    *,
    capacity: float,
    slot_seconds: float,
    cluster: bool = True,
    metrics_port: int | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one ``crawler run`` (every setting by CRAWLER_* variables)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(
        {
            "CRAWLER_DATABASE_URL": database_url,
            "CRAWLER_CAPACITY": str(capacity),
            "CRAWLER_SLOT_SECONDS": str(slot_seconds),
            "CRAWLER_METRICS_PORT": str(free_port() if metrics_port is None else metrics_port),
            "CRAWLER_ALLOW_PRIVATE_ADDRESSES": "true",
            "CRAWLER_PER_HOST_MIN_DELAY_S": "0",
            "CRAWLER_PER_HOST_CONCURRENCY": "4",
            "CRAWLER_FETCH_WORKERS": "0",
            "CRAWLER_NORMALIZE_WORKERS": "1",
            "CRAWLER_LOG_LEVEL": "WARNING",
            "CRAWLER_DEFAULT_MIN_INTERVAL_S": "0",  # as measured: no polite bound
            "CRAWLER_USER_AGENT": UA_PREFIX + name,
            "CRAWLER_SEED": str(abs(hash(name)) % 1000),
        }
    )
    if cluster:
        env.update({"CRAWLER_CLUSTER": "true", "CRAWLER_WORKER_NAME": name})
    env.update(extra or {})
    return env


@dataclass
class Worker:
    """One ``crawler run`` process."""

    name: str
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None
    #: the code tree it runs (None: this one; a benchmark compares against another tree)
    cwd: Path | None = None

    @property
    def metrics_port(self) -> int:
        return int(self.env["CRAWLER_METRICS_PORT"])

    @property
    def user_agent(self) -> str:
        return self.env["CRAWLER_USER_AGENT"]

    def start(self) -> Worker:
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "crawler", "run"],
            env=self.env,
            cwd=self.cwd or ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (SIGKILL after ``timeout``); the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def output(self, tail: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-tail:].decode(errors="replace")
        except OSError:
            return ""


@dataclass
class SiteLog:
    """The logged site's request log, read incrementally over HTTP (``/_log``)."""

    port: int
    t: list[float] = field(default_factory=list)
    page: list[int] = field(default_factory=list)
    version: list[int] = field(default_factory=list)
    client: list[str] = field(default_factory=list)
    tick_seconds: float = 1.0

    def refresh(self) -> SiteLog:
        url = f"http://127.0.0.1:{self.port}/_log?since={len(self.t)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            data = json.loads(response.read())
        names = data["clients"]
        self.t += data["t"]
        self.page += data["page"]
        self.version += data["version"]
        self.client += [names[c] for c in data["client"]]
        self.tick_seconds = float(data["tick_seconds"])
        return self

    def arrays(self) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
        return (
            np.asarray(self.t, dtype=np.float64),
            np.asarray(self.page, dtype=np.int64),
            np.asarray(self.version, dtype=np.int64),
        )

    def select(
        self, clients: Iterable[str], since: float = 0.0, until: float = float("inf")
    ) -> NDArray[np.bool_]:
        """A mask of the entries of these clients (user agents) in [since, until)."""
        wanted = set(clients)
        t = np.asarray(self.t, dtype=np.float64)
        who = np.fromiter((c in wanted for c in self.client), dtype=bool, count=len(self.client))
        return who & (t >= since) & (t < until)

    def pages_polled(self, clients: Iterable[str]) -> set[int]:
        mask = self.select(clients)
        return {p for p, m in zip(self.page, mask, strict=True) if m}

    def true_hits(self, clients: Iterable[str], since: float, until: float) -> int:
        """Polls by these clients in [since, until) that got a version different from the
        last one the same group was served (the group's first poll of a page is a baseline)."""
        clients = set(clients)
        last: dict[int, int] = {}
        hits = 0
        for t, k, v, c in zip(self.t, self.page, self.version, self.client, strict=True):
            if c not in clients:
                continue
            previous = last.get(k)
            if previous is not None and previous != v and since <= t < until:
                hits += 1
            last[k] = v
        return hits

    def cross_worker_repeats(
        self, clients: Iterable[str], window: float, since: float = 0.0, until: float = np.inf
    ) -> list[tuple[int, float, str, str, float]]:
        """(page, gap, first worker, second worker, time of the second) for every two
        consecutive polls of one page by two different workers of the group less than
        ``window`` seconds apart."""
        clients = set(clients)
        previous: dict[int, tuple[float, str]] = {}
        found = []
        for t, k, c in zip(self.t, self.page, self.client, strict=True):
            if c not in clients:
                continue
            before = previous.get(k)
            if (
                before is not None
                and before[1] != c
                and t - before[0] < window
                and since <= before[0]
                and t < until
            ):
                found.append((k, t - before[0], before[1], c, t))
            previous[k] = (t, c)
        return found

    def first_poll_after(
        self, pages: Iterable[int], clients: Iterable[str], since: float
    ) -> dict[int, float]:
        """Per page: the time of its first poll by one of ``clients`` at or after ``since``."""
        wanted = set(pages)
        clients = set(clients)
        first: dict[int, float] = {}
        for t, k, c in zip(self.t, self.page, self.client, strict=True):
            if t >= since and k in wanted and c in clients and k not in first:
                first[k] = t
        return first


def wait_until(predicate: object, timeout: float, step: float = 0.5, what: str = "") -> None:
    """Poll ``predicate()`` until true; AssertionError naming ``what`` after ``timeout``."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@dataclass
class Workers:
    """The ``crawler run --cluster`` processes of one test: started by name (logs in
    ``tmp``), checked alive, made to leave or killed; ``stop_all`` at the end."""

    database_url: str
    tmp: Path
    capacity: float
    slot_seconds: float
    extra: Mapping[str, str] = field(default_factory=lambda: dict(FAST_CLUSTER))
    running: dict[str, Worker] = field(default_factory=dict)
    #: workers that left or were killed on purpose (their exit is expected)
    gone: set[str] = field(default_factory=set)

    def start(
        self,
        name: str,
        *,
        database_url: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> Worker:
        env = worker_env(
            database_url or self.database_url,
            name,
            capacity=self.capacity,
            slot_seconds=self.slot_seconds,
            extra={**self.extra, **(extra or {})},
        )
        worker = Worker(name, env, self.tmp / f"{name}.log").start()
        self.running[name] = worker
        self.gone.discard(name)
        return worker

    def check(self) -> None:
        """AssertionError (with its log's tail) if a worker exited unexpectedly."""
        for name, w in self.running.items():
            assert w.alive() or name in self.gone, f"{name} exited: {w.output()}"

    def leave(self, name: str) -> None:
        """SIGTERM: a clean leave."""
        self.gone.add(name)
        self.running[name].stop()

    def kill(self, name: str) -> None:
        """SIGKILL (kill -9)."""
        self.gone.add(name)
        self.running[name].signal(signal.SIGKILL)
        assert self.running[name].proc is not None
        self.running[name].proc.wait(10)  # type: ignore[union-attr]

    def stop_all(self) -> None:
        for w in self.running.values():
            w.stop()

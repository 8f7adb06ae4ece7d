"""One service per database even after its session dies, told by the polled site itself.

Service A runs (``crawler run``, a real process) on a PostgreSQL schema; the test ends A's
database sessions (``pg_terminate_backend``, as an operator or a lost network would) and
starts service B on the same schema at once, ending A's new lock sessions too until B holds
the lock (A may take the lock again between two of its slots; the hostile case is B
winning; A's other sessions are left to reconnect, so A itself keeps running).
The site, on loopback, logs every request with its User-Agent (each service has its own):
from that log, after B's first poll no page may be polled by both, and A must stop polling
within one slot of B taking the lock.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from crawler.store import NewUrl, Store
from crawler.store._lock import NAMESPACE, lock_key

pytestmark = pytest.mark.slow

PAGES = 6
SLOT_S = 0.5
#: how long the site is watched after B's first poll (A's old lock check came every 15 s)
WATCH_AFTER_S = 6.0


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


@dataclass
class LoggingSite:
    """Small pages on 127.0.0.1; every request logged as (monotonic time, path, agent)."""

    requests: list[tuple[float, str, str]] = field(default_factory=list)
    mutex: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with site.mutex:
                    site.requests.append(
                        (time.monotonic(), self.path, self.headers.get("User-Agent", ""))
                    )
                if not self.path.startswith("/p/"):
                    self.send_error(404)
                    return
                body = f"<html><body><p>page {self.path}</p></body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def polls(self, agent: str) -> list[tuple[float, str]]:
        with self.mutex:
            return [(t, p) for t, p, a in self.requests if a == agent and p.startswith("/p/")]


@pytest.fixture
def site() -> Iterator[LoggingSite]:
    logging_site = LoggingSite()
    try:
        yield logging_site
    finally:
        logging_site.stop()


def _url(database_url: str, name: str) -> str:
    """The database URL with the sessions of the pool named ``name`` (the lock's session
    names itself ``crawler service pid=..``)."""
    url = make_url(database_url).update_query_dict({"application_name": name})
    return url.render_as_string(hide_password=False)


def _start(database_url: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        {
            "CRAWLER_DATABASE_URL": _url(database_url, name),
            "CRAWLER_USER_AGENT": f"crawler-{name}",
            "CRAWLER_SLOT_SECONDS": str(SLOT_S),
            "CRAWLER_CAPACITY": str(PAGES),
            "CRAWLER_METRICS_PORT": "0",
            "CRAWLER_ALLOW_PRIVATE_ADDRESSES": "true",
            "CRAWLER_PER_HOST_MIN_DELAY_S": "0",
            "CRAWLER_PER_HOST_CONCURRENCY": "8",
            "CRAWLER_NORMALIZE_WORKERS": "1",
            "CRAWLER_FETCH_WORKERS": "0",
            "CRAWLER_FETCH_RETRIES": "0",
            "CRAWLER_FETCH_TIMEOUT_S": "2",
        }
    )
    env.pop("CRAWLER_CONFIG", None)
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "crawler", "run"], env=env, stdout=out, stderr=out
        )


def _end_sessions(admin: Engine, name: str, pid: int, *, lock_only: bool = False) -> int:
    """End every database session of the service process ``pid`` (pool named ``name``),
    or only its lock's session."""
    named = "false" if lock_only else "application_name = :name"
    with admin.connect() as conn:
        ended = conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                f"WHERE pid <> pg_backend_pid() AND ({named} OR application_name LIKE :lock)"
            ),
            {"name": name, "lock": f"crawler service pid={pid} %"},
        ).scalar()
        conn.commit()
    return int(ended or 0)


def _lock_holder_pid(admin: Engine, schema: str) -> int | None:
    """The process (``pid=`` in its session's name) holding the schema's service lock."""
    key = lock_key(schema, "service")
    with admin.connect() as conn:
        name = conn.execute(
            text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a "
                "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                "AND l.classid = CAST(:ns AS oid) AND l.objid = CAST(:key AS oid)"
            ),
            {"ns": NAMESPACE, "key": key + 2**32 if key < 0 else key},
        ).scalar()
    if name is None or "pid=" not in name:
        return None
    return int(name.split("pid=")[1].split()[0])


def _wait_polls(site: LoggingSite, agent: str, n: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while len(site.polls(agent)) < n:
        assert proc.poll() is None, f"{agent} ended early"
        assert time.monotonic() < deadline, f"{agent} never polled {n} pages"
        time.sleep(0.05)


@dataclass(frozen=True)
class Overlap:
    """What the site saw around the takeover."""

    doubled_slots: int  # slot windows (of SLOT_S) in which A polled a page B polled too
    doubled_polls: int  # A's polls of a page B polled within one slot length
    a_after_b: int  # A's polls after B's first poll
    a_after_lock_s: float  # A's last poll, seconds after B was seen holding the lock
    gap_s: float  # from A's last poll to B's first poll


def overlap(site: LoggingSite, b_locked_at: float) -> Overlap:
    a = site.polls("crawler-A")
    b = site.polls("crawler-B")
    b_first = min(t for t, _ in b)
    doubled = [ta for ta, pa in a if any(pb == pa and abs(ta - tb) < SLOT_S for tb, pb in b)]
    return Overlap(
        doubled_slots=len({math.floor((t - b_first) / SLOT_S) for t in doubled}),
        doubled_polls=len(doubled),
        a_after_b=sum(1 for t, _ in a if t >= b_first),
        a_after_lock_s=max(t for t, _ in a) - b_locked_at,
        gap_s=b_first - max(t for t, _ in a),
    )


def test_after_a_session_loss_no_slot_is_polled_by_two_services(
    database_url: str, site: LoggingSite, tmp_path: Path
) -> None:
    base = site.start()
    with Store(database_url) as store:
        store.add_urls([NewUrl(f"{base}/p/{i}") for i in range(PAGES)])
    schema = make_url(database_url).query["options"]
    assert isinstance(schema, str)
    schema = schema.split("search_path=")[1]
    admin = create_engine(database_url)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        a = _start(database_url, "A", tmp_path / "a.log")
        procs.append(a)
        _wait_polls(site, "crawler-A", 3 * PAGES, a)
        b_locked_at: float | None = None
        for _attempt in range(5):  # B is refused if A took its lock again meanwhile
            assert _end_sessions(admin, "A", a.pid) >= 1
            b = _start(database_url, "B", tmp_path / "b.log")
            procs.append(b)
            deadline = time.monotonic() + 60
            while b.poll() is None and time.monotonic() < deadline:
                if _lock_holder_pid(admin, schema) == b.pid:
                    b_locked_at = time.monotonic()
                    break
                _end_sessions(admin, "A", a.pid, lock_only=True)  # whenever A takes it back
                time.sleep(0.005)
            if b_locked_at is not None:
                break
            assert b.wait(30) == 3, (tmp_path / "b.log").read_text()
        assert b_locked_at is not None, ("B never took the lock", (tmp_path / "a.log").read_text())
        _wait_polls(site, "crawler-B", 1, b)
        b_first = min(t for t, _ in site.polls("crawler-B"))
        time.sleep(max(0.0, b_first + WATCH_AFTER_S - time.monotonic()))
        seen = overlap(site, b_locked_at)
        a_log = (tmp_path / "a.log").read_text()
        print(f"overlap after the takeover: {seen}")
        assert seen.doubled_slots == 0, (seen, a_log)
        assert seen.a_after_b == 0, (seen, a_log)
        assert seen.a_after_lock_s < SLOT_S, (seen, a_log)
        assert a.wait(30) == 3, a_log  # A stopped itself, saying why
        message = " ".join(a_log.split())
        assert "another process took this database" in message, a_log
        assert b.poll() is None, (tmp_path / "b.log").read_text()  # B is unharmed
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        admin.dispose()

"""One service per database: the lock, in-process and across real ``crawler run`` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from crawler.store import ServiceLockHeld, Store
from crawler.store._lock import NAMESPACE, lock_key


def test_second_holder_is_refused_with_who_holds_it(database_url: str) -> None:
    with Store(database_url) as first, Store(database_url) as second:
        lock = first.acquire_service_lock({"what": "test holder", "pid": 4242, "host": "h1"})
        with pytest.raises(ServiceLockHeld) as refused:
            second.acquire_service_lock()
        message = str(refused.value)
        assert "another crawler service already runs on this database" in message
        assert "Stop it first" in message
        assert refused.value.holders, message
        if database_url.startswith("sqlite"):
            assert "pid 4242 on host h1" in message
        else:  # described by the server: the holder's session, named after this process
            assert f"pid={os.getpid()}" in message and "PostgreSQL backend" in message
        assert lock.ensure()
        lock.release()
        lock.release()  # idempotent
        assert not lock.ensure()
        with second.acquire_service_lock() as again:
            assert again.ensure()
        # and released by the with block
        first.acquire_service_lock().release()


def test_roles_and_shared_mode(database_url: str) -> None:
    """The cluster's shapes: other roles are independent locks; shared holders coexist and keep
    an exclusive holder out (and the other way round)."""
    with Store(database_url) as a, Store(database_url) as b, Store(database_url) as c:
        with a.acquire_service_lock(role="coordinator"), b.acquire_service_lock():
            pass
        with (
            a.acquire_service_lock(shared=True),
            b.acquire_service_lock(shared=True),
            pytest.raises(ServiceLockHeld),
        ):
            c.acquire_service_lock()
        with a.acquire_service_lock(), pytest.raises(ServiceLockHeld):
            b.acquire_service_lock(shared=True)


def test_postgres_key_includes_the_schema() -> None:
    assert lock_key("crawler_a", "service") != lock_key("crawler_b", "service")
    assert lock_key("s", "service") != lock_key("s", "coordinator")
    assert -(2**31) <= lock_key("x" * 100, "service") < 2**31


def test_separate_schemas_do_not_collide(
    database_url: str, empty_database_url: str, db_backend: str
) -> None:
    """Two PostgreSQL schemas of one database (or two SQLite files) are two databases."""
    with (
        Store(database_url) as a,
        Store(empty_database_url) as b,
        a.acquire_service_lock(),
        b.acquire_service_lock(),
    ):
        pass


@pytest.mark.parametrize("db_backend", ["postgresql"])
def test_postgres_lock_dies_with_its_session(database_url: str) -> None:
    """The server ends the holder's session (as when its host vanishes): the lock is free,
    and ensure() takes it again."""

    with Store(database_url) as a, Store(database_url) as b:
        lock = a.acquire_service_lock()
        assert lock._conn is not None
        backend = lock._conn.execute(text("SELECT pg_backend_pid()")).scalar()
        with b.engine.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": backend})
        for _ in range(100):  # the termination is asynchronous
            try:
                b.acquire_service_lock().release()
                break
            except ServiceLockHeld:
                time.sleep(0.05)
        else:
            pytest.fail("the lock outlived its session")
        assert lock.ensure()  # free again: re-taken on a new session
        with pytest.raises(ServiceLockHeld):
            b.acquire_service_lock()
        lock.release()


# ----- real processes ----------------------------------------------------------------------


def _env(database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CRAWLER_DATABASE_URL": database_url,
            "CRAWLER_SLOT_SECONDS": "0.2",
            "CRAWLER_CAPACITY": "2",
            "CRAWLER_METRICS_PORT": "0",
            "CRAWLER_NORMALIZE_WORKERS": "1",
            "CRAWLER_FETCH_WORKERS": "0",
        }
    )
    env.pop("CRAWLER_CONFIG", None)
    return env


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "crawler", "run"], env=env, stdout=out, stderr=out
        )


def _wait_until_held(database_url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until ``proc`` holds the lock (seen from outside: taking it is refused)."""
    with Store(database_url) as probe:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            try:
                probe.acquire_service_lock().release()
            except ServiceLockHeld:
                return
            time.sleep(0.1)
    pytest.fail(f"the service never took the lock: {log.read_text()}")


@pytest.mark.slow
def test_second_crawler_run_refuses_until_the_first_is_killed(
    database_url: str, tmp_path: Path
) -> None:
    env = _env(database_url)
    first = _start(env, tmp_path / "first.log")
    third: subprocess.Popen[bytes] | None = None
    try:
        _wait_until_held(database_url, first, tmp_path / "first.log")
        second = subprocess.run(
            [sys.executable, "-m", "crawler", "run"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 3, second.stderr
        message = " ".join(second.stderr.split())
        assert "another crawler service already runs on this database" in message
        assert f"pid {first.pid}" in message or f"pid={first.pid}" in message, message
        assert "Stop it first" in message
        assert first.poll() is None  # the first one is unharmed

        first.send_signal(signal.SIGKILL)  # no clean-up at all: the lock must still go
        first.wait(10)
        third = _start(env, tmp_path / "third.log")
        _wait_until_held(database_url, third, tmp_path / "third.log")
        third.send_signal(signal.SIGTERM)
        assert third.wait(30) == 0, (tmp_path / "third.log").read_text()
    finally:
        for proc in (first, third):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_sqlite_paths_to_one_file_share_one_lock(tmp_path: Path) -> None:
    """A relative path, an absolute one and a symlink to the same database file."""
    real = tmp_path / "data" / "crawler.db"
    real.parent.mkdir()
    link = tmp_path / "other-name.db"
    link.symlink_to(real)
    cwd = os.getcwd()
    os.chdir(real.parent)
    try:
        with (
            Store(f"sqlite:///{real}") as a,
            Store("sqlite:///crawler.db") as b,
            Store(f"sqlite:///{link}") as c,
            a.acquire_service_lock() as lock,
        ):
            assert lock.where.endswith(f"(lock file {real}.lock)")
            for other in (b, c):
                with pytest.raises(ServiceLockHeld):
                    other.acquire_service_lock()
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("db_backend", ["postgresql"])
def test_watch_tells_when_another_process_took_the_lock(database_url: str) -> None:
    with Store(database_url) as a, Store(database_url) as b:
        lock = a.acquire_service_lock()
        lost = threading.Event()
        lock.watch(1.0, lost.set)
        assert lock._conn is not None
        backend = lock._conn.execute(text("SELECT pg_backend_pid()")).scalar()
        with b.engine.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": backend})
        deadline = time.monotonic() + 10
        while True:  # another service starts while this one's session is gone
            try:
                other = b.acquire_service_lock()
                break
            except ServiceLockHeld:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert lost.wait(10)
        assert not lock.ensure()
        other.release()
        lock.release()


@pytest.mark.parametrize("db_backend", ["postgresql"])
def test_watch_retakes_a_free_lock_quietly(database_url: str) -> None:
    with Store(database_url) as a, Store(database_url) as b:
        lock = a.acquire_service_lock()
        lost = threading.Event()
        lock.watch(0.1, lost.set)
        assert lock._conn is not None
        backend = lock._conn.execute(text("SELECT pg_backend_pid()")).scalar()
        with b.engine.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": backend})
        holder = text(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = CAST(:ns AS oid) AND objid = CAST(:key AS oid)"
        )
        key = {"ns": NAMESPACE, "key": lock._key + 2**32 if lock._key < 0 else lock._key}
        deadline = time.monotonic() + 10
        with b.engine.connect() as conn:
            while True:  # the watcher takes it again, on a new session (looked at, not taken)
                pids = conn.execute(holder, key).scalars().all()
                conn.rollback()
                if pids and pids != [backend]:
                    break
                assert time.monotonic() < deadline, "the lock was not taken again"
                time.sleep(0.05)
        with pytest.raises(ServiceLockHeld):
            b.acquire_service_lock()
        assert not lost.is_set()
        lock.release()
        b.acquire_service_lock().release()  # and released for good

"""Shared fixtures: the database, parametrized over SQLite (a temporary file) and PostgreSQL.

PostgreSQL: ``$CRAWLER_TEST_POSTGRES_URL`` or postgresql+psycopg://postgres@127.0.0.1:5432/test
(the role ``root`` is tried as well). Tests run in their own SCHEMAs of that database (the URL
carries ``options=-csearch_path=<schema>``; a schema costs milliseconds, a database about a
second with real fsync): ``database_url`` is one of two migrated schemas per session (per xdist
worker), used in turn, whose tables are emptied after each test; ``empty_database_url`` is a
new empty schema per test. All are dropped afterwards. If PostgreSQL cannot be reached the
PostgreSQL variants FAIL (they are never skipped silently). The sessions commit without
waiting for the WAL's flush (``synchronous_commit=off``: what a commit makes visible, and
when, is unchanged; only a crash of the server could lose the last commits): 10% less wall
time for the PostgreSQL tests of the store and the CLI here (2026-11-27).

Emptying: only the tables that hold rows are emptied, then any sequence that moved is
restarted, which leaves the same state as truncating all of them. TRUNCATE swaps the files of
every table and index it names: all 21 tables cost 0.25-0.6 s per test on this 2-core machine
under load (2026-11-26), looking for rows costs 5-15 ms, and most tests fill a few tables with
a few rows. Those are DELETEd (children first): 3-4 ms of the server's CPU against 15-27 ms
for TRUNCATE of the same tables after adding 20 URLs (2026-11-28), on a machine where the
server's CPU is the tests' CPU. A table of more than ``DELETE_UP_TO`` rows is TRUNCATEd, so
no test leaves many dead rows behind. A schema is emptied in a background thread as soon as
its test is done, while the next test runs on the other one.

SQLite: ``database_url`` is a copy of a database migrated once per session (a migration costs
0.3 s, a copy a few ms), so every test starts from the same bytes a migration writes.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

# Cache the compiled modules and pytest's assert-rewritten tests (__pycache__, ignored by git
# and the image's build context) even where the environment says PYTHONDONTWRITEBYTECODE=1,
# as this machine's does: without the cache every run rewrites the asserts of all 270 test
# modules again, about 60% of the 6-12 s of CPU a collection takes here (2026-11-27, cProfile)
# and paid once per xdist worker. The files are checked against their source's mtime and
# size before use (and the rewritten ones against pytest's version), so an edit is never
# missed; the processes the tests spawn read them too. Before any other import: pytest
# rewrites the asserts of every module of a package that ships a pytest plugin, hypothesis
# included (about 70 modules, 0.7 s of CPU per process, 2026-11-27), and caches them only
# from here on.
sys.dont_write_bytecode = False

from hypothesis import settings  # noqa: E402
from sqlalchemy import Engine, create_engine, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from crawler.store import Store  # noqa: E402 - after the cache is allowed: compiled once
from crawler.store.models import Base  # noqa: E402

# The property tests run with a fixed seed, so every run (CI's included) checks the same
# examples; HYPOTHESIS_PROFILE=explore draws new ones each run, to hunt for bugs.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# The service's tests and the processes they start run 50 ms slots to watch a scheduler
# learn within seconds: the polite default minimum interval between two polls of a URL (5
# minutes) would stop each URL after its first poll, so they ask for no bound, as a
# deployment can. Tests of the default itself remove this (tests/service/test_polite_default.py).
os.environ.setdefault("CRAWLER_DEFAULT_MIN_INTERVAL_S", "0")

BACKENDS = ("sqlite", "postgresql")
#: migrated PostgreSQL schemas per session: a test gets one while the last one's is emptied
MIGRATED_SCHEMAS = 2
#: a table of at most this many rows is emptied by DELETE, a larger one by TRUNCATE
DELETE_UP_TO = 1_000
PG_CANDIDATES = (
    "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "postgresql+psycopg://root@127.0.0.1:5432/test",
)
HOW_TO_START = (
    "PostgreSQL is needed by the postgresql variant of the database tests and is not "
    "reachable at {tried}. Start it (e.g. `sudo service postgresql start` or `docker run -d "
    "-p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`, then `createdb -h 127.0.0.1 "
    "-U postgres test`) or point CRAWLER_TEST_POSTGRES_URL at a server whose role may "
    "CREATE DATABASE. Last error: {error}"
)


class _Postgres:
    """The admin connection to the server; creates and drops the tests' schemas."""

    def __init__(self) -> None:
        self.admin: Engine | None = None
        self.base_url = ""
        self.error: str | None = None
        self.schemas: list[str] = []  # the migrated ones, dropped at the end
        #: schemas given back, oldest first, each with its emptying (a background thread)
        self.released: deque[tuple[str, Future[None]]] = deque()
        self.emptier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="empty-schema")

    def connect(self) -> Engine:
        if self.admin is not None:
            return self.admin
        if self.error is not None:
            pytest.fail(self.error, pytrace=False)
        env = os.environ.get("CRAWLER_TEST_POSTGRES_URL")
        candidates = (env,) if env else PG_CANDIDATES
        last = ""
        for url in candidates:
            engine = create_engine(url, isolation_level="AUTOCOMMIT")
            try:
                with engine.connect() as conn:
                    conn.execute(text("SELECT 1"))
            except Exception as exc:  # any failure means: not usable
                engine.dispose()
                last = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                continue
            self.admin, self.base_url = engine, url
            return engine
        self.error = HOW_TO_START.format(tried=", ".join(candidates), error=last)
        pytest.fail(self.error, pytrace=False)

    def url_of(self, schema: str) -> str:
        options = f"-csynchronous_commit=off -csearch_path={schema}"
        url = make_url(self.base_url).update_query_dict({"options": options})
        return url.render_as_string(hide_password=False)

    def create(self) -> str:
        admin = self.connect()
        name = f"crawler_test_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {name}"))
        return name

    def drop(self, name: str) -> None:
        if self.admin is None:
            return
        with self.admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))

    def migrated(self) -> str:
        """A migrated schema of the session, empty: one emptied while the previous test ran,
        or a new one (at most ``MIGRATED_SCHEMAS``). Give it back with ``release``."""
        if self.released and (self.released[0][1].done() or len(self.schemas) >= MIGRATED_SCHEMAS):
            name, emptied = self.released.popleft()
            emptied.result()  # its error, if the emptying failed
            return name
        name = self.create()
        self.schemas.append(name)
        store = Store(self.url_of(name))
        try:
            store.upgrade()
        finally:
            store.close()
        return name

    def release(self, schema: str) -> None:
        """A test is done with ``schema``: empty it in the background for a later test."""
        self.released.append((schema, self.emptier.submit(self.empty, schema)))

    def empty(self, schema: str) -> None:
        """Empty the tables of ``schema`` that hold rows, and restart the sequences that moved
        (an insert rolled back moves one too): DELETE where a table holds a few rows, TRUNCATE
        ... RESTART IDENTITY where it holds many."""
        probe = " UNION ALL ".join(
            f"SELECT '{t}', (SELECT count(*) FROM (SELECT 1 FROM {schema}.{t} LIMIT"
            f" {DELETE_UP_TO + 1}) r) WHERE EXISTS (SELECT 1 FROM {schema}.{t})"
            for t in Base.metadata.tables
        )
        with self.connect().connect() as conn:
            conn.execute(text("SET lock_timeout = '5s'"))  # a leaked connection: fail, not hang
            conn.execute(text(f"SET search_path = {schema}"))  # for the tables' triggers
            rows = dict(conn.execute(text(probe)).tuples().all())
            many = [t for t, count in rows.items() if count > DELETE_UP_TO]
            if many:
                tables = ", ".join(f"{schema}.{t}" for t in many)
                conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
            for table in reversed(Base.metadata.sorted_tables):  # the referring ones first
                if table.name in rows and table.name not in many:
                    conn.execute(text(f"DELETE FROM {schema}.{table.name}"))
            moved = conn.execute(
                text(
                    "SELECT sequencename FROM pg_sequences"
                    " WHERE schemaname = :schema AND last_value IS NOT NULL"
                ),
                {"schema": schema},
            ).scalars()
            for sequence in moved.all():
                conn.execute(text(f"ALTER SEQUENCE {schema}.{sequence} RESTART"))

    def close(self) -> None:
        self.emptier.shutdown(wait=True)
        for name in self.schemas:
            self.drop(name)
        if self.admin is not None:
            self.admin.dispose()


@pytest.fixture(scope="session")
def _postgres() -> Iterator[_Postgres]:
    pg = _Postgres()
    yield pg
    pg.close()


@pytest.fixture(params=BACKENDS)
def db_backend(request: pytest.FixtureRequest) -> str:
    """Which database this test runs on."""
    return str(request.param)


@pytest.fixture
def empty_database_url(db_backend: str, tmp_path: Path, _postgres: _Postgres) -> Iterator[str]:
    """A database URL of a new, empty (not migrated) database."""
    if db_backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    name = _postgres.create()
    try:
        yield _postgres.url_of(name)
    finally:
        _postgres.drop(name)


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite database migrated to the latest revision, once per session: tests get copies."""
    path = tmp_path_factory.mktemp("template") / "crawler.db"
    store = Store(f"sqlite:///{path}")
    try:
        store.upgrade()
    finally:
        store.close()
    return path


@contextmanager
def _migrated_database(
    backend: str, tmp_path: Path, postgres: _Postgres | None, request: pytest.FixtureRequest
) -> Iterator[str]:
    """The URL of a database on ``backend`` migrated to the latest revision, empty
    (``postgres`` may be None for SQLite)."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("_sqlite_template")  # made only if needed
        path = tmp_path / "crawler.db"
        for suffix in ("", "-wal"):  # closed, the template has no WAL: copied if it had one
            source = template.with_name(template.name + suffix)
            if source.exists():
                shutil.copyfile(source, path.with_name(path.name + suffix))
        yield f"sqlite:///{path}"
        return
    assert postgres is not None
    schema = postgres.migrated()
    try:
        yield postgres.url_of(schema)
    finally:
        postgres.release(schema)


@pytest.fixture
def database_url(
    db_backend: str, tmp_path: Path, _postgres: _Postgres, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A database URL of a new database migrated to the latest revision."""
    with _migrated_database(db_backend, tmp_path, _postgres, request) as url:
        yield url


@pytest.fixture
def sqlite_database_url(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new SQLite database migrated to the latest revision (a copy of the session's
    template), for a test that runs on SQLite alone, such as a command's messages: a command
    migrating a new file costs 130-300 ms of CPU, most of such a test's time."""
    with _migrated_database("sqlite", tmp_path, None, request) as url:
        yield url


@pytest.fixture
def database_urls(
    tmp_path: Path, _postgres: _Postgres, request: pytest.FixtureRequest
) -> Iterator[dict[str, str]]:
    """A new migrated database on each backend at once, by backend name: for a test whose
    database only feeds the set-up of a long computation, which then runs once."""
    with ExitStack() as stack:
        yield {
            backend: stack.enter_context(_migrated_database(backend, tmp_path, _postgres, request))
            for backend in BACKENDS
        }


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    """A Store on a fresh migrated database (closed after the test)."""
    st = Store(database_url)
    try:
        yield st
    finally:
        st.close()


# ----- the fast lane ------------------------------------------------------------------------
# `python -m pytest -m "not slow"` is what a developer runs while working; it stays fast only
# if every long test is marked. The summary names the unmarked tests that took longer than
# SLOW_SECONDS (setup, call and teardown together) so they can be marked @pytest.mark.slow.
# A loaded machine inflates the times: a name that shows up once is worth a second look,
# not a mark.
SLOW_SECONDS = 5.0
_unmarked_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "slow" not in report.keywords:
        _unmarked_durations[report.nodeid] = (
            _unmarked_durations.get(report.nodeid, 0.0) + report.duration
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    long = sorted(
        ((t, n) for n, t in _unmarked_durations.items() if t > SLOW_SECONDS), reverse=True
    )
    if long:
        terminalreporter.section(f"tests over {SLOW_SECONDS:g} s not marked slow")
        for seconds, nodeid in long:
            terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")


# ----- the collected suite, out of the garbage collector's way -----------------------------
# After collection a test process holds every imported module (SQLAlchemy, NumPy, hypothesis,
# aiohttp, pydantic, the crawler) and the collected items; each full collection walked all of
# them again: 150 ms per full collection, 3.2 s of the 20 s of CPU of tests/cli and
# tests/store run serially (2026-11-27, gc.callbacks). Frozen, they are left out of every
# later collection (they live until the process ends anyway): 2.3 s there. Garbage the tests
# make is collected as before.


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()


# ----- the CLI's command tree, built once ----------------------------------------------------
# typer's CliRunner.invoke builds the click command tree from the Typer app on every call:
# 0.1-0.14 s for crawler's CLI (inspecting every command's signature and type hints), more than
# most CLI tests spend running their command, and the fast lane invokes the CLI hundreds of
# times. The tree depends only on the app, and a click command is reused across invocations (a
# click program's normal use): each test still parses its arguments and runs the real command.
_commands: dict[int, tuple[object, object]] = {}


@pytest.fixture(autouse=True, scope="session")
def _cli_built_once() -> Iterator[None]:
    import typer.testing

    build = typer.testing._get_command

    def built(app: Any) -> Any:
        known = _commands.get(id(app))
        if known is None or known[0] is not app:
            known = _commands[id(app)] = (app, build(app))
        return known[1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.testing, "_get_command", built)
        yield


# ----- the tests that wait, spread over the workers' shares ----------------------------------
# The service's and the crawl workers' tests spend most of their time waiting on real clocks
# (slot deadlines, slow hosts, a process's start): 82 s of the 196 s the fast lane takes one
# test after another, in 68 tests of these directories (2026-11-28). In collection order they
# came last in the last xdist worker's share, so the fast lane ended with 10 s in which four
# workers waited and the cores were idle; put first in every share, they had all workers
# waiting at once for the first 25 s, the cores 25-35% idle. pytest-xdist's worksteal hands
# each of N workers an equal, contiguous share of the collection first (and steals from a
# share's end); here each share holds its part of the waiting tests spread evenly among the
# others, so at any time some workers wait while the rest use the cores. Order within each
# group is kept; without xdist nothing moves. Last of the hooks: after ``-m`` has deselected.
WAITING_TESTS = ("tests/service/", "tests/workers/")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers < 2:
        return
    waiting = [item for item in items if item.nodeid.startswith(WAITING_TESTS)]
    rest = [item for item in items if not item.nodeid.startswith(WAITING_TESTS)]
    ordered: list[pytest.Item] = []
    left = len(items)
    for share in range(workers):
        size = left // (workers - share)  # as worksteal deals the first shares
        mine = waiting[share::workers]
        others, rest = rest[: size - len(mine)], rest[size - len(mine) :]
        ordered += _spread(mine, others)
        left -= size
    items[:] = ordered + rest


def _spread(few: list[pytest.Item], many: list[pytest.Item]) -> list[pytest.Item]:
    """``few`` evenly among ``many``, the first of ``few`` first."""
    out: list[pytest.Item] = []
    taken = 0
    for k, item in enumerate(few):
        upto = (k * len(many)) // max(1, len(few))
        out += many[taken:upto]
        taken = upto
        out.append(item)
    return out + many[taken:]

"""Scratch databases for the benchmarks: a temporary SQLite file, or a throw-away schema in
PostgreSQL (``$CRAWLER_BENCH_POSTGRES_URL``, default the local ``test`` database)."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PG_URL = os.environ.get(
    "CRAWLER_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@contextmanager
def database(kind: str) -> Iterator[str]:
    """A database URL of ``kind`` ("sqlite" or "postgresql"), dropped afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{Path(tmp) / 'bench.db'}"
        return
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    schema = f"crawler_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        url = make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()

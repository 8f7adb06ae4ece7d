"""Several replicas started at once on an empty PostgreSQL schema migrate it once.

Three ``crawler db upgrade`` processes are released together (each waits for the same
start time before it connects); without a lock around the migrations two of them create
``alembic_version`` or the first tables at the same moment and one fails.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from crawler.store._migrate import head_revision
from tests.cluster._harness import ROOT

pytestmark = pytest.mark.slow

REPLICAS = 3
#: each process sleeps until this far in the future before it migrates (they start at once)
RELEASE_IN_S = 4.0

_UPGRADE_AT = """
import sys, time
from crawler.store import Store
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
Store(sys.argv[1]).upgrade()
print("migrated")
"""


@pytest.mark.parametrize("run", range(3))
def test_replicas_started_together_on_an_empty_schema_migrate_once(
    _postgres: Any, tmp_path: Path, run: int
) -> None:
    name = _postgres.create()
    url = _postgres.url_of(name)
    try:
        release = time.time() + RELEASE_IN_S
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _UPGRADE_AT, url, repr(release)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(REPLICAS)
        ]
        outputs = [p.communicate(timeout=120)[0] for p in procs]
        failed = [(p.returncode, out[-2000:]) for p, out in zip(procs, outputs, strict=True)
                  if p.returncode != 0]  # fmt: skip
        assert not failed, f"a replica failed to migrate: {failed}"
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                versions = conn.execute(text("SELECT version_num FROM alembic_version")).all()
        finally:
            engine.dispose()
        assert [v for (v,) in versions] == [head_revision()]
    finally:
        _postgres.drop(name)

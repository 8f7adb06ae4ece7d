"""What a command loads: on a SQLite database at head, neither PostgreSQL's driver, nor
Alembic, nor the HTTP clients. Each took 0.15-0.2 s of every command's start on a slow
2-core machine, for work the command does not do."""

from __future__ import annotations

import os
import subprocess
import sys

from crawler.store import Store, head_revision

_LIST_AND_REPORT = """
import sys
from crawler.cli import main
sys.argv = ["crawler", "list"]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(WATCHED))
print("exit", code, "loaded", ",".join(loaded) or "-")
"""
WATCHED = ("alembic", "psycopg", "httpx", "aiohttp")


def test_a_command_on_sqlite_loads_no_driver_migrations_or_http_client(
    sqlite_database_url: str,
) -> None:
    url = sqlite_database_url
    with Store(url) as store:
        assert store.revision() == head_revision()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env["CRAWLER_DATABASE_URL"] = url
    done = subprocess.run(
        [sys.executable, "-c", f"WATCHED = {WATCHED!r}\n{_LIST_AND_REPORT}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "exit 0 loaded -", done.stdout + done.stderr

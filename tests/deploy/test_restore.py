"""The back-up and restore of docs/deploy.md, for real: pg_dump -Fc, dropdb, createdb,
pg_restore --no-owner, then the crawler reads the restored watch list (the docs run the
same client programs through ``docker compose exec``; here they run against the test
server on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crawler.cli import app
from crawler.store import NewUrl, Store

ROOT = Path(__file__).resolve().parents[2]
SERVER = ["-h", "127.0.0.1", "-p", "5432", "-U", os.environ.get("CRAWLER_TEST_PG_USER", "postgres")]


def _pg(*args: str, stdin: Path | None = None, stdout: Path | None = None) -> None:
    with (
        open(stdin, "rb") if stdin else open(os.devnull, "rb") as given,
        open(stdout, "wb") if stdout else open(os.devnull, "wb") as taken,
    ):
        done = subprocess.run(
            [*args[:1], *SERVER, *args[1:]], stdin=given, stdout=taken,
            stderr=subprocess.PIPE, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pg_restore") is None, reason="PostgreSQL client programs")
def test_the_documented_back_up_and_restore(tmp_path: Path) -> None:
    deploy = (ROOT / "docs/deploy.md").read_text()
    for step in (
        "pg_dump -U crawler -Fc crawler",
        "dropdb -U crawler --if-exists crawler",
        "createdb -U crawler crawler",
        "pg_restore -U crawler -d crawler --no-owner",
    ):
        assert step in deploy, step  # the steps tested here are the documented ones  # fmt: skip
    name = f"crawler_restore_{uuid.uuid4().hex[:8]}"
    url = f"postgresql+psycopg://{SERVER[-1]}@127.0.0.1:5432/{name}"
    dump = tmp_path / "crawler.dump"
    _pg("createdb", name)
    try:
        with Store(url) as store:
            store.upgrade()
            store.add_urls([NewUrl(f"https://example.org/{k}") for k in range(3)])
        _pg("pg_dump", "-Fc", name, stdout=dump)
        with Store(url) as store:  # after the back-up: lost by the restore
            store.add_urls([NewUrl("https://example.org/later")])
        _pg("dropdb", "--if-exists", name)
        _pg("createdb", name)
        _pg("pg_restore", "-d", name, "--no-owner", stdin=dump)
        listing = CliRunner().invoke(app, ["list", "--json", "--database-url", url])
        assert listing.exit_code == 0, listing.output
        urls = {u["url"] for u in json.loads(listing.stdout)["urls"]}
        assert urls == {f"https://example.org/{k}" for k in range(3)}
    finally:  # --force: the list command's connection pool is still open in this process
        _pg("dropdb", "--if-exists", "--force", name)

"""A command closes the stores it opens when it ends, failed or not.

Run in a long-lived process (these tests, a script calling ``app``), a command that left
its store open kept its connection pool, and on PostgreSQL its connections, until the
garbage collector came by: each is counted here where the operating system or the server
sees it (the process's open files, ``pg_stat_activity``).
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import create_engine, make_url, text
from typer.testing import CliRunner

from crawler.cli import app

COMMANDS = [
    ["add", "https://example.org/a", "https://example.org/b"],
    ["list", "--json"],
    ["show", "https://example.org/a", "--json"],
    ["stats", "--json"],
    ["remove", "https://example.org/b"],
    ["show", "https://example.org/none"],  # fails: no such URL
    ["destinations", "list", "--json"],
    ["sources", "list", "--json"],
    ["discovered", "--json"],
    ["pause", "https://example.org/a"],
    ["events", "--json"],
]


def _open_connections(database_url: str) -> int:
    """The connections to the database: on PostgreSQL the server's count of them (other
    than the one asking), on SQLite this process's open files of the database."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        path = os.path.realpath(url.database or "")
        fds = Path("/proc/self/fd")
        links = []
        for fd in fds.iterdir():
            try:
                links.append(os.readlink(fd))
            except OSError:  # closed while listed (the listing's own descriptor)
                continue
        return sum(link == path for link in links)
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            query = (
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = :name AND pid <> pg_backend_pid()"
            )
            return int(connection.execute(text(query), {"name": url.database}).scalar_one())
    finally:
        engine.dispose()


def test_commands_leave_no_connection_open(database_url: str) -> None:
    before = _open_connections(database_url)
    runner = CliRunner()
    codes = []
    for command in COMMANDS:
        result = runner.invoke(app, [*command, "--database-url", database_url])
        codes.append(result.exit_code)
    assert codes.count(0) == len(COMMANDS) - 1, codes  # one command fails on purpose
    assert _open_connections(database_url) == before

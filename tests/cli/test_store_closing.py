"""A command closes the stores it opens when it ends, failed or not.

Run in a long-lived process (these tests, a script calling ``app``), a command that left
its store open kept its connection pool, and on PostgreSQL its connections, until the
garbage collector came by: each is counted here where the operating system sees it (the
process's open files and TCP connections).
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from sqlalchemy import make_url
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
    """This process's connections to the database, as the operating system sees them: its
    open files of an SQLite database, its TCP connections to a PostgreSQL server's port
    (the server's own count would include the other test workers' connections)."""
    url = make_url(database_url)
    links = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:  # closed while listed (the listing's own descriptor)
            continue
    if url.get_backend_name() == "sqlite":
        path = os.path.realpath(url.database or "")
        return sum(link == path for link in links)
    sockets = {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    port = f"{url.port or 5432:04X}"
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            established = state == "01"
            count += established and remote.endswith(":" + port) and inode in sockets
    return count


def test_commands_leave_no_connection_open(database_url: str) -> None:
    # Earlier tests' engines that only the garbage collector closes are closed first, and
    # it does not run during the commands: what they leave open stays counted.
    gc.collect()
    before = _open_connections(database_url)
    runner = CliRunner()
    codes = []
    gc.disable()
    try:
        for command in COMMANDS:
            result = runner.invoke(app, [*command, "--database-url", database_url])
            codes.append(result.exit_code)
        after = _open_connections(database_url)
    finally:
        gc.enable()
    assert codes.count(0) == len(COMMANDS) - 1, codes  # one command fails on purpose
    assert after == before

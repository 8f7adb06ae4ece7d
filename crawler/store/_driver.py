"""The database drivers' own errors, for the code that talks to a driver's cursor directly.

psycopg is imported here only when a driver error reaches one of these ``except`` clauses
(an ``except`` evaluates its expression only then): a process on SQLite never loads
psycopg, 0.16-0.2 s of a CLI command's 1.7 s on a slow 2-core machine (2026-11-28). A
process on PostgreSQL has loaded it with its engine already.
"""

from __future__ import annotations

import functools
import sqlite3


@functools.cache
def unavailable_errors() -> tuple[type[Exception], ...]:
    """The drivers' errors that mean the database is unreachable or busy (retry later)."""
    import psycopg

    return (sqlite3.OperationalError, psycopg.OperationalError)


@functools.cache
def driver_errors() -> tuple[type[Exception], ...]:
    """Every error of the drivers (the base classes of their DB-API errors)."""
    import psycopg

    return (sqlite3.Error, psycopg.Error)

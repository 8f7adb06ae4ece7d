"""Operator-given URL patterns (a source's ``--include`` and ``--exclude``), compiled by RE2.

Decisions:

* **RE2** (google-re2), the linear-time engine the detector's ignore patterns already run on:
  a source's scope is matched against every link a remote page offers, on the event loop,
  so a backtracking engine lets a page freeze the whole service (Python's ``re`` took about
  45 s for ``(a+)+$|news`` on three links of 25 ``a``; each extra character doubles it, and
  SIGTERM cannot interrupt it). RE2's time is linear in the URL whatever the pattern.
* The price is RE2's syntax: no backreferences, no lookaround (refused with the reason:
  ``compile_pattern`` raises ``PatternError``, a ``ValueError``). ``\\d``, ``\\w`` and
  ``\\b`` are ASCII, which is what a canonical (percent-encoded) URL holds.
* ``compile_pattern`` is the one place a URL pattern is compiled: the scope rules, the CLI's
  check at ``sources add`` and its "does the source match its own patterns" test all use it,
  so what ``add`` accepts is exactly what the service runs. At most ``MAX_PATTERN_CHARS``
  characters (the detector's limit); RE2's own memory cap bounds a compiled pattern.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import re2

MAX_PATTERN_CHARS: Final = 1024
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the reason is raised as PatternError, not printed to stderr


class PatternError(ValueError):
    """A URL pattern RE2 cannot run; the message starts with the pattern and says why (the
    caller puts the option or field in front)."""


@dataclass(frozen=True)
class UrlPattern:
    """A compiled URL pattern: ``search(url)`` is True when it matches anywhere in ``url``,
    in time linear in ``len(url)``."""

    text: str
    compiled: Any

    def search(self, url: str) -> bool:
        return self.compiled.search(url) is not None


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> UrlPattern:
    """``pattern`` compiled by RE2, or ``PatternError`` saying why it cannot be."""
    if not pattern:
        raise PatternError("'' is empty (it would match every URL)")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(
            f"{quoted(pattern[:40])}... has {len(pattern):,} characters: "
            f"at most {MAX_PATTERN_CHARS:,}"
        )
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(
            f"{quoted(pattern)} is not a linear-time (RE2) regular expression: {reason} "
            "(backreferences and lookaround are not supported)"
        ) from None
    return UrlPattern(pattern, compiled)


def quoted(pattern: str) -> str:
    """``pattern`` in single quotes as typed (``repr`` when it holds unprintable
    characters: its escapes then show them; a plain ``repr`` would double every backslash)."""
    return f"'{pattern}'" if pattern.isprintable() else repr(pattern)

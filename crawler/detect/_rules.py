"""Per-URL watch rules: an optional CSS selector and patterns removed from the normalized text.

Operators supply these, so judging a page with them must have a bounded cost. Decisions:

* **Ignore patterns run on RE2** (google-re2), a linear-time engine: Python's backtracking
  ``re`` takes 0.3 s for ``(a+)+$`` on 23 characters and doubles per character; RE2 takes
  3.6 ms on 2 MB. The price is RE2's syntax: no backreferences or lookaround, no ``\\u``
  escapes (write the character), and ``\\d``, ``\\w``, ``\\s``, ``\\b`` are ASCII
  (``\\pN``, ``\\pL`` are the Unicode classes). Patterns that match the empty text are
  refused. Patterns run
  on the UTF-8 bytes (the wrapper's ``str`` path converts offsets per match and went
  quadratic: 200,000 matches took 2.6 s against 1.2 s on bytes); matches are removed by a loop
  of our own that checks the page's time budget every ``_BUDGET_EVERY`` matches.
* **Selectors are limited in their descendant-type combinators.** lexbor matches right to left
  and backtracks over ancestors: ``x div`` on 1,900 nested divs takes 0.14 s, ``x div div``
  more than 20 s (cost ~ depth^(k+1) for k descendant or ``~`` combinators, ``:has()`` counting
  as one unless its argument starts with ``>`` or ``+``). At most ``MAX_DESCENDANT_COMBINATORS``
  per selector of a list: child (``>``) and adjacent (``+``) combinators are free, and so is
  a leading ``html``, ``body`` or ``:root`` step (every element is inside it: the search
  never backtracks over it, measured), so ``body div p`` is accepted. A refused selector's
  message gives an equivalent within the limit (``div > div p``, or ``div p``), and a
  selector lexbor cannot parse is reported with where (lexbor says only that it cannot).
* ``validate_rules`` is the one check (the CLI's ``add`` calls it; ``WatchRules`` runs it on
  construction); ``WatchRules.of`` is the one constructor of the polling paths: it never
  raises, rules stored before these checks existed become ``WatchRules.invalid`` and the poll
  a recorded failure (``error="invalid_rules"``), not a crash.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from time import perf_counter
from typing import Any, Final

import re2
from selectolax.lexbor import LexborHTMLParser

MAX_SELECTOR_CHARS: Final = 1024
MAX_PATTERNS: Final = 32
MAX_PATTERN_CHARS: Final = 1024
MAX_DESCENDANT_COMBINATORS: Final = 1
#: matches removed between two looks at the clock
_BUDGET_EVERY: Final = 1024

#: the clock of the time budgets (see BudgetExceededError)
clock: Final = perf_counter
_UNANCHORED = re2._Anchor.UNANCHORED
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # errors are raised as InvalidRuleError, not logged to stderr


class InvalidRuleError(ValueError):
    """A watch rule that can never work; the message says which and why."""


class BudgetExceededError(Exception):
    """Judging a page took longer than its time budget (raised between steps). The budget is
    wall time (``perf_counter``, 0.3 us a look; the CPU clock of the thread costs 3 us here,
    5% of a skeleton check), so it also counts time the process waited for a core."""


@dataclass(frozen=True)
class WatchRules:
    """What part of a page to watch.

    ``selector``: a CSS selector; only the text of the matching elements counts (no match = empty
    text). ``ignore_patterns``: RE2 patterns removed from the whitespace-collapsed text (one
    line, words separated by single spaces) before hashing, e.g. ``r"\\d+ views"``.
    Invalid rules raise ``InvalidRuleError`` (a ``ValueError``) here, not during polling;
    ``invalid`` (set only by ``WatchRules.of``) holds the reason stored rules cannot be used.
    """

    selector: str | None = None
    ignore_patterns: tuple[str, ...] = ()
    invalid: str | None = None

    def __post_init__(self) -> None:
        if self.invalid is None:
            validate_rules(self.selector, self.ignore_patterns)

    @classmethod
    def of(cls, selector: str | None, ignore_patterns: Iterable[str] = ()) -> WatchRules:
        """The rules of a URL as stored (never raises: see ``invalid``). No rules: one shared
        instance."""
        patterns = tuple(ignore_patterns)
        if selector is None and not patterns:
            return NO_RULES
        return _rules_of(selector, patterns)

    @property
    def has_selector(self) -> bool:
        return self.selector is not None

    @property
    def key(self) -> bytes:
        """A stable fingerprint, mixed into the raw hash so changed rules force a re-parse."""
        if self.selector is None and not self.ignore_patterns:
            return b""
        return repr((self.selector, self.ignore_patterns)).encode()


@lru_cache(maxsize=4096)
def _rules_of(selector: str | None, patterns: tuple[str, ...]) -> WatchRules:
    try:
        return WatchRules(selector, patterns)
    except InvalidRuleError as exc:
        return WatchRules(selector, patterns, invalid=str(exc))


def validate_rules(selector: str | None, ignore_patterns: Sequence[str] = ()) -> None:
    """Raise ``InvalidRuleError`` with the reason unless the detector can use these rules:
    the selector parses (lexbor) within the complexity limit, every pattern compiles (RE2)."""
    if selector is not None:
        check_selector(selector)
    if len(ignore_patterns) > MAX_PATTERNS:
        raise InvalidRuleError(
            f"{len(ignore_patterns)} ignore patterns: at most {MAX_PATTERNS} are allowed"
        )
    compiled_patterns(tuple(ignore_patterns))


@lru_cache(maxsize=1024)
def check_selector(selector: str) -> None:
    if not selector.strip():
        raise InvalidRuleError("empty CSS selector")
    if len(selector) > MAX_SELECTOR_CHARS:
        raise InvalidRuleError(
            f"CSS selector of {len(selector)} characters: at most {MAX_SELECTOR_CHARS}"
        )
    try:
        LexborHTMLParser("<p></p>").css(selector)
    except Exception as exc:  # selectolax raises its own error type
        raise _located(selector, exc) from None
    counts = descendant_combinators(without_root_steps(selector))
    worst = max(counts)
    if worst > MAX_DESCENDANT_COMBINATORS:
        raise InvalidRuleError(
            f"CSS selector {selector!r} has {worst} descendant-type combinators (whitespace, "
            f"'~' or ':has()') in one selector: at most {MAX_DESCENDANT_COMBINATORS} besides "
            "a leading html or body (matching costs depth^(n+1) on deeply nested pages); "
            f"{_equivalent(selector)}"
        )


def _located(selector: str, exc: Exception) -> InvalidRuleError:
    """The parse error with where it is: the longest start of the selector that parses
    (lexbor says only "Can't parse CSS selector")."""
    good = 0
    for end in range(len(selector), 0, -1):
        try:
            LexborHTMLParser("<p></p>").css(selector[:end])
        except Exception:
            continue
        good = end
        break
    where = (
        f"at character {good + 1} ({selector[good : good + 20]!r}, after {selector[:good]!r})"
        if good
        else "from its first character"
    )
    return InvalidRuleError(f"invalid CSS selector {selector!r}: cannot be parsed {where}: {exc}")


#: a leading step every element of a page is inside (html, body, :root) and its combinator
_ROOT_STEP = re.compile(r"^\s*(?:html|body|:root)(?:\s*>\s*|\s+)(?=\S)", re.IGNORECASE)


def without_root_steps(selector: str) -> str:
    """``selector`` without the leading ``html``, ``body`` or ``:root`` steps of each of its
    selectors: their combinator costs nothing (every element is inside them, so the ancestor
    search succeeds at once and never backtracks: ``body x div`` takes what ``x div`` takes,
    0.18 s on 1,900 nested divs). Only for counting combinators; the selector runs as given."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(selector):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    out = []
    for part in parts:
        while (m := _ROOT_STEP.match(part)) is not None:
            part = part[m.end() :]
        out.append(part)
    return ",".join(out)


def _equivalent(selector: str) -> str:
    """A suggestion that stays within the limit: the steps joined by '>' but the last (when
    each is a direct child of the one before, it selects the same), or the last two steps
    (a superset: any p in a div, wherever that div is)."""
    steps = without_root_steps(selector).split()
    plain = (
        len(steps) > 2
        and "," not in selector
        and not any(c in step for step in steps for c in "~+>()[\"'")
    )
    if not plain:
        return "use '>' (a direct child) or '+' where you can: they cost nothing"
    child = " > ".join(steps[:-1]) + " " + steps[-1]
    return (
        f"write {child!r} if each step is a direct child of the one before, or "
        f"{' '.join(steps[-2:])!r} (the last two steps: any of them, wherever it is)"
    )


def descendant_combinators(selector: str) -> list[int]:
    """Per selector of the top-level list: its descendant (whitespace) and general-sibling
    (``~``) combinators, and ``:has(`` not followed by ``>`` or ``+``, wherever they stand
    (inside ``:is()``, ``:not()`` too: counted, to be safe). Strings and ``[...]`` skipped."""
    counts = [0]
    i, n = 0, len(selector)
    prev = ""  # the last significant character outside strings and brackets
    while i < n:
        c = selector[i]
        if c == "\\":
            i += 2
            prev = "a"
            continue
        if c in "\"'":
            end = selector.find(c, i + 1)
            i = n if end < 0 else end + 1
            prev = "a"
            continue
        if c == "[":
            end = selector.find("]", i + 1)
            i = n if end < 0 else end + 1
            prev = "]"
            continue
        if c in " \t\n\r\f":
            j = i
            while j < n and selector[j] in " \t\n\r\f":
                j += 1
            if prev and prev not in "(,>+~" and j < n and selector[j] not in "),>+~":
                counts[-1] += 1
            i = j
            continue
        if c == "~":
            counts[-1] += 1
        elif c == "," and selector.count("(", 0, i) == selector.count(")", 0, i):
            counts.append(0)
        elif c == ":" and selector[i : i + 5].lower() == ":has(":
            rest = selector[i + 5 :].lstrip()
            if not rest.startswith((">", "+")):
                counts[-1] += 1
        prev = c
        i += 1
    return counts


@lru_cache(maxsize=1024)
def compiled_patterns(patterns: tuple[str, ...]) -> tuple[Any, ...]:
    """The patterns compiled by RE2 for UTF-8 bytes (``InvalidRuleError`` if one cannot be)."""
    out = []
    for pattern in patterns:
        if len(pattern) > MAX_PATTERN_CHARS:
            raise InvalidRuleError(
                f"ignore pattern of {len(pattern)} characters: at most {MAX_PATTERN_CHARS}"
            )
        if not pattern:
            raise InvalidRuleError("empty ignore pattern")
        try:
            compiled = re2.compile(pattern.encode("utf-8", "surrogatepass"), _RE2_OPTIONS)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            raise InvalidRuleError(
                f"invalid ignore pattern {pattern!r} (RE2 syntax, linear-time): {reason}"
            ) from None
        if compiled.fullmatch(b"") is not None:  # it would put a space between every byte
            raise InvalidRuleError(f"ignore pattern {pattern!r} matches the empty text")
        out.append(compiled)
    return tuple(out)


def remove_patterns(data: bytes, patterns: Sequence[Any], deadline: float) -> bytes:
    """``data`` with every match of every pattern replaced by a space, in order; raises
    ``BudgetExceededError`` once ``clock()`` passes ``deadline``.

    Calls the compiled RE2 object's ``Match`` directly: 3.4 us per match against 8.6 us through
    the wrapper's ``finditer`` (250,000 matches in 2 MB: 0.86 s; Python's ``re.sub``: 0.14 s,
    the price of linear time). Patterns never match the empty text (refused), so every match
    moves on."""
    n = len(data)
    for pattern in patterns:
        match_at = pattern._regexp.Match
        pieces: list[bytes] = []
        last = count = 0
        while True:
            start, end = match_at(_UNANCHORED, data, last, n)[0]
            if start < 0:
                break
            pieces.append(data[last:start])
            last = end
            count += 1
            if not count % _BUDGET_EVERY and clock() > deadline:
                raise BudgetExceededError("ignore patterns")
        if pieces:
            pieces.append(data[last:])
            data = b" ".join(pieces)
            n = len(data)
    return data


NO_RULES: Final = WatchRules()

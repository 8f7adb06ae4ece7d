"""The project's documentation stays true to the code.

The settings table in docs/settings.md and the metrics table in docs/metrics.md are
generated from ``crawler.settings.Settings`` and ``crawler.metrics.CrawlerMetrics``; these
tests fail when the committed tables differ from what the code gives today. Regenerate
them with::

    python -m tests.test_docs --write

A new setting needs a meaning: a ``Field(description=...)`` in settings.py (preferred) or
an entry in ``MEANINGS`` below. The other tests check that every CLI command has a section
in docs/cli.md, that every page of docs/ is linked from docs/README.md, that relative links
resolve, that nothing points at documents outside the repository, that no issue-number tag
is left (a reader cannot look one up), and that the README's test command runs what CI runs.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import typer.main

from crawler.cli import app
from crawler.fetch import ERROR_KINDS as FETCH_ERROR_KINDS
from crawler.metrics import CrawlerMetrics
from crawler.settings import ENV_PREFIX, Settings, auto_capacity

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
WRITE_COMMAND = "python -m tests.test_docs --write"

#: Meanings of the settings for the table, one line each; a setting not listed here shows
#: its Field description.
MEANINGS: dict[str, str] = {
    "database_url": "SQLAlchemy URL of the database: `sqlite:///PATH`, `postgresql://...`, "
    "`postgresql+psycopg://...` or `postgresql+asyncpg://...`",
    "poll_log_retention_days": "days of per-poll history kept in `poll_log` (pruned hourly)",
    "store_snapshots": "keep a compressed snapshot of the normalized text of every change",
    "snapshot_max_bytes": "longest snapshot kept, in bytes of normalized text (0 = none)",
    "scheduler": "the scheduler (see schedulers.md): `bayes`, `lakg`, `fpa`, `uniform`, "
    "`adaptive`, `estimator`, ...",
    "scheduler_params": 'the scheduler\'s parameters, a JSON object, e.g. `{"N": 64}`',
    "slot_seconds": "length of one slot in seconds",
    "seed": "random seed of the scheduler (unset: fresh randomness each start)",
    "metrics_port": "port of `/metrics`, `/healthz` and the change feed and API "
    "([api.md](api.md)) (0 = off)",
    "metrics_host": "address `/metrics` and `/healthz` listen on (`0.0.0.0` in a container)",
    "log_format": "`text` for people, `json` (one object per line) for log collectors",
    "log_level": "lowest level logged",
    "allow_private_addresses": "allow URLs that resolve to loopback or private addresses "
    "(link-local and cloud-metadata addresses stay refused)",
    "user_agent": "the User-Agent header and the robots.txt agent name; name yourself and "
    "a contact URL",
    "fetch_timeout_s": "total time allowed for one poll, redirects included",
    "fetch_max_body_bytes": "largest response body read; a larger one is a `too_large` error",
    "fetch_max_redirects": "redirects followed per poll (each hop is address- and robots-checked)",
    "fetch_retries": "retries of a transient failure within one poll, with back-off",
    "per_host_concurrency": "requests in flight at once to one host",
    "per_host_min_delay_s": "seconds between the starts of two requests to one host "
    "(robots.txt Crawl-delay raises it)",
    "respect_robots": "obey robots.txt",
    "capacity": "polls per slot (the knapsack's size); may be fractional",
    "normalize_workers": "with `fetch_workers = 0`: processes that parse changed pages "
    "(0 = one per CPU)",
}

_SETTINGS_MARK = "settings table"
_METRICS_MARK = "metrics table"
_ERRORS_MARK = "error kinds table"


# ----------------------------------------------------------------------------- generation


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    args = [a for a in get_args(annotation) if a is not type(None)]
    if args and get_origin(annotation) is not dict:
        optional = len(args) < len(get_args(annotation))
        return _type_name(args[0]) + (" or unset" if optional else "")
    if annotation is dict or get_origin(annotation) is dict:
        return "JSON object"
    return getattr(annotation, "__name__", str(annotation))


def _default(name: str, field: Any) -> str:
    if field.default_factory is not None:
        return f"`{field.default_factory()!r}`"
    value = field.default
    if name == "capacity" and value is None:
        return f"unset: 1% of the watched URLs, at least {auto_capacity(0):g}"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return f"`{int(value)}`" if abs(value) >= 1 else f"`{value}`"
    return f"`{value}`"


def _bounds(field: Any) -> str:
    parts = []
    for item in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            bound = getattr(item, attr, None)
            if bound is not None:
                parts.append(f"{sign} {bound:g}" if isinstance(bound, float) else f"{sign} {bound}")
    return ", ".join(parts)


def meaning_of(name: str, field: Any) -> str | None:
    """The one-line meaning of a setting: MEANINGS (for the docs' reader), else the Field's
    description (which is also the flag's help)."""
    return MEANINGS.get(name) or field.description


def settings_table() -> str:
    """The Markdown table of every setting, generated from the Settings model."""
    lines = [
        "| setting | environment variable | type | default | allowed | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            flag += f" / --no-{name.replace('_', '-')}"
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{name}` (`{flag}`)",
                    f"`{ENV_PREFIX}{name.upper()}`",
                    _type_name(field.annotation),
                    _cell(_default(name, field)),
                    _bounds(field),
                    _cell(meaning_of(name, field) or "**undocumented**"),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def metrics_table() -> str:
    """The Markdown table of every metric family a service exposes (process_* aside)."""
    metrics = CrawlerMetrics(
        scheduler="bayes", slot_seconds=10.0, process_metrics=False, version="X"
    )
    metrics.observe_poll("error", 0.1, error_kind="timeout", host="example.org")
    metrics.observe_slot(0.5)
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    suffix = {"counter": "_total", "info": "_info"}
    for family in sorted(metrics.registry.collect(), key=lambda f: f.name):
        labels: list[str] = []
        for sample in family.samples:
            for label in sample.labels:
                if label != "le" and label not in labels:
                    labels.append(label)
        exposed = family.name + suffix.get(family.type, "")
        lines.append(
            f"| `{exposed}` | {family.type} | "
            + (", ".join(f"`{label}`" for label in labels) or "-")
            + f" | {_cell(family.documentation)} |"
        )
    return "\n".join(lines)


def error_kinds_table() -> str:
    """The fetcher's error kinds (the ``kind`` label of ``crawler_poll_errors_total``)."""
    lines = ["| kind | meaning |", "|---|---|"]
    lines += [f"| `{kind}` | {_cell(text)} |" for kind, text in FETCH_ERROR_KINDS.items()]
    return "\n".join(lines)


def _block(page: Path, mark: str) -> tuple[str, str, str]:
    """(before, generated block, after) of a page; ValueError if the markers are missing."""
    text = page.read_text(encoding="utf-8")
    begin = f"<!-- begin generated {mark}: {WRITE_COMMAND} -->\n"
    end = f"<!-- end generated {mark} -->"
    head, found, rest = text.partition(begin)
    body, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise ValueError(f"{page} lacks the markers of the generated {mark}")
    return head + begin, body, end + tail


GENERATED = (
    (DOCS / "settings.md", _SETTINGS_MARK, settings_table),
    (DOCS / "metrics.md", _METRICS_MARK, metrics_table),
    (DOCS / "metrics.md", _ERRORS_MARK, error_kinds_table),
)


def write_generated() -> None:
    """Rewrite the generated tables in docs/ from the code."""
    for page, mark, render in GENERATED:
        head, _, tail = _block(page, mark)
        page.write_text(head + render() + "\n" + tail, encoding="utf-8")
        print(f"wrote {page.relative_to(ROOT)}")


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("page,mark,render", GENERATED, ids=["settings", "metrics", "errors"])
def test_generated_table_is_current(page: Path, mark: str, render: Any) -> None:
    _, body, _ = _block(page, mark)
    assert body == render() + "\n", f"{page.name} is out of date: run `{WRITE_COMMAND}`"


def test_every_setting_has_a_meaning_and_a_row() -> None:
    missing = [n for n, f in Settings.model_fields.items() if not meaning_of(n, f)]
    assert not missing, f"settings without a meaning (add Field(description=...)): {missing}"
    _, body, _ = _block(DOCS / "settings.md", _SETTINGS_MARK)
    for name in Settings.model_fields:
        assert f"`{ENV_PREFIX}{name.upper()}`" in body


def test_every_metric_is_in_the_table() -> None:
    _, body, _ = _block(DOCS / "metrics.md", _METRICS_MARK)
    registry = CrawlerMetrics(process_metrics=False).registry
    for family in registry.collect():
        assert f"`{family.name}" in body, family.name
    # the names operators and alerts rely on
    for name in (
        "crawler_polls_total",
        "crawler_poll_duration_seconds",
        "crawler_slots_total",
        "crawler_slot_overrun_total",
        "crawler_watched_urls",
        "crawler_capacity_polls_per_slot",
        "crawler_knapsack_fill_ratio",
        "crawler_hit_ratio",
    ):
        assert f"`{name}`" in body, name


def _commands(group: Any, prefix: str = "") -> list[str]:
    """Every leaf command of a (Typer's own click) group, sub-groups as "db upgrade"."""
    found = []
    for name, command in sorted(group.commands.items()):
        full = f"{prefix}{name}"
        if hasattr(command, "commands"):
            found += _commands(command, full + " ")
        else:
            found.append(full)
    return found


def test_every_cli_command_has_a_section() -> None:
    commands = _commands(typer.main.get_command(app))
    assert {"run", "add", "remove", "list", "show", "stats", "db upgrade", "demo"} <= set(commands)
    headings = set(re.findall(r"^#+ `crawler ([a-z -]+?)`", (DOCS / "cli.md").read_text(), re.M))
    missing = [c for c in commands if c not in headings]
    assert not missing, f"docs/cli.md has no '## `crawler NAME`' section for {missing}"


def test_every_page_is_in_the_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    assert pages
    missing = [p for p in pages if f"]({p})" not in index]
    assert not missing, f"docs/README.md does not link {missing}"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize(
    "page",
    [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted(DOCS.glob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name}: links to missing files {broken}"


def test_nothing_points_outside_the_repository() -> None:
    # The names are assembled so that this file does not match itself.
    outside = [n + ".md" for n in ("ALGORITHMS", "CONTRACTS", "DESIGN")] + ["../" + "shared"]
    places = [ROOT / "README.md", ROOT / "ARCHITECTURE.md"]
    for folder in ("crawler", "tests", "benchmarks", "docs"):
        places += sorted((ROOT / folder).rglob("*.py")) + sorted((ROOT / folder).rglob("*.md"))
    hits = [
        f"{p.relative_to(ROOT)}: {name}"
        for p in places
        for name in outside
        if name in p.read_text(encoding="utf-8", errors="replace")
    ]
    assert not hits, hits


#: A tag pointing at the project's issue tracker: a reader of the project cannot look it
#: up, so the sentence says the reason or names the feature instead. Also across a line
#: break inside a comment. (This pattern's own text does not match it.)
_ISSUE_TAG = re.compile(r"\bissues?[\s#]*[0-9]+", re.IGNORECASE)
_TAGGED_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".json", ".sh", ".mako", ".toml", ".ini"}


def _tagged_places() -> list[Path]:
    places = [ROOT / name for name in ("README.md", "ARCHITECTURE.md", ".importlinter")]
    places += [ROOT / name for name in ("docker-compose.yml", ".env.example", "pyproject.toml")]
    for folder in ("crawler", "tests", "benchmarks", "docs", "deploy"):
        places += sorted(
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and p.suffix in _TAGGED_SUFFIXES and "__pycache__" not in p.parts
        )
    return [p for p in places if p.exists()]


def test_no_issue_number_tags() -> None:
    hits = []
    for place in _tagged_places():
        name = place.relative_to(ROOT).as_posix()
        text = place.read_text(encoding="utf-8", errors="replace")
        hits += [
            f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for m in _ISSUE_TAG.finditer(text)
        ]
    assert not hits, (
        "issue-number tags found; say the reason or name the feature in the sentence "
        f"instead (the history lives in git): {hits}"
    )


def _readme_test_command() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- test command -->\n```bash\n(.+?)\n```", text, re.S)
    assert match, "README.md lacks the block after <!-- test command -->"
    return [part.strip() for part in match.group(1).split("&&")]


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = {line.strip() for line in ci.splitlines()}
    for step in _readme_test_command():
        if step.startswith(("python3 -m venv", ". .venv/bin/activate", "pip install")):
            continue  # CI's own install lines differ only by --quiet and --upgrade pip
        assert step in ci_lines, f"the README's test command runs {step!r}; .ci/run does not"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_generated()
    else:
        print(f"usage: {WRITE_COMMAND}")
        sys.exit(2)

"""Shared helpers of the deploy tests: the repository root, YAML/JSON loading, the
.dockerignore build context, and tools that must be present (never skipped)."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
INSTALL_TOOLS = ".ci/install-tools"


def load_yaml(rel: str) -> Any:
    return yaml.safe_load((REPO / rel).read_text())


def load_json(rel: str) -> Any:
    return json.loads((REPO / rel).read_text())


def require_tool(name: str) -> str:
    """The path of a command the test needs; a missing one fails the test loudly."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name!r} is not installed: run `bash {INSTALL_TOOLS}` (apt-get install prometheus) "
            "first; these deploy tests are never skipped",
            pytrace=False,
        )
    return path


def dockerignore_patterns() -> list[tuple[bool, str]]:
    """(negated, pattern) pairs of .dockerignore, in order."""
    out: list[tuple[bool, str]] = []
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        pat = line[1:].strip() if neg else line
        out.append((neg, pat.strip("/")))
    return out


def _match(pattern: str, rel: str) -> bool:
    """Docker's rule: a pattern matches a path or any of its parent directories.
    ``**`` matches any number of directories (fnmatch's ``*`` already crosses ``/``)."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    pat = pattern.replace("**/", "*/").replace("/**", "/*")
    return any(
        fnmatch.fnmatchcase(c, pattern)
        or fnmatch.fnmatchcase(c, pat)
        or (pattern.startswith("**/") and fnmatch.fnmatchcase(c.split("/")[-1], pattern[3:]))
        for c in candidates
    )


def in_build_context(rel: str) -> bool:
    """Whether .dockerignore lets ``rel`` (a path relative to the repo) into the context."""
    included = True
    for neg, pat in dockerignore_patterns():
        if _match(pat, rel):
            included = neg
    return included


def build_context_files() -> list[str]:
    """The tracked-or-present files of the repository that the build context would hold."""
    skip_dirs = {".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__"}
    out = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in skip_dirs]
        for name in files:
            rel = (Path(root) / name).relative_to(REPO).as_posix()
            if in_build_context(rel):
                out.append(rel)
    return sorted(out)


def copy_build_context(dest: Path) -> None:
    for rel in build_context_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, target)
